"""Tool calls in the XML form of the Qwen3-Coder and Qwen3.5 chat templates (and Nemotron 3
Nano's), which have the model call a tool as

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

a parameter's value as text where its schema is a string's, as JSON otherwise (the template writes
objects and lists by tojson, other values as Python writes them: a boolean True or False), or
without the <tool_call> tag, from <function=name> on (Qwen3-Coder writes calls so at times).
parse() reads the calls into OpenAI's tool_calls, typing each value by its tool's schema (JSON of a
type the schema takes other than a string, else the text), and the grammars hold a call to its
tool's schema as llama.cpp's grammar for this format does: the required parameters in any order
(in the schema's order beyond six), then optional ones; a text value is any text up to its closing
tag, a string enum one of its values, a date, time, date-time or uuid by its format, a boolean
true or false (or Python's), and a value of another type JSON by its schema (specllama.schemas)."""

from __future__ import annotations

import json
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from .. import gbnf, schemas
from . import common

OPEN, CLOSE = "<tool_call>", "</tool_call>"
# tags that end a thinking block too: Qwen3.5 may call a tool from inside its thinking (as llama-server
# reads it, for templates of this format with a thinking mode)
ENDS_THINKING: tuple = (OPEN,)
TAGS = (OPEN, CLOSE)  # spelled out in the text where a model's vocabulary has them as control tokens
BARE = "<function="  # a call whose <tool_call> tag the model left out (Qwen3-Coder does)
_FUNCTION = re.compile(r"\s*<function=([^>\n]+)>")
_PARAMETER = re.compile(r"\s*<parameter=([^>\n]+)>")
_VALUE_END = "\n</parameter>"
_FUNCTION_END = re.compile(r"\s*</function>")
_PERMUTED = 6  # required parameters up to this many may come in any order
_PYTHON = {"True": True, "False": False, "None": None}  # values as the template writes them


def _schemas(tools: Optional[List[Dict[str, Any]]]) -> Dict[str, Dict[str, Any]]:
    """Each tool's parameter schemas by tool and parameter name."""
    out: Dict[str, Dict[str, Any]] = {}
    for t in tools or ():
        params = (t["function"].get("parameters") or {}).get("properties")
        out[t["function"]["name"]] = params if isinstance(params, dict) else {}
    return out


def _types(schema: Any) -> set:
    """The JSON types a parameter's schema admits (empty: any)."""
    if not isinstance(schema, dict):
        return set()
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list):
        return set(t)
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        return {"string" if isinstance(v, str) else "other" for v in values}
    for k in ("anyOf", "oneOf"):
        if isinstance(schema.get(k), list):
            return set().union(*(_types(s) or {"string", "other"} for s in schema[k]))
    return set()


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", str: "string", list: "array", dict: "object"}.get(type(value), "null")


def _value(text: str, schema: Any) -> Any:
    """A parameter's value by its schema: JSON of a type the schema takes other than a string,
    else the text as it stands (a value the template wrote as Python's, True say, read as such)."""
    types = _types(schema)
    if types == {"string"}:
        return text
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # (RecursionError: nested deeper than Python recurses)
        value = _PYTHON.get(text.strip(), text)
    kind = _json_type(value)
    fits = not types or kind in types or (kind == "integer" and "number" in types) or "other" in types
    return value if fits and kind != "string" else text


def _start(text: str, at: int) -> int:
    """Where the next call starts from at on: its <tool_call> tag, or a <function= block without
    one (-1: none)."""
    tagged, bare = text.find(OPEN, at), text.find(BARE, at)
    return min((i for i in (tagged, bare) if i >= 0), default=-1)


