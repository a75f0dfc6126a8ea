"""Drafts with another vocabulary (token-level intersection): the output stays the target's.

The target is the tiny Q4_1 target (batch invariant, so greedy speculative output must equal plain
output token for token). The drafts are the tiny target's weights with noise, moved to other
vocabularies built over the same text:
* other:   the words reordered, a quarter of them missing (spelled from letters), three words of
           its own; most ids differ
* subset:  no words at all, only specials, letters and bytes
* no_bos:  `other` whose tokenizer adds no BOS
* new_eos: `other` whose end-of-sequence token is another token with other text
* ascii:   `other` without byte tokens above 0x7F: the target's bytes of other UTF-8 characters
           (which the tiny target emits often) reach it as nothing
* twin:    the target itself (its Q4_1 weights) with every token kept and the words in reverse
           order: where the target emits no byte token that a letter duplicates, the two read the
           same text token for token and their logits agree
and a draft that shares almost nothing with the target, which is refused.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import assert_ctrl_c_leaves_usable
from test_sampling_end_to_end import N, SETTINGS, _pvalue, first_two_tokens, two_token_distributions
from tiny_models import other_vocab, perturbed, random_weights, reindexed, vocab, write_model

import specllama

PROMPTS = ["the cat is", "she was out with", "what some of the", "<|im_start|>user\nhi<|im_end|>\n"]
GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def cross(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("cross")
    toks = vocab()
    close = perturbed(random_weights(len(toks), seed=1), seed=2, noise=0.15)  # the tiny draft's weights
    ov = other_vocab(toks)
    sub = toks[:5] + [t for t in toks[5:] if not (t.startswith("\u2581") and len(t) > 1)]
    eos = ov[:2] + ["<|endoftext|>"] + ov[3:]
    ns = SimpleNamespace(target=tiny.target_q, tokens=toks, other_tokens=ov)
    ns.other = str(write_model(d / "other.gguf", ov, reindexed(close, toks, ov, seed=7)))
    ns.subset = str(write_model(d / "subset.gguf", sub, reindexed(close, toks, sub, seed=7)))
    ns.no_bos = str(write_model(d / "no_bos.gguf", ov, reindexed(close, toks, ov, seed=7), add_bos=False))
    ns.new_eos = str(write_model(d / "new_eos.gguf", eos, reindexed(close, toks, eos, seed=7)))
    ascii_ = [t for t in ov if not (t.startswith("<0x") and len(t) == 6 and int(t[3:5], 16) >= 0x80)]
    ns.ascii = str(write_model(d / "ascii.gguf", ascii_, reindexed(close, toks, ascii_, seed=7)))
    # the target's weights with much noise in the other vocabulary, with 20 more words of its own
    # that it favours: the rejection rule corrects many of its drafts, and the tokens the target
    # lacks hold much of its probability (which q' must leave out and renormalize)
    ns.far_tokens = ov + [f"\u2581zz{i}" for i in range(20)]
    far = reindexed(perturbed(random_weights(len(toks), seed=1), seed=3, noise=0.6), toks, ns.far_tokens, seed=8)
    far["output.weight"][len(ov):] *= 3.0
    ns.far = str(write_model(d / "far.gguf", ns.far_tokens, far))
    ns.alien = tiny.alien_vocab
    words = [t for t in toks[5:] if t.startswith("\u2581") and len(t) > 1]
    twin_tokens = toks[:5] + words[::-1] + [t for t in toks[5:] if t not in words]
    twin = write_model(d / "twin.gguf", twin_tokens, reindexed(random_weights(len(toks), seed=1), toks, twin_tokens, 7))
    ns.twin = str(d / "twin_q4_1.gguf")
    specllama.quantize(str(twin), ns.twin, "q4_1")
    return ns


def _keys(tokens):
    """What the pairing compares: each token's bytes, control tokens apart; one token per text
    (a byte token whose byte is also a text token's adds nothing); <unk> stands for no text."""
    def key(t):
        if t.startswith("<0x") and len(t) == 6:
            return b"T" + bytes([int(t[3:5], 16)])
        return (b"C" if t.startswith("<") else b"T") + t.replace("\u2581", " ").encode()
    return {key(t) for t in tokens[1:]}


def test_vocabularies_pair_by_text(tiny, cross):
    target = specllama.Model(cross.target)
    assert specllama.vocab_difference(target, specllama.Model(tiny.draft_q)) == ""
    assert "draft vocab has 320 tokens, target 327" in specllama.vocab_difference(target, specllama.Model(cross.other))
    with specllama.SpeculativeDecoder(cross.target, cross.other) as dec:
        cv = dec._native().cross_vocab
        shared = _keys(cross.tokens) & _keys(cross.other_tokens)
        assert cv["n_shared"] == len(shared) == len(_keys(cross.other_tokens)) - 3  # all but its own 3 words
        assert cv["draft_share"] == pytest.approx(len(shared) / len(_keys(cross.other_tokens)))
        assert not dec._native().shares_prefill
    with specllama.SpeculativeDecoder(cross.target, tiny.draft_q) as dec:
        assert dec._native().cross_vocab is None


@pytest.mark.parametrize("pair", ["other", "subset", "no_bos", "new_eos", "ascii"])
def test_greedy_output_is_the_targets(cross, pair):
    """Greedy speculative output equals plain greedy output, token for token, at every draft
    length, with drafts that the rejection rule both keeps and corrects."""
    drafted = accepted = 0
    with specllama.SpeculativeDecoder(cross.target, getattr(cross, pair), n_ctx=512) as dec:
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=80, speculative=False, **GREEDY)
            for n_draft in (1, 3, 6):
                r = dec.generate(prompt, max_tokens=80, n_draft=n_draft, drafter="model", adaptive=False, **GREEDY)
                assert r.tokens == plain.tokens, (prompt, n_draft)
                assert r.stats.vocab == "intersection" and r.stats.vocab_shared > 0.25
                drafted += r.stats.n_drafted
                accepted += r.stats.n_accepted
    assert accepted >= 50 and drafted - accepted >= 50, (drafted, accepted)  # both branches of the rule


