"""A prediction of the output (OpenAI's Predicted Outputs): where the output follows it, its next
tokens are drafted at no draft decode; where the output leaves it, the place is found again. The
output is the target's whatever the prediction holds: greedy, keyed and under a grammar it is plain
decoding's, sampled it follows the target's distribution (chi-square, with a control that fails)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import specllama
from test_sampling_end_to_end import SETTINGS, _dist_after, _pvalue, pvalue_or_zero

PROMPT = "the cat is on the"
N_TOKENS = 90


def _plain(dec, n=N_TOKENS, **kw):
    return dec.generate(PROMPT, max_tokens=n, temperature=0, speculative=False, ignore_eos=True, **kw)


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("draft", [False, True])
def test_greedy_output_is_plain_decodings_whatever_the_prediction_holds(tiny, draft, adaptive):
    """The plain output as the prediction is drafted whole and kept; a prediction with text inserted
    in the middle, or text cut out of it, is found again after the edit (more of it is kept than
    comes before the edit); an unrelated one is never followed. Each time the output is plain
    decoding's."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q if draft else None, n_ctx=512) as dec:
        plain = _plain(dec).tokens
        junk = dec.tokenize(" zebra quantum violin", add_special=False) * 3
        cases = {"exact": plain, "inserted": plain[:30] + junk + plain[30:],
                 "cut": plain[:30] + plain[45:], "unrelated": junk * 4}
        drafter = "auto" if draft else "lookup"
        for name, prediction in cases.items():
            out = dec.generate(PROMPT, max_tokens=N_TOKENS, temperature=0, ignore_eos=True, drafter=drafter,
                               adaptive=adaptive, prediction=prediction)
            s = out.stats
            assert out.tokens == plain, name
            assert s.drafter.endswith("+prediction"), name
            assert 0 <= s.n_prediction_accepted <= s.n_prediction_drafted <= s.n_drafted, name
            if name == "exact":
                assert s.n_prediction_drafted == s.n_prediction_accepted >= N_TOKENS - 2 * s.n_steps
            elif name == "unrelated":
                assert s.n_prediction_drafted == 0
            else:  # (30 tokens before the edit: the rest is kept only where the place is found again)
                assert s.n_prediction_accepted >= 45, name
                assert s.n_prediction_drafted > s.n_prediction_accepted, name


def test_a_prediction_given_as_text_is_its_plain_tokens_and_plain_decoding_ignores_it(tiny):
    """Text is tokenized as plain text: no BOS, special tokens not parsed; it then drafts as those ids."""
    kw = dict(max_tokens=N_TOKENS, temperature=0, ignore_eos=True, adaptive=False, record_steps=True)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        plain = _plain(dec)
        text = "</s>" + dec.detokenize(plain.tokens)
        ids = dec.tokenize(text, add_special=False, parse_special=False)
        assert dec.options(prediction=text).prediction == ids
        assert ids not in (dec.tokenize(text), dec.tokenize(text, add_special=False))
        runs = [dec.generate(PROMPT, prediction=prediction, **kw) for prediction in (text, ids)]
        off = dec.generate(PROMPT, prediction=text, speculative=False, **kw)
    traces = [[(t.n_model, t.n_drafted, t.n_accepted) for t in r.stats.steps] for r in runs]
    assert runs[0].tokens == runs[1].tokens == plain.tokens and traces[0] == traces[1]
    assert runs[0].stats.n_prediction_drafted > 0
    assert off.tokens == plain.tokens and off.stats.drafter == "none" and off.stats.n_drafted == 0


def test_keyed_sampling_with_a_prediction_is_plain_decodings_sample(tiny):
    """With a seed the draws are keyed by position: the reply is plain decoding's with that seed,
    whether the prediction is what it draws or not."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        kept = 0
        for seed in range(6):
            kw = dict(max_tokens=60, temperature=0.8, seed=seed, ignore_eos=True)
            plain = dec.generate(PROMPT, speculative=False, **kw)
            other = dec.generate(PROMPT, speculative=False, **dict(kw, seed=seed + 100))
            for prediction in (plain.tokens, other.tokens):
                out = dec.generate(PROMPT, prediction=prediction, **kw)
                assert out.tokens == plain.tokens and out.stats.acceptance == "keyed"
                kept += out.stats.n_prediction_accepted
    assert kept > 6 * 30


def test_a_prediction_under_a_grammar_drafts_only_what_the_grammar_allows(tiny):
    """The prediction's drafts stop at the first one the grammar rejects; the output is the
    constrained target's."""
    grammar = 'root ::= ("the" | " cat" | " is" | " on" | " hot" | " word" | " and")+'
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        plain = dec.generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True, grammar=grammar,
                             speculative=False)
        for prediction in (plain.tokens, plain.tokens[:10] + dec.tokenize(" zebra", add_special=False) + plain.tokens[10:]):
            out = dec.generate(PROMPT, max_tokens=40, temperature=0, ignore_eos=True, grammar=grammar,
                               prediction=prediction, drafter="lookup", adaptive=False)
            assert out.tokens == plain.tokens
            assert out.stats.n_prediction_accepted >= 20


