"""Tool calls as <invoke> blocks with a <parameter> per argument inside a block of calls, a flavour
per family (Flavour; format_of in specllama.tools picks one by the template):

- DSML: DeepSeek V3.2's, in its DSML markup (｜DSML｜ a token of its own),

      <｜DSML｜function_calls>
      <｜DSML｜invoke name="get_weather">
      <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
      <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
      </｜DSML｜invoke>
      </｜DSML｜function_calls>

  each value as text where string="true" (a parameter whose schema admits a string), as JSON
  where "false"; DSML_V4: DeepSeek V4's (and V4-Flash's), the block named tool_calls
- MINIMAX_M2: MiniMax-M2's, <minimax:tool_call> around <invoke name="..."> blocks of
  <parameter name="...">value</parameter>, a value as text where it is a string, as JSON otherwise

parse() reads the calls into OpenAI's tool_calls, typing each value by its tool's schema (where
the markup does not say), the content the text before the first block, as llama.cpp reads them;
the grammars write the flavour, each call held to its tool's schema as qwen3_coder's are (the
required parameters in any order, then optional ones; a text value any text up to its closing
tag), whitespace allowed between the tags."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from .. import gbnf
from . import common, qwen3_coder


class Flavour(common.Flavour):
    """One family's markup: the block's tag name, an invoke's and a parameter's tags (their names
    prefixed with ns), and whether a parameter says by a string attribute whether its value is text."""

    family = "invoke"

    def __init__(self, name: str, block: str, ns: str, string_attr: bool, ends_thinking: bool) -> None:
        super().__init__(name)
        self.open, self.close = f"<{block}>", f"</{block}>"
        self.invoke, self.invoke_end = f'<{ns}invoke name="', f"</{ns}invoke>"
        self.param, self.param_end = f'<{ns}parameter name="', f"</{ns}parameter>"
        self.string_attr = string_attr
        # (DeepSeek's thinking may end at a block of calls, as llama.cpp reads it)
        self.ENDS_THINKING = (self.open,) if ends_thinking else ()
        self.TAGS = (ns,) if ns else (self.open, self.close)  # (spelled out where a vocabulary has them as tokens)
        self.trigger = common.regex_literal(self.open)
        self._invoke = re.compile(r"\s*" + re.escape(self.invoke) + r'([^"<>]+)">')
        attr = r'"\s+string="(true|false)' if string_attr else "()"
        self._param = re.compile(r"\s*" + re.escape(self.param) + r'([^"<>]+)' + attr + r'">')
        self._invoke_end = re.compile(r"\s*" + re.escape(self.invoke_end))
        self._close = re.compile(r"\s*" + re.escape(self.close))

    def _value(self, text: str, string: str, schema: Any) -> Any:
        if string == "true":
            return text
        if string == "false":
            try:
                return json.loads(text)
            except (ValueError, RecursionError):
                pass
        return qwen3_coder._value(text, schema)

    def _call(self, text: str, at: int, params: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], int]:
        """(the <invoke> block that starts at at, or None where none parses there; where it ends)."""
        m = self._invoke.match(text, at)
        if m is None:
            return None, at
        name, at, args = m.group(1), m.end(), {}
        schema = params.get(name, {})
        while True:
            p = self._param.match(text, at)
            if p is None:
                break
            end = text.find(self.param_end, p.end())
            if end < 0:
                return None, at
            args[p.group(1)] = self._value(text[p.end():end], p.group(2), schema.get(p.group(1)))
            at = end + len(self.param_end)
        e = self._invoke_end.match(text, at)
        return (None, at) if e is None else (common.openai_call(name, args), e.end())

    def _read(self, text: str, at: int, params: Dict[str, Any]) -> Tuple[List[Dict[str, Any]], int]:
        """The calls of the block whose tag is at at (none where a call in it does not parse or it
        does not close), and where it ends."""
        calls: List[Dict[str, Any]] = []
        i = at + len(self.open)
        while True:
            call, i = self._call(text, i, params)
            if call is None:
                break
            calls.append(call)
        close = self._close.match(text, i)
        if close is None or not calls:
            return [], at + len(self.open)
        return calls, close.end()

    def parse(self, text: str, tools: Optional[List[Dict[str, Any]]] = None) -> common.Calls:
        """(content, tool_calls) of a generated text: the calls of its blocks (each value typed by
        its tool's schema among tools where the markup does not say), the content the text before
        the first block (None where empty); a text with no call that parses is all content."""
        params = qwen3_coder._schemas(tools)
        return common.read_call_groups(text, self.open, lambda t, at: self._read(t, at, params))

    @property
    def StreamSplitter(self):  # noqa: N802 (a class, as the other formats' modules have it)
        return common.splitter(self.parse, self.open)

    def _parameter(self, props: Dict[str, Any]):
        def parameter(key: str, value: str) -> str:
            types = qwen3_coder._types(props[key])
            text = not types or "string" in types  # (as llama.cpp's: a value that may be a string is text)
            attr = f'" string="{"true" if text else "false"}"' if self.string_attr else '"'
            return f"{gbnf.literal(self.param + key + attr + '>')} {value} {gbnf.literal(self.param_end)}"
        return parameter

    def forced_grammar(self, tools: List[Dict[str, Any]], name: Optional[str] = None, parallel: bool = True) -> str:
        """tool_choice "required" (name None) or a named tool: every output is a block of calls (one
        where not parallel) to the tools (or the one named), each value by its tool's schema.
        ValueError where a schema cannot be followed."""
        p = f"invoke-{self.name.lower().replace('_', '-')}"
        rules = qwen3_coder.Rules(p, self.param_end)
        alts = []
        for i, fn in common.chosen(tools, name):
            props = (fn.get("parameters") or {}).get("properties") or {}
            parameter = self._parameter(props if isinstance(props, dict) else {})
            args = qwen3_coder.arguments(rules, fn, f"tools[{i}].function.parameters", parameter, f"{p}-ws")
            alts.append(f"{gbnf.literal(self.invoke + fn['name'] + chr(34) + '>')} {p}-ws {args} {p}-ws".replace(
                "  ", " "))
        call = f'{p}-call ::= ( {" | ".join(alts)} ) {gbnf.literal(self.invoke_end)}'
        calls = f"{p}-ws {p}-call" + (f" ( {p}-ws {p}-call )*" if parallel else "")
        root = f"root ::= {gbnf.literal(self.open)} {calls} {p}-ws {gbnf.literal(self.close)}"
        return "\n".join([root, call, f"{p}-ws ::= [ \\t\\n]{{0,4}}", *rules.rules]) + "\n"


DSML = Flavour("DSML", "｜DSML｜function_calls", "｜DSML｜", True, True)
DSML_V4 = Flavour("DSML_V4", "｜DSML｜tool_calls", "｜DSML｜", True, True)
MINIMAX_M2 = Flavour("MINIMAX_M2", "minimax:tool_call", "", False, False)


def flavour_of(template_source: str) -> Optional[Flavour]:
    """The flavour a template writes (llama.cpp's tests: a DSML template names its dsml_token, and
    V4's block is no longer function_calls), or None."""
    if "dsml_token" in template_source and "DSML" in template_source:
        return DSML if "function_calls" in template_source else DSML_V4
    if MINIMAX_M2.open in template_source:
        return MINIMAX_M2
    return None
