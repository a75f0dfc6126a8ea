"""Tool calls in Gemma 4's format (<|tool_call>call:name{key:<|"|>text<|"|>}<tool_call|>): the
parser on llama.cpp's own test cases, its stream form against the whole-text form, the grammars
against llama.cpp's grammar engine and against what Gemma 4's own chat template writes for a call
(the grammar admits it, the parser reads back the arguments), schemas the notation's grammar
cannot follow refused, chi-square of sampling under an arguments grammar, and calls forced or left
to the model through the Python API and a real server with the openai client, with Gemma 4's
template served."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specllama
from specllama import RequestError, reasoning, templates, tools
from specllama.tools import gemma4
from test_server import running
from test_tools import ASK, CLOCK, check_stream, forced_call

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
GEMMA4 = TEMPLATES / "google-gemma-4-31B-it.jinja"
Q = '<|"|>'

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "Units": {"enum": ["celsius", "fahrenheit"]},
        "detailed": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                  "required": ["lat", "lon"]},
        "note": {"type": ["string", "null"]}},
        "required": ["city", "days"]}}}


def _args(text):
    content, calls = gemma4.parse(text)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, content, calls", [  # llama.cpp's tests/test-chat.cpp cases for Gemma 4
    (f"<|tool_call>call:get_time{{city:{Q}London{Q}}}<tool_call|>", None, [("get_time", {"city": "London"})]),
    (f"<|tool_call>call:get_time{{city:{Q}San Francisco{Q}}}<tool_call|>", None,
     [("get_time", {"city": "San Francisco"})]),
    ("<|tool_call>call:empty_args{}<tool_call|>", None, [("empty_args", {})]),
    (f"Hello, world!\nWhat's up?<|tool_call>call:get_time{{city:{Q}Paris{Q}}}<tool_call|>", "Hello, world!\nWhat's up?",
     [("get_time", {"city": "Paris"})]),
    (f"<|tool_call>call:get_time{{city:{Q}London{Q}}}<tool_call|><|tool_call>call:get_weather{{city:{Q}Paris{Q}}}"
     "<tool_call|>", None, [("get_time", {"city": "London"}), ("get_weather", {"city": "Paris"})]),
    ("<|tool_call>call:special_function{arg1:42}<tool_call|>", None, [("special_function", {"arg1": 42})]),
    ("<|tool_call>call:special_function{arg1:-7}<tool_call|>", None, [("special_function", {"arg1": -7})]),
    ("<|tool_call>call:amount{orig:3.14}<tool_call|>", None, [("amount", {"orig": 3.14})]),
    ("<|tool_call>call:toggle{enabled:true}<tool_call|>", None, [("toggle", {"enabled": True})]),
    ("<|tool_call>call:toggle{enabled:false}<tool_call|>", None, [("toggle", {"enabled": False})]),
    ("<|tool_call>call:set_nullable{value:null}<tool_call|>", None, [("set_nullable", {"value": None})]),
    (f"<|tool_call>call:todo_list{{todos:[{Q}buy milk{Q},{Q}walk dog{Q}]}}<tool_call|>", None,
     [("todo_list", {"todos": ["buy milk", "walk dog"]})]),
    (f"<|tool_call>call:set_config{{config:{{theme:{Q}dark{Q},count:3}}}}<tool_call|>", None,
     [("set_config", {"config": {"theme": "dark", "count": 3}})]),
    ("<|tool_call>call:todo_list{todos:[]}<tool_call|>", None, [("todo_list", {"todos": []})]),
    ("<|tool_call>call:set_config{config:{}}<tool_call|>", None, [("set_config", {"config": {}})]),
    ("<|tool_call>call:amount{orig:1.5e10}<tool_call|>", None, [("amount", {"orig": 1.5e10})]),
    # text that holds a comma, a brace or a colon; a key the model quotes; spaces; cut off after the object
    (f"<|tool_call>call:f{{a:{Q}x, y}}: z{Q}}}<tool_call|>", None, [("f", {"a": "x, y}: z"})]),
    (f"<|tool_call>call:f{{{Q}a{Q}:1, b: [1, 2]}}<tool_call|>", None, [("f", {"a": 1, "b": [1, 2]})]),
    ("<|tool_call>call:f{a:1}", None, [("f", {"a": 1})]),
    ("<|tool_call>call:f{a:1}<tool_call|> and more", None, [("f", {"a": 1})]),
    # what is no call stays content
    ("Hello", "Hello", []),
    ("<|tool_call>call:f{a:1", "<|tool_call>call:f{a:1", []),
    (f"<|tool_call>call:f{{a:{Q}open}}<tool_call|>", f"<|tool_call>call:f{{a:{Q}open}}<tool_call|>", []),
    ("<|tool_call>call:f{a:007}<tool_call|>", "<|tool_call>call:f{a:007}<tool_call|>", []),
    ("<|tool_call>call:f{a:1} and more", "<|tool_call>call:f{a:1} and more", []),
    ('<tool_call>{"name": "f", "arguments": {}}</tool_call>', '<tool_call>{"name": "f", "arguments": {}}</tool_call>',
     []),
])
def test_calls_are_parsed_out_of_the_text(text, content, calls):
    assert _args(text) == (content, calls)


def test_a_call_comes_back_in_openais_shape():
    content, calls = gemma4.parse("<|tool_call>call:get_time{zone:<|\"|>UTC<|\"|>,hours:3}<tool_call|>")
    assert content is None and len(calls) == 1
    call = calls[0]
    assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"]) and call["type"] == "function"
    assert call["function"] == {"name": "get_time", "arguments": '{"zone": "UTC", "hours": 3}'}  # (the keys as written)


_REPLIES = [f"Let me check.<|tool_call>call:get_time{{zone:{Q}UTC{Q},hours:3}}<tool_call|>",
            f"<|tool_call>call:a{{}}<tool_call|><|tool_call>call:b{{x:[1,{Q}<|tool_{Q}]}}<tool_call|>",
            "No call here, only a < and a <|tool_ca", "<|tool_call>call:broken{", "a <|tool_call", ""]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(_REPLIES), st.lists(st.integers(0, 80), max_size=8))
def test_a_stream_says_what_the_whole_text_says_however_it_is_cut(text, cuts):
    bounds = [0] + sorted(set(c for c in cuts if c <= len(text))) + [len(text)]
    check_stream(gemma4, text, [text[a:b] for a, b in zip(bounds, bounds[1:])])


def test_random_replies_parse_as_the_stream_reads_them():
    """Replies assembled at random from pieces of calls and text, cut into random steps."""
    rng = random.Random(7)
    pieces = ["Hi ", "<|tool_call>", "call:f", "{", "a:", Q, "x", "}", "<tool_call|>", ",", "1", "[", "]", " ", "<|"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        bounds = sorted({0, len(text)} | {rng.randrange(len(text) + 1) for _ in range(rng.randrange(6))})
        check_stream(gemma4, text, [text[a:b] for a, b in zip(bounds, bounds[1:])])


def test_the_stream_holds_back_from_the_call_only():
    s = gemma4.StreamSplitter()
    assert s.feed("Let me check. <|tool") == "Let me check. "
    assert s.feed("_call>call:get_time{zone:") == ""
    assert s.feed('<|"|>UTC<|"|>,hours:3}<tool_call|>') == ""
    rest, calls = s.finish()
    assert rest == "" and json.loads(calls[0]["function"]["arguments"]) == {"zone": "UTC", "hours": 3}
    s = gemma4.StreamSplitter()
    assert s.feed('{"name": "f", "arguments": {}}') == '{"name": "f", "arguments": {}}'  # (no bare calls here)


def test_the_template_decides_the_format():
    assert tools.format_of(GEMMA4.read_text()) is gemma4
    for name in ("Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct",
                 "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use"):
        assert tools.format_of((TEMPLATES / f"{name}.jinja").read_text()) is tools.hermes, name
    assert tools.format_of(None) is tools.hermes and tools.format_of("chatml") is tools.hermes


# --- the grammars ---------------------------------------------------------------------------------

def _template_call(name, arguments):
    """The text Gemma 4's chat template writes for a past call with these arguments."""
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": name, "arguments": arguments}}]}]
    text = templates.render_jinja(GEMMA4.read_text(), msgs, False, "", "", tools=[WEATHER])
    return text[text.index(gemma4.OPEN):text.index(gemma4.CLOSE) + len(gemma4.CLOSE)]


