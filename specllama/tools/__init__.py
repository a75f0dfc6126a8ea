"""Tool calls: OpenAI's tools checked and given to the chat template, and the calls a reply makes
parsed back into OpenAI's tool_calls, in the format the model's template teaches it. A format is a
module of this package:

- hermes: <tool_call>{"name": ..., "arguments": {...}}</tool_call>, the Hermes and Qwen2.5 / Qwen3
  templates' (and a reply that is a call's JSON object alone, as small models and Llama 3 write)
- qwen3_coder: <tool_call><function=name><parameter=key>value</parameter></function></tool_call>
  over lines, the Qwen3-Coder and Qwen3.5 templates'
- seed_oss: <seed:tool_call><function=name><parameter=key>value</parameter></function></seed:tool_call>
  over lines, ByteDance's Seed-OSS's
- functionary: <function=name>{...}</function>, MeetKai's Functionary v3.1's
- functionary_v32: >>>name followed by a line break and {...} after the text to >>>all, MeetKai's
  Functionary v3.2's: a whole reply format (read by functionary_v32.read and .Reader, as harmony's)
- gemma4: <|tool_call>call:name{key:<|"|>text<|"|>,...}<tool_call|>, Gemma 4's
- glm: <tool_call>name<arg_key>key</arg_key><arg_value>value</arg_value></tool_call>, GLM-4.5 to
  4.7's (and Ling 3.0's, Laguna's)
- minicpm5: <function name="name"><param name="key">value</param></function>, MiniCPM5's (a text
  value in a CDATA block where it holds "<", "&" or a line break)
- lfm2: <|tool_call_start|>[name(key="value", n=3)]<|tool_call_end|>, Liquid's LFM2 and LFM2.5's
- invoke: <invoke name="..."> blocks of <parameter name="...">value</parameter> in a block of calls:
  DeepSeek V3.2's and V4's DSML markup (<｜DSML｜function_calls>, a parameter's string="true|false"),
  MiniMax-M2's (<minimax:tool_call>) (invoke.Flavour)
- kimi: <|tool_calls_section_begin|><|tool_call_begin|>functions.name:0<|tool_call_argument_begin|>{...}
  <|tool_call_end|><|tool_calls_section_end|>, Kimi K2's (the call's id the model's)
- deepseek: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name, the arguments in a
  ```json block (DeepSeek-R1 and its distills) or name<｜tool▁sep｜>{...} (DeepSeek V3.1): a flavour
  per template (deepseek.Flavour)
- json_calls: JSON after a family's own tag (<TOOLCALL>[...], <tool_calls>[...], <|START_ACTION|>[...],
  functools[...], <|function_call|>{...}, <|tools_prefix|>[...], <|tool_call|>[...]): Nemotron Nano 2's,
  Apriel's, MiniMax-M1's, Command R7B's, Firefunction's, GigaChat 3.1's, Apertus', Granite 3.x's
  (json_calls.Flavour)
- mistral: [TOOL_CALLS]name[ARGS]{...} (Mistral Small 3.x, Devstral, Ministral 3, Magistral; with
  [CALL_ID]id, Mistral Small 3.2) or [TOOL_CALLS][{"name": ..., "arguments": {...}, "id": ...}]
  (Mistral Nemo): a flavour per template (mistral.Flavour), with a module's functions
- harmony: gpt-oss's messages, <|start|>assistant to=functions.name<|channel|>commentary json
  <|message|>{...}: a whole reply format (its thinking, answer and calls read together by
  harmony.read and harmony.Reader, which the chat API uses in place of the splitters)

A whole reply format (WHOLE_REPLY) has read(text, reasoning, tools, opened) and a Reader(reasoning,
tools, opened) that read a reply's thinking, text and calls together (common.read_whole),
opened_by(prompt) (how the message the prompt ends inside opened, where it continues one),
opened_thinking(opened) (the thinking markup where that message is thinking) and
answer_grammar(grammar, root) (a JSON schema's answer in the format's message for the user).

Each has parse(text, tools) -> (content, calls), a StreamSplitter(tools) that holds a stream's
text back from a call's start (harmony: its Reader), forced_grammar (tool_choice "required" or a
named tool: every output is calls, the arguments by the tools' schemas) and lazy_grammar
(tool_choice "auto": the grammar and the patterns that trigger it), on what common.py holds for
all of them. format_of picks one by the chat template."""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from . import (deepseek, functionary, functionary_v32, gemma4, glm, harmony, hermes, invoke, json_calls, kimi,
               lfm2, minicpm5, mistral, qwen3_coder, seed_oss)

