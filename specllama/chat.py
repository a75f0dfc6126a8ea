"""A conversation kept in the KV cache.

Each turn renders the whole conversation with the chat template and tokenizes it, exactly as a
client of llama-server or llama-cpp-python sends it; the decoder keeps the longest prefix its
cache shares with the new prompt, so earlier turns are not processed again. Templates that are
not prefix-stable (a default system message at the first turn only, earlier turns rewritten)
still get the right prompt: the cache is reused up to where the two differ.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional

import click

from . import encoding
from .decoder import PromptTooLong, SpeculativeDecoder, StepChunk


class ContextFull(Exception):
    """The next turn does not fit in the context."""


def lookup_note(stats) -> str:
    """The "(prompt lookup: kept/proposed)" note of a stats line (Stats or SessionStats); empty
    when lookup proposed nothing."""
    if not stats.n_lookup_drafted:
        return ""
    return f" (prompt lookup: {stats.n_lookup_accepted}/{stats.n_lookup_drafted})"


def paused_note(stats) -> str:
    """The stats line's note on steps the adaptive rule took without the draft model (Stats or
    SessionStats); empty when there were none."""
    if not stats.n_paused_steps:
        return ""
    return f"; draft model left out of {stats.n_paused_steps} of {stats.n_steps} steps (drafting did not pay)"


def threads_note(stats, physical: int) -> str:
    """The stats line's note on tuned thread counts below the machine's physical cores (a Stats);
    empty where the counts were given, or stayed at the full count."""
    if not stats.threads_tuned:
        return ""
    counts = [stats.n_threads] + ([stats.n_threads_draft] if stats.n_threads_draft else [])
    if all(c >= physical for c in counts):
        return ""
    draft = f" (draft {stats.n_threads_draft})" if stats.n_threads_draft else ""
    return (f"; {stats.n_threads}{draft} of {physical} CPU threads, where the decodes measured faster "
            "(another process may be keeping a core busy)")


@dataclass
class SessionStats:
    turns: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_steps: int = 0
    n_lookup_drafted: int = 0  # of the drafted tokens, proposed by prompt lookup
    n_lookup_accepted: int = 0
    n_paused_steps: int = 0
    decode_ms: float = 0.0  # time after prefill
    prefill_ms: float = 0.0
    n_prompt_new: int = 0  # prompt tokens actually processed (not found in the cache)

    def add(self, s) -> None:
        self.turns += 1
        self.n_generated += s.n_generated
        self.n_drafted += s.n_drafted
        self.n_accepted += s.n_accepted
        self.n_steps += s.n_steps
        self.n_lookup_drafted += s.n_lookup_drafted
        self.n_lookup_accepted += s.n_lookup_accepted
        self.n_paused_steps += s.n_paused_steps
        self.decode_ms += s.t_total_ms - s.t_prefill_ms
        self.prefill_ms += s.t_prefill_ms
        self.n_prompt_new += s.n_prompt - s.n_prompt_cached

    def summary(self) -> str:
        if not self.turns:
            return "no replies yet"
        rate = self.n_accepted / self.n_drafted if self.n_drafted else 0.0
        tps = self.n_generated * 1000.0 / self.decode_ms if self.decode_ms else 0.0
        per_step = self.n_generated / self.n_steps if self.n_steps else 0.0
        return (f"{self.turns} replies, {self.n_generated} tokens at {tps:.1f} tokens/s; "
                f"acceptance {rate:.1%} ({self.n_accepted}/{self.n_drafted} drafted){lookup_note(self)}, "
                f"{per_step:.2f} tokens per target pass{paused_note(self)}; {self.n_prompt_new} prompt tokens processed")


@dataclass
class ChatSession:
    decoder: SpeculativeDecoder
    system: Optional[str] = None
    template: Optional[str] = None  # apply_chat_template's: None (the model's), a built-in name, or a Jinja file
    variables: Dict[str, Any] = field(default_factory=dict)  # extra template variables (enable_thinking, ...)
    messages: List[Dict[str, str]] = field(default_factory=list)
    stats: SessionStats = field(default_factory=SessionStats)

    def __post_init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []
        self.decoder.reset()

    def prompt_for(self, user_text: str) -> List[int]:
        """The prompt tokens of the conversation with user_text as the next message."""
        return self.decoder.chat_tokens(self.messages + [{"role": "user", "content": user_text}],
                                        template=self.template, **self.variables)

    def send(self, user_text: str, **gen_kwargs) -> Iterator[StepChunk]:
        """Stream the reply to user_text. Raises ContextFull if the prompt does not fit. The reply
        (whole, or what was produced before the stream was closed) joins the history."""
        try:
            prompt = self.prompt_for(user_text)
        except PromptTooLong as exc:
            raise ContextFull(str(exc)) from None
        reply_text: List[str] = []
        final: Optional[StepChunk] = None
        try:
            for chunk in self.decoder.stream(prompt, **gen_kwargs):
                reply_text.append(chunk.text)
                if chunk.finish_reason is not None:
                    final = chunk
                yield chunk
        finally:
            self.messages += [{"role": "user", "content": user_text},
                              {"role": "assistant", "content": "".join(reply_text)}]
            if final is not None and final.stats is not None:
                self.stats.add(final.stats)


# --- the terminal side of `specllama chat` ------------------------------------------------------

def _err(msg: str) -> None:
    click.echo(msg, err=True)


def echo_stream(chunks, tokens: Optional[list] = None):
    """Print streamed text to stdout as it lands (collecting the tokens into tokens, if given);
    return the final chunk (finish_reason, stats)."""
    final = None
    for chunk in chunks:
        if tokens is not None:
            tokens.extend(chunk.tokens)
        if chunk.text:
            click.echo(chunk.text, nl=False)
            sys.stdout.flush()
        if chunk.finish_reason is not None:
            final = chunk
    return final


def chat_turn(session, text: str, kwargs: dict, n_ctx: int, reader: "ChatInput") -> bool:
    """One message of the chat: a command or a reply. False: the user asked to quit."""
    if not text:
        return True
    if text in ("/exit", "/quit"):
        return False
    if text == "/reset":
        start_over(session)
    elif text == "/stats":
        _err(session.stats.summary())
    elif text.startswith("/") and "\n" not in text:
        _err(f"unknown command {text}; commands: /stats, /reset, /exit")
    else:
        try:
            final = echo_stream(session.send(text, **kwargs))
            click.echo("")
        except KeyboardInterrupt:
            click.echo("")
            _err("(reply stopped)")
            return True
        except ContextFull as exc:
            _err(f"The context is full: {exc}. Starting over (/reset) frees it.")
            offer_start_over(session, reader)
            return True
        if final is not None and final.context_full:
            _err(f"(the reply filled the context of {n_ctx} tokens)")
            offer_start_over(session, reader)
    return True


class ChatInput:
    """Reads the chat's messages. A line is a message; a line ending in a backslash continues on
    the next; a message that starts with triple quotes runs to a line that ends with them (for
    pasted text). With a terminal on stdin and stdout, lines are read through readline (editing,
    history within the session, and a paste of several lines is one message where the terminal
    brackets pastes) and the prompt goes with the input; otherwise the prompt goes to stderr, so
    stdout holds only replies."""

    def __init__(self, input_encoding: str = "utf-8") -> None:
        self.encoding = input_encoding
        self.interactive = sys.stdin.isatty() and sys.stdout.isatty()
        if self.interactive:
            try:
                import readline  # input() edits lines through it once imported
            except ImportError:  # Python built without it: plain input()
                return
            if "GNU readline" in (readline.__doc__ or ""):
                # a paste of several lines arrives as one message (Python turns this off for its REPL)
                readline.parse_and_bind("set enable-bracketed-paste on")

    def line(self, prompt: str):
        """One line (without its end), or None at end of input. InputNotText for bytes that are
        not text in the chosen encoding."""
        if self.interactive:
            try:
                return encoding.from_terminal(input(prompt), self.encoding, "the message")
            except EOFError:
                return None
            except UnicodeDecodeError as exc:  # stdin decodes strictly: the bytes are gone, say where
                raise encoding.InputNotText(f"the message is not valid {exc.encoding}: {exc.reason} at offset "
                                            f"{exc.start}; give its encoding with --encoding") from None
        click.echo(prompt, nl=False, err=True)
        line = encoding.read_line(self.encoding, "the message")
        return line.rstrip("\r\n") if line else None

    def read(self):
        """The next message, or None at end of input."""
        line = self.line(">>> ")
        if line is None:
            return None
        if line.lstrip().startswith('"""'):
            lines, line = [], line.lstrip()[3:]
            while not line.rstrip().endswith('"""'):
                lines.append(line)
                line = self.line("... ")
                if line is None:  # end of input ends the block
                    return "\n".join(lines)
            lines.append(line.rstrip()[:-3])
            return "\n".join(lines)
        lines = []
        while line.endswith("\\"):
            lines.append(line[:-1])
            line = self.line("... ")
            if line is None:
                line = ""
                break
        lines.append(line)
        return "\n".join(lines)


def start_over(session) -> None:
    session.reset()
    _err("(conversation cleared)")


def offer_start_over(session, reader: "ChatInput") -> None:
    try:
        answer = reader.line("Start over? [y/N] ")  # through readline on a terminal, like messages
    except KeyboardInterrupt:
        answer = None
        _err("")
    if answer is not None and answer.strip().lower() in ("y", "yes"):
        start_over(session)
