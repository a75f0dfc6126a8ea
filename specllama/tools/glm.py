"""Tool calls in the form of GLM's chat templates (GLM-4.5, 4.6, 4.7 and 4.7-Flash; Ling 3.0's
and Laguna's write it too), which have the model call a tool as

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

(GLM-4.7-Flash without the line breaks), a value as text where its schema is a string's, as JSON
otherwise (the templates write it by tojson), as llama.cpp reads it. parse() reads the calls into
OpenAI's tool_calls, typing each value by its tool's schema, and the grammars hold a call to its
tool's schema as qwen3_coder's do (the required arguments in any order, then optional ones; a text
value any text up to its closing tag)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common, qwen3_coder

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, KEY_END, VALUE, VALUE_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
ENDS_THINKING: tuple = ()  # (a call comes after the thinking closes)
TAGS = (OPEN, CLOSE, KEY, KEY_END, VALUE, VALUE_END)  # spelled out where a vocabulary has them as control tokens
_NAME = re.compile(r"\s*([^\s<]+)\s*")
_ARG = re.compile(r"\s*" + re.escape(KEY) + r"(.*?)" + re.escape(KEY_END) + r"\s*" + re.escape(VALUE), re.S)
_CLOSE = re.compile(r"\s*" + re.escape(CLOSE))


def _call(text: str, at: int, params: Dict[str, Dict[str, Any]]) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call whose <tool_call> tag is at at, or None where it does not parse; where it ends)."""
    m = _NAME.match(text, at + len(OPEN))
    if not m:
        return None, at + len(OPEN)
    name, at, args = m.group(1), m.end(), {}
    schema = params.get(name, {})
    while True:
        a = _ARG.match(text, at)
        if not a:
            break
        end = text.find(VALUE_END, a.end())
        if end < 0:
            return None, at
        key = a.group(1).strip()
        args[key] = qwen3_coder._value(text[a.end():end], schema.get(key))
        at = end + len(VALUE_END)
    c = _CLOSE.match(text, at)
    if not c:
        return None, at
    return common.openai_call(name, args), c.end()


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls in OpenAI's shape (each value typed by
    its tool's schema among tools), the content the text before the first call (None where
    empty). Text with no call that parses comes back whole as content, with no calls."""
    params = qwen3_coder._schemas(tools)
    return common.read_calls(text, lambda t, at: t.find(OPEN, at), lambda t, at: _call(t, at, params))


StreamSplitter = common.splitter(parse, OPEN)


def _argument(key: str, value: str) -> str:
    nl = '"\\n"?'
    return f"{nl} {gbnf.literal(KEY + key + KEY_END)} {nl} {gbnf.literal(VALUE)} {value} {gbnf.literal(VALUE_END)}"


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """A GBNF grammar whose every output is one or more calls (one where not parallel) in this form
    to the checked tools (or to the one named), each value by its tool's schema, the line breaks
    between the tags optional: tool_choice "required" or a named function. ValueError where a
    schema cannot be followed."""
    rules = qwen3_coder.Rules("glm", VALUE_END)
    alts = []
    for i, fn in common.chosen(tools, name):
        args = qwen3_coder.arguments(rules, fn, f"tools[{i}].function.parameters", _argument)
        alts.append(f"{gbnf.literal(fn['name'])} {args}".rstrip())
    call = f'glm-call ::= {gbnf.literal(OPEN)} ( {" | ".join(alts)} ) "\\n"? {gbnf.literal(CLOSE)}'
    root = "root ::= glm-call" + (' ( "\\n"? glm-call )*' if parallel else "")
    return "\n".join([root, call] + rules.rules) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): calls from <tool_call> on."""
    return forced_grammar(tools, None, parallel), [re.escape(OPEN)]
