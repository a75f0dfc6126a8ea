"""Broken model files: each loads as a clear Python exception, never a crash, a hang or a huge
allocation. The corpus is made from a valid tiny model: truncations at many offsets, wrong magic
and version, absurd counts, sizes and types in the header, and a valid file with no tokenizer."""

from __future__ import annotations

import struct
import time

import gguf
import pytest

import specllama
from tiny_models import random_weights, vocab, write_model


def _corpus(base: bytes, notok: bytes) -> dict:
    cases = {f"truncated at {i}/40": base[: len(base) * i // 40] for i in range(1, 40)}
    cases.update({f"truncated at byte {n}": base[:n] for n in (4, 8, 16, 24, 30, 40, 100, 1000)})
    cases["wrong magic"] = b"GGUX" + base[4:]
    cases["version 999"] = base[:4] + struct.pack("<I", 999) + base[8:]
    cases["2^62 tensors"] = base[:8] + struct.pack("<Q", 2**62) + base[16:]
    cases["2^62 key-value pairs"] = base[:16] + struct.pack("<Q", 2**62) + base[24:]
    cases["one tensor more than stored"] = base[:8] + struct.pack("<Q", struct.unpack("<Q", base[8:16])[0] + 1) + base[16:]
    i = base.find(b"token_embd.weight") + len("token_embd.weight")  # then n_dims u32, dims u64[], type u32
    cases["1000 dimensions"] = base[:i] + struct.pack("<I", 1000) + base[i + 4:]
    cases["a 2^40-long dimension"] = base[:i + 4] + struct.pack("<Q", 2**40) + base[i + 12:]
    cases["tensor type 99"] = base[:i + 20] + struct.pack("<I", 99) + base[i + 24:]
    j = base.find(b"tokenizer.ggml.tokens") + len("tokenizer.ggml.tokens")  # then type u32, item type u32, n u64
    cases["2^60 tokens"] = base[:j + 8] + struct.pack("<Q", 2**60) + base[j + 16:]
    cases["no tokenizer"] = notok
    return cases


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    base = write_model(d / "base.gguf", vocab(), random_weights(len(vocab()), seed=1)).read_bytes()
    w = gguf.GGUFWriter(str(d / "notok.gguf"), "llama")
    for setter, value in ((w.add_context_length, 256), (w.add_embedding_length, 64), (w.add_block_count, 2),
                          (w.add_feed_forward_length, 128), (w.add_head_count, 4), (w.add_head_count_kv, 4),
                          (w.add_layer_norm_rms_eps, 1e-5)):
        setter(value)
    for name, a in random_weights(len(vocab()), seed=1).items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    paths = {}
    for k, (name, blob) in enumerate(_corpus(base, (d / "notok.gguf").read_bytes()).items()):
        p = d / f"case{k}.gguf"
        p.write_bytes(blob)
        paths[name] = p
    return paths


def test_every_broken_file_is_a_clear_error(corpus):
    for name, path in corpus.items():
        t = time.perf_counter()
        with pytest.raises(ValueError) as exc:
            specllama.Model(str(path))
        assert time.perf_counter() - t < 10, f"{name}: took too long"
        msg = str(exc.value)
        assert str(path) in msg and ("GGUF" in msg or "load" in msg), f"{name}: {msg}"


@pytest.mark.parametrize("name, reason", [
    ("version 999", "version 999"),
    ("2^62 tensors", "number of tensors"),
    ("tensor type 99", "invalid ggml type 99"),
    ("no tokenizer", "tokenizer.ggml.model"),
    ("truncated at 20/40", "not within the file bounds"),
])
def test_messages_say_what_is_wrong(corpus, name, reason):
    with pytest.raises(ValueError, match=reason):
        specllama.Model(str(corpus[name]))


def test_messages_say_what_is_wrong_after_llama_cpp_python_takes_the_log(corpus):
    """llama-cpp-python installs its own logger when imported (one libllama per process): a load
    after that still says why it failed."""
    import ctypes

    import llama_cpp
    from llama_cpp import _logger

    llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))
    with pytest.raises(ValueError, match="version 999"):
        specllama.Model(str(corpus["version 999"]))


def _set_u32(blob: bytes, key: str, value: int) -> bytes:
    """The file with the 32-bit value of metadata key `key` replaced (key text, u32 type, value)."""
    i = blob.find(key.encode() + struct.pack("<I", gguf.GGUFValueType.UINT32)) + len(key) + 4
    assert i > len(key) + 4, key
    return blob[:i] + struct.pack("<I", value) + blob[i + 4:]


def _set_f32(blob: bytes, key: str, value: float) -> bytes:
    i = blob.find(key.encode() + struct.pack("<I", gguf.GGUFValueType.FLOAT32)) + len(key) + 4
    assert i > len(key) + 4, key
    return blob[:i] + struct.pack("<f", value) + blob[i + 4:]


# Metadata on which llama.cpp aborts the process (GGML_ASSERT) instead of failing the load, each
# found by scripts/fuzz_gguf.py; cpp/engine/gguf_checks.cpp:check_gguf_metadata turns them into errors.
METADATA_ABORTS = {
    # 16 x (2^31 + 4) wraps to 64 in llama.cpp's 32-bit arithmetic: the K/V tensor shapes pass the
    # loader's check and the first graph aborts in ggml_reshape_3d (when a context is made)
    "head_count_kv 2^31 + 4": (lambda b: _set_u32(b, "llama.attention.head_count_kv", 2**31 + 4), "head count"),
    "block_count 0": (lambda b: _set_u32(b, "llama.block_count", 0), "block_count"),
    "block_count 100000": (lambda b: _set_u32(b, "llama.block_count", 100000), "block_count"),
    "negative norm epsilon": (lambda b: _set_f32(b, "llama.attention.layer_norm_rms_epsilon", -1.0), "epsilon"),
}


@pytest.mark.parametrize("name", list(METADATA_ABORTS))
def test_metadata_llama_cpp_would_abort_on_is_a_clear_error(tmp_path, tiny, name):
    mutate, reason = METADATA_ABORTS[name]
    base = write_model(tmp_path / "base.gguf", vocab(), random_weights(len(vocab()), seed=1)).read_bytes()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(mutate(base))
    with pytest.raises(ValueError, match=f"broken model metadata: .*{reason}"):
        specllama.Model(str(bad))
    with pytest.raises(ValueError, match=reason):
        specllama.SpeculativeDecoder(tiny.target, str(bad), n_ctx=128)


def test_head_size_times_head_count_over_32_bits_is_a_clear_error(tmp_path):
    """The same wrap-around through an explicit head size: 4 x (2^30 + 16) is 64 modulo 2^32."""
    path = write_model(tmp_path / "wide.gguf", vocab(), random_weights(len(vocab()), seed=1),
                       extra_u32={"llama.attention.key_length": 2**30 + 16})
    with pytest.raises(ValueError, match="broken model metadata: llama.attention.key_length 1073741840 times "
                                         "head count 4 overflows 32 bits"):
        specllama.Model(str(path))


def test_duplicate_token_texts_are_a_clear_error(tmp_path):
    toks = vocab(rename={300: vocab()[299]})
    path = write_model(tmp_path / "dup.gguf", toks, random_weights(len(toks), seed=1))
    with pytest.raises(ValueError, match="tokens 299 and 300 have the same text"):
        specllama.Model(str(path))
