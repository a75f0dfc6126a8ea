"""The GGUF files on this machine, where other tools keep them, and the names those tools give them.

specllama looks in these places, in order (search_places):

    the target's directory        (for -d auto)
    $SPECLLAMA_MODEL_PATH         directories, separated as PATH is
    specllama's cache             the named pairs (specllama.models.cache_dir())
    LM Studio                     ~/.lmstudio/models, ~/.cache/lm-studio/models
    Hugging Face's cache          $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub (llama.cpp's -hf
                                  downloads too)
    llama.cpp's cache             $LLAMA_CACHE or the user cache directory's llama.cpp (older -hf downloads)
    ollama                        $OLLAMA_MODELS or ~/.ollama/models (blobs, named by their manifests)

A model can be given by the name its tool knows it by wherever a model file is taken (-m, -d, the
Python API's model_path and draft_path; resolve_model):

    name, name.gguf                             a file of that name in a $SPECLLAMA_MODEL_PATH directory
    Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF:Q8_0  LM Studio's (publisher/repository), then Hugging Face's
                                                cache or llama.cpp's (llama.cpp's -hf); the tag, the
                                                quantization, is optional
    qwen2.5-coder:1.5b                          ollama (`ollama pull`): library models, tag latest if none
    user/model:tag, hf.co/user/repo:tag         ollama, other namespaces and registries

A repository's file is chosen as llama.cpp's -hf chooses it: the first model file (not a projector,
an importance matrix or a speculative head) whose path holds the tag followed by "." or "-", the
first part of a split model; with no tag, Q4_K_M, then Q8_0, then the first model file.

What each file is (specllama._core.model_identity: its header, no weights) is kept in the cache
directory (local-models.json) by path, size and modification time, so that a second search reads
no header it has read.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from . import _core

__all__ = ["LocalModel", "list_local_models", "params_text", "resolve_model", "search_places"]

MAX_DEPTH = 6  # directory levels below a place that are searched (Hugging Face's cache: 4)
NOT_MODELS = {"adapter", "mmproj", "vocab", "imatrix"}  # general.type of files that are no model
_CACHE_FORMAT = 1
_FIELDS = {"architecture", "type", "basename", "finetune", "name", "n_params", "n_block", "vocab_hash",
           "split_count", "size"}
_OLLAMA = "registry.ollama.ai"
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*(/[A-Za-z0-9_][A-Za-z0-9_.\-]*){0,2}(:[A-Za-z0-9_.\-]+)?")
_SIDECARS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")  # (llama.cpp's gguf_filename_is_model)
_SPLIT = re.compile(r"^(.+)-([0-9]{5})-of-([0-9]{5})$", re.I)
_TAG = re.compile(r"[-.]([A-Z0-9_]+)$", re.I)
_REPO_PLACES = ("Hugging Face's cache", "llama.cpp's cache", "LM Studio")


@dataclass(frozen=True)
class LocalModel:
    """A model file on this machine (list_local_models)."""

    path: str
    name: str  # what -m takes for it: the name its tool gives it, else its path
    place: str  # where it was found ("LM Studio", "ollama", ...)
    architecture: str
    n_params: int  # of this file (the first part, for a model split across files)
    size: int  # bytes, of this file
    split_count: int  # files the model is split across


def params_text(n: int) -> str:
    """A parameter count as people say it: 1.54B, 494M."""
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _split_info(rel: str) -> Tuple[str, int, int, str]:
    """(prefix, part, parts, TAG) of a GGUF file's path, as llama.cpp reads them from the name
    (`model-Q4_K_M-00001-of-00003.gguf`: the tag is the last word after "-" or ".", upper-cased)."""
    prefix, part, parts = rel[:-5] if rel.endswith(".gguf") else rel, 1, 1
    m = _SPLIT.match(prefix)
    if m:
        prefix, part, parts = m.group(1), int(m.group(2)), int(m.group(3))
    t = _TAG.search(prefix)
    return prefix, part, parts, t.group(1).upper() if t else ""


def _model_files(files: List[str]) -> List[str]:
    """Of a repository's files (relative paths), the models llama.cpp's -hf can load: GGUF files
    that are no projector, importance matrix or speculative head, the first part of a split one."""
    return [f for f in files if f.endswith(".gguf") and not any(s in f.rsplit("/", 1)[-1] for s in _SIDECARS)
            and _split_info(f)[1] == 1]


def _best_file(files: List[str], tag: str) -> Optional[str]:
    """The file llama.cpp's -hf REPO[:TAG] loads among a repository's (sorted relative paths)."""
    models = _model_files(files)
    for t in [tag] if tag else ["Q4_K_M", "Q8_0"]:
        pattern = re.compile(re.escape(t) + "[.-]", re.I)
        for f in models:
            if pattern.search(f):
                return f
    return None if tag or not models else models[0]


def _child(d: Path, name: str) -> Optional[Path]:
    """d/name, else the one directory in d whose name is name in other letter case."""
    if (d / name).is_dir():
        return d / name
    try:
        found = [c for c in d.iterdir() if c.name.lower() == name.lower() and c.is_dir()]
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


def _snapshot(repo: Path) -> Optional[Path]:
    """The snapshot of a Hugging Face cache's repository that llama.cpp reads: the commit refs/main
    names, else another ref's, else the only snapshot there is."""
    snapshots = repo / "snapshots"
    try:
        refs = sorted((repo / "refs").iterdir(), key=lambda p: p.name != "main") if (repo / "refs").is_dir() else []
        for ref in refs:
            if ref.is_file():
                commit = ref.read_text(encoding="utf-8", errors="replace").strip()
                if commit and "/" not in commit and commit not in (".", "..") and (snapshots / commit).is_dir():
                    return snapshots / commit
        found = [d for d in snapshots.iterdir() if d.is_dir()] if snapshots.is_dir() else []
    except OSError:
        return None
    return found[0] if len(found) == 1 else None


