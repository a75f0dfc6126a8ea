"""Tool calls as JSON after a family's own tag (specllama.tools.json_calls: Nemotron Nano 2's
<TOOLCALL>, Apriel's <tool_calls>, MiniMax-M1's lines, Command R7B's <|START_ACTION|>, Command R+'s
Action: block, Firefunction's
functools, GigaChat 3.1's <|function_call|>, Apertus' <|tools_prefix|>): the parser, the stream
against the whole text, the flavour each template gets, each flavour's forced grammar against what
its template writes for a past turn of calls (llama.cpp's grammar engine) and the parser reading it
back, and forced calls through the Python API, whole and streamed."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specllama import templates, tools
from specllama.tools import json_calls as jc
from test_tools import CLOCK, check_stream, forced_get_time
from test_tools_mistral import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
BY_TEMPLATE = {"NVIDIA-Nemotron-Nano-v2": jc.NEMOTRON, "unsloth-Apriel-1.5": jc.APRIEL, "MiniMax-M1": jc.MINIMAX,
               "CohereForAI-c4ai-command-r7b-12-2024-tool_use": jc.COMMAND,
               "CohereForAI-c4ai-command-r-plus-tool_use": jc.COMMAND_R_PLUS,
               "fireworks-ai-llama-3-firefunction-v2": jc.FIREFUNCTION, "GigaChat3.1-10B-A1.8B": jc.GIGACHAT,
               "Apertus-8B-Instruct": jc.APERTUS, "GigaChat3-10B-A1.8B": jc.GIGACHAT3}


def _calls(fmt, text):
    content, calls = fmt.parse(text)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("fmt, text, want", [
    (jc.NEMOTRON, '<TOOLCALL>[{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]</TOOLCALL>',
     (None, [("f", {"a": 1}), ("g", {})])),
    (jc.APRIEL, 'Let me see.\n<tool_calls>[{"name": "f", "arguments": {"a": 1}}]</tool_calls>',
     ("Let me see.", [("f", {"a": 1})])),
    (jc.MINIMAX, '<tool_calls>\n{"name": "f", "arguments": {"a": 1}}\n{"name": "g", "arguments": {"b": 2}}\n'
     '</tool_calls>', (None, [("f", {"a": 1}), ("g", {"b": 2})])),
    (jc.COMMAND, '<|START_ACTION|>[\n    {"tool_call_id": "0", "tool_name": "f", "parameters": {"a": 1}}\n]'
     '<|END_ACTION|>', (None, [("f", {"a": 1})])),
    (jc.FIREFUNCTION, ' functools[{"name": "f", "arguments": {"a": 1}}]', (None, [("f", {"a": 1})])),
    (jc.COMMAND_R_PLUS, 'Action:\n```json\n[{"tool_name": "special_function", "parameters": {"arg1": 1}}]\n```',
     (None, [("special_function", {"arg1": 1})])),  # (llama.cpp's case)
    (jc.COMMAND_R_PLUS, 'I will look it up.\nAction:\n```json\n[\n    {\n        "tool_name": "f",\n'
     '        "parameters": {}\n    },\n    {"tool_name": "g", "parameters": {"b": 2}}\n]```',
     ("I will look it up.", [("f", {}), ("g", {"b": 2})])),
    (jc.GIGACHAT, '<|function_call|>{"name": "f", "arguments": {"a": 1}}', (None, [("f", {"a": 1})])),
    (jc.APERTUS, '<|tools_prefix|>[{"f": {"a": 1}}, {"g": {}}]<|tools_suffix|>', (None, [("f", {"a": 1}), ("g", {})])),
    (jc.GRANITE, '<|tool_call|>[{"name": "f", "arguments": {"a": 1}}, {"arguments": {}, "name": "g"}]',
     (None, [("f", {"a": 1}), ("g", {})])),
    # (llama.cpp's GigaChat 3 cases)
    (jc.GIGACHAT3, '<|message_sep|>\n\nfunction call<|role_sep|>\n'
     '{"name": "special_function", "arguments": {"arg1": 1}}', (None, [("special_function", {"arg1": 1})])),
    (jc.GIGACHAT3, "Hello, world!\nWhat's up?<|message_sep|>\n\nfunction call<|role_sep|>\n"
     '{"name": "special_function", "arguments": {"arg1": 1}}',
     ("Hello, world!\nWhat's up?", [("special_function", {"arg1": 1})])),
    # arguments as a JSON string (as OpenAI's own), and what is not a call: cut off, items that are not calls
    (jc.NEMOTRON, '<TOOLCALL>[{"name": "f", "arguments": "{\\"a\\": 1}"}]</TOOLCALL>', (None, [("f", {"a": 1})])),
    (jc.NEMOTRON, '<TOOLCALL>[{"name": "f", "argu', ('<TOOLCALL>[{"name": "f", "argu', [])),
    (jc.NEMOTRON, '<TOOLCALL>[{"name": "f"}, 3]</TOOLCALL>', ('<TOOLCALL>[{"name": "f"}, 3]</TOOLCALL>', [])),
    (jc.APERTUS, '<|tools_prefix|>[{"f": {}, "g": {}}]', ('<|tools_prefix|>[{"f": {}, "g": {}}]', [])),
    (jc.APRIEL, "Hello, world!", ("Hello, world!", [])),
])
def test_calls_are_parsed_out_of_the_text(fmt, text, want):
    assert _calls(fmt, text) == want


@pytest.mark.parametrize("fmt", [jc.APRIEL, jc.FIREFUNCTION, jc.MINIMAX, jc.COMMAND_R_PLUS])
def test_a_stream_says_what_the_whole_text_says(fmt):
    rng = random.Random(9)
    pieces = [fmt.open, fmt.close or "]", "<", "[", "]", '{"name": "f", "arguments": {"a": 1}}', ", ", "\n", "Hi "]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(10)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(fmt, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])])


GRANITE33 = TEMPLATES / "ibm-granite-granite-3.3-2B-Instruct.jinja"


def test_each_template_gets_its_flavour():
    for name, fmt in {**BY_TEMPLATE, GRANITE33.stem: jc.GRANITE}.items():
        assert tools.format_of((TEMPLATES / f"{name}.jinja").read_text()) is fmt, name
    assert jc.flavour_of((TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text()) is None


@pytest.mark.parametrize("text, thought", [  # llama.cpp's Command R7B cases with reasoning_format deepseek
    ("<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
     '    {"tool_call_id": "0", "tool_name": "special_function", "parameters": {"arg1": 1}}\n]<|END_ACTION|>',
     "I'm\nthinking"),
    ("<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n"
     '    {"tool_call_id": "0", "tool_name": "special_function", "parameters": {"arg1": 1}}\n]<|END_ACTION|>', None),
])
def test_command_r7b_thinks_in_its_own_markup_then_calls(text, thought):
    """Command R7B's thinking between <|START_THINKING|> and <|END_THINKING|> is reasoning, whole
    and streamed; the call after it is read. Its template asks for that markup, and opens no
    thinking in the prompt when thinking is on (llama-server's default)."""
    from specllama import reasoning

    source = (TEMPLATES / "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja").read_text()
    markup = reasoning.template_markup(source)
    assert markup == ("<|START_THINKING|>", "<|END_THINKING|>")
    got, rest = reasoning.split(text)
    assert got == thought and _calls(jc.COMMAND, rest) == (None, [("special_function", {"arg1": 1})])
    s = reasoning.StreamSplitter()
    pieces = [p for k in range(0, len(text), 7) for p in s.feed(text[k:k + 7])] + s.finish()
    assert "".join(t for k, t in pieces if k == reasoning.REASONING) == (thought or "")
    assert "".join(t for k, t in pieces if k == reasoning.CONTENT) == rest
    prompt = templates.render_jinja(source, [{"role": "user", "content": "Hi"}], True, "", "",
                                    **templates.llama_cpp_variables(source, {}))
    assert reasoning.opened_by(prompt) is None and not prompt.endswith("<|END_THINKING|>")


USER = "What-is-the-weather?"  # (longer than any generated city, so found only where the user wrote it)


def _template_calls(name, calls):
    """The text a template writes for a past turn of calls (name, arguments), from its flavour's tag."""
    fmt = BY_TEMPLATE[name]
    msgs = [{"role": "user", "content": USER},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": str(i), "type": "function", "function": {"name": n, "arguments": a}}
                for i, (n, a) in enumerate(calls)]}]
    text = templates.render_jinja((TEMPLATES / f"{name}.jinja").read_text(), msgs, False, "", "",
                                  tools=[WEATHER, CLOCK])
    start = text.rindex(fmt.open, 0, text.index(calls[0][0] + '"', text.rindex(USER)))
    if fmt is jc.COMMAND_R_PLUS:  # (its closing tag recurs in the system prompt after the calls)
        _, end = json.JSONDecoder().raw_decode(text, start + len(fmt.open))
        return text[start:text.index(fmt.close, end) + len(fmt.close)]
    if fmt.close:
        return text[start:text.rindex(fmt.close) + len(fmt.close)]
    _, end = json.JSONDecoder().raw_decode(text, start + len(fmt.open))  # (no closing tag: up to the JSON's end)
    return text[start:end]


