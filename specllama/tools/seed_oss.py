"""Tool calls in the form of ByteDance's Seed-OSS chat template, which has the model call a tool as

    <seed:tool_call>
    <function=get_weather>
    <parameter=city>Paris</parameter>
    <parameter=days>3</parameter>
    </function>
    </seed:tool_call>

a value standing as it is up to </parameter> (line breaks in it kept), as text where its schema is a
string's and as JSON otherwise, as llama.cpp reads it. parse() reads the calls into OpenAI's
tool_calls, typing each value by its tool's schema, and the grammars hold a call to its tool's
schema as qwen3_coder's do (the required arguments in any order, then optional ones; a text value
any text up to </parameter>). Seed-OSS thinks between <seed:think> and </seed:think> first
(specllama.reasoning)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common, qwen3_coder

OPEN, CLOSE = "<seed:tool_call>", "</seed:tool_call>"
ENDS_THINKING: tuple = ()  # (a call comes after the thinking closes)
TAGS = (OPEN, CLOSE)  # spelled out where a vocabulary has them as control tokens
_VALUE_END = "</parameter>"
_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>")
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]+)>")
_CLOSE = re.compile(r"\s*</function>\s*" + re.escape(CLOSE))


def _call(text: str, at: int, params: Dict[str, Dict[str, Any]]) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call whose <seed:tool_call> tag is at at, or None where it does not parse; where it ends)."""
    m = _FUNCTION.match(text, at + len(OPEN))
    if not m:
        return None, at + len(OPEN)
    name, at, args = m.group(1).strip(), m.end(), {}
    schema = params.get(name, {})
    while True:
        p = _PARAMETER.match(text, at)
        if not p:
            break
        end = text.find(_VALUE_END, p.end())
        if end < 0:
            return None, p.end()
        key = p.group(1).strip()
        args[key] = qwen3_coder._value(text[p.end():end], schema.get(key))
        at = end + len(_VALUE_END)
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


_P = "seed"


def _argument(key: str, value: str) -> str:
    return f"{gbnf.literal(f'<parameter={key}>')} {value} {gbnf.literal(_VALUE_END + chr(10))}"


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """A GBNF grammar whose every output is one or more calls (one where not parallel) in this form
    to the checked tools (or to the one named), each value by its tool's schema, as the template
    lays them out over lines: tool_choice "required" or a named function. ValueError where a schema
    cannot be followed."""
    rules = qwen3_coder.Rules(_P, _VALUE_END)
    alts = []
    for i, fn in common.chosen(tools, name):
        args = qwen3_coder.arguments(rules, fn, f"tools[{i}].function.parameters", _argument)
        alts.append(f"{gbnf.literal('<function=' + fn['name'] + '>' + chr(10))} {args}".rstrip())
    call = (f'{_P}-call ::= {gbnf.literal(OPEN + chr(10))} ( {" | ".join(alts)} ) '
            f'{gbnf.literal("</function>" + chr(10) + CLOSE)}')
    root = f"root ::= {_P}-call" + (f' ( "\\n" {_P}-call )*' if parallel else "")
    return "\n".join([root, call] + rules.rules) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): calls from <seed:tool_call> on."""
    return forced_grammar(tools, None, parallel), [re.escape(OPEN)]
