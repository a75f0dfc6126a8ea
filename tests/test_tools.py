"""Tool calling: OpenAI's tools rendered by the model's own chat template, calls in the Hermes /
Qwen2.5 format parsed into OpenAI's tool_calls (streamed as deltas), tool results rendered back;
with the official openai client against a real server on the Qwen2.5-Coder pair."""

from __future__ import annotations

import json
import re

import pytest

from specllama import tools
from grammar_text import GrammarText
from test_server import ROOT, running

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_calls_are_parsed_out_of_the_text():
    text = 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n' \
           '<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}\n</tool_call>'
    content, calls = tools.hermes.parse(text)
    assert content == "Let me look."
    assert [c["function"]["name"] for c in calls] == ["get_weather"] * 2
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris"}, {"city": "Oslo"}]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert tools.hermes.parse('<tool_call>{"name": "f", "arguments": {}}')[1]  # cut off before its closing tag
    for text in ['```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
                 ' {"name": "get_weather", "arguments": {"city": "Paris"}}\n']:  # the JSON alone: a call too
        content, calls = tools.hermes.parse(text)
        assert content is None and json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}
    for text in ["no call here", "<tool_call>not json</tool_call>", '<tool_call>{"arguments": {}}</tool_call>',
                 '{"city": "Paris"}', 'It is {"name": "x", "arguments": {}} here']:
        assert tools.hermes.parse(text) == (text, [])


def test_a_stream_holds_back_from_the_first_call_on():
    s = tools.hermes.StreamSplitter()
    shown = [s.feed(piece) for piece in ["Sure", ". <tool", "_call>\n{\"name\": \"get_weather\", ",
                                         "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>"]]
    assert shown == ["Sure", ". ", "", ""]
    rest, calls = s.finish()
    assert rest == "" and json.loads(calls[0]["function"]["arguments"]) == {"city": "Rome"}
    s = tools.hermes.StreamSplitter()
    assert s.feed("a < b and <tool") == "a < b and "  # a tail that may open a call waits
    assert s.feed("s>") == "<tools>" and s.finish() == ("", [])
    s = tools.hermes.StreamSplitter()  # a reply that starts as a bare call waits for its end
    assert [s.feed(p) for p in ["``", "`json\n{\"name\": \"f\", ", "\"arguments\": {}}\n```"]] == ["", "", ""]
    assert s.finish()[1][0]["function"]["name"] == "f"
    s = tools.hermes.StreamSplitter()  # and shows it whole where it was not one
    assert s.feed("{not") == "" and s.finish() == ("{not", [])
    s = tools.hermes.StreamSplitter()
    assert s.feed("``") == "" and s.feed("`python\nx = 1") == "```python\nx = 1"


def test_call_arguments_as_objects():
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}]}]
    out = tools.call_arguments(msgs)
    assert out[0]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert msgs[0]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'  # the request's own is left alone


@pytest.fixture(scope="module")
def tiny_server(tiny):
    with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "256"]) as s:
        yield s


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}]}, "tools"),
    ({"tools": "get_weather"}, "tools"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"not": {"type": "string"}}}}}}], "tool_choice": "required"}, "tools"),
])
def test_bad_tools_requests_are_400s(tiny_server, body, param):
    s = tiny_server
    r = s.post("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": "hi"}], max_tokens=2))
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                           "tools": [WEATHER]}).status_code == 200


CLOCK = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]},
                                                                     "hours": {"type": "integer"}},
                                       "required": ["zone", "hours"]}}}


ASK = [{"role": "user", "content": "What time is it in Berlin?"}]


def forced_call(dec, template, stream: bool, **fields):
    """ASK under template (a path) with fields that force a call, streamed or whole: (the calls,
    the finish reason, the whole answer's message and generated text, or None and None for a
    stream, whose deltas must hold no content)."""
    if stream:
        chunks = list(dec.create_chat_completion(ASK, chat_template=str(template), stream=True, **fields))
        deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
        assert not any(d.get("content") for d in deltas)
        calls = [c for d in deltas for c in d.get("tool_calls", [])]
        return calls, chunks[-1]["choices"][0]["finish_reason"], None, None
    choice = dec.create_chat_completion(ASK, chat_template=str(template), return_tokens=True, **fields)["choices"][0]
    return (choice["message"].get("tool_calls"), choice["finish_reason"], choice["message"],
            dec.target_model.detokenize(choice["tokens"]))


