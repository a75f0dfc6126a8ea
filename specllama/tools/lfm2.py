"""Tool calls in the form of Liquid's LFM2 and LFM2.5 chat templates, which have the model call
tools as a Python list of calls between tags:

    <|tool_call_start|>[get_weather(city="Paris", days=3), get_time(zone='UTC')]<|tool_call_end|>

as llama.cpp reads them: a value is a Python literal, or JSON (True and true, None and null alike);
a name may be dotted (Calendar.create_event). parse() reads the calls into OpenAI's tool_calls (the
literals read by Python's own parser, never run), and the grammars hold a call to its tool's
schema: the required arguments in any order, then optional ones, a string quoted either way (an
enum one of its values, a date, time, date-time or uuid by its format), a boolean either way, and a
value of another type JSON by its schema (specllama.schemas)."""

from __future__ import annotations

import ast
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf, schemas
from . import common, qwen3_coder

OPEN, CLOSE = "<|tool_call_start|>", "<|tool_call_end|>"
ENDS_THINKING: tuple = ()  # (a call comes after the thinking closes)
TAGS = (OPEN, CLOSE)  # spelled out where a vocabulary has them as control tokens (LFM2's does)
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_P = "lfm2"


def is_lfm2(template_source: str) -> bool:
    """Whether a chat template teaches this form (LFM2's lists its tools between <|tool_list_start|>
    and <|tool_list_end|>, LFM2.5's after "List of tools: [")."""
    return "<|tool_list_start|>" in template_source or "List of tools: [" in template_source


def _literal(node: ast.AST) -> Any:
    """The value of a Python (or JSON) literal's syntax tree; ValueError for anything else."""
    if isinstance(node, ast.Constant) and not isinstance(node.value, (bytes, complex, type(...))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict) and all(isinstance(k, ast.Constant) and isinstance(k.value, str) for k in node.keys):
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values)}
    raise ValueError("not a literal")


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return _name(node.value) + "." + node.attr
    raise ValueError("not a name")


def _read(text: str, at: int) -> Tuple[List[Dict[str, Any]], int]:
    """The calls of the list whose tag is at at (none where it does not parse), and where it ends."""
    start = at + len(OPEN)
    end = text.find(CLOSE, start)
    if end < 0:
        return [], start
    try:
        tree = ast.parse(text[start:end].strip(), mode="eval").body
        if not isinstance(tree, ast.List) or not all(isinstance(c, ast.Call) and not c.args for c in tree.elts):
            return [], start
        calls = [common.openai_call(_name(c.func), {k.arg: _literal(k.value) for k in c.keywords})
                 for c in tree.elts if all(k.arg is not None for k in c.keywords)]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [], start
    return (calls if len(calls) == len(tree.elts) else []), end + len(CLOSE)


