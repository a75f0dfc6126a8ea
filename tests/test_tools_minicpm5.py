"""Tool calls in MiniCPM5's form (<function name="f"><param name="k">v</param></function>, a text
value in a CDATA block where it holds "<", "&" or a line break): the parser on llama.cpp's cases,
the stream against the whole text, the format the template gets, the forced grammar against what
the template writes for a past call (llama.cpp's grammar engine) and the parser reading it back
typed, and forced calls through the Python API and a real server with the openai client."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import reasoning, tools
from specllama.tools import minicpm5
from test_tools import (CLOCK, calls_strategy, check_stream, forced_get_time, openai_forced_call, template_calls,
                        template_server)
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
MINICPM5 = TEMPLATES / "openbmb-MiniCPM5-1B.jinja"
PYTHON = {"type": "function", "function": {"name": "python", "parameters": {
    "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}
HTML = {"type": "function", "function": {"name": "html", "parameters": {
    "type": "object", "properties": {"markup": {"type": "string"}}, "required": ["markup"]}}}
EMPTY = {"type": "function", "function": {"name": "empty_args", "parameters": {"type": "object", "properties": {}}}}
SPECIAL = {"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}}


def _calls(text, given=(PYTHON, HTML, EMPTY, SPECIAL)):
    content, calls = minicpm5.parse(text, list(given))
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, want", [  # llama.cpp's tests/test-chat.cpp cases for MiniCPM5
    ("Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
    ("<function name=\"python\"><param name=\"code\">print('Hello, World!')</param></function>",
     (None, [("python", {"code": "print('Hello, World!')"})])),
    ('<function name="empty_args"></function>', (None, [("empty_args", {})])),
    ('<function name="html"><param name="markup"><![CDATA[<a href="/x">hi</a> </param>]]></param></function>',
     (None, [("html", {"markup": '<a href="/x">hi</a> </param>'})])),
    ("<function name=\"python\"><param name=\"code\">print('x')</param></function>\n"
     "<function name=\"python\"><param name=\"code\">print('y')</param></function>",
     (None, [("python", {"code": "print('x')"}), ("python", {"code": "print('y')"})])),
    # and beyond them: content before a call, typed values, a cut-off call or CDATA block
    ('Let me run it.\n<function name="special_function"><param name="arg1">7</param></function>',
     ("Let me run it.", [("special_function", {"arg1": 7})])),
    ('<function name="special_function"><param name="arg1">x y</param></function>',
     (None, [("special_function", {"arg1": "x y"})])),
    ('<function name="special_function"><param name="arg1">1</param>',
     ('<function name="special_function"><param name="arg1">1</param>', [])),
    ('<function name="html"><param name="markup"><![CDATA[<b></param></function>',
     ('<function name="html"><param name="markup"><![CDATA[<b></param></function>', [])),
    ('<function name="python"><param name="code">1\n</param>\n</function>', (None, [("python", {"code": "1\n"})])),
    ('<function name="html"><param name="markup"><![CDATA[a]]>12345678</function>',  # (no </param> after the block)
     ('<function name="html"><param name="markup"><![CDATA[a]]>12345678</function>', [])),
])
def test_calls_are_parsed_out_of_the_text(text, want):
    assert _calls(text) == want


def test_thinking_then_a_call():
    """The reply's thinking up to </think>, then the call (llama.cpp's case)."""
    text = "I'm thinking</think><function name=\"python\"><param name=\"code\">print('hey')</param></function>"
    thought, rest = reasoning.split(text, opened=True)
    assert thought == "I'm thinking" and _calls(rest) == (None, [("python", {"code": "print('hey')"})])


def test_a_stream_says_what_the_whole_text_says():
    rng = random.Random(4)
    pieces = ['<function name="', "<func", 'tion name="', 'special_function">', '<param name="', 'arg1">', "1",
              "</param>", "</function>", "<![CDATA[", "]]>", "\n", "Hi ", "<"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(minicpm5, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])], [SPECIAL])


def test_the_template_gets_the_format():
    source = MINICPM5.read_text()
    assert tools.format_of(source) is minicpm5 and reasoning.template_markup(source) == ("<think>", "</think>")
    others = [p for p in TEMPLATES.glob("*.jinja") if p != MINICPM5]
    assert not any(minicpm5.is_minicpm5(p.read_text()) for p in others)


def _template_calls(calls):
    """The text the template writes for a past turn of calls (name, arguments)."""
    return template_calls(MINICPM5, calls, minicpm5.OPEN, minicpm5.CLOSE, "<|im_start|>assistant", [WEATHER, CLOCK])


# (a city any text, which the template wraps in CDATA where it holds "<", "&" or a line break)
_CITIES = st.text(st.sampled_from([chr(c) for c in range(32, 127)] + ["\n"]), min_size=1, max_size=12)
_CALLS = calls_strategy(_CITIES.filter(lambda t: "]]>" not in t and "</param>" not in t))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS)
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls):
    """Random calls written as the template writes a past turn of calls (text values with "<", "&"
    or line breaks in CDATA blocks, booleans as Python's True/False): the forced grammar admits the
    text (llama.cpp's engine), the one-call grammar only where there is one, and the parser reads
    the calls back, each value typed by its schema."""
    text = _template_calls(calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(minicpm5.forced_grammar(checked), text), text
    assert grammar_text.admits(minicpm5.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    assert _calls(text, checked) == (None, [(n, a) for n, a in calls])


CALL = '<function name="get_time"><param name="zone">UTC</param><param name="hours">3</param></function>'


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace(">UTC<", ">PST<"), False),  # (not in the enum)
    (CALL.replace(">3<", ">three<"), False),  # (not an integer)
    ('<function name="get_time"><param name="hours">3</param></function>', False),  # (required)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("Sure." + CALL, False),  # (forced: calls only)
    ('<function name="get_time">\n<param name="hours">3</param>\n<param name="zone">CET</param>\n</function>',
     True),  # (required ones in any order, whitespace between the tags)
    ('<function name="get_weather"><param name="city"><![CDATA[a</param>b]]></param><param name="days">2</param>'
     '</function>', True),  # (a CDATA block holds what would end the value)
    ('<function name="get_weather"><param name="city">a</param>b</param><param name="days">2</param></function>',
     False),
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(minicpm5.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


def test_the_lazy_grammar_starts_at_the_tag():
    grammar, triggers = minicpm5.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == [r'<function\ name="'] and grammar == minicpm5.forced_grammar(tools.check_tools([CLOCK]))


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, stream):
    """The tiny pair under the template with a call forced: the reply is a call in MiniCPM5's form,
    read back into tool_calls by the schema, and the next turn with the call and its result
    renders it as the template writes calls."""
    _, args, prompt = forced_get_time(call_decoder, MINICPM5, stream, minicpm5.OPEN + 'get_time">')
    assert isinstance(args["hours"], int)
    assert f'<param name="zone">{args["zone"]}</param>' in prompt


@pytest.fixture(scope="module")
def minicpm5_server(tiny):
    with template_server(tiny, MINICPM5) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(minicpm5_server):
    """Through a real server with the openai client, under MiniCPM5's template: a forced call comes
    back typed by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(minicpm5_server.url, {"reasoning_format": "none"})
