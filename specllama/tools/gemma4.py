"""Tool calls in Gemma 4's format. Gemma 4's chat template declares the tools in its own notation
and has the model call one as

    <|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>

keys bare, text between <|"|> marks, numbers, true, false, null, [lists] and {objects} as in
JSON, no spaces, several calls one after another, after which the model ends its turn with
<|tool_response>. The template writes an object's keys sorted, in the declarations and in past
calls alike (case ignored).

parse() reads the calls into OpenAI's tool_calls (arguments as JSON); the grammars hold a call to
its tool's parameter schema in this notation (keys in the template's sorted order, each required
one present), which llama.cpp's grammar for Gemma 4 does not (it admits any arguments). A schema
keyword the notation's grammar cannot follow is refused with its place: pattern, minLength,
maxLength, allOf, prefixItems, a $ref outside the schema's $defs / definitions,
additionalProperties beside properties, and those specllama.schemas refuses for JSON (string
formats other than date, time, date-time and uuid among them)."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import gbnf, schemas
from . import common

OPEN, CLOSE = "<|tool_call>", "<tool_call|>"
QUOTE = '<|"|>'  # around a text value
# tags that end a thinking block too (none: a call comes after the thinking closes)
ENDS_THINKING: tuple = ()
TAGS = (OPEN, CLOSE, QUOTE)  # spelled out in the text where a model's vocabulary has them as control tokens
_CALL = "call:"
_NAME = re.compile(r"call:([^{}<>\s]+)")
_KEY = re.compile(r"\s*([^:{}\[\],<>\s]+)\s*:")
# a number, true, false or null (NaN and Infinity are no JSON)
_SCALARS = json.JSONDecoder(parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))


# --- reading calls ------------------------------------------------------------------------------

class _Syntax(ValueError):
    pass


def _space(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\r\n":
        at += 1
    return at


def _sequence(text: str, at: int, close: str, item: Callable[[str, int], Tuple[Any, int]]) -> Tuple[List[Any], int]:
    """The items item(text, at) reads, separated by commas, up to close (the opening bracket ends
    just before at); where close ends."""
    items: List[Any] = []
    at = _space(text, at)
    if text.startswith(close, at):
        return items, at + 1
    while True:
        got, at = item(text, at)
        items.append(got)
        at = _space(text, at)
        if text.startswith(close, at):
            return items, at + 1
        if not text.startswith(",", at):
            raise _Syntax(f"items need commas between them before '{close}'")
        at += 1


def _value(text: str, at: int) -> Tuple[Any, int]:
    at = _space(text, at)
    if text.startswith(QUOTE, at):
        end = text.find(QUOTE, at + len(QUOTE))
        if end < 0:
            raise _Syntax("unclosed text")
        return text[at + len(QUOTE):end], end + len(QUOTE)
    if text.startswith("{", at):
        members, at = _sequence(text, at + 1, "}", _member)
        return dict(members), at
    if text.startswith("[", at):
        return _sequence(text, at + 1, "]", _value)
    if text.startswith(("-", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "t", "f", "n"), at):
        try:  # a number, true, false or null, as JSON writes them
            return _SCALARS.raw_decode(text, at)
        except ValueError:
            pass
    raise _Syntax(f"no value at {at}")


def _member(text: str, at: int) -> Tuple[Tuple[str, Any], int]:
    """An object's key (bare, or written as text) and value."""
    at = _space(text, at)
    if text.startswith(QUOTE, at):
        key, at = _value(text, at)
        at = _space(text, at)
        if not text.startswith(":", at):
            raise _Syntax("a key needs a ':'")
        at += 1
    else:
        m = _KEY.match(text, at)
        if not m:
            raise _Syntax("no key")
        key, at = m.group(1), m.end()
    value, at = _value(text, at)
    return (key, value), at


def _call(text: str, at: int) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call whose opening tag ends at at, or None where it does not parse; where it ends)."""
    m = _NAME.match(text, _space(text, at))
    if not m or not text.startswith("{", m.end()):
        return None, at
    try:
        members, end = _sequence(text, m.end() + 1, "}", _member)
    except (_Syntax, RecursionError):  # (RecursionError: nested deeper than Python recurses)
        return None, at
    end = _space(text, end)
    if text.startswith(CLOSE, end):
        end += len(CLOSE)
    elif end < len(text):
        return None, at
    return common.openai_call(m.group(1), dict(members)), end


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls in OpenAI's shape, the content the
    text before the first call (None where empty). Text with no call that parses comes back whole
    as content, with no calls. (tools: unused, the notation types the values itself.)"""
    return common.read_calls(text, lambda t, at: t.find(OPEN, at), lambda t, at: _call(t, at + len(OPEN)))