_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12).filter(lambda s: Q not in s)
_ARGS = st.fixed_dictionaries(
    {"city": _TEXT, "days": st.integers(1, 14)},
    optional={"Units": st.sampled_from(["celsius", "fahrenheit"]), "detailed": st.booleans(),
              "tags": st.lists(_TEXT, max_size=3),
              "where": st.fixed_dictionaries({"lat": st.floats(-90, 90), "lon": st.integers(-180, 180)}),
              "note": _TEXT})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_ARGS)
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, args):
    """Random arguments by WEATHER's schema, written as Gemma 4's template writes a past call: the
    forced grammar admits the text (llama.cpp's engine), and the parser gives back the arguments."""
    text = _template_call("get_weather", args)
    grammar = gemma4.forced_grammar(tools.check_tools([CLOCK, WEATHER]))
    assert grammar_text.admits(grammar, text), text
    assert _args(text) == (None, [("get_weather", args)])


_GOOD = f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:3}}<tool_call|>"


@pytest.mark.parametrize("text, admitted", [
    (_GOOD, True),
    (_GOOD + f"<|tool_call>call:get_time{{hours:1,zone:{Q}CET{Q}}}<tool_call|>", True),
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:3,Units:{Q}celsius{Q}}}<tool_call|>", True),  # (dictsort)
    (f"<|tool_call>call:get_weather{{Units:{Q}celsius{Q},city:{Q}Oslo{Q},days:3}}<tool_call|>", False),  # order
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:3,detailed:true,Units:{Q}kelvin{Q}}}<tool_call|>", False),
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:15}}<tool_call|>", False),  # maximum
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q}}}<tool_call|>", False),  # days required
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:3,wind:1}}<tool_call|>", False),  # no such key
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q}, days:3}}<tool_call|>", False),  # a space
    ("<|tool_call>call:get_weather{city:7,days:3}<tool_call|>", False),  # type
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:3,tags:[{Q}a{Q},{Q}b{Q},{Q}c{Q},{Q}d{Q}]}}<tool_call|>",
     False),  # maxItems
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:3,note:null,where:{{lat:1.5,lon:2}}}}<tool_call|>", True),
    (f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:3,where:{{lat:1.5}}}}<tool_call|>", False),
    (f"<|tool_call>call:get_weather{{city:{Q}a {Q} b{Q},days:3}}<tool_call|>", False),  # the mark ends the text
    (f"<|tool_call>call:get_weather{{city:{Q}<|\"{Q},days:3}}<tool_call|>", True),
    (f"<|tool_call>call:nope{{city:{Q}Oslo{Q},days:3}}<tool_call|>", False),
    ("Sure. " + _GOOD, False),
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    grammar = gemma4.forced_grammar(tools.check_tools([CLOCK, WEATHER]))
    assert grammar_text.admits(grammar, text) == admitted


