"""What the call formats share: a call in OpenAI's shape, the tools a choice names, reading the
calls out of a text, and a stream held back from a call's start."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from .. import gbnf, schemas
from ..reasoning import CONTENT, REASONING

Calls = Tuple[Optional[str], List[Dict[str, Any]]]


def openai_call(name: str, arguments: Dict[str, Any]) -> Dict[str, Any]:
    """A call as OpenAI's tool_calls hold it, with a fresh id."""
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def arguments_grammar(fn: Dict[str, Any], prefix: str) -> str:
    """GBNF rules of a function's JSON arguments by its parameters' schema (any object where it
    gives none), each rule's name prefixed with prefix, the arguments' rule prefix + "root".
    ValueError where the schema cannot be converted."""
    return gbnf.renamed(schemas.to_grammar(fn.get("parameters") or {"type": "object"}), prefix)


def chosen(tools: List[Dict[str, Any]], name: Optional[str]) -> List[Tuple[int, Dict[str, Any]]]:
    """(index, function) of the tools a choice leaves (all, or the one named); ValueError where
    none is named so."""
    out = [(i, t["function"]) for i, t in enumerate(tools) if name is None or t["function"]["name"] == name]
    if not out:
        raise ValueError(f"no tool is named {name!r}")
    return out


def read_calls(text: str, next_start: Callable[[str, int], int],
               read: Callable[[str, int], Tuple[Optional[Dict[str, Any]], int]]) -> Calls:
    """(content, tool_calls) of a generated text: the calls read by read(text, start) -> (call or
    None, where it ends) at each start next_start(text, from) finds (-1: none), the content the
    text before the first start (None where empty). Text with no call that parses comes back whole
    as content, with no calls."""
    calls = []
    start = next_start(text, 0)
    at = start
    while at >= 0:
        call, end = read(text, at)
        if call is not None:
            calls.append(call)
        at = next_start(text, max(end, at + 1))
    if not calls:
        return text, []
    content = text[:start].strip()
    return content or None, calls


def read_call_groups(text: str, tag: str,
                     read: Callable[[str, int], Tuple[List[Dict[str, Any]], int]]) -> Calls:
    """(content, tool_calls) of a text whose calls come in groups after a tag: read(text, at) ->
    (the calls of the group whose tag is at at, none where it does not parse; where it ends), the
    content the text before the first tag (None where empty). Text with no call that parses comes
    back whole as content, with no calls."""
    calls: List[Dict[str, Any]] = []
    first = at = text.find(tag)
    while at >= 0:
        found, end = read(text, at)
        calls += found
        at = text.find(tag, max(end, at + 1))
    if not calls:
        return text, []
    return text[:first].strip() or None, calls


