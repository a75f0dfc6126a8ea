"""Tool calls in the form of Moonshot's Kimi K2 chat templates (K2 Instruct, K2 Thinking, and any
template that writes their call section), which have the model call tools as

    <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
    {"city": "Paris", "days": 3}<|tool_call_end|><|tool_calls_section_end|>

(one line), each call's id functions.NAME:INDEX, its arguments a JSON object, as llama.cpp reads it:
the section's tags and a call's closing tag may be left out, and a call may end a thinking block that
was not closed. parse() reads the calls into OpenAI's tool_calls, each with the model's id (which
the templates write back in a tool result's "## Return of ..." line), the content the text before
the first; the grammars write calls in this form, the arguments by the tool's schema."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common

SECTION, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
OPEN, ARGS, CLOSE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
ENDS_THINKING = (SECTION, OPEN)  # (a call may come before the thinking's closing tag)
TAGS = (SECTION, SECTION_END, OPEN, ARGS, CLOSE)
_DECODER = json.JSONDecoder()
_ID = re.compile(r"\s*(functions\.([^:<>\s]+):\d+)" + re.escape(ARGS) + r"\s*")


def is_kimi(source: str) -> bool:
    """Whether a chat template writes this form (both its section's and its call's tag)."""
    return SECTION in source and OPEN in source


def _start(text: str, at: int) -> int:
    """Where the next call starts from at (a section's tag before it, where one is), or -1."""
    found = text.find(OPEN, at)
    section = text.find(SECTION, at)
    return section if 0 <= section < found else found


def _call(text: str, at: int) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call that starts at at, or None where it does not parse; where it ends)."""
    at = text.index(OPEN, at) + len(OPEN)
    m = _ID.match(text, at)
    if m is None:
        return None, at
    try:
        value, end = _DECODER.raw_decode(text, m.end())
    except (ValueError, RecursionError):
        return None, m.end()
    if not isinstance(value, dict):
        return None, end
    call = common.openai_call(m.group(2), value)
    call["id"] = m.group(1)
    return call, end


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls in OpenAI's shape with the model's ids,
    the content the text before the first call (None where empty). Text with no call that parses
    comes back whole as content, with no calls."""
    return common.read_calls(text, _start, _call)


StreamSplitter = common.splitter(parse, SECTION, OPEN)


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """A GBNF grammar whose every output is one or more calls (one where not parallel) in this form
    to the checked tools (or to the one named), each with an id of the tool's name and an index and
    the arguments by the tool's schema, in a section whose tags may be left out (as llama.cpp's
    grammar has it): tool_choice "required" or a named function. ValueError where a schema cannot
    be converted."""
    rules, alts = [], []
    for i, fn in common.chosen(tools, name):
        rules.append(common.arguments_grammar(fn, f"kimi-{i}-"))
        alts.append(f"{gbnf.literal('functions.' + fn['name'] + ':')} [0-9]{{1,4}} {gbnf.literal(ARGS)} kimi-{i}-root")
    call = f'kimi-call ::= {gbnf.literal(OPEN)} ( {" | ".join(alts)} ) {gbnf.literal(CLOSE)}?'
    calls = "kimi-call" + (" kimi-call*" if parallel else "")
    root = f"root ::= {gbnf.literal(SECTION)}? {calls} {gbnf.literal(SECTION_END)}?"
    return "\n".join([root, call, *rules]) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): calls from the section's tag
    on, or from a call's where the section's is left out."""
    return forced_grammar(tools, None, parallel), [common.regex_literal(SECTION), common.regex_literal(OPEN)]
