"""Tool calls in LFM2's form (<|tool_call_start|>[name(key="value", n=3)]<|tool_call_end|>, Liquid's
LFM2 and LFM2.5 templates): the parser on llama.cpp's cases, the stream against the whole text,
the format each template gets, the forced grammar against what LFM2.5's template writes for a past
call (llama.cpp's grammar engine) and the parser reading it back, and forced calls through the
Python API and a real server with the openai client."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import reasoning, templates, tools
from specllama.tools import lfm2
from test_tools import CLOCK, check_stream, forced_get_time, openai_forced_call, template_server
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
LFM25, LFM25_MOE = TEMPLATES / "LFM2.5-Instruct.jinja", TEMPLATES / "LFM2.5-8B-A1B.jinja"
S, E = lfm2.OPEN, lfm2.CLOSE


def _calls(text):
    content, calls = lfm2.parse(text)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, want", [  # llama.cpp's tests/test-chat.cpp cases for the LFM2 templates
    ("Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
    (f"{S}[special_function(arg1=1)]{E}", (None, [("special_function", {"arg1": 1})])),
    (f'{S}[get_time(city="XYZCITY")]{E}', (None, [("get_time", {"city": "XYZCITY"})])),
    (f"{S}[toggle(enabled=True)]{E}", (None, [("toggle", {"enabled": True})])),
    (f"{S}[set_nullable(value=None)]{E}", (None, [("set_nullable", {"value": None})])),
    (f'{S}[set_config(config={{"enabled": True, "count": 3}})]{E}',
     (None, [("set_config", {"config": {"enabled": True, "count": 3}})])),
    (f'{S}[set_config(config={{"enabled": true, "note": null}})]{E}',
     (None, [("set_config", {"config": {"enabled": True, "note": None}})])),
    (f'{S}[Calendar.create_event(title="demo", participants=["Alice", "Bob"], '
     f'metadata={{"priority": "high", "reminder": true}})]{E}',
     (None, [("Calendar.create_event", {"title": "demo", "participants": ["Alice", "Bob"],
                                        "metadata": {"priority": "high", "reminder": True}})])),
    ("Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org).",
     ("Use this format: [link text](url). Example: [Wikipedia](https://www.wikipedia.org).", [])),
    (f'{S}[python(code="def hello():\\n    print(\'hey\')")]{E}',
     (None, [("python", {"code": "def hello():\n    print('hey')"})])),
    (f'{S}[python(code="First line\\nSecond line\\tindented")]{E}',
     (None, [("python", {"code": "First line\nSecond line\tindented"})])),
    (f'{S}[python(code="print(\\"hi\\")")]{E}', (None, [("python", {"code": 'print("hi")'})])),
    (f'Let me check the time.{S}[get_time(city="Paris")]{E}',
     ("Let me check the time.", [("get_time", {"city": "Paris"})])),
    (f"{S}[special_function(arg1=1), special_function_with_opt(arg1=1, arg2=2)]{E}",
     (None, [("special_function", {"arg1": 1}), ("special_function_with_opt", {"arg1": 1, "arg2": 2})])),
    (f"{S}[empty_args()]{E}", (None, [("empty_args", {})])),
    # and beyond them: a cut-off list, code that is not a call's literal, negative numbers
    (f"{S}[special_function(arg1=", (f"{S}[special_function(arg1=", [])),
    (f"{S}[f(x=__import__('os'))]{E}", (f"{S}[f(x=__import__('os'))]{E}", [])),
    (f"{S}[f(1)]{E}", (f"{S}[f(1)]{E}", [])),
    (f"{S}[f(x=-2.5, y=[1, -3])]{E}", (None, [("f", {"x": -2.5, "y": [1, -3]})])),
    (f"{S}[" + "[" * 5000 + f"]{E}", (f"{S}[" + "[" * 5000 + f"]{E}", [])),
])
def test_calls_are_parsed_out_of_the_text(text, want):
    assert _calls(text) == want


def test_a_stream_says_what_the_whole_text_says():
    rng = random.Random(6)
    pieces = [S, "<|tool_call_", "start|>", "[", "]", E, "f(", "x=1", ", ", ")", "Hi ", "<", "'a'"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(lfm2, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])], [CLOCK])


def test_each_template_gets_the_format():
    assert tools.format_of(LFM25.read_text()) is lfm2 and tools.format_of(LFM25_MOE.read_text()) is lfm2
    assert reasoning.template_markup(LFM25_MOE.read_text()) == ("<think>", "</think>")


def _template_calls(calls):
    """The text LFM2.5-8B-A1B's template writes for a past turn of calls (name, arguments)."""
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}]
    text = templates.render_jinja(LFM25_MOE.read_text(), msgs, False, "", "", tools=[WEATHER, CLOCK])
    return text[text.index(S):text.rindex(E) + len(E)]


