"""-d auto: a draft found among the GGUF files of the places other tools keep them (LM Studio,
Hugging Face's cache, ollama, llama.cpp's cache, the target's directory), with every place made
in a temporary home, so that nothing on the machine running the tests is read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

import specllama
from specllama import local_drafts
from specllama.cli import main
from tiny_models import random_weights, vocab, write_model

PLACES_ENV = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "LLAMA_CACHE", "OLLAMA_MODELS", "SPECLLAMA_MODEL_PATH")


def _model(path: Path, seed: int, n_layer: int, n_ff: int = 128, basename: str = "Tiny", finetune: str = "Instruct",
           tokens=None, **extra) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    toks = tokens or vocab()
    meta = {"general.basename": basename, **({"general.finetune": finetune} if finetune else {}), **extra}
    return write_model(path, toks, random_weights(len(toks), seed=seed, n_layer=n_layer, n_ff=n_ff), extra_str=meta)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A target (4 layers) and files of every kind, in a directory of their own; `home` lays them out."""
    d = tmp_path_factory.mktemp("local")
    m = {
        "target": _model(d / "target.gguf", 1, n_layer=4, n_ff=256),
        "smallest": _model(d / "smallest.gguf", 2, n_layer=1, n_ff=64),  # the family's smallest
        "small": _model(d / "small.gguf", 3, n_layer=1, n_ff=128),
        "cpp_small": _model(d / "cpp_small.gguf", 10, n_layer=1, n_ff=96),
        "base": _model(d / "base.gguf", 4, n_layer=1, n_ff=32, finetune=""),  # the family's, not instruction-tuned
        "other_family": _model(d / "other_family.gguf", 5, n_layer=1, n_ff=32, basename="Other"),
        "too_big": _model(d / "too_big.gguf", 6, n_layer=3, n_ff=256),  # more than half the target's parameters
        "other_vocab": _model(d / "other_vocab.gguf", 7, n_layer=1, tokens=vocab(rename={300: "\u2581teh"})),
        "adapter": _model(d / "adapter.gguf", 8, n_layer=1, n_ff=16, **{"general.type": "adapter"}),
    }
    m["copy"] = d / "target_q4_1.gguf"
    specllama.quantize(str(m["target"]), str(m["copy"]), "q4_1")
    m["broken"] = d / "broken.gguf"
    m["broken"].write_bytes(b"GGUF" + bytes(range(200)))
    return m


@pytest.fixture()
def home(tmp_path, monkeypatch, made):
    """A home whose places hold the files: the target beside `other_family`, `broken` and `copy`;
    `small`, `too_big` and the target again (its parameters in as many bytes: no draft) in LM Studio's; `base` in Hugging Face's cache (a snapshot's link to a blob);
    `smallest` as an ollama blob named by its manifest; `cpp_small`, `other_vocab` and `adapter` in
    llama.cpp's cache."""
    h = tmp_path / "home"
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("XDG_CACHE_HOME", str(h / ".cache"))
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "specllama-cache"))
    (tmp_path / "specllama-cache").mkdir()
    for name in PLACES_ENV:
        monkeypatch.delenv(name, raising=False)
    models = h / "models"
    models.mkdir(parents=True)
    for name in ("target", "other_family", "broken", "copy"):
        shutil.copy(made[name], models / made[name].name)
    lms = h / ".lmstudio" / "models" / "pub"
    for name, repo in (("small", "Tiny-Small-GGUF"), ("too_big", "Tiny-Big-GGUF"), ("target", "Tiny-GGUF")):
        (lms / repo).mkdir(parents=True)
        shutil.copy(made[name], lms / repo / made[name].name)
    repo = h / ".cache" / "huggingface" / "hub" / "models--pub--tiny-base"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    shutil.copy(made["base"], repo / "blobs" / "0f0f")
    (repo / "snapshots" / "abc123" / "tiny-base.gguf").symlink_to("../../blobs/0f0f")
    ollama = h / ".ollama" / "models"
    (ollama / "blobs").mkdir(parents=True)
    digest = "sha256-" + "ab" * 32
    shutil.copy(made["smallest"], ollama / "blobs" / digest)
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "mini"
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": digest.replace("-", ":")}]}))
    (ollama / "blobs" / ("sha256-" + "cd" * 32)).write_bytes(b"not a model")  # (a blob no manifest names)
    cpp = h / ".cache" / "llama.cpp"
    cpp.mkdir(parents=True)
    for name in ("cpp_small", "other_vocab", "adapter"):
        shutil.copy(made[name], cpp / made[name].name)
    return models / "target.gguf"


def test_model_identity_reads_the_header(made):
    ident = {k: specllama._core.model_identity(str(made[k])) for k in ("target", "small", "other_vocab", "copy")}
    toks = vocab()
    want = sum(a.size for a in random_weights(len(toks), seed=1, n_layer=4, n_ff=256).values())
    assert ident["target"]["n_params"] == want == ident["copy"]["n_params"]
    assert ident["target"]["n_block"] == 4 * 9 and ident["target"]["n_vocab"] == len(toks)
    assert ident["target"]["basename"] == "Tiny" and ident["target"]["finetune"] == "Instruct"
    assert ident["target"]["architecture"] == "llama" and ident["target"]["split_count"] == 1
    assert len(ident["target"]["vocab_hash"]) == 16
    assert ident["small"]["vocab_hash"] == ident["target"]["vocab_hash"] == ident["copy"]["vocab_hash"]
    assert ident["other_vocab"]["vocab_hash"] != ident["target"]["vocab_hash"]  # one token's text differs
    assert specllama._core.model_identity(str(made["adapter"]))["type"] == "adapter"


