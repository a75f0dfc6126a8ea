"""Adaptive draft length: it stays within n_draft, drafts long when the draft is usually right
and short when it is usually wrong, and learns the pair's costs and calibration."""

from __future__ import annotations

import pytest

import specllama


def _tokens_per_step(dec, prompt, **kw):
    s = dec.generate(prompt, max_tokens=120, temperature=0, ignore_eos=True, **kw).stats
    return s.n_drafted / s.n_steps, s


@pytest.mark.default_pair
@pytest.mark.slow
def test_adaptive_drafts_less_for_a_worse_draft(default_pair, tmp_path_factory):
    """On the real pair (a draft at ~0.4 of the target's cost) the Q4_1 draft agrees ~95% of the
    time and a Q4_0 requantization ~70%: adaptive drafting must draft longer for the first."""
    target, good_draft = default_pair
    bad_draft = str(tmp_path_factory.mktemp("q4_0") / "draft_q4_0.gguf")
    specllama.quantize(target, bad_draft, "q4_0")
    prompt = "<|im_start|>user\nList ten common fruits, one per line.<|im_end|>\n<|im_start|>assistant\n"
    with specllama.SpeculativeDecoder(target, good_draft, n_ctx=1024) as good, \
            specllama.SpeculativeDecoder(target, bad_draft, n_ctx=1024) as bad:
        for dec in (good, bad):  # learn costs and calibration first
            _tokens_per_step(dec, prompt, n_draft=12)
        _, fixed_good = _tokens_per_step(good, prompt, n_draft=4, adaptive=False)
        _, fixed_bad = _tokens_per_step(bad, prompt, n_draft=4, adaptive=False)
        assert fixed_good.acceptance_rate > fixed_bad.acceptance_rate + 0.1  # the premise
        # the costs it decides on are measured, so a busy spell of the machine during one run
        # moves that run's lengths: three interleaved runs each, medians compared
        per_good, per_bad = [], []
        for _ in range(3):
            per, s_good = _tokens_per_step(good, prompt, n_draft=12)
            per_good.append(per)
            per_bad.append(_tokens_per_step(bad, prompt, n_draft=12)[0])
            assert len(s_good.accepted_hist) == 13  # never beyond n_draft
    # (the Q4_0 draft is also cheaper, so drafting on pays for it too: the margin is not 2x)
    assert sorted(per_good)[1] > sorted(per_bad)[1] + 1, (per_good, per_bad)


def test_fixed_mode_always_drafts_n(tiny):
    drafted = []
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=1024) as dec:
        dec.generate("the cat is", max_tokens=120, temperature=0, ignore_eos=True, n_draft=5, adaptive=False,
                     on_step=lambda tokens, text, n_drafted, n_accepted: drafted.append(n_drafted))
    # 5 every step, except where the draft proposed an end token (it stops there) or near the end
    assert max(drafted) == 5 and drafted.count(5) >= 0.8 * len(drafted)


def test_cost_model_learns(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=1024) as dec:
        _tokens_per_step(dec, "the cat is", n_draft=8, adaptive=False)
        m = dec._native().cost_model()
    assert m["draft_ms"] > 0
    assert all(b >= a for a, b in zip(m["verify_ms"], m["verify_ms"][1:]))  # bigger batches never cheaper
    assert 0 <= m["acceptance"] <= 1
    assert all(0 <= p <= 1 for p in m["accept_prob_by_confidence"])