def forced_get_time(dec, template, stream: bool, starts: str, thought=None):
    """ASK under template (a path) with one call to CLOCK forced and no reasoning format (a
    template that thinks first would let a tiny model think to max_tokens), streamed or whole: the
    call (its text starting with starts, where whole; its zone one of the enum), its arguments, and
    the prompt of the next turn with the call (and thought as its reasoning_content) and its result,
    which holds the result."""
    from specllama import templates

    fields = dict(tools=[CLOCK], tool_choice="required", temperature=0.9, seed=2, max_tokens=300,
                  parallel_tool_calls=False, reasoning_format="none")
    calls, finish, _, text = forced_call(dec, template, stream, **fields)
    if text is not None:
        assert text.startswith(starts), text
    assert finish == "tool_calls" and len(calls) == 1
    args = json.loads(calls[0]["function"]["arguments"])
    assert calls[0]["function"]["name"] == "get_time" and args["zone"] in ("UTC", "CET")
    turn = ASK + [{"role": "assistant", "content": None, "tool_calls": calls},
                  {"role": "tool", "tool_call_id": calls[0]["id"], "content": "12:00"}]
    if thought is not None:
        turn[1] = dict(turn[1], content="", reasoning_content=thought)
    prompt = templates.render(dec.target_model, turn, template=str(template), tools=[CLOCK])
    assert "12:00" in prompt
    return calls[0], args, prompt


def template_server(tiny, template):
    """A real server process (test_server.running) on the tiny Q4_1 pair under a chat template (a
    path), its context room for the template's tool prompt."""
    return running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "4096", "--chat-template", str(template)])


def openai_forced_call(url: str, extra_body=None) -> None:
    """Through a real server at url with the openai client: a call to CLOCK forced comes back by
    the schema (hours an integer), whole and streamed alike, and the next turn with its result is
    served. Whole and streamed are compared decoded without a draft: past a few hundred positions
    (these templates' tool prompts) batched and one-token logits part, and a seed's speculative
    replies with them at a near tie, as the draft lengths follow measured times."""
    from openai import OpenAI

    with OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        fields = dict(model=client.models.list().data[0].id, messages=ASK, tools=[CLOCK], temperature=0.7, seed=5,
                      max_tokens=200, tool_choice="required", parallel_tool_calls=False,
                      extra_body=dict(extra_body or {}))
        out = client.chat.completions.create(**fields)
        calls = out.choices[0].message.tool_calls
        assert out.choices[0].finish_reason == "tool_calls" and calls[0].function.name == "get_time"
        assert all(isinstance(json.loads(c.function.arguments)["hours"], int) for c in calls)
        plain = dict(fields, extra_body={**fields["extra_body"], "speculative": False})
        whole = client.chat.completions.create(**plain).choices[0].message.tool_calls
        chunks = list(client.chat.completions.create(stream=True, **plain))
        assert [t.function.arguments for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []] == \
            [c.function.arguments for c in whole]
        messages = ASK + [out.choices[0].message.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": calls[0].id, "content": "12:00"}]
        again = client.chat.completions.create(**dict(fields, messages=messages, tool_choice="auto"))
        assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")


def calls_strategy(cities, optional=("units", "detailed")):
    """Hypothesis: lists of one to three calls (name, arguments) to WEATHER (a city drawn from
    cities, days, and some of its optional keys, in the schema's order after the required ones, as
    the grammars hold them) and CLOCK."""
    from hypothesis import strategies as st

    more = {"units": st.sampled_from(["celsius", "fahrenheit"]), "detailed": st.booleans()}
    weather = st.builds(lambda city, days, extra: {"city": city, "days": days, **extra}, cities, st.integers(1, 14),
                        st.fixed_dictionaries({}, optional={k: more[k] for k in optional}))
    clock = st.builds(lambda z, h: {"zone": z, "hours": h}, st.sampled_from(["UTC", "CET"]), st.integers(-99, 99))
    return st.lists(st.one_of(st.tuples(st.just("get_weather"), weather), st.tuples(st.just("get_time"), clock)),
                    min_size=1, max_size=3)


def template_calls(template, calls, open_tag: str, close: str, turn: str, tools=None) -> str:
    """The text a template (a path) writes for a past turn of calls (name, arguments), as its
    messages reach it (specllama.templates.template_messages): from the first open_tag after the
    last turn header (the system prompt may show the form too) to the last close."""
    from specllama import templates

    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}]
    source = template.read_text()
    text = templates.render_jinja(source, templates.template_messages(source, msgs), False, "", "", tools=tools)
    start = text.index(open_tag, text.rindex(turn))
    return text[start:text.rindex(close) + len(close)]


