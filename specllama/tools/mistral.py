"""Tool calls in Mistral's formats, as llama.cpp reads them:

- [TOOL_CALLS]name[ARGS]{...} for each call, one after another: the templates of Mistral Small 3.x,
  Devstral, Ministral 3 and Magistral (ARGS); with [CALL_ID]id between the name and [ARGS] where
  the template writes a call's id, as Mistral Small 3.2's does (IDS);
- [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}, ...]: Mistral Nemo's (LIST).

The parser reads all of them; the text before the first [TOOL_CALLS] is the content. An id the
model wrote is the call's id in tool_calls, and a call without one gets nine letters and digits,
the ids Mistral's templates take back (Nemo's refuses others). The grammars write a flavour's
calls, a name one of the tools', the arguments by its schema (the JSON schema converter), and an
id of nine letters and digits where the flavour has one. format_of (specllama.tools) picks the
flavour by the template."""

from __future__ import annotations

import json
import random
import re
import string
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common

OPEN, ARGS, CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"
_DECODER = json.JSONDecoder()
_NAME = re.compile(r"[^\s\[\]{}]+")
_ID_CHARS = string.ascii_letters + string.digits


def _id() -> str:
    return "".join(random.choices(_ID_CHARS, k=9))


def _call(name: Any, arguments: Any, call_id: Any = None) -> Optional[Dict[str, Any]]:
    if not isinstance(name, str) or not _NAME.fullmatch(name) or not isinstance(arguments, dict):
        return None
    call = common.openai_call(name, arguments)
    call["id"] = call_id if isinstance(call_id, str) and call_id else _id()
    return call


def _read(text: str, at: int) -> Tuple[List[Dict[str, Any]], int]:
    """The calls of the [TOOL_CALLS] at at (none where they do not parse), and where they end."""
    i = at + len(OPEN)
    try:
        if text.startswith("[", i):  # Nemo's list
            value, end = _DECODER.raw_decode(text, i)
            items = value if isinstance(value, list) and all(isinstance(v, dict) for v in value) else []
            calls = [_call(v.get("name"), v.get("arguments", v.get("parameters")), v.get("id")) for v in items]
            return ([] if None in calls else calls), end
        j = text.index(ARGS, i)
        name, _, call_id = text[i:j].partition(CALL_ID)
        value, end = _DECODER.raw_decode(text, j + len(ARGS))
    except (ValueError, RecursionError):
        return [], i
    call = _call(name, value, call_id)
    return ([call] if call else []), end


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text; a text with no call that parses is all content."""
    return common.read_call_groups(text, OPEN, _read)


StreamSplitter = common.splitter(parse, OPEN)


class Flavour(common.Flavour):
    """One of Mistral's call formats (ARGS, IDS, LIST): its grammars, and the parser and stream
    splitter they share, as a call format's module has them (specllama.tools)."""

    family, trigger = "mistral", common.regex_literal(OPEN)
    TAGS = (OPEN, ARGS, CALL_ID)  # spelled out in the text (control tokens in Mistral's vocabularies)
    parse = staticmethod(parse)
    StreamSplitter = StreamSplitter

    def forced_grammar(self, tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
        """tool_choice "required" (name None) or a named tool: every output is calls of the tools
        (or the one named). ValueError where a schema cannot be converted."""
        rules, alts = [], []
        for i, fn in common.chosen(tools, name):
            rules.append(common.arguments_grammar(fn, f"mistral-{i}-"))
            args = f"mistral-{i}-root"
            if self.name == "LIST":
                alts.append(f'"{{\\"name\\": " {gbnf.literal(json.dumps(fn["name"]))} ", \\"arguments\\": " {args} '
                            f'", \\"id\\": \\"" mistral-id "\\"}}"')
            else:
                call_id = f' "{CALL_ID}" mistral-id' if self.name == "IDS" else ""
                alts.append(f'{gbnf.literal(fn["name"])}{call_id} "{ARGS}" {args}')
        if self.name == "LIST":
            more = ' ( ", " mistral-call )*' if parallel else ""
            root = f'root ::= "{OPEN}[" mistral-call{more} "]"'
        else:
            root = f'root ::= "{OPEN}" mistral-call' + (f' ( "{OPEN}" mistral-call )*' if parallel else "")
        return "\n".join([root, f"mistral-call ::= {' | '.join(alts)}", "mistral-id ::= [a-zA-Z0-9]{9}", *rules]) + "\n"


ARGS_FLAVOUR, IDS_FLAVOUR, LIST_FLAVOUR = Flavour("ARGS"), Flavour("IDS"), Flavour("LIST")


def flavour_of(template_source: str) -> Flavour:
    """The flavour a template that writes [TOOL_CALLS] teaches."""
    if ARGS not in template_source:
        return LIST_FLAVOUR
    return IDS_FLAVOUR if CALL_ID in template_source else ARGS_FLAVOUR
