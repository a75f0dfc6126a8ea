"""Tool calls in the XML form of the Qwen3-Coder and Qwen3.5 templates (<tool_call><function=name>
<parameter=key>value</parameter></function></tool_call>, over lines): the parser on llama.cpp's own
test cases, values typed by the tools' schemas; its stream form against the whole-text form; the
grammars against llama.cpp's grammar engine and against what both templates write for a call (the
grammar admits it, the parser reads back the arguments); calls forced through the Python API on
the tiny pair and through a real server, and left to the model (tool_choice auto) on the Qwen pair
with Qwen3-Coder's template; chi-square of sampling under a call grammar."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specllama
from specllama import RequestError, templates, tools
from specllama.tools import qwen3_coder as xml
from test_server import running
from test_tools import ASK, CLOCK, check_stream, forced_call

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
CODER, QWEN35 = TEMPLATES / "Qwen3-Coder.jinja", TEMPLATES / "Qwen-Qwen3.5-4B.jinja"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "units": {"enum": ["celsius", "fahrenheit"]},
        "detailed": {"type": "boolean"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                  "required": ["lat", "lon"]},
        "note": {"type": ["string", "null"]}},
        "required": ["city", "days"]}}}


def _call(name, *params):
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params)
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def _args(text, given=(WEATHER, CLOCK)):
    content, calls = xml.parse(text, list(given))
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, content, calls", [
    # llama.cpp's tests/test-chat.cpp cases for Qwen3-Coder
    ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
     None, [("get_weather", {"city": "Paris"})]),
    (_call("get_weather", ("city", "New York"), ("days", "3")), None,
     [("get_weather", {"city": "New York", "days": 3})]),
    ("I'll check.\n\n" + _call("get_time", ("zone", "UTC"), ("hours", "-2")), "I'll check.",
     [("get_time", {"zone": "UTC", "hours": -2})]),
    (_call("get_time", ("zone", "UTC"), ("hours", "1")) + "\n" + _call("get_weather", ("city", "Oslo")), None,
     [("get_time", {"zone": "UTC", "hours": 1}), ("get_weather", {"city": "Oslo"})]),
    # typed by the schema: text stays text (even when it reads as JSON), others are JSON
    (_call("get_weather", ("city", "42"), ("detailed", "true"), ("tags", '["a", "b"]'),
           ("where", '{"lat": 1, "lon": 2}')),
     None, [("get_weather", {"city": "42", "detailed": True, "tags": ["a", "b"], "where": {"lat": 1, "lon": 2}})]),
    (_call("get_weather", ("city", "line one\nline two"), ("detailed", "False"), ("note", "null")), None,
     [("get_weather", {"city": "line one\nline two", "detailed": False, "note": None})]),
    (_call("get_weather", ("note", "a note"), ("city", "")), None, [("get_weather", {"note": "a note", "city": ""})]),
    (_call("get_weather", ("note", "[]"), ("days", "2.5")), None, [("get_weather", {"note": "[]", "days": "2.5"})]),
    (_call("unknown_tool", ("x", "1"), ("y", "text")), None, [("unknown_tool", {"x": 1, "y": "text"})]),
    ("<tool_call>\n<function=f>\n</function>\n</tool_call>", None, [("f", {})]),
    ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>", None, [("f", {"a": 1})]),
    # the <tool_call> tag left out, as Qwen3-Coder (and Qwen2.5-Coder under its template) may write a call
    ("<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n<parameter=hours>\n0\n</parameter>\n</function>", None,
     [("get_time", {"zone": "UTC", "hours": 0})]),
    ("Sure.\n<function=f>\n</function>\n</tool_call>\n" + _call("g"), "Sure.", [("f", {}), ("g", {})]),
    ("#include <functional>", "#include <functional>", []),
    # what is no call stays content
    ("Hello", "Hello", []),
    ("<tool_call>\n<function=f>\n<parameter=a>\n1\n", "<tool_call>\n<function=f>\n<parameter=a>\n1\n", []),
    ("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n",
     "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n", []),
    ('<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>',
     '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>', []),
])
def test_calls_are_parsed_out_of_the_text(text, content, calls):
    assert _args(text) == (content, calls)


def test_random_replies_parse_as_the_stream_reads_them():
    """Replies assembled at random from pieces of calls and text, cut into random steps."""
    rng = random.Random(11)
    pieces = ["Hi ", "<tool_call>", "\n", "<function=get_time>", "<parameter=hours>", "<parameter=zone>", "UTC",
              "3", "</parameter>", "</function>", "</tool_call>", "<tool_", "<"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(16)))
        bounds = sorted({0, len(text)} | {rng.randrange(len(text) + 1) for _ in range(rng.randrange(6))})
        check_stream(xml, text, [text[a:b] for a, b in zip(bounds, bounds[1:])], [WEATHER, CLOCK])
    call = _call("get_time", ("zone", "UTC"), ("hours", "3"))
    head = "<tool_call>\n<function=get_time>"
    check_stream(xml, "Let me see. " + call, ["Let me see. <tool", head[5:], call[len(head):]], [WEATHER, CLOCK])


def test_the_template_decides_the_format():
    for path in (CODER, QWEN35):
        assert tools.format_of(path.read_text()) is xml, path
    for name in ("Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use"):
        assert tools.format_of((TEMPLATES / f"{name}.jinja").read_text()) is tools.hermes, name


# --- the grammars ---------------------------------------------------------------------------------

def _template_call(template, arguments):
    """The text the template writes for a past call to get_weather with these arguments."""
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]}]
    text = templates.render_jinja(template.read_text(), msgs, False, "", "", tools=[WEATHER])
    return text[text.rindex(xml.OPEN):text.rindex(xml.CLOSE) + len(xml.CLOSE)]


_TEXT = st.text(st.characters(min_codepoint=32, max_codepoint=126, include_characters="\n"), max_size=16)
_NUMBER = st.floats(-1e6, 1e6).map(lambda x: round(x, 4))  # (JSON grammars refuse an exponent such as 1e-05)


@st.composite
def _arguments(draw):
    """WEATHER's arguments, keys in a drawn order (the template writes them as given)."""
    args = {"city": draw(_TEXT), "days": draw(st.integers(1, 14))}
    optional = draw(st.fixed_dictionaries({}, optional={
        "units": st.sampled_from(["celsius", "fahrenheit"]), "detailed": st.booleans(),
        "tags": st.lists(_TEXT.filter(lambda s: '"' not in s and "\\" not in s and "\n" not in s), max_size=3),
        "where": st.tuples(_NUMBER, _NUMBER).map(lambda p: {"lat": p[0], "lon": p[1]}), "note": _TEXT}))
    order = draw(st.permutations(["city", "days"]))
    return {**{k: args[k] for k in order}, **optional}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_arguments(), st.sampled_from([CODER, QWEN35]))
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, args, template):
    """Random arguments by WEATHER's schema, the required ones in either order, written as Qwen3-
    Coder's and Qwen3.5's templates write a past call (booleans as Python's True and False): the
    forced grammar admits the text (llama.cpp's engine), and the parser gives back the arguments.
    (A text value that ends in a newline reads back without it: the format cannot tell.)"""
    args = dict(args, city=args["city"].rstrip("\n") + ".")
    if "note" in args:
        args["note"] = args["note"].rstrip("\n") + "."
    text = _template_call(template, args)
    assert grammar_text.admits(xml.forced_grammar(tools.check_tools([CLOCK, WEATHER])), text), text
    assert _args(text) == (None, [("get_weather", args)])


