"""Where a model's layers go when the caller does not say: every layer on the GPUs llama.cpp uses by
default where it fits in their free memory, as many as fit where not, none without a GPU
(specllama.placement), and what a GGUF needs in memory, read from its tensor table."""

from __future__ import annotations

import re

import gguf
import pytest

import specllama
from specllama import _core, placement

GiB = 1 << 30


def _fp(n_layer=10, layer_gib=10.0, output_gib=1.0, kv_per_position=0, n_vocab=1000, n_head=8, n_ctx_train=4096):
    return dict(n_layer=n_layer, n_vocab=n_vocab, n_embd=512, n_head=n_head, n_ctx_train=n_ctx_train,
                layer_bytes=int(layer_gib * GiB), output_bytes=int(output_gib * GiB), other_bytes=GiB // 2,
                kv_bytes_per_position=kv_per_position)


SMALL_DRAFT = _fp(n_layer=4, layer_gib=0.5, output_gib=0.25)


# --- the rule, on given sizes ---

def test_everything_on_the_gpu_where_it_fits():
    got = placement.plan(_fp(), SMALL_DRAFT, free=[40 * GiB], n_ctx=4096, n_batch=512)
    assert (got.target, got.draft, got.notes) == (-1, -1, ())


def test_as_many_target_layers_as_fit_after_the_draft():
    """8.5 GiB free, 1 GiB kept free: the draft (0.75 GiB and its buffers) goes whole, and of the
    target's 1 GiB layers the 6 that fit beside its buffers (its output layer stays on the CPU)."""
    with_draft = placement.plan(_fp(), SMALL_DRAFT, free=[int(8.5 * GiB)], n_ctx=512, n_batch=64)
    assert (with_draft.target, with_draft.draft) == (6, -1)
    assert len(with_draft.notes) == 1 and "6 of its 10 layers are offloaded" in with_draft.notes[0]
    assert "n_gpu_layers / -ngl" in with_draft.notes[0]
    alone = placement.plan(_fp(), None, free=[int(8.5 * GiB)], n_ctx=512, n_batch=64)
    assert (alone.target, alone.draft) == (7, 0)
    # two devices: the margin is left on each
    assert placement.plan(_fp(), None, free=[int(4.75 * GiB)] * 2, n_ctx=512, n_batch=64).target == 7
    # models the caller placed on the same devices take their share first
    assert placement.plan(_fp(), None, free=[int(8.5 * GiB)], n_ctx=512, n_batch=64, used=2 * GiB).target == 5


def test_the_cache_counts_and_a_context_of_0_is_the_models():
    """1 MiB of keys and values per position: 4096 positions (the model's own context) add 4 GiB,
    0.4 GiB per layer; 16 positions add nothing that matters."""
    fp = _fp(layer_gib=5.0, kv_per_position=1 << 20)
    assert placement.plan(fp, None, free=[8 * GiB], n_ctx=16, n_batch=64).target == -1
    own = placement.plan(fp, None, free=[8 * GiB], n_ctx=0, n_batch=64)
    assert own.target == 7 and "a cache of 4096 positions" in own.notes[0]  # (7 - working) / 0.9 GiB


def test_nothing_offloaded_without_room_or_without_a_gpu():
    tight = placement.plan(_fp(), _fp(layer_gib=20.0), free=[1 * GiB], n_ctx=512, n_batch=64)
    assert (tight.target, tight.draft) == (0, 0) and len(tight.notes) == 2
    assert "n_gpu_layers_draft / -ngld" in tight.notes[0]
    assert placement.plan(_fp(), SMALL_DRAFT, free=[], n_ctx=512, n_batch=64) == placement.Offload(0, 0)


@pytest.fixture
def choose(monkeypatch):
    sizes = {"t.gguf": _fp(), "d.gguf": SMALL_DRAFT}
    monkeypatch.setattr(_core, "model_footprint", lambda path, *cache_types: sizes[path])

    def run(devices, n_gpu_layers=None, n_gpu_layers_draft=None, device=None, device_draft=None, draft="d.gguf"):
        got = placement.choose("t.gguf", draft, n_gpu_layers, n_gpu_layers_draft, device, device_draft, 512, 64,
                               devices=lambda: devices)
        return got.target, got.draft
    return run


