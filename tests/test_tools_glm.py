"""Tool calls in GLM's form (<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>,
GLM-4.6's with line breaks, GLM-4.7-Flash's without): the parser on llama.cpp's cases, the stream
against the whole text, the format each template gets, the forced grammar against what each
template writes for a past call (llama.cpp's grammar engine) and the parser reading it back typed,
and forced calls through the Python API and a real server with the openai client."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import reasoning, tools
from specllama.tools import glm
from test_tools import (CLOCK, calls_strategy, check_stream, forced_get_time, openai_forced_call, template_calls,
                        template_server)
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
GLM46, GLM47 = TEMPLATES / "GLM-4.6.jinja", TEMPLATES / "GLM-4.7-Flash.jinja"
SPECIAL = {"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}}
OPTIONAL = {"type": "function", "function": {"name": "special_function_with_opt", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}, "arg2": {"type": "integer"}}, "required": ["arg1"]}}}
NO_ARGS = {"type": "function", "function": {"name": "read_file_diff_md", "parameters": {
    "type": "object", "properties": {"review_id": {"type": "string"}, "file_id": {"type": "string"}}}}}


def _calls(text, given=(SPECIAL, OPTIONAL, NO_ARGS)):
    content, calls = glm.parse(text, list(given))
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, want", [  # llama.cpp's tests/test-chat.cpp cases for GLM-4.6 and GLM-4.7-Flash
    ("<tool_call>special_function\n<arg_key>arg1</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
     (None, [("special_function", {"arg1": 1})])),
    ("<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>",
     (None, [("special_function", {"arg1": 1})])),
    ("<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>"
     "<tool_call>special_function_with_opt<arg_key>arg1</arg_key><arg_value>1</arg_value>"
     "<arg_key>arg2</arg_key><arg_value>2</arg_value></tool_call>",
     (None, [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})])),
    ("<tool_call>read_file_diff_md</tool_call>", (None, [("read_file_diff_md", {})])),
    ("Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
    # and beyond them: content before a call, a cut-off call, a value of another type, text values
    ("Let me look.\n<tool_call>special_function<arg_key>arg1</arg_key><arg_value>7</arg_value></tool_call>",
     ("Let me look.", [("special_function", {"arg1": 7})])),
    ("<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1",
     ("<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1", [])),
    ("<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value>",
     ("<tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value>", [])),
    ("<tool_call>special_function<arg_key>arg1</arg_key><arg_value>x y</arg_value></tool_call>",
     (None, [("special_function", {"arg1": "x y"})])),
    ("<tool_call>read_file_diff_md<arg_key>file_id</arg_key><arg_value>12</arg_value></tool_call>",
     (None, [("read_file_diff_md", {"file_id": "12"})])),
])
def test_calls_are_parsed_out_of_the_text(text, want):
    assert _calls(text) == want


def test_thinking_then_a_call():
    """GLM-4.7-Flash's prompt opens the thinking: the reply's thinking up to </think>, then the
    call (llama.cpp's case)."""
    text = "I'm\nthinking</think><tool_call>special_function<arg_key>arg1</arg_key><arg_value>1</arg_value></tool_call>"
    thought, rest = reasoning.split(text, opened=True)
    assert thought == "I'm\nthinking" and _calls(rest) == (None, [("special_function", {"arg1": 1})])


def test_a_stream_says_what_the_whole_text_says():
    rng = random.Random(4)
    pieces = ["<tool_call>", "<tool_", "call>", "special_function", "<arg_key>", "arg1", "</arg_key>", "<arg_value>",
              "1", "</arg_value>", "</tool_call>", "\n", "Hi ", "<"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(glm, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])], [SPECIAL])


def test_each_template_gets_the_format():
    assert tools.format_of(GLM46.read_text()) is glm and tools.format_of(GLM47.read_text()) is glm
    assert reasoning.template_markup(GLM47.read_text()) == ("<think>", "</think>")


def _template_calls(template, calls):
    """The text the template writes for a past turn of calls (name, arguments)."""
    return template_calls(template, calls, glm.OPEN, glm.CLOSE, "<|assistant|>", [WEATHER, CLOCK])


_CALLS = calls_strategy(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).filter(
    lambda t: "<" not in t and t.strip() == t and t))  # (a city as GLM's templates write it back unchanged)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS, st.sampled_from([GLM46, GLM47]))
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls, template):
    """Random calls written as each template writes a past turn of calls: the forced grammar
    admits the text (llama.cpp's engine), the one-call grammar only where there is one, and the
    parser reads the calls back, each value typed by its schema."""
    text = _template_calls(template, calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(glm.forced_grammar(checked), text), text
    assert grammar_text.admits(glm.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    assert _calls(text, checked) == (None, [(n, a) for n, a in calls])


CALL = "<tool_call>get_time<arg_key>zone</arg_key><arg_value>UTC</arg_value><arg_key>hours</arg_key>" \
       "<arg_value>3</arg_value></tool_call>"


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace("<arg_value>UTC", "<arg_value>PST"), False),  # (not in the enum)
    (CALL.replace("<arg_value>3", "<arg_value>three"), False),  # (not an integer)
    ("<tool_call>get_time<arg_key>zone</arg_key><arg_value>UTC</arg_value></tool_call>", False),  # (required)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("Sure." + CALL, False),  # (forced: calls only)
    ("<tool_call>get_time\n<arg_key>hours</arg_key>\n<arg_value>3</arg_value>\n<arg_key>zone</arg_key>\n"
     "<arg_value>CET</arg_value>\n</tool_call>", True),  # (required ones in any order)
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(glm.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


def test_the_lazy_grammar_starts_at_the_tag():
    grammar, triggers = glm.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == [r"<tool_call>"] and grammar == glm.forced_grammar(tools.check_tools([CLOCK]))


@pytest.mark.parametrize("template", [GLM46, GLM47], ids=["glm-4.6", "glm-4.7-flash"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, template, stream):
    """The tiny pair under each template with a call forced: the reply is a call in GLM's form,
    read back into tool_calls by the schema, and the next turn with the call and its result
    renders. (Both templates think in <think> first, and GLM-4.7-Flash's prompt opens it: there the
    grammar would let the tiny model think to max_tokens; asked for no reasoning format, the call
    comes at once.)"""
    _, args, prompt = forced_get_time(call_decoder, template, stream, glm.OPEN + "get_time")
    assert isinstance(args["hours"], int)
    assert "<arg_key>zone</arg_key>" in prompt


@pytest.fixture(scope="module")
def glm_server(tiny):
    with template_server(tiny, GLM46) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(glm_server):
    """Through a real server with the openai client, under GLM-4.6's template: a forced call comes
    back typed by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(glm_server.url, {"reasoning_format": "none"})