def test_adaptive_lookup_and_stop_strings(cross):
    """The default drafter (the model, then prompt lookup) with the adaptive length, a stop
    string and a reply that goes on across calls (the caches keep their common prefix)."""
    n_stops = 0
    with specllama.SpeculativeDecoder(cross.target, cross.other, n_ctx=512) as dec:
        for text in PROMPTS:
            prompt = dec.target_model.tokenize(text)
            plain = dec.generate(prompt, max_tokens=60, speculative=False, **GREEDY)
            spec = dec.generate(prompt, max_tokens=60, **GREEDY)
            assert spec.tokens == plain.tokens and spec.text == plain.text
            words = re.findall(r"[a-z]{2,}", plain.text[5:])  # (the tiny model's text is mostly bytes)
            if words:
                stop = words[0]
                a = dec.generate(prompt, max_tokens=60, stop=[stop], speculative=False, **GREEDY)
                b = dec.generate(prompt, max_tokens=60, stop=[stop], n_draft=4, adaptive=False, **GREEDY)
                assert a.text == b.text and a.finish_reason == b.finish_reason == "stop"
                n_stops += 1
            more = dec.generate(prompt + plain.tokens[:20], max_tokens=30, n_draft=3, adaptive=False, **GREEDY)
            assert more.tokens == plain.tokens[20:50]
    assert n_stops >= 2


def test_slots_draft_across_vocabularies(cross):
    """Slots sharing their decodes (the server's) draft through the same pairing."""
    with specllama.SpeculativeDecoder(cross.target, cross.other, n_ctx=512) as dec:
        plain = [dec.generate(p, max_tokens=40, speculative=False, **GREEDY).tokens for p in PROMPTS[:2]]
        slots = dec.slots(2)
        for slot, prompt, want in zip(slots, PROMPTS, plain):
            r = slot.generate(prompt, max_tokens=40, n_draft=3, drafter="model", adaptive=False, **GREEDY)
            assert r.tokens == want and r.stats.n_drafted > 0


