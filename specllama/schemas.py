"""JSON Schema to GBNF (llama.cpp's grammar format) by llama-cpp-python's converter, a port of
llama.cpp's json_schema_to_grammar, with integer bounds (minimum, maximum, exclusiveMinimum,
exclusiveMaximum on an integer), which the port lacks: two bounds by llama.cpp's rules, one as the
range to the 16 digits an integer has in these grammars. Between a value's tokens
the JSON has at most one space (the port's rule, which keeps a model from running on in
whitespace), or with lines=True also a line break and an indentation (llama.cpp's rule), for JSON
a model lays out itself. The converter passes over some keywords without a word, and a grammar
made without them would let through output the schema forbids; those are refused here, each named
with where it stands in the schema:

- minimum, maximum, exclusiveMinimum, exclusiveMaximum other than on an integer, and multipleOf
  (llama.cpp's converter follows none of these either)
- uniqueItems, contains, minContains, maxContains
- minProperties, maxProperties, patternProperties, propertyNames, dependentRequired,
  dependentSchemas
- not, if, then, else
- a string format other than date, time and date-time (uuid too, as a pattern)

Annotations (title, description, default, examples, $comment, ...) are fine."""

from __future__ import annotations

import functools
import json
import math
from typing import Any, Iterator, List, Optional, Tuple


BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")  # followed on an integer
IGNORED = ("multipleOf", "uniqueItems", "contains", "minContains", "maxContains", "minProperties", "maxProperties",
           "patternProperties", "propertyNames", "dependentRequired", "dependentSchemas", "not", "if", "then", "else")
# whitespace between a JSON value's tokens with lines=True: llama.cpp's json_schema_to_grammar's
LINES_SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'
FORMATS = ("date", "time", "date-time", "uuid")
INT_DIGITS = 16  # the most digits of an integer in the converter's grammars (its integral-part)
INT_LIMIT = 10 ** INT_DIGITS - 1
# where a schema holds schemas: a schema each, or a list or an object of them
_ONE = ("items", "additionalProperties", "additionalItems", "unevaluatedProperties", "unevaluatedItems")
_LIST = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("properties", "$defs", "definitions")


def _walk(schema: Any, path: str) -> Iterator[Tuple[str, dict]]:
    if not isinstance(schema, dict):
        return
    yield path, schema
    for k in _ONE:
        yield from _walk(schema.get(k), f"{path}.{k}")
    for k in _LIST:
        if isinstance(schema.get(k), list):
            for i, sub in enumerate(schema[k]):
                yield from _walk(sub, f"{path}.{k}[{i}]")
    for k in _MAP:
        if isinstance(schema.get(k), dict):
            for name, sub in schema[k].items():
                yield from _walk(sub, f"{path}.{k}.{name}")


def check(schema: Any) -> None:
    """ValueError naming the first keyword the converter would pass over, with its place."""
    for path, node in _walk(schema, "schema"):
        for k in IGNORED + (() if node.get("type") == "integer" else BOUNDS):
            if k in node:
                raise ValueError(f"the JSON schema keyword '{k}' (at {path}) is "
                                 f"{'supported on integers only' if k in BOUNDS else 'not supported'}: the grammar "
                                 "would not hold the output to it")
        if _bounded_integer(node):
            integer_range(node, path)
            beside = next((k for k in _ALTERNATIVES if k in node), None)
            if beside is not None:
                raise ValueError(f"integer bounds beside '{beside}' (at {path}) are not supported: the grammar would "
                                 "follow only one of them")
        fmt = node.get("format")
        if fmt is not None and node.get("type") == "string" and fmt not in FORMATS:
            raise ValueError(f"the string format '{fmt}' (at {path}) is not supported (supported: "
                             f"{', '.join(FORMATS)})")


