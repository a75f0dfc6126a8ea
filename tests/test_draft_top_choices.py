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
        with pytest.raises(SystemExit, match="vocabulary is not the target's"):
            bench.prompt_agreement(dec, [(dec.tokenize("the cat sat"), [5, 6])])


def test_prompt_agreement_is_whole_for_the_target_itself_and_partial_for_a_noisy_copy(bench, tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.target_q, n_ctx=512) as dec:
        prompt = dec.tokenize("the cat sat on the mat and the dog sat on the log")
        answer = dec.generate(prompt, max_tokens=40, temperature=0.0, ignore_eos=True).tokens
        assert bench.prompt_agreement(dec, [(prompt, answer)]) == [(1.0, 1.0)]
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        pairs = [(prompt, answer)]
        for text in ("a b c d", "hello there", "one two three four five"):
            start = dec.tokenize(text)
            pairs.append((start, dec.generate(start, max_tokens=40, temperature=0.0, ignore_eos=True).tokens))
        shares = bench.prompt_agreement(dec, pairs)
        assert all(0.0 < on_prompt <= 1.0 for on_prompt, _ in shares) and any(p < 1.0 for p, _ in shares)
        # over each answer, the draft's first choice is the target's where the answer's token (the
        # target's greedy choice) ranks first among the draft's
        firsts = [float((bench.ranks(dec, [pair]) == 0).mean()) for pair in pairs]
        assert [a for _, a in shares] == pytest.approx(firsts)
        assert any(0.0 < a < 1.0 for _, a in shares)
        # the prompt's positions and the answer's are every position but the last, each once: read as
        # one answer to the prompt's first token, the same text makes the same agreement in all
        for (start, answer), (on_prompt, on_answer) in zip(pairs, shares):
            [(_, whole)] = bench.prompt_agreement(dec, [(start[:1], list(start[1:]) + list(answer))])
            n = len(start) + len(answer) - 1
            assert whole * n == pytest.approx(on_prompt * (len(start) - 1) + on_answer * len(answer))
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.far_draft, n_ctx=512) as dec:
        [(on_prompt, on_answer)] = bench.prompt_agreement(dec, [(prompt, answer)])
        assert on_prompt < 0.7 and on_answer < 0.7