def test_one_call_or_the_named_tool(grammar_text):
    checked = tools.check_tools([CLOCK, WEATHER])
    two = _GOOD + _GOOD
    assert grammar_text.admits(gemma4.forced_grammar(checked), two)
    assert not grammar_text.admits(gemma4.forced_grammar(checked, parallel=False), two)
    assert grammar_text.admits(gemma4.forced_grammar(checked, parallel=False), _GOOD)
    assert not grammar_text.admits(gemma4.forced_grammar(checked, "get_time"), _GOOD)
    with pytest.raises(ValueError, match="no tool is named"):
        gemma4.forced_grammar(checked, "nope")
    grammar, triggers = gemma4.lazy_grammar(checked)
    assert triggers == [re.escape("<|tool_call>")] and grammar == gemma4.forced_grammar(checked)


def test_schemas_of_every_kind(grammar_text):
    def admits(schema, text):
        return grammar_text.admits(gemma4.arguments_grammar(schema), text)

    ref = {"type": "object", "properties": {"p": {"$ref": "#/$defs/P"}}, "required": ["p"],
           "$defs": {"P": {"type": "object", "properties": {"x": {"type": "integer"}, "next": {"$ref": "#/$defs/P"}},
                           "required": ["x"]}}}
    assert admits(ref, "{p:{x:1}}") and admits(ref, "{p:{next:{x:2},x:1}}") and not admits(ref, "{p:{y:1}}")
    any_of = {"type": "object", "properties": {"v": {"anyOf": [{"type": "integer"}, {"type": "string"}]}}}
    assert admits(any_of, "{v:3}") and admits(any_of, f"{{v:{Q}3{Q}}}") and admits(any_of, "{}")
    assert not admits(any_of, "{v:true}")
    free = {"type": "object"}
    assert admits(free, f"{{a:[1,{{b:null}}],c:{Q}x{Q}}}") and not admits(free, "[1]")
    const = {"type": "object", "properties": {"k": {"const": {"b": [1, "x"], "A": True}}}, "required": ["k"]}
    assert admits(const, f"{{k:{{A:true,b:[1,{Q}x{Q}]}}}}") and not admits(const, f"{{k:{{b:[1,{Q}x{Q}],A:true}}}}")
    items = {"type": "object", "properties": {"l": {"type": "array", "items": {"type": "integer"}, "minItems": 2}}}
    assert admits(items, "{l:[1,2]}") and not admits(items, "{l:[1]}") and not admits(items, "{l:[]}")
    dated = {"type": "object", "properties": {"d": {"type": "string", "format": "date"},
                                              "t": {"type": "string", "format": "date-time"}}}
    assert admits(dated, f"{{d:{Q}2025-03-14{Q},t:{Q}2025-03-14T09:30:00Z{Q}}}")
    assert not admits(dated, f"{{d:{Q}tomorrow{Q}}}") and not admits(dated, f"{{d:{Q}2025-13-01{Q}}}")
    mapping = {"type": "object", "additionalProperties": {"type": "integer"}}
    assert admits(mapping, "{a:1,b:2}") and not admits(mapping, f"{{a:{Q}x{Q}}}")