def _draft_to_target(tokens, draft_tokens):
    index = {t: i for i, t in enumerate(tokens)}
    return np.array([index.get(t, -1) for t in draft_tokens])


@pytest.mark.slow
def test_sampling_follows_the_targets_distribution(cross):
    """At temperature 1 with a draft that disagrees often: the first drafted token (the second
    emitted; the first step is plain) follows the target's marginal, by chi-square. The draft's
    own distribution, moved to target ids, is clearly rejected by the same test (its power)."""
    prompt, p1, p2, _ = two_token_distributions(cross.target, cross.target, "the cat is on the")
    draft = specllama.Model(cross.far)
    q1_draft = specllama.sampling_distribution(
        specllama.Context(draft, n_ctx=128).decode(draft.tokenize("the cat is on the"), all_logits=False)[-1],
        **SETTINGS)
    q1 = np.zeros_like(p1)
    d2t = _draft_to_target(cross.tokens, cross.far_tokens)
    assert q1_draft[d2t < 0].sum() > 0.3, "the draft's own tokens must matter for this test to mean anything"
    for d in np.flatnonzero(q1_draft):
        if d2t[d] >= 0:
            q1[d2t[d]] += q1_draft[d]
    firsts, seconds, n_rejected = first_two_tokens(cross.target, cross.far, prompt, drafter="model")
    assert n_rejected > N // 4, "the pair must disagree often for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    with pytest.raises(AssertionError):
        assert _pvalue(firsts, q1 / q1.sum()) > 1e-4


def test_a_draft_sharing_too_little_is_refused(cross):
    with pytest.raises(ValueError, match=r"the draft .*alien_vocab\.gguf shares \d+ tokens \(\d+\.\d% of its \d+\) with "
                                         r"the target .*; at least 25\.0% are needed"):
        specllama.SpeculativeDecoder(cross.target, cross.alien)


def test_dsi_needs_one_vocabulary(cross):
    with specllama.SpeculativeDecoder(cross.target, cross.other) as dec:
        with pytest.raises(ValueError, match="mode 'dsi' needs a draft with the target's vocabulary"):
            dec.generate("the cat", max_tokens=4, mode="dsi")
        assert dec.generate("the cat", max_tokens=4, **GREEDY).tokens  # still usable


def _token(text):
    return vocab().index(text)


# what the sampling may hold that names the target's tokens (the thinking budget's tags: two words)
TOKEN_LEVEL = {"a grammar": dict(grammar='root ::= ("the" | " cat" | " is" | " on" | " a" | " mat")+'),
               "logit_bias": dict(logit_bias={_token("\u2581the"): 3.0, _token("\u2581is"): -2.0}),
               "the repetition penalties": dict(repeat_penalty=1.5, presence_penalty=1.0, frequency_penalty=0.5),
               "a thinking budget": dict(thinking_budget=2, thinking_budget_opened=True,
                                         thinking_budget_start=[_token("\u2581the")],
                                         thinking_budget_ends=[[_token("\u2581was")]],
                                         thinking_budget_forced=[_token("\u2581on"), _token("\u2581was")]),
               "the infill sampler": dict(infill=True, top_k=40)}


