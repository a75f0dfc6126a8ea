"""Fill-in-the-middle: llama.cpp's infill sampler, applied alike to the target's p and the draft's
q (exact under speculation), and llama-server's FIM prompt."""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
import pytest

import specllama
from test_sampling_end_to_end import _dist_after, _pvalue, first_two_tokens, pvalue_or_zero

CHAIN = dict(temperature=1.0, top_k=40, top_p=0.9, min_p=0.0)


def _llama_cpp_infill(vocab, logits: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """llama.cpp's own chain top_k -> top_p -> infill -> dist on logits: the dense distribution
    its dist sampler draws from (the softmax of the logits of the tokens left)."""
    n = len(logits)
    data = (llama_cpp.llama_token_data * n)()
    for i, v in enumerate(logits):
        data[i].id, data[i].logit, data[i].p = i, float(v), 0.0
    arr = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
    for smpl in (llama_cpp.llama_sampler_init_top_k(top_k), llama_cpp.llama_sampler_init_top_p(top_p, 1),
                 llama_cpp.llama_sampler_init_infill(vocab)):
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        llama_cpp.llama_sampler_free(smpl)
    kept = [(arr.data[i].id, arr.data[i].logit) for i in range(arr.size)]
    out = np.zeros(n)
    if len(kept) == 1:
        out[kept[0][0]] = 1.0
        return out
    ids = np.array([k[0] for k in kept])
    lg = np.array([k[1] for k in kept], dtype=np.float64)
    w = np.exp(lg - lg.max())
    out[ids] = w / w.sum()
    return out


@pytest.fixture(scope="module")
def llama_cpp_vocab(tiny):
    llama_cpp.llama_backend_init()
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    mdl = llama_cpp.llama_model_load_from_file(tiny.target.encode(), params)
    assert mdl
    yield llama_cpp.llama_model_get_vocab(mdl)
    llama_cpp.llama_model_free(mdl)


def test_the_infill_sampler_is_llama_cpps(tiny, llama_cpp_vocab):
    """On random logits over the tiny vocabulary (whose word tokens all start with a space, so
    that merges happen), with the end-of-text token made likely in some rows so that the sampler's
    end-of-generation branches are taken: the distribution is llama.cpp's own chain's."""
    model = specllama.Model(tiny.target)
    rng = np.random.default_rng(0)
    eos = model.eos
    branches = {"eog only": 0, "end here": 0, "merged": 0}
    for row in range(300):
        logits = rng.normal(0.0, 1.0 + 3.0 * rng.random(), model.n_vocab).astype(np.float32)
        if row % 3 == 0:
            logits[eos] = logits.max() + rng.normal(0.0, 2.0)
        ours = specllama.sampling_distribution(logits, **CHAIN, infill_model=model).astype(np.float64)
        theirs = _llama_cpp_infill(llama_cpp_vocab, logits, CHAIN["top_k"], CHAIN["top_p"])
        assert np.flatnonzero(ours).tolist() == np.flatnonzero(theirs).tolist(), row
        np.testing.assert_allclose(ours, theirs, atol=1e-5)
        support = np.flatnonzero(ours)
        if len(support) == 1 and model.is_eog(int(support[0])):
            branches["end here" if ours[eos] == 1.0 and logits[eos] < logits.max() else "eog only"] += 1
        plain = specllama.sampling_distribution(logits, **CHAIN)
        if np.count_nonzero(plain) > len(support):
            branches["merged"] += 1
    assert all(n > 0 for n in branches.values()), branches


def test_infill_leaves_greedy_decoding_alone(tiny):
    model = specllama.Model(tiny.target)
    logits = np.random.default_rng(1).normal(size=model.n_vocab).astype(np.float32)
    greedy = specllama.sampling_distribution(logits, temperature=0.0, infill_model=model)
    assert greedy[int(np.argmax(logits))] == 1.0


def test_infill_needs_a_bounded_top_k(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=128) as dec:
        with pytest.raises(ValueError, match="top_k"):
            dec.generate("the cat", max_tokens=2, temperature=1.0, top_k=0, infill=True)
        assert dec.generate("the cat", max_tokens=2, temperature=0.0, top_k=0, infill=True).tokens


N = 2000


@pytest.mark.slow
def test_speculative_sampling_with_the_infill_sampler_follows_the_controlled_target(tiny):
    """The first drafted token (the second emitted; the first step is plain) follows the target's
    distribution under the infill sampler, sum_x p1'(x) p2'(. | x), with a draft that disagrees
    often; the same samples do not fit the target's distribution without the sampler."""
    target = specllama.Model(tiny.target)
    prompt = target.tokenize("a word")
    marginal = {}
    for infill in (False, True):
        settings = dict(CHAIN, infill_model=target if infill else None)
        p1 = _dist_after(target, prompt, settings)
        p2 = np.zeros_like(p1)
        for x in np.flatnonzero(p1):
            p2 += p1[x] * _dist_after(target, prompt + [int(x)], settings)
        marginal[infill] = (p1, p2)
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, N, infill=True)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    p1, p2 = marginal[True]
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    assert pvalue_or_zero(seconds, marginal[False][1]) < 1e-6  # the test tells the two apart


def test_greedy_with_the_infill_sampler_is_plain_greedy_decoding(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256) as dec:
        plain = dec.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True, speculative=False)
        spec = dec.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True, infill=True)
    assert spec.tokens == plain.tokens
