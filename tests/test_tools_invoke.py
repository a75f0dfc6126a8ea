"""Tool calls as <invoke> blocks in a block of calls: DeepSeek V3.2's and V4's DSML markup
(<｜DSML｜parameter name="k" string="true|false">v</｜DSML｜parameter>) and MiniMax-M2's
(<minimax:tool_call><invoke name="f"><parameter name="k">v</parameter></invoke></minimax:tool_call>):
the parser on llama.cpp's cases, a block of calls that ends the thinking, the stream against the
whole text, the flavour each template gets, the forced grammar against what each template writes
for a past call (llama.cpp's grammar engine) and the parser reading it back typed, and forced calls
through the Python API and a real server with the openai client."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import gbnf, reasoning, tools
from specllama.tools import invoke
from test_tools import (CLOCK, calls_strategy, check_stream, forced_get_time, openai_forced_call, template_calls,
                        template_server)
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
FLAVOURS = {"deepseek-ai-DeepSeek-V3.2": invoke.DSML, "deepseek-ai-DeepSeek-V4": invoke.DSML_V4,
            "deepseek-ai-DeepSeek-V4-Flash-0731": invoke.DSML_V4, "MiniMax-M2": invoke.MINIMAX_M2}


def _tool(tool, **props):
    return {"type": "function", "function": {"name": tool, "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}


GIVEN = [_tool("special_function", arg1={"type": "integer"}), _tool("get_time", city={"type": "string"}),
         _tool("magic_int", ref={"type": "integer"}, name={"type": "string"}), _tool("amount", orig={"type": "number"}),
         _tool("toggle", enabled={"type": "boolean"}), _tool("todo_list", todos={"type": "array"}),
         _tool("set_config", config={"type": "object"}), _tool("empty_args")]


def _dsml(*invokes, block="function_calls"):
    """A DSML block of calls (name, [(key, string, value)]) as DeepSeek writes it."""
    body = "".join(f'<｜DSML｜invoke name="{n}">\n' + "".join(
        f'<｜DSML｜parameter name="{k}" string="{s}">{v}</｜DSML｜parameter>\n' for k, s, v in params)
        + "</｜DSML｜invoke>\n" for n, params in invokes)
    return f"<｜DSML｜{block}>\n{body}</｜DSML｜{block}>"


def _m2(*invokes):
    body = "".join(f'<invoke name="{n}">\n' + "".join(f'<parameter name="{k}">{v}</parameter>\n' for k, v in params)
                   + "</invoke>\n" for n, params in invokes)
    return f"<minimax:tool_call>\n{body}</minimax:tool_call>"


def _calls(fmt, text):
    content, calls = fmt.parse(text, GIVEN)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("fmt, text, want", [  # llama.cpp's tests/test-chat.cpp cases for V3.2 and MiniMax-M2
    (invoke.DSML, "Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
    (invoke.DSML, _dsml(("get_time", [("city", "true", "Tokyo")])), (None, [("get_time", {"city": "Tokyo"})])),
    (invoke.DSML, _dsml(("special_function", [("arg1", "false", "1")])), (None, [("special_function", {"arg1": 1})])),
    (invoke.DSML, _dsml(("get_time", [("city", "true", "Paris")]), ("get_weather", [("city", "true", "Paris")])),
     (None, [("get_time", {"city": "Paris"}), ("get_weather", {"city": "Paris"})])),
    (invoke.DSML, "Let me call the function.\n\n" + _dsml(("special_function", [("arg1", "false", "1")])),
     ("Let me call the function.", [("special_function", {"arg1": 1})])),
    (invoke.DSML, _dsml(("magic_int", [("ref", "false", "-14")])), (None, [("magic_int", {"ref": -14})])),
    (invoke.DSML, _dsml(("amount", [("orig", "false", "3.14")])), (None, [("amount", {"orig": 3.14})])),
    (invoke.DSML, _dsml(("toggle", [("enabled", "false", "true")])), (None, [("toggle", {"enabled": True})])),
    (invoke.DSML, _dsml(("todo_list", [("todos", "false", '["buy milk","walk dog"]')])),
     (None, [("todo_list", {"todos": ["buy milk", "walk dog"]})])),
    (invoke.DSML, _dsml(("set_config", [("config", "false", '{"theme":"dark","level":2}')])),
     (None, [("set_config", {"config": {"theme": "dark", "level": 2}})])),
    (invoke.DSML, _dsml(("magic_int", [("ref", "false", "42"), ("name", "true", "foo bar")])),
     (None, [("magic_int", {"ref": 42, "name": "foo bar"})])),
    (invoke.DSML_V4, _dsml(("special_function", [("arg1", "false", "1")]), block="tool_calls"),
     (None, [("special_function", {"arg1": 1})])),
    (invoke.MINIMAX_M2, _m2(("empty_args", [])), (None, [("empty_args", {})])),
    (invoke.MINIMAX_M2, _m2(("special_function", [("arg1", "1")])), (None, [("special_function", {"arg1": 1})])),
    # and beyond them: the attribute says what the value is; a value typed by its schema where no
    # attribute says; a block or a call cut off; V3.2's block under V4's flavour
    (invoke.DSML, _dsml(("get_time", [("city", "true", "3")])), (None, [("get_time", {"city": "3"})])),
    (invoke.DSML, _dsml(("special_function", [("arg1", "true", "1")])), (None, [("special_function", {"arg1": "1"})])),
    (invoke.DSML, _dsml(("get_time", [("city", "false", '"Tokyo"')])), (None, [("get_time", {"city": "Tokyo"})])),
    (invoke.MINIMAX_M2, _m2(("get_time", [("city", "3")])), (None, [("get_time", {"city": "3"})])),
    (invoke.MINIMAX_M2, _m2(("magic_int", [("ref", "-2"), ("name", "a <b> c")])),
     (None, [("magic_int", {"ref": -2, "name": "a <b> c"})])),
    (invoke.DSML, _dsml(("special_function", [("arg1", "false", "1")]))[:-5],
     (_dsml(("special_function", [("arg1", "false", "1")]))[:-5], [])),
    (invoke.MINIMAX_M2, _m2(("special_function", [("arg1", "1")])).replace("</invoke>", ""),
     (_m2(("special_function", [("arg1", "1")])).replace("</invoke>", ""), [])),
    (invoke.DSML_V4, _dsml(("special_function", [("arg1", "false", "1")])),
     (_dsml(("special_function", [("arg1", "false", "1")])), [])),
])
def test_calls_are_parsed_out_of_the_text(fmt, text, want):
    assert _calls(fmt, text) == want


@pytest.mark.parametrize("text, thought", [  # (llama.cpp's V3.2 cases, the prompt having opened the thinking)
    ("Let me check the time</think>\n\n" + _dsml(("get_time", [("city", "true", "Tokyo")])), "Let me check the time"),
    ("Let me check the time\n\n" + _dsml(("get_time", [("city", "true", "Tokyo")])), "Let me check the time"),
])
def test_a_block_of_calls_ends_deepseeks_thinking(text, thought):
    """DeepSeek's thinking ends at its closing tag or at a block of calls (as llama.cpp reads it);
    without the flavour's tags (negative control) a block inside the thinking stays there.
    MiniMax-M2's calls come after its thinking closes."""
    got, rest = reasoning.split(text, True, invoke.DSML.ENDS_THINKING)
    assert got == thought and _calls(invoke.DSML, rest) == (None, [("get_time", {"city": "Tokyo"})])
    if "</think>" not in text:
        assert reasoning.split(text, True) == (text.strip(), "")
    assert invoke.MINIMAX_M2.ENDS_THINKING == ()


