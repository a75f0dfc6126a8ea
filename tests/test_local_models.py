"""Models named as the tools that fetched them name them (ollama's `tiny:mini`, a Hugging Face
repository `pub/Tiny-GGUF:Q8_0` in its cache or LM Studio's), resolved to their files wherever a
model is taken, and listed by `specllama models --local`; every place is made in a temporary home,
so that nothing on the machine running the tests is read."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from openai import OpenAI

import specllama
from specllama import local_models
from specllama.cli import main
from test_local_drafts import PLACES_ENV, _model
from test_server import running

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _put(src: str, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src, dest)
    return dest


def _ollama(root: Path, host: str, namespace: str, model: str, tag: str, src: str, digest: str) -> Path:
    blob = _put(src, root / "blobs" / f"sha256-{digest * 64}")
    manifest = root / "manifests" / host / namespace / model / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "f" * 64},
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest * 64}"}]}))
    return blob


@pytest.fixture()
def places(tiny, tmp_path, monkeypatch):
    """Each tool's layout in a temporary home; the files the names stand for, by a short key."""
    h = tmp_path / "home"
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("XDG_CACHE_HOME", str(h / ".cache"))
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "specllama-cache"))
    for name in PLACES_ENV:
        monkeypatch.delenv(name, raising=False)
    t, d = tiny.target_q, tiny.draft_q
    f = {}
    ol = h / ".ollama" / "models"
    f["ollama latest"] = _ollama(ol, "registry.ollama.ai", "library", "tiny", "latest", t, "1")
    f["ollama mini"] = _ollama(ol, "registry.ollama.ai", "library", "tiny", "mini", d, "2")
    f["ollama user"] = _ollama(ol, "registry.ollama.ai", "someone", "tiny", "q8", d, "3")
    f["ollama hf"] = _ollama(ol, "hf.co", "pub", "Tiny-GGUF", "Q8_0", d, "4")
    repo = h / ".cache" / "huggingface" / "hub" / "models--pub--Tiny-GGUF"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    (repo / "refs" / "a-branch").write_text("0" * 40)  # (main's commit is the one read)
    snap = repo / "snapshots" / COMMIT
    for key, rel, src in (("hf Q8_0", "Tiny-Q8_0.gguf", d), ("hf Q4_K_M", "Tiny-Q4_K_M.gguf", t),
                          ("hf F16", "Tiny-F16.gguf", t), ("hf F16 projector", "Tiny-F16-mmproj.gguf", d),
                          ("hf Q2_K", "split/Tiny-Q2_K-00001-of-00002.gguf", d),
                          ("hf Q2_K part 2", "split/Tiny-Q2_K-00002-of-00002.gguf", d)):
        f[key] = _put(src, snap / rel)
    f["hf stale"] = _put(t, repo / "snapshots" / ("0" * 40) / "Tiny-Q4_K_M.gguf")  # (another branch's)
    solo = h / ".cache" / "huggingface" / "hub" / "models--pub--Solo" / "snapshots" / COMMIT
    f["hf solo"] = _put(d, solo / "solo-bf16.gguf")  # (the only snapshot, no refs: the one read)
    lms = h / ".lmstudio" / "models"
    f["lms Q4_K_M"] = _put(t, lms / "studio" / "Tiny-GGUF" / "Tiny-Q4_K_M.gguf")
    f["lms Q8_0"] = _put(d, lms / "studio" / "Tiny-GGUF" / "Tiny-Q8_0.gguf")
    f["lms solo"] = _put(t, lms / "pub" / "Solo" / "Solo-Q6_K.gguf")  # (LM Studio is searched first)
    mine = tmp_path / "mine"
    f["mine"] = _put(d, mine / "mine.gguf")
    monkeypatch.setenv("SPECLLAMA_MODEL_PATH", str(mine))
    return f


NAMES = [("tiny", "ollama latest"), ("tiny:latest", "ollama latest"), ("TINY:Mini", "ollama mini"),
         ("registry.ollama.ai/library/tiny:mini", "ollama mini"), ("someone/tiny:q8", "ollama user"),
         ("hf.co/pub/Tiny-GGUF:Q8_0", "ollama hf"),
         ("pub/Tiny-GGUF", "hf Q4_K_M"), ("pub/tiny-gguf:q8_0", "hf Q8_0"), ("pub/Tiny-GGUF:F16", "hf F16"),
         ("pub/Tiny-GGUF:Q2_K", "hf Q2_K"), ("studio/Tiny-GGUF", "lms Q4_K_M"), ("studio/Tiny-GGUF:Q8_0", "lms Q8_0"),
         ("pub/Solo", "lms solo"), ("mine", "mine"), ("mine.gguf", "mine")]


