"""Device sampling (GenerateOptions.device_sampling): the sampling chain runs inside llama_decode
(here on the CPU backend, which runs llama.cpp's backend samplers too, when asked: by default only
models offloaded to a GPU do) and only each row's candidates come back. It gives the host path's
greedy output, samples the target's distribution (chi-square against the host chain over the full
logits, with negative controls that fail), reads back what it says it does, and falls back to the
host, exactly and saying why, where the device cannot run the chain."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import specllama
from conftest import in_threads
from tiny_models import parts_only_at_near_ties
from test_sampling_end_to_end import _dist_after, first_two_tokens, pvalue_or_zero

PROMPTS = ["the cat is on the", "she was", "what some of the"]
# a chain with every stage at work: top-k on the device, top-p and min-p masks and a temperature
CHAIN = dict(temperature=0.7, top_k=12, top_p=0.9, min_p=0.05)


@pytest.fixture()
def dec(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256) as d:
        yield d


@pytest.fixture(params=["padded", "exact"])
def shaped_dec(tiny, request):
    """A decoder whose verifications have one shape on both paths (verify_shape "auto" pads them on
    a GPU only where the device samples)."""
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256, verify_shape=request.param) as d:
        yield d


def _on_both_paths(dec, prompt, **kw):
    """The generation of prompt sampled on the device and on the host, on the same batches, whose
    logits a GPU's kernels make depend on their length: each from an empty cache (the first token's
    logits come from the prompt's pass, and a prompt found in the cache is not decoded again), with
    fixed draft lengths (the adaptive rule's follow its timings)."""
    got = []
    for on in (True, False):
        dec.reset()
        got.append(dec.generate(prompt, ignore_eos=True, adaptive=False, device_sampling=on, record_steps=True, **kw))
    assert got[0].stats.sampling == "device" and got[1].stats.sampling == "host"
    assert [t.n_verified for t in got[0].stats.steps] == [t.n_verified for t in got[1].stats.steps]
    return got


@pytest.mark.parametrize("kw", [dict(drafter="model", n_draft=4), dict(drafter="lookup"), dict(speculative=False)],
                         ids=["model", "lookup", "plain"])
def test_greedy_output_is_the_host_paths(shaped_dec, kw):
    for prompt in PROMPTS:
        device, host = _on_both_paths(shaped_dec, prompt, max_tokens=40, temperature=0, **kw)
        assert device.stats.host_sampling_reason == ""
        assert host.stats.host_sampling_reason == "device sampling off"
        assert device.tokens == host.tokens, prompt


@pytest.mark.parametrize("kw", [dict(drafter="model", n_draft=4), dict(drafter="lookup"), dict(speculative=False),
                                dict(drafter="model", n_draft=4, acceptance="match"),
                                dict(drafter="model", n_draft=4, logprobs=3)],
                         ids=["model", "lookup", "plain", "match rule", "logprobs"])
def test_sampled_output_is_the_host_paths_with_one_seed(shaped_dec, kw):
    """The device returns the top k candidates and their logits; the host applies the rest of the
    chain to them as it does after its own top-k: the same distributions, the same draws (and the
    same log-probabilities, read from the chain's distribution)."""
    for seed in range(4):
        for prompt in PROMPTS:
            got = _on_both_paths(shaped_dec, prompt, max_tokens=30, seed=seed, **CHAIN, **kw)
            assert got[0].tokens == got[1].tokens, (prompt, seed)
            if "logprobs" in kw:
                assert len(got[0].logprobs) == 30
                assert [(lp.token, lp.logprob, lp.top) for lp in got[0].logprobs] == \
                       [(lp.token, lp.logprob, lp.top) for lp in got[1].logprobs]


def test_by_default_models_on_the_cpu_sample_on_the_host(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256, n_gpu_layers=0, n_gpu_layers_draft=0) as d:
        s = d.generate("the cat", max_tokens=8, temperature=0.8, seed=1, drafter="model").stats
    assert s.sampling == "host" and s.host_sampling_reason == "auto: the model runs on the CPU"


@pytest.mark.skipif(not specllama._core.default_devices(), reason="no GPU visible (SPECLLAMA_TEST_GPU=1 on a CUDA build)")
def test_by_default_offloaded_models_sample_on_the_device(dec):
    assert dec.n_gpu_layers != 0 and dec.n_gpu_layers_draft != 0  # (placed on the GPU by default)
    s = dec.generate("the cat", max_tokens=8, temperature=0.8, seed=1, drafter="model").stats
    assert s.sampling == "device" and s.host_sampling_reason == ""


def test_greedy_output_across_chain_switches(tiny, dec):
    """Greedy, sampled and host generations in turn on one decoder (each change of chain rebuilds
    llama.cpp's graphs) give what a fresh plain decode gives."""
    ctx = specllama.Context(specllama.Model(tiny.target, n_gpu_layers=dec.n_gpu_layers), n_ctx=256)  # (where dec is)
    prompt = dec.target_model.tokenize("the cat")
    expected = []
    toks = list(prompt)
    for _ in range(20):
        expected.append(int(np.argmax(ctx.decode(toks, all_logits=False)[-1])))
        toks = [expected[-1]]
    for device in (True, False, True):
        dec.generate("she was", max_tokens=5, temperature=0.8, seed=1, device_sampling=device)
        got = dec.generate(prompt, max_tokens=20, temperature=0, ignore_eos=True, device_sampling=device)
        assert got.tokens == expected


@pytest.mark.parametrize("slot", [False, True], ids=["decoder", "slot"])
def test_sampled_output_follows_the_target(tiny, slot):
    target = specllama.Model(tiny.target)
    prompt = target.tokenize("the cat is on the")
    p1 = _dist_after(target, prompt, CHAIN)
    p2 = np.zeros_like(p1)
    for x in np.flatnonzero(p1):
        p2 += p1[x] * _dist_after(target, prompt + [int(x)], CHAIN)
    n = 2500
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, n, slot=slot,
                                                   device_sampling=True)
    assert n_rejected > n // 5, "the pair must disagree often for this test to mean anything"
    assert pvalue_or_zero(firsts, p1) > 1e-4
    assert pvalue_or_zero(seconds, p2) > 1e-4
    # negative controls: the chain without its top-p and min-p masks, and at another temperature
    loose = _dist_after(target, prompt, dict(CHAIN, top_p=1.0, min_p=0.0))
    assert pvalue_or_zero(firsts, loose) < 1e-6
    warmer = _dist_after(target, prompt, dict(CHAIN, temperature=1.0))
    assert pvalue_or_zero(firsts, warmer) < 1e-6


