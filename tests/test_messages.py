"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through the official anthropic
client against a real server: a message is the chat completion its messages ask for, streamed as
Anthropic's events (which the client's stream helper accumulates), stop sequences and the token
limit reported as Anthropic reports them; tool use and output formats on the Qwen2.5-Coder pair;
what it cannot serve is a 400 in Anthropic's error shape; X-Api-Key is the API key."""

from __future__ import annotations

import json

import anthropic
import pytest
from openai import OpenAI
from pydantic import BaseModel

from test_server import _metrics, _pair, running

KEY = "test-key"


@pytest.fixture(scope="module")
def server(tiny):
    with running([*_pair(tiny), "-c", "512", "--alias", "tiny", "--api-key", KEY]) as s:
        s.http.headers["x-api-key"] = KEY
        yield s


def _client(server, key=KEY):
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=600)


def _chat(server, messages, **kw):
    with OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=600) as client:
        return client.chat.completions.create(model="tiny", messages=messages, **kw)


CONVERSATIONS = [
    ((None, [{"role": "user", "content": "the cat is on"}]), [{"role": "user", "content": "the cat is on"}]),
    (([{"type": "text", "text": "you are "}, {"type": "text", "text": "terse", "cache_control": {"type": "ephemeral"}}],
      [{"role": "user", "content": [{"type": "text", "text": "the cat "}, {"type": "text", "text": "is"}]},
       {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                                         {"type": "text", "text": "on the mat"}]},
       {"role": "user", "content": "and the dog"}]),
     [{"role": "system", "content": "you are terse"}, {"role": "user", "content": "the cat is"},
      {"role": "assistant", "content": "on the mat"}, {"role": "user", "content": "and the dog"}]),
]


@pytest.mark.parametrize("conversation, chat_messages", CONVERSATIONS, ids=["text", "blocks"])
@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "top_k": 20, "seed": 3}],
                         ids=["greedy", "seeded"])
def test_a_message_is_the_chat_completion_of_its_messages(server, conversation, chat_messages, sampling):
    (system, messages) = conversation
    kw = {"system": system} if system is not None else {}
    with _client(server) as client:
        m = client.messages.create(model="tiny", max_tokens=12, messages=messages, extra_body=sampling, **kw)
        count = client.messages.count_tokens(model="tiny", messages=messages, **kw)
    chat = _chat(server, chat_messages, max_tokens=12, extra_body=sampling)
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("msg_")
    assert [b.type for b in m.content] == ["text"] and m.content[0].text == chat.choices[0].message.content
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    assert m.usage.output_tokens == chat.usage.completion_tokens
    assert m.stop_reason == {"length": "max_tokens", "stop": "end_turn"}[chat.choices[0].finish_reason]
    assert count.input_tokens == chat.usage.prompt_tokens


def test_a_streamed_message_is_the_whole_one(server):
    with _client(server) as client:
        _streamed_is_whole(client)


def _streamed_is_whole(client):
    kw = dict(model="tiny", max_tokens=16, messages=[{"role": "user", "content": "the cat is on"}],
              extra_body={"temperature": 0})
    whole = client.messages.create(**kw)
    events = list(client.messages.create(stream=True, **kw))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[1:-2] == ["content_block_start"] + ["content_block_delta"] * (len(kinds) - 5) + ["content_block_stop"]
    assert "".join(e.delta.text for e in events if e.type == "content_block_delta") == whole.content[0].text
    assert events[-2].delta.stop_reason == whole.stop_reason == "max_tokens"
    assert events[-2].usage.output_tokens == whole.usage.output_tokens == 16
    with client.messages.stream(**kw) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == whole.content[0].text and final.stop_reason == "max_tokens"
    assert final.usage.input_tokens + final.usage.cache_read_input_tokens == (
        whole.usage.input_tokens + whole.usage.cache_read_input_tokens)


@pytest.mark.parametrize("stream", [False, True])
def test_a_stop_sequence_is_reported_as_the_one_that_ended_the_message(server, stream):
    with _client(server) as client:
        _stop_sequence(client, stream)


