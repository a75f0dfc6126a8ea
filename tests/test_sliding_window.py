"""Sliding-window attention (Gemma 3 style: window layers and full-attention layers), with the
window layers' cache full-size (swa_full, the default) or holding only the window.

With swa_full off, llama.cpp keeps the window layers' last n_swa + n_batch positions and reuses
the oldest cells. A rollback by a verification batch or less still finds the window before the
new end; a longer one (a new prompt sharing only part of the cached text) goes back to a
checkpoint taken where a prompt ended, or decodes the text again. Slots share one context per
model; with a sliding window each slot's sequence gets a cache of its own there, since one cache
for all reuses a cell another sequence's window has left, and swa_full applies to it as well.

The fixture is a tiny random Gemma 3 quantized to Q4_1, window 8, layers alternating window and
full attention. Its contexts run on one thread: with more, llama.cpp splits a one-token decode's
attention over more than 256 cached positions across threads, which changes its rounding, and the
window cache holds at least 256 positions, so these texts must be longer than that. With only
the window held, which cell holds which position depends on the rollbacks before, and the
attention adds its terms in cell order: speculative output is then checked token by token to be
the target's greedy choice (up to rounding) after the text before it.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
from tiny_models import gemma3_weights, parts_only_at_near_ties, perturbed, vocab, write_gemma3

import specllama

N_BATCH = 32  # the window cache then holds 256 positions (8 + 32, padded to 256)
ONE_THREAD = dict(n_batch=N_BATCH, n_threads=1)
GREEDY = dict(temperature=0, ignore_eos=True)


@pytest.fixture(scope="module")
def swa(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma3")
    toks = vocab()
    w = gemma3_weights(len(toks), seed=11)
    ns = SimpleNamespace(n_vocab=len(toks))
    for name, weights in [("target", w), ("draft", perturbed(w, seed=12, noise=0.15))]:
        f32 = write_gemma3(d / f"{name}.gguf", toks, weights)
        setattr(ns, name, str(d / f"{name}_q4_1.gguf"))
        specllama.quantize(str(f32), getattr(ns, name), "q4_1")
    return ns


def _text(n, seed):
    return [int(t) for t in np.random.default_rng(seed).integers(5, 325, n)]


def _next_logits_of_fresh(model, tokens, swa_full):
    fresh = specllama.Context(model, n_ctx=1024, swa_full=swa_full, **ONE_THREAD)
    fresh.decode(tokens, all_logits=False)
    return fresh.decode([100])[0]


def _greedy_at_every_token(model, prompt, tokens, tol=0.01):
    """Each token is the one the target's logits after the prompt and the tokens before it rank
    first, or within tol (relative) of it."""
    ctx = specllama.Context(specllama.Model(model), n_ctx=1024, **ONE_THREAD)
    logits = ctx.decode(list(prompt) + list(tokens), all_logits=True)[len(prompt) - 1:-1]
    top = logits.max(axis=1)
    chosen = logits[np.arange(len(tokens)), tokens]
    return bool(np.all(top - chosen <= tol * np.maximum(1.0, np.abs(top))))


def test_batched_and_one_token_logits_are_equal(swa):
    """The premise of the exact greedy comparisons below, past the window cache's size."""
    m = specllama.Model(swa.target)
    text = _text(320, seed=1)
    a, b = (specllama.Context(m, n_ctx=1024, swa_full=False, **ONE_THREAD) for _ in range(2))
    a.decode(text[:300], all_logits=False)
    b.decode(text[:300], all_logits=False)
    one = np.array([a.decode([t])[0] for t in text[300:]])
    assert np.array_equal(one, b.decode(text[300:]))


@pytest.mark.parametrize("swa_full", [True, False])
def test_rollback_after_drafts_equals_a_fresh_context(swa, swa_full):
    """Verification-sized rollbacks, 400 to 520 positions in: the next logits equal a fresh
    context's fed the kept text, and nothing is decoded again."""
    m = specllama.Model(swa.target)
    ctx = specllama.Context(m, n_ctx=1024, swa_full=swa_full, **ONE_THREAD)
    assert ctx.window_only == (not swa_full) and not ctx.recurrent
    ctx.decode(_text(400, seed=2), all_logits=False)
    rng = np.random.default_rng(3)
    for step in range(12):
        n = ctx.n_past
        ctx.decode(_text(8, seed=10 + step))
        ctx.rollback(n + int(rng.integers(0, 8)))
        kept = ctx.tokens
        assert np.array_equal(ctx.decode([100])[0], _next_logits_of_fresh(m, kept, swa_full)), step
        ctx.rollback(len(kept))
    assert ctx.n_redecoded == 0


