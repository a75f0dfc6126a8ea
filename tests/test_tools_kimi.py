"""Tool calls in Kimi K2's form (<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0
<|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>): the parser on
llama.cpp's cases (the call's id the model's), a call that ends the thinking, the stream against the
whole text, the format the templates get, the forced grammar against what the templates write for a
past call (llama.cpp's grammar engine) and the parser reading it back, and forced calls through the
Python API and a real server with the openai client."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import gbnf, reasoning, tools
from specllama.tools import kimi
from test_tools import (CLOCK, calls_strategy, check_stream, forced_get_time, openai_forced_call, template_calls,
                        template_server)
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
KIMI = ["Kimi-K2-Instruct", "Kimi-K2-Thinking", "moonshotai-Kimi-K2"]
PYTHON = {"type": "function", "function": {"name": "python", "parameters": {
    "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}
SPECIAL = {"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}}
S, S_END = kimi.SECTION, kimi.SECTION_END


def _call(name, index, args, close=kimi.CLOSE):
    return f"{kimi.OPEN}functions.{name}:{index}{kimi.ARGS}{args}{close}"


def _calls(text):
    content, calls = kimi.parse(text, [PYTHON, SPECIAL])
    return content, [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, want", [  # llama.cpp's tests/test-chat.cpp cases for Kimi K2
    ("Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
    (S + _call("special_function", 0, '{"arg1": 1}') + S_END,
     (None, [("functions.special_function:0", "special_function", {"arg1": 1})])),
    ("Hello, world!\nWhat's up?" + S + _call("special_function", 0, '{"arg1": 1}') + S_END,
     ("Hello, world!\nWhat's up?", [("functions.special_function:0", "special_function", {"arg1": 1})])),
    (S + _call("special_function", 0, '{"arg1": 1}') + _call("python", 1, '{"code": "print(1)"}') + S_END,
     (None, [("functions.special_function:0", "special_function", {"arg1": 1}),
             ("functions.python:1", "python", {"code": "print(1)"})])),
    (S + _call("python", 0, '{"code": "def hello():\\n    print(\\"Hello, world!\\")\\n\\nhello()"}') + S_END,
     (None, [("functions.python:0", "python", {"code": 'def hello():\n    print("Hello, world!")\n\nhello()'})])),
    (S + _call("empty_args", 0, "{}") + S_END, (None, [("functions.empty_args:0", "empty_args", {})])),
    # no section's tags, no call's closing tag
    (_call("special_function", 0, '{"arg1": 1}', "") + _call("python", 1, '{"code": "x"}', ""),
     (None, [("functions.special_function:0", "special_function", {"arg1": 1}),
             ("functions.python:1", "python", {"code": "x"})])),
    # and beyond them: a cut-off call, an id that is not functions.NAME:INDEX, arguments not an object
    (S + kimi.OPEN + 'functions.special_function:0' + kimi.ARGS + '{"arg1": ',
     (S + kimi.OPEN + 'functions.special_function:0' + kimi.ARGS + '{"arg1": ', [])),
    (S + _call("special_function", "x", '{"arg1": 1}') + S_END, (S + _call("special_function", "x", '{"arg1": 1}')
                                                                  + S_END, [])),
    (_call("special_function", 0, "[1]"), (_call("special_function", 0, "[1]"), [])),
    ("Sure.\n" + S + "\n" + _call("python", 0, '{"code": "y"}') + "\n" + S_END,
     ("Sure.", [("functions.python:0", "python", {"code": "y"})])),
    ("Sure." + S + "x" + _call("python", 0, '{"code": "y"}'),
     ("Sure.", [("functions.python:0", "python", {"code": "y"})])),
])
def test_calls_are_parsed_out_of_the_text(text, want):
    assert _calls(text) == want


@pytest.mark.parametrize("text", [
    "<think>I need to call two functions</think>" + S + _call("special_function", 0, '{"arg1": 1}') + S_END,
    "<think>I need to call two functions" + S + _call("special_function", 0, '{"arg1": 1}') + S_END,
    "<think>I need to call two functions" + _call("special_function", 0, '{"arg1": 1}', ""),
])
def test_a_call_ends_the_thinking(text):
    """The thinking ends at its closing tag or at a call's section or call tag (llama.cpp's cases: the
    model may call from inside its thinking, with or without the section's tags); without the
    format's tags (negative control) a call inside the thinking stays there."""
    thought, rest = reasoning.split(text, False, kimi.ENDS_THINKING)
    assert thought == "I need to call two functions"
    assert _calls(rest) == (None, [("functions.special_function:0", "special_function", {"arg1": 1})])
    if "</think>" not in text:
        assert reasoning.split(text, False)[1] == ""


def test_a_stream_says_what_the_whole_text_says():
    rng = random.Random(6)
    pieces = [S, S_END, kimi.OPEN, kimi.ARGS, kimi.CLOSE, "functions.special_function:0", "functions.python:1",
              '{"arg1": 1}', "{", "}", "<|tool_call", "s_section_begin|>", "Hi ", "\n", "<"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(kimi, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])], [SPECIAL])


