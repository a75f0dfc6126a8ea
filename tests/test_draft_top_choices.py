"""benchmarks/draft_top_choices.py: the rank of a greedy target's token among the draft's choices,
and the expected tokens per step it derives from them."""

from __future__ import annotations

import pytest

import specllama
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("draft_top_choices.py")


@pytest.mark.parametrize("a", [0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("g", [1, 4, 8])
def test_tokens_per_step_is_leviathans_for_a_chain_and_adds_the_caught_misses(bench, a, g):
    # a chain alone: Leviathan et al.'s (1 - a^(g+1)) / (1 - a)
    assert bench.tokens_per_step(a, 0.0, g) == pytest.approx((1 - a ** (g + 1)) / (1 - a))
    # a second choice caught at rate a2 adds one token wherever the chain reaches a miss it catches
    a2 = (1 - a) / 2
    extra = sum(a ** j * a2 for j in range(g))
    assert bench.tokens_per_step(a, a2, g) == pytest.approx((1 - a ** (g + 1)) / (1 - a) + extra)


def _ranks(bench, tiny, draft, n=24):
    """The ranks of the tiny target's greedy answers to three prompts in draft's logits."""
    with specllama.SpeculativeDecoder(tiny.target_q, draft, n_ctx=512) as dec:
        pairs = []
        for text in ("the cat sat", "a b c d", "hello there"):
            prompt = dec.tokenize(text)
            pairs.append((prompt, dec.generate(prompt, max_tokens=n, temperature=0.0, ignore_eos=True).tokens))
        return bench.ranks(dec, pairs), sum(len(a) for _, a in pairs)


def test_ranks_are_first_choices_for_the_target_itself_and_not_for_an_unrelated_draft(bench, tiny):
    # Q4_1: its batched and one-token logits are bitwise equal, so the target's own greedy tokens
    # are its first choices in one pass over prompt and answer
    own, n = _ranks(bench, tiny, tiny.target_q)
    assert own.size == n and (own == 0).all()
    far, n = _ranks(bench, tiny, tiny.far_draft)
    assert far.size == n and (far > 0).mean() > 0.3


def test_a_draft_of_another_vocabulary_is_refused(bench, tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.other_vocab, n_ctx=256) as dec:
        with pytest.raises(SystemExit, match="vocabulary is not the target's"):
            bench.ranks(dec, [(dec.tokenize("the cat sat"), [5, 6])])