@pytest.mark.parametrize("name, key", NAMES, ids=[n for n, _ in NAMES])
def test_a_name_stands_for_the_file_its_tool_fetched(places, name, key):
    assert local_models.resolve_model(name) == str(places[key])


def test_without_a_tag_a_repository_gives_q4_k_m_then_q8_0_then_its_first_model(places):
    snap = places["hf Q4_K_M"].parent
    places["hf Q4_K_M"].unlink()
    assert local_models.resolve_model("pub/Tiny-GGUF") == str(snap / "Tiny-Q8_0.gguf")
    places["hf Q8_0"].unlink()
    assert local_models.resolve_model("pub/Tiny-GGUF") == str(snap / "Tiny-F16.gguf")
    (places["hf Q4_K_M"].parent.parent.parent / "refs" / "main").write_text("0" * 40)  # (main moves back)
    assert local_models.resolve_model("pub/Tiny-GGUF") == str(places["hf stale"])


def test_the_hugging_face_cache_follows_llama_cpps_variables(places, tmp_path, monkeypatch):
    moved = tmp_path / "llama-cache"
    shutil.move(places["hf Q4_K_M"].parents[2], moved / "models--pub--Tiny-GGUF")
    with pytest.raises(FileNotFoundError):
        local_models.resolve_model("pub/Tiny-GGUF:F16")
    monkeypatch.setenv("LLAMA_CACHE", str(moved))
    assert local_models.resolve_model("pub/Tiny-GGUF:F16") == str(moved / "models--pub--Tiny-GGUF" / "snapshots"
                                                                  / COMMIT / "Tiny-F16.gguf")