def _call(text: str, at: int, params: Dict[str, Dict[str, Any]]) -> Tuple[Optional[Dict[str, Any]], int]:
    """(the call that starts at at, with its <tool_call> tag or without, or None where it does not
    parse; where it ends)."""
    if text.startswith(OPEN, at):
        at += len(OPEN)
    m = _FUNCTION.match(text, at)
    if not m:
        return None, at
    name, at, args = m.group(1).strip(), m.end(), {}
    schema = params.get(name, {})
    while True:
        p = _PARAMETER.match(text, at)
        if not p:
            break
        start = p.end() + 1 if text.startswith("\n", p.end()) else p.end()
        end = text.find(_VALUE_END, start - 1)
        if end < 0:
            return None, at
        key = p.group(1).strip()
        args[key] = _value(text[start:max(end, start)], schema.get(key))
        at = end + len(_VALUE_END)
    f = _FUNCTION_END.match(text, at)
    if not f:
        return None, at
    at = f.end()
    close = re.compile(r"\s*" + re.escape(CLOSE)).match(text, at)
    at = close.end() if close else at
    return common.openai_call(name, args), at


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls in OpenAI's shape (each value typed by
    its tool's schema among tools), the content the text before the first call (None where
    empty); a call is read with its <tool_call> tags or without them. Text with no call that
    parses comes back whole as content, with no calls."""
    params = _schemas(tools)
    return common.read_calls(text, _start, lambda t, at: _call(t, at, params))


StreamSplitter = common.splitter(parse, OPEN, BARE)


# --- grammars -----------------------------------------------------------------------------------

_P = "xml"
_REFUSED = ("pattern", "minLength", "maxLength")


class Rules:
    """The rules of a grammar of calls whose values stand between tags (this format's, GLM's): a
    rule per value's kind, named with prefix; a text value is any text without end (its closing
    tag, and what follows it where the text may hold the tag otherwise; None: a format whose text
    values are of another kind writes their rule itself)."""

    def __init__(self, prefix: str = _P, end: Optional[str] = _VALUE_END + "\n") -> None:
        self.prefix = prefix
        self.rules: List[str] = [] if end is None else [f"{prefix}-text ::= {prefix}-chars-0",
                                                        *gbnf.text_without(f"{prefix}-chars", end)]
        self.n = 0

    def add(self, body: str) -> str:
        self.n += 1
        name = f"{self.prefix}-r{self.n}"
        self.rules.append(f"{name} ::= {body}")
        return name

    def value(self, schema: Any, path: str) -> str:
        """A GBNF expression for a parameter's value, up to its closing tag."""
        types = _types(schema)
        if isinstance(schema, dict):
            if types == {"string"}:
                refused = next((k for k in _REFUSED if k in schema), None)
                if refused is not None:
                    raise ValueError(f"the JSON schema keyword '{refused}' (at {path}) is not supported in XML tool "
                                     "calls: the grammar would not hold the value to it")
                if "enum" in schema or "const" in schema:
                    values = schema.get("enum", [schema.get("const")])
                    return "( " + " | ".join(gbnf.literal(v) for v in values) + " )"
                if "format" in schema:
                    return schemas.format_text(schema["format"], path)
            elif types == {"boolean"} and not any(k in schema for k in ("enum", "const")):
                return '( "true" | "false" | "True" | "False" )'  # (the template writes Python's)
            elif types and "string" not in types:
                schemas.check(schema)
                self.n += 1
                prefix = f"{self.prefix}-v{self.n}-"
                self.rules.append(gbnf.renamed(schemas.to_grammar(schema).strip(), prefix))
                return prefix + "root"
        return f"{self.prefix}-text"


def _parameter(key: str, value: str) -> str:
    return f"{gbnf.literal(f'<parameter={key}>' + chr(10))} {value} {gbnf.literal(_VALUE_END + chr(10))}"


def arguments(rules: Rules, fn: Dict[str, Any], where: str, parameter: Callable[[str, str], str] = _parameter,
              sep: str = "") -> str:
    """A GBNF expression for a call's parameters, each parameter(key, its value's expression): the
    required ones in any order (in the schema's order beyond six), then optional ones; sep (GBNF)
    between each two of them."""
    params = fn.get("parameters") or {}
    props = params.get("properties") or {}
    if not isinstance(props, dict):
        raise ValueError(f"{where}.properties must be an object of schemas")
    required = [k for k in props if k in set(params.get("required") or ())]
    arg = {k: rules.add(parameter(k, rules.value(props[k], f"{where}.properties.{k}"))) for k in props}
    if len(required) <= _PERMUTED:
        made: Dict[frozenset, str] = {}

        def rest(left: frozenset) -> str:
            if left not in made:
                alts = [" ".join(x for x in (arg[k], sep, rest(left - {k})) if x) if len(left) > 1 else arg[k]
                        for k in required if k in left]
                made[left] = rules.add(" | ".join(alts))
            return made[left]

        ordered = rest(frozenset(required)) if required else ""
    else:
        ordered = (f" {sep} " if sep else " ").join(arg[k] for k in required)
    optional = " | ".join(arg[k] for k in props if k not in required)
    if not optional:
        return ordered
    if not sep:
        return f"{ordered} ( {optional} )*".strip()
    if ordered:
        return f"{ordered} ( {sep} ( {optional} ) )*"
    return f"( ( {optional} ) ( {sep} ( {optional} ) )* )?"


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True,
                   bare: bool = False) -> str:
    """A GBNF grammar whose every output is one or more calls (one where not parallel) in this XML
    form to the checked tools (or to the one named), each call's values by its tool's schema:
    tool_choice "required" or a named function. bare: the first call may leave out its
    <tool_call> tags. ValueError where a schema cannot be followed."""
    rules = Rules()
    alts = []
    for i, fn in common.chosen(tools, name):
        args = arguments(rules, fn, f"tools[{i}].function.parameters")
        alts.append(f"{gbnf.literal('<function=' + fn['name'] + '>' + chr(10))} {args}".rstrip())
    function = f"{_P}-function ::= {' | '.join(alts)}"
    end = gbnf.literal("</function>")
    call = f"{_P}-call ::= {gbnf.literal(OPEN + chr(10))} {_P}-function {end} {gbnf.literal(chr(10) + CLOSE)}"
    first = f"( {_P}-call | {_P}-function {end} {gbnf.literal(chr(10) + CLOSE)}? )" if bare else f"{_P}-call"
    root = f"root ::= {first}" + (f' ( "\\n" {_P}-call )*' if parallel else "")
    return "\n".join([root, call, function] + rules.rules) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it), as llama-server's: a call to
    the tools' schemas from its <tool_call> tag on, or from a tool's <function=name> block written
    without the tag (as llama-server's grammar for Qwen3-Coder reads it)."""
    triggers = [re.escape(OPEN)] + [re.escape(f"{BARE}{t['function']['name']}>") for t in tools]
    return forced_grammar(tools, None, parallel, bare=True), triggers
