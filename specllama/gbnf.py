"""Pieces of GBNF (llama.cpp's grammar format) written from Python: quoted literals, character
sets, the text that runs up to a closing tag without holding it, and rules renamed apart."""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence, Union

_LITERAL_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SET_ESCAPES = {"\\": "\\\\", "]": "\\]", "^": "\\^", "-": "\\-", "[": "\\[", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def literal(text: str) -> str:
    """text as a GBNF string literal."""
    return '"' + "".join(_LITERAL_ESCAPES.get(c, c) for c in text) + '"'


def not_in(chars: str) -> str:
    """A GBNF character set of every character but chars."""
    return "[^" + "".join(_SET_ESCAPES.get(c, c) for c in dict.fromkeys(chars)) + "]"


def _step(tags: Sequence[str], state: str, c: str) -> Optional[str]:
    """The state after c: the longest end of state + c that starts a tag; None where a tag completes."""
    text = state + c
    if any(text.endswith(t) for t in tags):
        return None
    return next(text[i:] for i in range(len(text) + 1) if any(t.startswith(text[i:]) for t in tags))


def _run(tags: Sequence[str], state: Optional[str], text: str) -> Optional[str]:
    for c in text:
        if state is None:
            break
        state = _step(tags, state, c)
    return state


def text_without(rule: str, tags: Union[str, Sequence[str]], then: Optional[Dict[str, str]] = None) -> List[str]:
    """GBNF rules rule-0, rule-1, ... where rule-0 is any text (empty included) that holds none of
    tags, such that `rule-0 "tag"` holds a tag only at its end: a state per end of the text that
    starts a tag (an automaton over the tags; a whole tag is never reached). The text may end only
    in a state from which the tag that follows does not complete early (nor another tag; for a tag
    whose start recurs in it, as "\n...\n" does, or that holds the start of another). then: what
    follows each tag's text (GBNF that starts with the tag), made part of the rules, so that each
    state ends with the tags that may follow it; without then, with several tags, a state ends only
    where each of them may follow."""
    tags = (tags,) if isinstance(tags, str) else tuple(tags)
    chars = "".join(dict.fromkeys("".join(tags)))
    states, todo = {"": 0}, [""]
    while todo:  # (numbered in the order found: for one tag, state k has matched its first k characters)
        state = todo.pop(0)
        for c in chars:
            n = _step(tags, state, c)
            if n is not None and n not in states:
                states[n] = len(states)
                todo.append(n)
    rules = []
    for state, k in states.items():
        moves = {c: _step(tags, state, c) for c in chars}
        alts = [f"{literal(c)} {rule}-{states[n]}" for c, n in moves.items() if n]
        alts.append(f"{not_in(''.join(c for c, n in moves.items() if n != ''))} {rule}-0")
        safe = [t for t in tags if all(_run(tags, state, t[:i]) is not None for i in range(1, len(t)))]
        if then is not None:
            alts += [then[t] for t in safe]
        ends = then is None and len(safe) == len(tags)
        rules.append(f"{rule}-{k} ::= ( {' | '.join(alts)} )" + ("?" if ends else ""))
    return rules


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
