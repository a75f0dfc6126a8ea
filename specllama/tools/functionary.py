"""Tool calls in the form of MeetKai's Functionary v3.1 chat template (on Llama 3.1), which has the
model call a tool as

    <function=get_weather>{"city": "Paris", "days": 3}</function>

the arguments a JSON object, as llama.cpp reads it. parse() reads the calls (one after another)
into OpenAI's tool_calls, the text before the first the content; the grammars write calls in this
form, the arguments by the tool's schema (the JSON schema converter). The template's code
interpreter (<|python_tag|>) is a built-in tool and is not read, as llama-server does not."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common

OPEN, CLOSE = "<function=", "</function>"
ENDS_THINKING: tuple = ()
TAGS: tuple = ()  # (plain text in Llama 3.1's vocabulary)
_DECODER = json.JSONDecoder()
_NAME = re.compile(r"([^>\s]+)>\s*")
_CLOSE = re.compile(r"\s*" + re.escape(CLOSE))


def is_functionary(source: str) -> bool:
    """Whether a chat template teaches this form (<function=name> with JSON arguments, where
    Qwen3-Coder's and Seed-OSS's write <parameter=...> tags instead)."""
    return OPEN in source and CLOSE in source and "<parameter=" not in source


def _call(text: str, at: int) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call whose <function= is at at, or None where it does not parse; where it ends)."""
    m = _NAME.match(text, at + len(OPEN))
    if m is None:
        return None, at + len(OPEN)
    try:
        value, end = _DECODER.raw_decode(text, m.end())
    except (ValueError, RecursionError):
        return None, m.end()
    close = _CLOSE.match(text, end)
    if close is None or not isinstance(value, dict):
        return None, end
    return common.openai_call(m.group(1), value), close.end()


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls in OpenAI's shape, the content the text
    before the first call (None where empty). Text with no call that parses comes back whole as
    content, with no calls."""
    return common.read_calls(text, lambda t, at: t.find(OPEN, at), _call)


StreamSplitter = common.splitter(parse, OPEN)


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """A GBNF grammar whose every output is one or more calls (one where not parallel) in this form
    to the checked tools (or to the one named), the arguments by the tool's schema: tool_choice
    "required" or a named function. ValueError where a schema cannot be converted."""
    rules, alts = [], []
    for i, fn in common.chosen(tools, name):
        rules.append(common.arguments_grammar(fn, f"functionary-{i}-"))
        alts.append(f"{gbnf.literal(fn['name'] + '>')} functionary-{i}-root")
    call = f'functionary-call ::= {gbnf.literal(OPEN)} ( {" | ".join(alts)} ) {gbnf.literal(CLOSE)}'
    root = "root ::= functionary-call" + (' ( "\\n"? functionary-call )*' if parallel else "")
    return "\n".join([root, call, *rules]) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): calls from <function= on."""
    return forced_grammar(tools, None, parallel), [common.regex_literal(OPEN)]
