"""Tool calls in DeepSeek's form (<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>...<｜tool▁call▁end｜>
<｜tool▁calls▁end｜>; DeepSeek-R1 and its distills with the arguments in a ```json block, V3.1 with
them plain): the parser on llama.cpp's cases, the stream against the whole text, the flavour each
template gets, the forced grammar against what each template writes for a past turn of calls
(llama.cpp's grammar engine) and the parser reading it back, and forced calls through the Python
API, whole and streamed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import templates, tools
from specllama.tools import deepseek
from test_tools import CLOCK, check_stream, forced_get_time
from test_tools_mistral import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
R1, V31 = TEMPLATES / "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", TEMPLATES / "deepseek-ai-DeepSeek-V3.1.jinja"
B, E = deepseek.OPEN, deepseek.CLOSE
C, CE, SEP = deepseek.CALL, deepseek.CALL_END, deepseek.SEP


def _calls(text):
    content, calls = deepseek.parse(text)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, want", [  # llama.cpp's tests/test-chat.cpp cases for DeepSeek R1's templates
    (f'{B}{C}function{SEP}special_function\n```json\n{{"arg1": 1}}```{CE}{E}',
     (None, [("special_function", {"arg1": 1})])),
    # and beyond them: V3.1's plain form, several calls, content first, cut off, not an object
    (f'{B}{C}special_function{SEP}{{"arg1": 1}}{CE}{E}', (None, [("special_function", {"arg1": 1})])),
    (f'{B}{C}function{SEP}f\n```json\n{{"a": 1}}\n```{CE}\n{C}function{SEP}g\n```json\n{{}}\n```{CE}{E}',
     (None, [("f", {"a": 1}), ("g", {})])),
    (f'Let me look.{B}{C}f{SEP}{{"a": 2}}{CE}{E}', ("Let me look.", [("f", {"a": 2})])),
    (f'{B}{C}f{SEP}{{"a": 2', (f'{B}{C}f{SEP}{{"a": 2', [])),
    (f'{B}{C}f{SEP}[1, 2]{CE}{E}', (f'{B}{C}f{SEP}[1, 2]{CE}{E}', [])),
    ("Hello, world!\nWhat's up?", ("Hello, world!\nWhat's up?", [])),
])
def test_calls_are_parsed_out_of_the_text(text, want):
    assert _calls(text) == want


def test_a_stream_says_what_the_whole_text_says():
    rng = random.Random(8)
    pieces = [B, E, C, CE, SEP, "<｜tool", "▁call", "function", "f", "\n```json\n", "```", '{"a": 1}', "Hi ", "\n"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(deepseek.PLAIN, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])])


def test_each_template_gets_its_flavour():
    assert tools.format_of(R1.read_text()) is deepseek.FENCED
    assert tools.format_of(V31.read_text()) is deepseek.PLAIN


def _template_calls(template, calls):
    """The text the template writes for a past turn of calls (name, arguments)."""
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}]
    text = templates.render_jinja(template.read_text(), msgs, False, "", "", tools=[WEATHER, CLOCK])
    return text[text.index(B):text.rindex(E) + len(E)]


_CALLS = st.lists(st.one_of(
    st.tuples(st.just("get_weather"), st.builds(lambda c, d: {"city": c, "days": d},
                                                st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                                        max_size=12), st.integers(1, 14))),
    st.tuples(st.just("get_time"), st.builds(lambda z, h: {"zone": z, "hours": h}, st.sampled_from(["UTC", "CET"]),
                                             st.integers(-99, 99)))), min_size=1, max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS, st.sampled_from([R1, V31]))
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls, template):
    """Random calls written as each template writes a past turn of calls: its flavour's forced
    grammar admits the text (llama.cpp's engine), the one-call grammar only where there is one, and
    the parser reads the calls back."""
    fmt = tools.format_of(template.read_text())
    text = _template_calls(template, calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(fmt.forced_grammar(checked), text), text
    assert grammar_text.admits(fmt.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    assert _calls(text) == (None, [(n, a) for n, a in calls])


CALL = f'{B}{C}get_time{SEP}{{"zone": "UTC", "hours": 3}}{CE}{E}'


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace("UTC", "PST"), False),  # (not in the enum)
    (CALL.replace(', "hours": 3', ""), False),  # (a required key left out)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("Sure." + CALL, False),  # (forced: calls only)
    (f'{B}{C}function{SEP}get_time\n```json\n{{"zone": "UTC", "hours": 3}}```{CE}{E}', False),  # (the other flavour)
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(deepseek.PLAIN.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


def test_the_lazy_grammar_starts_at_the_calls_tag():
    grammar, triggers = deepseek.FENCED.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == [B] and grammar == deepseek.FENCED.forced_grammar(tools.check_tools([CLOCK]))


@pytest.mark.parametrize("template", [R1, V31], ids=["r1-distill", "v3.1"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_flavour(call_decoder, template, stream):
    """The tiny pair under each template with a call forced: the reply is a call in the template's
    flavour, read back into tool_calls by the schema, and the next turn with the call and its result
    renders. (Both templates open the thinking in the prompt, where the grammar would let the tiny
    model think to max_tokens: asked for no reasoning format, the call comes at once.)"""
    starts = B + C + ("function" + SEP if template == R1 else "") + "get_time"
    _, _, prompt = forced_get_time(call_decoder, template, stream, starts)
    assert SEP in prompt