def test_what_comes_back(dec):
    """A row per token in plain decoding: the argmax's id and logit greedy (8 bytes), and with
    top_k 40 the 40 candidates' ids and logits (320 bytes), against n_vocab floats from the host
    path."""
    n_vocab = dec.target_model.n_vocab
    for temperature, row in ((0.0, 8), (0.8, 8 * 40)):
        s = dec.generate("what some of the", max_tokens=12, ignore_eos=True, speculative=False,
                         temperature=temperature, top_k=40, device_sampling=True).stats
        assert s.sampling == "device" and s.logits_bytes == 12 * row
        s = dec.generate("what some of the", max_tokens=12, ignore_eos=True, speculative=False,
                         temperature=temperature, top_k=40, device_sampling=False).stats
        assert s.logits_bytes == 12 * 4 * n_vocab
    # speculative: at least the verified rows (each at least 8 bytes), far below whole rows; every
    # row of a verification comes back, the copies of a padded one's (on a GPU) as well
    s = dec.generate("what some of the", max_tokens=40, ignore_eos=True, temperature=0.8, seed=1, n_draft=4,
                     adaptive=False, drafter="model", device_sampling=True, record_steps=True).stats
    assert s.sampling == "device" and s.n_drafted > 0
    verified = sum(t.n_verified for t in s.steps)
    assert verified >= s.n_drafted + s.n_steps
    assert 8 * (s.n_drafted + s.n_steps) <= s.logits_bytes <= 8 * 40 * (s.n_drafted + verified)


