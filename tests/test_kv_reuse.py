"""Cache reuse after an edit in the middle of a prompt (GenerateOptions.cache_reuse, the server's
--cache-reuse): runs of tokens the cache holds at other positions move to their new positions,
the tokens between them are decoded in place, and what follows is not decoded again.

The moved keys and values were computed after the old text, so the model's output is close to,
not exactly, a fresh pass over the edited prompt: these tests check the bookkeeping (what the cache
holds, where, and that decoding goes on from it), that an edit undone before the next decode gives
the unedited cache back bitwise, that the stale context is real (the negative control), and that
speculation stays exact given the cache: greedy output with the draft equals plain decoding over
the same sequence of edited prompts."""

from __future__ import annotations

import numpy as np
import pytest

import specllama


def _toks(n, seed, hi=300):
    return [int(x) for x in np.random.default_rng(seed).integers(5, hi, n)]


A, X, R, Y, Z = _toks(20, 1), _toks(7, 2), _toks(60, 3), _toks(5, 4), _toks(7, 5)


def _ctx(path, seq):
    ctx = specllama.Context(specllama.Model(path), n_ctx=512)
    ctx.decode(seq, all_logits=False)
    return ctx


@pytest.mark.parametrize("edit, new, want", [
    # (n_kept, n_shifted, n_decoded) for a prompt whose last token is left to decode
    ("insert", A + Y + X + R, (len(A + Y + X + R) - 1, len(X + R) - 1, len(Y))),
    ("delete", A + R, (len(A + R) - 1, len(R) - 1, 0)),
    ("replace", A + Z + R, (len(A + Z + R) - 1, len(R) - 1, len(Z))),
    ("move the run left, text after it", A + R + Y, (len(A + R), len(R), 0)),
])
def test_runs_move_and_the_gaps_are_decoded(tiny, edit, new, want):
    ctx = _ctx(tiny.target_q, A + X + R)
    assert ctx.can_reuse
    assert ctx.keep_reusable(new, 16, len(new) - 1) == want, edit
    assert ctx.tokens == new[:want[0]]
    logits = ctx.decode(new[want[0]:] + _toks(3, 9), all_logits=True)  # decoding goes on from there
    assert logits.shape[0] == len(new) - want[0] + 3 and np.isfinite(logits).all()
    assert ctx.n_past == len(new) + 3


def test_runs_shorter_than_n_min_are_decoded_again(tiny):
    ctx = _ctx(tiny.target_q, A + X + R)
    assert ctx.keep_reusable(A + Y + X + R, len(X + R), len(A + Y + X + R) - 1) == (len(A), 0, 0)
    assert ctx.tokens == A


def test_without_an_edit_it_is_the_common_prefix(tiny):
    ctx = _ctx(tiny.target_q, A + X + R)
    assert ctx.keep_reusable(A + X, 16) == (len(A + X), 0, 0)
    assert ctx.keep_reusable(Y + A, 4) == (len(Y + A), len(A), len(Y))  # text put before all of it


@pytest.mark.default_pair
def test_an_edit_undone_gives_the_unedited_cache_back_bitwise(default_pair):
    """An insertion moves X + R right and decodes Y before them; deleting Y again before the next
    decode moves them back: the net move is zero, so the cache must be the unedited one, bit for bit
    (the F32 target's positions enter through its rotary embedding: a run left one position off
    changes its logits). Negative control: a replacement of the same length leaves R where it was
    but computed after other text, and the logits differ from a fresh pass."""
    target = default_pair[0]
    prompt = A + X + R
    want = _ctx(target, prompt[:-1]).decode(prompt[-1:])[-1]
    ctx = _ctx(target, prompt[:-1])
    assert ctx.keep_reusable(A + Y + X + R, 16, len(A + Y + X + R) - 1)[1] == len(X + R) - 1
    assert ctx.keep_reusable(prompt, 16, len(prompt) - 1) == (len(prompt) - 1, len(X + R) - 1, 0)
    assert np.array_equal(ctx.decode(prompt[-1:])[-1], want)

    edited = A + Z + R
    stale = _ctx(target, prompt[:-1])
    assert stale.keep_reusable(edited, 16, len(edited) - 1) == (len(edited) - 1, len(R) - 1, len(Z))
    fresh = _ctx(target, edited[:-1]).decode(edited[-1:])[-1]
    assert np.abs(stale.decode(edited[-1:])[-1] - fresh).max() > 1e-2


def test_a_recurrent_model_keeps_the_common_prefix_only(tmp_path):
    from tiny_models import mamba_weights, vocab, write_mamba

    path = str(write_mamba(tmp_path / "mamba.gguf", vocab(), mamba_weights(len(vocab()), seed=11)))
    ctx = _ctx(path, A + X + R)
    assert not ctx.can_reuse
    assert ctx.keep_reusable(A + Y + X + R, 16, len(A + Y + X + R) - 1) == (len(A), 0, 0)
    assert ctx.tokens == A


def test_greedy_with_the_draft_is_plain_greedy_over_a_run_of_edits(tiny):
    """The same edited prompts, one after another, with and without speculation: the target's cache
    goes through the same moves either way, so greedy outputs agree (Q4_1 weights: a verification
    batch's logits equal one-token decodes'), and the moves happened."""
    target, draft = tiny.target_q, tiny.draft_q
    prompts = [A + X + R, A + Y + X + R, A + R, A + Y + R + X, A + Z + R + X]
    outs = {}
    for spec in (True, False):
        with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as dec:
            runs = [dec.generate(p, max_tokens=16, temperature=0, ignore_eos=True, cache_reuse=16, speculative=spec,
                                 n_draft=4, adaptive=False) for p in prompts]
        outs[spec] = [list(r.tokens) for r in runs]
        assert all(r.stats.n_prompt_reused >= len(R) - 1 for r in runs[1:]), [r.stats.n_prompt_reused for r in runs]
        assert all(r.stats.n_prompt_cached >= r.stats.n_prompt_reused for r in runs)
        if spec:
            assert sum(r.stats.n_drafted for r in runs) > 0
    assert outs[True] == outs[False]


def test_cache_reuse_must_not_be_negative():
    from specllama.options import make_options

    with pytest.raises(ValueError, match="cache_reuse"):
        make_options(cache_reuse=-1)
