"""The low-level handles are enough to write a speculative loop in Python: a greedy loop built
only on Context.decode / rollback reproduces the native loop's output and acceptance."""

from __future__ import annotations

import numpy as np

import specllama


def python_greedy_speculative(target, draft, prompt, max_tokens, n_draft):
    tgt = specllama.Context(target, n_ctx=512)
    dft = specllama.Context(draft, n_ctx=512)
    tgt.decode(prompt[:-1], all_logits=False)
    seq = list(prompt)
    n_drafted = n_accepted = 0
    while len(seq) - len(prompt) < max_tokens:
        # draft: catch up on what the draft cache lacks, then one token at a time
        common = 0
        while common < min(dft.n_past, len(seq) - 1) and dft.tokens[common] == seq[common]:
            common += 1
        dft.rollback(common)
        logits = dft.decode(seq[common:], all_logits=False)[-1]
        # the first step is plain, as the native loop's (its token comes as soon as the prompt is in)
        n = min(n_draft, max_tokens - (len(seq) - len(prompt)) - 1) if len(seq) > len(prompt) else 0
        drafts = []
        for i in range(n):
            drafts.append(int(np.argmax(logits)))
            if i + 1 < n:
                logits = dft.decode([drafts[-1]], all_logits=False)[-1]
        # verify [last, d1..dn] in one batch; keep the agreeing prefix plus the target's token
        out = tgt.decode([seq[-1]] + drafts, all_logits=True)
        choice = [int(np.argmax(row)) for row in out]
        k = 0
        while k < len(drafts) and drafts[k] == choice[k]:
            k += 1
        tgt.rollback(len(seq) + k)
        seq += drafts[:k] + [choice[k]]
        n_drafted += len(drafts)
        n_accepted += k
    return seq[len(prompt):][:max_tokens], n_drafted, n_accepted


def test_python_loop_matches_native_loop(tiny):
    target, draft = specllama.Model(tiny.target_q), specllama.Model(tiny.draft_q)
    prompt = target.tokenize("the cat is on the")
    got, n_drafted, n_accepted = python_greedy_speculative(target, draft, prompt, 40, 4)
    # the Python loop processes the prompt with the draft itself (the native one would copy the
    # target's keys and values: the tiny pair has one shape)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512, share_prefill=False) as dec:
        r = dec.generate(prompt, max_tokens=40, temperature=0, n_draft=4, adaptive=False, ignore_eos=True)
    assert got == r.tokens
    assert (n_drafted, n_accepted) == (r.stats.n_drafted, r.stats.n_accepted)
    assert 0 < n_accepted < n_drafted


def test_context_errors(tiny):
    model = specllama.Model(tiny.target)
    ctx = specllama.Context(model, n_ctx=256, n_batch=16)
    import pytest

    with pytest.raises(ValueError, match="outside the vocabulary"):
        ctx.decode([1, 99999])
    with pytest.raises(ValueError, match="context full"):
        ctx.decode([5] * 300, all_logits=False)
    assert ctx.n_past == 0  # nothing half-done
    logits = ctx.decode([5] * 40, all_logits=True)  # more than n_batch: decoded in chunks
    assert logits.shape == (40, model.n_vocab) and ctx.n_past == 40
    with pytest.raises(ValueError, match="negative"):
        ctx.rollback(-1)
