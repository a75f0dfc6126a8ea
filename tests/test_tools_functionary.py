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

from specllama import templates, tools
from specllama.tools import functionary
from test_server import running
from test_tools import ASK, CLOCK, check_stream, forced_get_time
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
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}]
    source = V31.read_text()
    text = templates.render_jinja(source, templates.template_messages(source, msgs), False, "", "",
                                  tools=[WEATHER, CLOCK])
    start = text.index(functionary.OPEN, text.rindex("assistant<|end_header_id|>"))
    return text[start:text.rindex(functionary.CLOSE) + len(functionary.CLOSE)]


# (keys in the schema's order, as the JSON schema converter holds them)
_ARGS = st.builds(lambda city, days, more: {"city": city, "days": days, **more},
                  st.text(st.sampled_from([chr(c) for c in range(32, 127)]), max_size=12), st.integers(1, 14),
                  st.fixed_dictionaries({}, optional={"units": st.sampled_from(["celsius", "fahrenheit"])}))
_CALLS = st.lists(st.one_of(st.tuples(st.just("get_weather"), _ARGS),
                            st.tuples(st.just("get_time"), st.builds(lambda z, h: {"zone": z, "hours": h},
                                                                     st.sampled_from(["UTC", "CET"]),
                                                                     st.integers(-99, 99)))),
                  min_size=1, max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS)
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
    with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "4096", "--chat-template", str(V31)]) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(functionary_server):
    """Through a real server with the openai client, under Functionary v3.1's template: a forced
    call comes back by the schema, whole and streamed alike, and the next turn is served."""
    from openai import OpenAI

    with OpenAI(base_url=functionary_server.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        fields = dict(model=client.models.list().data[0].id, messages=ASK, tools=[CLOCK], temperature=0.7, seed=5,
                      max_tokens=200, tool_choice="required", parallel_tool_calls=False)
        out = client.chat.completions.create(**fields)
        call = out.choices[0].message.tool_calls[0]
        assert out.choices[0].finish_reason == "tool_calls" and call.function.name == "get_time"
        assert isinstance(json.loads(call.function.arguments)["hours"], int)
        # whole and streamed alike: both without a draft, since past a few hundred positions (this
        # template's tools) batched and one-token logits part, and a seed's speculative replies with
        # it at a near tie (the draft lengths follow measured times)
        plain = dict(fields, extra_body={**fields.get("extra_body", {}), "speculative": False})
        whole = client.chat.completions.create(**plain).choices[0].message.tool_calls[0].function.arguments
        chunks = list(client.chat.completions.create(stream=True, **plain))
        assert [t.function.arguments for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []] == \
            [whole]
        messages = ASK + [out.choices[0].message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": call.id, "content": "12:00"}]
        again = client.chat.completions.create(**dict(fields, messages=messages, tool_choice="auto"))
        assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")