def parse(text: str, tools: Optional[List[Dict[str, Any]]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool_calls) of a generated text: the calls of each list in OpenAI's shape, the
    content the text before the first (None where empty). Text with no list that parses comes back
    whole as content, with no calls."""
    return common.read_call_groups(text, OPEN, _read)


StreamSplitter = common.splitter(parse, OPEN)


# --- grammars -----------------------------------------------------------------------------------

_STRING = (f'{_P}-string ::= "\\"" ( [^"\\\\\\n] | "\\\\" [^\\n] )* "\\"" | '
           f'"\'" ( [^\'\\\\\\n] | "\\\\" [^\\n] )* "\'"')


_JSON_STRING = re.compile(r'^([\w-]*string) ::= "\\"" ([\w-]*char)\* "\\"" ([\w-]*space)$', re.M)
_QUOTED = re.compile(r'"\\"((?:[^"\\]|\\[^"])*)\\""')
_WORDS = re.compile(r'"(true|false|null)"')
_PYTHON_WORDS = {"true": "True", "false": "False", "null": "None"}


def _python_literals(grammar: str) -> str:
    """The JSON schema converter's grammar with a value's Python spelling allowed too, as the
    templates write lists (Python's repr): a string in single quotes, True, False and None."""
    grammar = _QUOTED.sub(lambda m: f'( "\\"{m.group(1)}\\"" | "\'{m.group(1)}\'" )', grammar)
    grammar = _WORDS.sub(lambda m: f'( "{m.group(1)}" | "{_PYTHON_WORDS[m.group(1)]}" )', grammar)
    return _JSON_STRING.sub(lambda m: f'{m.group(1)} ::= ( "\\"" {m.group(2)}* "\\"" | "\'" {m.group(1)}-single* '
                                      f'"\'" ) {m.group(3)}\n{m.group(1)}-single ::= [^\'\\\\\\n] | "\\\\" [^\\n]',
                            grammar)


class _Rules(qwen3_coder.Rules):
    """The rules of the calls' values: Python's literals where they differ from JSON's."""

    def __init__(self) -> None:
        super().__init__(_P, None)
        self.rules.append(_STRING)
        self.any_json = False

    def value(self, schema: Any, path: str) -> str:
        types = qwen3_coder._types(schema)
        if isinstance(schema, dict) and types == {"string"}:
            if "enum" in schema or "const" in schema:
                values = [v for v in schema.get("enum", [schema.get("const")]) if isinstance(v, str)]
                return "( " + " | ".join(f'"\\"" {gbnf.literal(v)} "\\"" | "\'" {gbnf.literal(v)} "\'"'
                                         for v in values) + " )"
            if "format" in schema:
                text = schemas.format_text(schema["format"], path)
                return f'( "\\"" {text} "\\"" | "\'" {text} "\'" )'
            refused = next((k for k in qwen3_coder._REFUSED if k in schema), None)
            if refused is not None:
                raise ValueError(f"the JSON schema keyword '{refused}' (at {path}) is not supported in Python-style "
                                 "tool calls: the grammar would not hold the value to it")
            return f"{_P}-string"
        if isinstance(schema, dict) and types == {"boolean"} and not any(k in schema for k in ("enum", "const")):
            return '( "True" | "False" | "true" | "false" )'
        if isinstance(schema, dict) and types and "string" not in types:
            schemas.check(schema)
            self.n += 1
            prefix = f"{_P}-v{self.n}-"
            self.rules.append(gbnf.renamed(_python_literals(schemas.to_grammar(schema)).strip(), prefix))
            return prefix + "root"
        if not self.any_json:  # (a value of no type, or of a string's and others: any literal)
            self.rules.append(gbnf.renamed(_python_literals(schemas.to_grammar({})).strip(), f"{_P}-json-"))
            self.any_json = True
        return f"{_P}-json-value"


def _argument(key: str, value: str) -> str:
    return f"{gbnf.literal(key + '=')} {value}"


def forced_grammar(tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
    """A GBNF grammar whose every output is a list of calls (one where not parallel) in this form to
    the checked tools (or to the one named), each value by its tool's schema: tool_choice
    "required" or a named function. ValueError where a schema cannot be followed."""
    rules = _Rules()
    alts = []
    for i, fn in common.chosen(tools, name):
        args = qwen3_coder.arguments(rules, fn, f"tools[{i}].function.parameters", _argument, sep='", "')
        alts.append(f"{gbnf.literal(fn['name'] + '(')} {args} \")\"")
    call = f"{_P}-call ::= {' | '.join(alts)}"
    more = f' ( ", " {_P}-call )*' if parallel else ""
    root = f'root ::= {gbnf.literal(OPEN + "[")} {_P}-call{more} {gbnf.literal("]" + CLOSE)}'
    return "\n".join([root, call] + rules.rules) + "\n"


def lazy_grammar(tools: List[Dict[str, Any]], parallel: bool = True) -> Tuple[str, List[str]]:
    """tool_choice "auto": (the grammar, the patterns that start it): calls from their tag on."""
    return forced_grammar(tools, None, parallel), [re.escape(OPEN)]