@pytest.mark.parametrize("schema, where", [
    ({"type": "object", "properties": {"d": {"type": "string", "format": "email"}}},
     "'email' (at schema.properties.d)"),
    ({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a"}}}, "'pattern'"),
    ({"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}}, "'maxLength'"),
    ({"type": "object", "properties": {"s": {"allOf": [{"type": "string"}]}}}, "'allOf'"),
    ({"type": "object", "properties": {"s": {"$ref": "https://example.com/s.json"}}}, "$ref"),
    ({"type": "object", "properties": {"a": {}}, "additionalProperties": True}, "'additionalProperties'"),
    ({"type": "object", "properties": {"n": {"type": "number", "minimum": 0}}}, "'minimum'"),
    ({"type": "object", "properties": {"n": {"type": "decimal"}}}, "'decimal'"),
])
def test_schemas_the_notation_cannot_follow_are_refused_with_their_place(schema, where):
    tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
    with pytest.raises(ValueError, match=re.escape(where)):
        gemma4.forced_grammar([tool])


# --- through the Python API and a server ------------------------------------------------------------

@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_gemma4s_format(call_decoder, choice, stream):
    """The tiny pair under Gemma 4's template with a call forced: the reply is calls in Gemma 4's
    notation, read back into tool_calls whose arguments follow the schema. (With the reasoning
    format "none" the grammar holds from the first token: the tiny model would think at length.)"""
    fields = dict(tools=[WEATHER, CLOCK], tool_choice=choice, temperature=0.9, seed=3, max_tokens=120,
                  reasoning_format="none")
    calls, finish, message, text = forced_call(call_decoder, GEMMA4, stream, **fields)
    if text is not None:
        assert message["content"] is None
        assert re.match(r"<\|tool_call>call:get_\w+\{[^\n]*?\}<tool_call\|>", text), text  # Gemma 4's notation
    assert finish == "tool_calls" and calls
    for call in calls:
        args = json.loads(call["function"]["arguments"])
        if call["function"]["name"] == "get_time":
            assert args["zone"] in ("UTC", "CET") and isinstance(args["hours"], int) and set(args) == {"zone", "hours"}
        else:
            assert choice == "required" and isinstance(args["city"], str) and 1 <= args["days"] <= 14


def test_a_gemma4_request_gets_gemma4s_grammars(call_decoder):
    from specllama import completions

    def options(fields, template=GEMMA4):
        req = completions.parse(dict(fields, messages=ASK), "chat")
        tokens = completions.prompt_tokens(call_decoder, req, str(template))
        return req, completions.options_for(call_decoder, req, len(tokens))

    req, opts = options({"tools": [CLOCK]})
    assert req.tool_format is gemma4 and opts.grammar == gemma4.forced_grammar([CLOCK])
    assert list(opts.grammar_trigger_patterns) == [re.escape("<|tool_call>")]
    assert opts.grammar_thinking == "optional" and tuple(opts.grammar_thinking_tags) == reasoning.MARKUPS[1]
    req, opts = options({"tools": [CLOCK]}, TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja")
    assert req.tool_format is tools.hermes and "<tool_call>" in opts.grammar
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"d": {"type": "string", "pattern": "^[0-9]+$"}}}}}
    with pytest.raises(RequestError) as e:
        options({"tools": [bad], "tool_choice": "required"})
    assert e.value.param == "tools" and "'pattern'" in e.value.message
    _, opts = options({"tools": [bad]})  # "auto": the calls are left free
    assert not opts.grammar and not list(opts.grammar_trigger_patterns)


def test_after_a_turn_with_calls_results_and_text_the_reply_opens_a_model_turn(call_decoder):
    """Gemma 4's template closes a model turn that held calls, their results and text without
    opening another; the prompt then ends with a new model turn, as llama.cpp's chat code makes it.
    After results alone the model goes on in its turn."""
    call = {"id": "c0", "type": "function",
            "function": {"name": "get_time", "arguments": '{"zone": "UTC", "hours": 1}'}}
    done = ASK + [{"role": "assistant", "content": "Let me check.", "tool_calls": [call]},
                   {"role": "tool", "tool_call_id": "c0", "content": "10:00"}]
    text = call_decoder.apply_chat_template(done, True, str(GEMMA4), tools=[CLOCK])
    assert text.endswith("<tool_response|>Let me check.<turn|>\n<|turn>model\n")
    assert not call_decoder.apply_chat_template(done, False, str(GEMMA4),
                                                tools=[CLOCK]).endswith("<|turn>model\n")
    pending = done[:-2] + [dict(done[-2], content=None), done[-1]]
    text = call_decoder.apply_chat_template(pending, True, str(GEMMA4), tools=[CLOCK])
    assert text.endswith("<|tool_call>call:get_time{hours:1,zone:<|\"|>UTC<|\"|>}<tool_call|>"
                         "<|tool_response>response:get_time{value:<|\"|>10:00<|\"|>}<tool_response|>")


@pytest.fixture(scope="module")
def gemma4_server(tiny):
    """The tiny pair served with Gemma 4's template (and its reasoning format "none": the tiny model
    would think at length before a call)."""
    with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "2048", "--chat-template", str(GEMMA4),
                  "--reasoning-format", "none"]) as s:
        yield s


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_client_gets_gemma4_calls_from_the_server(gemma4_server, stream):
    from openai import OpenAI

    client = OpenAI(base_url=gemma4_server.url + "/v1", api_key="none")
    fields = dict(model=client.models.list().data[0].id, messages=ASK, tools=[CLOCK], tool_choice="required",
                  temperature=0.7, seed=5, max_tokens=100)
    if stream:
        calls, finish = {}, None
        for chunk in client.chat.completions.create(stream=True, **fields):
            for d in chunk.choices[0].delta.tool_calls or []:
                calls[d.index] = d.function
            finish = chunk.choices[0].finish_reason or finish
        functions = list(calls.values())
    else:
        out = client.chat.completions.create(**fields)
        functions, finish = [c.function for c in out.choices[0].message.tool_calls], out.choices[0].finish_reason
    assert finish == "tool_calls" and functions
    for fn in functions:
        args = json.loads(fn.arguments)
        assert fn.name == "get_time" and args["zone"] in ("UTC", "CET") and isinstance(args["hours"], int)


