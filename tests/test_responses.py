"""OpenAI's Responses API (/v1/responses) through the official openai client against a real server:
a response is the chat completion its input items ask for, streamed as the Responses API's events
(which the client's own stream helper checks as it accumulates them); function tools and JSON
schemas on the Qwen2.5-Coder pair; what it cannot serve is a 400 naming the field."""

from __future__ import annotations

import json

import pytest
from openai import OpenAI
from pydantic import BaseModel

from test_server import _pair, running

RESPONSES = "/v1/responses"


@pytest.fixture(scope="module")
def server(tiny):
    with running([*_pair(tiny), "-c", "512", "--alias", "tiny"]) as s:
        yield s


def _client(server):
    return OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)


@pytest.fixture
def client(server):
    with _client(server) as c:
        yield c


# (Responses input, instructions) and the chat messages they stand for
CONVERSATIONS = [
    (("the cat is on", None), [{"role": "user", "content": "the cat is on"}]),
    (([{"role": "developer", "content": "be brief"},
       {"role": "user", "content": [{"type": "input_text", "text": "the cat "}, {"type": "input_text", "text": "is"}]},
       {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "on the mat"}]},
       {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]},
       {"role": "user", "content": "and the dog"}], "you are terse"),
     [{"role": "system", "content": "you are terse"}, {"role": "system", "content": "be brief"},
      {"role": "user", "content": "the cat is"}, {"role": "assistant", "content": "on the mat"},
      {"role": "user", "content": "and the dog"}]),
]


@pytest.mark.parametrize("conversation, messages", CONVERSATIONS, ids=["text", "items"])
@pytest.mark.parametrize("sampling", [dict(temperature=0), dict(temperature=1.0, top_p=0.9, seed=7)],
                         ids=["greedy", "seeded"])
def test_a_response_is_the_chat_completion_of_its_input(client, conversation, messages, sampling):
    (inp, instructions), extra = conversation, ({"seed": sampling["seed"]} if "seed" in sampling else {})
    kw = {k: v for k, v in sampling.items() if k != "seed"}
    r = client.responses.create(model="tiny", input=inp, instructions=instructions, max_output_tokens=12,
                                extra_body=extra, **kw)
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12, extra_body=extra, **kw)
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == chat.choices[0].message.content and r.output_text
    assert [o.type for o in r.output] == ["message"] and r.output[0].role == "assistant"
    assert r.usage.input_tokens == chat.usage.prompt_tokens
    assert r.usage.output_tokens == chat.usage.completion_tokens
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.status == ("incomplete" if chat.choices[0].finish_reason == "length" else "completed")