class StreamSplitter(common.StreamSplitter):
    """A streamed reply's text split into what can be shown as content now and what may be a tool
    call: everything from the first <|tool_call> on is held back (and a tail that could be the
    start of one) until finish() parses it."""

    OPENS = (OPEN,)

    def parse(self, text: str) -> common.Calls:
        return parse(text)


# --- grammars -----------------------------------------------------------------------------------

def _sort_key(key: str) -> str:
    """An object's keys in the order the template writes them (Jinja's dictsort: case ignored)."""
    return key.lower()


def notation(value: Any) -> str:
    """value (JSON's) as Gemma 4's template writes an argument: text between <|"|> marks, an
    object's keys bare and sorted."""
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if value is None or isinstance(value, (bool, int, float)):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ",".join(notation(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{notation(value[k])}" for k in sorted(value, key=_sort_key)) + "}"
    raise ValueError(f"{value!r} is not a JSON value")


_P = "gemma4"
_BASE = [
    f"{_P}-text ::= {gbnf.literal(QUOTE)} {_P}-chars-0 {gbnf.literal(QUOTE)}",
    *gbnf.text_without(f"{_P}-chars", QUOTE),
    f'{_P}-integer ::= "-"? ("0" | [1-9] [0-9]{{0,15}})',
    f'{_P}-number ::= "-"? ("0" | [1-9] [0-9]{{0,15}}) ("." [0-9]{{1,20}})? ([eE] [-+]? [0-9]{{1,16}})?',
    f'{_P}-boolean ::= "true" | "false"',
    f'{_P}-value ::= {_P}-text | {_P}-object | {_P}-list | {_P}-number | {_P}-boolean | "null"',
    f"{_P}-key ::= {gbnf.not_in(':{}[],<>' + chr(34) + chr(39) + ' ' + chr(9) + chr(10))}+",
    f'{_P}-object ::= "{{" ( {_P}-key ":" {_P}-value ( "," {_P}-key ":" {_P}-value )* )? "}}"',
    f'{_P}-list ::= "[" ( {_P}-value ( "," {_P}-value )* )? "]"',
]
# what a schema may hold that its grammar here does not follow
_REFUSED = ("pattern", "minLength", "maxLength", "allOf", "prefixItems")


class _Converter:
    """A tool's parameter schema as GBNF rules for its arguments in Gemma 4's notation."""

    def __init__(self) -> None:
        self.rules: List[str] = list(_BASE)
        self.refs: Dict[Tuple[int, str], str] = {}
        self.root: Dict[str, Any] = {}
        self.tool = 0

    def rule(self, body: str) -> str:
        name = f"{_P}-r{len(self.rules)}"
        self.rules.append(f"{name} ::= {body}")
        return name

    def value(self, s: Any, path: str) -> str:
        """A GBNF expression for the values schema s admits."""
        if s is True or s == {}:
            return f"{_P}-value"
        if not isinstance(s, dict):
            raise ValueError(f"the schema at {path} must be an object")
        refused = next((k for k in _REFUSED if k in s), None)
        if refused is not None:
            raise ValueError(f"the JSON schema keyword '{refused}' (at {path}) is not supported in Gemma 4's tool "
                             "calls: the grammar would not hold the arguments to it")
        if "$ref" in s:
            return self._ref(s["$ref"], path)
        if "const" in s:
            return gbnf.literal(notation(s["const"]))
        if "enum" in s:
            if not isinstance(s["enum"], list) or not s["enum"]:
                raise ValueError(f"'enum' (at {path}) must be a non-empty list")
            return "( " + " | ".join(gbnf.literal(notation(v)) for v in s["enum"]) + " )"
        for k in ("anyOf", "oneOf"):
            if k in s:
                if not isinstance(s[k], list) or not s[k]:
                    raise ValueError(f"'{k}' (at {path}) must be a non-empty list of schemas")
                return "( " + " | ".join(self.value(sub, f"{path}.{k}[{i}]") for i, sub in enumerate(s[k])) + " )"
        t = s.get("type")
        types = t if isinstance(t, list) else [t] if t is not None else \
            ["object"] if "properties" in s else ["array"] if "items" in s else None
        if types is None:
            return f"{_P}-value"
        alts = [self._typed(tt, s, path) for tt in types]
        if s.get("nullable") is True and "null" not in types:
            alts.append('"null"')
        return alts[0] if len(alts) == 1 else "( " + " | ".join(alts) + " )"

    def _typed(self, t: Any, s: Dict[str, Any], path: str) -> str:
        if t == "string":
            if "format" in s:
                return f"{gbnf.literal(QUOTE)} {schemas.format_text(s['format'], path)} {gbnf.literal(QUOTE)}"
            return f"{_P}-text"
        if t == "integer":
            lo, hi = schemas.integer_range(s, path)
            return f"{_P}-integer" if lo is None and hi is None else self.rule(schemas.integer_rule(lo, hi))
        if t == "number":
            return f"{_P}-number"
        if t == "boolean":
            return f"{_P}-boolean"
        if t == "null":
            return '"null"'
        if t == "array":
            return self._list(s, path)
        if t == "object":
            return self._object(s, path)
        raise ValueError(f"the type {t!r} (at {path}) is not a JSON schema type")

    def _list(self, s: Dict[str, Any], path: str) -> str:
        item = self.value(s.get("items", {}), f"{path}.items")
        lo, hi = s.get("minItems", 0), s.get("maxItems")
        if not isinstance(lo, int) or lo < 0 or (hi is not None and (not isinstance(hi, int) or hi < lo)):
            raise ValueError(f"'minItems' / 'maxItems' (at {path}) must be integers, the least at most the most")
        if hi == 0:
            return '"[]"'
        more = f"{{{max(lo - 1, 0)},{'' if hi is None else hi - 1}}}"
        items = f'{item} ( "," {item} ){more}'
        return self.rule(f'"[" {items} "]"' if lo > 0 else f'"[" ( {items} )? "]"')

    def _object(self, s: Dict[str, Any], path: str) -> str:
        props = s.get("properties")
        extra = s.get("additionalProperties")
        if not props:
            if isinstance(extra, dict) and extra:
                v = self.value(extra, f"{path}.additionalProperties")
                return self.rule(f'"{{" ( {_P}-key ":" {v} ( "," {_P}-key ":" {v} )* )? "}}"')
            return '"{}"' if extra is False else f"{_P}-object"
        if not isinstance(props, dict):
            raise ValueError(f"'properties' (at {path}) must be an object of schemas")
        if extra not in (None, False):
            raise ValueError(f"'additionalProperties' beside 'properties' (at {path}) is not supported in Gemma 4's "
                             "tool calls")
        required = set(s.get("required") or ())
        keys = sorted(props, key=_sort_key)
        kvs = [f"{gbnf.literal(k + ':')} {self.value(props[k], f'{path}.properties.{k}')}" for k in keys]
        made: Dict[Tuple[int, bool], Optional[str]] = {}

        def rest(i: int, after: bool) -> Optional[str]:
            """The rule for the members from keys[i] on (after: some member came before), or None
            where nothing may follow."""
            if i == len(keys):
                return None
            if (i, after) not in made:
                sep = '"," ' if after else ""
                tail = rest(i + 1, True)
                take = f"{sep}{kvs[i]}" + (f" {tail}" if tail else "")
                if keys[i] in required:
                    body = take
                else:
                    skip = rest(i + 1, after)
                    body = f"( {take} | {skip} )" if skip else f"( {take} )?"
                made[(i, after)] = self.rule(body)
            return made[(i, after)]

        members = rest(0, False)
        return self.rule(f'"{{" {members} "}}"') if members else '"{}"'

    def _ref(self, ref: Any, path: str) -> str:
        m = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref) if isinstance(ref, str) else None
        target = self.root.get(m.group(1), {}).get(m.group(2)) if m else None
        if target is None:
            raise ValueError(f"the $ref {ref!r} (at {path}) is not one of the schema's $defs or definitions")
        key = (self.tool, ref)
        if key not in self.refs:
            name = f"{_P}-ref{len(self.refs)}-{self.tool}"
            self.refs[key] = name
            self.rules.append(f"{name} ::= {self.value(target, ref)}")
        return self.refs[key]


