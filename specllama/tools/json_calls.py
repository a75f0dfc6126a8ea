"""Tool calls as JSON after a family's own tag, as llama.cpp reads them, a flavour per family
(Flavour; format_of in specllama.tools picks one by the template's marker):

- NEMOTRON: <TOOLCALL>[{"name": ..., "arguments": {...}}, ...]</TOOLCALL> (NVIDIA Nemotron Nano 2)
- APRIEL: <tool_calls>[{"name": ..., "arguments": {...}}, ...]</tool_calls> (ServiceNow Apriel 1.5, 1.6)
- MINIMAX: <tool_calls>, a call's JSON object a line, </tool_calls> (MiniMax-M1)
- COMMAND: <|START_ACTION|>[{"tool_call_id": "0", "tool_name": ..., "parameters": {...}}]<|END_ACTION|>
  (Cohere Command R7B, Command A)
- COMMAND_R_PLUS: Action: and a ```json block of [{"tool_name": ..., "parameters": {...}}, ...] (Cohere
  Command R+ and Command R's tool-use template)
- FIREFUNCTION: functools[{"name": ..., "arguments": {...}}, ...] (no closing tag; Firefunction v2)
- GIGACHAT: <|function_call|>{"name": ..., "arguments": {...}} (one call; GigaChat 3.1)
- GIGACHAT3: <|message_sep|>, a blank line, function call<|role_sep|>, a line break and
  {"name": ..., "arguments": {...}} (one call, the message of a role of its own; GigaChat 3)
- APERTUS: <|tools_prefix|>[{"name": {...arguments}}, ...]<|tools_suffix|> (the function's name as
  the key; Apertus)
- GRANITE: <|tool_call|>[{"name": ..., "arguments": {...}}, ...] (no closing tag; IBM Granite 3.x,
  whose template teaches the form in its system prompt and writes no past calls)

The parser reads the JSON after the flavour's opening tag (a list of calls, or calls one after
another) into OpenAI's tool_calls, the text before it the content; the grammars write the flavour,
each call an object by the JSON schema converter with the keys in the template's order and the
arguments by the tool's schema."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import schemas
from . import common

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[\s,]*")


class Flavour(common.Flavour):
    """One family's form: its tags, how its calls are laid out (a JSON list, a call a line, or one
    call), the keys of a call's name and arguments (None: the name is the key), and its grammars."""

    family = "json_calls"

    def __init__(self, name: str, open_tag: str, close: str, layout: str, keys: Tuple[Optional[str], ...],
                 call_id: Optional[str] = None, tags: Optional[Tuple[str, ...]] = None) -> None:
        super().__init__(name)
        self.open, self.close, self.layout = open_tag, close, layout
        self.name_key, self.args_key = keys
        self.call_id = call_id  # a key the template writes before the name (Command's "tool_call_id")
        # the control tokens spelled out in the text: the tags (given where the opening is more than one)
        self.TAGS = tags if tags is not None else tuple(t for t in (open_tag.strip(), close) if t.startswith("<"))
        self.trigger = common.regex_literal(open_tag)

    def _call(self, item: Any) -> Optional[Dict[str, Any]]:
        if not isinstance(item, dict):
            return None
        if self.name_key is None:  # {"name": {arguments}}
            if len(item) != 1:
                return None
            name, args = next(iter(item.items()))
        else:
            name, args = item.get(self.name_key), item.get(self.args_key, {})
        if isinstance(args, str):  # (arguments given as a JSON string, as OpenAI's own)
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                return None
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            return None
        return common.openai_call(name, args)

    def _read(self, text: str, at: int) -> Tuple[List[Dict[str, Any]], int]:
        """The calls of the JSON after the tag at at (none where it does not parse), and where they end."""
        calls: List[Dict[str, Any]] = []
        i = at + len(self.open)
        while True:
            j = _WS.match(text, i).end()
            try:
                value, end = _DECODER.raw_decode(text, j)
            except (ValueError, RecursionError):
                break
            items = value if isinstance(value, list) else [value]
            read = [self._call(v) for v in items]
            if not read or None in read:
                return [], at + len(self.open)
            calls += read
            i = end
            if self.layout != "lines":
                break
        return calls, i

    def parse(self, text: str, tools: Optional[List[Dict[str, Any]]] = None) -> common.Calls:
        """(content, tool_calls) of a generated text: the calls after the flavour's tag, the content
        the text before the first (None where empty); a text with no call that parses is all content."""
        return common.read_call_groups(text, self.open, self._read)

    @property
    def StreamSplitter(self):  # noqa: N802 (a class, as the other formats' modules have it)
        return common.splitter(self.parse, self.open)

    def forced_grammar(self, tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
        """tool_choice "required" (name None) or a named tool: every output is calls of the tools
        (or the one named) in this form. ValueError where a schema cannot be converted."""
        calls = []
        for _, fn in common.chosen(tools, name):
            params = fn.get("parameters") or {"type": "object"}
            if self.name_key is None:
                props = {fn["name"]: params}
            else:
                props = {self.name_key: {"const": fn["name"]}, self.args_key: params}
                if self.call_id is not None:
                    props = {self.call_id: {"type": "string"}, **props}
            calls.append({"type": "object", "properties": props, "required": list(props)})
        rules = schemas.to_grammar(calls[0] if len(calls) == 1 else {"anyOf": calls}, lines=True)
        rules = re.sub(r"^root ::=", "json-call ::=", rules, flags=re.M)
        ws = "[ \\t\\n]{0,8}"
        if self.layout == "one" or (self.layout == "lines" and not parallel):
            body = f"{ws} json-call"
        elif self.layout == "lines":
            body = f'{ws} json-call ( "\\n" json-call )*'
        else:
            more = f' ( "," {ws} json-call )*' if parallel else ""
            body = f'"[" {ws} json-call{more} {ws} "]"'
        close = f" {ws} {json.dumps(self.close)}" if self.close else ""
        return f"root ::= {json.dumps(self.open)} {body}{close}\n" + rules


NEMOTRON = Flavour("NEMOTRON", "<TOOLCALL>", "</TOOLCALL>", "list", ("name", "arguments"))
APRIEL = Flavour("APRIEL", "<tool_calls>", "</tool_calls>", "list", ("name", "arguments"))
MINIMAX = Flavour("MINIMAX", "<tool_calls>", "</tool_calls>", "lines", ("name", "arguments"))
COMMAND = Flavour("COMMAND", "<|START_ACTION|>", "<|END_ACTION|>", "list", ("tool_name", "parameters"),
                  call_id="tool_call_id")
COMMAND_R_PLUS = Flavour("COMMAND_R_PLUS", "Action:\n```json\n", "```", "list", ("tool_name", "parameters"))
FIREFUNCTION = Flavour("FIREFUNCTION", " functools", "", "list", ("name", "arguments"))
GIGACHAT = Flavour("GIGACHAT", "<|function_call|>", "", "one", ("name", "arguments"))
GIGACHAT3 = Flavour("GIGACHAT3", "<|message_sep|>\n\nfunction call<|role_sep|>\n", "", "one", ("name", "arguments"),
                    tags=("<|message_sep|>", "<|role_sep|>"))
APERTUS = Flavour("APERTUS", "<|tools_prefix|>", "<|tools_suffix|>", "list", (None, None))
GRANITE = Flavour("GRANITE", "<|tool_call|>", "", "list", ("name", "arguments"))


def flavour_of(template_source: str) -> Optional[Flavour]:
    """The flavour whose marker a template writes, or None."""
    if "<TOOLCALL>" in template_source:
        return NEMOTRON
    if "<tool_calls>" in template_source:
        return MINIMAX if "<tool_calls>\\n" in template_source and "<tool_calls>[" not in template_source else APRIEL
    if "<|START_ACTION|>" in template_source:
        return COMMAND
    if "Action:\\n```json" in template_source:  # (a Jinja string's line breaks, written \n)
        return COMMAND_R_PLUS
    if " functools[" in template_source:
        return FIREFUNCTION
    if "<|function_call|>" in template_source:
        return GIGACHAT
    if "<|role_sep|>" in template_source and "<|message_sep|>" in template_source:
        return GIGACHAT3
    if "<|tools_prefix|>" in template_source:
        return APERTUS
    if "<|tool_call|>" in template_source:
        return GRANITE
    return None