@pytest.mark.parametrize("kw, reason", [
    (dict(grammar='root ::= [a-z ]+'), "grammar"),
    (dict(logit_bias={5: 1.0}), "logit bias or penalties"),
    (dict(repeat_penalty=1.3), "logit bias or penalties"),
    (dict(top_k=0), "top_k 0 (the device runs 1..{k})"),
    (dict(top_k=2000), "top_k 2000 (the device runs 1..{k})"),
    (dict(top_k="n_vocab"), "top_k {n} (the device runs 1..{k})"),
], ids=["grammar", "bias", "penalty", "top_k 0", "top_k large", "top_k the vocabulary"])
def test_fallback_is_the_host_path_and_says_why(dec, kw, reason):
    """Where the device cannot run the chain, the generation samples on the host: with one seed it
    draws exactly what device_sampling=False draws. (A top_k of the whole vocabulary, or more than
    1024, would bring rows back whole.)"""
    n = dec.target_model.n_vocab
    kw = {key: n if value == "n_vocab" else value for key, value in kw.items()}
    on = dec.generate("the cat", max_tokens=24, temperature=0.8, seed=3, n_draft=3, adaptive=False,
                      device_sampling=True, **kw)
    off = dec.generate("the cat", max_tokens=24, temperature=0.8, seed=3, n_draft=3, adaptive=False,
                       device_sampling=False, **kw)
    assert on.stats.sampling == "host"
    assert on.stats.host_sampling_reason == reason.format(k=min(1024, n - 1), n=n)
    assert on.tokens == off.tokens


def test_partial_fallbacks(dec, tiny):
    # greedy log-probabilities need a softmax over every token: the target's rows come back whole
    s = dec.generate("the cat", max_tokens=8, temperature=0, logprobs=2, drafter="model", device_sampling=True).stats
    assert s.sampling == "host (target), device (draft)"
    assert s.host_sampling_reason == "log-probabilities of greedy decoding"
    # sampled log-probabilities are read from the chain's distribution: the device runs it
    assert dec.generate("the cat", max_tokens=8, temperature=0.8, seed=1, logprobs=2,
                        device_sampling=True).stats.sampling == "device"
    # DSI's drafter and servers sample where mode si would
    dsi = dec.generate("the cat", max_tokens=8, temperature=0, mode="dsi", sp=2, device_sampling=True).stats
    assert dsi.sampling == "device" and dsi.host_sampling_reason == ""
    dsi = dec.generate("the cat", max_tokens=8, temperature=0.8, top_k=0, seed=1, mode="dsi", sp=2,
                       device_sampling=True).stats
    assert dsi.sampling == "host" and dsi.host_sampling_reason.startswith("top_k 0")
    # a draft of another vocabulary masks the tokens the target lacks on the host
    with specllama.SpeculativeDecoder(tiny.target, tiny.bigger_vocab, n_ctx=256) as cross:
        s = cross.generate("the cat", max_tokens=8, temperature=0.8, seed=1, drafter="model",
                           device_sampling=True).stats
        assert s.sampling == "device (target), host (draft)"
        assert s.host_sampling_reason == "draft of another vocabulary"


