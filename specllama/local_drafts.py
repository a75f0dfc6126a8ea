"""Finding a draft for a target among the GGUF files already on this machine (`-d auto`).

A draft can stand in for the target only where it is much cheaper and agrees with it often; the
files a user already has from other tools are the first place to look. This module reads each GGUF
file's header (specllama._core.model_identity: no weights are read) in the target's own directory,
then in the places specllama.local_models lists (LM Studio's, Hugging Face's cache, ollama's, ...).

A file can draft for the target here when it is a model (not an adapter or a projector), in one
file, of the target's vocabulary (the same tokenizer and every token's text), and either has at
most half the target's parameters or is the target in fewer bits (the target's architecture and
parameters in at most half its bytes: a quantized copy). Among those, the first by: a smaller
model before a copy, the target's family (general.basename, such as Qwen2.5-Coder), the target's
kind (instruction-tuned or base), fewer parameters, a smaller file, the path. A draft of another
vocabulary can draft too (token-level intersection) but is never chosen here: name it with -d.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from . import _core
from .local_models import _files, _Identities, _split_info, is_model, name_of, params_text, search_places

__all__ = ["DraftCandidate", "find_drafts", "choose_draft", "search_places"]

MAX_SHARE = 0.5  # a draft has at most this share of the target's parameters
_INSTRUCT = {"instruct", "chat", "it", "sft", "dpo", "rlhf"}


@dataclass(frozen=True)
class DraftCandidate:
    """A file that can draft for the target; find_drafts lists them best first."""

    path: str
    label: str  # the name -m/-d takes for it (ollama's, a repository's), else the file's name
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
        return (f"{self.label} ({self.place}): the target's vocabulary, {params_text(self.n_params)} parameters "
                f"against the target's {params_text(self.target_params)}, {family}{kind}")


def _kind(identity: dict) -> bool:
    """True for an instruction-tuned model, from its finetune and name."""
    words = re.split(r"[^a-z0-9]+", f"{identity.get('finetune', '')} {identity.get('name', '')}".lower())
    return bool(_INSTRUCT.intersection(words))


def _target_size(target: str, identity: dict) -> Tuple[int, int]:
    """The target's parameters and bytes, over every part of a model split across files."""
    prefix, _, parts, _ = _split_info(target)
    if identity.get("split_count", 1) <= 1 or parts <= 1:
        return int(identity["n_params"]), os.path.getsize(target)
    params = size = 0
    for i in range(1, parts + 1):
        part = f"{prefix}-{i:05d}-of-{parts:05d}.gguf"
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
            if not is_model(d) or d["vocab_hash"] != ident["vocab_hash"] or d["split_count"] > 1:
                continue
            copy = (d["n_params"] == n_target and d["architecture"] == ident["architecture"]
                    and d["size"] <= MAX_SHARE * target_bytes)
            if d["n_params"] > MAX_SHARE * n_target and not copy:
                continue
            found[real] = DraftCandidate(str(path), name_of(what, root, path, label) or label, what,
                                         int(d["n_params"]), int(d["size"]),
                                         bool(family) and d["basename"].lower() == family, _kind(d) == kind,
                                         n_target, target_bytes, copy)
    cache.save()
    return sorted(found.values(),
                  key=lambda c: (c.copy, not c.same_family, not c.same_kind, c.n_params, c.size, c.path))


def choose_draft(target: "str | os.PathLike[str]") -> Tuple[Optional[str], str]:
    """(the best draft's path, or None where there is none; one line saying what was chosen and
    why, or where it looked)."""
    return describe_choice(os.fspath(target), find_drafts(target))


def describe_choice(target: str, found: List[DraftCandidate]) -> Tuple[Optional[str], str]:
    """choose_draft's answer from what find_drafts found."""
    if found:
        return found[0].path, "draft chosen: " + found[0].describe()
    where = ", ".join(f"{what} ({d})" for what, d in search_places(target))
    return None, (f"no draft found for {os.path.basename(target)} (a GGUF of its vocabulary with at most half its "
                  f"parameters, or it in at most half its bytes) in {where}: prompt lookup drafts alone")