def _repo_dir(what: str, root: Path, repo: str) -> Optional[Path]:
    """The directory holding a repository's files in a place: a Hugging Face cache's snapshot
    (models--USER--REPO), LM Studio's PUBLISHER/REPO."""
    user, name = repo.split("/")
    if what == "LM Studio":
        d = _child(root, user)
        return _child(d, name) if d else None
    d = _child(root, f"models--{user}--{name}")
    return _snapshot(d) if d else None


def _repo_files(what: str, root: Path, repo: str, memo: dict) -> Tuple[Optional[Path], List[str]]:
    """(_repo_dir, the paths of the model files in it, sorted), read once per memo."""
    key = ("repo", what, str(root), repo)
    if key not in memo:
        d, out = _repo_dir(what, root, repo), []
        for sub, dirs, files in os.walk(d) if d else ():
            below = len(Path(sub).parts) - len(d.parts)
            dirs[:] = [x for x in dirs if not x.startswith(".")] if below < MAX_DEPTH else []
            out += [Path(sub, f).relative_to(d).as_posix() for f in files]
        memo[key] = d, _model_files(sorted(out))
    return memo[key]


def _repo_file(what: str, root: Path, repo: str, tag: str, memo: dict) -> Optional[Path]:
    d, models = _repo_files(what, root, repo, memo)
    best = _best_file(models, tag) if d else None
    return d / best if d and best else None


def _ollama_name(host: str, namespace: str, model: str, tag: str) -> str:
    """ollama's shortest name for a model: `qwen2.5-coder:7b`, `user/model:tag`, `hf.co/user/repo:tag`."""
    where = (f"{host}/{namespace}/" if host.lower() != _OLLAMA else
             "" if namespace.lower() == "library" else f"{namespace}/")
    return f"{where}{model}:{tag}"


def _ollama_models(root: Path, memo: Optional[dict] = None) -> Dict[str, str]:
    """ollama's name of each model -> its weights' blob (a file name in root/blobs), from the
    manifests under root (read once per memo)."""
    key = ("ollama", str(root))
    if memo is not None and key in memo:
        return memo[key]
    models: Dict[str, str] = {}
    if memo is not None:
        memo[key] = models
    manifests = root / "manifests"
    for path in sorted(manifests.glob("*/*/*/*")) if manifests.is_dir() else []:
        if not path.is_file():  # (a FIFO would block the read)
            continue
        try:
            layers = json.loads(path.read_text(encoding="utf-8")).get("layers", [])
        except (OSError, ValueError, AttributeError):
            continue
        for layer in layers if isinstance(layers, list) else []:
            if isinstance(layer, dict) and layer.get("mediaType") == "application/vnd.ollama.image.model":
                blob = str(layer.get("digest", "")).replace(":", "-")
                if blob and "/" not in blob and blob not in (".", ".."):
                    models.setdefault(_ollama_name(*path.parts[-4:]), blob)
                break
    return models


def _ollama_names(root: Path) -> Dict[str, str]:
    """Blob file name -> ollama's name for the model (the first, where several name one blob)."""
    names: Dict[str, str] = {}
    for name, blob in _ollama_models(root).items():
        names.setdefault(blob, name)
    return names


def _ollama_blob(root: Path, name: str, memo: dict) -> Optional[Path]:
    """The blob of an ollama name ([[HOST/]NAMESPACE/]MODEL[:TAG]; the tag latest where none)."""
    parts = name.split("/")
    model, _, tag = parts[-1].partition(":")
    want = _ollama_name(*([_OLLAMA, "library"][:3 - len(parts)] + parts[:-1]), model, tag or "latest").lower()
    blob = next((b for n, b in _ollama_models(root, memo).items() if n.lower() == want), None)
    return root / "blobs" / blob if blob and (root / "blobs" / blob).is_file() else None


