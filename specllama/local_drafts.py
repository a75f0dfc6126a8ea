"""Finding a draft for a target among the GGUF files already on this machine (`-d auto`).

A draft can stand in for the target only where it is much cheaper and agrees with it often; the
files a user already has from other tools are the first place to look. This module reads each GGUF
file's header (specllama._core.model_identity: no weights are read) in these places, in order:

    the target's own directory
    $SPECLLAMA_MODEL_PATH         directories, separated as PATH is
    specllama's cache             the named pairs (specllama.models.cache_dir())
    LM Studio                     ~/.lmstudio/models, ~/.cache/lm-studio/models
    Hugging Face's cache          $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub (llama.cpp's -hf
                                  downloads too)
    llama.cpp's cache             $LLAMA_CACHE or the user cache directory's llama.cpp (older -hf downloads)
    ollama                        $OLLAMA_MODELS or ~/.ollama/models (blobs, named by their manifests)

A file can draft for the target here when it is a model (not an adapter or a projector), in one
file, of the target's vocabulary (the same tokenizer and every token's text), and either has at
most half the target's parameters or is the target in fewer bits (the target's architecture and
parameters in at most half its bytes: a quantized copy). Among those, the first by: a smaller
model before a copy, the target's family (general.basename, such as Qwen2.5-Coder), the target's
kind (instruction-tuned or base), fewer parameters, a smaller file, the path. A draft of another vocabulary can draft too (token-level intersection) but is never
chosen here: name it with -d.

What each file is, is kept in the cache directory (local-models.json) by path, size and
modification time, so that a second search reads no header it has read.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from . import _core

__all__ = ["DraftCandidate", "find_drafts", "choose_draft", "search_places"]

MAX_DEPTH = 6  # directory levels below a place that are searched (Hugging Face's cache: 4)
MAX_SHARE = 0.5  # a draft has at most this share of the target's parameters
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
_INSTRUCT = {"instruct", "chat", "it", "sft", "dpo", "rlhf"}
_NOT_MODELS = {"adapter", "mmproj", "vocab", "imatrix"}
_CACHE_FORMAT = 1
_FIELDS = {"architecture", "type", "basename", "finetune", "name", "n_params", "n_block", "vocab_hash",
           "split_count", "size"}


@dataclass(frozen=True)
class DraftCandidate:
    """A file that can draft for the target; find_drafts lists them best first."""

    path: str
    label: str  # the file's name, or ollama's name for its blob
    place: str  # where it was found ("the target's directory", "LM Studio", ...)
    n_params: int
    size: int  # bytes
    same_family: bool  # general.basename is the target's
    same_kind: bool  # instruction-tuned, or base, as the target
    target_params: int  # the target's parameters and bytes, for comparison
    target_size: int
    copy: bool  # the target itself in fewer bits (its parameters, at most half its bytes)

    def describe(self) -> str:
        """One line: what it is and why it can draft."""
        if self.copy:
            return (f"{self.label} ({self.place}): the target in fewer bits, {self.size / 1e6:.0f} MB against "
                    f"the target's {self.target_size / 1e6:.0f} MB")
        family = "the target's family" if self.same_family else "another family"
        kind = "" if self.same_kind else ", another kind (instruction-tuned or base)"
        return (f"{self.label} ({self.place}): the target's vocabulary, {_params(self.n_params)} parameters "
                f"against the target's {_params(self.target_params)}, {family}{kind}")


def _params(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _home() -> Path:
    return Path(os.path.expanduser("~"))


def _user_cache() -> Path:
    from platformdirs import user_cache_dir

    return Path(user_cache_dir(appauthor=False))


def search_places(target: Optional[str] = None) -> List[Tuple[str, Path]]:
    """(what, directory) of every place searched, in order; the target's directory first where a
    target is given. Places that do not exist are left out."""
    env = os.environ
    places: List[Tuple[str, Path]] = []
    if target:
        places.append(("the target's directory", Path(target).resolve().parent))
    for d in filter(None, env.get("SPECLLAMA_MODEL_PATH", "").split(os.pathsep)):
        places.append(("SPECLLAMA_MODEL_PATH", Path(d).expanduser()))
    from .models import cache_dir

    places.append(("specllama's cache", cache_dir()))
    home = _home()
    places += [("LM Studio", home / ".lmstudio" / "models"), ("LM Studio", home / ".cache" / "lm-studio" / "models")]
    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or (
        str(Path(env["HF_HOME"]) / "hub") if env.get("HF_HOME") else
        str(Path(env["XDG_CACHE_HOME"]) / "huggingface" / "hub") if env.get("XDG_CACHE_HOME") else None)
    places.append(("Hugging Face's cache", Path(hub) if hub else home / ".cache" / "huggingface" / "hub"))
    places.append(("llama.cpp's cache", Path(env["LLAMA_CACHE"]) if env.get("LLAMA_CACHE") else
                   _user_cache() / "llama.cpp"))
    places.append(("ollama", Path(env["OLLAMA_MODELS"]) if env.get("OLLAMA_MODELS") else home / ".ollama" / "models"))
    seen, out = set(), []
    for what, d in places:
        try:
            key = d.resolve()
        except OSError:
            continue
        if key not in seen and d.is_dir():
            seen.add(key)
            out.append((what, d))
    return out


def _ollama_names(root: Path) -> Dict[str, str]:
    """Blob file name -> the model's name (`qwen2.5-coder:7b`), from ollama's manifests under root."""
    names: Dict[str, str] = {}
    manifests = root / "manifests"
    for path in sorted(manifests.glob("*/*/*/*")) if manifests.is_dir() else []:
        if not path.is_file():  # (a FIFO would block the read)
            continue
        try:
            layers = json.loads(path.read_text(encoding="utf-8")).get("layers", [])
        except (OSError, ValueError, AttributeError):
            continue
        namespace, model, tag = path.parts[-3:]
        name = f"{model}:{tag}" if namespace == "library" else f"{namespace}/{model}:{tag}"
        for layer in layers if isinstance(layers, list) else []:
            if isinstance(layer, dict) and layer.get("mediaType") == "application/vnd.ollama.image.model":
                names.setdefault(str(layer.get("digest", "")).replace(":", "-"), name)
    return names


def _is_gguf(path: Path) -> bool:
    if not path.is_file():  # (a FIFO would block the open)
        return False
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _files(what: str, root: Path) -> Iterator[Tuple[Path, str]]:
    """(path, label) of the GGUF files in a place: files named *.gguf (in the target's directory,
    those beside it only), and ollama's blobs."""
    if what == "ollama":
        names = _ollama_names(root)
        blobs = root / "blobs"
        for path in sorted(blobs.iterdir()) if blobs.is_dir() else []:
            if path.name in names and _is_gguf(path):
                yield path, names[path.name]
        return
    depth = 0 if what == "the target's directory" else MAX_DEPTH
    for d, dirs, files in os.walk(root):
        below = len(Path(d).parts) - len(root.parts)
        dirs[:] = sorted(x for x in dirs if not x.startswith(".")) if below < depth else []
        for name in sorted(files):
            if name.lower().endswith(".gguf"):
                yield Path(d) / name, name


