"""The KV cache's number formats (cache_type_k / cache_type_v, the draft's apart) and flash attention:
llama.cpp makes the caches it is asked for, speculation keeps the output the target's with that
cache (greedy: identical to plain decoding; sampled: the target's distribution, chi-square with a
negative control), and a format llama.cpp cannot take is a clear error.

The models here have a head size of 32 (width 64, 2 heads), which the quantized formats' blocks of
32 divide; the Q4_1 copies' batched and one-token logits are bitwise equal with each format (the
premise of the greedy test, itself tested).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import specllama
from specllama import _core, placement
from test_sampling_end_to_end import N, _pvalue, first_two_tokens, pvalue_or_zero, two_token_distributions
from tiny_models import perturbed, random_weights, vocab, write_model

PROMPTS = ["the cat is", "she was out with", "what some of the"]
TEXT = "the cat is on the hot word and they were all there"
CHEAP_DRAFT = specllama.StepPrices(draft_ms=1.0, verify_ms=10.0, verify_token_ms=1.0)


@pytest.fixture(scope="module")
def pair32(tmp_path_factory):
    """A tiny target, a draft that agrees often and one that does not, all with 32-wide heads, and
    Q4_1 copies of the first two."""
    d = tmp_path_factory.mktemp("heads32")
    toks = vocab()
    w = random_weights(len(toks), seed=1)
    out = {"target": write_model(d / "target.gguf", toks, w, n_head=2),
           "draft": write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), n_head=2),
           "far": write_model(d / "far.gguf", toks, random_weights(len(toks), seed=3), n_head=2)}
    out = {k: str(v) for k, v in out.items()}
    for name in ("target", "draft"):
        out[name + "_q"] = str(d / f"{name}_q4_1.gguf")
        specllama.quantize(out[name], out[name + "_q"], "q4_1")
    return type("Pair", (), out)


def _logits(path, batched, **context_kw):
    model = specllama.Model(path)
    ctx = specllama.Context(model, n_ctx=256, **context_kw)
    tokens = model.tokenize(TEXT)
    if batched:
        return ctx.decode(tokens, all_logits=True)
    return np.stack([ctx.decode([t], all_logits=True)[0] for t in tokens])


def test_each_format_is_the_cache_llama_cpp_makes(pair32, capfd):
    """llama.cpp's log of the cache it made has the footprint's size in that format (q8_0 is 34
    bytes per 32 values, q4_0 18: 17/32 and 9/32 of F16's 2 bytes per value)."""
    f16 = _core.model_footprint(pair32.target)["kv_bytes_per_position"]
    for k, v, share in (("q8_0", "q8_0", 34 / 64), ("q8_0", "q4_0", (34 + 18) / 128), ("f32", "f16", 6 / 4)):
        fp = _core.model_footprint(pair32.target, k, v)
        assert fp["kv_bytes_per_position"] == f16 * share
        _core.log_set_level(2)
        try:
            specllama.SpeculativeDecoder(pair32.target, n_ctx=4096, cache_type_k=k, cache_type_v=v).close()
        finally:
            _core.log_set_level(0)
        log = capfd.readouterr().err
        sizes = re.findall(r"llama_kv_cache: size = +([0-9.]+) MiB +\( *4096 cells", log)
        assert sizes and float(sizes[0]) == round(fp["kv_bytes_per_position"] * 4096 / (1 << 20), 2)
        assert f"K ({k})" in log and f"V ({v})" in log


def test_a_quantized_cache_changes_the_logits_and_flash_attention_is_applied(pair32):
    """The settings reach llama.cpp: each format gives other logits than F16's, and flash attention
    off other logits than on (the CPU has its kernels, so auto is on)."""
    base = _logits(pair32.target_q, True)
    assert np.array_equal(base, _logits(pair32.target_q, True, flash_attn="on"))
    assert not np.array_equal(base, _logits(pair32.target_q, True, flash_attn="off"))
    for fmt in ("q8_0", "q4_0"):
        assert not np.array_equal(base, _logits(pair32.target_q, True, cache_type_k=fmt, cache_type_v=fmt))


@pytest.mark.parametrize("fmt", ["q8_0", "q4_0"])
def test_the_q4_1_target_is_batch_invariant_with_a_quantized_cache(pair32, fmt):
    kw = dict(cache_type_k=fmt, cache_type_v=fmt)
    np.testing.assert_array_equal(_logits(pair32.target_q, True, **kw), _logits(pair32.target_q, False, **kw))


@pytest.mark.parametrize("formats", [("q8_0", "q8_0", "f16", "f16"), ("q4_0", "q4_0", "q4_0", "q4_0"),
                                     ("q8_0", "f16", "q4_0", "q8_0")])
def test_greedy_output_is_plain_decodings_with_the_same_cache(pair32, formats):
    """Identical for every prompt and draft length, fixed and adaptive, and on slots; the draft's
    formats change which drafts are kept, never the output."""
    kw = dict(zip(("cache_type_k", "cache_type_v", "cache_type_k_draft", "cache_type_v_draft"), formats))
    with specllama.SpeculativeDecoder(pair32.target_q, pair32.draft_q, n_ctx=256, **kw) as dec:
        slot = dec.slots(2)[1]
        for prompt in PROMPTS:
            # (at the same prices: a plain step measured on this machine beside priced drafting steps would make
            # the adaptive rule's pause depend on the machine's load)
            plain = dec.generate(prompt, max_tokens=40, temperature=0, speculative=False, ignore_eos=True,
                                 prices=CHEAP_DRAFT)
            for n_draft, adaptive in ((1, False), (4, False), (16, True)):
                for d in (dec, slot):
                    spec = d.generate(prompt, max_tokens=40, temperature=0, n_draft=n_draft, adaptive=adaptive,
                                      ignore_eos=True, prices=CHEAP_DRAFT)
                    assert spec.tokens == plain.tokens, (prompt, n_draft, d is slot)
                    assert spec.stats.n_drafted > 0
        slot.close()
    # the cache's effect is real: the same greedy replies without it differ somewhere
    with specllama.SpeculativeDecoder(pair32.target_q, n_ctx=256) as f16:
        with specllama.SpeculativeDecoder(pair32.target_q, n_ctx=256, cache_type_k="q4_0",
                                          cache_type_v="q4_0") as q4:
            replies = [(f16.generate(p, max_tokens=40, temperature=0, ignore_eos=True).tokens,
                        q4.generate(p, max_tokens=40, temperature=0, ignore_eos=True).tokens) for p in PROMPTS]
    assert any(a != b for a, b in replies)


@pytest.mark.slow
def test_sampled_output_follows_the_target_with_its_cache(pair32):
    """The first and second tokens of seeded generations (n_draft 2, an unrelated draft, so that
    the rule corrects many drafts) fit the target's distributions computed on a q4_0 cache; the
    same samples do not fit the target's with an F16 cache (the control: the test sees the cache)."""
    q4 = dict(cache_type_k="q4_0", cache_type_v="q4_0")
    prompt, p1, p2, _ = two_token_distributions(pair32.target, pair32.far, "the cat is on the", **q4)
    _, f16_p1, f16_p2, _ = two_token_distributions(pair32.target, pair32.far, "the cat is on the")
    firsts, seconds, n_rejected = first_two_tokens(pair32.target, pair32.far, prompt, decoder_kw=q4)
    assert n_rejected > N // 4, "the pair must disagree often for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    assert min(pvalue_or_zero(firsts, f16_p1), pvalue_or_zero(seconds, f16_p2)) < 1e-6


def test_a_shared_prefill_needs_the_same_formats(pair32):
    """The draft is the target in another number format: it takes the prompt's keys and values
    from the target's cache where both caches have one format, and processes the prompt itself
    where they differ; the output is the same."""
    with specllama.SpeculativeDecoder(pair32.target, pair32.target_q, n_ctx=256, cache_type_k="q8_0",
                                      cache_type_v="q8_0", cache_type_k_draft="q8_0",
                                      cache_type_v_draft="q8_0") as same:
        assert same.shares_prefill
        a = same.generate(PROMPTS[0], max_tokens=16, temperature=0, ignore_eos=True).tokens
    with specllama.SpeculativeDecoder(pair32.target, pair32.target_q, n_ctx=256, cache_type_k="q8_0",
                                      cache_type_v="q8_0") as differ:
        assert not differ.shares_prefill
        b = differ.generate(PROMPTS[0], max_tokens=16, temperature=0, ignore_eos=True).tokens
    with specllama.SpeculativeDecoder(pair32.target, pair32.target_q, n_ctx=256, cache_type_k="q8_0",
                                      cache_type_v="q8_0", share_prefill=False) as plain:
        assert plain.generate(PROMPTS[0], max_tokens=16, temperature=0, ignore_eos=True,
                              speculative=False).tokens == a == b


def test_bad_formats_are_clear_errors(pair32, tiny):
    with pytest.raises(ValueError, match=r"cache_type_k must be one of f32, f16, bf16, q8_0.*got 'q9'"):
        specllama.SpeculativeDecoder(pair32.target, n_ctx=256, cache_type_k="q9")
    with pytest.raises(ValueError, match="cache_type_v_draft must be one of"):
        specllama.SpeculativeDecoder(pair32.target, pair32.draft, n_ctx=256, cache_type_v_draft="Q8_0")
    with pytest.raises(ValueError, match="a quantized V cache .* needs flash attention"):
        specllama.SpeculativeDecoder(pair32.target, n_ctx=256, cache_type_v="q8_0", flash_attn="off")
    with pytest.raises(ValueError, match="flash_attn must be 'auto', 'on' or 'off', got 'yes'"):
        specllama.Context(specllama.Model(pair32.target), cache_type_k="f16", flash_attn="yes")
    with pytest.raises(TypeError, match="cache_type_k must be a string"):
        specllama.SpeculativeDecoder(pair32.target, n_ctx=256, cache_type_k=8)
    with pytest.raises(TypeError, match="cache_type_v_draft must be a string"):  # before the placement reads it
        placement_on_a_gpu = [("GPU0", 80 << 30)]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(_core, "default_devices", lambda: placement_on_a_gpu)
            specllama.SpeculativeDecoder(pair32.target, pair32.draft, n_ctx=256, cache_type_v_draft=None)
    with pytest.raises(ValueError, match="cache_type_k"):
        _core.model_footprint(pair32.target, "q9")
    # a head of 16 values: llama.cpp's reason, not "out of memory"
    with pytest.raises(ValueError, match="block size 32 does not divide n_embd_head_k=16"):
        specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256, cache_type_k="q8_0")
    with pytest.raises(ValueError, match="does not divide n_embd_head_v=16"):
        specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256, cache_type_v_draft="q4_0")