@pytest.mark.parametrize("part", [None, *TOKEN_LEVEL])
def test_the_draft_model_drafts_under_grammars_and_controls(cross, part):
    """A grammar, logit bias, penalties, a thinking budget and the infill sampler name the target's
    tokens: a draft of another vocabulary drafts under them at the target's ids, so that the twin
    (the target itself, its words at other ids) proposes what the target emits and each of its
    drafts is kept, greedy and with keyed draws (which share their randomness with the target's at
    each position). Byte tokens that a letter duplicates and the end token are biased out, so that
    the two read the text token for token. The output is plain decoding's in every case."""
    bias = {t: -math.inf for t, text in enumerate(vocab()) if text == "</s>" or
            (text.startswith("<0x") and int(text[3:5], 16) < 0x80)}
    controls = dict(TOKEN_LEVEL.get(part, {}))
    controls["logit_bias"] = {**bias, **controls.get("logit_bias", {})}
    with specllama.SpeculativeDecoder(cross.target, cross.twin, n_ctx=512) as dec:
        assert dec.cross_vocab["target_share"] == 1.0
        for sampling in (dict(temperature=0), dict(temperature=0.9, seed=3)):
            drafted = kept = 0
            for prompt in PROMPTS[:3]:
                kw = dict(max_tokens=40, ignore_eos=True, **sampling, **controls)
                plain = dec.generate(prompt, speculative=False, **kw)
                r = dec.generate(prompt, drafter="model", n_draft=3, adaptive=False, **kw)
                assert r.tokens == plain.tokens, (prompt, sampling)
                assert r.stats.drafter == "model" and r.stats.vocab == "intersection"
                drafted += r.stats.n_drafted - r.stats.n_forced_drafted
                kept += r.stats.n_accepted - r.stats.n_forced_accepted
                auto = dec.generate(prompt, **kw)
                assert auto.tokens == plain.tokens and auto.stats.drafter == "model+lookup"
            assert drafted >= 60 and kept >= 0.95 * drafted, (sampling, drafted, kept)


@pytest.mark.slow
def test_sampling_under_a_grammar_and_controls_follows_the_controlled_target(cross):
    """At temperature 1 under the rejection rule, the far draft of another vocabulary drafting under
    a grammar, logit bias and every penalty (its q' at the target's ids, with each position's
    history): the first two tokens follow the constrained, controlled target, by chi-square.
    Negative controls: the target without the grammar, and without the controls."""
    from test_grammar import CHAIN, WORDS, _marginals
    from test_grammar import N as N_GRAMMAR
    from test_sampling_end_to_end import pvalue_or_zero

    controls = dict(logit_bias={_token("\u2581the"): 1.0}, repeat_penalty=1.3, repeat_last_n=8, presence_penalty=0.4,
                    frequency_penalty=0.3)
    prompt = specllama.Model(cross.target).tokenize("the cat")
    p1, p2 = _marginals(cross.target, prompt, gbnf=WORDS, controls=controls)
    firsts, seconds, n_rejected = first_two_tokens(cross.target, cross.far, prompt, CHAIN, N_GRAMMAR, grammar=WORDS,
                                                   drafter="model", **controls)
    assert n_rejected > N_GRAMMAR // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    assert pvalue_or_zero(seconds, _marginals(cross.target, prompt, constrained=False, controls=controls)[1]) < 1e-6
    assert pvalue_or_zero(seconds, _marginals(cross.target, prompt, gbnf=WORDS)[1]) < 1e-6


