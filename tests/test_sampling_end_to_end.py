"""End to end at temperature > 0: speculative sampling on a real (tiny) model pair emits tokens
that follow the target's distribution, not the draft's.

Design: the prompt is fixed; each of N generations uses its own seed and emits 3 tokens with
n_draft 2. The first step of every generation is plain (its token comes at once), so the second
token is the first one drafted and then accepted or corrected by the rejection rule. The target's
exact distributions come from a separate Context: p1 after the prompt, and the marginal of the
second token, sum_x p1(x) p2(. | prompt x). The first token's histogram must fit p1 and the
second's the marginal (chi-square); the first must NOT fit the draft's q1 (the pair is chosen so
that they differ), which shows the check has power.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import specllama

SETTINGS = dict(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0)
N = 3000


def _dist_after(model, tokens, settings=None, n_ctx=128, **context_kw):
    """The distribution sampling with settings (default: SETTINGS) draws from after tokens (on a
    Context made with context_kw)."""
    ctx = specllama.Context(model, n_ctx=n_ctx, **context_kw)
    logits = ctx.decode(tokens, all_logits=False)[-1]
    return specllama.sampling_distribution(logits, **(settings or SETTINGS)).astype(np.float64)


def _pvalue(samples, p):
    counts = np.bincount(samples, minlength=len(p)).astype(np.float64)
    assert counts[p == 0].sum() == 0, "emitted a token outside the target's top-k"
    keep = p * len(samples) >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(p[keep], p[~keep].sum()) * len(samples)
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue


def pvalue_or_zero(samples, p):
    """_pvalue, or 0 where the samples hold a token p cannot draw (for a negative control)."""
    try:
        return _pvalue(samples, p)
    except AssertionError:
        return 0.0


def first_two_tokens(target_path, draft_path, prompt, settings=None, n=N, slot=False, decoder_kw=None, **kw):
    """n seeded generations of 3 tokens with n_draft 2, sampling with settings (default: SETTINGS)
    and kw (on one of slots()'s decoders with slot; the decoder made with decoder_kw), verified by
    the rejection rule unless kw names another (a seed alone would draw keyed): the first and
    second tokens (numpy arrays) and how many drafts the rule corrected."""
    kw.setdefault("acceptance", "rejection")
    firsts, seconds, n_rejected = [], [], 0
    with specllama.SpeculativeDecoder(target_path, draft_path, n_ctx=128, **(decoder_kw or {})) as first:
        dec = first.slots(2)[1] if slot else first
        for seed in range(n):
            r = dec.generate(prompt, max_tokens=3, n_draft=2, seed=seed, ignore_eos=True, **(settings or SETTINGS),
                             **kw)
            assert len(r.tokens) == 3
            assert r.stats.sampling == ("device" if kw.get("device_sampling") else "host")
            firsts.append(r.tokens[0])
            seconds.append(r.tokens[1])
            n_rejected += r.stats.n_drafted - r.stats.n_accepted
    return np.array(firsts), np.array(seconds), n_rejected


def two_token_distributions(target_path, draft_path, text, **context_kw):
    """The prompt's tokens, the target's p1 after it, the target's marginal of the second token
    sum_x p1(x) p2(. | prompt x), and the draft's q1 (the target's on Contexts made with context_kw)."""
    target = specllama.Model(target_path)
    prompt = target.tokenize(text)
    p1 = _dist_after(target, prompt, **context_kw)
    p2 = np.zeros_like(p1)
    for x in np.flatnonzero(p1):
        p2 += p1[x] * _dist_after(target, prompt + [int(x)], **context_kw)
    return prompt, p1, p2, _dist_after(specllama.Model(draft_path), prompt)


@pytest.mark.slow
def test_speculative_sampling_follows_target(tiny):
    prompt, p1, p2, q1 = two_token_distributions(tiny.target, tiny.far_draft, "the cat is on the")

    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt)
    assert n_rejected > N // 4, "the pair must disagree often for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    # the draft's own distribution is clearly rejected by the same test
    q1_support = np.where(q1 > 0, q1, 0)
    with pytest.raises(AssertionError):
        assert _pvalue(firsts, q1_support) > 1e-4


def test_plain_sampling_follows_target(tiny):
    """The plain loop (speculative=False) samples the same distribution."""
    target = specllama.Model(tiny.target)
    prompt = target.tokenize("she was")
    p1 = _dist_after(target, prompt)
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=128) as dec:
        firsts = [dec.generate(prompt, max_tokens=1, seed=s, speculative=False, ignore_eos=True,
                               **SETTINGS).tokens[0] for s in range(1500)]
    assert _pvalue(np.array(firsts), p1) > 1e-4