def check_stream(fmt, text, steps, tools=None):
    """A call format's StreamSplitter, fed text in steps: its content and calls are what the
    format's parse gives for the whole text (the text before the first call's start shown as it
    comes, the message's content that text stripped)."""
    s = fmt.StreamSplitter(tools)
    shown = "".join(s.feed(step) for step in steps)
    rest, calls = s.finish()
    content, want = fmt.parse(text, tools)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == \
        [(c["function"]["name"], c["function"]["arguments"]) for c in want], text
    if want:
        start = min(i for i in (text.find(tag) for tag in fmt.StreamSplitter.OPENS) if i >= 0)
        assert shown + rest == text[:start] and (content or "") == (shown + rest).strip(), text
    else:
        assert shown + rest == text, text


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_time"}}])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_is_a_call_to_a_given_tool_by_its_schema(tiny_server, choice, stream):
    """tool_choice "required" or a named function: whatever the (random, tiny) model prefers, the
    reply is calls to the tools (the named one), with arguments their schemas admit."""
    with _openai(tiny_server) as client:
        _forced_calls(client, choice, stream)


def _openai(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)


def _forced_calls(client, choice, stream):
    for seed in range(3):
        kw = dict(model="target_q4_1", messages=[{"role": "user", "content": "the cat"}], tools=[WEATHER, CLOCK],
                  tool_choice=choice, parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=200)
        if stream:
            args, names, finish = {}, {}, None
            for chunk in client.chat.completions.create(stream=True, **kw):
                for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    names[tc.index] = names.get(tc.index, "") + (tc.function.name or "")
                    args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
                finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
            calls = [(names[i], args[i]) for i in sorted(names)]
        else:
            r = client.chat.completions.create(**kw)
            finish = r.choices[0].finish_reason
            calls = [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls or []]
        assert finish == "tool_calls" and len(calls) == 1, (finish, calls)
        name, arguments = calls[0]
        arguments = json.loads(arguments)
        if choice != "required":
            assert name == "get_time"
        if name == "get_time":
            assert arguments["zone"] in ("UTC", "CET") and isinstance(arguments["hours"], int)
        else:
            assert name == "get_weather" and isinstance(arguments["city"], str)


def test_the_call_grammar_follows_the_format():
    g = tools.hermes.call_grammar(tools.check_tools([WEATHER, CLOCK]), "get_time", parallel=False)
    assert g.startswith('root ::= tool-call\n') and '"\\"get_time\\""' in g and "get_weather" not in g
    assert "(\"\\n\" tool-call)*" in tools.hermes.call_grammar([WEATHER])
    with pytest.raises(ValueError):
        tools.hermes.call_grammar([WEATHER], "nope")


def _from_trigger(pattern, text):
    """What a lazy grammar with this trigger is fed of text: from the pattern's group on (Python's
    re reads the pattern as llama.cpp's std::regex does), or None where it does not trigger."""
    m = re.search(pattern, text)
    return None if m is None else text[m.start(1):]