def test_a_server_with_a_draft_of_another_vocabulary_answers_json_and_tools(cross):
    """JSON mode, a JSON schema and a required tool call (grammars), penalties and logit bias, sent to
    a server whose draft has another vocabulary: each answered as with speculation off, the draft
    model drafting (asked for by name) and some of its drafts kept."""
    from test_server import CHAT, running

    msgs = [{"role": "user", "content": "the cat is on"}]
    schema = {"type": "object", "properties": {"word": {"type": "string", "maxLength": 8}}, "required": ["word"]}
    tool = {"type": "function", "function": {"name": "hot", "parameters": schema}}
    bodies = [{"messages": msgs, "response_format": {"type": "json_object"}},
              {"messages": msgs,
               "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}},
              {"messages": msgs, "tools": [tool], "tool_choice": "required"},
              {"messages": msgs, "presence_penalty": 0.5, "logit_bias": {"300": -100}}]
    drafted = accepted = 0
    with running(["-m", cross.target, "-d", cross.other, "-c", "512"]) as server:
        for body in bodies:
            body = dict(body, max_tokens=160, temperature=0)
            r = server.post(CHAT, dict(body, drafter="model"))
            plain = server.post(CHAT, dict(body, speculative=False))
            assert r.status_code == 200 and plain.status_code == 200, (body, r.text)
            got, want = r.json()["choices"][0]["message"], plain.json()["choices"][0]["message"]
            for call in (got.get("tool_calls") or []) + (want.get("tool_calls") or []):
                call.pop("id")
            assert got == want, body
            if "tools" in body:
                assert got["tool_calls"][0]["function"]["name"] == "hot"
                assert "word" in json.loads(got["tool_calls"][0]["function"]["arguments"])
            elif body.get("response_format", {}).get("type") == "json_schema":
                assert "word" in json.loads(got["content"])
            drafted += r.json()["timings"]["draft_n"]
            accepted += r.json()["timings"]["draft_n_accepted"]
    assert 0 < accepted < drafted


def test_ctrl_c_leaves_the_decoder_usable(cross):
    assert_ctrl_c_leaves_usable(cross.target, cross.other, 512, PROMPTS)


@pytest.fixture(scope="module")
def trimmed_pair(default_pair, tmp_path_factory):
    """The default pair with its draft's vocabulary cut to the first 32768 of 49152 tokens: the
    same weights, another tokenizer (fewer merges), a smaller output layer."""
    from specllama.vocab_trim import trim_vocab

    target, draft = default_pair
    out = tmp_path_factory.mktemp("trimmed") / "draft.top32768.gguf"
    info = trim_vocab(draft, str(out), 32768)
    assert info["n_merges_kept"] < info["n_merges"] and info["bytes_kept"] < info["bytes"]
    return target, str(out)


@pytest.mark.default_pair
@pytest.mark.slow
def test_real_pair_with_another_tokenizer(trimmed_pair):
    """Greedy output on the default target with the trimmed draft equals plain decoding, up to the
    target's batched-versus-one-token numerics (test_greedy_equivalence.py), and the draft's
    tokenizer really differs: it splits a word the target keeps whole."""
    from test_greedy_equivalence import CHAT_PROMPTS, near_tie_reference

    target, draft = trimmed_pair
    t, d = specllama.Model(target), specllama.Model(draft)
    rare = next(i for i in range(40000, t.n_vocab) if t.token_text(i)[:1] == "\u0120" and t.token_text(i)[1:].isalpha())
    word = " " + t.token_text(rare)[1:]  # (GPT-2 byte-level BPE writes a space as U+0120)
    assert t.tokenize(word, add_special=False) == [rare] and len(d.tokenize(word, add_special=False)) > 1
    drafted = accepted = 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048) as dec:
        assert dec.cross_vocab["target_share"] == pytest.approx(32768 / 49152)
        for question in CHAT_PROMPTS:
            prompt, check = near_tie_reference(dec, question, 64)
            for kw in (dict(n_draft=4, adaptive=False), dict()):
                r = dec.generate(prompt, max_tokens=64, temperature=0, drafter="model", **kw)
                check(r.tokens, str(kw))
                drafted += r.stats.n_drafted
                accepted += r.stats.n_accepted
    assert accepted > 0.3 * drafted


def test_trimming_needs_a_bpe_vocabulary(tiny, tmp_path):
    from specllama.vocab_trim import trim_vocab

    with pytest.raises(ValueError, match="needs a BPE vocabulary with merges"):
        trim_vocab(tiny.target, str(tmp_path / "x.gguf"), 100)


