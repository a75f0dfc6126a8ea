"""How the decodes are shaped for a GPU that replays a recorded graph for a decode shaped like the
one before: the draft reads a step's new tokens in one batch or one decode per token
(draft_catch_up), the target verifies the drafts alone or padded to one length (verify_shape).
Either way every token reaches its position and the rows the acceptance rule reads are the same.

A model as its own draft on the batch-invariant Q4_1 tiny model proposes exactly the target's
greedy tokens, so every draft is kept only if each caught-up token sits where it belongs.
"""

from __future__ import annotations

import pytest

import specllama

PROMPT = "she was out with the one that was hot and they were all there"


def _gen(dec, prompt, n=48, **kw):
    return dec.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True, n_draft=4, adaptive=False, **kw)


def test_token_by_token_catch_up_keeps_every_draft(tiny):
    runs = {}
    for how in ("batch", "tokens"):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=512, share_prefill=False,
                                          draft_catch_up=how) as dec:
            assert dec.draft_catch_up_mode == how
            prompt = dec.tokenize(PROMPT)
            r = _gen(dec, prompt)
            assert r.stats.n_drafted > 0 and r.stats.n_accepted == r.stats.n_drafted
            assert r.tokens == _gen(dec, prompt, speculative=False).tokens
            runs[how] = r
    batch, tokens = runs["batch"], runs["tokens"]
    assert tokens.tokens == batch.tokens
    assert tokens.stats.n_steps == batch.stats.n_steps
    # every step after the second catches up on two tokens (its last draft, never decoded, and the
    # target's own): one decode as a batch, two token by token. The first is plain, and the second
    # reads the target's first token alone after the draft's prompt pass (not counted here)
    assert tokens.stats.n_draft_calls - batch.stats.n_draft_calls == batch.stats.n_steps - 2


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_token_by_token_catch_up_on_a_real_draft(tiny, temperature):
    """A smaller draft, rejections included: seeded runs are reproducible and greedy output is the
    target's. (Fixed draft lengths: this draft costs what its target does, so the adaptive rule
    may leave it out, as timing on a busy machine decides.)"""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, draft_catch_up="tokens") as dec:
        prompt = dec.tokenize("what some of the")
        kw = dict(max_tokens=48, temperature=temperature, seed=3, ignore_eos=True, adaptive=False)
        r = dec.generate(prompt, **kw)
        again = dec.generate(prompt, **kw)
        assert again.tokens == r.tokens
        assert r.stats.n_drafted > 0 and r.stats.n_draft_calls > 0
        if temperature == 0:
            assert r.tokens == dec.generate(prompt, max_tokens=48, temperature=0, ignore_eos=True,
                                            speculative=False).tokens


def test_auto_batches_off_a_gpu_and_bad_values_are_refused(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        assert dec.draft_catch_up_mode == "batch"  # (this build offloads nothing)
    with specllama.SpeculativeDecoder(tiny.target_q, n_ctx=256) as dec:
        assert dec.draft_catch_up_mode == ""
    with pytest.raises(ValueError, match="draft_catch_up must be"):
        specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, draft_catch_up="single")
    with pytest.raises(ValueError, match="draft_catch_up must be"):  # (checked with no draft as well)
        specllama.SpeculativeDecoder(tiny.target_q, n_ctx=256, draft_catch_up="single")


def test_padded_verification_keeps_every_draft_and_drops_the_padding(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=512, verify_shape="padded") as dec:
        assert dec.verify_shape_mode == "padded"
        prompt = dec.tokenize(PROMPT)
        # a step may draft fewer than n_draft (the last ones, near max_tokens): those are padded
        r = dec.generate(prompt, max_tokens=47, temperature=0, ignore_eos=True, n_draft=6, adaptive=False)
        assert r.stats.n_drafted > 0 and r.stats.n_accepted == r.stats.n_drafted
        assert r.tokens == _gen(dec, prompt, n=47, speculative=False).tokens
        # the padding's cells are gone: the next turn goes on from the cached conversation
        again = _gen(dec, prompt + r.tokens, n=8)
        assert again.stats.n_prompt_cached >= len(prompt) + len(r.tokens) - 1
        assert again.tokens == _gen(dec, prompt + r.tokens, n=8, speculative=False).tokens


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_padded_verification_reads_the_same_rows(tiny, temperature):
    """On the batch-invariant tiny target a verification's rows do not depend on the batch's length,
    so a seeded generation is the same padded or not, drafts of a smaller model and their rejections
    included. The padding shows in the rows the target wrote out: n_draft + 1 per drafting step."""
    n_vocab = specllama.Model(tiny.target_q).n_vocab
    runs = {}
    for shape in ("exact", "padded"):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, verify_shape=shape) as dec:
            prompt = dec.tokenize("what some of the")
            r = dec.generate(prompt, max_tokens=64, temperature=temperature, seed=11, ignore_eos=True, n_draft=5,
                             drafter="model", adaptive=False, record_steps=True)
            rows = sum((6 if shape == "padded" else t.n_drafted + 1) if t.n_drafted else 1 for t in r.stats.steps)
            assert r.stats.logits_bytes == 4 * n_vocab * (rows + r.stats.n_draft_calls)
            runs[shape] = r
    assert runs["padded"].tokens == runs["exact"].tokens
    assert runs["padded"].stats.n_accepted == runs["exact"].stats.n_accepted
    # (steps that drafted fewer than five: the padded run wrote more rows)
    assert any(0 < t.n_drafted < 5 for t in runs["exact"].stats.steps)
    assert runs["padded"].stats.logits_bytes > runs["exact"].stats.logits_bytes