def test_model_identity_refuses_what_is_not_a_gguf_file(made, tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        specllama._core.model_identity(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="not a regular file"):
        specllama._core.model_identity(str(tmp_path))
    with pytest.raises(ValueError, match="not a readable GGUF"):
        specllama._core.model_identity(str(made["broken"]))


def test_finds_the_drafts_of_every_place_best_first(home):
    found = local_drafts.find_drafts(home)
    got = [(Path(c.path).name, c.label, c.place) for c in found]
    assert got == [
        ("sha256-" + "ab" * 32, "tiny:mini", "ollama"),                    # the family's smallest
        ("cpp_small.gguf", "cpp_small.gguf", "llama.cpp's cache"),
        ("small.gguf", "pub/Tiny-Small-GGUF", "LM Studio"),                # (labels: the names -d takes)
        ("tiny-base.gguf", "pub/tiny-base", "Hugging Face's cache"),       # the family's, another kind
        ("other_family.gguf", "other_family.gguf", "the target's directory"),
        ("target_q4_1.gguf", "target_q4_1.gguf", "the target's directory"),  # the target in fewer bits: last
    ]
    assert [c.same_family for c in found] == [True, True, True, True, False, True]
    assert [c.same_kind for c in found] == [True, True, True, False, True, True]
    assert [c.copy for c in found] == [False] * 5 + [True]
    assert all(c.n_params <= c.target_params / 2 for c in found[:5]) and found[5].n_params == found[5].target_params
    assert "the target's family" in found[0].describe() and "fewer bits" in found[5].describe()


def test_a_second_search_reads_no_header_it_has_read(home, monkeypatch):
    first = local_drafts.find_drafts(home)
    reads = []
    real = specllama._core.model_identity
    monkeypatch.setattr(local_drafts._core, "model_identity", lambda p: reads.append(p) or real(p))
    assert local_drafts.find_drafts(home) == first
    assert reads == [os.fspath(home)]  # the target's own
    small = home.parent.parent / ".lmstudio" / "models" / "pub" / "Tiny-Small-GGUF" / "small.gguf"
    os.utime(small, ns=(1, 1))  # (another modification time: read again)
    reads.clear()
    assert local_drafts.find_drafts(home) == first
    assert sorted(reads) == sorted([os.fspath(home), str(small)])


def test_a_damaged_record_or_a_fifo_costs_nothing(home, tmp_path):
    first = local_drafts.find_drafts(home)
    record = tmp_path / "specllama-cache" / "local-models.json"
    data = json.loads(record.read_text())
    for entry in data["files"].values():
        if entry["identity"]:
            entry["identity"] = {"n_params": "?"}  # (a record without its fields: read again)
    record.write_text(json.dumps(data))
    assert local_drafts.find_drafts(home) == first
    for damaged in ("{", "[]", '{"format": 1, "files": []}'):
        record.write_text(damaged)
        assert local_drafts.find_drafts(home) == first
    os.mkfifo(home.parent / "pipe.gguf")
    ollama = home.parent.parent / ".ollama" / "models"
    os.mkfifo(ollama / "blobs" / ("sha256-" + "ef" * 32))
    os.mkfifo(ollama / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "pipe-manifest")
    manifest = ollama / "manifests" / "registry.ollama.ai" / "library" / "tiny" / "pipe"
    manifest.write_text(json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.model",
                                                "digest": "sha256:" + "ef" * 32}]}))
    assert local_drafts.find_drafts(home) == first