def test_a_reply_that_is_a_call_alone_is_held_to_the_tool_schema(default_pair):
    """tool_choice "auto" with a reply that is a call's JSON object alone, bare or fenced (what
    small models write for a call, and what is parsed as one): from the tool's name on, the lazy
    grammar holds it to the tool's schema, by llama.cpp's grammar engine; replies that are no call
    (code, JSON that names no tool) stay free. At every character where the trigger fires, the
    grammar admits what it is fed (llama.cpp throws where it would not)."""
    checked = tools.check_tools([WEATHER, CLOCK])
    gbnf, trigger = tools.hermes.call_grammar(checked, whole=True), tools.hermes.whole_call_trigger(checked)
    call = '{\n  "name": "get_weather",\n  "arguments": {\n    "city": %s\n  }\n}'
    held = [("```json\n" + call % '"Paris"' + "\n```", True),
            ("\n " + call % '"Paris"', True),
            ('{"name": "get_time", "arguments": {"zone": "UTC", "hours": 3}}', True),
            ('{"name": "get_time", "parameters": {"zone": "CET", "hours": 1}}', True),  # (Llama 3's key)
            ("```\n" + call % '"Oslo"' + "```", True),
            ("```json\n" + call % '["Paris", "Rome"]' + "\n```", False),
            ('{"name": "get_time", "arguments": {"zone": "PST", "hours": 3}}', False),
            ('{"name": "get_time", "arguments": {"zone": "UTC"}}', False),
            ('{"name": "get_time", "params": {"zone": "UTC", "hours": 3}}', False)]
    free = ["```python\nprint('{\"name\": \"get_weather\",')\n```", '{"name": "John", "age": 3}',
            'The weather: {"name": "get_weather", "arguments": {}}', '{"city": "Paris"}']
    g = GrammarText(default_pair[0])
    try:
        for text, valid in held:
            fed = _from_trigger(trigger, text)
            assert fed is not None and g.admits(gbnf, fed) == valid, text
            assert (tools.hermes.parse(text)[1] != []) or not valid
            first = next(end for end in range(len(text) + 1) if _from_trigger(trigger, text[:end]) is not None)
            assert text[first - 1] == "," and g.admits(gbnf, _from_trigger(trigger, text[:first]), complete=False)
            for end in range(first, len(text) + 1) if valid else ():  # (a token ending further on fires it there)
                assert g.admits(gbnf, _from_trigger(trigger, text[:end]), complete=False), text[:end]
        for text in free:
            assert _from_trigger(trigger, text) is None, text
        tagged = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
        assert g.admits(gbnf, tagged) and not g.admits(gbnf, tagged.replace('"Paris"', "7"))
        # the token that completes the tag may go on (">{", ">\n\n", "> "): the grammar is fed that too
        for after, before in [("", ""), ("\n\n", "\n"), (" ", " "), ("\n", "")]:
            text = f'<tool_call>{after}{{"name": "get_weather", "arguments": {{"city": "Paris"}}}}{before}</tool_call>'
            assert g.admits(gbnf, text), text
            assert g.admits(tools.hermes.call_grammar(checked), text), text
        required = tools.hermes.call_grammar(checked)
        assert not g.admits(required, "```json\n" + call % '"Paris"' + "\n```")  # required: tags
    finally:
        g.close()


@pytest.mark.real_pair
@pytest.mark.slow
@pytest.mark.parametrize("stream, choice", [(False, "auto"), (True, "auto"), (True, "required")])
def test_a_tool_calling_loop_with_the_openai_client(qwen_server, stream, choice):
    """call (tool_choice as given), tool result, final answer; greedy, on the Qwen2.5-Coder pair."""
    with _openai(qwen_server) as client:
        _tool_loop(client, stream, choice)


