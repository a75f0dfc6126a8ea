"""What the adaptive draft length learned, kept from one process to the next.

A new decoder's adaptive rule knows nothing of its pair: its first generation spends steps pricing
plain decoding, has the draft read the prompt, and drafts until the drafting steps' own evidence
says whether drafting pays (docs/how-it-works.md#adaptive-draft-length). A one-shot `specllama
generate` is all first generation. With an adaptive memory, a decoder starts from what the last
decoder of the same pair, machine and settings ended with: its prices (each model's decodes, the
target's batches), acceptance and calibration, rates, pauses and probe gaps, and the lengths of
its generations; and what it learns is written back for the next one.

The memory is a small JSON file per identity (the two model files by path, size and modification
time; the settings that change what a decode costs: threads, layers offloaded, devices, cache
formats, flash attention, batch, slots; the machine: host name, CPU, devices; the versions of
specllama, its state format and llama-cpp-python). It lives in $SPECLLAMA_STATE, or else the
user's state directory (platformdirs: ~/.local/state/specllama on Linux), under adaptive/. A file
that cannot be read or is not such a state is ignored with a warning and replaced at the next save;
a file that cannot be written warns once and loses nothing else.

The memory changes which draft lengths the rule chooses, never the acceptance rule: the output's
distribution is the target's either way (greedy output as with any draft length: how-it-works.md
#exactness).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Optional, Union

from . import _core
from ._version import __version__

FORMAT = _core.ADAPTIVE_STATE_FORMAT
SAVE_INTERVAL_S = 30.0  # after a generation, the memory is written at most this often (and on close)

# the decoder settings that do not change what a decode costs: a memory holds across them
_SETTINGS_LEFT_OUT = ("n_ctx", "n_draft", "probe_reads")


def state_dir() -> Path:
    """$SPECLLAMA_STATE, or the platform's user state directory (XDG on Linux) + /specllama."""
    env = os.environ.get("SPECLLAMA_STATE")
    if env:
        return Path(env)
    from platformdirs import user_state_dir

    return Path(user_state_dir("specllama", appauthor=False))


def _model_file(path: Optional[str]) -> Optional[Dict[str, Any]]:
    if path is None:
        return None
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return {"path": real}
    return {"path": real, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _machine() -> Dict[str, Any]:
    from .provenance import cpu_model

    devices = [{k: d[k] for k in ("name", "description", "type", "memory_total")} for d in _core.list_devices()]
    return {"host": platform.node(), "cpu": cpu_model(), "cores": os.cpu_count(), "devices": devices}


def identity(model_path: str, draft_path: Optional[str], settings: Dict[str, Any]) -> Dict[str, Any]:
    """What a memory belongs to: the models' files, the settings that change a decode's cost (all
    of settings but n_ctx and n_draft), the machine and the versions."""
    try:
        llama_cpp = metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        llama_cpp = None
    kept = {k: v for k, v in settings.items() if k not in _SETTINGS_LEFT_OUT}
    return json.loads(json.dumps({
        "target": _model_file(model_path), "draft": _model_file(draft_path), "settings": kept,
        "machine": _machine(), "specllama": __version__, "format": FORMAT, "llama_cpp_python": llama_cpp,
    }, sort_keys=True, default=str))


def default_path(ident: Dict[str, Any]) -> Path:
    """The file in the state directory that holds the memory of ident."""
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]
    return state_dir() / "adaptive" / f"{digest}.json"


class AdaptiveMemory:
    """One decoder's memory: the file it started from and writes back to.

    resumed: whether the decoder started from a state in that file; note: why not, where it did
    not (no file yet, another identity's, unreadable); generations: how many generations the
    state has learned from, in every run that kept it."""

    def __init__(self, path: Union[str, os.PathLike, None], ident: Dict[str, Any]) -> None:
        """path None: the state directory's file for ident (default_path)."""
        self._in_state_dir = path is None
        self.path = default_path(ident) if path is None else Path(path)
        self.identity = ident
        self.resumed = False
        self.note = ""
        self.n_saves = 0
        self.generations = 0
        self._last_save: Optional[float] = None  # time.monotonic() of the last write
        self._dirty = False
        self._write_failed = False
        self._priced = False  # a generation was priced by given StepPrices: nothing is written

    def for_slots(self, n: int) -> "AdaptiveMemory":
        """The memory of n slots made from this memory's decoder (decoder.slots): its identity with
        slots n, in the state directory's file for that identity, or next to a file given by path
        (NAME-slotsN.json)."""
        ident = json.loads(json.dumps(self.identity))
        ident["settings"]["slots"] = n
        named = None if self._in_state_dir else self.path.with_name(f"{self.path.stem}-slots{n}{self.path.suffix}")
        return AdaptiveMemory(named, ident)

    def load_into(self, native: _core.Decoder) -> bool:
        """Start native's adaptive rule from the file, where it holds a state of this identity;
        a file that is not one warns (RuntimeWarning) and is replaced at the next save."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):  # (the second: writing it will say what is wrong)
            self.note = "nothing learned yet"
            return False
        except (OSError, UnicodeDecodeError) as exc:
            return self._ignore(f"cannot be read ({exc})")
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or not isinstance(data.get("state"), list):
                raise ValueError("it holds no state")
            if data.get("identity") != self.identity:
                self.note = "learned for another pair, machine, version or settings"
                if data.get("format") == FORMAT and isinstance(data.get("identity"), dict):
                    warnings.warn(f"adaptive memory {self.path} was {self.note}; starting afresh (it will be "
                                  "replaced)", RuntimeWarning, stacklevel=4)
                    return False
                raise ValueError("it is not a state of this version of specllama")
            native.set_adaptive_state([float(x) for x in data["state"]])
        except (ValueError, TypeError) as exc:
            return self._ignore(f"is not an adaptive memory ({exc})")
        generations = data.get("generations")
        self.generations = generations if type(generations) is int and generations >= 0 else 0
        self.resumed = True
        self.note = "resumed"
        return True

    def _ignore(self, why: str) -> bool:
        self.note = f"ignored: {why}"
        warnings.warn(f"adaptive memory {self.path} {why}; starting afresh (it will be replaced)", RuntimeWarning,
                      stacklevel=5)
        return False

    def generated(self, native: _core.Decoder, priced: bool) -> None:
        """After a generation of native (priced: by given StepPrices, whose prices are not this
        machine's: nothing is written from then on); writes at most every SAVE_INTERVAL_S."""
        if priced and not self._priced:
            self._priced = True
            self.note = "not written: a generation was priced by given StepPrices"
        self._dirty = True
        self.generations += 1
        if self._last_save is None or time.monotonic() - self._last_save >= SAVE_INTERVAL_S:
            self.save(native)

    def save(self, native: _core.Decoder) -> bool:
        """Write native's state now, where a generation ran since the last write (atomically: a
        reader sees the old file or the new one). False where nothing was written."""
        if not self._dirty or self._priced:
            return False
        saved = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        payload = {"format": FORMAT, "identity": self.identity, "saved": saved, "generations": self.generations,
                   "state": native.adaptive_state()}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=self.path.name + ".", suffix=".tmp", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(payload, f)
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                warnings.warn(f"adaptive memory {self.path} cannot be written ({exc}); what this decoder learns "
                              "will not be kept", RuntimeWarning, stacklevel=3)
            return False
        self._dirty = False
        self._last_save = time.monotonic()
        self.n_saves += 1
        return True