def test_slots_sample_on_the_device(tiny):
    """Slots (one context per model, each slot a sequence of it) run each slot's chain on its own
    sequence's rows of the merged decodes: alone, a slot gives the host path's output with one
    seed (each generation from an empty cache, so that both decode the same batches); together,
    with one slot sampling on the host beside them (llama.cpp then returns raw logits as well) or
    none, the greedy outputs part from those alone only at near ties (merged decodes change the
    logits by llama.cpp's batch numerics) and every slot says where it sampled."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as first:
        slots = first.slots(3, max_wait_ms=2_000)
        prompts = [first.tokenize(p) for p in PROMPTS]
        for seed, kw in ((0, dict(temperature=0, n_draft=4)), (1, dict(CHAIN, adaptive=False, n_draft=4)),
                         (2, dict(speculative=False, **CHAIN))):
            for p in prompts:
                got = []
                for on in (True, False):
                    slots[1].reset()
                    got.append(slots[1].generate(p, max_tokens=24, ignore_eos=True, seed=seed, device_sampling=on,
                                                 **kw))
                assert (got[0].stats.sampling, got[1].stats.sampling) == ("device", "host")
                assert got[0].tokens == got[1].tokens, (p, kw)
                assert got[0].stats.logits_bytes * 10 < got[1].stats.logits_bytes  # (a vocabulary of 327)
        kinds = [dict(temperature=0, n_draft=4, device_sampling=True),
                 dict(CHAIN, seed=3, adaptive=False, n_draft=4, device_sampling=True),
                 dict(temperature=0, n_draft=3, device_sampling=False)]
        alone = [[slots[i].generate(p, max_tokens=30, ignore_eos=True, **kinds[i]).tokens for p in prompts]
                 for i in range(3)]
        for host_slot in (True, False):
            if not host_slot:
                kinds[2] = dict(kinds[2], device_sampling=True)
            before = slots[0].slot_batching
            start = threading.Barrier(3)

            def run(i):
                start.wait(60)
                return [slots[i].generate(p, max_tokens=30, ignore_eos=True, **kinds[i]) for p in prompts]

            res = in_threads(run, [(i,) for i in range(3)])
            out = [[r.tokens for r in rs] for rs in res]
            stats = [[r.stats.sampling for r in rs] for rs in res]
            after = slots[0].slot_batching
            assert after["chunks"] - before["chunks"] > after["decodes"] - before["decodes"]  # (merged)
            assert stats[:2] == [["device"] * 3] * 2
            assert stats[2] == ["host" if host_slot else "device"] * 3
            for i in (0, 2):  # greedy
                for p, a, b in zip(prompts, alone[i], out[i]):
                    assert parts_only_at_near_ties(tiny.target_q, p, a, b), (i, a, b)
            assert [len(t) for t in out[1]] == [30] * 3
        for slot in slots:
            slot.close()


@pytest.mark.parametrize("chain", [dict(temperature=0.8, top_p=0.95, min_p=0.05),
                                   dict(temperature=1.3, top_p=0.5, min_p=0.0)])
def test_candidates_read_as_the_host_reads_the_whole_row(chain):
    """A row's candidates, as the device returns them (unordered), give the host chain's distribution
    to the bit, ordered as top-k orders a whole row: most likely first, equal logits by id, -0 equal
    to +0. Integer logits make ties everywhere, at the top-p cut included."""
    rng = np.random.default_rng(5)
    n_vocab, n = 3000, 40
    for _ in range(300):
        logits = rng.integers(-3, 4, n).astype(np.float32)
        logits[(logits == 0) & (rng.random(n) < 0.5)] = np.float32(-0.0)
        ids = rng.choice(n_vocab, n, replace=False).astype(np.int32)
        got_ids, got_p = specllama._core.candidates_distribution(logits, ids.tolist(), **chain)
        order = np.lexsort((ids, -logits))  # (-(-0.0) == 0.0: signed zeros tie)
        assert got_ids == ids[order][:len(got_ids)].tolist()
        row = np.full(n_vocab, -np.inf, np.float32)
        row[ids] = logits
        want = specllama.sampling_distribution(row, top_k=n, **chain)
        got = np.zeros(n_vocab, np.float32)
        got[got_ids] = got_p
        assert np.array_equal(got, want)