def test_paths_stay_paths_and_unknown_names_say_where_they_were_looked_for(places, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for path in (str(places["hf F16"]), "./tiny", "models/tiny.gguf", "/no/such/file", "~/tiny", "a/b/c/d",
                 "tiny model", Path("tiny")):
        assert local_models.resolve_model(path) is path
    (tmp_path / "tiny").write_text("a file here")  # (a file of that name in the working directory is the file)
    assert local_models.resolve_model("tiny") == "tiny"
    repo = "LM Studio, Hugging Face's cache, ollama"
    for name, where in (("pub/Tiny-GGUF:Q5_K", repo), ("nobody/Tiny-GGUF", repo), ("studio/Tiny-GGUF:F16", repo),
                        ("pub/Solo:Q8_0", repo), ("tiny:big", "ollama"), ("someone", "SPECLLAMA_MODEL_PATH, ollama"),
                        ("nosuch.gguf", "SPECLLAMA_MODEL_PATH")):
        with pytest.raises(FileNotFoundError) as e:
            local_models.resolve_model(name)
        assert str(e.value) == (f"model file not found: {name}, nor a model of that name in {where} "
                                "(`specllama models --local` lists the models on this machine)")
    monkeypatch.delenv("SPECLLAMA_MODEL_PATH")
    assert local_models.resolve_model("nosuch.gguf") == "nosuch.gguf"  # (a file's name: looked for nowhere else)


def test_the_list_names_each_model_as_it_can_be_given(places):
    found = {Path(m.path): m for m in local_models.list_local_models()}
    for m in found.values():
        assert m.name == m.path or local_models.resolve_model(m.name) == m.path
        assert m.architecture == "llama" and m.n_params > 0 and m.size == os.path.getsize(m.path)
    names = {key: found[p].name for key, p in places.items() if p in found}
    assert names == {
        "ollama latest": "tiny:latest", "ollama mini": "tiny:mini", "ollama user": "someone/tiny:q8",
        "ollama hf": "hf.co/pub/Tiny-GGUF:Q8_0", "hf Q8_0": "pub/Tiny-GGUF:Q8_0", "hf Q4_K_M": "pub/Tiny-GGUF:Q4_K_M",
        "hf F16": "pub/Tiny-GGUF:F16", "hf Q2_K": "pub/Tiny-GGUF:Q2_K", "lms Q4_K_M": "studio/Tiny-GGUF:Q4_K_M",
        "lms Q8_0": "studio/Tiny-GGUF:Q8_0", "lms solo": "pub/Solo", "mine": "mine.gguf",
        "hf stale": str(places["hf stale"]),  # (no name stands for it: a snapshot main does not name)
        "hf solo": str(places["hf solo"]),  # (its name is LM Studio's file's)
    }
    assert [m.place for m in found.values()][:3] == ["SPECLLAMA_MODEL_PATH", "LM Studio", "LM Studio"]


def test_a_projector_a_second_part_and_what_is_no_model_are_not_listed(places):
    mine = places["mine"].parent
    _model(mine / "lora.gguf", 8, n_layer=1, n_ff=16, **{"general.type": "adapter"})
    (mine / "broken.gguf").write_bytes(b"GGUF" + bytes(200))
    listed = {Path(m.path) for m in local_models.list_local_models()}
    assert places["hf F16 projector"] not in listed  # (by its name, as llama.cpp's -hf leaves it out)
    assert places["hf Q2_K part 2"] not in listed and places["hf Q2_K"] in listed
    assert mine / "broken.gguf" not in listed and mine / "lora.gguf" not in listed and places["mine"] in listed


def test_the_decoder_takes_names(places):
    with specllama.SpeculativeDecoder("tiny:mini", "pub/Tiny-GGUF:Q8_0", n_ctx=256) as dec:
        assert dec.model_path == str(places["ollama mini"]) and dec.draft_path == str(places["hf Q8_0"])
        assert dec.model_name == "tiny:mini" and dec.slots(1)[0].model_name == "tiny:mini"
        r = dec.create_chat_completion([{"role": "user", "content": "the cat"}], max_tokens=4, temperature=0)
        assert r["model"] == "tiny:mini"
    with specllama.SpeculativeDecoder(str(places["mine"]), n_ctx=256) as dec:
        assert dec.model_name == "mine.gguf"
    with pytest.raises(FileNotFoundError, match="models --local"):
        specllama.SpeculativeDecoder("tiny:big", n_ctx=256)
    with pytest.raises(FileNotFoundError, match="nor a model of that name"):
        specllama.SpeculativeDecoder("tiny", "pub/Tiny-GGUF:Q5_K", n_ctx=256)


def test_the_command_line_takes_and_lists_names(places):
    r = CliRunner().invoke(main, ["generate", "the cat is", "-m", "tiny:mini", "-d", "pub/Tiny-GGUF:Q8_0", "-n", "6",
                                  "--temp", "0", "-c", "256"])
    assert r.exit_code == 0, r.output
    assert "tiny:mini + draft pub/Tiny-GGUF:Q8_0" in r.stderr
    r = CliRunner().invoke(main, ["generate", "x", "-m", "tiny:big"])
    assert r.exit_code != 0 and "model file not found: tiny:big, nor a model" in r.output
    assert "Traceback" not in r.output
    r = CliRunner().invoke(main, ["models", "--local"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[0].startswith("looked in: SPECLLAMA_MODEL_PATH") and "ollama" in lines[0]
    rows = [line.split() for line in lines[1:] if not line.startswith("    ")]
    assert ["tiny:mini", "ollama", "llama"] == rows[[r[0] for r in rows].index("tiny:mini")][:3]
    assert f"    {places['ollama mini']}" in lines
    assert sum(1 for r in rows if r[0] == str(places["hf stale"])) == 1
    r = CliRunner().invoke(main, ["models", "--drafts-for", "tiny"])  # (ollama's tiny:latest, drafts for by none)
    assert r.exit_code == 0 and f"can draft for {places['ollama latest'].name}" in r.stdout
    r = CliRunner().invoke(main, ["models", "--local", "--drafts-for", "tiny"])
    assert r.exit_code != 0 and "give one" in r.output


def test_the_server_serves_a_model_by_its_name(places):
    with running(["-m", "tiny:mini", "-d", "studio/Tiny-GGUF", "-c", "256"]) as server:
        with OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
            assert [m.id for m in client.models.list().data] == ["tiny:mini"]
            r = client.chat.completions.create(model="tiny:mini", messages=[{"role": "user", "content": "hi"}],
                                               max_tokens=4, temperature=0)
            assert r.model == "tiny:mini" and r.usage.completion_tokens == 4
    assert any("tiny:mini + draft studio/Tiny-GGUF" in line for line in server.lines)
