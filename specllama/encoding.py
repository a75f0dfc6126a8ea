"""Text that arrives as bytes (a command-line argument, standard input, a line typed at the chat
prompt) decoded with the encoding the user names (--encoding, UTF-8 by default). Bytes that are
not text in that encoding are an InputNotText error saying where, never replaced silently."""

from __future__ import annotations

import codecs
import os
import sys


class InputNotText(ValueError):
    """Input bytes that do not decode in the chosen encoding."""


def check_encoding(name: str) -> str:
    """name, if Python knows the encoding; ValueError otherwise."""
    try:
        codecs.lookup(name)
    except LookupError:
        raise ValueError(f"unknown encoding {name!r} (examples: utf-8, latin-1, cp1252, utf-16)") from None
    return name


def decode(raw: bytes, encoding: str, what: str) -> str:
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        bad = raw[exc.start:exc.end]
        hint = (" give the input's encoding with --encoding (for example --encoding latin-1)"
                if codecs.lookup(encoding).name == "utf-8" else " check --encoding")
        name = "UTF-8" if codecs.lookup(encoding).name == "utf-8" else encoding
        raise InputNotText(f"{what} is not valid {name}: byte 0x{bad[0]:02X} at offset {exc.start} "
                           f"({exc.reason});{hint}") from None


def from_argument(arg: str, encoding: str, what: str) -> str:
    """A command-line argument (which Python decoded with surrogateescape) decoded anew."""
    return decode(os.fsencode(arg), encoding, what)


def from_terminal(line: str, encoding: str, what: str) -> str:
    """A line read as text from standard input (undecodable bytes kept by surrogateescape),
    decoded anew."""
    stdin_encoding = getattr(sys.stdin, "encoding", None) or "utf-8"
    return decode(line.encode(stdin_encoding, "surrogateescape"), encoding, what)


def read_stdin(encoding: str, what: str) -> str:
    """All of standard input."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text stream without bytes underneath (an embedding application's)
        return from_terminal(sys.stdin.read(), encoding, what)
    return decode(buffer.read(), encoding, what)


def read_line(encoding: str, what: str):
    """One line of standard input with its end, or "" at the end of input."""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:
        return from_terminal(sys.stdin.readline(), encoding, what)
    return decode(buffer.readline(), encoding, what)