def test_more_places_and_none(home, tmp_path, monkeypatch):
    extra = tmp_path / "mine" / "deep"
    extra.mkdir(parents=True)
    tiniest = _model(extra / "tiniest.gguf", 9, n_layer=1, n_ff=16)
    monkeypatch.setenv("SPECLLAMA_MODEL_PATH", str(tmp_path / "mine"))
    path, reason = local_drafts.choose_draft(home)
    assert path == str(tiniest) and reason.startswith("draft chosen: tiniest.gguf (SPECLLAMA_MODEL_PATH)")
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(home, alone / "target.gguf")
    monkeypatch.setenv("HOME", str(tmp_path / "empty"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty"))
    monkeypatch.delenv("SPECLLAMA_MODEL_PATH")
    path, reason = local_drafts.choose_draft(alone / "target.gguf")
    assert path is None and "no draft found for target.gguf" in reason and str(alone) in reason


def test_the_places_follow_the_tools_variables(home, tmp_path, monkeypatch):
    default = local_drafts.search_places(home)
    assert [what for what, _ in default] == ["the target's directory", "specllama's cache", "LM Studio",
                                             "Hugging Face's cache", "llama.cpp's cache", "ollama"]
    moved = {}
    for var in ("HF_HUB_CACHE", "LLAMA_CACHE", "OLLAMA_MODELS", "SPECLLAMA_MODEL_PATH"):
        moved[var] = tmp_path / var.lower()
        moved[var].mkdir()
        monkeypatch.setenv(var, str(moved[var]))
    places = dict((d, what) for what, d in local_drafts.search_places(home))
    assert places[moved["HF_HUB_CACHE"]] == "Hugging Face's cache" and places[moved["LLAMA_CACHE"]] == "llama.cpp's cache"
    assert places[moved["OLLAMA_MODELS"]] == "ollama" and places[moved["SPECLLAMA_MODEL_PATH"]] == "SPECLLAMA_MODEL_PATH"
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert [d for what, d in local_drafts.search_places(home) if what == "Hugging Face's cache"] == []  # (no hub/)
    (tmp_path / "hub").mkdir()
    assert (tmp_path / "hub", "Hugging Face's cache") in [(d, w) for w, d in local_drafts.search_places(home)]


def test_the_decoder_drafts_with_the_draft_it_chose(home):
    with specllama.SpeculativeDecoder(home, "auto", n_ctx=256) as dec:
        assert Path(dec.draft_path).name == "sha256-" + "ab" * 32
        assert dec.draft_choice.startswith("draft chosen: tiny:mini (ollama)")
        out = dec.generate("the cat is", max_tokens=24, temperature=0, n_draft=3, adaptive=False)
        assert out.stats.drafter == "model+lookup" and out.stats.n_drafted > 0
        assert out.tokens == dec.generate("the cat is", max_tokens=24, temperature=0, speculative=False).tokens
        assert dec.slots(1)[0].draft_choice == dec.draft_choice
    with specllama.SpeculativeDecoder(home, n_ctx=256) as plain:
        assert plain.draft_path is None and plain.draft_choice is None


def test_the_command_line(home):
    r = CliRunner().invoke(main, ["generate", "the cat is", "-m", str(home), "-d", "auto", "-n", "8", "--temp", "0",
                                  "-c", "256"])
    assert r.exit_code == 0, r.output
    assert "draft chosen: tiny:mini (ollama)" in r.stderr and "+ draft tiny:mini " in r.stderr
    r = CliRunner().invoke(main, ["models", "--drafts-for", str(home)])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("looked in: the target's directory") and "ollama" in lines[0]
    assert lines[1] == "* " + str(home.parent.parent / ".ollama" / "models" / "blobs" / ("sha256-" + "ab" * 32))
    assert sum(line.startswith("  /") for line in lines) == 5
    r = CliRunner().invoke(main, ["models", "--drafts-for", str(home.parent / "missing.gguf")])
    assert r.exit_code != 0 and "not found" in r.output
    r = CliRunner().invoke(main, ["generate", "x", "-d", "auto"])
    assert r.exit_code != 0 and "needs -m/--model" in r.output


def test_what_cannot_draft_is_never_chosen(home, made):
    found = local_drafts.find_drafts(home)
    assert not any(Path(c.path).name in ("other_vocab.gguf", "adapter.gguf", "too_big.gguf", "broken.gguf",
                                         "target.gguf") for c in found)
    assert [c.place for c in found].count("llama.cpp's cache") == 1


def test_a_split_target_is_weighed_over_all_its_parts(tmp_path):
    """A target split across files (gguf-split's names) is sized by the sum of its parts: a draft
    of more than half the first part's parameters but at most half the whole model's drafts, and
    the target in one quantized file is its copy; the later parts are no drafts."""
    toks, meta = vocab(), {"general.basename": "Tiny", "general.finetune": "Instruct"}
    weights = random_weights(len(toks), seed=1, n_layer=4, n_ff=256)
    (tmp_path / "whole").mkdir()
    whole = write_model(tmp_path / "whole" / "target.gguf", toks, weights, extra_str=meta)
    d = tmp_path / "models"
    d.mkdir()
    first = write_model(d / "target.gguf", toks, weights, extra_str=meta, split_max_tensors=12)
    parts = sorted(d.glob("target-*-of-*.gguf"))
    assert first == parts[0] and len(parts) == 4
    n_parts = [specllama._core.model_identity(str(p))["n_params"] for p in parts]
    n_whole = specllama._core.model_identity(str(whole))["n_params"]
    assert sum(n_parts) == n_whole
    draft = _model(d / "draft.gguf", 2, n_layer=2, n_ff=128)
    n_draft = specllama._core.model_identity(str(draft))["n_params"]
    assert n_parts[0] / 2 < n_draft <= n_whole / 2  # a draft of the whole model, not of its first part
    specllama.quantize(str(whole), str(d / "target_q4_1.gguf"), "q4_1")

    found = local_drafts.find_drafts(first, places=[("the target's directory", d)])
    assert [(Path(c.path).name, c.copy) for c in found] == [("draft.gguf", False), ("target_q4_1.gguf", True)]
    assert found[0].target_params == n_whole and found[0].target_size == sum(p.stat().st_size for p in parts)