@functools.lru_cache(maxsize=None)
def llama_grammar() -> Any:
    """llama-cpp-python's llama_grammar module (its JSON-schema converter and grammars), imported on
    first use. Importing llama_cpp sets its own callback for llama.cpp's log, which prints every
    message, debug ones included, to stderr: specllama's (silent unless SPECLLAMA_LOG says, its
    error lines kept for exceptions) is set back, once, as the import happens once."""
    import llama_cpp.llama_grammar as module

    from . import _core

    _core.log_reclaim()
    return module


def format_text(fmt: str, path: str = "schema") -> str:
    """A GBNF expression (no rule names) of the text of a string in one of FORMATS, unquoted: the
    converter's rules for date, time and date-time, and its pattern for a uuid."""
    if fmt == "uuid":
        hexes = lambda n: " ".join(["[0-9a-fA-F]"] * n)  # noqa: E731
        return " \"-\" ".join(hexes(n) for n in (8, 4, 4, 4, 12))
    rules = llama_grammar().STRING_FORMAT_RULES
    date, time = (f"({rules[k].content})" for k in ("date", "time"))
    text = {"date": date, "time": time, "date-time": f'{date} "T" {time}'}.get(fmt)
    if text is None:
        raise ValueError(f"the string format '{fmt}' (at {path}) is not supported (supported: {', '.join(FORMATS)})")
    return f"( {text} )"