def _tool_loop(client, stream, choice):
    messages = [{"role": "user", "content": "What is the weather in Paris right now? Use the tool."}]

    def ask(tool_choice="auto"):
        kw = dict(model="qwen", messages=messages, tools=[WEATHER], tool_choice=tool_choice, temperature=0,
                  max_tokens=96)
        if not stream:
            r = client.chat.completions.create(**kw)
            return r.choices[0].message.content, [c.model_dump() for c in r.choices[0].message.tool_calls or []], \
                r.choices[0].finish_reason
        content, calls, finish = "", {}, None
        for chunk in client.chat.completions.create(stream=True, **kw):
            if not chunk.choices:
                continue
            d = chunk.choices[0].delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                calls.setdefault(tc.index, {"id": tc.id, "type": "function", "function": {"name": "", "arguments": ""}})
                calls[tc.index]["function"]["name"] += tc.function.name or ""
                calls[tc.index]["function"]["arguments"] += tc.function.arguments or ""
            finish = chunk.choices[0].finish_reason or finish
        return content or None, [calls[i] for i in sorted(calls)], finish

    content, calls, finish = ask(choice)
    assert finish == "tool_calls" and len(calls) == 1, (content, calls)
    call = calls[0]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}
    messages += [{"role": "assistant", "content": content, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": call["id"], "content": '{"temperature_c": 17, "sky": "cloudy"}'}]
    content, calls, finish = ask()
    assert finish == "stop" and not calls and "17" in content, content


@pytest.mark.real_pair
@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_a_call_the_model_writes_alone_follows_the_schema(qwen_server, stream):
    """Asked for two cities' weather with tool_choice "auto", this target answers with one call's
    JSON object alone in a ```json block, and left free it gives "city" a list of both; held from
    the tool's name on, the call's arguments follow the tool's schema."""
    with _openai(qwen_server) as client:
        kw = dict(model="qwen", messages=[{"role": "user", "content": "What's the weather in Paris and in Rome?"}],
                  tools=[WEATHER], temperature=0, max_tokens=96)
        if stream:
            args, finish = {}, None
            for chunk in client.chat.completions.create(stream=True, **kw):
                for tc in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                    args[tc.index] = args.get(tc.index, "") + (tc.function.arguments or "")
                finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
            calls = [args[i] for i in sorted(args)]
        else:
            r = client.chat.completions.create(**kw)
            finish = r.choices[0].finish_reason
            calls = [c.function.arguments for c in r.choices[0].message.tool_calls or []]
    assert finish == "tool_calls" and calls, (finish, calls)
    for arguments in calls:
        arguments = json.loads(arguments)
        assert set(arguments) == {"city"} and isinstance(arguments["city"], str), arguments


@pytest.mark.real_pair
@pytest.mark.slow
def test_apply_template_renders_a_conversation_as_a_chat_request_does(qwen_server):
    """/apply-template shows the prompt a chat request with those messages and tools is generated
    from: an earlier call's arguments rendered as an object, not as a quoted JSON string."""
    messages = [{"role": "user", "content": "What's the weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function",
                     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "22 C, sunny"}]
    prompt = qwen_server.post("/apply-template", {"messages": messages, "tools": [WEATHER]}).json()["prompt"]
    assert '"arguments": {"city": "Paris"}' in prompt and "get_weather" in prompt.split("<|im_start|>user")[0]
    tokens = qwen_server.post("/tokenize", {"content": prompt, "add_special": True}).json()["tokens"]
    chat = qwen_server.post("/v1/chat/completions", {"messages": messages, "tools": [WEATHER], "max_tokens": 1,
                                                     "temperature": 0}).json()
    assert chat["usage"]["prompt_tokens"] == len(tokens)
    bad = qwen_server.post("/apply-template", {"messages": messages, "tools": [{"type": "function"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tools"


@pytest.mark.parametrize("fmt, text", [
    ("hermes", '<tool_call>{"name": "f", "arguments": {"a": %s}}</tool_call>'),
    ("hermes", '{"name": "f", "arguments": %s}'),
    ("gemma4", "<|tool_call>call:f{a:%s}<tool_call|>"),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n%s\n</parameter>\n</function>\n</tool_call>"),
])
def test_a_reply_nested_deeper_than_python_recurses_is_no_call(fmt, text):
    """A reply nested 100,000 lists deep (a model left free can write that) parses to no call, or to
    text, instead of raising RecursionError out of the response."""
    deep = text % ("[" * 100_000)
    module = getattr(tools, fmt)
    content, calls = module.parse(deep, [])
    if calls:  # (the XML form reads a value that is no JSON as text)
        assert fmt == "qwen3_coder" and json.loads(calls[0]["function"]["arguments"])["a"].startswith("[[[")
    else:
        assert content == deep
    s = module.StreamSplitter([])
    s.feed(deep)
    assert s.finish()[1] == calls or fmt == "qwen3_coder"
    assert tools.call_arguments([{"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": "[" * 100_000}}]}])


_WHITESPACE_REPLY = """
import sys
import specllama
from specllama.tools import hermes
tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
grammar, triggers = hermes.lazy_grammar(tools)
with specllama.SpeculativeDecoder(sys.argv[1], n_ctx=512) as dec:
    run = dec.tokenize(" " * 64, add_special=False)
    assert len(run) == 1
    r = dec.generate("hi", max_tokens=200, ignore_eos=True, temperature=0, grammar=grammar,
                     grammar_trigger_patterns=triggers, logit_bias={run[0]: 100.0})
print(len(r.text), r.text.strip() == "")
"""


def test_a_long_reply_of_whitespace_awaiting_the_call_trigger(default_pair, tmp_path):
    """tool_choice "auto" with Hermes' lazy grammar, whose triggers llama.cpp searches for in the whole
    reply after every token: a reply that opens with 12,800 spaces (200 tokens of 64) ends as asked, in a
    process whose stack is 1 MiB (llama.cpp's std::regex recursed once per leading whitespace character
    of an unbounded \\s*, and ran a process of the usual 8 MiB out of stack from about 40,000 on)."""
    import os
    import resource
    import subprocess
    import sys

    def small_stack():
        resource.setrlimit(resource.RLIMIT_STACK, (1 << 20, 1 << 20))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-c", _WHITESPACE_REPLY, default_pair[0]], capture_output=True, text=True,
                       timeout=600, env=env, cwd=tmp_path, preexec_fn=small_stack)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.split() == ["12800", "True"]