def arguments_grammar(schema: Dict[str, Any]) -> str:
    """A GBNF grammar (start rule root) of a call's arguments by schema, in Gemma 4's notation."""
    schemas.check(schema)
    conv = _Converter()
    conv.root = schema
    expr = conv.value(schema, "schema")
    return "\n".join([f"root ::= {expr}"] + conv.rules) + "\n"


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """A GBNF grammar whose every output is one or more calls (one where not parallel) in Gemma 4's
    format to the checked tools (or to the one named), each call's arguments by its tool's
    parameters schema: tool_choice "required" or a named function. ValueError where a schema
    cannot be followed."""
    conv = _Converter()
    alts = []
    for i, fn in common.chosen(tools, name):
        params = fn.get("parameters") or {"type": "object"}
        schemas.check(params)
        conv.root, conv.tool = params, i
        args = conv.value(params, f"tools[{i}].function.parameters")
        alts.append(f"{gbnf.literal(fn['name'])} {args}")
    call = f"{_P}-call ::= {gbnf.literal(OPEN + _CALL)} ( {' | '.join(alts)} ) {gbnf.literal(CLOSE)}"
    return "\n".join([f"root ::= {_P}-call" + ("+" if parallel else ""), call] + conv.rules) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it), as llama-server's: a call to
    the tools' schemas from its <|tool_call> tag on."""
    return forced_grammar(tools, None, parallel), [re.escape(OPEN)]