_CALLS = st.lists(st.one_of(
    st.tuples(st.just("get_weather"), st.builds(lambda c, d: {"city": c, "days": d},
                                                st.text(st.characters(min_codepoint=32, max_codepoint=126),
                                                        max_size=12), st.integers(1, 14))),
    st.tuples(st.just("get_time"), st.builds(lambda z, h: {"zone": z, "hours": h}, st.sampled_from(["UTC", "CET"]),
                                             st.integers(-99, 99)))), min_size=1, max_size=3)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS, st.sampled_from(sorted(BY_TEMPLATE)))
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls, name):
    """Random calls written as each template writes a past turn of calls: its flavour's forced
    grammar admits the text (llama.cpp's engine), the one-call grammar only where there is one (for
    GigaChat's, which write one call a turn, the first), and the parser reads them back."""
    fmt = BY_TEMPLATE[name]
    calls = calls[:1] if fmt in (jc.GIGACHAT, jc.GIGACHAT3) else calls
    text = _template_calls(name, calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(fmt.forced_grammar(checked), text), text
    assert grammar_text.admits(fmt.forced_grammar(checked, parallel=False), text) == (len(calls) == 1), text
    assert _calls(fmt, text) == (None, [(n, a) for n, a in calls])


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS)
def test_granites_grammar_admits_the_form_its_template_teaches(grammar_text, calls):
    """Granite 3.x's template writes no past calls; its system prompt teaches the form
    (<|tool_call|> followed by a JSON list): random calls in it, as the template's tojson lays out
    JSON, are admitted by the forced grammar (the one-call grammar only where there is one) and
    read back."""
    prompt = templates.render_jinja(GRANITE33.read_text(), [{"role": "user", "content": "Hi"}], True, "", "",
                                    tools=[CLOCK])
    assert "respond only with <|tool_call|> followed by a JSON list of tools used" in prompt
    text = "<|tool_call|>" + json.dumps([{"name": n, "arguments": a} for n, a in calls], ensure_ascii=False)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(jc.GRANITE.forced_grammar(checked), text), text
    assert grammar_text.admits(jc.GRANITE.forced_grammar(checked, parallel=False), text) == (len(calls) == 1), text
    assert _calls(jc.GRANITE, text) == (None, [(n, a) for n, a in calls])