def test_layers_given_or_devices_named_are_kept(choose):
    gpu = [("CUDA0", int(8.5 * GiB))]
    assert choose(gpu, n_gpu_layers=3, n_gpu_layers_draft=0) == (3, 0)
    assert choose(gpu, device="CUDA0", device_draft="none") == (-1, 0)
    with pytest.warns(RuntimeWarning, match="6 of its 10 layers"):
        assert choose(gpu) == (6, -1)
    # a draft given its layers, on the default devices, takes its memory before the target
    with pytest.warns(RuntimeWarning, match="7 of its 10 layers"):
        assert choose(gpu, n_gpu_layers_draft=0) == (7, 0)
    with pytest.warns(RuntimeWarning, match="6 of its 10 layers"):
        assert choose(gpu, n_gpu_layers_draft=-1) == (6, -1)
    with pytest.warns(RuntimeWarning, match="7 of its 10 layers"):
        assert choose(gpu, draft=None) == (7, 0)
    with pytest.warns(RuntimeWarning, match="7 of its 10 layers"):  # (a draft's layers with no draft: none)
        assert choose(gpu, n_gpu_layers_draft=-1, draft=None) == (7, 0)
    # and so does a target given its layers, before the draft's are fitted
    assert choose([("CUDA0", 2 * GiB)], n_gpu_layers=0) == (0, -1)
    with pytest.warns(RuntimeWarning, match="the draft needs about 0.8 GiB .* 0 of its 4 layers"):
        assert choose([("CUDA0", 2 * GiB)], n_gpu_layers=1) == (1, 0)
    assert choose([]) == (0, 0)
    assert choose([("CUDA0", 40 * GiB)]) == (-1, -1)


# --- what a GGUF needs, against gguf's own reader ---

