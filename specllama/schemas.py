"""JSON Schema to GBNF (llama.cpp's grammar format) by llama-cpp-python's converter, a port of
llama.cpp's json_schema_to_grammar. The converter passes over some keywords without a word, and a
grammar made without them would let through output the schema forbids; those are refused here,
each named with where it stands in the schema:

- minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf (llama.cpp's own converter
  follows the first four for integers; the port for none)
- uniqueItems, contains, minContains, maxContains
- minProperties, maxProperties, patternProperties, propertyNames, dependentRequired,
  dependentSchemas
- not, if, then, else
- a string format other than date, time and date-time (uuid too, as a pattern)

Annotations (title, description, default, examples, $comment, ...) are fine."""

from __future__ import annotations

import json
from typing import Any, Iterator, Tuple

IGNORED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "uniqueItems", "contains",
           "minContains", "maxContains", "minProperties", "maxProperties", "patternProperties", "propertyNames",
           "dependentRequired", "dependentSchemas", "not", "if", "then", "else")
FORMATS = ("date", "time", "date-time", "uuid")
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
        for k in IGNORED:
            if k in node:
                raise ValueError(f"the JSON schema keyword '{k}' (at {path}) is not supported: the grammar would "
                                 "not hold the output to it")
        fmt = node.get("format")
        if fmt is not None and node.get("type") == "string" and fmt not in FORMATS:
            raise ValueError(f"the string format '{fmt}' (at {path}) is not supported (supported: "
                             f"{', '.join(FORMATS)})")


def to_grammar(schema: Any) -> str:
    """The GBNF grammar of schema (a JSON schema object); ValueError where it cannot be followed."""
    if not isinstance(schema, dict):
        raise ValueError("a JSON schema must be an object")
    check(schema)
    from llama_cpp.llama_grammar import json_schema_to_gbnf

    try:
        return json_schema_to_gbnf(json.dumps(schema))
    except Exception as exc:  # the converter reports a schema it cannot follow by AssertionError, KeyError, ...
        raise ValueError(f"the JSON schema cannot be followed: {exc}") from None