CALL = '<TOOLCALL>[{"name": "get_time", "arguments": {"zone": "UTC", "hours": 3}}]</TOOLCALL>'


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace("UTC", "PST"), False),  # (not in the enum)
    (CALL.replace(', "hours": 3', ""), False),  # (a required key left out)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("Sure." + CALL, False),  # (forced: calls only)
    (CALL.replace("</TOOLCALL>", ""), False),  # (the closing tag)
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(jc.NEMOTRON.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


def test_command_r_plus_grammar_admits_llama_cpps_case(grammar_text):
    """Command R+'s form as llama.cpp's parser case writes it (the list on one line, a line break
    before the block's end), and not without the block's closing tag."""
    text = 'Action:\n```json\n[{"tool_name": "get_time", "parameters": {"zone": "UTC", "hours": 3}}]\n```'
    grammar = jc.COMMAND_R_PLUS.forced_grammar(tools.check_tools([CLOCK]))
    assert grammar_text.admits(grammar, text) and not grammar_text.admits(grammar, text[:-3])


def test_the_lazy_grammar_starts_at_the_tag():
    grammar, triggers = jc.COMMAND.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == [r"<\|START_ACTION\|>"] and grammar == jc.COMMAND.forced_grammar(tools.check_tools([CLOCK]))
    assert jc.FIREFUNCTION.lazy_grammar(tools.check_tools([CLOCK]))[1] == [" functools"]


@pytest.mark.parametrize("name", ["NVIDIA-Nemotron-Nano-v2", "Apertus-8B-Instruct", GRANITE33.stem,
                                  "CohereForAI-c4ai-command-r-plus-tool_use"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_flavour(call_decoder, name, stream):
    """The tiny pair under each template with a call forced: the reply is a call in the template's
    flavour, read back into tool_calls by the schema, and the next turn with the call and its result
    renders. (Asked for no reasoning format: the templates have a thinking mode, in which the
    grammar would let the tiny model think to max_tokens.)"""
    fmt = tools.format_of((TEMPLATES / f"{name}.jinja").read_text())
    forced_get_time(call_decoder, TEMPLATES / f"{name}.jinja", stream, fmt.open)
