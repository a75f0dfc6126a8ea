"""Drafting while the target verifies (GenerateOptions.draft_ahead): the draft model drafts past a
step's drafts during its verification, and a step that keeps every draft and whose own token is
the draft's guess hands the next step drafts already made. The output stays the target's: greedy,
identical to plain decoding on the batch-invariant pairs; sampled, the token judged against a
draft made ahead follows the target's marginal (chi-square), and the draft's own marginal there
is rejected by the same test (negative control).
"""

from __future__ import annotations

import numpy as np
import pytest

import specllama
from test_greedy_equivalence import PROMPTS
from test_sampling_end_to_end import SETTINGS, _dist_after, _pvalue, pvalue_or_zero


@pytest.mark.parametrize("n_draft,ahead", [(2, 1), (2, 3), (5, 2), (5, 8)])
def test_greedy_output_is_plain_decodings(slow, n_draft, ahead):
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512) as dec:
        used = 0
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=48, temperature=0, speculative=False, ignore_eos=True)
            r = dec.generate(prompt, max_tokens=48, temperature=0, ignore_eos=True, adaptive=False,
                             n_draft=n_draft, draft_ahead=ahead)
            assert r.tokens == plain.tokens, f"prompt {prompt!r}"
            assert r.stats.n_ahead_used <= r.stats.n_ahead_drafted
            used += r.stats.n_ahead_used
            # and the decoder goes on exactly after it
            assert dec.generate(prompt, max_tokens=48, temperature=0, ignore_eos=True).tokens == plain.tokens
        # a draft of one token ahead is the draft reading its last draft, with no further draft to use
        assert (used > 0) == (ahead > 1)


@pytest.mark.parametrize("n_draft,ahead", [(3, 2), (4, 6)])
def test_a_model_as_its_own_draft_starts_every_step_with_the_drafts_made_ahead(tiny, n_draft, ahead):
    """Every draft is kept and every guess is the target's token, so from the third step on (the
    first is plain, the second drafts from scratch) each step starts with min(ahead - 1, n_draft)
    drafts made during the verification before it, and the acceptance stays whole: drafts taken in
    the wrong place or with the wrong q would be rejected."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=512) as dec:
        r = dec.generate("she was", max_tokens=80, temperature=0, ignore_eos=True, adaptive=False, n_draft=n_draft,
                         draft_ahead=ahead, drafter="model", record_steps=True)
        plain = dec.generate("she was", max_tokens=80, temperature=0, ignore_eos=True, speculative=False)
    s = r.stats
    assert r.tokens == plain.tokens
    assert s.n_accepted == s.n_drafted
    # every step is recorded (record_steps), though none prices the adaptive rule
    assert len(s.steps) == s.n_steps
    assert sum(t.n_drafted for t in s.steps) == s.n_drafted
    assert sum(t.n_accepted for t in s.steps) == s.n_accepted
    # (the last steps, near max_tokens, draft fewer)
    assert s.n_ahead_used >= (s.n_steps - 4) * min(ahead - 1, n_draft)


def test_sampled_drafts_made_ahead_keep_the_target_distribution(tiny):
    """Five tokens per generation, one draft per step, two ahead: the first step is plain (t1), the
    second drafts t2 and, while it is verified, the draft guesses t3 and drafts t4 after its guess;
    where t2 is kept and t3 is the guess, the third step's draft for t4 is that one. t4's histogram
    must fit the target's marginal of the fourth token, and must not fit the draft's."""
    target, draft = specllama.Model(tiny.target), specllama.Model(tiny.draft)
    prompt = target.tokenize("the cat is on the")
    p4 = fourth_token_marginal(target, prompt)
    q4 = fourth_token_marginal(draft, prompt)
    n = 3000
    fourths, n_used, n_rejected = [], 0, 0
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=128) as dec:
        for seed in range(n):
            r = dec.generate(prompt, max_tokens=5, seed=seed, ignore_eos=True, adaptive=False, n_draft=1,
                             draft_ahead=2, drafter="model", **SETTINGS)
            assert len(r.tokens) == 5
            fourths.append(r.tokens[3])
            n_used += r.stats.n_ahead_used
            n_rejected += r.stats.n_drafted - r.stats.n_accepted
    assert n_used > n // 5, "drafts made ahead must be judged often for this test to mean anything"
    assert n_rejected > n // 5, "and the rejection rule exercised"
    fourths = np.array(fourths)
    assert _pvalue(fourths, p4) > 1e-4
    assert pvalue_or_zero(fourths, np.where(q4 > 0, q4, 0)) < 1e-4


def fourth_token_marginal(model, prompt):
    """The distribution of the fourth sampled token after prompt (SETTINGS): the sum over the
    first three of their probabilities times the fourth's distribution after them."""
    def marginal(prefix, depth):
        p = _dist_after(model, prefix)
        if depth == 1:
            return p
        out = np.zeros_like(p)
        for x in np.flatnonzero(p):
            out += p[x] * marginal(prefix + [int(x)], depth - 1)
        return out

    return marginal(list(prompt), 4)


def test_bad_settings_are_refused(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=128) as dec:
        with pytest.raises(ValueError, match="adaptive=False"):
            dec.generate("she was", max_tokens=4, draft_ahead=2)
        with pytest.raises(ValueError, match="draft_ahead must be in"):
            dec.generate("she was", max_tokens=4, adaptive=False, draft_ahead=-1)
        with pytest.raises(ValueError, match="mode 'si'"):
            dec.generate("she was", max_tokens=4, adaptive=False, draft_ahead=2, mode="dsi")
        with pytest.raises(ValueError, match="draft model drafting"):
            dec.generate("she was", max_tokens=4, adaptive=False, draft_ahead=2, drafter="lookup")
        with pytest.raises(ValueError, match="grammar"):
            dec.generate("she was", max_tokens=4, adaptive=False, draft_ahead=2, grammar='root ::= "a"')
        # and the decoder is fine after them
        assert len(dec.generate("she was", max_tokens=4, adaptive=False, draft_ahead=2, ignore_eos=True).tokens) == 4