@pytest.mark.slow
def test_sampling_under_a_gemma4_arguments_grammar_follows_the_constrained_target(tiny):
    """The first two tokens of a value sampled under a grammar of Gemma 4's notation follow the
    target's distribution under that grammar (llama.cpp's sampler); negative control: the target
    without it. (A value, not a call's arguments: those start with a "{" the grammar forces.)"""
    from test_grammar import CHAIN, N, _marginals
    from test_sampling_end_to_end import _pvalue, first_two_tokens, pvalue_or_zero

    schema = {"anyOf": [{"type": "integer"}, {"type": "boolean"},
                        {"type": "object", "properties": {"a": {"enum": ["the", "cat"]}, "b": {"type": "integer"}}}]}
    gbnf = gemma4.arguments_grammar(schema)
    prompt = specllama.Model(tiny.target).tokenize("the cat")
    p1, p2 = _marginals(tiny.target, prompt, gbnf=gbnf)
    assert (p1 > 0).sum() >= 2 and (p2 > 0).sum() >= 3, "the grammar must leave a choice for this test to mean anything"
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, N, grammar=gbnf)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    assert pvalue_or_zero(seconds, _marginals(tiny.target, prompt, constrained=False)[1]) < 1e-6



def test_anthropics_client_gets_gemma4_calls_as_tool_use_blocks(gemma4_server):
    from anthropic import Anthropic

    tool = {"name": "get_time", "input_schema": CLOCK["function"]["parameters"]}
    with Anthropic(base_url=gemma4_server.url, api_key="none", max_retries=0, timeout=600) as client:
        m = client.messages.create(model="target_q4_1", max_tokens=100, messages=ASK, tools=[tool],
                                   tool_choice={"type": "tool", "name": "get_time"},
                                   extra_body={"seed": 2, "temperature": 0.7})
    uses = [b for b in m.content if b.type == "tool_use"]
    assert m.stop_reason == "tool_use" and uses
    for b in uses:
        assert b.name == "get_time" and b.input["zone"] in ("UTC", "CET") and isinstance(b.input["hours"], int)