def _places_for(name: str, memo: dict) -> List[Tuple[str, Path]]:
    """The places a name can stand for a file in: a file's name ($SPECLLAMA_MODEL_PATH) has no
    slash and no tag, a repository's one slash and no `.gguf`; ollama's, no `.gguf`."""
    base, _, tag = name.partition(":")
    slashes, gguf = base.count("/"), base.lower().endswith(".gguf")
    if "places" not in memo:
        memo["places"] = search_places()
    return [(what, root) for what, root in memo["places"]
            if (what == "SPECLLAMA_MODEL_PATH" and not slashes and not tag)
            or (what in _REPO_PLACES and slashes == 1 and not gguf) or (what == "ollama" and not gguf)]


def _named(name: str, places: List[Tuple[str, Path]], memo: dict) -> Optional[Path]:
    """The file a model's name stands for, the first of the places that has it; None where none."""
    base, _, tag = name.partition(":")
    for what, root in places:
        found: Optional[Path] = None
        if what == "SPECLLAMA_MODEL_PATH":
            found = next((f for f in (root / name, root / f"{name}.gguf") if f.is_file()), None)
        elif what == "ollama":
            found = _ollama_blob(root, name, memo)
        else:
            found = _repo_file(what, root, base, tag, memo)
        if found is not None:
            return found
    return None


def is_name(model: "str | os.PathLike[str]") -> bool:
    """True where model is not a file that exists but could be a model's name (resolve_model)."""
    return (isinstance(model, str) and not os.path.exists(model) and bool(_NAME.fullmatch(model))
            and not (model.lower().endswith(".gguf") and "/" in model))


def resolve_model(model: "str | os.PathLike[str]") -> "str | os.PathLike[str]":
    """The file a model argument stands for: itself where it is a path (a file that exists, or no
    name a tool gives: `x/y.gguf`, `./x`, `/abs`, `y.gguf` where $SPECLLAMA_MODEL_PATH is not set),
    else the file its name stands for (the module's docstring says which). A name that none of its
    places knows raises FileNotFoundError, saying where it looked."""
    return _resolve(model, {})


def _resolve(model: "str | os.PathLike[str]", memo: dict) -> "str | os.PathLike[str]":
    """resolve_model, reading each place's listing once per memo."""
    places = _places_for(model, memo) if is_name(model) else []
    if not places:
        return model
    found = _named(str(model), places, memo)
    if found is None:
        where = ", ".join(dict.fromkeys(what for what, _ in places))
        raise FileNotFoundError(f"model file not found: {model}, nor a model of that name in {where} "
                                "(`specllama models --local` lists the models on this machine)")
    return str(found)


def name_of(what: str, root: Path, path: Path, label: str, memo: Optional[dict] = None) -> Optional[str]:
    """The name -m takes for a file _files found in a place (with this label), or None: ollama's
    name; a repository's name, with the file's tag where the repository holds more than one model;
    a file's name in a $SPECLLAMA_MODEL_PATH directory."""
    if what == "ollama" or (what == "SPECLLAMA_MODEL_PATH" and path.parent == root):
        return label
    if what not in _REPO_PLACES:
        return None
    parts = path.relative_to(root).parts
    if what == "LM Studio" and len(parts) >= 3:
        repo = f"{parts[0]}/{parts[1]}"
    elif len(parts) >= 4 and parts[0].startswith("models--") and parts[1] == "snapshots":
        repo = parts[0][len("models--"):].replace("--", "/")
    else:
        return None
    if repo.count("/") != 1:
        return None
    d, models = _repo_files(what, root, repo, {} if memo is None else memo)
    if d is None:
        return None
    rel = path.relative_to(d).as_posix() if d in path.parents else None
    tag = _split_info(rel)[3] if rel else ""
    for name, t in ([(repo, "")] if len(models) == 1 else []) + ([(f"{repo}:{tag}", tag)] if tag else []):
        if _best_file(models, t) == rel:
            return name
    return None


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


def is_model(identity: Optional[dict]) -> bool:
    """True for a file's identity (_Identities.get) that is a model's weights: not an adapter, a
    projector, a vocabulary or an importance matrix."""
    return (identity is not None and identity["type"] not in NOT_MODELS and identity["architecture"] != "clip"
            and identity["n_block"] > 0)


def list_local_models() -> List[LocalModel]:
    """The models in the places (search_places()), each file once, in the places' order: what
    `specllama models --local` lists. A split model is listed by its first part."""
    cache = _Identities()
    found: Dict[str, LocalModel] = {}
    memo: dict = {}  # (each place's listing, read once for all the names)
    for what, root in search_places():
        for path, label in _files(what, root):
            real = os.path.realpath(path)
            if real in found or _split_info(path.name)[1] != 1 or any(s in path.name for s in _SIDECARS):
                continue
            d = cache.get(path)
            if not is_model(d):
                continue
            name = name_of(what, root, path, label, memo)
            try:  # (a name that another place's file takes first is no name for this one)
                ok = name is not None and os.path.realpath(_resolve(name, memo)) == real
            except FileNotFoundError:
                ok = False
            found[real] = LocalModel(str(path), name if ok else str(path), what, d["architecture"],
                                     int(d["n_params"]), int(d["size"]), int(d["split_count"]))
    cache.save()
    return list(found.values())
