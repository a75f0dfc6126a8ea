"""A reasoning model's thinking, split from its answer.

Reasoning models (Qwen3, DeepSeek-R1 and its distills, SmolLM3, Granite, ...) write their
thinking between <think> and </think> before the answer (Gemma 4 between <|channel>thought and
<channel|>, Magistral between [THINK] and [/THINK], Seed-OSS between <seed:think> and
</seed:think>, Command R7B between <|START_THINKING|> and <|END_THINKING|>: MARKUPS), or the chat
template opens the thinking at the end of the prompt and the reply starts inside it. With the
reasoning format "auto" (or "deepseek", the same here) a chat reply that starts with an opening
tag, or whose prompt ended with one, comes back with that text as the message's reasoning_content
and the rest as its content, as llama-server's --reasoning-format deepseek answers; "none" leaves
every reply's text whole in content. The split moves text only: the tokens generated are the same with any format.

The thinking is stripped of the whitespace around it and the answer of the whitespace before
it. A reply cut off inside its thinking (max_tokens, a stop string) is all reasoning, with empty
content. A streamed reply's reasoning and content deltas, joined, are exactly what split() gives
for the whole text, however the text is cut into steps.

Where the template has a thinking mode, the grammar of a JSON schema or a forced tool call holds
after a thinking block (grammar_after_thinking); there the format decides the grammar, and so the
tokens too, and the grammar constrains the target and the draft alike, as any grammar does.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

from . import gbnf as _gbnf

# the opening and closing tags of a thinking block, by model family: <think> (Qwen3, DeepSeek-R1,
# SmolLM3, ...), Gemma 4's thought channel, [THINK] (Magistral, Ministral 3's reasoning models),
# <seed:think> (ByteDance's Seed-OSS) and <|START_THINKING|> (Cohere's Command R7B, Command A)
MARKUPS: Tuple[Tuple[str, str], ...] = (("<think>", "</think>"), ("<|channel>thought", "<channel|>"),
                                        ("[THINK]", "[/THINK]"), ("<seed:think>", "</seed:think>"),
                                        ("<|START_THINKING|>", "<|END_THINKING|>"))
Markup = Tuple[str, str]
# the markups' tags as tokens: spelled out in the text where a vocabulary has them as control tokens
TAGS = ("<think>", "</think>", "<|channel>", "<channel|>", "[THINK]", "[/THINK]", "<seed:think>", "</seed:think>",
        "<|START_THINKING|>", "<|END_THINKING|>")
FORMATS = ("auto", "deepseek", "none")
REASONING, CONTENT = "reasoning", "content"


def check_format(value: object, param: str = "reasoning_format") -> str:
    """A reasoning format as given; ValueError naming param where it is not one of FORMATS."""
    if value not in FORMATS:
        raise ValueError(f"'{param}' must be one of {', '.join(repr(f) for f in FORMATS)}, not {value!r}")
    return str(value)


def opened_by(prompt_text: str, continued: str = "") -> Optional[Markup]:
    """The markup of the thinking block a rendered prompt ends inside, or None: the template opened
    it for the reply (DeepSeek-R1's does), or, where the prompt ends with the text of an assistant's
    message the reply continues (continued: templates.continued_text), it was opened before or in
    that text and not closed in it."""
    if not prompt_text.endswith(continued):
        raise ValueError("the prompt does not end with the message it continues")
    before = prompt_text[:len(prompt_text) - len(continued)].rstrip()
    for m in MARKUPS:
        opened, closed = continued.rfind(m[0]), continued.rfind(m[1])
        if opened > closed or (closed < 0 and before.endswith(m[0])):
            return m
    return None


def template_markup(source: str) -> Optional[Markup]:
    """The markup of a chat template's thinking mode: the one whose opening tag it writes, <think>
    where it takes enable_thinking and writes none; None where it has no thinking mode."""
    written = next((m for m in MARKUPS if m[0] in source), None)
    return written or (MARKUPS[0] if "enable_thinking" in source else None)


def with_effort(variables: dict, effort: Optional[str]) -> dict:
    """Chat template variables with a reasoning effort applied as llama-server applies OpenAI's
    reasoning_effort: "none" asks the template not to think (enable_thinking false, and no level);
    another level is the template's reasoning_effort and reasoning_strength, which the templates
    that take a level read (gpt-oss's, DeepSeek V4's, Solar Open's, ...) and others ignore."""
    if effort is None:
        return variables
    out = dict(variables)
    if effort == "none":
        out["enable_thinking"] = False
        out.pop("reasoning_effort", None)
        out.pop("reasoning_strength", None)
    else:
        out["reasoning_effort"] = out["reasoning_strength"] = effort
    return out


def check_effort(value: object, param: str = "reasoning_effort") -> str:
    """A reasoning effort as given (a level such as "low" or "high", or "none"); ValueError naming
    param where it is not a non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"'{param}' must be a level such as \"low\", \"medium\", \"high\" or \"none\"")
    return value


def _markup(opened: Union[bool, Markup, None]) -> Optional[Markup]:
    return opened if isinstance(opened, tuple) else MARKUPS[0] if opened else None


_TAG_RULE = "specllama-thinking"


def grammar_after_thinking(gbnf: str, root: str = "root", markup: Markup = MARKUPS[0],
                           opened: bool = False, calls: Sequence[str] = ()) -> Tuple[str, str]:
    """(GBNF, start rule) of a grammar for the answer that lets the model think first, as
    llama-server's grammars for a reasoning model's JSON schema or forced tool call do: a thinking
    block in markup (any text without the closing tag, closed by it) before the answer's grammar,
    optional where the reply may open one, the reply's start where the prompt opened it. calls: tags
    that also end the thinking, where the answer (a call) starts with one (the thinking holds none)."""
    open_tag, close = markup
    p = _TAG_RULE
    # what the thinking may hold: any text without the closing tag (or a call's), then the answer
    closed = f'{_gbnf.literal(close)} [ \\t\\n]{{0,8}} {root}'
    rules = _gbnf.text_without(p + "-text", (close, *calls), {close: closed, **{t: root for t in calls}})
    start = f"{p}-text-0" if opened else f'( [ \\t\\n]{{0,8}} {_gbnf.literal(open_tag)} {p}-text-0 | {root} )'
    rules.append(f"{p} ::= {start}")
    return gbnf.rstrip("\n") + "\n" + "\n".join(rules) + "\n", p


def _end(text: str, close: str, calls: Sequence[str]) -> Tuple[int, int]:
    """Where the thinking in text ends (-1: not yet), and where the answer starts: after the
    closing tag, or at the first of calls (a call's tag, which the answer keeps) found before it."""
    end = text.find(close)
    after = end + len(close) if end >= 0 else -1
    for tag in calls:
        at = text.find(tag)
        if at >= 0 and (end < 0 or at < end):
            end, after = at, at
    return end, after


def split(text: str, opened: Union[bool, Markup, None] = False, calls: Sequence[str] = (),
          channels: bool = False) -> Tuple[Optional[str], str]:
    """(reasoning, content) of a whole reply; reasoning None where the reply has none (it does not
    start with an opening tag and the prompt did not open one, or the thinking is empty). opened:
    the markup the prompt opened (True: <think>). calls: tags that also end the thinking and start
    the content (a tool call's, where the model may call from inside its thinking, as Qwen3.5 does
    and llama-server reads it). channels: Gemma 4's channel markup, read as llama-server reads it:
    a thought block anywhere in the reply is thinking (several joined by a line break), and a
    <|channel> that opens no thought or a <channel|> that closes none is dropped (Gemma 4 may end
    its answer with an empty thought block or a lone <channel|>)."""
    if channels:
        splitter = StreamSplitter(opened, calls, channels=True)
        pieces = splitter.feed(text) + splitter.finish()
        thought = "".join(t for kind, t in pieces if kind == REASONING)
        return thought or None, "".join(t for kind, t in pieces if kind == CONTENT)
    markup = _markup(opened)
    if markup is None:
        head = text.lstrip()
        markup = next((m for m in MARKUPS if head.startswith(m[0])), None)
        if markup is None:
            return None, text
        text = head[len(markup[0]):]
    end, after = _end(text, markup[1], calls)
    thought, content = (text, "") if end < 0 else (text[:end], text[after:].lstrip())
    return thought.strip() or None, content


def _open_tail(text: str, tag: str) -> int:
    """The length of text's longest end that starts tag (and may be completed by what comes next)."""
    return next((k for k in range(min(len(tag) - 1, len(text)), 0, -1) if tag.startswith(text[-k:])), 0)


class StreamSplitter:
    """A streamed reply's text, step by step, as (REASONING or CONTENT, text) pieces: what is
    certain is passed on, and what may still turn out otherwise is held (the start of a reply
    that may open <think>, an end that may start </think> or one of calls, whitespace that may end
    the thinking)."""

    def __init__(self, opened: Union[bool, Markup, None] = False, calls: Sequence[str] = (),
                 channels: bool = False) -> None:
        markup = _markup(opened)
        self.state = "thinking" if markup else "start"
        self.close = markup[1] if markup else ""
        self.calls = tuple(calls)
        self.channels = channels  # Gemma 4's channel markup (split())
        self.held = ""
        self.thought = False  # some reasoning passed on
        self.block = True  # nothing of the current thinking block passed on (whitespace before it is dropped)

    def feed(self, text: str) -> List[Tuple[str, str]]:
        self.held += text
        out: List[Tuple[str, str]] = []
        while True:
            if self.state == "start":
                head = self.held.lstrip()
                markup = next((m for m in MARKUPS if head.startswith(m[0])), None)
                if markup is not None:
                    self.held, self.state, self.close = head[len(markup[0]):], "thinking", markup[1]
                    self.block = True
                elif any(m[0].startswith(head) for m in MARKUPS):
                    return out  # not decided yet
                else:
                    self.state = "content"
            elif self.state == "thinking":
                end, after = _end(self.held, self.close, self.calls)
                if end >= 0:
                    self._think(self.held[:end].rstrip(), out)
                    self.held, self.state = self.held[after:], "after"
                    continue
                cut = len(self.held) - max(_open_tail(self.held, t) for t in (self.close, *self.calls))
                sure = self.held[:cut].rstrip()
                self._think(sure, out)
                self.held = self.held[len(sure):]
                return out
            elif self.state == "after":
                self.held = self.held.lstrip()
                if not self.held:
                    return out
                self.state = "content"
            elif self.channels:
                if not self._channel(out):
                    return out
            else:
                if self.held:
                    out.append((CONTENT, self.held))
                self.held = ""
                return out

    def _channel(self, out: List[Tuple[str, str]]) -> bool:
        """Gemma 4's content or a channel tag in it: whether there is more to read now."""
        open_tag, close = MARKUPS[1]
        channel = open_tag[:open_tag.index("thought")]
        if self.state == "channel":  # after a <|channel>: a thought block, or a tag to drop
            rest = self.held[len(channel):]
            if rest.startswith("thought"):
                self.held, self.state, self.close, self.block = rest[len("thought"):], "thinking", close, True
            elif "thought".startswith(rest):
                return False  # not decided yet
            else:
                self.held, self.state = rest, "content"
            return True
        at = [i for i in (self.held.find(channel), self.held.find(close)) if i >= 0]
        if not at:
            cut = len(self.held) - max(_open_tail(self.held, channel), _open_tail(self.held, close))
            if cut:
                out.append((CONTENT, self.held[:cut]))
            self.held = self.held[cut:]
            return False
        end = min(at)
        if end:
            out.append((CONTENT, self.held[:end]))
        if self.held.startswith(close, end):
            self.held = self.held[end + len(close):]  # a <channel|> that closes no thought: dropped
        else:
            self.held, self.state = self.held[end:], "channel"
        return True

    def _think(self, text: str, out: List[Tuple[str, str]]) -> None:
        if self.block:
            text = text.lstrip()
        if text:
            out.append((REASONING, ("\n" if self.block and self.thought else "") + text))
            self.thought, self.block = True, False

    def finish(self) -> List[Tuple[str, str]]:
        """The pieces still held once the reply is complete."""
        held, self.held = self.held, ""
        if self.state == "thinking":
            out: List[Tuple[str, str]] = []
            self._think(held.rstrip(), out)
            return out
        if self.state == "start" and held:
            return [(CONTENT, held)]
        # (in the state "channel", a thought block cut off as it opened: nothing)
        return [(CONTENT, held)] if self.state == "content" and held else []