_GOOD = _call("get_weather", ("city", "Oslo"), ("days", "3"))


@pytest.mark.parametrize("text, admitted", [
    (_GOOD, True),
    (_call("get_weather", ("days", "3"), ("city", "Oslo")), True),  # required ones in any order
    (_GOOD + "\n" + _call("get_time", ("hours", "1"), ("zone", "CET")), True),
    (_call("get_weather", ("city", "Oslo"), ("days", "3"), ("units", "kelvin")), False),
    (_call("get_weather", ("city", "Oslo"), ("days", "15")), False),  # maximum
    (_call("get_weather", ("city", "Oslo")), False),  # days required
    (_call("get_weather", ("city", "Oslo"), ("days", "3"), ("wind", "1")), False),  # no such parameter
    (_call("get_weather", ("city", "Oslo"), ("units", "celsius"), ("days", "3")), False),  # an optional one first
    (_call("get_weather", ("city", "Oslo"), ("days", "three")), False),  # type
    (_call("get_weather", ("city", "Oslo"), ("days", "3"), ("detailed", "True")), True),
    (_call("get_weather", ("city", "Oslo"), ("days", "3"), ("detailed", "yes")), False),
    (_call("get_weather", ("city", "Oslo"), ("days", "3"), ("tags", '["a", "b", "c", "d"]')), False),  # maxItems
    (_call("get_weather", ("city", "Oslo"), ("days", "3"), ("where", '{"lat": 1.5, "lon": 2}'),
           ("note", "any\ntext")), True),
    (_call("get_weather", ("city", "Oslo"), ("days", "3"), ("where", '{"lat": 1.5}')), False),
    (_call("get_weather", ("city", "a\n</parameter>\nb"), ("days", "3")), False),  # the tag ends the text
    (_call("get_weather", ("city", "a\n</parameter>"), ("days", "3")), False),
    (_call("get_weather", ("city", "a</parameter>\n\n</parameter"), ("days", "3")), True),
    (_call("nope", ("city", "Oslo"), ("days", "3")), False),
    ("Sure. " + _GOOD, False),
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    grammar = xml.forced_grammar(tools.check_tools([CLOCK, WEATHER]))
    assert grammar_text.admits(grammar, text) == admitted


def test_one_call_or_the_named_tool(grammar_text):
    checked = tools.check_tools([CLOCK, WEATHER])
    two = _GOOD + "\n" + _GOOD
    assert grammar_text.admits(xml.forced_grammar(checked), two)
    assert not grammar_text.admits(xml.forced_grammar(checked, parallel=False), two)
    assert not grammar_text.admits(xml.forced_grammar(checked, "get_time"), _GOOD)
    with pytest.raises(ValueError, match="no tool is named"):
        xml.forced_grammar(checked, "nope")
    grammar, triggers = xml.lazy_grammar(checked)
    assert triggers == [re.escape(t) for t in ("<tool_call>", "<function=get_time>", "<function=get_weather>")]
    bare = _GOOD[len("<tool_call>\n"):-len("\n</tool_call>")]
    for text in (_GOOD, bare, bare + "\n</tool_call>", bare + "\n" + _GOOD, _GOOD + "\n" + _GOOD):
        assert grammar_text.admits(grammar, text), text
    assert not grammar_text.admits(grammar, _GOOD + "\n" + bare)  # (only the first may leave out its tags)
    assert not grammar_text.admits(xml.forced_grammar(checked), bare)


def test_string_formats(grammar_text):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "d": {"type": "string", "format": "date"}, "u": {"type": "string", "format": "uuid"}}}}}
    grammar = xml.forced_grammar([tool])
    assert grammar_text.admits(grammar, _call("f", ("d", "2025-03-14"), ("u", "123e4567-e89b-12d3-a456-426614174000")))
    assert not grammar_text.admits(grammar, _call("f", ("d", "next Friday")))
    assert not grammar_text.admits(grammar, _call("f", ("u", "123")))