def test_server_and_cli_with_a_draft_of_another_vocabulary(cross, tmp_path):
    """`specllama serve` and `specllama generate` with the `other` draft: greedy replies equal
    `specllama generate --no-draft`, the drafts went through the pairing, and the stats line says so,
    with a grammar too."""
    from test_server import CHAT, ROOT, running

    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def generate(*args):
        out = subprocess.run([sys.executable, "-m", "specllama", "generate", *args, "-m", cross.target, "-n", "24",
                              "--temp", "0", "-c", "512"], capture_output=True, text=True, env=env, cwd=tmp_path,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        return out

    plain = json.loads(generate("--chat", "the cat is on", "--no-draft", "--json").stdout)["text"]
    spec = generate("--chat", "the cat is on", "-d", cross.other, "--n-draft", "3", "--fixed-draft",
                    "--drafter", "model")
    assert spec.stdout.rstrip("\n") == plain
    assert "the draft's vocabulary differs: it drafts the tokens both share" in spec.stderr
    grammar = ["--grammar", 'root ::= ("the" | " cat" | " is" | " on")+']
    plain_g = json.loads(generate("the cat is on", "--no-draft", "--json", *grammar).stdout)["text"]
    spec_g = generate("the cat is on", "-d", cross.other, "--drafter", "model", *grammar)
    assert spec_g.stdout.rstrip("\n") == plain_g
    assert "the draft's vocabulary differs: it drafts the tokens both share" in spec_g.stderr
    with running(["-m", cross.target, "-d", cross.other, "-c", "512", "-np", "2"]) as server:
        drafted = accepted = 0
        for n_draft in (None, 3):
            body = {"messages": [{"role": "user", "content": "the cat is on"}], "temperature": 0, "max_tokens": 24}
            if n_draft:
                body.update(n_draft=n_draft, drafter="model")
            r = server.post(CHAT, body).json()
            assert r["choices"][0]["message"]["content"] == plain
            drafted += r["timings"]["draft_n"]
            accepted += r["timings"]["draft_n_accepted"]
        for prompt in PROMPTS:
            r = server.post("/v1/completions", {"prompt": prompt, "temperature": 0, "max_tokens": 40}).json()
            drafted += r["timings"]["draft_n"]
            accepted += r["timings"]["draft_n_accepted"]
        assert 0 < accepted < drafted


def test_the_drafts_cache_follows_the_text_across_rejections(cross):
    """After every generation, whatever drafts were rejected and wherever the two tokenizers cut
    the text differently, the draft's cache agrees with the draft's reading of the target's tokens
    up to its last few positions: what it lacks is fed at its next catch-up, and the drafts of the
    last drafting step that were rejected (at most n_draft - 1 were decoded) are dropped there."""
    with specllama.SpeculativeDecoder(cross.target, cross.ascii, n_ctx=512) as dec:
        native = dec._native()
        rejected = spelled = 0
        for seed, prompt in enumerate(PROMPTS * 2):
            kw = dict(temperature=0) if seed < len(PROMPTS) else dict(temperature=1.0, seed=seed)
            r = dec.generate(prompt, max_tokens=50, n_draft=4, drafter="model", adaptive=False, ignore_eos=True, **kw)
            rejected += r.stats.n_drafted - r.stats.n_accepted
            target = native.cached_tokens()
            view = native.draft_view_of(target)
            cached = native.draft_cached_tokens()
            common = next((i for i, (a, b) in enumerate(zip(cached, view)) if a != b), min(len(cached), len(view)))
            assert len(cached) - common <= 3 and len(view) - common <= 8, (len(cached), len(view), common)
            spelled += len(view) != len(target) + (0 if target[0] == 1 else 1)  # a token spelled by several, or none
        assert rejected > 20 and spelled > 0
    with specllama.SpeculativeDecoder(cross.target, cross.other) as dec:
        toks = dec.target_model.tokenize("the cat")
        assert dec._native().draft_view_of(toks) == [1] + [cross.other_tokens.index(cross.tokens[t]) for t in toks[1:]]
        with pytest.raises(ValueError, match="outside the vocabulary"):
            dec._native().draft_view_of([10**6])


def test_a_chat_with_a_draft_of_another_vocabulary(cross):
    """Three turns of a chat session: each reply equals plain decoding's, and each turn reuses the
    caches' common prefix (the draft's too, through its reading of the target's tokens)."""
    from specllama.chat import ChatSession

    turns = ["the cat is on", "and she was", "what of it"]
    with specllama.SpeculativeDecoder(cross.target, cross.other, n_ctx=1024) as dec:
        spec = ChatSession(dec)
        replies = ["".join(c.text for c in spec.send(t, max_tokens=30, temperature=0, n_draft=3)) for t in turns]
        last = list(spec.send("the end", max_tokens=10, temperature=0))[-1]
        assert last.stats.n_prompt_cached > 0 and last.stats.vocab == "intersection"
    with specllama.SpeculativeDecoder(cross.target, n_ctx=1024) as plain_dec:
        plain = ChatSession(plain_dec)
        assert replies == ["".join(c.text for c in plain.send(t, max_tokens=30, temperature=0)) for t in turns]