@pytest.mark.parametrize("which", ["target", "target_q"])
def test_a_footprint_is_the_files_tensor_table(tiny, which):
    path = getattr(tiny, which)
    fp = _core.model_footprint(path)
    reader = gguf.GGUFReader(path)
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    assert fp["layer_bytes"] == sum(v for k, v in sizes.items() if k.startswith("blk."))
    assert fp["output_bytes"] == sizes["output.weight"] + sizes["output_norm.weight"]
    assert fp["other_bytes"] == sizes["token_embd.weight"]
    field = lambda key: int(reader.fields[key].parts[-1][0])  # noqa: E731
    n_layer, n_embd = field("llama.block_count"), field("llama.embedding_length")
    n_head, n_head_kv = field("llama.attention.head_count"), field("llama.attention.head_count_kv")
    assert (fp["n_layer"], fp["n_embd"], fp["n_head"], fp["n_vocab"]) == (n_layer, n_embd, n_head, tiny.n_vocab)
    assert fp["kv_bytes_per_position"] == n_layer * 2 * n_head_kv * (n_embd // n_head) * 2
    assert fp["n_ctx_train"] == field("llama.context_length")


def test_tied_embeddings_are_counted_with_the_output(default_pair):
    """SmolLM2 has no output.weight: llama.cpp copies the input embeddings to the output's device."""
    target = default_pair[0]
    fp = _core.model_footprint(target)
    reader = gguf.GGUFReader(target)
    sizes = {t.name: int(t.n_bytes) for t in reader.tensors}
    assert "output.weight" not in sizes
    assert fp["output_bytes"] == sizes["token_embd.weight"] + sizes["output_norm.weight"]
    assert fp["n_layer"] == 30 and fp["kv_bytes_per_position"] == 30 * 2 * 3 * 64 * 2


def test_a_hybrid_models_cache_counts_its_attention_layers_only(tmp_path):
    from tiny_models import jamba_weights, vocab, write_jamba
    toks = vocab()
    path = str(write_jamba(tmp_path / "jamba.gguf", toks, jamba_weights(len(toks), seed=1)))
    kv_heads = [int(h) for h in gguf.GGUFReader(path).fields["jamba.attention.head_count_kv"].contents()]
    assert 0 in kv_heads and any(kv_heads)
    fp = _core.model_footprint(path)
    assert fp["kv_bytes_per_position"] == sum(kv_heads) * 2 * (fp["n_embd"] // fp["n_head"]) * 2


def test_a_bad_file_has_no_footprint(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 12)
    for path in (bad, tmp_path / "missing.gguf"):
        with pytest.raises(ValueError, match="not a readable GGUF file"):
            _core.model_footprint(str(path))


# --- on the decoder ---

def test_without_a_gpu_nothing_is_offloaded_and_nothing_warns(tiny):
    """The suite turns warnings into errors: a warning here fails the test."""
    expected = (-1, -1) if _core.default_devices() else (0, 0)  # tiny models fit on any GPU
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        assert (dec.n_gpu_layers, dec.n_gpu_layers_draft) == expected
        assert [(s.n_gpu_layers, s.n_gpu_layers_draft) for s in dec.slots(2)] == [expected] * 2
    with specllama.SpeculativeDecoder(tiny.target_q, n_ctx=256) as dec:
        assert (dec.n_gpu_layers, dec.n_gpu_layers_draft) == (expected[0], 0)


def test_the_decoder_takes_the_fitted_layers(tiny, monkeypatch):
    """The free memory of llama.cpp's default devices is set here: with room for everything both
    models go whole; with room for one of the target's layers beside the draft, one goes, and the
    warning says so; naming the CPU or giving layers keeps them. (On a build without a GPU the
    layers asked of llama.cpp have no effect: the output stays the same.)"""
    fp = _core.model_footprint(tiny.target_q)
    draft_whole = placement.whole_bytes(_core.model_footprint(tiny.draft_q), 256, 512)
    per_layer = -(-(fp["layer_bytes"] + fp["kv_bytes_per_position"] * 256) // fp["n_layer"])
    monkeypatch.setattr(_core, "default_devices", lambda: [("GPU0", 8 * GiB)])
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        assert (dec.n_gpu_layers, dec.n_gpu_layers_draft) == (-1, -1)
        tokens = dec.generate("the cat is", max_tokens=8, temperature=0, ignore_eos=True).tokens
    room = placement.MARGIN + draft_whole + placement.working_bytes(fp, 256, 512) + per_layer + 1
    monkeypatch.setattr(_core, "default_devices", lambda: [("GPU0", room)])
    with pytest.warns(RuntimeWarning, match=f"1 of its {fp['n_layer']} layers are offloaded"):
        dec = specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256)
    with dec:
        assert (dec.n_gpu_layers, dec.n_gpu_layers_draft) == (1, -1)
        if not _core.supports_gpu_offload():  # on a GPU the placements' numerics may differ
            assert dec.generate("the cat is", max_tokens=8, temperature=0, ignore_eos=True).tokens == tokens
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256, device="none",
                                      n_gpu_layers_draft=0) as dec:
        assert (dec.n_gpu_layers, dec.n_gpu_layers_draft) == (0, 0)


def test_the_caches_size_is_the_one_llama_cpp_allocates(tiny, capfd):
    """llama.cpp's own log of the KV cache it made for n_ctx positions."""
    fp = _core.model_footprint(tiny.target)
    _core.log_set_level(2)
    try:
        specllama.SpeculativeDecoder(tiny.target, n_ctx=4096, n_gpu_layers=0).close()
    finally:
        _core.log_set_level(0)
    sizes = re.findall(r"llama_kv_cache: size = +([0-9.]+) MiB +\( *4096 cells", capfd.readouterr().err)
    assert sizes and float(sizes[0]) == round(fp["kv_bytes_per_position"] * 4096 / (1 << 20), 2) > 0


def test_the_status_line_names_what_is_offloaded():
    assert placement.describe(0, 0) == ""
    assert placement.describe(20, -1) == "on the GPU: target: 20 layers, draft: every layer"
    assert placement.describe(1, 0) == "on the GPU: target: 1 layer"