def _stop_sequence(client, stream):
    kw = dict(model="tiny", max_tokens=16, messages=[{"role": "user", "content": "the cat is on"}],
              extra_body={"temperature": 0})
    text = client.messages.create(**kw).content[0].text
    stop = text[len(text) // 2:len(text) // 2 + 3]
    kw["stop_sequences"] = ["never here", stop]
    if stream:
        with client.messages.stream(**kw) as s:
            m = s.get_final_message()
    else:
        m = client.messages.create(**kw)
    assert m.stop_reason == "stop_sequence" and m.stop_sequence == stop
    assert text.startswith(m.content[0].text) and stop not in m.content[0].text
    kw["stop_sequences"] = ["never here"]  # (the control: a stop sequence that never comes is not reported)
    m = client.messages.create(**kw)
    assert m.stop_reason == "max_tokens" and m.stop_sequence is None


MESSAGES = [{"role": "user", "content": "the cat"}]
BAD = [
    ("no max_tokens", {"model": "tiny", "messages": MESSAGES}, 400),
    ("no messages", {"model": "tiny", "max_tokens": 4}, 400),
    ("an image", {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}]}, 400),
    ("a server tool", {"model": "tiny", "max_tokens": 4, "messages": MESSAGES,
                       "tools": [{"type": "web_search_20250305", "name": "web_search"}]}, 400),
    ("thinking without a budget", {"model": "tiny", "max_tokens": 4, "messages": MESSAGES,
                                   "thinking": {"type": "enabled"}}, 400),
    ("thinking of another type", {"model": "tiny", "max_tokens": 4, "messages": MESSAGES,
                                  "thinking": {"type": "always"}}, 400),
    ("an effort that is no level", {"model": "tiny", "max_tokens": 4, "messages": MESSAGES,
                                    "output_config": {"effort": 5}}, 400),
    ("a bad tool_choice", {"model": "tiny", "max_tokens": 4, "messages": MESSAGES, "tool_choice": "any"}, 400),
    ("a role of system", {"model": "tiny", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, 400),
    ("an unknown field", {"model": "tiny", "max_tokens": 4, "messages": MESSAGES, "n": 2}, 400),
    ("an unknown model", {"model": "claude-x", "max_tokens": 4, "messages": MESSAGES}, 404),
]


@pytest.mark.parametrize("what, body, status", BAD, ids=[b[0] for b in BAD])
def test_what_a_message_cannot_serve_is_an_error_in_anthropics_shape(server, what, body, status):
    r = server.post("/v1/messages", body)
    assert r.status_code == status, r.text
    err = r.json()
    assert err["type"] == "error" and err["error"]["message"]
    assert err["error"]["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert server.health()["status"] == "ok"


def test_the_api_key_is_taken_from_x_api_key(server):
    with _client(server) as client:
        assert client.messages.create(model="tiny", max_tokens=2, messages=MESSAGES).content
    with _client(server, key="wrong") as client, pytest.raises(anthropic.AuthenticationError):
        client.messages.create(model="tiny", max_tokens=2, messages=MESSAGES)
    r = server.http.post("/v1/messages", json={"model": "tiny", "max_tokens": 2, "messages": MESSAGES},
                         headers={"x-api-key": ""})
    assert r.status_code == 401
    assert _chat(server, MESSAGES, max_tokens=2).choices  # (OpenAI's clients: Authorization: Bearer)


@pytest.mark.parametrize("path, body, first_text", [
    ("/v1/messages", {"max_tokens": 4000, "messages": MESSAGES}, "event: content_block_delta"),
    ("/v1/responses", {"max_output_tokens": 4000, "input": "the cat"}, "event: response.output_text.delta"),
])
def test_a_client_that_leaves_a_stream_stops_its_generation(slow, path, body, first_text):
    """Messages and responses streams, as chat streams: a client gone mid-stream stops the
    generation within a step, and the slot is free again."""
    with running(["-m", slow.target, "--no-draft", "-c", "4096", "-np", "1"]) as server:
        body = dict(body, stream=True, ignore_eos=True)
        with server.http.stream("POST", path, json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()  # (held: a line iterator let go closes the connection)
            next(line for line in lines if line.startswith(first_text))
            assert server.health()["slots_processing"] == 1
        server.wait_for(lambda h: h["slots_processing"] == 0, "the slot free again")
        assert _metrics(server)["specllama_generated_tokens_total"] < 4000


def test_a_chat_stream_becomes_message_events_in_order():
    """The translation of a chat stream: text, then a call, then usage; an error ends it."""
    from types import SimpleNamespace

    from specllama.server.messages import Message

    def chunk(delta=None, finish=None, usage=None):
        return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if usage is None else [],
                "usage": usage}

    m = Message({"stop_sequences": []}, "m", None)
    events = m.start(9)
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    for c in (chunk({"role": "assistant", "content": ""}), chunk({"content": "Let me "}), chunk({"content": "look."}),
              chunk({"tool_calls": [dict(call, index=0)]}), chunk(finish="tool_calls"),
              chunk(usage={"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16,
                           "prompt_tokens_details": {"cached_tokens": 4}})):
        events += m.events(c)
    data = [json.loads(e["data"]) for e in events]
    assert [e["event"] for e in events] == [d["type"] for d in data] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert [d.get("index") for d in data[1:8]] == [0, 0, 0, 0, 1, 1, 1]
    assert data[5]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}
    assert data[6]["delta"] == {"type": "input_json_delta", "partial_json": '{"x": 1}'}
    assert data[8]["delta"]["stop_reason"] == "tool_use"
    assert data[8]["usage"]["input_tokens"] == 5 and data[8]["usage"]["cache_read_input_tokens"] == 4
    m = Message({}, "m", SimpleNamespace())
    m.start(1)
    failed = m.events({"error": {"message": "the server is busy", "code": "server_busy"}})
    assert [json.loads(e["data"]) for e in failed] == [
        {"type": "error", "error": {"type": "overloaded_error", "message": "the server is busy"}}]