@pytest.mark.parametrize("fmt", [invoke.DSML, invoke.MINIMAX_M2])
def test_a_stream_says_what_the_whole_text_says(fmt):
    rng = random.Random(7)
    pieces = [fmt.open, fmt.close, fmt.invoke, 'special_function">', fmt.param, 'arg1">', 'arg1" string="false">',
              "1", fmt.param_end, fmt.invoke_end, "\n", "Hi ", "<", fmt.open[:5]]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(14)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(fmt, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])], GIVEN)


def test_the_templates_get_their_flavours():
    for name, fmt in FLAVOURS.items():
        assert tools.format_of((TEMPLATES / f"{name}.jinja").read_text()) is fmt, name
    others = [p for p in TEMPLATES.glob("*.jinja") if p.stem not in FLAVOURS]
    assert not any(invoke.flavour_of(p.read_text()) for p in others)


def _template_calls(name, calls):
    """The text a template writes for a past turn of calls (name, arguments)."""
    fmt = FLAVOURS[name]
    turn = "]~b]ai" if fmt is invoke.MINIMAX_M2 else "<｜Assistant｜>"
    return template_calls(TEMPLATES / f"{name}.jinja", calls, fmt.open, fmt.close, turn, [WEATHER, CLOCK])


_CITIES = st.text(st.sampled_from([chr(c) for c in range(32, 127)] + ["\n", "é"]), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(FLAVOURS)), calls_strategy(_CITIES.filter(lambda t: "</" not in t)))
def test_the_grammar_admits_what_the_templates_write_and_the_parser_reads_it_back(grammar_text, name, calls):
    """Random calls written as each template writes a past turn of calls (a text value as it
    stands, others as JSON): the forced grammar admits the text (llama.cpp's engine), the one-call
    grammar only where there is one, and the parser reads the calls back, each value typed."""
    fmt, text = FLAVOURS[name], _template_calls(name, calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(fmt.forced_grammar(checked), text), text
    assert grammar_text.admits(fmt.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    content, read = fmt.parse(text, checked)
    assert content is None and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in read] == calls


DSML_CALL = _dsml(("get_time", [("zone", "true", "UTC"), ("hours", "false", "3")]))
M2_CALL = _m2(("get_time", [("zone", "UTC"), ("hours", "3")]))


@pytest.mark.parametrize("fmt, text, admitted", [
    (invoke.DSML, DSML_CALL, True),
    (invoke.DSML, DSML_CALL.replace(">UTC<", ">PST<"), False),  # (not in the enum)
    (invoke.DSML, DSML_CALL.replace(">3<", ">three<"), False),  # (not an integer)
    (invoke.DSML, DSML_CALL.replace('"zone" string="true"', '"zone" string="false"'), False),  # (a string's is true)
    (invoke.DSML, DSML_CALL.replace('"hours" string="false"', '"hours" string="true"'), False),
    (invoke.DSML, _dsml(("get_time", [("hours", "false", "3")])), False),  # (required)
    (invoke.DSML, _dsml(("get_time", [("hours", "false", "3"), ("zone", "true", "CET")])), True),  # (any order)
    (invoke.DSML, "Sure." + DSML_CALL, False),  # (forced: calls only)
    (invoke.DSML, DSML_CALL.replace("function_calls", "tool_calls"), False),  # (V4's block)
    (invoke.DSML_V4, DSML_CALL.replace("function_calls", "tool_calls"), True),
    (invoke.MINIMAX_M2, M2_CALL, True),
    (invoke.MINIMAX_M2, M2_CALL.replace(">3<", ">three<"), False),
    (invoke.MINIMAX_M2, M2_CALL.replace("get_time", "get_date"), False),  # (no such tool)
    (invoke.MINIMAX_M2, M2_CALL.replace("\n", ""), True),  # (no whitespace between the tags)
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, fmt, text, admitted):
    assert grammar_text.admits(fmt.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


@pytest.mark.parametrize("fmt, call", [(invoke.DSML, DSML_CALL), (invoke.MINIMAX_M2, M2_CALL)])
def test_the_lazy_grammar_starts_at_the_block(grammar_text, fmt, call):
    grammar, triggers = fmt.lazy_grammar(tools.check_tools([CLOCK]))
    assert grammar == fmt.forced_grammar(tools.check_tools([CLOCK]))
    text = "Let me look.\n" + call
    m = re.search(triggers[0], text)
    assert len(triggers) == 1 and m.start() == len("Let me look.\n") and grammar_text.admits(grammar, text[m.start():])


@pytest.mark.parametrize("text, admitted, admitted_without", [
    ("Need to look.\n" + DSML_CALL, True, False),
    ("Need to look.\n</think>\n\n" + DSML_CALL, True, True),
    ("Need to look.</think>No call.", False, False),
])
def test_a_forced_call_may_follow_deepseeks_thinking_without_its_closing_tag(grammar_text, text, admitted,
                                                                              admitted_without):
    """DeepSeek's forced call after an opened thinking block may end the thinking itself.
    Negative control: without the block's tag, the thinking must close before it."""
    def forced(calls):
        grammar = gbnf.renamed(invoke.DSML.forced_grammar(tools.check_tools([CLOCK])), "d-")
        rules, start = reasoning.grammar_after_thinking(grammar, "d-root", reasoning.MARKUPS[0], True, calls)
        return f"root ::= {start}\n{rules}"

    assert grammar_text.admits(forced(invoke.DSML.ENDS_THINKING), text) == admitted
    assert grammar_text.admits(forced(()), text) == admitted_without


@pytest.mark.parametrize("name", ["deepseek-ai-DeepSeek-V3.2", "MiniMax-M2"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, name, stream):
    """The tiny pair under the template with a call forced: the reply is a block of calls in the
    flavour's form, read back typed by the schema, and the next turn with the call and its result
    renders the call as the template writes calls."""
    fmt = FLAVOURS[name]
    _, args, prompt = forced_get_time(call_decoder, TEMPLATES / f"{name}.jinja", stream, fmt.open)
    assert isinstance(args["hours"], int)
    attr = ' string="true"' if fmt.string_attr else ""
    assert f'{fmt.param}zone"{attr}>{args["zone"]}' in prompt


@pytest.fixture(scope="module")
def minimax_server(tiny):
    template = TEMPLATES / "MiniMax-M2.jinja"
    with template_server(tiny, template) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(minimax_server):
    """Through a real server with the openai client, under MiniMax-M2's template: a forced call
    comes back typed by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(minimax_server.url, {"reasoning_format": "none"})