def test_long_rollback_goes_back_to_the_kept_checkpoint(swa):
    """With only the window held, going back further than it restores the checkpoint kept where
    the prompt ended and decodes from there, or decodes the whole text without one; a full-size
    window cache drops the tail."""
    m = specllama.Model(swa.target)
    text = _text(600, seed=4)
    for swa_full in (False, True):
        ctx = specllama.Context(m, n_ctx=1024, swa_full=swa_full, **ONE_THREAD)
        ctx.decode(text[:300], all_logits=False)
        ctx.keep_checkpoint()
        ctx.decode(text[300:], all_logits=False)
        ctx.rollback(320)
        assert ctx.n_redecoded == (0 if swa_full else 20)
        assert np.array_equal(ctx.decode([100])[0], _next_logits_of_fresh(m, text[:320], swa_full))
        ctx.rollback(200)  # before the checkpoint
        assert ctx.n_redecoded == (0 if swa_full else 220)
        assert ctx.tokens == text[:200]
        assert np.array_equal(ctx.decode([100])[0], _next_logits_of_fresh(m, text[:200], swa_full))


@pytest.mark.parametrize("swa_full", [True, False])
def test_greedy_output_is_the_targets(swa, swa_full):
    """Generations longer than the window cache, with drafts both kept and rejected: greedy
    speculative output equals plain decoding (full-size window cache), or is the target's greedy
    choice at every token (window only); a second prompt sharing the first's start reuses it."""
    kw = dict(GREEDY, max_tokens=300)
    with specllama.SpeculativeDecoder(swa.target, swa.draft, n_ctx=1024, swa_full=swa_full, **ONE_THREAD) as dec:
        for prompt in ["the cat is", "the cat is on the hot"]:
            plain = dec.generate(prompt, speculative=False, **kw)
            for n_draft in (2, 5):
                r = dec.generate(prompt, n_draft=n_draft, drafter="model", adaptive=False, **kw)
                if swa_full:
                    assert r.tokens == plain.tokens, (prompt, n_draft)
                else:
                    assert _greedy_at_every_token(swa.target, dec.tokenize(prompt), r.tokens), (prompt, n_draft)
                assert r.stats.rollback == "kv"
                assert 0 < r.stats.n_accepted < r.stats.n_drafted
            r = dec.generate(prompt, **kw)
            assert r.tokens == plain.tokens if swa_full else _greedy_at_every_token(swa.target, dec.tokenize(prompt), r.tokens)
        assert dec.generate("the cat is", speculative=False, **kw).stats.n_prompt_cached > 0


def test_slots_alone_equal_a_decoder_of_their_own(swa):
    """Slots running one after another, each after the others have filled the shared context, with
    their rows sampled on the host and then on the device: every output equals the decoder's own
    (in one cache for all sequences they would not)."""
    kw = dict(GREEDY, max_tokens=60, n_draft=4, adaptive=False, drafter="model")
    prompts = ["the cat is", "she was out with", "what some of the", "a word and"]
    with specllama.SpeculativeDecoder(swa.target, swa.draft, n_ctx=256, **ONE_THREAD) as dec:
        want = [dec.generate(p, **kw).tokens for p in prompts]
        slots = dec.slots(3)
        for on_device in (False, True):  # (the second time each slot's chain samples on its sequence)
            for slot in slots:
                assert [slot.generate(p, device_sampling=on_device, **kw).tokens for p in prompts] == want


def test_slots_holding_only_the_window_generate_the_targets_text(swa):
    """swa_full off reaches the slots: each slot's window layers hold only the window, generations
    run longer than that cache with drafts kept and rejected, and a prompt that shares only the
    start of a slot's cached text goes back to where that slot's last prompt ended. Every output is
    the target's greedy choice at every token."""
    kw = dict(GREEDY, max_tokens=300, n_draft=4, adaptive=False, drafter="model")
    with specllama.SpeculativeDecoder(swa.target, swa.draft, n_ctx=1024, swa_full=False, **ONE_THREAD) as dec:
        slots = dec.slots(2)
        for prompt in ["the cat is", "the cat is on the hot", "she was out with"]:
            for slot in slots:
                r = slot.generate(prompt, **kw)
                assert _greedy_at_every_token(swa.target, dec.tokenize(prompt), r.tokens), prompt
                assert 0 < r.stats.n_accepted < r.stats.n_drafted


def test_slots_together_generate_the_targets_text(swa):
    """Slots generating at once (decodes merged across sequences, each with a cache of its own):
    each output equals plain decoding's, or parts from it only where the target's two best tokens
    are within 1% (merged decodes change llama.cpp's batch numerics)."""
    kw = dict(GREEDY, max_tokens=40, n_draft=3)
    prompts = ["the cat is", "she was out with", "what some of the"]
    with specllama.SpeculativeDecoder(swa.target, swa.draft, n_ctx=256, **ONE_THREAD) as dec:
        want = [dec.generate(p, speculative=False, **kw).tokens for p in prompts]
        slots = dec.slots(3)
        got = [None] * 3

        def run(i):
            got[i] = slots[i].generate(prompts[i], **kw).tokens

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(parts_only_at_near_ties(swa.target, dec.tokenize(p), g, w) for p, g, w in zip(prompts, got, want))
        assert slots[0].slot_batching["chunks"] >= slots[0].slot_batching["decodes"] > 0
