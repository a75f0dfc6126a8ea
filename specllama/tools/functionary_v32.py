"""Tool calls in the form of MeetKai's Functionary v3.2 chat template (on Llama 3): a reply is a
run of messages, each its recipient on a line of its own after >>> (the prompt writes the first
>>>) and its text: all for the user, a function's name for a call with its arguments as JSON:

    all
    Let me check the time.>>>get_time
    {"zone": "CET"}

As llama.cpp reads it: the text to all is the content (with tools, up to the next >>>; without,
the rest of the reply), and a message to one of the tools is a call. A reply that does not open
with a recipient line (or names a recipient that is not among the tools) is content as written
from there, as is a call whose arguments are not a JSON object. A streamed reply gives the same
text as the whole one, however it is cut into steps (Reader).

The grammars write this form after the prompt's >>>: tool_choice "required" or a named function,
calls only; "auto", a call from a recipient line that can only name a tool on (at the reply's
start or after >>>); a JSON schema's answer, a message to all."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from ..reasoning import CONTENT
from . import common

RECIPIENT, ALL = ">>>", "all\n"
ENDS_THINKING: Tuple[str, ...] = ()
TAGS: Tuple[str, ...] = ()  # (plain text in Llama 3's vocabulary)
HEAD_MAX = 256  # a recipient line longer than this is text
_NAME_CHARS = re.compile(r"[^\s>]*")

Piece = Tuple[str, str]


def is_functionary_v32(source: str) -> bool:
    """Whether a chat template teaches this form (it writes >>>all and teaches >>>${recipient})."""
    return ">>>all" in source and ">>>${recipient}" in source


def opened_thinking(header: Optional[str]) -> None:
    """None: no message of this format opens thinking."""
    return None


def opened_by(prompt_text: str) -> Optional[str]:
    """The recipient line (all\\n) of the message a rendered prompt ends inside (a continued
    assistant's message), or None where the reply starts with a recipient."""
    at = prompt_text.rfind(RECIPIENT)
    if at < 0 or prompt_text.endswith(RECIPIENT):
        return None
    return ALL if prompt_text[at + len(RECIPIENT):].startswith(ALL) else None


class Reader:
    """A reply's text, step by step, as (CONTENT, text) pieces, the calls at the end (finish): the
    text to all is passed on as it comes (but for an end that may start >>>), a recipient line is
    held until it is whole, a call until its message ends. tools: the request's (None: a reply is
    all text after its first recipient line); reasoning: unused (this format has no thinking);
    opened: the recipient line of the message the prompt ends inside (opened_by)."""

    def __init__(self, reasoning: bool = True, tools: Optional[List[Dict[str, Any]]] = None,
                 opened: Optional[str] = None) -> None:
        self.tools = {t["function"]["name"] for t in tools} if tools else None
        self.held = ""
        # the current message's kind: None (its recipient line is being read), CONTENT (to all),
        # "call", or "text" (the rest is not a message)
        self.kind: Optional[str] = CONTENT if opened == ALL else None
        self.head = ""  # how the current message opened, as written (">>>" and its recipient line)
        self.body = ""  # a call's arguments so far
        self.calls: List[Dict[str, Any]] = []

    def feed(self, text: str) -> List[Piece]:
        self.held += text
        out: List[Piece] = []
        while self.held:
            if self.kind is None:
                if not self._recipient():
                    break
            elif self.kind == CONTENT and self.tools is not None:
                at = self.held.find(RECIPIENT)
                cut = at if at >= 0 else len(self.held) - common.tail(self.held, (RECIPIENT,))
                if cut:
                    out.append((CONTENT, self.held[:cut]))
                self.held = self.held[cut:]
                if at < 0:
                    break
                self._next()
            elif self.kind == "call":
                at = self.held.find(RECIPIENT)
                if at < 0:
                    cut = len(self.held) - common.tail(self.held, (RECIPIENT,))
                    self.body, self.held = self.body + self.held[:cut], self.held[cut:]
                    break
                self.body, self.held = self.body + self.held[:at], self.held[at:]
                if common.json_object(self.body) is None:  # (>>> inside the arguments' text: not an end)
                    self.body, self.held = self.body + RECIPIENT, self.held[len(RECIPIENT):]
                    continue
                self._close(out)
                self._next()
            else:  # (all text: to all without tools, or not a message)
                out.append((CONTENT, self.held))
                self.held = ""
        return out

    def _next(self) -> None:
        """The next message starts at held's >>>."""
        self.head, self.held, self.kind, self.body = RECIPIENT, self.held[len(RECIPIENT):], None, ""

    def _recipient(self) -> bool:
        """Read the current message's recipient line from held: whether it was decided."""
        name = _NAME_CHARS.match(self.held).group()
        rest = self.held[len(name):]
        if not rest:
            if len(name) <= HEAD_MAX:
                return False  # not decided yet
            self.kind, self.held = "text", self.head + self.held
        elif rest[0] == "\n" and name == ALL[:-1]:
            self.kind, self.held = CONTENT, rest[1:]
        elif rest[0] == "\n" and self.tools is not None and name in self.tools and len(name) <= HEAD_MAX:
            self.kind, self.held, self.head = "call", rest[1:], self.head + name + "\n"
        else:
            self.kind, self.held = "text", self.head + self.held
        return True

    def _close(self, out: List[Piece]) -> None:
        """The current call's message ended: a call where its arguments are a JSON object, else
        its text as written."""
        arguments = common.json_object(self.body)
        if arguments is not None:
            self.calls.append(common.openai_call(self.head.removeprefix(RECIPIENT)[:-1], arguments))
        else:
            out.append((CONTENT, self.head + self.body))

    def finish(self) -> Tuple[List[Piece], List[Dict[str, Any]]]:
        """The pieces still held once the reply is complete, and the calls it made."""
        out: List[Piece] = []
        if self.kind == "call":
            self.body += self.held
            self._close(out)
        elif self.kind is None:
            if self.held and self.held != ALL[:-1]:  # (a reply of "all" alone says nothing)
                out.append((CONTENT, self.head + self.held))
        elif self.held:
            out.append((CONTENT, self.held))
        self.held, self.kind = "", None
        return out, self.calls


def read(text: str, reasoning: bool = True, tools: Optional[List[Dict[str, Any]]] = None,
         opened: Optional[str] = None) -> Tuple[Optional[str], str, List[Dict[str, Any]]]:
    """(None: no thinking, content, tool_calls) of a whole reply (Reader's)."""
    return common.read_whole(Reader(reasoning, tools, opened), text)


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> common.Calls:
    """(content, tool_calls) of a generated text: the calls and the text to all before them (None
    where empty); a text without a call whole."""
    return common.whole_calls(text, read(text, tools=tools if tools is not None else []))


# --- grammars ------------------------------------------------------------------------------------

def _calls(tools: List[Dict[str, Any]], name: Optional[str]) -> List[str]:
    """Rules for functionary-call: a call to one of the tools (or the one named): its name, a line
    break, its arguments by the tool's schema."""
    rules, alts = [], []
    for i, fn in common.chosen(tools, name):
        rules.append(common.arguments_grammar(fn, f"functionary-{i}-"))
        alts.append(f"{gbnf.literal(fn['name'] + chr(10))} functionary-{i}-root")
    return [f"functionary-call ::= {' | '.join(alts)}", *rules]


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """tool_choice "required" (name None) or a named tool: the reply is calls to the tools (or to
    the one named; one where not parallel), each after >>> (the prompt writes the first).
    ValueError where a schema cannot be converted."""
    more = f' ( "{RECIPIENT}" functionary-call )*' if parallel else ""
    return "\n".join([f"root ::= functionary-call{more}", *_calls(tools, name)]) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): calls from a recipient line
    on, at the reply's start or after >>>, once it can only name a tool (not all). Each pattern
    ends where the text does, the text from its group the start of a call the grammar reads."""
    lines = []
    for t in tools:
        line = t["function"]["name"] + "\n"
        same = next((k for k, (a, b) in enumerate(zip(line, ALL)) if a != b), min(len(line), len(ALL)))
        if line != ALL:
            lines.append(common.regex_prefixes(line, same + 1))
    names = "|".join(lines)
    patterns = [f"^((?:{names}))$", f"{common.regex_literal(RECIPIENT)}((?:{names}))$"] if lines else []
    return forced_grammar(tools, None, parallel), patterns


def answer_grammar(grammar: str, root: str = "root") -> Tuple[str, str]:
    """(GBNF, start rule) of a reply whose answer follows grammar from root (a JSON schema's): a
    message to all."""
    return grammar.rstrip("\n") + "\n" + f'functionary-answer ::= "all\\n" {root}\n', "functionary-answer"