def test_verify_shape_auto_is_exact_off_a_gpu_and_bad_values_are_refused(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        assert dec.verify_shape_mode == "exact"  # (this build offloads nothing)
    with pytest.raises(ValueError, match="verify_shape must be"):
        specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, verify_shape="fixed")


def test_warm_up_keeps_the_caches_and_the_output(tiny):
    """warm_up (run on creation where a model is on a local GPU) decodes each shape once and rolls
    it back: a conversation cached before it is still there after, and every output is what the
    same calls give without it."""
    runs = {}
    for warm in (False, True):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, share_prefill=False) as dec:
            if warm:
                dec.warm_up()
                assert dec.cached_tokens() == [] and dec._native().draft_cached_tokens() == []
            prompt = dec.tokenize(PROMPT)
            first = _gen(dec, prompt, n=20)
            held, draft_held = dec.cached_tokens(), dec._native().draft_cached_tokens()
            assert len(held) > len(prompt)
            if warm:
                dec.warm_up()
                assert dec.cached_tokens() == held and dec._native().draft_cached_tokens() == draft_held
            turn = prompt + first.tokens + dec.tokenize(" and then")
            after = _gen(dec, turn, n=20)
            assert after.stats.n_prompt_cached == len(held)
            runs[warm] = (first.tokens, after.tokens)
    assert runs[True] == runs[False]


def test_warm_up_prices_the_targets_steps_for_the_adaptive_rule(tiny):
    """warm_up prices the target's plain step and a verification of the first batch for the
    adaptive rule, so that a new decoder's first generation spends no steps on pricing them: after
    it, each step of a generation but its first (and a last one with no room to draft) drafts or
    sits out a pause the prices predicted; without it, its second and third steps (on a CPU, where
    no step settles) are plain steps that price plain steps. The draft's decodes are left to the
    steps that draft to price."""
    prices = specllama.StepPrices(draft_ms=0.1, verify_ms=1.0, verify_token_ms=0.02)
    runs = {}
    for warm in (False, True):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
            if warm:
                dec.warm_up()
            m = dec._native().cost_model()
            assert (m["verify_ms"][0] > 0 and m["verify_ms"][3] > 0) == warm, m
            assert m["draft_ms"] == 0
            runs[warm] = dec.generate("the cat is", max_tokens=12, temperature=0, ignore_eos=True, prices=prices,
                                      record_steps=True)
    assert runs[True].tokens == runs[False].tokens

    def pricing(steps):  # steps that could not draft, but the first and the last: the rule's pricing steps
        return sum(1 for t in steps[1:-1] if t.n_max == 0)
    warm, cold = runs[True].stats.steps, runs[False].stats.steps
    assert pricing(warm) == 0 and len(warm) >= 3 and any(t.n_drafted or t.paused for t in warm)
    assert pricing(cold) == 2


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_padded_verification_with_the_chain_on_the_device(tiny, temperature):
    """The device chain samples every row of a padded verification, the padding's too; the rule reads
    the drafts' rows only: the same seeded output as the exact shape's."""
    out = {}
    for shape in ("exact", "padded"):
        with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, verify_shape=shape) as dec:
            r = dec.generate("what some of the", max_tokens=48, temperature=temperature, seed=5, ignore_eos=True,
                             n_draft=5, drafter="model", adaptive=False, device_sampling=True,
                             acceptance="rejection")  # (its steps' drafts stop short: padded rows)
            assert r.stats.sampling == "device" and r.stats.n_drafted > 0
            out[shape] = r
    assert out["padded"].tokens == out["exact"].tokens
    assert out["padded"].stats.logits_bytes > out["exact"].stats.logits_bytes  # (the padding's candidates)


def test_padded_verification_near_the_end_of_the_context_and_with_a_grammar(tiny):
    """Where the padding would not fit in the context the batch stays exact; a grammar masks the
    drafts' rows only. Greedy output is the target's either way."""
    grammar = 'root ::= (" the" | " cat" | " is" | " on" | " a" | " mat")+ "."'
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=64, verify_shape="padded") as dec:
        prompt = dec.tokenize(PROMPT)
        n = dec.n_ctx - len(prompt)  # up to the context's last position
        r = dec.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True, n_draft=8, adaptive=False)
        assert r.stats.n_accepted == r.stats.n_drafted > 0 and len(r.tokens) == n
        assert r.tokens == dec.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True,
                                        speculative=False).tokens
        kw = dict(max_tokens=24, temperature=0, grammar=grammar)
        g = dec.generate("the cat", n_draft=4, adaptive=False, **kw)
        assert g.stats.n_drafted > 0
        assert g.tokens == dec.generate("the cat", speculative=False, **kw).tokens
