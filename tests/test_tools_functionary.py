"""Tool calls in Functionary v3.1's form (<function=name>{"key": value}</function>): the parser on
llama.cpp's cases, the stream against the whole text, the format the template gets, the forced
grammar against what the template writes for a past call (llama.cpp's grammar engine) and the
parser reading it back, and forced calls through the Python API and a real server with the openai
client."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import tools
from specllama.tools import functionary
from test_tools import (CLOCK, calls_strategy, check_stream, forced_get_time, openai_forced_call, template_calls,
                        template_server)
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
V31 = TEMPLATES / "meetkai-functionary-medium-v3.1.jinja"


def _calls(text):
    content, calls = functionary.parse(text)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, want", [
    # llama.cpp's tests/test-chat.cpp cases for Functionary v3.1
    ("Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
    ('<function=special_function>{"arg1": 1}</function>', (None, [("special_function", {"arg1": 1})])),
    # and beyond them: content before, several calls, a cut-off call, arguments that are no object
    ('Let me see.<function=f>{"a": [1, 2]}</function><function=g>{}</function>',
     ("Let me see.", [("f", {"a": [1, 2]}), ("g", {})])),
    ('<function=f>{"a": 1}', ('<function=f>{"a": 1}', [])),
    ('<function=f>[1]</function>', ('<function=f>[1]</function>', [])),
    ('<function=f> {"a": 1} </function>', (None, [("f", {"a": 1})])),
])
def test_calls_are_parsed_out_of_the_text(text, want):
    assert _calls(text) == want


def test_a_stream_says_what_the_whole_text_says():
    rng = random.Random(4)
    pieces = ["<function=", "<func", "tion=", "f>", '{"a": 1}', "{", "}", "</function>", "\n", "Hi ", "<"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(functionary, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])])


def test_the_template_gets_the_format():
    assert tools.format_of(V31.read_text()) is functionary
    for name in ("Qwen3-Coder", "ByteDance-Seed-OSS", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "Qwen-Qwen3.5-4B"):
        assert not functionary.is_functionary((TEMPLATES / f"{name}.jinja").read_text()), name


def _template_calls(calls):
    """The text the template writes for a past turn of calls (name, arguments)."""
    return template_calls(V31, calls, functionary.OPEN, functionary.CLOSE, "assistant<|end_header_id|>",
                          [WEATHER, CLOCK])


# calls whose arguments are JSON, any printable city (the JSON escapes what it must)
CALLS = calls_strategy(st.text(st.sampled_from([chr(c) for c in range(32, 127)]), max_size=12), ("units",))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(CALLS)
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls):
    """Random calls written as the template writes a past turn of calls: the forced grammar admits
    the text (llama.cpp's engine), the one-call grammar only where there is one, and the parser
    reads the calls back."""
    text = _template_calls(calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(functionary.forced_grammar(checked), text), text
    assert grammar_text.admits(functionary.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    assert _calls(text) == (None, [(n, a) for n, a in calls])


CALL = '<function=get_time>{"zone": "UTC", "hours": 3}</function>'


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace('"UTC"', '"PST"'), False),  # (not in the enum)
    (CALL.replace("3}", '"3"}'), False),  # (not an integer)
    ('<function=get_time>{"hours": 3}</function>', False),  # (required)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("Sure." + CALL, False),  # (forced: calls only)
    (CALL + "\n" + CALL, True),
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(functionary.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


def test_the_lazy_grammar_starts_at_the_tag():
    grammar, triggers = functionary.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == ["<function="] and grammar == functionary.forced_grammar(tools.check_tools([CLOCK]))


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, stream):
    """The tiny pair under the template with a call forced: the reply is a call in Functionary's
    form, read back into tool_calls, and the next turn with the call and its result renders it as
    the template writes calls."""
    _, args, prompt = forced_get_time(call_decoder, V31, stream, functionary.OPEN + "get_time>")
    assert isinstance(args["hours"], int)
    assert "<function=get_time>{" in prompt


@pytest.fixture(scope="module")
def functionary_server(tiny):
    with template_server(tiny, V31) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(functionary_server):
    """Through a real server with the openai client, under Functionary v3.1's template: a forced
    call comes back by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(functionary_server.url)