@pytest.fixture(scope="module")
def call_tag_decoder(tmp_path_factory):
    """The tiny target and a perturbed draft with a word renamed as Gemma 4's call tag, one token
    rendered in the text, as in Gemma 4's vocabulary: (decoder, the tag's token id)."""
    from tiny_models import perturbed, random_weights, vocab, write_model

    d = tmp_path_factory.mktemp("call_tag")
    toks = vocab()
    tag = toks.index("\u2581hot")
    toks = vocab(rename={tag: gemma4.OPEN})
    w = random_weights(len(toks), seed=1)
    target = str(write_model(d / "target.gguf", toks, w, user_defined=[gemma4.OPEN]))
    draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), user_defined=[gemma4.OPEN]))
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048) as dec:
        yield dec, tag


def test_with_tool_choice_auto_a_call_is_held_to_the_schema_from_its_tag_on(call_tag_decoder):
    """tool_choice "auto" under Gemma 4's template, the call tag made likely by a logit bias: the
    text before the tag is free, and every reply that writes the tag goes on as a call by the
    schema (read back as tool_calls). Negative control: the same requests with tool_choice "none"
    write the tag and go on in no call's notation."""
    dec, tag = call_tag_decoder
    # (thinking off: with Gemma 4's thinking on, every one of these replies writes the tag, and the
    # text before a tag goes unchecked)
    fields = dict(tools=[CLOCK], temperature=1.0, max_tokens=150, logit_bias={str(tag): 8.0}, chat_template=str(GEMMA4),
                  chat_template_kwargs={"enable_thinking": False})
    tagged = free = 0
    for seed in range(24):
        out = dec.create_chat_completion(ASK, seed=seed, return_tokens=True, **fields)
        choice = out["choices"][0]
        text = dec.target_model.detokenize(choice["tokens"])
        if gemma4.OPEN not in text:
            free += 1
            assert "tool_calls" not in choice["message"]
            continue
        tagged += 1
        assert choice["finish_reason"] in ("tool_calls", "length"), text
        if choice["finish_reason"] == "tool_calls":
            for call in choice["message"]["tool_calls"]:
                args = json.loads(call["function"]["arguments"])
                assert call["function"]["name"] == "get_time" and args["zone"] in ("UTC", "CET")
        else:  # cut off inside the call: what was written is the start of one
            assert re.fullmatch(r"<\|tool_call>(c(a(l(l(:(g(e(t(_(t(i(m(e(\{.*)?)?)?)?)?)?)?)?)?)?)?)?)?)?",
                                text[text.index(gemma4.OPEN):], re.S), text
    assert tagged >= 4 and free >= 1, (tagged, free)
    unheld = 0
    for seed in range(24):
        out = dec.create_chat_completion(ASK, seed=seed, return_tokens=True, tool_choice="none", **fields)
        text = dec.target_model.detokenize(out["choices"][0]["tokens"])
        unheld += gemma4.OPEN in text and not text[text.index(gemma4.OPEN):].startswith(gemma4.OPEN + "call:get_time{")
    assert unheld >= 4
