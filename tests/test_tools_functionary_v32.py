"""Functionary v3.2's replies (>>>all then text, >>>name then a call's JSON arguments, the prompt
writing the first >>>): the reader on llama.cpp's cases and beyond, the stream against the whole
text, the format the template gets, the grammars (forced, lazy, a schema's answer) against what
the template writes and what they must refuse (llama.cpp's grammar engine), and through the Python
API and a real server: plain replies without the recipient line, forced calls, a schema's answer,
a continued message."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from specllama import completions, templates, tools
from specllama.tools import functionary_v32 as v32
from test_tools import ASK, CLOCK, forced_get_time, openai_forced_call, template_server
from test_tools_functionary import CALLS
from test_tools_qwen3_coder import WEATHER

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
V32 = TEMPLATES / "meetkai-functionary-medium-v3.2.jinja"
SPECIAL = {"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}}
HELLO = "Hello, world!\nWhat's up?"


def _read(text, given=(SPECIAL,), opened=None):
    thought, content, calls = v32.read(text, True, list(given) if given is not None else None, opened)
    assert thought is None
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, given, opened, want", [
    # llama.cpp's tests/test-chat.cpp cases for Functionary v3.2
    ("all\n" + HELLO, None, None, (HELLO, [])),
    ('special_function\n{"arg1": 1}', (SPECIAL,), None, ("", [("special_function", {"arg1": 1})])),
    ("world!\nWhat's up?", None, v32.ALL, ("world!\nWhat's up?", [])),  # (a continued message's rest)
    ('a moment.>>>special_function\n{"arg1": 1}', (SPECIAL,), v32.ALL,
     ("a moment.", [("special_function", {"arg1": 1})])),
    ('a moment.>>>special_function\n{"arg1": 1}', (SPECIAL,), None,  # (negative control: not continued)
     ('a moment.>>>special_function\n{"arg1": 1}', [])),
    # and beyond them: text then calls, several calls, >>> in the arguments, what is not a call
    ('all\nLet me see.>>>special_function\n{"arg1": 2}', (SPECIAL,), None,
     ("Let me see.", [("special_function", {"arg1": 2})])),
    ('special_function\n{"arg1": 1}>>>special_function\n{"arg1": 2}', (SPECIAL,), None,
     ("", [("special_function", {"arg1": 1}), ("special_function", {"arg1": 2})])),
    ('special_function\n{"arg1": 1, "s": "a>>>b"}', (SPECIAL,), None,
     ("", [("special_function", {"arg1": 1, "s": "a>>>b"})])),
    ("all\nIt is 3>>>2 in bits.", None, None, ("It is 3>>>2 in bits.", [])),  # (no tools: all text)
    ('special_function\n{"arg1": 1}', None, None, ('special_function\n{"arg1": 1}', [])),  # (no tools)
    ('get_date\n{"arg1": 1}', (SPECIAL,), None, ('get_date\n{"arg1": 1}', [])),  # (not a tool)
    ('all\nHi>>>get_date\n{}', (SPECIAL,), None, ("Hi>>>get_date\n{}", [])),
    ("special_function\n[1]", (SPECIAL,), None, ("special_function\n[1]", [])),  # (no object)
    ('special_function\n{"arg1": ', (SPECIAL,), None, ('special_function\n{"arg1": ', [])),  # (cut off)
    (HELLO, (SPECIAL,), None, (HELLO, [])),  # (no recipient line)
    ("all", None, None, ("", [])),
    ("", (SPECIAL,), None, ("", [])),
])
def test_replies_are_read_as_llama_cpp_reads_them(text, given, opened, want):
    assert _read(text, given, opened) == want


def test_parse_reads_the_calls_as_the_other_formats_do():
    text = 'all\nOne moment.>>>special_function\n{"arg1": 5}'
    content, calls = v32.parse(text, [SPECIAL])
    assert content == "One moment." and [c["function"]["name"] for c in calls] == ["special_function"]
    assert v32.parse("all\n" + HELLO, [SPECIAL]) == ("all\n" + HELLO, [])


PIECES = ["all", "\n", ">>>", ">", ">>", "special_function", "special", '{"arg1": 1}', "{", "}", '"a>>>b"', "Hi ",
          "get_date", " "]


def test_a_stream_says_what_the_whole_text_says():
    """The reader fed a reply in steps gives, joined, the whole reply's content and calls."""
    rng = random.Random(6)
    for _ in range(800):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(12)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(5, len(text) + 1)))
        given, opened = rng.choice([None, [SPECIAL]]), rng.choice([None, None, v32.ALL])
        r = v32.Reader(True, given, opened)
        pieces = [p for a, b in zip([0] + cuts, cuts + [len(text)]) for p in r.feed(text[a:b])]
        rest, calls = r.finish()
        _, content, want = v32.read(text, True, given, opened)
        assert "".join(t for _, t in pieces + rest) == content, text
        assert [c["function"]["arguments"] for c in calls] == [c["function"]["arguments"] for c in want], text


