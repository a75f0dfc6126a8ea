"""Pieces of GBNF (llama.cpp's grammar format) written from Python: quoted literals, character
sets, the text that runs up to a closing tag without holding it, and rules renamed apart."""

from __future__ import annotations

import re
from typing import List

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SET_ESCAPES = {"\\": "\\\\", "]": "\\]", "^": "\\^", "-": "\\-", "[": "\\[", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """text as a GBNF string literal."""
    return '"' + "".join(_LITERAL_ESCAPES.get(c, c) for c in text) + '"'


def not_in(chars: str) -> str:
    """A GBNF character set of every character but chars."""
    return "[^" + "".join(_SET_ESCAPES.get(c, c) for c in dict.fromkeys(chars)) + "]"


def _next_state(tag: str, k: int, c: str) -> int:
    """How much of tag the end of tag[:k] + c matches (the longest prefix of tag it ends with)."""
    s = tag[:k] + c
    return next(n for n in range(min(len(s), len(tag)), -1, -1) if s.endswith(tag[:n]))


def text_without(rule: str, tag: str) -> List[str]:
    """GBNF rules rule-0 ... rule-(len(tag) - 1) where rule-0 is any text (empty included) such
    that `rule-0 "tag"` holds tag only at its end: a state per how much of the tag the text's end
    has matched (the whole tag is never reached), and the text may end only in a state from which
    the tag does not complete early (for a tag whose start recurs in it, as "\\n...\\n" does)."""
    rules = []
    for k in range(len(tag)):
        moves = {c: _next_state(tag, k, c) for c in dict.fromkeys(tag)}
        alts = [f"{literal(c)} {rule}-{n}" for c, n in moves.items() if 0 < n < len(tag)]
        alts.append(f"{not_in(''.join(c for c, n in moves.items() if n))} {rule}-0")
        ends = all(_run(tag, k, tag[:i]) < len(tag) for i in range(1, len(tag)))
        body = " | ".join(alts)
        rules.append(f"{rule}-{k} ::= ( {body} )" + ("?" if ends else ""))
    return rules


def _run(tag: str, k: int, text: str) -> int:
    for c in text:
        k = _next_state(tag, k, c)
        if k == len(tag):
            return k
    return k


_NAME = re.compile(r"[a-zA-Z0-9-]+")


def renamed(rules: str, prefix: str) -> str:
    """GBNF rules with every rule name (where defined and where used) given prefix, so that
    grammars written apart (by the JSON schema converter, say) can stand in one grammar."""
    names = set(re.findall(r"^([a-zA-Z0-9-]+)\s*::=", rules, re.M))
    out, i = [], 0
    while i < len(rules):
        c = rules[i]
        if c in "\"[":  # a literal or a character set: copied as it is, escapes and all
            close = '"' if c == '"' else "]"
            j = i + 1
            while j < len(rules) and rules[j] != close:
                j += 2 if rules[j] == "\\" else 1
            out.append(rules[i:j + 1])
            i = j + 1
        elif c == "#":  # a comment, to the end of its line
            j = rules.find("\n", i)
            j = len(rules) if j < 0 else j
            out.append(rules[i:j])
            i = j
        else:
            m = _NAME.match(rules, i)
            if m:
                word = m.group()
                out.append(prefix + word if word in names else word)
                i = m.end()
            else:
                out.append(c)
                i += 1
    return "".join(out)