def test_the_templates_get_the_format():
    for name in KIMI:
        assert tools.format_of((TEMPLATES / f"{name}.jinja").read_text()) is kimi, name
    others = [p for p in TEMPLATES.glob("*.jinja") if p.stem not in KIMI]
    assert not any(kimi.is_kimi(p.read_text()) for p in others)


def _template_calls(name, calls):
    """The text a Kimi template writes for a past turn of calls (name, arguments)."""
    return template_calls(TEMPLATES / f"{name}.jinja", calls, S, S_END, "<|im_assistant|>", [WEATHER, CLOCK])


_CITIES = st.text(st.sampled_from([chr(c) for c in range(32, 127)] + ["\n", "é"]), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(KIMI), calls_strategy(_CITIES, ("units",)))
def test_the_grammar_admits_what_the_templates_write_and_the_parser_reads_it_back(grammar_text, name, calls):
    """Random calls written as each Kimi template writes a past turn of calls: the forced grammar
    admits the text (llama.cpp's engine), the one-call grammar only where there is one, and the
    parser reads the calls back with the ids the template wrote."""
    text = _template_calls(name, calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(kimi.forced_grammar(checked), text), text
    assert grammar_text.admits(kimi.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    content, read = kimi.parse(text, checked)
    assert content is None and [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in read] == calls
    assert [c["id"] for c in read] == [f"functions.{n}:{i}" for i, (n, _) in enumerate(calls)]


CALL = S + _call("get_time", 0, '{"zone": "UTC", "hours": 3}') + S_END


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace('"UTC"', '"PST"'), False),  # (not in the enum)
    (CALL.replace("3}", '"three"}'), False),  # (not an integer)
    (S + _call("get_time", 0, '{"hours": 3}') + S_END, False),  # (required)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    (CALL.replace(":0", ":"), False),  # (an id without its index)
    ("Sure." + CALL, False),  # (forced: calls only)
    (_call("get_time", 7, '{"zone": "CET", "hours": -2}', ""), True),  # (no section's nor closing tag)
    (S + _call("get_time", 0, '{"zone": "UTC", "hours": 3}') + _call("get_time", 1, '{"zone": "CET", "hours": 1}')
     + S_END, True),
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(kimi.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


@pytest.mark.parametrize("text", [
    "Let me look.\n" + CALL,
    "Let me look." + _call("get_time", 0, '{"zone": "CET", "hours": 1}'),  # (no section's tags)
])
def test_the_lazy_grammar_starts_at_either_tag(grammar_text, text):
    """The first trigger that matches (as llama.cpp's std::regex reads them) feeds the grammar the
    call from its tag on, which it admits; text before it stays free."""
    grammar, triggers = kimi.lazy_grammar(tools.check_tools([CLOCK]))
    assert grammar == kimi.forced_grammar(tools.check_tools([CLOCK]))
    start = min(m.start() for m in (re.search(t, text) for t in triggers) if m)
    assert text[:start] == "Let me look." + "\n" * text.startswith("Let me look.\n")
    assert grammar_text.admits(grammar, text[start:]) and not grammar_text.admits(grammar, text)


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, stream):
    """The tiny pair under moonshotai's template with a call forced: the reply is a call in Kimi's
    form, read back with the model's id and typed by the schema, and the next turn with the call
    and its result writes the result under that id, as the template writes a past call's."""
    call, args, prompt = forced_get_time(call_decoder, TEMPLATES / "moonshotai-Kimi-K2.jinja", stream, "<|tool_call")
    assert isinstance(args["hours"], int) and call["id"].startswith("functions.get_time:")
    assert f"## Return of {call['id']}" in prompt and f"{kimi.OPEN}functions.get_time:0{kimi.ARGS}" in prompt


@pytest.fixture(scope="module")
def kimi_server(tiny):
    template = TEMPLATES / "Kimi-K2-Instruct.jinja"
    with template_server(tiny, template) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(kimi_server):
    """Through a real server with the openai client, under Kimi K2's template: a forced call comes
    back typed by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(kimi_server.url, {"reasoning_format": "none"})


@pytest.mark.parametrize("text, admitted, admitted_without", [
    ("Need to look.\n" + CALL, True, False),
    ("Need to look." + _call("get_time", 0, '{"zone": "UTC", "hours": 3}'), True, False),  # (no section's tags)
    ("Need to look.\n</think>\n\n" + CALL, True, True),
    ("a " + kimi.OPEN + " b</think>" + CALL, False, True),  # (with the tags, a call follows the tag)
    ("Need to look.</think>No call.", False, False),
])
def test_a_forced_call_may_follow_the_thinking_without_its_closing_tag(grammar_text, text, admitted,
                                                                        admitted_without):
    """Kimi K2 Thinking's forced call after its opened thinking block: the call (with or without
    its section's tags) may end the thinking itself, as llama.cpp reads the reply. Negative control:
    without the call tags, the thinking must close before the call."""
    def forced(calls):
        grammar = gbnf.renamed(kimi.forced_grammar(tools.check_tools([CLOCK])), "k-")
        rules, start = reasoning.grammar_after_thinking(grammar, "k-root", reasoning.MARKUPS[0], True, calls)
        return f"root ::= {start}\n{rules}"

    assert grammar_text.admits(forced(kimi.ENDS_THINKING), text) == admitted
    assert grammar_text.admits(forced(()), text) == admitted_without
