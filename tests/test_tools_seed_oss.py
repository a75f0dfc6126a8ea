"""Tool calls in ByteDance Seed-OSS's form (<seed:tool_call>, <function=f>, <parameter=k>v</parameter>
over lines) and its thinking (<seed:think> ... </seed:think>): the parser on llama.cpp's cases, the
stream against the whole text, the format and markup the template gets, the forced grammar against
what the template writes for a past call (llama.cpp's grammar engine) and the parser reading it
back typed, and forced calls through the Python API and a real server with the openai client."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import reasoning, tools
from specllama.tools import seed_oss
from test_tools import (CLOCK, calls_strategy, check_stream, forced_get_time, openai_forced_call, template_calls,
                        template_server)
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
SEED = TEMPLATES / "ByteDance-Seed-OSS.jinja"
SPECIAL = {"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}}
OPTIONAL = {"type": "function", "function": {"name": "special_function_with_opt", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}, "required": ["arg1"]}}}
TODO = {"type": "function", "function": {"name": "todo_list", "parameters": {"type": "object", "properties": {
    "todos": {"type": "array", "items": {"type": "object", "properties": {
        "item": {"type": "string"}, "selected": {"type": "boolean"}}}}}, "required": ["todos"]}}}
EDIT = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "properties": {
    "filename": {"type": "string"}, "oldString": {"type": "string"}, "newString": {"type": "string"}},
    "required": ["filename", "oldString", "newString"]}}}


def _calls(text, given=(SPECIAL, OPTIONAL, TODO, EDIT)):
    content, calls = seed_oss.parse(text, list(given))
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def _wrap(*calls):
    return "\n".join(f"<seed:tool_call>\n<function={name}>\n" + "".join(
        f"<parameter={k}>{v}</parameter>\n" for k, v in args) + "</function>\n</seed:tool_call>"
        for name, args in calls)


@pytest.mark.parametrize("text, want", [  # llama.cpp's tests/test-chat.cpp cases for Seed-OSS
    ("Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
    (_wrap(("special_function", [("arg1", "1")])), (None, [("special_function", {"arg1": 1})])),
    (_wrap(("special_function", [("arg1", "1")]), ("special_function_with_opt", [("arg1", "1"), ("arg2", "2")])),
     (None, [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})])),
    (_wrap(("todo_list", [("todos", '[{"item": "Check stuff", "selected": false}, '
                                    '{"item": "Prepare stuff", "selected": true}]')])),
     (None, [("todo_list", {"todos": [{"item": "Check stuff", "selected": False},
                                      {"item": "Prepare stuff", "selected": True}]})])),
    (_wrap(("edit", [("filename", "foo.cpp"), ("oldString", 'def foo(arg = "14"):\n    return arg + "bar"\n'),
                     ("newString", 'def foo(arg = "15"):\n    pass\n')])),
     (None, [("edit", {"filename": "foo.cpp", "oldString": 'def foo(arg = "14"):\n    return arg + "bar"\n',
                       "newString": 'def foo(arg = "15"):\n    pass\n'})])),
    # and beyond them: content before a call, a value of another type, cut-off calls, a bare block
    ("Let me look.\n" + _wrap(("special_function", [("arg1", "7")])),
     ("Let me look.", [("special_function", {"arg1": 7})])),
    (_wrap(("special_function", [("arg1", "x y")])), (None, [("special_function", {"arg1": "x y"})])),
    (_wrap(("special_function", [("arg1", "1")]))[:-len("</seed:tool_call>")],
     (_wrap(("special_function", [("arg1", "1")]))[:-len("</seed:tool_call>")], [])),
    ("<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1",
     ("<seed:tool_call>\n<function=special_function>\n<parameter=arg1>1", [])),
    ("<function=special_function>\n<parameter=arg1>1</parameter>\n</function>",  # (not without its tags)
     ("<function=special_function>\n<parameter=arg1>1</parameter>\n</function>", [])),
])
def test_calls_are_parsed_out_of_the_text(text, want):
    assert _calls(text) == want


@pytest.mark.parametrize("opened", [False, True])
def test_thinking_then_an_answer_whole_and_streamed(opened):
    """llama.cpp's case: the thinking between <seed:think> and </seed:think> is reasoning, the rest
    the answer; streamed in any steps alike (and where the prompt opened the thinking)."""
    text = ("" if opened else "<seed:think>") + "I'm thinking about the answer</seed:think>\nHello, world!"
    markup = reasoning.MARKUPS[3] if opened else False
    assert reasoning.split(text, markup) == ("I'm thinking about the answer", "Hello, world!")
    rng = random.Random(2)
    for _ in range(50):
        cuts = sorted(rng.sample(range(len(text) + 1), 5))
        s = reasoning.StreamSplitter(markup)
        pieces = [p for a, b in zip([0] + cuts, cuts + [len(text)]) for p in s.feed(text[a:b])] + s.finish()
        assert "".join(t for k, t in pieces if k == reasoning.REASONING) == "I'm thinking about the answer"
        assert "".join(t for k, t in pieces if k == reasoning.CONTENT) == "Hello, world!"


def test_a_stream_says_what_the_whole_text_says():
    rng = random.Random(4)
    pieces = ["<seed:tool_call>", "<seed:", "tool_call>", "\n", "<function=special_function>", "<parameter=arg1>",
              "1", "</parameter>", "</function>", "</seed:tool_call>", "Hi ", "<"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(14)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(seed_oss, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])], [SPECIAL])


def test_the_template_gets_the_format_and_the_markup():
    source = SEED.read_text()
    assert tools.format_of(source) is seed_oss and reasoning.template_markup(source) == reasoning.MARKUPS[3]
    others = [p for p in TEMPLATES.glob("*.jinja") if p != SEED]
    assert not any(seed_oss.OPEN in p.read_text() for p in others)
    assert tools.format_of((TEMPLATES / "Qwen3-Coder.jinja").read_text()).__name__.endswith("qwen3_coder")


def _template_calls(calls):
    """The text the template writes for a past turn of calls (name, arguments)."""
    return template_calls(SEED, calls, seed_oss.OPEN, seed_oss.CLOSE, "<seed:bos>assistant", [WEATHER, CLOCK])


# (a city any text without </parameter>, line breaks and all, as the template writes it as it is)
_CITIES = st.text(st.sampled_from([chr(c) for c in range(32, 127)] + ["\n"]), min_size=1, max_size=12)
_CALLS = calls_strategy(_CITIES.filter(lambda t: "</parameter>" not in t))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS)
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls):
    """Random calls written as the template writes a past turn of calls (values as they are,
    booleans as Python's True/False): the forced grammar admits the text (llama.cpp's engine), the
    one-call grammar only where there is one, and the parser reads the calls back, each value typed
    by its schema."""
    text = _template_calls(calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(seed_oss.forced_grammar(checked), text), text
    assert grammar_text.admits(seed_oss.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    assert _calls(text, checked) == (None, [(n, a) for n, a in calls])


CALL = _wrap(("get_time", [("zone", "UTC"), ("hours", "3")]))


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace(">UTC<", ">PST<"), False),  # (not in the enum)
    (CALL.replace(">3<", ">three<"), False),  # (not an integer)
    (_wrap(("get_time", [("hours", "3")])), False),  # (required)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("Sure." + CALL, False),  # (forced: calls only)
    (_wrap(("get_time", [("hours", "3"), ("zone", "CET")])), True),  # (required ones in any order)
    (CALL.replace("<seed:tool_call>", "<tool_call>").replace("</seed:tool_call>", "</tool_call>"), False),
    (_wrap(("get_weather", [("city", "a</parameter>b"), ("days", "2")])), False),  # (a value ends at the tag)
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(seed_oss.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


def test_the_lazy_grammar_starts_at_the_tag():
    grammar, triggers = seed_oss.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == [r"<seed:tool_call>"] and grammar == seed_oss.forced_grammar(tools.check_tools([CLOCK]))


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, stream):
    """The tiny pair under the template with a call forced: the reply is a call in Seed-OSS's form,
    read back into tool_calls by the schema, and the next turn with the call and its result
    renders it as the template writes calls."""
    _, args, prompt = forced_get_time(call_decoder, SEED, stream, seed_oss.OPEN + "\n<function=get_time>\n")
    assert isinstance(args["hours"], int)
    assert f'<parameter=zone>{args["zone"]}</parameter>' in prompt


@pytest.fixture(scope="module")
def seed_server(tiny):
    with template_server(tiny, SEED) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(seed_server):
    """Through a real server with the openai client, under Seed-OSS's template: a forced call comes
    back typed by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(seed_server.url, {"reasoning_format": "none"})
