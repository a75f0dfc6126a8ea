"""Fill-in-the-middle prompts: the model's FIM tokens, and the prompt llama-server's /infill builds
from an editor's prefix, suffix, typed text and extra context chunks (format_prompt_infill in
llama.cpp's tools/server/server-common.cpp), token for token.

The repo-level pattern (Qwen2.5-Coder, arXiv 2409.12186), where the vocabulary has FIM_REP and
FIM_SEP::

    [FIM_REP]myproject\\n [FIM_SEP]{filename}\\n{text} ... [FIM_SEP]filename\\n
    [FIM_PRE]{prefix}{prompt}[FIM_SUF]{suffix}[FIM_MID]

Without FIM_SEP each chunk is preceded by a ``--- snippet ---`` line instead. What does not fit is
cut as llama-server cuts it: the prefix keeps its last 3/4 n_batch tokens, the suffix its first
n_batch/4 - 2 - len(prompt), and the extra context its last n_ctx - n_batch - 2 n_predict tokens.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

# llama-server's separator between extra chunks where the vocabulary has no FIM_SEP
_CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"
_NULL = -1  # LLAMA_TOKEN_NULL


class NoFIM(ValueError):
    """The model's vocabulary lacks the tokens a fill-in-the-middle prompt needs."""


def fim_tokens(model) -> Dict[str, int]:
    """The model's FIM token ids (pre, suf, mid, pad, rep, sep; -1 where it has none); NoFIM where
    it lacks one of pre, suf and mid, naming them as llama-server does."""
    ids = dict(model.fim_tokens)
    missing = [what for key, what in (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle")) if ids[key] == _NULL]
    if missing:
        raise NoFIM("infill is not supported by this model: " + ", ".join(f"{m} token is missing" for m in missing))
    return ids


def check_extra(input_extra: Any) -> List[Dict[str, str]]:
    """input_extra as llama-server accepts it: a list of {"text": str, "filename": str (optional)}."""
    if input_extra is None:
        return []
    if not isinstance(input_extra, list):
        raise ValueError("'input_extra' must be an array of {\"filename\": string, \"text\": string}")
    for chunk in input_extra:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise ValueError("each 'input_extra' chunk must contain a \"text\" field with a string value")
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise ValueError("an 'input_extra' chunk's \"filename\" field must be a string")
    return input_extra


def tokenize_mixed(model, value: Any, add_special: bool, parse_special: bool) -> List[int]:
    """A string, or a list of strings and token ids, as tokens (llama-server's tokenize_mixed: only
    a leading string gets the special tokens)."""
    if isinstance(value, str):
        return _tokenize(model, value, add_special, parse_special)
    if not isinstance(value, list):
        raise ValueError("must be a string or a list of strings and token ids")
    out: List[int] = []
    for i, part in enumerate(value):
        if isinstance(part, str):
            out += _tokenize(model, part, add_special and i == 0, parse_special)
        elif isinstance(part, int) and not isinstance(part, bool) and 0 <= part < model.n_vocab:
            out.append(part)
        else:
            raise ValueError(f"holds {part!r}, neither a string nor a token id of this vocabulary")
    return out


def _tokenize(model, text: str, add_special: bool, parse_special: bool) -> List[int]:
    return model.tokenize(text, add_special, parse_special, max_tokens=max(1 << 20, 4 * len(text) + 16))


def infill_prompt(model, input_prefix: Any, input_suffix: Any, input_extra: Sequence[dict], prompt: Sequence[int],
                  n_batch: int, n_predict: int, n_ctx: int, spm_infill: bool = False) -> List[int]:
    """The tokens of llama-server's infill prompt. prompt: the typed text's tokens (appended to the
    prefix); n_predict: the server's own limit (-1: none), which reserves room as llama-server's does."""
    ids = fim_tokens(model)
    prefix = tokenize_mixed(model, input_prefix, False, False)
    suffix = tokenize_mixed(model, input_suffix, False, False)

    extra: List[int] = []
    if ids["rep"] != _NULL:
        extra += [ids["rep"]] + _tokenize(model, "myproject\n", False, False)
    for chunk in input_extra:
        if ids["sep"] != _NULL:
            extra += [ids["sep"]] + _tokenize(model, chunk.get("filename", "tmp") + "\n", False, False)
        else:
            extra += _tokenize(model, _CHUNK_SEPARATOR, False, False)
        extra += _tokenize(model, chunk["text"], False, False)
    if ids["sep"] != _NULL:
        extra += [ids["sep"]] + _tokenize(model, "filename\n", False, False)

    n_prefix = min(len(prefix), 3 * (n_batch // 4))
    n_suffix = min(len(suffix), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra))

    prefix = [ids["pre"]] + prefix[len(prefix) - n_prefix:] + list(prompt)
    suffix = [ids["suf"]] + suffix[:n_suffix]
    head, tail = (suffix, prefix) if spm_infill else (prefix, suffix)
    if model.add_bos:
        head = [model.bos] + head
    return extra[len(extra) - n_extra:] + head + tail + [ids["mid"]]
