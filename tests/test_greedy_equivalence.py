"""Greedy output with a draft equals greedy output without one.

The numerics caveat (shared NOTES): llama.cpp's F32 matrix products take another kernel for a
batch than for one token, so the target's logits for the same position can differ slightly
between the verification batch and one-token decoding. Greedy speculative output can then
legitimately differ from one-token greedy output where the target's top two logits are closer
than that difference. The tests are built around it:

* Batch-invariant models (Q4_1 weights; the premise is itself tested) must give IDENTICAL output
  for every prompt and n_draft.
* On the default pair (F32 target) the test measures, on the same text, the largest difference
  between batched and one-token logits (delta). The outputs must be identical, or first differ at
  a position where the target's top-2 logit gap is at most 2 * delta (each of the two logits may
  move by delta). Any other difference fails.
"""

from __future__ import annotations


import numpy as np
import pytest

import specllama

PROMPTS = ["the cat is", "she was out with", "what some of the", "<|im_start|>user\nhi<|im_end|>\n"]
N_DRAFTS = [1, 2, 4, 8, 16]


def _logits_one_by_one(model, tokens, n_ctx=512):
    ctx = specllama.Context(model, n_ctx=n_ctx)
    return np.stack([ctx.decode([t], all_logits=True)[0] for t in tokens])


def test_quantized_tiny_model_is_batch_invariant(tiny):
    model = specllama.Model(tiny.target_q)
    tokens = model.tokenize("the cat is on the hot word and they were all there")
    batched = specllama.Context(model, n_ctx=512).decode(tokens, all_logits=True)
    np.testing.assert_array_equal(batched, _logits_one_by_one(model, tokens))


# prices of a cheap draft, for the adaptive rule (StepPrices): it then drafts every step
CHEAP_DRAFT = specllama.StepPrices(draft_ms=1.0, verify_ms=10.0, verify_token_ms=1.0)


@pytest.mark.parametrize("adaptive", [False, True])
@pytest.mark.parametrize("n_draft", N_DRAFTS)
def test_greedy_identical_on_batch_invariant_pair(tiny, n_draft, adaptive):
    # measured, this draft costs as much as its target and the adaptive loop would pause it; priced
    # as a cheap draft, every step drafts whatever the machine's load
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=48, temperature=0, speculative=False, ignore_eos=True,
                                 prices=CHEAP_DRAFT)
            spec = dec.generate(prompt, max_tokens=48, temperature=0, n_draft=n_draft, adaptive=adaptive,
                                ignore_eos=True, prices=CHEAP_DRAFT)
            assert spec.tokens == plain.tokens, f"prompt {prompt!r}, n_draft {n_draft}"
            assert spec.stats.n_drafted > 0


def test_greedy_pair_has_rejections(tiny):
    """The equality above is only meaningful if the draft is sometimes wrong (drafting 4 tokens
    every step: the adaptive rule may leave this draft out on a machine where it costs what its
    target does)."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        s = dec.generate(PROMPTS[0], max_tokens=48, temperature=0, n_draft=4, adaptive=False,
                         ignore_eos=True).stats
    assert 0 < s.n_accepted < s.n_drafted


CHAT_PROMPTS = [
    "Write a short poem about the sea.",
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
]


def near_tie_reference(dec, question, n_tokens):
    """Plain greedy output for a chat question on dec, and a check for another output: it must
    equal plain, or first differ where the target's top-2 gap is within twice the measured
    difference between batched and one-token logits on the same text."""
    model = dec.target_model
    prompt = dec.tokenize(dec.apply_chat_template([{"role": "user", "content": question}]))
    plain = dec.generate(prompt, max_tokens=n_tokens, temperature=0, speculative=False).tokens
    text = prompt + plain
    seq = _logits_one_by_one(model, text, n_ctx=1024)[len(prompt) - 1:]
    batched = specllama.Context(model, n_ctx=1024).decode(text, all_logits=True)[len(prompt) - 1:]
    delta = float(np.abs(seq - batched).max())
    top2 = np.sort(seq, axis=1)[:, -2:]
    gaps = top2[:, 1] - top2[:, 0]

    def check(out, what):
        if out == plain:
            return
        i = next((k for k, (a, b) in enumerate(zip(out, plain)) if a != b), min(len(out), len(plain)))
        assert i < len(gaps) and gaps[i] <= 2 * delta, (
            f"{question!r} {what}: output differs at token {i}, where the target's top-2 gap is "
            f"{gaps[i] if i < len(gaps) else float('nan'):.4f} > 2 * batch delta {delta:.4f}")

    return prompt, check


@pytest.mark.default_pair
@pytest.mark.slow
def test_greedy_equivalent_on_default_pair(default_decoder):
    dec = default_decoder
    n_tokens = 64
    for question in CHAT_PROMPTS:
        prompt, check = near_tie_reference(dec, question, n_tokens)
        for n_draft, adaptive in [(n, False) for n in N_DRAFTS] + [(10, True)]:
            spec = dec.generate(prompt, max_tokens=n_tokens, temperature=0, n_draft=n_draft, adaptive=adaptive).tokens
            check(spec, f"n_draft={n_draft}")