# (keys in the schema's order beyond the required ones, as the grammar holds them; the template writes a
# string in single quotes as it stands, so one holds neither a quote nor a backslash)
_ARGS = st.builds(lambda city, days, more: {"city": city, "days": days, **more},
                  st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters="'\\"), max_size=12),
                  st.integers(1, 14),
                  st.fixed_dictionaries({}, optional={"units": st.sampled_from(["celsius", "fahrenheit"]),
                                                      "detailed": st.booleans(),
                                                      "tags": st.lists(st.sampled_from(["a", "b c"]), max_size=3)}))
_CALLS = st.lists(st.one_of(st.tuples(st.just("get_weather"), _ARGS),
                            st.tuples(st.just("get_time"), st.builds(lambda z, h: {"zone": z, "hours": h},
                                                                     st.sampled_from(["UTC", "CET"]),
                                                                     st.integers(-99, 99)))),
                  min_size=1, max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS)
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls):
    """Random calls written as LFM2.5-8B-A1B's template writes a past turn of calls: the forced
    grammar admits the text (llama.cpp's engine), the one-call grammar only where there is one, and
    the parser reads the calls back."""
    text = _template_calls(calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(lfm2.forced_grammar(checked), text), text
    assert grammar_text.admits(lfm2.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    assert _calls(text) == (None, [(n, a) for n, a in calls])


CALL = f'{S}[get_time(zone="UTC", hours=3)]{E}'


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace('"UTC"', "'CET'"), True),
    (f'{S}[get_time(hours=3, zone="UTC")]{E}', True),  # (required ones in any order)
    (CALL.replace("UTC", "PST"), False),  # (not in the enum)
    (CALL.replace("3", '"3"'), False),  # (not an integer)
    (f'{S}[get_time(zone="UTC")]{E}', False),  # (a required key left out)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("Sure." + CALL, False),  # (forced: calls only)
    (f'{S}[get_weather(city="Paris", days=2, detailed=True, note=None)]{E}', True),
    (f'{S}[get_weather(city="Paris", days=2,)]{E}', False),
    (f"{S}[get_weather(city='Paris', days=2, note='x')]{E}", True),  # (of a string's type or null: any literal)
    (f"{S}[get_weather(city='Paris', days=2, note=[1, {{'a': None}}])]{E}", True),
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(lfm2.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


def test_the_lazy_grammar_starts_at_the_tag():
    grammar, triggers = lfm2.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == [r"<\|tool_call_start\|>"] and grammar == lfm2.forced_grammar(tools.check_tools([CLOCK]))


@pytest.mark.parametrize("template", [LFM25, LFM25_MOE], ids=["lfm2.5", "lfm2.5-moe"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, template, stream):
    """The tiny pair under each template with a call forced: the reply is a list of one call in
    LFM2's form, read back into tool_calls by the schema, and the next turn with the calls and their
    results renders (LFM2.5-8B-A1B's template writes them back; the thinking a turn had reaches it
    as its thinking, as llama.cpp gives it). (LFM2.5-8B-A1B thinks in <think> first, where the
    grammar would let the tiny model think to max_tokens: asked for no reasoning format, the call
    comes at once.)"""
    _, args, prompt = forced_get_time(call_decoder, template, stream, S + "[get_time(", thought="It is CET.")
    assert isinstance(args["hours"], int)
    if template == LFM25_MOE:
        assert "<think>It is CET.</think>" + S + "[get_time(" in prompt


@pytest.fixture(scope="module")
def lfm2_server(tiny):
    with template_server(tiny, LFM25) as s:
        yield s


def test_the_openai_client_gets_calls(lfm2_server):
    """Through a real server with the openai client, under LFM2.5's template: a forced call comes
    back typed by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(lfm2_server.url)