def test_the_placement_counts_the_caches_format(pair32):
    """With room for the model and an F16 cache of n_ctx positions only, a q8_0 cache leaves room
    that an F16 one does not: the fit is made with the format the cache will have."""
    fp16 = _core.model_footprint(pair32.target)
    n_ctx = 1 << 16
    room = placement.MARGIN + placement.whole_bytes(fp16, n_ctx, 512) - 1
    kw = dict(device=None, device_draft=None, n_ctx=n_ctx, n_batch=512, devices=lambda: [("GPU0", room)])
    with pytest.warns(RuntimeWarning, match="layers are offloaded"):
        f16 = placement.choose(pair32.target, None, None, None, **kw)
    q8 = placement.choose(pair32.target, None, None, None, cache_types=("q8_0", "q8_0", "f16", "f16"), **kw)
    assert f16.target >= 0 and q8.target == -1


def test_the_cli_takes_llama_cpps_flags(pair32, tmp_path):
    """-ctk/-ctv/-ctkd/-ctvd/-fa as llama.cpp's programs spell them: the reply is the Python API's
    with the same settings; a format not known is a usage error naming the choices."""
    cmd = [sys.executable, "-m", "specllama", "generate", PROMPTS[1], "-m", pair32.target_q, "-d", pair32.draft_q,
           "-c", "256", "-n", "12", "--temp", "0"]
    fmt = ["-ctk", "q8_0", "-ctv", "q4_0", "-ctkd", "q4_0", "-ctvd", "q8_0", "-fa", "on"]
    # (run from elsewhere than the repository's root, whose source tree has no extension)
    out = subprocess.run(cmd + fmt, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    with specllama.SpeculativeDecoder(pair32.target_q, pair32.draft_q, n_ctx=256, cache_type_k="q8_0",
                                      cache_type_v="q4_0", cache_type_k_draft="q4_0", cache_type_v_draft="q8_0",
                                      flash_attn="on") as dec:
        expected = dec.generate(PROMPTS[1], max_tokens=12, temperature=0).text
    assert expected and expected in out.stdout
    assert "target's KV cache q8_0/q4_0; draft's KV cache q4_0/q8_0" in out.stderr  # (the banner)
    bad = subprocess.run(cmd + ["-ctk", "q9"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert bad.returncode == 2 and "'q9' is not one of" in bad.stderr and "q8_0" in bad.stderr


def test_a_sibling_takes_other_formats(pair32):
    """sibling() with other cache formats: the output of a decoder made with them."""
    with specllama.SpeculativeDecoder(pair32.target_q, pair32.draft_q, n_ctx=256) as dec:
        sib = dec.sibling(cache_type_k="q4_0", cache_type_v="q4_0", cache_type_k_draft="q8_0")
        with sib:
            got = [sib.generate(p, max_tokens=24, temperature=0, ignore_eos=True).tokens for p in PROMPTS]
        with pytest.raises(ValueError, match="cache_type_v_draft must be one of"):
            dec.sibling(cache_type_v_draft="q3")
    with specllama.SpeculativeDecoder(pair32.target_q, n_ctx=256, cache_type_k="q4_0", cache_type_v="q4_0") as q4:
        assert got == [q4.generate(p, max_tokens=24, temperature=0, ignore_eos=True, speculative=False).tokens
                       for p in PROMPTS]


def test_the_benchmark_runs_at_a_tiny_size(pair32, tmp_path):
    """benchmarks/cache_types.py: each format's row, its cache's size, and greedy output equal to
    plain decoding's (the Q4_1 pair is batch invariant with each format)."""
    out = tmp_path / "report.json"
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "cache_types.py"
    run = subprocess.run([sys.executable, str(script), "-m", pair32.target_q, "-d", pair32.draft_q, "--formats",
                          "f16,q8_0", "--prompts", "chat,code", "--rounds", "2", "-n", "12", "-c", "256",
                          "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["formats"]
    assert list(rows) == ["f16", "q8_0"]
    assert all(r["greedy_same_as_plain"] and r["plain"] > 0 and r["specllama"] > 0 for r in rows.values())
    kv = [rows[f]["kv_mib_per_1k_positions"]["target"] for f in ("f16", "q8_0")]
    assert kv[1] == kv[0] * 34 / 64 > 0
