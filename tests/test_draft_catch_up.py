"""How the draft reads a step's new tokens (draft_catch_up): one batch, or one decode per token as
on a GPU that replays recorded graphs. Either way every token reaches its position.

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
    # every step after the first catches up on two tokens (its last draft, never decoded, and the
    # target's own): one decode as a batch, two token by token; the first reads the prompt's last
    assert tokens.stats.n_draft_calls - batch.stats.n_draft_calls == batch.stats.n_steps - 1


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_token_by_token_catch_up_on_a_real_draft(tiny, temperature):
    """A smaller draft, rejections included: seeded runs are reproducible and greedy output is the
    target's."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, draft_catch_up="tokens") as dec:
        prompt = dec.tokenize("what some of the")
        r = dec.generate(prompt, max_tokens=48, temperature=temperature, seed=3, ignore_eos=True)
        again = dec.generate(prompt, max_tokens=48, temperature=temperature, seed=3, ignore_eos=True)
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
