"""Prompt lookup: drafts copied from earlier in the context, alone or after the draft model."""

from __future__ import annotations

import pytest

import specllama

QUOTING = "the cat is on the hot word and they were all there. the cat is on the hot word and"


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("drafter, draft", [("lookup", False), ("lookup", True), ("model+lookup", True)])
def test_lookup_keeps_greedy_output(tiny, drafter, draft, adaptive):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q if draft else None, n_ctx=512) as dec:
        plain = dec.generate(QUOTING, max_tokens=60, temperature=0, speculative=False, ignore_eos=True)
        out = dec.generate(QUOTING, max_tokens=60, temperature=0, drafter=drafter, adaptive=adaptive,
                           ignore_eos=True)
    assert out.tokens == plain.tokens
    s = out.stats
    assert 0 <= s.n_lookup_accepted <= s.n_lookup_drafted <= s.n_drafted
    if drafter == "lookup":
        assert s.n_lookup_drafted == s.n_drafted
        if not adaptive:  # adaptive sizes lookup drafts from measured costs, which may say none pay
            assert s.n_lookup_drafted > 0


def test_lookup_accepts_a_quoted_continuation(tiny):
    """A model that repeats what it saw: lookup proposes exactly the repetition."""
    with specllama.SpeculativeDecoder(tiny.target_q, n_ctx=512) as dec:
        plain = dec.generate(QUOTING, max_tokens=80, temperature=0, speculative=False, ignore_eos=True)
        # feed the model's own output twice: the second time, lookup can copy the first
        prompt = dec.tokenize(QUOTING) + plain.tokens[:40] + dec.tokenize(QUOTING, add_special=False)
        out = dec.generate(prompt, max_tokens=30, temperature=0, drafter="lookup", adaptive=False, ignore_eos=True)
    assert out.stats.n_lookup_accepted > 0


def test_lookup_sampling_is_reproducible(tiny):
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=512) as dec:
        kw = dict(max_tokens=40, temperature=0.8, seed=5, drafter="lookup", adaptive=False, ignore_eos=True,
                  acceptance="rejection")  # (the seeded stream's draws; keyed ones are plain decoding's)
        a = dec.generate(QUOTING, **kw)
        b = dec.generate(QUOTING, **kw)
    assert a.tokens == b.tokens and a.stats.n_lookup_drafted > 0  # (fixed length: lookup always tried)


def test_default_drafter_is_model_then_lookup_with_a_draft_and_plain_without(tiny, slow):
    """drafter="auto" (the default): with a draft model, prompt lookup drafts on where the model
    stops short. At given prices (a draft decode costs 0.6 of a target step, so the adaptive length
    stops the model's drafts early, and the loop is the same on any machine) auto drafts with both;
    drafter="model" leaves lookup out. Without a draft model, auto decodes plainly."""
    prices = specllama.StepPrices(draft_ms=0.6, verify_ms=1.0, verify_token_ms=0.05)
    runs = {}
    for drafter in ("auto", "model"):
        with specllama.SpeculativeDecoder(tiny.target_q, slow.target, n_ctx=512) as dec:
            runs[drafter] = dec.generate(QUOTING, max_tokens=60, temperature=0, ignore_eos=True, drafter=drafter,
                                         prices=prices)
            plain = dec.generate(QUOTING, max_tokens=60, temperature=0, speculative=False, ignore_eos=True)
    auto, model = runs["auto"], runs["model"]
    assert auto.tokens == plain.tokens == model.tokens
    assert auto.stats.drafter == "model+lookup" and model.stats.drafter == "model"
    assert auto.stats.n_lookup_drafted > 0 and auto.stats.n_drafted > auto.stats.n_lookup_drafted
    assert model.stats.n_lookup_drafted == 0 and model.stats.n_drafted > 0
    with specllama.SpeculativeDecoder(tiny.target_q, n_ctx=512) as dec:
        alone = dec.generate(QUOTING, max_tokens=20, temperature=0, ignore_eos=True)
    assert alone.stats.drafter == "none" and alone.stats.n_drafted == 0 and alone.stats.n_steps == 20


def test_bad_drafter_and_rule(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256) as dec:
        with pytest.raises(ValueError, match="drafter must be"):
            dec.generate("the cat", drafter="magic")
        with pytest.raises(ValueError, match="acceptance must be"):
            dec.generate("the cat", acceptance="vote")
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        with pytest.raises(ValueError, match="needs a draft model"):
            dec.generate("the cat", drafter="model+lookup")