# -- tools and output formats on the Qwen2.5-Coder pair -------------------------------------------

WEATHER = {"name": "get_weather", "description": "The current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


class City(BaseModel):
    name: str
    population: int


@pytest.mark.real_pair
@pytest.mark.slow
def test_tool_use_and_results_through_messages(qwen_server):
    """A forced tool use comes back as a tool_use block (whole, and through the client's stream
    helper); sent back with its tool_result it makes the prompt the chat conversation with that call
    and tool message makes."""
    with _client(qwen_server) as client, OpenAI(base_url=qwen_server.url + "/v1", api_key="none", max_retries=0,
                                                 timeout=600) as chat_client:
        _tool_round_trip(client, chat_client)


def _tool_round_trip(client, chat_client):
    ask = dict(model="qwen", max_tokens=100, messages=[{"role": "user", "content": "What's the weather in Paris?"}],
               tools=[WEATHER], extra_body={"temperature": 0})
    m = client.messages.create(tool_choice={"type": "any"}, **ask)
    assert m.stop_reason == "tool_use" and [b.type for b in m.content] == ["tool_use"]
    use = m.content[0]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}
    with client.messages.stream(tool_choice={"type": "tool", "name": "get_weather"}, **ask) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use" and final.content[0].input == {"city": "Paris"}

    follow = client.messages.create(
        model="qwen", max_tokens=24, tools=[WEATHER], extra_body={"temperature": 0},
        messages=[{"role": "user", "content": "What's the weather in Paris?"},
                  {"role": "assistant", "content": [use.model_dump(include={"type", "id", "name", "input"})]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                                "content": [{"type": "text", "text": "22 C, sunny"}]}]}])
    chat = chat_client.chat.completions.create(
        model="qwen", temperature=0, max_tokens=24,
        tools=[{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                 "parameters": WEATHER["input_schema"]}}],
        messages=[{"role": "user", "content": "What's the weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": use.id, "type": "function",
                       "function": {"name": use.name, "arguments": json.dumps(use.input)}}]},
                  {"role": "tool", "tool_call_id": use.id, "content": "22 C, sunny"}])
    assert follow.usage.input_tokens + follow.usage.cache_read_input_tokens == chat.usage.prompt_tokens
    message = chat.choices[0].message
    assert "".join(b.text for b in follow.content if b.type == "text") == (message.content or "")


@pytest.mark.real_pair
@pytest.mark.slow
def test_an_output_format_holds_the_message(qwen_server):
    """The client's messages.parse with a Pydantic model: its schema becomes the grammar."""
    with _client(qwen_server) as client:
        _output_format(client)


def _output_format(client):
    ask = dict(model="qwen", max_tokens=64, messages=[{"role": "user", "content": "Name a big city and its population."}],
               extra_body={"temperature": 0})
    m = client.messages.parse(output_format=City, **ask)
    assert isinstance(m.parsed_output, City) and m.parsed_output.name
    plain = client.messages.create(**ask)
    with pytest.raises(ValueError):  # (the control: without the format the reply is prose)
        City.model_validate_json(plain.content[0].text)