def test_the_template_gets_the_format():
    assert tools.format_of(V32.read_text()) is v32
    others = [p for p in TEMPLATES.glob("*.jinja") if p != V32]
    assert not [p.name for p in others if v32.is_functionary_v32(p.read_text())]


def _template_turn(calls):
    """The text the template writes for a past turn of calls (name, arguments) after the first >>>."""
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}]
    source = V32.read_text()
    text = templates.render_jinja(source, templates.template_messages(source, msgs), False, "", "",
                                  tools=[WEATHER, CLOCK])
    turn = text.rindex("assistant<|end_header_id|>\n\n>>>") + len("assistant<|end_header_id|>\n\n>>>")
    return text[turn:text.rindex("<|eot_id|>")]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(CALLS)
def test_the_grammar_admits_what_the_template_writes_and_the_reader_reads_it_back(grammar_text, calls):
    """Random calls written as the template writes a past turn of calls: the forced grammar admits
    the text (llama.cpp's engine), the one-call grammar only where there is one, and the reader
    reads the calls back."""
    text = _template_turn(calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(v32.forced_grammar(checked), text), text
    assert grammar_text.admits(v32.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    assert _read(text, [WEATHER, CLOCK]) == ("", [(n, a) for n, a in calls])


CALL = 'get_time\n{"zone": "UTC", "hours": 3}'


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace('"UTC"', '"PST"'), False),  # (not in the enum)
    (CALL.replace("3}", '"3"}'), False),  # (not an integer)
    ('get_time\n{"hours": 3}', False),  # (required)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ("all\nSure.>>>" + CALL, False),  # (forced: calls only)
    (CALL + ">>>" + CALL, True),
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(v32.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text) == admitted


@pytest.mark.parametrize("text, admitted, triggered", [
    (CALL, True, True),
    (CALL.replace("UTC", "PST"), False, True),
    ("all\nLet me check.>>>" + CALL, True, True),
    ("all\nLet me check.>>>" + CALL.replace("UTC", "PST"), False, True),
    ("all\nIt is noon.", True, False),
    ("all\nNo get_time\nhere.", True, False),
    ("all\nA >>>get_date\n{}", False, True),  # (held to get_time from the g on)
    ("all\nA >>>python\nprint(1)", True, False),
    ("aloha\n{}", True, False),
])
def test_the_lazy_grammar_starts_at_a_recipient_line_that_names_a_tool(grammar_text, text, admitted, triggered):
    """tool_choice "auto": the grammar starts where a recipient line (the reply's first, or one
    after >>>) can only name a tool, not all (from its first character that does not start all);
    from there the call follows the schema. A tool whose name starts as all does is told apart
    once the names differ."""
    gbnf, patterns = v32.lazy_grammar(tools.check_tools([CLOCK]))
    assert grammar_text.lazy_admits(gbnf, patterns, text) == (admitted, triggered)
    also = {"type": "function", "function": {"name": "alarm", "parameters": {"type": "object"}}}
    gbnf, patterns = v32.lazy_grammar(tools.check_tools([CLOCK, also]))
    assert grammar_text.lazy_admits(gbnf, patterns, "all\nHi") == (True, False)
    assert grammar_text.lazy_admits(gbnf, patterns, 'alarm\n{"at": 7}') == (True, True)
    assert grammar_text.lazy_admits(gbnf, patterns, "alarm\n[7]") == (False, True)


@pytest.mark.parametrize("text, admitted", [('all\n{"a": 1}', True), ('{"a": 1}', False), ('all\n{"a": "x"}', False),
                                            ('get_time\n{"a": 1}', False)])
def test_a_schemas_answer_is_a_message_to_all(grammar_text, text, admitted):
    from specllama import gbnf, schemas

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    grammar, root = v32.answer_grammar(gbnf.renamed(schemas.to_grammar(schema), "s-"), "s-root")
    assert grammar_text.admits(f"root ::= {root}\n" + grammar, text) == admitted


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_form(call_decoder, stream):
    """The tiny pair under the template with a call forced: the reply is a call in v3.2's form
    (after the prompt's >>>), read back into tool_calls, and the next turn with the call and its
    result renders it as the template writes calls."""
    _, args, prompt = forced_get_time(call_decoder, V32, stream, "get_time\n")
    assert isinstance(args["hours"], int)
    assert ">>>get_time\n{" in prompt


def test_an_auto_call_is_held_from_its_recipient_line(call_decoder):
    """tool_choice "auto": a reply whose recipient line starts as a tool's name does (the tiny model
    pushed to begin with g) is held from there to a call by the schema and comes back as the call;
    unpushed replies stay text. Negative control: the pushed replies without the grammar read as
    no call."""
    model = call_decoder.target_model
    g = model.tokenize("g", add_special=False, parse_special=False)[-1]
    req = completions.parse(dict(messages=ASK, tools=[CLOCK], temperature=0.9, max_tokens=80), "chat")
    tokens = completions.prompt_tokens(call_decoder, req, str(V32))
    for seed in range(4):
        for bias in ({}, {g: 30.0}):
            opts = completions.options_for(call_decoder, req, len(tokens))
            opts.seed, opts.logit_bias = seed, bias
            text = call_decoder.generate(tokens, opts).text
            _, _, calls = v32.read(text, True, [CLOCK])
            if bias:
                assert text.startswith("get_time\n") and len(calls) == 1, text
                assert json.loads(calls[0]["function"]["arguments"])["zone"] in ("UTC", "CET")
                opts.grammar, opts.grammar_trigger_patterns = "", []
                assert not v32.read(call_decoder.generate(tokens, opts).text, True, [CLOCK])[2]
            else:
                assert not calls, text


GRAMMAR = 'root ::= "all\\n" [a-z]{2,8} " " [a-z]{2,8}'


def test_a_plain_reply_comes_back_without_its_recipient_line(call_decoder):
    """Without tools, every reply opens with its recipient line (all); the message's content is the
    text after it, whole and streamed alike, with any reasoning format. Negative control: the text
    generated opens with the line."""
    fields = dict(chat_template=str(V32), grammar=GRAMMAR, temperature=1.0, max_tokens=40)
    for seed in range(3):
        out = call_decoder.create_chat_completion(ASK, seed=seed, return_tokens=True, **fields)["choices"][0]
        text = call_decoder.target_model.detokenize(out["tokens"])
        assert text.startswith("all\n") and out["message"]["content"] == text[len("all\n"):]
        none = call_decoder.create_chat_completion(ASK, seed=seed, reasoning_format="none", **fields)
        assert none["choices"][0]["message"]["content"] == out["message"]["content"]
        deltas = [c["choices"][0]["delta"] for c in call_decoder.create_chat_completion(ASK, seed=seed, stream=True,
                                                                                        **fields) if c["choices"]]
        assert "".join(d.get("content") or "" for d in deltas) == out["message"]["content"]


def test_a_schemas_answer_and_a_continued_message(call_decoder):
    """response_format with a JSON schema: the reply is a message to all by the schema, its content
    the JSON. A conversation that ends with an assistant's message is continued inside its message
    to all (the prompt ends with >>>all and the text), the reply the rest of the text."""
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    for seed in range(3):
        out = call_decoder.create_chat_completion(ASK, chat_template=str(V32), response_format=fmt, temperature=1.0,
                                                  seed=seed, max_tokens=60, return_tokens=True)["choices"][0]
        assert out["finish_reason"] == "stop" and isinstance(json.loads(out["message"]["content"])["a"], int)
        assert call_decoder.target_model.detokenize(out["tokens"]) == "all\n" + out["message"]["content"]
    msgs = ASK + [{"role": "assistant", "content": "It is"}]
    req = completions.parse(dict(messages=msgs), "chat")
    tokens = completions.prompt_tokens(call_decoder, req, str(V32))
    assert call_decoder.target_model.detokenize(tokens).endswith(">>>all\nIt is") and req.opened == v32.ALL
    assert req.thinking_open is None  # (no message of this format is thinking)
    grammar = 'root ::= " " [a-z]{2,8} ">>>" [a-z]{2,8}'
    out = call_decoder.create_chat_completion(msgs, chat_template=str(V32), grammar=grammar, temperature=1.0, seed=1,
                                              max_tokens=40, return_tokens=True)["choices"][0]
    assert out["message"]["content"] == call_decoder.target_model.detokenize(out["tokens"])  # (no tools: all text)


@pytest.fixture(scope="module")
def v32_server(tiny):
    with template_server(tiny, V32) as s:
        yield s


def test_the_openai_client_gets_a_call_and_sends_it_back(v32_server):
    """Through a real server with the openai client, under Functionary v3.2's template: a forced
    call comes back by the schema, whole and streamed alike, and the next turn is served."""
    openai_forced_call(v32_server.url)
