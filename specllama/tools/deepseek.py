"""Tool calls in DeepSeek's form (DeepSeek-R1 and its Qwen and Llama distills, DeepSeek V3 and
V3.1), as llama.cpp reads them: the calls between <｜tool▁calls▁begin｜> and <｜tool▁calls▁end｜>,
each between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>, in one of two flavours:

- R1 (FENCED): function<｜tool▁sep｜>NAME, a line break and the arguments in a ```json block;
- V3.1 (PLAIN): NAME<｜tool▁sep｜> and the arguments' JSON.

The parser reads both; the text before the calls is the content. The grammars write the template's
flavour (Flavour, picked by format_of in specllama.tools), the arguments by the tool's schema (the
JSON schema converter), the calls one after another (on lines, as R1's templates write them)."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common

OPEN, CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_DECODER = json.JSONDecoder()
_FENCED = re.compile(r"function" + re.escape(SEP) + r"([^\s<]+)\s*```(?:json)?\s*")
_PLAIN = re.compile(r"([^\s<]+)" + re.escape(SEP) + r"\s*")
_FENCE_END = re.compile(r"\s*```\s*" + re.escape(CALL_END))
_CALL_END = re.compile(r"\s*" + re.escape(CALL_END))


def _call(text: str, at: int) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call whose <｜tool▁call▁begin｜> is at at, or None where it does not parse; where it ends)."""
    at += len(CALL)
    m = _FENCED.match(text, at)
    fenced = m is not None
    m = m or _PLAIN.match(text, at)
    if m is None:
        return None, at
    try:
        value, end = _DECODER.raw_decode(text, m.end())
    except (ValueError, RecursionError):
        return None, at
    close = (_FENCE_END if fenced else _CALL_END).match(text, end)
    if close is None or not isinstance(value, dict):
        return None, at
    return common.openai_call(m.group(1), value), close.end()


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls in OpenAI's shape, the content the
    text before the first <｜tool▁calls▁begin｜> (or call, where the model left that out; None where
    empty). Text with no call that parses comes back whole as content, with no calls."""
    opened = text.find(OPEN)
    first = text.find(CALL)
    if first < 0:
        return text, []
    calls: List[Dict[str, Any]] = []
    at = first
    while at >= 0:
        call, end = _call(text, at)
        if call is not None:
            calls.append(call)
        at = text.find(CALL, max(end, at + 1))
    if not calls:
        return text, []
    start = opened if 0 <= opened < first else first
    return text[:start].strip() or None, calls


StreamSplitter = common.splitter(parse, OPEN, CALL)


class Flavour(common.Flavour):
    """One of DeepSeek's call forms (FENCED, PLAIN): its grammars, and the parser and stream
    splitter they share, as a call format's module has them (specllama.tools)."""

    family, trigger = "deepseek", common.regex_literal(OPEN)
    TAGS = (OPEN, CLOSE, CALL, CALL_END, SEP)  # (special tokens in DeepSeek's vocabularies)
    parse = staticmethod(parse)
    StreamSplitter = StreamSplitter

    def forced_grammar(self, tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
        """tool_choice "required" (name None) or a named tool: every output is calls of the tools
        (or the one named). ValueError where a schema cannot be converted."""
        rules, alts = [], []
        for i, fn in common.chosen(tools, name):
            rules.append(common.arguments_grammar(fn, f"deepseek-{i}-"))
            args = f"deepseek-{i}-root"
            if self.name == "FENCED":
                alts.append(f'{gbnf.literal("function" + SEP + fn["name"])} "\\n```json\\n" {args} "\\n"? "```"')
            else:
                alts.append(f"{gbnf.literal(fn['name'] + SEP)} {args}")
        more = ' ( "\\n"? deepseek-call )*' if parallel else ""  # (R1's templates put a line break between)
        return "\n".join([f'root ::= "{OPEN}" deepseek-call{more} "{CLOSE}"',
                          f'deepseek-call ::= "{CALL}" ( {" | ".join(alts)} ) "{CALL_END}"', *rules]) + "\n"


FENCED, PLAIN = Flavour("FENCED"), Flavour("PLAIN")


def flavour_of(template_source: str) -> Flavour:
    """The flavour a template that writes <｜tool▁calls▁begin｜> teaches."""
    return FENCED if "```json" in template_source else PLAIN