class _Identities:
    """model_identity per file, kept by path, size and modification time in the cache directory."""

    def __init__(self) -> None:
        from .models import cache_dir

        self.path = cache_dir() / "local-models.json"
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self.known = data["files"] if data.get("format") == _CACHE_FORMAT else {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.known = {}
        if not isinstance(self.known, dict):
            self.known = {}
        self.changed = False

    def get(self, path: Path) -> Optional[dict]:
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            return None
        stamp = [st.st_size, st.st_mtime_ns]
        entry = self.known.get(real)
        if isinstance(entry, dict) and entry.get("stamp") == stamp:
            identity = entry.get("identity")
            if identity is None or (isinstance(identity, dict) and _FIELDS <= identity.keys()):
                return identity
        try:
            identity = dict(_core.model_identity(real), size=st.st_size)
        except (ValueError, OSError):
            identity = None  # (not a GGUF file ggml can read: kept, so that it is not read again)
        self.known[real] = {"stamp": stamp, "identity": identity}
        self.changed = True
        return identity

    def save(self) -> None:
        if not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"format": _CACHE_FORMAT, "files": self.known}), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:
            pass  # (a cache that cannot be written costs the next search its reads, nothing else)


def _kind(identity: dict) -> bool:
    """True for an instruction-tuned model, from its finetune and name."""
    words = re.split(r"[^a-z0-9]+", f"{identity.get('finetune', '')} {identity.get('name', '')}".lower())
    return bool(_INSTRUCT.intersection(words))