def test_a_slot_drafts_its_request_s_prediction(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        plain = _plain(dec)
        slot = dec.slots(2)[1]
        out = slot.generate(PROMPT, max_tokens=N_TOKENS, temperature=0, ignore_eos=True, prediction=plain.tokens)
    assert out.tokens == plain.tokens
    assert out.stats.n_prediction_accepted > N_TOKENS // 2


@pytest.mark.parametrize("draft", ["same", "close"])
def test_a_prediction_s_steps_do_not_teach_the_adaptive_rule(tiny, draft):
    """The prediction's free, kept drafts are the request's, not the pair's: at given prices a
    generation after one whose prediction drafted everything drafts as it does after a plain one of
    the same text (were those steps to count in the rule's long-run rate, the model's drafts would
    look dear next to them and the next generation would draft less)."""
    prices = specllama.StepPrices(draft_ms=0.3, verify_ms=1.0, verify_token_ms=0.05)
    kw = dict(max_tokens=N_TOKENS, temperature=0, ignore_eos=True, prices=prices)
    steps = {}
    for first in ("prediction", "plain"):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q if draft == "same" else tiny.draft_q,
                                          n_ctx=512) as dec:
            plain = dec.generate(PROMPT, speculative=False, **kw)
            if first == "prediction":
                out = dec.generate(PROMPT, prediction=plain.tokens, **kw)
                assert out.tokens == plain.tokens and out.stats.n_prediction_accepted > N_TOKENS - 2 * out.stats.n_steps
            else:
                dec.generate(PROMPT, speculative=False, **kw)
            steps[first] = [(t.n_model, t.n_accepted) for t in dec.generate("she was", record_steps=True, **kw).stats.steps]
    assert steps["prediction"] == steps["plain"]
    assert sum(n for n, _ in steps["plain"]) > N_TOKENS // 3


def test_bad_predictions_are_refused(tiny, slow):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        with pytest.raises(ValueError, match="prediction token id 99999 outside the vocabulary"):
            dec.generate(PROMPT, prediction=[1, 99999])
        with pytest.raises(ValueError, match="draft_ahead is not available with a prediction"):
            dec.generate(PROMPT, prediction=[1, 2], draft_ahead=2, adaptive=False)
        with pytest.raises(TypeError, match="prediction"):
            dec.generate(PROMPT, prediction=3.5)
        assert dec.generate(PROMPT, max_tokens=4, prediction=[]).stats.drafter == "model+lookup"
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=256) as dec:
        with pytest.raises(ValueError, match="a prediction drafts in mode 'si' only"):
            dec.generate(PROMPT, prediction=[1, 2], mode="dsi")


@pytest.mark.slow
def test_sampling_with_a_prediction_follows_the_target(tiny):
    """Seeded generations of 3 tokens (rejection rule, n_draft 2): the first step is plain, and where
    its token is the prediction's first, the second is the prediction's drafted token, kept or
    corrected. The second token after that first follows the target's p2; the same p2 with the
    drafted token's chance doubled (a rule that keeps the prediction too often) is rejected."""
    target = specllama.Model(tiny.target)
    prompt = target.tokenize(PROMPT)
    p1 = _dist_after(target, prompt)
    a = int(np.argmax(p1))
    p2 = _dist_after(target, prompt + [a])
    b = int(np.argsort(p2)[-2])  # the second likeliest: drafted, and often corrected
    firsts, seconds, n_drafted, n_kept = [], [], 0, 0
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=128) as dec:
        for seed in range(2500):
            r = dec.generate(prompt, max_tokens=3, n_draft=2, seed=seed, ignore_eos=True, acceptance="rejection",
                             prediction=[a, b, b], **SETTINGS)
            firsts.append(r.tokens[0])
            seconds.append(r.tokens[1])
            n_drafted += r.stats.n_prediction_drafted
            n_kept += r.stats.n_prediction_accepted
    firsts, seconds = np.array(firsts), np.array(seconds)
    after_a = seconds[firsts == a]
    assert n_drafted >= len(after_a) and n_drafted - n_kept > len(after_a) // 3
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(after_a, p2) > 1e-4
    biased = p2.copy()
    biased[b] *= 2
    assert pvalue_or_zero(after_a, biased / biased.sum()) < 1e-6


