"""Tool calls in the form of MiniCPM5's chat template, which has the model call a tool as

    <function name="get_weather"><param name="city">Paris</param><param name="days">3</param></function>

a value as text where its schema is a string's (wrapped in <![CDATA[...]]> where it holds "<", "&"
or a line break, so that it may hold </param>), as JSON otherwise, as llama.cpp reads it. parse()
reads the calls into OpenAI's tool_calls, typing each value by its tool's schema, and the grammars
hold a call to its tool's schema as qwen3_coder's do (the required arguments in any order, then
optional ones; a text value any text up to </param>, or a CDATA block)."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common, qwen3_coder

OPEN, CLOSE = '<function name="', "</function>"
PARAM, PARAM_END = '<param name="', "</param>"
CDATA, CDATA_END = "<![CDATA[", "]]>"
ENDS_THINKING: tuple = ()  # (a call comes after the thinking closes)
TAGS = ("<function", CLOSE, "<param", PARAM_END)  # spelled out where a vocabulary has them as control tokens
_NAME = re.compile(r'([^"<>]+)">')
_PARAM = re.compile(r"\s*" + re.escape(PARAM) + r'([^"<>]*)">')
_CLOSE = re.compile(r"\s*" + re.escape(CLOSE))


def is_minicpm5(source: str) -> bool:
    """Whether a chat template teaches this form (its tool guidelines and both tags)."""
    return "Tool usage guidelines:" in source and OPEN in source and PARAM in source


def _text_value(text: str, at: int) -> Tuple[Optional[str], int]:
    """(a value's text from at, a CDATA block's inner text or the text up to </param>, or None where
    it does not close; where its </param> ends)."""
    if text.startswith(CDATA, at):
        end = text.find(CDATA_END, at + len(CDATA))
        if end < 0 or not text.startswith(PARAM_END, end + len(CDATA_END)):
            return None, at
        return text[at + len(CDATA):end], end + len(CDATA_END) + len(PARAM_END)
    end = text.find(PARAM_END, at)
    return (None, at) if end < 0 else (text[at:end], end + len(PARAM_END))


def _call(text: str, at: int, params: Dict[str, Dict[str, Any]]) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call whose <function name=" tag is at at, or None where it does not parse; where it ends)."""
    m = _NAME.match(text, at + len(OPEN))
    if not m:
        return None, at + len(OPEN)
    name, at, args = m.group(1), m.end(), {}
    schema = params.get(name, {})
    while True:
        p = _PARAM.match(text, at)
        if not p:
            break
        value, at = _text_value(text, p.end())
        if value is None:
            return None, p.end()
        args[p.group(1)] = qwen3_coder._value(value, schema.get(p.group(1)))
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


_P = "minicpm5"


def _argument(key: str, value: str) -> str:
    return f"{gbnf.literal(PARAM + key + chr(34) + '>')} {value} {gbnf.literal(PARAM_END)}"


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """A GBNF grammar whose every output is one or more calls (one where not parallel) in this form
    to the checked tools (or to the one named), each value by its tool's schema (a text value as it
    stands or in a CDATA block), whitespace allowed between the tags: tool_choice "required" or a
    named function. ValueError where a schema cannot be followed."""
    rules = qwen3_coder.Rules(_P, PARAM_END)
    alts = []
    for i, fn in common.chosen(tools, name):
        args = qwen3_coder.arguments(rules, fn, f"tools[{i}].function.parameters", _argument, f"{_P}-ws")
        alts.append(f"{gbnf.literal(fn['name'] + chr(34) + '>')} {_P}-ws {args} {_P}-ws".replace("  ", " "))
    call = f'{_P}-call ::= {gbnf.literal(OPEN)} ( {" | ".join(alts)} ) {gbnf.literal(CLOSE)}'
    root = f"root ::= {_P}-call" + (f" ( {_P}-ws {_P}-call )*" if parallel else "")
    cdata = f"{_P}-text ::= {_P}-chars-0 | {gbnf.literal(CDATA)} {_P}-cdata-0 {gbnf.literal(CDATA_END)}"
    text_rules = [cdata if r.startswith(f"{_P}-text ::=") else r for r in rules.rules]
    return "\n".join([root, call, f'{_P}-ws ::= [ \\t\\n]{{0,4}}', *text_rules,
                      *gbnf.text_without(f"{_P}-cdata", CDATA_END)]) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): calls from <function name=" on."""
    return forced_grammar(tools, None, parallel), [re.escape(OPEN)]
