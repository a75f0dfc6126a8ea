"""A reasoning model's thinking, split from its answer.

Reasoning models (Qwen3, DeepSeek-R1 and its distills, SmolLM3, Granite, ...) write their
thinking between <think> and </think> before the answer, or the chat template opens <think> at
the end of the prompt and the reply starts inside it. With the reasoning format "auto" (or
"deepseek", the same here) a chat reply that starts with <think>, or whose prompt ended with it,
comes back with that text as the message's reasoning_content and the rest as its content, as
llama-server's --reasoning-format deepseek answers; "none" leaves every reply's text whole in
content. The split moves text only: the tokens generated are the same with any format.

The thinking is stripped of the whitespace around it and the answer of the whitespace before
it. A reply cut off inside its thinking (max_tokens, a stop string) is all reasoning, with empty
content. A streamed reply's reasoning and content deltas, joined, are exactly what split() gives
for the whole text, however the text is cut into steps.

Where the template has a thinking mode, the grammar of a JSON schema or a forced tool call holds
after a thinking block (grammar_after_thinking); there the format decides the grammar, and so the
tokens too, and the grammar constrains the target and the draft alike, as any grammar does.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

OPEN, CLOSE = "<think>", "</think>"
FORMATS = ("auto", "deepseek", "none")
REASONING, CONTENT = "reasoning", "content"


def check_format(value: object, param: str = "reasoning_format") -> str:
    """A reasoning format as given; ValueError naming param where it is not one of FORMATS."""
    if value not in FORMATS:
        raise ValueError(f"'{param}' must be one of {', '.join(repr(f) for f in FORMATS)}, not {value!r}")
    return str(value)


def opened_by(prompt_text: str) -> bool:
    """Whether a rendered prompt ends inside a thinking block (its template opened <think> for
    the reply, as DeepSeek-R1's does)."""
    return prompt_text.rstrip().endswith(OPEN)


def template_thinks(source: str) -> bool:
    """Whether a chat template's source has a thinking mode (it writes <think>, or takes
    enable_thinking)."""
    return OPEN in source or "enable_thinking" in source


_TAG_RULE = "specllama-thinking"


def grammar_after_thinking(gbnf: str, root: str = "root", opened: bool = False) -> Tuple[str, str]:
    """(GBNF, start rule) of a grammar for the answer that lets the model think first, as
    llama-server's grammars for a reasoning model's JSON schema or forced tool call do: a thinking
    block (any text without </think>, closed by </think>) before the answer's grammar, optional
    where the reply may open one, the reply's start where the prompt opened it."""
    p = _TAG_RULE
    rules = []
    # what the thinking may hold: a state per how much of </think> its end has matched (the whole
    # tag is never reached: it closes the thinking)
    for k in range(len(CLOSE)):
        c = CLOSE[k]
        alts = [f'"<" {p}-1'] + ([f'[^<{c}] {p}-0', f'"{c}" {p}-{k + 1}'] if k else [f"[^<] {p}-0"])
        if k == len(CLOSE) - 1:  # (after "</think", only ">" is refused)
            alts = [f'"<" {p}-1', f"[^<>] {p}-0"]
        rules.append(f"{p}-{k} ::= ( {' | '.join(alts)} )?")
    block = f'{p}-0 "{CLOSE}" [ \\t\\n]{{0,8}}'
    start = block if opened else f'( [ \\t\\n]{{0,8}} "{OPEN}" {block} )?'
    rules.append(f"{p} ::= {start} {root}")
    return gbnf.rstrip("\n") + "\n" + "\n".join(rules) + "\n", p


def split(text: str, opened: bool = False) -> Tuple[Optional[str], str]:
    """(reasoning, content) of a whole reply; reasoning None where the reply has none (it does not
    start with <think> and the prompt did not open one, or the thinking is empty)."""
    if not opened:
        head = text.lstrip()
        if not head.startswith(OPEN):
            return None, text
        text = head[len(OPEN):]
    end = text.find(CLOSE)
    thought, content = (text, "") if end < 0 else (text[:end], text[end + len(CLOSE):].lstrip())
    return thought.strip() or None, content


def _open_tail(text: str, tag: str) -> int:
    """The length of text's longest end that starts tag (and may be completed by what comes next)."""
    return next((k for k in range(min(len(tag) - 1, len(text)), 0, -1) if tag.startswith(text[-k:])), 0)


class StreamSplitter:
    """A streamed reply's text, step by step, as (REASONING or CONTENT, text) pieces: what is
    certain is passed on, and what may still turn out otherwise is held (the start of a reply
    that may open <think>, an end that may start </think>, whitespace that may end the thinking)."""

    def __init__(self, opened: bool = False) -> None:
        self.state = "thinking" if opened else "start"
        self.held = ""
        self.thought = False  # some reasoning passed on (whitespace before the first is dropped)

    def feed(self, text: str) -> List[Tuple[str, str]]:
        self.held += text
        out: List[Tuple[str, str]] = []
        while True:
            if self.state == "start":
                head = self.held.lstrip()
                if head.startswith(OPEN):
                    self.held, self.state = head[len(OPEN):], "thinking"
                elif OPEN.startswith(head):
                    return out  # not decided yet
                else:
                    self.state = "content"
            elif self.state == "thinking":
                end = self.held.find(CLOSE)
                if end >= 0:
                    self._think(self.held[:end].rstrip(), out)
                    self.held, self.state = self.held[end + len(CLOSE):], "after"
                    continue
                cut = len(self.held) - _open_tail(self.held, CLOSE)
                sure = self.held[:cut].rstrip()
                self._think(sure, out)
                self.held = self.held[len(sure):]
                return out
            elif self.state == "after":
                self.held = self.held.lstrip()
                if not self.held:
                    return out
                self.state = "content"
            else:
                if self.held:
                    out.append((CONTENT, self.held))
                self.held = ""
                return out

    def _think(self, text: str, out: List[Tuple[str, str]]) -> None:
        if not self.thought:
            text = text.lstrip()
        if text:
            out.append((REASONING, text))
            self.thought = True

    def finish(self) -> List[Tuple[str, str]]:
        """The pieces still held once the reply is complete."""
        held, self.held = self.held, ""
        if self.state == "thinking":
            out: List[Tuple[str, str]] = []
            self._think(held.rstrip(), out)
            return out
        if self.state == "start" and held:
            return [(CONTENT, held)]
        return [(CONTENT, held)] if self.state == "content" and held else []