@pytest.mark.default_pair
def test_the_server_takes_openai_s_prediction_and_reports_it_in_usage(default_pair):
    """OpenAI's prediction field, as the openai client sends it, on the default pair (a real
    tokenizer, so that a reply's text reads back as its tokens): the reply is the one without it,
    whole and streamed, chat and completions; usage says how many of its tokens were kept and how
    many rejected; a malformed prediction is a 400 naming the field."""
    from openai import BadRequestError, OpenAI
    from test_server import running

    target, draft = default_pair
    with running(["-m", target, "-d", draft, "-c", "1024", "-np", "1", "--alias", "m"]) as server:
        client = OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)
        messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
        kw = dict(model="m", messages=messages, temperature=0, max_tokens=64)
        plain = client.chat.completions.create(**kw, extra_body={"speculative": False})
        text = plain.choices[0].message.content
        assert plain.usage.completion_tokens_details is None  # (no prediction: no details)
        edited = text.replace("numbers", "values", 1)
        for prediction, kept_at_least in ((text, 48), (edited, 24), ([{"type": "text", "text": text[:20]},
                                                                      {"type": "text", "text": text[20:]}], 48)):
            got = client.chat.completions.create(**kw, prediction={"type": "content", "content": prediction})
            assert got.choices[0].message.content == text
            details = got.usage.completion_tokens_details
            assert details.accepted_prediction_tokens >= kept_at_least
            timings = got.model_extra["timings"]
            assert details.accepted_prediction_tokens + details.rejected_prediction_tokens <= timings["draft_n"]
        assert details.rejected_prediction_tokens == 0
        chunks = list(client.chat.completions.create(**kw, prediction={"type": "content", "content": edited},
                                                     stream=True, stream_options={"include_usage": True}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
        assert chunks[-1].usage.completion_tokens_details.accepted_prediction_tokens >= 24
        comp = client.completions.create(model="m", prompt="def add(a, b):", temperature=0, max_tokens=32)
        again = client.completions.create(model="m", prompt="def add(a, b):", temperature=0, max_tokens=32,
                                          extra_body={"prediction": {"type": "content", "content": comp.choices[0].text}})
        assert again.choices[0].text == comp.choices[0].text
        assert again.usage.completion_tokens_details.accepted_prediction_tokens >= 24
        for bad, code in (({"type": "text", "content": text}, "invalid_value"), ({"type": "content", "content": 3},
                                                                                   "invalid_type")):
            with pytest.raises(BadRequestError) as err:
                client.chat.completions.create(**kw, prediction=bad)
            assert err.value.body["code"] == code and err.value.body["param"] == "prediction"
        assert server.health()["status"] == "ok"


def test_the_command_line_drafts_a_prediction_file(tiny, tmp_path):
    from click.testing import CliRunner

    from specllama.cli import main

    runner = CliRunner()
    args = ["generate", PROMPT, "-m", tiny.target_q, "-d", tiny.draft_q, "-c", "512", "-n", "40", "--temp", "0",
            "--fixed-draft"]
    r = runner.invoke(main, [*args, "--no-draft", "--json"])
    assert r.exit_code == 0, r.output
    plain = json.loads(r.stdout)
    path = tmp_path / "prediction.txt"
    path.write_text(plain["text"], encoding="utf-8")
    r = runner.invoke(main, [*args, "--json", "--prediction-file", str(path)])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["tokens"] == plain["tokens"] and got["stats"]["n_prediction_drafted"] > 0
    r = runner.invoke(main, [*args, "--prediction-file", str(path)])
    assert r.exit_code == 0 and re.search(r"\(prediction: \d+/\d+\)", r.stderr), r.output
    r = runner.invoke(main, [*args, "--prediction-file", str(tmp_path / "missing.txt")])
    assert r.exit_code == 2 and "cannot read" in r.stderr and "missing.txt" in r.stderr
    path.write_bytes(b"caf\xe9")
    r = runner.invoke(main, [*args, "--prediction-file", str(path)])
    assert r.exit_code != 0 and "is not valid UTF-8" in r.stderr and "Traceback" not in r.output