def test_many_required_parameters_come_in_the_schemas_order(grammar_text):
    props = {f"p{i}": {"type": "integer"} for i in range(8)}
    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}
    grammar = xml.forced_grammar([tool])
    assert grammar_text.admits(grammar, _call("f", *[(f"p{i}", str(i)) for i in range(8)]))
    assert not grammar_text.admits(grammar, _call("f", *[(f"p{i}", str(i)) for i in [1, 0, 2, 3, 4, 5, 6, 7]]))


@pytest.mark.parametrize("schema, where", [
    ({"type": "string", "pattern": "^a"}, "'pattern'"),
    ({"type": "string", "format": "email"}, "'email' (at tools[0].function.parameters.properties.v)"),
    ({"type": "number", "minimum": 0}, "'minimum'"),
    ({"type": "array", "uniqueItems": True}, "'uniqueItems'"),
])
def test_schemas_the_grammar_cannot_follow_are_refused_with_their_place(schema, where):
    tool = {"type": "function", "function": {"name": "f",
                                             "parameters": {"type": "object", "properties": {"v": schema}}}}
    with pytest.raises(ValueError, match=re.escape(where)):
        xml.forced_grammar([tool])


# --- through the Python API and servers -----------------------------------------------------------

# a text value that reads as JSON: it must come back as text
ZONED = {"type": "function", "function": {"name": "get_time", "parameters": dict(
    CLOCK["function"]["parameters"], properties=dict(CLOCK["function"]["parameters"]["properties"],
                                                     zone={"type": "string", "enum": ["1", "2"]}))}}


@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_xml_form(call_decoder, stream):
    """The tiny pair under Qwen3-Coder's template with a call forced: the reply is calls in the XML
    form, read back into tool_calls whose arguments follow the schema, typed by it."""
    fields = dict(tools=[ZONED], tool_choice="required", temperature=0.9, seed=4, max_tokens=200)
    calls, finish, _, text = forced_call(call_decoder, CODER, stream, **fields)
    if text is not None:
        assert text.startswith("<tool_call>\n<function=get_time>\n<parameter="), text
    assert finish == "tool_calls" and calls
    for call in calls:
        args = json.loads(call["function"]["arguments"])
        assert call["function"]["name"] == "get_time" and set(args) == {"zone", "hours"}
        assert args["zone"] in ("1", "2") and isinstance(args["hours"], int)