def _target_size(target: str, identity: dict) -> Tuple[int, int]:
    """The target's parameters and bytes, over every part of a model split across files."""
    m = _SPLIT.search(target)
    if identity.get("split_count", 1) <= 1 or not m:
        return int(identity["n_params"]), os.path.getsize(target)
    params = size = 0
    for i in range(1, int(m.group(2)) + 1):
        part = target[:m.start()] + f"-{i:05d}-of-{m.group(2)}.gguf"
        try:
            params += int(_core.model_identity(part)["n_params"])
            size += os.path.getsize(part)
        except (ValueError, OSError):
            pass
    return params, size


def find_drafts(target: "str | os.PathLike[str]",
                places: Optional[List[Tuple[str, Path]]] = None) -> List[DraftCandidate]:
    """The files in places (default: search_places(target)) that can draft for target, best first
    (the module's docstring says which can and in what order). A target that is missing or not a
    GGUF file raises as the decoder would (FileNotFoundError, ValueError)."""
    target = os.fspath(target)
    ident = _core.model_identity(target)
    n_target, target_bytes = _target_size(target, ident)
    if not ident["vocab_hash"]:
        return []
    family, kind = ident["basename"].lower(), _kind(ident)
    cache = _Identities()
    found: Dict[str, DraftCandidate] = {}
    own = os.path.realpath(target)
    for what, root in search_places(target) if places is None else places:
        for path, label in _files(what, root):
            real = os.path.realpath(path)
            if real == own or real in found:
                continue
            d = cache.get(path)
            if (d is None or d["vocab_hash"] != ident["vocab_hash"] or d["type"] in _NOT_MODELS
                    or d["architecture"] == "clip" or d["n_block"] == 0 or d["split_count"] > 1):
                continue
            copy = (d["n_params"] == n_target and d["architecture"] == ident["architecture"]
                    and d["size"] <= MAX_SHARE * target_bytes)
            if d["n_params"] > MAX_SHARE * n_target and not copy:
                continue
            found[real] = DraftCandidate(str(path), label, what, int(d["n_params"]), int(d["size"]),
                                         bool(family) and d["basename"].lower() == family, _kind(d) == kind,
                                         n_target, target_bytes, copy)
    cache.save()
    return sorted(found.values(),
                  key=lambda c: (c.copy, not c.same_family, not c.same_kind, c.n_params, c.size, c.path))


def choose_draft(target: "str | os.PathLike[str]") -> Tuple[Optional[str], str]:
    """(the best draft's path, or None where there is none; one line saying what was chosen and
    why, or where it looked)."""
    target = os.fspath(target)
    found = find_drafts(target)
    if found:
        return found[0].path, "draft chosen: " + found[0].describe()
    where = ", ".join(f"{what} ({d})" for what, d in search_places(target))
    return None, (f"no draft found for {os.path.basename(target)} (a GGUF of its vocabulary with at most half its "
                  f"parameters, or it in at most half its bytes) in {where}: prompt lookup drafts alone")