def regex_literal(text: str) -> str:
    """text as a regular expression that matches it, as llama.cpp's std::regex (ECMAScript) reads
    one (Python's re.escape escapes a space, which ECMAScript need not accept)."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", text)


def regex_prefixes(text: str, least: int) -> str:
    """A regular expression (regex_literal's dialect) of the prefixes of text at least least
    characters long."""
    rest = ""
    for c in reversed(text[least:]):
        rest = f"(?:{regex_literal(c)}{rest})?"
    return regex_literal(text[:least]) + rest


# --- what the whole reply formats (harmony's, Functionary v3.2's) share -------------------------

_DECODER = json.JSONDecoder()


def json_object(body: str) -> Optional[Dict[str, Any]]:
    """body (whitespace around it aside) as a JSON object, or None where it is not one."""
    try:
        value, end = _DECODER.raw_decode(body.strip())
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and end == len(body.strip()) else None


def tail(text: str, tags: Sequence[str]) -> int:
    """The length of text's longest end that starts one of tags (text a stream holds back)."""
    return max((k for tag in tags for k in range(min(len(tag) - 1, len(text)), 0, -1)
                if tag.startswith(text[-k:])), default=0)


def read_whole(reader: Any, text: str) -> Tuple[Optional[str], str, List[Dict[str, Any]]]:
    """(reasoning_content or None, content, tool_calls) of a whole reply read by a whole reply
    format's Reader (feed, then finish)."""
    pieces = reader.feed(text)
    rest, calls = reader.finish()
    pieces += rest
    thought = "".join(t for kind, t in pieces if kind == REASONING)
    return thought or None, "".join(t for kind, t in pieces if kind == CONTENT), calls


def whole_calls(text: str, read: Tuple[Optional[str], str, List[Dict[str, Any]]]) -> Calls:
    """(content, tool_calls) of a generated text from what read_whole read of it (its thinking read
    as content): the calls and the content before them (None where empty); a text without a call
    whole."""
    _, content, calls = read
    if not calls:
        return text, []
    return content or None, calls


class Flavour:
    """One form of a family whose templates write its calls in more than one (Mistral's,
    DeepSeek's, ...), standing in for a format's module (specllama.tools): its grammars, with the
    parser and stream splitter its family's module gives it. trigger: the pattern that starts its
    lazy grammar."""

    ENDS_THINKING: Tuple[str, ...] = ()
    family = ""
    trigger = ""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"{self.family}.{self.name}"

    def forced_grammar(self, tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
        raise NotImplementedError

    def lazy_grammar(self, tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
        """tool_choice "auto": (the grammar, the patterns that start it): calls from the flavour's
        tag on."""
        return self.forced_grammar(tools, None, parallel), [self.trigger]


class StreamSplitter:
    """A streamed reply's text split into what can be shown as content now and what may be a tool
    call: everything from a call's first start (OPENS) on is held back (and a tail that could be
    one), and a whole reply that starts as one of WHOLE_STARTS is, until finish() parses it (a
    format's parse, with the request's tools)."""

    OPENS: Tuple[str, ...] = ()  # how a call starts
    WHOLE_STARTS: Tuple[str, ...] = ()  # how a reply that is a whole call starts

    def __init__(self, tools: Optional[List[Dict[str, Any]]] = None) -> None:
        self.tools = tools  # the request's (a format that types values by their schemas reads them)
        self.held = ""
        self.calling = False
        self.started = False  # the reply's start was seen and is not a bare call's

    def feed(self, text: str) -> str:
        """The part of text (with what was held) that is content for sure."""
        self.held += text
        if self.calling:
            return ""
        if not self.started:
            head = self.held.lstrip()
            if any(head.startswith(s) for s in self.WHOLE_STARTS):
                self.calling = True
                return ""
            if not head or any(s.startswith(head) for s in self.WHOLE_STARTS):
                return ""  # not decided yet
            self.started = True
        at = min((i for i in (self.held.find(tag) for tag in self.OPENS) if i >= 0), default=-1)
        if at >= 0:
            self.calling = True
            shown, self.held = self.held[:at], self.held[at:]
            return shown
        longest = max(len(tag) for tag in self.OPENS)
        keep = next((k for k in range(min(longest - 1, len(self.held)), 0, -1)
                     if any(tag.startswith(self.held[-k:]) for tag in self.OPENS)), 0)
        shown, self.held = self.held[:len(self.held) - keep], self.held[len(self.held) - keep:]
        return shown

    def parse(self, text: str) -> Calls:
        raise NotImplementedError

    def finish(self) -> Tuple[str, List[Dict[str, Any]]]:
        """(the rest of the content, the tool calls) once the text is complete."""
        held, self.held = self.held, ""
        if not self.calling:
            return held, []
        content, calls = self.parse(held)
        if not calls:
            return held, []
        return content or "", calls


def splitter(parse: Callable[[str, Optional[List[Dict[str, Any]]]], Calls], *opens: str) -> type:
    """A format's StreamSplitter: a streamed reply's text held back from the first of opens (how a
    call starts) on until finish() reads it with parse(text, the request's tools)."""

    class Splitter(StreamSplitter):
        OPENS = opens

        def parse(self, text: str) -> Calls:
            return parse(text, self.tools)

    return Splitter
