"""KV rollback: after rejected drafts are dropped, the target's next logits equal those of a
fresh context fed only the accepted text. A negative control shows the check fails when the
rejected tokens are left in the cache.

Numerics: the fresh context cannot compute the accepted tokens in the very batch the
verification used (that batch held the rejected drafts too). For batch-invariant weights (the
tiny Q4_1 model) the logits must be bitwise equal. For the F32 default target, whose one-token
and batched kernels differ, the test measures that kernel difference on the same text (batched
vs one token at a time, no rollback involved) and allows at most twice it; the negative control
must exceed it a hundredfold."""

from __future__ import annotations

import numpy as np
import pytest

import specllama


def _after_rollback(model, prompt, drafts, n_keep, nxt, rollback=True):
    ctx = specllama.Context(model, n_ctx=256)
    ctx.decode(prompt[:-1], all_logits=False)
    ctx.decode([prompt[-1]] + drafts, all_logits=True)  # a verification batch
    if rollback:
        ctx.rollback(len(prompt) + n_keep)
        assert ctx.tokens == prompt + drafts[:n_keep]
    return ctx.decode([nxt], all_logits=True)[0]


def _fresh(model, prompt, drafts, n_keep, nxt):
    ctx = specllama.Context(model, n_ctx=256)
    ctx.decode(prompt[:-1], all_logits=False)
    ctx.decode([prompt[-1]] + drafts[:n_keep], all_logits=True)
    return ctx.decode([nxt], all_logits=True)[0]


def _one_by_one(model, prompt, drafts, n_keep, nxt):
    ctx = specllama.Context(model, n_ctx=256)
    ctx.decode(prompt[:-1], all_logits=False)
    for t in [prompt[-1]] + drafts[:n_keep]:
        ctx.decode([t])
    return ctx.decode([nxt], all_logits=True)[0]


def _check(model_path, exact):
    model = specllama.Model(model_path)
    prompt = model.tokenize("the cat is on the hot")
    drafts = model.tokenize("word and they were", add_special=False)[:5]
    assert len(drafts) >= 3
    nxt = drafts[0]
    wants = [_fresh(model, prompt, drafts, k, nxt) for k in range(len(drafts))]
    if exact:
        noise = 0.0
    else:
        noise = max(np.abs(w - _one_by_one(model, prompt, drafts, k, nxt)).max() for k, w in enumerate(wants))
    for n_keep, want in enumerate(wants):
        got = _after_rollback(model, prompt, drafts, n_keep, nxt)
        assert np.abs(got - want).max() <= 2 * noise, f"n_keep {n_keep}"
    # negative control: without the rollback the logits are far off
    stale = _after_rollback(model, prompt, drafts, 1, nxt, rollback=False)
    assert np.abs(stale - wants[1]).max() > max(100 * noise, 1e-3)


def test_rollback_tiny(tiny):
    _check(tiny.target_q, exact=True)


@pytest.mark.default_pair
def test_rollback_default_target(default_pair):
    _check(default_pair[0], exact=False)


def test_decoder_cache_holds_exactly_the_accepted_text(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=256) as dec:
        prompt = dec.tokenize("she was out with")
        # (fixed draft lengths: the adaptive rule may stop drafting with a draft this far off)
        r = dec.generate(prompt, max_tokens=40, temperature=0, n_draft=4, ignore_eos=True, adaptive=False)
        assert r.stats.n_accepted < r.stats.n_drafted  # there were rejections to roll back
        # the last emitted token has not been decoded yet; everything before it is cached
        assert dec.cached_tokens() == prompt + r.tokens[:-1]
        # continuing from the cache gives what a fresh decoder gives from the whole text
        cont = dec.generate(prompt + r.tokens, max_tokens=20, temperature=0, n_draft=4, ignore_eos=True,
                            adaptive=False)
        assert cont.stats.n_prompt_cached == len(prompt) + len(r.tokens) - 1
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=256) as fresh:
        again = fresh.generate(prompt + r.tokens, max_tokens=20, temperature=0, n_draft=4, ignore_eos=True,
                               adaptive=False)
    assert cont.tokens == again.tokens


@pytest.mark.default_pair
def test_decoder_cache_default_pair(default_decoder):
    dec = default_decoder
    prompt = dec.tokenize(dec.apply_chat_template([{"role": "user", "content": "List three colors."}]))
    r = dec.generate(prompt, max_tokens=24, temperature=0)
    if r.finish_reason == "length":
        assert dec.cached_tokens() == prompt + r.tokens[:-1]
    else:
        assert dec.cached_tokens()[: len(prompt) + len(r.tokens) - 1] == prompt + r.tokens[:-1]


def _restart_checks(model, text):
    """A cache restarted at position 20 of a text (what a paused draft's probe does when it lags far
    behind) holds none of what came before: its logits for the next tokens equal those of a cache
    that never saw the first 20, and differ from one that did; a rollback that keeps a position
    after the restart keeps the restart, one into the forgotten positions empties the cache."""
    seq = model.tokenize(text)
    assert len(seq) >= 32
    ctx = specllama.Context(model, n_ctx=256)
    ctx.decode(seq[:10], all_logits=False)  # lagging behind, with a context to forget
    ctx.restart_at(seq, 20)
    assert ctx.n_past == 20 and ctx.tokens == seq[:20] and ctx.n_forgotten == 20
    got = ctx.decode(seq[20:30])
    never = specllama.Context(model, n_ctx=256)
    never.restart_at(seq, 20)
    assert np.array_equal(got, never.decode(seq[20:30]))
    full = specllama.Context(model, n_ctx=256)
    full.decode(seq[:20], all_logits=False)
    assert not np.allclose(got[-1], full.decode(seq[20:30])[-1], atol=1e-3)  # the forgotten text mattered
    # drop a rejected tail after the restart: the next logits are the kept text's, still without the first 20
    ctx.rollback(24)
    assert ctx.tokens == seq[:24] and ctx.n_forgotten == 20
    never.rollback(24)
    assert np.array_equal(ctx.decode(seq[24:28]), never.decode(seq[24:28]))
    # a prefix that ends among the forgotten positions is not held: the cache empties
    ctx.rollback(15)
    assert ctx.n_past == 0 and ctx.tokens == [] and ctx.n_forgotten == 0
    again = ctx.decode(seq[:30])  # usable again, as a fresh cache
    fresh = specllama.Context(model, n_ctx=256)
    assert np.array_equal(again, fresh.decode(seq[:30]))
    with pytest.raises(ValueError):
        ctx.restart_at(seq, len(seq) + 1)


def test_restart_forgets_a_kv_caches_earlier_positions(tiny):
    _restart_checks(specllama.Model(tiny.target_q),
                    "the cat is on the hot word and she was out with a cat on the word of what some of the cat is")
