"""Generation options and results: the native core's option and statistics types, options set by
name with clear errors, and what stream() yields. Shared by the decoder and the OpenAI layer
(specllama.completions), which both build options from user input.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from . import _core

Completion = _core.Completion  # text, tokens, finish_reason, context_full, stats, dsi
Stats = _core.Stats
DSIStats = _core.DSIStats
GenerateOptions = _core.GenerateOptions
TokenLogprob = _core.TokenLogprob
StepPrices = _core.StepPrices


def as_dict(obj) -> dict:
    """A Stats, DSIStats, StepTrace or StepPrices as a plain dict of its fields (for JSON; Stats.steps
    as a list of dicts)."""
    def plain(value):
        return [v.as_dict() for v in value] if isinstance(value, list) and value and hasattr(value[0], "as_dict") \
            else value

    return {name: plain(getattr(obj, name)) for name in dir(type(obj))
            if not name.startswith("_") and isinstance(getattr(type(obj), name), property)}


_KINDS = {bool: "a bool", int: "an int", float: "a number", str: "a string", list: "a list of strings"}


def type_error(name: str, value, default) -> Exception:
    """A clear error for a value the native side could not convert (instead of pybind11's list of
    signatures): a wrong type, or an integer outside what the field can hold."""
    if isinstance(value, int) and not isinstance(value, bool) and isinstance(default, (int, type(None))):
        return ValueError(f"{name} must be in [0, 2**64 - 1], got {value}" if name == "seed"
                          else f"{name} is out of range, got {value}")
    want = _KINDS.get(type(default), "an int") if default is not None else "None or an int"
    return TypeError(f"{name} must be {want}, got {type(value).__name__}")


for _cls in (Stats, DSIStats, StepPrices, _core.StepTrace):
    _cls.as_dict = as_dict  # stats.as_dict(): the fields as a dict


def make_options(options: Optional[GenerateOptions] = None, **fields) -> GenerateOptions:
    """options (or the defaults) with fields set by name, checked by the native core: ValueError
    naming the first bad value, TypeError for a wrong type or an unknown field."""
    opts = options.copy() if options is not None else GenerateOptions()
    for name, value in fields.items():
        if not hasattr(GenerateOptions, name) or name.startswith("_") or callable(getattr(GenerateOptions, name)):
            raise TypeError(f"unknown generation option {name!r}")
        if name == "stop" and isinstance(value, str):
            value = [value]
        if name == "stop" and isinstance(value, (list, tuple)):
            for i, text in enumerate(value):
                _core.check_text(text, f"stop[{i}]")
        try:
            setattr(opts, name, value)
        except TypeError:
            raise type_error(name, value, getattr(GenerateOptions(), name)) from None
    opts.validate()
    return opts


class PromptTooLong(ValueError):
    """A prompt (or conversation) that does not fit in the context."""


@dataclass(frozen=True)
class StepChunk:
    """What stream() yields: one verification step's new text; the last chunk has no text and
    carries finish_reason and stats."""

    text: str
    tokens: List[int]
    n_drafted: int = 0
    n_accepted: int = 0
    finish_reason: Optional[str] = None
    context_full: bool = False
    stats: Optional[Stats] = field(default=None, repr=False)
    dsi: Optional[DSIStats] = field(default=None, repr=False)
    logprobs: Optional[list] = field(default=None, repr=False)  # TokenLogprob per token, with options.logprobs
