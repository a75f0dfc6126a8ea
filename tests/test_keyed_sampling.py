"""Keyed draws (acceptance="keyed", the default with a seed): every draw at a position is a
Gumbel-max draw with noise that is a function of the seed, the position and the token, on the
draft's side and the target's. The
target's token at a position then depends on the seed, the position and its distribution there,
not on what was drafted: a seeded generation's output is plain decoding's with that seed, for any
drafter and draft length, fixed or adaptive (so a seed leaves the length adaptive), on the host's or
the device's candidates, in a slot. Sampled output follows the target (chi-square on the first two
tokens and on their pairs, with negative controls that fail), and the rejection rule's seeded
output is not plain decoding's (the equality is not a property of every rule)."""

from __future__ import annotations

import numpy as np
import pytest

import specllama
from test_sampling_end_to_end import SETTINGS, _dist_after, _pvalue, first_two_tokens, pvalue_or_zero, \
    two_token_distributions

CHAIN = dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
PROMPTS = ["the cat is on the", "she was", "what some of the",
           "the cat the cat the cat the cat the cat", "she was she was she was she was"]  # (where lookup drafts)


@pytest.fixture(scope="module")
def dec(tiny):
    # Q4_1: batched and one-token logits are bitwise equal, so plain decoding's distributions are
    # the verification's
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as d:
        yield d


def _run(d, prompt, seed, **kw):
    return d.generate(prompt, max_tokens=40, ignore_eos=True, seed=seed, acceptance="keyed", **{**CHAIN, **kw})


# prices at which drafting pays, so that the adaptive rule drafts whatever this machine's timings are
PAYS = specllama.StepPrices(draft_ms=1.0, verify_ms=10.0, verify_token_ms=0.5)


@pytest.mark.parametrize("kw", [dict(n_draft=4, adaptive=False), dict(n_draft=1, adaptive=False), dict(prices=PAYS),
                                dict(drafter="lookup", n_draft=4, adaptive=False),
                                dict(n_draft=4, adaptive=False, device_sampling=True),
                                dict(n_draft=6, adaptive=False, top_k=0)],
                         ids=["fixed 4", "fixed 1", "adaptive", "lookup", "device", "no top-k"])
def test_seeded_output_is_plain_decodings(dec, kw):
    n_drafted = 0
    for seed in range(4):
        for prompt in PROMPTS:
            plain = _run(dec, prompt, seed, speculative=False, **{k: v for k, v in kw.items() if k == "top_k"})
            got = _run(dec, prompt, seed, **kw)
            assert got.tokens == plain.tokens, (prompt, seed)
            n_drafted += got.stats.n_drafted
    assert n_drafted > (0 if kw.get("drafter") == "lookup" else 40)


def test_the_draft_model_does_not_change_the_output(tiny, dec):
    """An unrelated draft (rarely kept) and a slot of the first decoder: the same tokens."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.far_draft, n_ctx=256) as far:
        slot = dec.slots(2)[1]
        for seed in range(3):
            plain = _run(dec, "she was", seed, speculative=False)
            assert _run(far, "she was", seed, n_draft=3, adaptive=False).tokens == plain.tokens
            assert _run(slot, "she was", seed, n_draft=3, adaptive=False).tokens == plain.tokens


def test_the_rejection_rule_is_not_plain_decoding(dec):
    """Control: with the rejection rule a seeded generation's draws depend on the drafts, and its
    output differs from plain decoding's with the same seed."""
    differ = 0
    for seed in range(4):
        kw = dict(max_tokens=40, ignore_eos=True, seed=seed, acceptance="rejection", **CHAIN)
        plain = dec.generate("the cat is on the", speculative=False, **kw)
        differ += dec.generate("the cat is on the", n_draft=4, adaptive=False, **kw).tokens != plain.tokens
    assert differ >= 3


def test_a_seed_draws_keyed_and_leaves_the_draft_length_adaptive(dec):
    """A seed alone draws keyed (the default) and keeps the adaptive rule: at prices where drafting
    never pays it leaves the draft out but for its probes, and the output is plain decoding's; a
    seeded generation with the rejection rule drafts its fixed lengths every step."""
    prices = specllama.StepPrices(draft_ms=50.0, verify_ms=5.0, verify_token_ms=5.0)
    kw = dict(max_tokens=60, ignore_eos=True, seed=1, n_draft=4, prices=prices, **CHAIN)
    default = dec.generate("the cat", **kw)
    keyed = default.stats
    assert default.tokens == dec.generate("the cat", speculative=False, **kw).tokens
    fixed = dec.generate("the cat", acceptance="rejection", **kw).stats
    assert fixed.n_drafted >= 4 * (fixed.n_steps - 1) // 2
    assert keyed.n_drafted * 4 < fixed.n_drafted and keyed.n_paused_steps > 0


@pytest.mark.parametrize("kw, rule", [
    (dict(temperature=0.0, seed=1), "greedy"),
    (dict(seed=1), "keyed"),
    (dict(seed=1, speculative=False), "keyed"),  # (plain decoding's own draws are keyed then)
    (dict(), "rejection"),
    (dict(seed=1, acceptance="rejection"), "rejection"),
    (dict(seed=1, acceptance="match"), "match"),
    (dict(seed=1, mode="dsi"), "rejection"),
    (dict(temperature=0.0, mode="dsi"), "greedy"),
], ids=["greedy", "seeded", "seeded plain", "unseeded", "rejection", "match", "dsi sampled", "dsi greedy"])
def test_stats_say_which_rule_ran(dec, kw, rule):
    got = dec.generate("the cat", max_tokens=6, ignore_eos=True, **{**CHAIN, **kw})
    assert got.stats.acceptance == rule


def test_sampled_output_follows_the_target(tiny):
    """3000 seeded generations with an unrelated draft (n_draft 2, fixed): the first token follows
    p1, the second the marginal of the target's second token, and the pairs the target's joint
    p1(x) p2(y | x); the draft's q1 and the product of the two marginals (what draws at the two
    positions would give if the second did not follow the first) are rejected by the same tests."""
    prompt, p1, p2, q1 = two_token_distributions(tiny.target, tiny.far_draft, "the cat is on the")
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, acceptance="keyed",
                                                   adaptive=False)
    assert n_rejected > len(firsts) // 4, "the pair must disagree often for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    assert pvalue_or_zero(firsts, np.where(q1 > 0, q1, 0)) < 1e-6
    target = specllama.Model(tiny.target)
    n = len(p1)
    joint = np.zeros(n * n)
    for x in np.flatnonzero(p1):
        joint[x * n:(x + 1) * n] = p1[x] * _dist_after(target, prompt + [int(x)])
    pairs = firsts * n + seconds
    assert pvalue_or_zero(pairs, joint) > 1e-4
    assert pvalue_or_zero(pairs, np.outer(p1, p2).ravel()) < 1e-6


def test_keyed_without_a_seed_draws_a_key(dec):
    """Without a seed the key is random: generations differ from each other, as sampling does."""
    texts = {tuple(dec.generate("she was", max_tokens=16, ignore_eos=True, acceptance="keyed", **SETTINGS).tokens)
             for _ in range(4)}
    assert len(texts) > 1


def test_keyed_is_refused_where_it_cannot_run(dec):
    with pytest.raises(ValueError, match="rejection rule"):
        dec.generate("the cat", max_tokens=4, mode="dsi", acceptance="keyed", seed=1, temperature=0.8)
    with pytest.raises(ValueError, match="acceptance"):
        dec.generate("the cat", max_tokens=4, acceptance="keyd")