WHOLE_REPLY = (harmony, functionary_v32)  # the formats whose Reader reads a reply (its thinking, text, calls)


def format_of(template_source: Optional[str]) -> Any:
    """The call format a chat template teaches (a module, or a mistral.Flavour): harmony where it
    writes gpt-oss's channels, gemma4 where it writes Gemma 4's call tag, minicpm5 where it teaches
    <function name="..."> with <param name="...">, seed_oss where it writes <seed:tool_call>,
    qwen3_coder where it writes <function=...> and <parameter=...> blocks, functionary where it
    writes <function=...> with JSON arguments, functionary_v32 where it teaches >>>${recipient},
    glm where it writes <arg_key>, lfm2 where it lists its tools as LFM2's do, kimi where it writes
    Kimi K2's call section, invoke's flavour where it writes DeepSeek's DSML or MiniMax-M2's block,
    deepseek's flavour
    where it writes <｜tool▁calls▁begin｜>, json_calls' flavour where it writes that family's tag,
    mistral's flavour where it writes [TOOL_CALLS], else hermes."""
    source = template_source or ""
    if harmony.is_harmony(source):
        return harmony
    if gemma4.OPEN in source:
        return gemma4
    if minicpm5.is_minicpm5(source):
        return minicpm5
    if seed_oss.OPEN in source:
        return seed_oss
    if "<function=" in source and "<parameter=" in source:
        return qwen3_coder
    if functionary.is_functionary(source):
        return functionary
    if functionary_v32.is_functionary_v32(source):
        return functionary_v32
    if glm.KEY in source:
        return glm
    if lfm2.is_lfm2(source):
        return lfm2
    if kimi.is_kimi(source):
        return kimi
    invoke_flavour = invoke.flavour_of(source)
    if invoke_flavour is not None:
        return invoke_flavour
    if deepseek.OPEN in source:
        return deepseek.flavour_of(source)
    json_flavour = json_calls.flavour_of(source)
    if json_flavour is not None:
        return json_flavour
    if mistral.OPEN in source:
        return mistral.flavour_of(source)
    return hermes


def check_tools(tools: Any) -> List[Dict[str, Any]]:
    """OpenAI's tools list ([{"type": "function", "function": {"name", "description",
    "parameters"}}]); ValueError naming the first bad entry."""
    if not isinstance(tools, list):
        raise ValueError("'tools' must be a list of {\"type\": \"function\", \"function\": {...}} objects")
    for i, tool in enumerate(tools):
        fn = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
            raise ValueError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"tools[{i}].function needs a 'name'")
        params = fn.get("parameters")
        if params is not None and (not isinstance(params, dict) or params.get("type", "object") != "object"):
            raise ValueError(f"tools[{i}].function.parameters must be a JSON schema of type object")
    return tools


def call_arguments(messages: List[Dict[str, Any]], as_text: bool = False) -> List[Dict[str, Any]]:
    """Messages with an assistant's tool call arguments as objects (OpenAI sends a JSON string,
    which a template's tojson would quote again), or with as_text as JSON text (for a template
    that writes them as they are)."""
    out = []
    for m in messages:
        calls = m.get("tool_calls") if isinstance(m, dict) else None
        if isinstance(calls, list):
            m = dict(m, tool_calls=[_arguments(c, as_text) for c in calls])
        out.append(m)
    return out


def _arguments(call: Any, as_text: bool) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict):
        return call
    args = fn.get("arguments")
    if as_text and isinstance(args, dict):
        return dict(call, function=dict(fn, arguments=json.dumps(args, ensure_ascii=False)))
    if not as_text and isinstance(args, str):
        try:
            return dict(call, function=dict(fn, arguments=json.loads(args)))
        except (ValueError, RecursionError):
            pass
    return call