@pytest.mark.parametrize("conversation, messages", CONVERSATIONS, ids=["text", "items"])
def test_input_tokens_count_the_prompt_a_request_is_generated_after(client, server, conversation, messages):
    """POST /v1/responses/input_tokens (the client's responses.input_tokens.count) and
    /v1/chat/completions/input_tokens (llama-server's) count the prompt the request would make."""
    inp, instructions = conversation
    r = client.responses.create(model="tiny", input=inp, instructions=instructions, max_output_tokens=2)
    count = client.responses.input_tokens.count(model="tiny", input=inp, instructions=instructions)
    assert count.object == "response.input_tokens" and count.input_tokens == r.usage.input_tokens
    chat = server.post("/v1/chat/completions/input_tokens", {"messages": messages, "max_tokens": 100000,
                                                              "stream": True})
    assert chat.status_code == 200 and chat.json()["input_tokens"] == r.usage.input_tokens
    bad = server.post("/v1/responses/input_tokens", {"input": "x", "previous_response_id": "resp_1"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "previous_response_id"


def test_a_streamed_response_is_the_whole_one(client):
    kw = dict(model="tiny", input="the cat is on", temperature=0, max_output_tokens=16)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(stream=True, **kw))
    assert [e.type for e in events[:2]] == ["response.created", "response.in_progress"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len({e.response.id for e in events if hasattr(e, "response")}) == 1
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert "".join(deltas) == whole.output_text and len(deltas) >= 1
    done = next(e for e in events if e.type == "response.output_text.done")
    assert done.text == whole.output_text
    last = events[-1]
    assert last.type == f"response.{whole.status}" and last.response.output_text == whole.output_text
    assert last.response.usage.output_tokens == whole.usage.output_tokens
    # the client's stream helper checks each event against the ones before as it accumulates them,
    # and gives a response that completed (here: ended by a stop string)
    middle = len(whole.output_text) // 2
    kw["extra_body"] = {"stop": [whole.output_text[middle:middle + 3]]}
    stopped = client.responses.create(**kw)
    assert stopped.status == "completed" and len(stopped.output_text) < len(whole.output_text)
    with client.responses.stream(**kw) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert final.output_text == stopped.output_text and kinds[-1] == "response.completed"


@pytest.mark.parametrize("stream", [False, True])
def test_a_response_cut_by_max_output_tokens_is_incomplete(client, stream):
    kw = dict(model="tiny", input="the cat is on", temperature=0, max_output_tokens=3,
              extra_body={"ignore_eos": True})
    if stream:
        events = list(client.responses.create(stream=True, **kw))
        assert events[-1].type == "response.incomplete"
        r = events[-1].response
    else:
        r = client.responses.create(**kw)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


INPUT = {"model": "tiny", "input": "the cat"}
BAD = [
    ("previous_response_id", dict(INPUT, previous_response_id="resp_1"), "previous_response_id"),
    ("no input", {"model": "tiny"}, "input"),
    ("empty input", dict(INPUT, input=[]), "input"),
    ("an image", dict(INPUT, input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
     "input"),
    ("an unknown item", dict(INPUT, input=[{"type": "web_search_call", "id": "ws_1"}]), "input"),
    ("a call without its id", dict(INPUT, input=[{"type": "function_call", "name": "f", "arguments": "{}"}]),
     "input"),
    ("a hosted tool", dict(INPUT, tools=[{"type": "web_search"}]), "tools"),
    ("n", dict(INPUT, n=2), "n"),
    ("messages", dict(INPUT, messages=[{"role": "user", "content": "x"}]), "messages"),
    ("a text format of another kind", dict(INPUT, text={"format": {"type": "xml"}}), "text"),
    ("an empty reasoning effort", dict(INPUT, reasoning={"effort": ""}), "reasoning"),
    ("a reasoning field of another kind", dict(INPUT, reasoning={"budget": 3}), "reasoning"),
    ("include logprobs", dict(INPUT, include=["message.output_text.logprobs"]), "include"),
    ("background", dict(INPUT, background=True), "background"),
    ("a bad temperature", dict(INPUT, temperature="hot"), "temperature"),
    ("a bad tool_choice", dict(INPUT, tool_choice={"type": "file_search"}), "tool_choice"),
]


@pytest.mark.parametrize("what, body, param", BAD, ids=[b[0] for b in BAD])
def test_what_a_response_cannot_serve_is_a_400_naming_the_field(server, what, body, param):
    r = server.post(RESPONSES, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"], err
    assert server.health()["status"] == "ok"


def test_responses_accept_what_asks_for_nothing(server):
    """Fields an agent sends that change nothing here: storage, identifiers, encrypted reasoning
    (no reasoning items are made), a plain text format."""
    r = server.post(RESPONSES, dict(INPUT, store=False, include=["reasoning.encrypted_content"],
                                    prompt_cache_key="k", truncation="disabled", text={"format": {"type": "text"}},
                                    metadata={"a": "b"}, max_output_tokens=4, parallel_tool_calls=True))
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["type"] == "output_text"
    assert server.http.post(RESPONSES, content=b"{not json").status_code == 400


# -- tools and schemas on the Qwen2.5-Coder pair --------------------------------------------------

WEATHER = {"type": "function", "name": "get_weather", "description": "The current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


class City(BaseModel):
    name: str
    population: int


@pytest.fixture
def qwen_client(qwen_server):
    with _client(qwen_server) as c:
        yield c


@pytest.mark.real_pair
@pytest.mark.slow
def test_function_calls_and_their_outputs_through_responses(qwen_client):
    """A forced call comes back as a function_call item (whole, and through the client's stream
    helper); the call and its output sent back as input items make the prompt the chat
    conversation with that call and tool message makes."""
    client = qwen_client
    ask = dict(model="qwen", input="What's the weather in Paris?", tools=[WEATHER], tool_choice="required",
               temperature=0)
    r = client.responses.create(**ask)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and json.loads(calls[0].arguments) == {"city": "Paris"}
    with client.responses.stream(**ask) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds
    assert [(o.type, o.name, o.arguments) for o in final.output] == [("function_call", "get_weather",
                                                                     calls[0].arguments)]

    call = calls[0]
    follow = client.responses.create(
        model="qwen", tools=[WEATHER], temperature=0, max_output_tokens=24,
        input=[{"role": "user", "content": "What's the weather in Paris?"},
               {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
               {"type": "function_call_output", "call_id": call.call_id, "output": "22 C, sunny"}])
    chat = client.chat.completions.create(
        model="qwen", tools=[{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}],
        temperature=0, max_tokens=24,
        messages=[{"role": "user", "content": "What's the weather in Paris?"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": call.call_id, "type": "function",
                       "function": {"name": call.name, "arguments": call.arguments}}]},
                  {"role": "tool", "tool_call_id": call.call_id, "content": "22 C, sunny"}])
    assert follow.usage.input_tokens == chat.usage.prompt_tokens
    message = chat.choices[0].message
    assert follow.output_text == (message.content or "")
    assert len([o for o in follow.output if o.type == "function_call"]) == len(message.tool_calls or [])


@pytest.mark.real_pair
@pytest.mark.slow
def test_a_json_schema_text_format_holds_the_output(qwen_client):
    """The client's responses.parse with a Pydantic model: its schema becomes the grammar."""
    client = qwen_client
    r = client.responses.parse(model="qwen", input="Name a big city and its population.", text_format=City,
                               temperature=0, max_output_tokens=64)
    assert isinstance(r.output_parsed, City) and r.output_parsed.name and r.output_parsed.population >= 0
    plain = client.responses.create(model="qwen", input="Name a big city and its population.", temperature=0,
                                    max_output_tokens=64)
    with pytest.raises(ValueError):  # (the control: without the format the reply is prose)
        City.model_validate_json(plain.output_text)


def test_a_chat_stream_becomes_response_events_in_order():
    """The translation of a chat stream: text, then a call, then usage; and an error after the
    stream began ends it as failed."""
    from specllama.server.responses import Response

    def chunk(delta=None, finish=None, usage=None):
        return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if usage is None else [],
                "usage": usage}

    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    resp = Response({"input": "x"}, "m")
    events = resp.start()
    for c in (chunk({"role": "assistant", "content": ""}), chunk({"content": "Let me "}), chunk({"content": "look."}),
              chunk({"tool_calls": [dict(call, index=0)]}), chunk(finish="tool_calls"),
              chunk(usage={"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12})):
        events += resp.events(c)
    data = [json.loads(e["data"]) for e in events]
    assert [e["event"] for e in events] == [d["type"] for d in data]
    assert [d["type"] for d in data] == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.output_item.added",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert [d["sequence_number"] for d in data] == list(range(len(data)))
    final = data[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["message", "function_call"]
    assert final["output"][0]["content"][0]["text"] == "Let me look."
    assert final["output"][1]["call_id"] == "call_1" and final["output"][1]["arguments"] == '{"x": 1}'
    assert data[2]["item"]["id"] == final["output"][0]["id"] == data[8]["item"]["id"]
    assert final["usage"]["input_tokens"] == 5 and final["usage"]["output_tokens"] == 7

    resp = Response({"input": "x"}, "m")
    resp.start()
    resp.events(chunk({"content": "par"}))
    failed = [json.loads(e["data"]) for e in resp.events(
        {"error": {"message": "the model cannot run", "type": "server_error", "param": None,
                   "code": "rpc_connection_lost"}})]
    assert [d["type"] for d in failed] == ["error", "response.failed"]
    assert failed[0]["code"] == "rpc_connection_lost"
    assert failed[1]["response"]["status"] == "failed"
    assert failed[1]["response"]["error"]["code"] == "rpc_connection_lost"
