"""Recurrent (Mamba) and hybrid (Jamba: Mamba and attention layers) models as target and as
draft: rollback by checkpoint, output unchanged.

A recurrent state cannot drop a rejected draft's tail. Before a verification (and before a draft
model's draft decodes) the cache saves its state's recurrent part; when not every draft is kept it
restores that state and decodes the kept tokens again. The fixtures are tiny random models of each
architecture quantized to Q4_1, whose batched and one-token logits are bitwise equal (checked
here), so greedy speculative output must equal plain output token for token. Partners: the tiny llama models of
the same vocabulary.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import assert_ctrl_c_leaves_usable
from test_sampling_end_to_end import N, _pvalue, first_two_tokens, two_token_distributions
from tiny_models import jamba_weights, mamba_weights, perturbed, vocab, write_jamba, write_mamba

import specllama

PROMPTS = ["the cat is", "she was out with", "what some of the", "<|im_start|>user\nhi<|im_end|>\n"]
GREEDY = dict(temperature=0, ignore_eos=True)
ARCHS = {"mamba": (mamba_weights, write_mamba), "jamba": (jamba_weights, write_jamba)}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def rec(request, tiny, tmp_path_factory):
    """A target, a draft made from it by noise, and an unrelated model ("far") of one architecture."""
    weights_of, write = ARCHS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    toks = vocab()
    w = weights_of(len(toks), seed=11)
    ns = SimpleNamespace(arch=request.param)
    for name, weights in [("target", w), ("draft", perturbed(w, seed=12, noise=0.15)),
                          ("far", weights_of(len(toks), seed=13))]:
        f32 = write(d / f"{name}.gguf", toks, weights)
        setattr(ns, name, str(d / f"{name}_q4_1.gguf"))
        specllama.quantize(str(f32), getattr(ns, name), "q4_1")
    ns.llama_target, ns.llama_draft = tiny.target_q, tiny.draft_q
    return ns


def test_batched_and_one_token_logits_are_equal(rec):
    """The premise of the exact greedy comparisons below."""
    m = specllama.Model(rec.target)
    p = m.tokenize("the cat is on the hot word and")
    a, b = specllama.Context(m, n_ctx=128), specllama.Context(m, n_ctx=128)
    one = np.array([a.decode([t])[0] for t in p])
    assert np.array_equal(one, b.decode(p))


@pytest.mark.parametrize("checkpoint", [True, False])
def test_rollback_equals_a_fresh_context(rec, checkpoint):
    """After decoding n drafts and keeping k, the next logits equal those of a fresh context fed
    only the kept text: from a checkpoint, or (none taken) by decoding everything again."""
    m = specllama.Model(rec.target)
    ctx = specllama.Context(m, n_ctx=256)
    assert ctx.recurrent
    prompt = m.tokenize("the cat is on the")
    drafts = [100, 101, 102, 103, 104]
    for keep in (0, 2, 4):
        ctx.rollback(0)
        ctx.decode(prompt, all_logits=False)
        if checkpoint:
            ctx.checkpoint()
        ctx.decode(drafts)
        ctx.rollback(len(prompt) + keep)
        assert ctx.tokens == prompt + drafts[:keep]
        got = ctx.decode([200])[0]
        fresh = specllama.Context(m, n_ctx=256)
        fresh.decode(prompt + drafts[:keep], all_logits=False)
        assert np.array_equal(got, fresh.decode([200])[0]), keep
    # the negative control: the state after the drafts is not the kept text's
    ctx.rollback(0)
    ctx.decode(prompt + drafts, all_logits=False)
    fresh = specllama.Context(m, n_ctx=256)
    fresh.decode(prompt + drafts[:2], all_logits=False)
    assert not np.array_equal(ctx.decode([200])[0], fresh.decode([200])[0])


@pytest.mark.parametrize("pair", ["rec/rec", "rec/llama", "llama/rec"])
def test_greedy_output_is_the_targets(rec, pair):
    """A recurrent or hybrid target, draft, or both: greedy speculative output equals plain
    decoding at every draft length. The pair of one architecture has drafts both kept and
    corrected; the tiny llama models are unrelated to the others, so there every draft is
    corrected (a restore in every step)."""
    kind_t, kind_d = pair.split("/")
    target = rec.target if kind_t == "rec" else rec.llama_target
    draft = rec.draft if kind_d == "rec" else rec.llama_draft
    drafted = accepted = 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as dec:
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=60, speculative=False, **GREEDY)
            for n_draft in (1, 3, 6):
                r = dec.generate(prompt, max_tokens=60, n_draft=n_draft, drafter="model", adaptive=False, **GREEDY)
                assert r.tokens == plain.tokens, (prompt, n_draft)
                assert r.stats.rollback == "checkpoint"
                drafted += r.stats.n_drafted
                accepted += r.stats.n_accepted
            spec = dec.generate(prompt, max_tokens=60, **GREEDY)  # adaptive, with prompt lookup
            assert spec.tokens == plain.tokens
    assert drafted - accepted >= 30 and (accepted >= 30 or pair != "rec/rec"), (drafted, accepted)


def test_cli_names_the_rollback(rec):
    from click.testing import CliRunner

    from specllama.cli import main

    r = CliRunner().invoke(main, ["generate", "the cat", "-m", rec.target, "-d", rec.draft, "-n", "20",
                                  "--temp", "0", "--n-draft", "3", "--fixed-draft"])
    assert r.exit_code == 0, r.output
    assert "recurrent memory: rejected drafts undone from checkpoints" in r.stderr


def test_llama_pair_keeps_kv_rollback(rec):
    with specllama.SpeculativeDecoder(rec.llama_target, rec.llama_draft) as dec:
        r = dec.generate("the cat", max_tokens=8, **GREEDY)
        assert r.stats.rollback == "kv" and r.stats.t_rollback_ms == 0


def test_chat_turns_reuse_the_prompt(rec):
    """Turn by turn, the history already in the recurrent state is not processed again, and the
    replies equal plain decoding's."""
    from specllama.chat import ChatSession

    turns = ["the cat is on", "and she was", "what of it"]
    with specllama.SpeculativeDecoder(rec.target, rec.draft, n_ctx=1024) as dec:
        session = ChatSession(dec)
        replies = []
        for t in turns:
            chunks = list(session.send(t, max_tokens=30, temperature=0, n_draft=3))
            replies.append("".join(c.text for c in chunks))
        assert chunks[-1].stats.n_prompt_cached > 0
    with specllama.SpeculativeDecoder(rec.target, n_ctx=1024) as plain_dec:
        plain = ChatSession(plain_dec)
        assert replies == ["".join(c.text for c in plain.send(t, max_tokens=30, temperature=0)) for t in turns]


