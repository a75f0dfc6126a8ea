"""Logit bias and repetition penalties, applied alike to the target's p and the draft's q at every
position with that position's own history (drafted tokens included): the output is exactly the
controlled target's distribution, and greedy output with the draft is plain greedy decoding."""

from __future__ import annotations

import ctypes
import math

import llama_cpp
import numpy as np
import pytest

import specllama
from specllama.options import make_options
from test_sampling_end_to_end import _dist_after, _pvalue, first_two_tokens, pvalue_or_zero

CHAIN = dict(temperature=1.0, top_k=40, top_p=0.95, min_p=0.0)
PENALTIES = dict(repeat_penalty=1.8, repeat_last_n=8, presence_penalty=1.0, frequency_penalty=0.7)


def _llama_cpp_chain(logits, history, bias, penalties):
    """llama.cpp's own samplers: logit bias, penalties (with history accepted), top-k, top-p, min-p,
    temperature; the dense distribution its dist sampler draws from."""
    n = len(logits)
    data = (llama_cpp.llama_token_data * n)()
    for i, v in enumerate(logits):
        data[i].id, data[i].logit, data[i].p = i, float(v), 0.0
    arr = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
    biases = (llama_cpp.llama_logit_bias * len(bias))()
    for j, (t, b) in enumerate(bias.items()):
        biases[j].token, biases[j].bias = t, b
    pen = llama_cpp.llama_sampler_init_penalties(n, penalties["repeat_last_n"], penalties["repeat_penalty"],
                                                 penalties["frequency_penalty"], penalties["presence_penalty"])
    for t in history:
        llama_cpp.llama_sampler_accept(pen, t)
    chain = [llama_cpp.llama_sampler_init_logit_bias(n, len(bias), biases), pen,
             llama_cpp.llama_sampler_init_top_k(CHAIN["top_k"]), llama_cpp.llama_sampler_init_top_p(CHAIN["top_p"], 1),
             llama_cpp.llama_sampler_init_min_p(CHAIN["min_p"], 1)]
    for smpl in chain:
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(arr))
        llama_cpp.llama_sampler_free(smpl)
    ids = np.array([arr.data[i].id for i in range(arr.size)])
    lg = np.array([arr.data[i].logit for i in range(arr.size)], dtype=np.float64) / CHAIN["temperature"]
    out = np.zeros(n)
    w = np.exp(lg - lg.max())
    out[ids] = w / w.sum()
    return out


def test_the_controls_are_llama_cpps():
    """On random logits and histories with repeats: bias (-inf included) and penalties give the
    distribution llama.cpp's own samplers give."""
    rng = np.random.default_rng(0)
    n = 300
    for row in range(100):
        logits = rng.normal(0.0, 1.0 + 3.0 * rng.random(), n).astype(np.float32)
        history = [int(t) for t in rng.integers(0, 20, 30)]  # a few tokens, repeated: counts above 1
        bias = {int(t): float(rng.normal(0, 3)) for t in rng.integers(0, n, 5)}
        bias[int(np.argmax(logits))] = -math.inf
        pen = dict(PENALTIES, repeat_last_n=int(rng.integers(1, 40)))
        ours = specllama.sampling_distribution(logits, **CHAIN, logit_bias=bias, history=history, **pen)
        theirs = _llama_cpp_chain(logits, history, bias, pen)
        assert np.flatnonzero(ours).tolist() == np.flatnonzero(theirs).tolist(), row
        np.testing.assert_allclose(ours, theirs, atol=1e-5)


def _marginals(target, prompt, controls, window_without_first=False):
    """p1 after the prompt, and the second token's marginal sum_x p1(x) p2(. | prompt x) under the
    controls (window_without_first: p2 penalized as if x were not in the history, which a loop that
    forgot the drafted token would do)."""
    ctx_logits = lambda toks: specllama.Context(target, n_ctx=128).decode(toks, all_logits=False)[-1]  # noqa: E731
    p1 = specllama.sampling_distribution(ctx_logits(prompt), **CHAIN, history=prompt, **controls).astype(np.float64)
    p2 = np.zeros_like(p1)
    for x in np.flatnonzero(p1):
        hist = prompt if window_without_first else prompt + [int(x)]
        p2 += p1[x] * specllama.sampling_distribution(ctx_logits(prompt + [int(x)]), **CHAIN, history=hist,
                                                      **controls).astype(np.float64)
    return p1, p2


N = 2000


@pytest.mark.slow
@pytest.mark.parametrize("which", ["penalties", "logit_bias"])
def test_speculative_sampling_follows_the_controlled_target(tiny, which):
    """The first drafted token (the second emitted) follows sum_x p1'(x) p2'(. | x), where p2' is
    penalized with x in its history; with a draft that disagrees often. Negative control: the same
    samples do not fit the marginal whose second position forgets the drafted token (penalties), or
    the uncontrolled target's (bias). The tiny model's rows are peaked, so the penalties run with a
    bias lifting three tokens near the top: repeats are then likely and the penalty on the drafted
    token moves much of the second token's mass (total variation 0.3 from the forgetful marginal)."""
    target = specllama.Model(tiny.target)
    prompt = target.tokenize("she was out with")
    p_plain = _dist_after(target, prompt, CHAIN)
    favoured = [int(t) for t in np.argsort(p_plain)[-12:-9]]  # likely, not the likeliest
    if which == "penalties":
        controls = dict(PENALTIES, logit_bias={t: 15.0 for t in favoured})
    else:
        controls = {"logit_bias": {favoured[0]: 3.0, favoured[1]: 2.0, int(np.argmax(p_plain)): -math.inf}}
    p1, p2 = _marginals(target, prompt, controls)
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, N, **controls)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    if which == "logit_bias":
        wrong = _marginals(target, prompt, {})[1]
    else:
        wrong = _marginals(target, prompt, controls, window_without_first=True)[1]
    assert pvalue_or_zero(seconds, wrong) < 1e-6


@pytest.mark.parametrize("controls", [PENALTIES, {"logit_bias": {10: 4.0, 11: -math.inf}},
                                      dict(PENALTIES, logit_bias={12: 2.5})])
def test_greedy_with_controls_is_plain_greedy_decoding(tiny, controls):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        plain = dec.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True, speculative=False, **controls)
        spec = dec.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True, n_draft=4, adaptive=False,
                            **controls)
        uncontrolled = dec.generate("the cat", max_tokens=40, temperature=0, ignore_eos=True, speculative=False)
    assert spec.tokens == plain.tokens
    assert spec.stats.n_drafted > 0
    assert plain.tokens != uncontrolled.tokens  # the controls changed the output
    if "logit_bias" in controls:
        assert 11 not in spec.tokens


def test_bad_controls_are_refused(tiny):
    for fields, word in [(dict(repeat_penalty=0.0), "repeat_penalty"), (dict(repeat_last_n=-2), "repeat_last_n"),
                         (dict(presence_penalty=math.nan), "presence_penalty"),
                         (dict(logit_bias={3: math.inf}), "logit_bias")]:
        with pytest.raises(ValueError, match=word):
            make_options(**fields)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=128) as dec:
        with pytest.raises(ValueError, match="outside the vocabulary"):
            dec.generate("the cat", max_tokens=2, logit_bias={10**6: 1.0})
        everything = {t: -math.inf for t in range(dec.target_model.n_vocab)}
        with pytest.raises(ValueError, match="no token"):
            dec.generate("the cat", max_tokens=2, temperature=0, logit_bias=everything)
        assert dec.generate("the cat", max_tokens=2, temperature=0).tokens  # and the decoder goes on
