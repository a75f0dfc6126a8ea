"""Tool calls in the format of the Hermes and Qwen2.5 chat templates, which tell the model to answer
a call as <tool_call>{"name": ..., "arguments": {...}}</tool_call>: calls parsed out of the
generated text into OpenAI's tool_calls, a stream's text held back from the first <tool_call> on,
and the grammars that hold a call to the tools' schemas. Small models often leave the tags out
and answer with the JSON object alone, bare or in a ```json block: a reply that is only that is
taken as a call too. Another family's calls (Mistral's [TOOL_CALLS], Llama 3.1's <|python_tag|>)
are not parsed: their text comes back as the message's content (Gemma 4's: tools.gemma4)."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import schemas
from . import common

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# tags that end a thinking block too (none: a call comes after the thinking closes)
ENDS_THINKING: tuple = ()
TAGS = (OPEN, CLOSE)  # spelled out in the text where a model's vocabulary has them as control tokens
# a whole reply that is one call's JSON object, bare or fenced
_WHOLE = re.compile(r"\s*(?:```(?:json)?\s*(\{.*\})\s*```|(\{.*\}))\s*", re.S)
# how a reply that is a whole call starts (a stream holds these back until it ends)
_WHOLE_STARTS = ("{", "```json", "```\n{")
# schemas.LINES_SPACE_RULE as a regular expression
_SPACE = r"(?: |\n{1,2}[ \t]{0,20})?"


def call_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True,
                 whole: bool = False) -> str:
    """A GBNF grammar (llama.cpp's) whose every output is one or more calls in the Hermes / Qwen2.5
    format, <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call> (the newlines, or up to four
    whitespace characters), of the checked tools (or
    of the one named), each call's arguments following its tool's parameters schema: tool_choice
    "required" or a named function. whole (for tool_choice "auto", where the model lays out its
    calls itself): or a reply that is one call's JSON object alone, bare or in a ```json block
    (what whole_call_trigger starts), the JSON in either form laid out over lines or not, the
    arguments under "arguments" or "parameters". ValueError where a schema cannot be converted."""
    chosen = [fn for _, fn in common.chosen(tools, name)]
    calls = [{"type": "object", "properties": {"name": {"const": fn["name"]},
                                               "arguments": fn.get("parameters") or {"type": "object"}},
              "required": ["name", "arguments"]} for fn in chosen]
    rules = schemas.to_grammar(calls[0] if len(calls) == 1 else {"anyOf": calls}, lines=whole)
    # the converter's start rule becomes the call's JSON; calls are wrapped in the format's tags
    rules = re.sub(r"^root ::=", "tool-call-json ::=", rules, flags=re.M)
    if whole:  # the key as the model's template asks for it: "arguments" (Hermes, Qwen) or "parameters" (Llama 3)
        rules = re.sub(r'^((?:alternative-\d+-)?arguments-kv ::= )"\\"arguments\\""',
                       r'\1("\\"arguments\\"" | "\\"parameters\\"")', rules, flags=re.M)
    more = ' ("\\n" tool-call)*' if parallel else ""
    alone = ' | whole-call\nwhole-call ::= "```" "json"? "\\n"? tool-call-json "```" | tool-call-json' if whole else ""
    # (the tags' newlines as the template writes them, or other whitespace: a lazy grammar is fed the
    # rest of the token that completes its trigger, and llama.cpp throws where the grammar refuses it)
    return (f"root ::= tool-call{more}{alone}\n"
            f'tool-call ::= "{OPEN}" [ \\t\\n]{{0,4}} tool-call-json [ \\t\\n]{{0,4}} "{CLOSE}"\n' + rules)


# the whitespace a reply taken as a call may open with. Bounded: llama.cpp searches the trigger in the
# whole reply after every token until it fires, and libstdc++'s std::regex matches an unbounded \s*
# by recursing once per character, so that a reply opening with some 40,000 whitespace characters
# would run a thread of 8 MiB out of stack
_LEADING = 64


def whole_call_trigger(tools: List[Dict[str, Any]]) -> str:
    """The lazy grammar's trigger (a regular expression llama.cpp's std::regex reads) for a reply
    that opens as one call's JSON object, bare or fenced, after at most _LEADING whitespace
    characters, up to the comma after a tool's name: what it matches, the grammar of
    call_grammar(whole=True) admits (its whitespace is the converter's), so that a reply taken as a
    call has arguments by the tool's schema. A JSON reply whose "name" is not a tool's stays free."""
    names = "|".join(re.escape(json.dumps(t["function"]["name"])[1:-1]) for t in tools)
    return (r'^\s{0,%d}((?:```(?:json)?\n?)?\{' % _LEADING + _SPACE + r'"name"' + _SPACE + ":" + _SPACE +
            '"(?:' + names + ')"' + _SPACE + ",)")


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """The grammar of tool_choice "required" (name None) or a named tool: call_grammar's."""
    return call_grammar(tools, name, parallel)


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it), as llama-server's: a call to
    the tools' schemas from its <tool_call> tag on, or from the tool's name on in a reply that is a
    call's JSON object alone. ValueError where a schema cannot be converted."""
    return call_grammar(tools, None, parallel, whole=True), [re.escape(OPEN), whole_call_trigger(tools)]


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls in OpenAI's shape, the content the
    text before the first call (None where empty). Text with no call that parses comes back whole
    as content, with no calls. (tools: unused, the JSON types the values itself.)"""
    whole = _WHOLE.fullmatch(text)
    if whole:
        call = _call(whole.group(1) or whole.group(2))
        if call is not None:
            return None, [call]
    return common.read_calls(text, lambda t, at: t.find(OPEN, at), _tagged)


def _tagged(text: str, at: int) -> Tuple[Optional[Dict[str, Any]], int]:
    """The call whose <tool_call> tag starts at at (its body up to </tool_call>, or the text's end)."""
    end = text.find(CLOSE, at + len(OPEN))
    call = _call(text[at + len(OPEN):end if end >= 0 else len(text)])
    return call, end + len(CLOSE) if end >= 0 else len(text)


def _call(body: str) -> Optional[Dict[str, Any]]:
    try:
        obj = json.loads(body.strip())
    except (ValueError, RecursionError):  # (RecursionError: nested deeper than Python recurses)
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError):
            return None
    if not isinstance(args, dict):
        return None
    return common.openai_call(obj["name"], args)


class StreamSplitter(common.StreamSplitter):
    """A stream held back from the first <tool_call> on, and a whole reply that starts as a call's
    JSON object, bare or fenced, until it ends."""

    OPENS = (OPEN,)
    WHOLE_STARTS = _WHOLE_STARTS

    def parse(self, text: str) -> common.Calls:
        return parse(text)