def test_a_retry_comes_back_to_the_prompts_checkpoint(rec):
    """The same prompt again (a retried reply): both models go back to the checkpoint kept where
    the prompt ended, so the retry decodes again only what its steps' rollbacks do, as the first
    did; a Context without that checkpoint decodes the prompt again."""
    prompt = "the cat is on the hot word and she was out with what some of the"
    kw = dict(GREEDY, max_tokens=40, n_draft=3, drafter="model", adaptive=False)
    with specllama.SpeculativeDecoder(rec.target, rec.draft, n_ctx=512) as dec:
        first = dec.generate(prompt, **kw)
        retry = dec.generate(prompt, **kw)
        assert retry.tokens == first.tokens
        assert retry.stats.n_prompt_cached == len(dec.tokenize(prompt)) - 1
        assert retry.stats.n_redecoded == first.stats.n_redecoded > 0
    m = specllama.Model(rec.target)
    ctx = specllama.Context(m, n_ctx=256)
    p = m.tokenize(prompt)
    ctx.decode(p, all_logits=False)
    ctx.checkpoint()
    ctx.decode(m.tokenize(" the cat", add_special=False), all_logits=False)
    ctx.checkpoint()  # replaces the one before
    ctx.rollback(len(p) - 1)
    assert ctx.n_redecoded == len(p) - 1


@pytest.mark.slow
def test_sampling_follows_the_targets_distribution(rec):
    """A recurrent target and a recurrent draft that disagrees often, at temperature 1: the first
    drafted token follows the target's marginal (chi-square)."""
    prompt, p1, p2, q1 = two_token_distributions(rec.target, rec.far, "the cat is on the")
    firsts, seconds, n_rejected = first_two_tokens(rec.target, rec.far, prompt, drafter="model")
    assert n_rejected > N // 4
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    with pytest.raises(AssertionError):
        assert _pvalue(firsts, q1) > 1e-4


def test_ctrl_c_leaves_the_decoder_usable(rec):
    assert_ctrl_c_leaves_usable(rec.target, rec.draft, 4096, PROMPTS)


def test_what_does_not_run_them_yet_says_so(rec):
    with specllama.SpeculativeDecoder(rec.target, rec.draft) as dec:
        with pytest.raises(ValueError, match="mode 'dsi' does not run recurrent or hybrid models yet"):
            dec.generate("the cat", max_tokens=4, mode="dsi")
        with pytest.raises(ValueError, match="slots .* do not run recurrent or hybrid models yet"):
            dec.slots(2)
        assert dec.generate("the cat", max_tokens=4, **GREEDY).tokens  # still usable


def test_server_with_a_recurrent_pair(rec):
    """`specllama serve` (one slot) on the recurrent pair: greedy replies equal plain decoding's;
    more slots are refused at start with a one-line error."""
    from test_server import CHAT, ROOT, running

    body = {"messages": [{"role": "user", "content": "the cat is on"}], "temperature": 0, "max_tokens": 24}
    with specllama.SpeculativeDecoder(rec.target, n_ctx=512) as dec:
        want = dec.create_chat_completion(body["messages"], temperature=0, max_tokens=24)
    with running(["-m", rec.target, "-d", rec.draft, "-c", "512"]) as server:
        r = server.post(CHAT, body).json()
        assert r["choices"][0]["message"]["content"] == want["choices"][0]["message"]["content"]
        assert r["timings"]["draft_n"] > 0
    out = subprocess.run([sys.executable, "-m", "specllama", "serve", "-m", rec.target, "-np", "2", "--port", "0"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                         cwd=tempfile.gettempdir())  # not the repository's root: its source tree has no extension
    assert out.returncode == 1 and "do not run recurrent or hybrid models yet" in out.stderr
    assert "Traceback" not in out.stderr