def test_a_request_gets_the_templates_grammars(call_decoder):
    from specllama import completions

    def options(fields, template=CODER):
        req = completions.parse(dict(fields, messages=ASK), "chat")
        tokens = completions.prompt_tokens(call_decoder, req, str(template))
        return req, completions.options_for(call_decoder, req, len(tokens))

    req, opts = options({"tools": [CLOCK]})
    assert req.tool_format is xml and opts.grammar == xml.lazy_grammar([CLOCK])[0]
    assert list(opts.grammar_trigger_patterns) == [re.escape("<tool_call>"), re.escape("<function=get_time>")]
    req, opts = options({"tools": [CLOCK], "tool_choice": "required"}, QWEN35)  # (its prompt opens the thinking)
    assert req.tool_format is xml and req.thinking_open and xml.forced_grammar([CLOCK]) in opts.grammar
    bad = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"d": {"type": "string", "pattern": "^[0-9]+$"}}}}}
    with pytest.raises(RequestError) as e:
        options({"tools": [bad], "tool_choice": "required"})
    assert e.value.param == "tools" and "'pattern'" in e.value.message


@pytest.fixture(scope="module")
def coder_server(tiny):
    with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "2048", "--chat-template", str(CODER)]) as s:
        yield s


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_client_gets_xml_calls_from_the_server(coder_server, stream):
    from openai import OpenAI

    client = OpenAI(base_url=coder_server.url + "/v1", api_key="none")
    fields = dict(model=client.models.list().data[0].id, messages=ASK, tools=[CLOCK],
                  tool_choice={"type": "function", "function": {"name": "get_time"}},
                  temperature=0.7, seed=5, max_tokens=200, parallel_tool_calls=False)
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
    assert finish == "tool_calls" and len(functions) == 1
    args = json.loads(functions[0].arguments)
    assert functions[0].name == "get_time" and args["zone"] in ("UTC", "CET") and isinstance(args["hours"], int)


@pytest.mark.slow
def test_sampling_under_a_call_grammar_follows_the_constrained_target(tiny):
    """The first two tokens of a parameter's value sampled under the grammar of the XML form follow
    the target's distribution under that grammar (llama.cpp's sampler); negative control: the
    target without it. (From the value on: what comes before it the grammar forces.)"""
    from test_grammar import CHAIN, N, _marginals
    from test_sampling_end_to_end import _pvalue, first_two_tokens, pvalue_or_zero

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "v": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}}, "required": ["v"]}}}
    grammar = xml.forced_grammar([tool])
    value = re.search(r'^(xml-r\d+) ::= "<parameter=v>\\n" (\S+)', grammar, re.M).group(2)
    gbnf = grammar.replace("root ::=", "calls ::=", 1) + f"root ::= {value}\n"
    prompt = specllama.Model(tiny.target).tokenize("the cat")
    p1, p2 = _marginals(tiny.target, prompt, gbnf=gbnf)
    assert (p1 > 0).sum() >= 2 and (p2 > 0).sum() >= 3, "the grammar must leave a choice for this test to mean anything"
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, N, grammar=gbnf)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    assert pvalue_or_zero(seconds, _marginals(tiny.target, prompt, constrained=False)[1]) < 1e-6


@pytest.mark.real_pair
@pytest.mark.slow
def test_the_qwen_pair_calls_in_the_xml_form_under_qwen3_coders_template(qwen_decoder):
    """The Qwen2.5-Coder pair under Qwen3-Coder's template with tool_choice auto, greedy: it writes
    the call as <function=get_weather> without the <tool_call> tag, the lazy grammar holds it to
    the schema from there, and it comes back as a call with its values typed. Negative control:
    the same prompt without the grammar writes a call that does not parse (a parameter spelled
    <parameter>detailed>)."""
    messages = [{"role": "user", "content": "What's the weather in Paris for the next 3 days?"}]
    out = qwen_decoder.create_chat_completion(messages, chat_template=str(CODER), tools=[WEATHER, CLOCK],
                                              temperature=0, max_tokens=200)
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    args = json.loads(call["function"]["arguments"])
    assert call["function"]["name"] == "get_weather" and args["city"].lower() == "paris" and args["days"] == 3
    assert set(args) <= set(WEATHER["function"]["parameters"]["properties"])
    assert args.get("units", "celsius") in ("celsius", "fahrenheit") and isinstance(args.get("detailed", True), bool)
    tokens = qwen_decoder.chat_tokens(messages, template=str(CODER), tools=[WEATHER, CLOCK])
    free = qwen_decoder.generate(tokens, temperature=0, max_tokens=200).text
    assert free.startswith("<function=get_weather>") and xml.parse(free, [WEATHER, CLOCK])[1] == [], free
