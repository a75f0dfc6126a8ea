"""gpt-oss's harmony format, as llama.cpp reads it: a reply is a run of messages, each a header,
<|message|> and its text up to <|end|>, the next opening with <|start|>assistant (the prompt opens
the first; a message whose text runs into the next one's <|start|> ends there). The header names
the message's channel and, for a call, its recipient:

- <|channel|>analysis<|message|>...: thinking (the message's reasoning_content);
- <|channel|>final<|message|>... and <|channel|>commentary<|message|>... (a preamble): the answer;
- a call to a tool, the recipient in the role's header or the channel's, the arguments as JSON:
  <|start|>assistant to=functions.NAME<|channel|>commentary <|constrain|>json<|message|>{...} or
  <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}
  (the model then ends its turn with <|call|>: one call per reply).

A call to another recipient (a built-in tool the request did not give: browser.search, python) or
to a function where the request gave no tools is dropped, as llama-server drops it; a stray
<|channel|>commentary to=assistant before a header is read past. With the reasoning format "none"
the analysis messages stay in the content as written, header and <|end|> included. Text that is
not a message (a model that writes plain text) is content as written; a call whose arguments are
not a JSON object comes back as text too. A streamed reply gives the same text as the whole one,
however it is cut into steps (Reader).

The grammars write the calls and a JSON schema's answer as llama.cpp's do: after any number of
analysis and preamble messages (the thinking is free), a call to one of the tools with its
arguments by the tool's schema, or a final message by the answer's schema."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from ..reasoning import CONTENT, REASONING
from . import common

START, CHANNEL, MESSAGE, END, CONSTRAIN = "<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>"
RETURN, CALL = "<|return|>", "<|call|>"
ROLE = START + "assistant"  # how each message after the first opens
ENDS = (END, RETURN, CALL)  # what ends a message's text
BREAKS = ENDS + (START,)  # (and the next message's start, where the model leaves out <|end|>)
# the tags spelled out in the text (llama.cpp's preserved tokens for gpt-oss)
TAGS = (CHANNEL, CONSTRAIN, MESSAGE, START, END)
ENDS_THINKING: Tuple[str, ...] = ()  # (a call is a message of its own, after the thinking's)
# the thinking's opening and closing (where the thinking budget counts): an analysis message to no
# recipient (a call may be written on the analysis channel); the prompt's <|start|>assistant opens
# the reply's first
MARKUP = (ROLE + CHANNEL + "analysis" + MESSAGE, END)
HEADER_MAX = 256  # a header longer than this without <|message|> is text, not a header
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_CHANNEL = re.compile(re.escape(CHANNEL) + r"([^\s<]+)")
_TO = " to=functions."

Piece = Tuple[str, str]


def is_harmony(template_source: str) -> bool:
    """Whether a chat template writes the harmony format (gpt-oss's)."""
    return CHANNEL in template_source and MESSAGE in template_source


def opened_by(prompt_text: str) -> Optional[str]:
    """The header (<|channel|>...<|message|>) of the message a rendered prompt ends inside (one it
    continues, an assistant's prefilled message), or None where the reply starts a message."""
    start = prompt_text.rfind(ROLE)
    if start < 0:
        return None
    tail = prompt_text[start + len(ROLE):]
    at = tail.find(MESSAGE)
    if at < 0 or any(end in tail[at:] for end in ENDS):
        return None
    return tail[:at + len(MESSAGE)]


def opened_thinking(header: Optional[str]) -> Optional[Tuple[str, str]]:
    """The thinking's markup (MARKUP) where a message's header (opened_by's) opens thinking (the
    analysis channel, no recipient), else None."""
    thinking = header is not None and (_CHANNEL.findall(header) or [""])[-1] == "analysis" and \
        not _RECIPIENT.findall(header)
    return MARKUP if thinking else None


class Reader:
    """A reply's text, step by step, as (REASONING or CONTENT, text) pieces, the calls at the end
    (finish): what is certain is passed on, a message's header is held until it is whole, a call
    until its message ends, and an end that may start <|end|>. reasoning: analysis messages are
    thinking (else content as written); tools: the request's (None: calls are dropped); opened: the
    header of the message the prompt ends inside (opened_by), where the reply continues one."""

    def __init__(self, reasoning: bool = True, tools: Optional[List[Dict[str, Any]]] = None,
                 opened: Optional[str] = None) -> None:
        self.reasoning, self.tools = reasoning, tools
        self.held = ""  # from the current message's start (header), or the text not yet passed on (body)
        # the current message's kind: None (its header is being read), REASONING, CONTENT, "analysis"
        # (as written), "call", "drop", or "text" (the rest is not a message)
        self.kind: Optional[str] = None
        self.message = ""  # the current message as written, from its header (a call's, until it ends)
        self.name = ""  # a call's function
        self.calls: List[Dict[str, Any]] = []
        if opened is not None:  # (the reply starts inside the message whose header the prompt ends with)
            self.held = opened
            self._header([])

    def feed(self, text: str) -> List[Piece]:
        self.held += text
        out: List[Piece] = []
        while self.held:
            if self.kind is None:
                if not self._header(out):
                    break
            elif self.kind == "text":
                out.append((CONTENT, self.held))
                self.held = ""
            else:
                at = [(i, tag) for i, tag in ((self.held.find(t), t) for t in BREAKS) if i >= 0]
                if not at:
                    if self.kind != "call":  # (a call's text is held until its message ends)
                        cut = len(self.held) - common.tail(self.held, BREAKS)
                        self._body(self.held[:cut], out)
                        self.held = self.held[cut:]
                    break
                end, tag = min(at)
                tag = "" if tag == START else tag  # (the next message's, left to it)
                self._body(self.held[:end], out)
                self._close(tag, out)
                self.held, self.kind = self.held[end + len(tag):], None
        return out

    def _header(self, out: List[Piece]) -> bool:
        """Read the current message's header from held: whether it was decided."""
        h = len(ROLE) if self.held.startswith(ROLE) else 0
        head = self.held[h:]
        if not (head.startswith(CHANNEL) or head.startswith(" to=")):
            if ROLE.startswith(self.held) or CHANNEL.startswith(head) or " to=".startswith(head):
                return False  # not decided yet
            self.kind = "text"
            return True
        m = head.find(MESSAGE)
        if m < 0:
            if len(head) <= HEADER_MAX:
                return False
            self.kind = "text"
            return True
        self.message, self.held = head[:m + len(MESSAGE)], head[m + len(MESSAGE):]
        recipient = next((r for r in reversed(_RECIPIENT.findall(self.message)) if r != "assistant"), None)
        channel = (_CHANNEL.findall(self.message) or [""])[-1]
        if recipient is not None:
            self.name = recipient[len("functions."):] if recipient.startswith("functions.") else ""
            self.kind = "call" if self.name and self.tools is not None else "drop"
        elif channel == "analysis":
            self.kind = REASONING if self.reasoning else "analysis"
            if not self.reasoning:
                out.append((CONTENT, self.message))
        else:
            self.kind = CONTENT
        return True

    def _body(self, text: str, out: List[Piece]) -> None:
        """Pass on text of the current message's body (a call's is held)."""
        if self.kind == "call":
            self.message += text
        elif self.kind != "drop" and text:
            out.append((REASONING if self.kind == REASONING else CONTENT, text))

    def _close(self, tag: str, out: List[Piece]) -> None:
        """The current message ended (with tag; "" where the reply did)."""
        if self.kind == "analysis" and tag:
            out.append((CONTENT, tag))
        if self.kind == "call":
            body = self.message[self.message.index(MESSAGE) + len(MESSAGE):]
            arguments = common.json_object(body)
            if arguments is not None:
                self.calls.append(common.openai_call(self.name, arguments))
            else:  # (not a call after all: its text is content)
                out.append((CONTENT, self.message + tag))

    def finish(self) -> Tuple[List[Piece], List[Dict[str, Any]]]:
        """The pieces still held once the reply is complete, and the calls it made."""
        out: List[Piece] = []
        if self.kind == "text" and self.held:
            out.append((CONTENT, self.held))
        elif self.kind is not None:
            self._body(self.held, out)
            self._close("", out)
        # (a header cut off before its <|message|>: markup, dropped)
        self.held, self.kind = "", None
        return out, self.calls


def read(text: str, reasoning: bool = True, tools: Optional[List[Dict[str, Any]]] = None,
         opened: Optional[str] = None) -> Tuple[Optional[str], str, List[Dict[str, Any]]]:
    """(reasoning_content or None, content, tool_calls) of a whole reply (Reader's)."""
    return common.read_whole(Reader(reasoning, tools, opened), text)


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> common.Calls:
    """(content, tool_calls) of a generated text, its thinking read as content (read() splits it)."""
    return common.whole_calls(text, read(text, reasoning=False, tools=tools if tools is not None else []))


# --- grammars ------------------------------------------------------------------------------------

_RULES = [
    f'harmony-channel ::= "{CHANNEL}" ( "commentary" | "analysis" )',
    f'harmony-constraint ::= [ \\t\\n]{{1,4}} "{CONSTRAIN}"? [A-Za-z0-9_-]{{1,32}}',
    f'harmony-stray ::= "{CHANNEL}commentary" " to=assistant"?',
]


def _calls(tools: List[Dict[str, Any]], name: Optional[str]) -> List[str]:
    """Rules for harmony-call: a call, the recipient in the role's header or the channel's, to one
    of the tools (or the one named), its arguments by the tool's schema."""
    rules, alts = [], []
    for i, fn in common.chosen(tools, name):
        rules.append(common.arguments_grammar(fn, f"harmony-{i}-"))
        to = gbnf.literal(_TO + fn["name"])
        args = f'harmony-constraint? "{MESSAGE}" harmony-{i}-root'
        alts.append(f"{to} harmony-channel {args} | harmony-channel {to} {args}")
    return [f"harmony-call ::= {' | '.join(alts)}", *_RULES, *rules]


def _after_messages(rule: str, first: str, heads: str) -> List[str]:
    """Rules for rule: any number of messages whose header is one of heads (GBNF), each followed by
    <|start|>assistant (after <|end|>, or not, as the reader takes it), then first (GBNF): the
    thinking and preambles before an answer."""
    then = {END: f'"{END}{ROLE}" {rule}', START: f'"{ROLE}" {rule}'}
    return [f'{rule} ::= {first} | ( {heads} ) "{MESSAGE}" {rule}-text-0',
            *gbnf.text_without(f"{rule}-text", (END, START), then)]


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """tool_choice "required" (name None) or a named tool: the reply is a call of the tools (or the
    one named) after any analysis and preamble messages (one call: the model ends its turn with
    it). ValueError where a schema cannot be converted."""
    heads = f'harmony-stray? "{CHANNEL}analysis" | "{CHANNEL}commentary"'
    return "\n".join(["root ::= harmony-reply", *_after_messages("harmony-reply", "harmony-call", heads),
                      *_calls(tools, name)]) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): a call from its header on,
    where a message opens with one (the reply's first, or after <|start|>assistant), started once
    its recipient reads " to=f" (so that a stray to=assistant does not start it). Each pattern
    ends where the text does, the text from its group being the start of a call the grammar
    reads (llama.cpp throws where the grammar refuses the text it is fed)."""
    to = common.regex_prefixes(_TO, len(" to=f"))
    channel, role = common.regex_literal(CHANNEL) + "(?:commentary|analysis)", common.regex_literal(ROLE)
    patterns = [f"^({to})$", f"{role}({to})$", f"^({channel}{to})$", f"{role}({channel}{to})$"]
    return "\n".join(["root ::= harmony-call", *_calls(tools, None)]) + "\n", patterns


def answer_grammar(grammar: str, root: str = "root") -> Tuple[str, str]:
    """(GBNF, start rule) of a reply whose answer follows grammar from root (a JSON schema's): a
    final message after any analysis messages, as llama.cpp's grammar for gpt-oss's structured
    output."""
    final = f'harmony-stray? "{CHANNEL}final" harmony-constraint? "{MESSAGE}" {root}'
    heads = f'harmony-stray? "{CHANNEL}analysis"'
    rules = _after_messages("harmony-answer", final, heads) + _RULES
    return grammar.rstrip("\n") + "\n" + "\n".join(rules) + "\n", "harmony-answer"
