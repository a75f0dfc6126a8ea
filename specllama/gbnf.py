"""Pieces of GBNF (llama.cpp's grammar format) written from Python: quoted literals, character
sets, and the text that runs up to a closing tag without holding it."""

from __future__ import annotations

from typing import List

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SET_ESCAPES = {"\\": "\\\\", "]": "\\]", "^": "\\^", "-": "\\-", "[": "\\[", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """text as a GBNF string literal."""
    return '"' + "".join(_LITERAL_ESCAPES.get(c, c) for c in text) + '"'


def not_in(chars: str) -> str:
    """A GBNF character set of every character but chars."""
    return "[^" + "".join(_SET_ESCAPES.get(c, c) for c in dict.fromkeys(chars)) + "]"


def text_without(rule: str, tag: str) -> List[str]:
    """GBNF rules rule-0 ... rule-(len(tag) - 1) where rule-0 is any text (empty included) that does
    not hold tag, so that `rule-0 "tag"` ends at the first tag: a state per how much of the tag the
    text's end has matched (the whole tag is never reached). The tag's first character must not
    occur again in it (the states fall back to 1 on it)."""
    first = tag[0]
    if first in tag[1:]:
        raise ValueError(f"the tag {tag!r} repeats its first character")
    rules = []
    for k in range(len(tag)):
        c = tag[k]
        if k == 0:
            alts = [f"{literal(first)} {rule}-1", f"{not_in(first)} {rule}-0"]
        elif k == len(tag) - 1:  # (one character short of the tag, only that character is refused)
            alts = [f"{literal(first)} {rule}-1", f"{not_in(first + c)} {rule}-0"]
        else:
            alts = [f"{literal(first)} {rule}-1", f"{not_in(first + c)} {rule}-0", f"{literal(c)} {rule}-{k + 1}"]
        rules.append(f"{rule}-{k} ::= ( {' | '.join(alts)} )?")
    return rules