def integer_range(node: dict, path: str = "schema") -> Tuple[Optional[int], Optional[int]]:
    """(lowest, highest) integer an integer schema admits by its bounds (None: no bound on that side);
    ValueError for a bound that is not a number, or bounds no integer meets."""
    for k in BOUNDS:
        v = node.get(k)
        if k in node and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise ValueError(f"'{k}' (at {path}) must be a number")
    lows = [math.ceil(node["minimum"])] if "minimum" in node else []
    lows += [math.floor(node["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in node else []
    highs = [math.floor(node["maximum"])] if "maximum" in node else []
    highs += [math.ceil(node["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in node else []
    lo, hi = max(lows, default=None), min(highs, default=None)
    if lo is not None and hi is not None and lo > hi:
        raise ValueError(f"no integer meets the bounds at {path}")
    if (lo is not None and lo > INT_LIMIT) or (hi is not None and hi < -INT_LIMIT):
        raise ValueError(f"the bounds at {path} admit no integer of at most {INT_DIGITS} digits, the most an "
                         "integer has in these grammars")
    return lo, hi


_CONVERTERS: dict = {}
_ALTERNATIVES = ("$ref", "oneOf", "anyOf", "allOf", "const", "enum")  # what the converter reads before a type


def _bounded_integer(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "integer" and any(k in node for k in BOUNDS)


def _converter(lines: bool) -> Any:
    """A fresh converter: llama-cpp-python's with llama.cpp's integer bounds; with lines, llama.cpp's
    whitespace rule, also after a const or an enum value (llama_cpp imported on first use)."""
    if not _CONVERTERS:
        grammar = llama_grammar()
        RESERVED_NAMES, SchemaConverter = grammar.RESERVED_NAMES, grammar.SchemaConverter

        class Converter(SchemaConverter):
            def __init__(self) -> None:
                super().__init__(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)

            def visit(self, schema: Any, name: str) -> str:
                if _bounded_integer(schema):
                    rule = "(" + integer_rule(*integer_range(schema)) + ") space"
                    return self._add_rule(name + "-" if name in RESERVED_NAMES else name or "root", rule)
                return super().visit(schema, name)

        class LinesConverter(Converter):
            def __init__(self) -> None:
                super().__init__()
                self._rules["space"] = LINES_SPACE_RULE

            def _generate_constant_rule(self, value: Any) -> str:
                # (the port ends every other value with whitespace, so that a line break can come
                # before the closing brace; a const or an enum value too)
                return super()._generate_constant_rule(value) + " space"

        _CONVERTERS.update({False: Converter, True: LinesConverter})
    return _CONVERTERS[lines]()


def to_grammar(schema: Any, lines: bool = False) -> str:
    """The GBNF grammar of schema (a JSON schema object); ValueError where it cannot be followed.
    lines: the JSON may be laid out over lines (llama.cpp's whitespace rule)."""
    if not isinstance(schema, dict):
        raise ValueError("a JSON schema must be an object")
    check(schema)
    return convert(schema, lines)


def convert(schema: dict, lines: bool = False) -> str:
    """The converter's grammar of schema, without check()'s refusals; ValueError where it fails."""
    converter = _converter(lines)
    try:
        converter.visit(converter.resolve_refs(json.loads(json.dumps(schema)), "stdin"), "")
    except Exception as exc:  # the converter reports a schema it cannot follow by AssertionError, KeyError, ...
        raise ValueError(f"the JSON schema cannot be followed: {exc}") from None
    return converter.format_grammar()


# Integer ranges as GBNF: llama.cpp's build_min_max_int (common/json-schema-to-grammar.cpp, MIT)
# for a range between two bounds, in Python, rule text for rule text.

def _digit_range(a: str, b: str, out: List[str]) -> None:
    out.append(f"[{a}]" if a == b else f"[{a}-{b}]")


def _more_digits(lo: int, hi: int, out: List[str]) -> None:
    out.append("[0-9]")
    if not lo == hi == 1:
        out.append("{" + str(lo) + ("" if hi == lo else f",{hi}") + "}")


def _uniform_range(a: str, b: str, out: List[str]) -> None:
    """The numbers from a to b, two digit strings of one length."""
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    if i > 0:
        out.append(f'"{a[:i]}"')
    if i >= len(a) or i >= len(b):
        return
    if i > 0:
        out.append(" ")
    sub_len = len(a) - i - 1
    if sub_len == 0:
        out.append(f"[{a[i]}-{b[i]}]")
        return
    a_sub, b_sub, zeros, nines = a[i + 1:], b[i + 1:], "0" * sub_len, "9" * sub_len
    to_reached = False
    out.append("(")
    if a_sub == zeros:
        _digit_range(a[i], chr(ord(b[i]) - 1), out)
        out.append(" ")
        _more_digits(sub_len, sub_len, out)
    else:
        out.append(f"[{a[i]}] (")
        _uniform_range(a_sub, nines, out)
        out.append(")")
        if ord(a[i]) < ord(b[i]) - 1:
            out.append(" | ")
            to_reached = b_sub == nines
            _digit_range(chr(ord(a[i]) + 1), b[i] if to_reached else chr(ord(b[i]) - 1), out)
            out.append(" ")
            _more_digits(sub_len, sub_len, out)
    if not to_reached:
        out.append(" | ")
        _digit_range(b[i], b[i], out)
        out.append(" ")
        _uniform_range(zeros, b_sub, out)
    out.append(")")


def _int_between(lo: int, hi: int, out: List[str], decimals_left: int = 16) -> None:
    if lo < 0 and hi < 0:
        out.append('"-" (')
        _int_between(-hi, -lo, out, decimals_left)
        out.append(")")
        return
    if lo < 0:
        out.append('"-" (')
        _int_between(0, -lo, out, decimals_left)
        out.append(") | ")
        lo = 0
    lo_s, hi_s = str(lo), str(hi)
    for digits in range(len(lo_s), len(hi_s)):
        _uniform_range(lo_s, "9" * digits, out)
        lo_s = "1" + "0" * digits
        out.append(" | ")
    _uniform_range(lo_s, hi_s, out)


def integer_rule(lo: Optional[int], hi: Optional[int]) -> str:
    """GBNF for the decimal integers from lo to hi (None: no bound on that side) of at most
    INT_DIGITS digits, as every integer in these grammars: a range between two bounds by llama.cpp's
    rules; one bound as the range to the digit limit on the other side (llama.cpp's rules for one
    bound admit numbers below a minimum such as 100)."""
    out: List[str] = []
    _int_between(max(-INT_LIMIT, lo if lo is not None else -INT_LIMIT),
                 min(INT_LIMIT, hi if hi is not None else INT_LIMIT), out)
    return "".join(out)
