"""Ollama's API (/api/chat, /api/generate, /api/tags, /api/show, /api/ps, /api/version) through the
official ollama client against a real server: a chat is the chat completion of its messages, a
generate the chat completion of its prompt (or, raw or with a suffix, the text completion of it),
streamed as lines of JSON whose text joins to the whole answer; the listing endpoints describe the
served model; tool calls, formats and fill-in-the-middle on the Qwen2.5-Coder pair; what cannot be
served is an {"error"} with its status."""

from __future__ import annotations

import json
import os
import re

import ollama
import pytest
from openai import OpenAI
from pydantic import BaseModel

from test_server import _metrics, _pair, running

KEY = "test-key"
MESSAGES = [{"role": "user", "content": "the cat is on"}]


@pytest.fixture(scope="module")
def server(tiny):
    with running([*_pair(tiny), "-c", "512", "--alias", "tiny", "--api-key", KEY]) as s:
        s.http.headers["authorization"] = f"Bearer {KEY}"
        yield s


def _client(server, key=KEY):
    return ollama.Client(host=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=600)


def _openai(server, key=KEY):
    return OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=600)


SAMPLING = [({"temperature": 0}, {"temperature": 0}),
            ({"temperature": 1.0, "top_k": 20, "seed": 3}, {"temperature": 1.0, "extra_body": {"top_k": 20}, "seed": 3})]


@pytest.mark.parametrize("options, chat_kw", SAMPLING, ids=["greedy", "seeded"])
def test_a_chat_is_the_chat_completion_of_its_messages(server, options, chat_kw):
    messages = [{"role": "system", "content": "you are terse"}, {"role": "user", "content": "the cat is"},
                {"role": "assistant", "content": "on the mat"}, {"role": "user", "content": "and the dog"}]
    with _client(server) as client:
        _chat_and_stream(client, server, messages, options, chat_kw)


def _chat_and_stream(client, server, messages, options, chat_kw):
    r = client.chat(model="tiny", messages=messages, options=dict(options, num_predict=12))
    with _openai(server) as oc:
        chat = oc.chat.completions.create(model="tiny", messages=messages, max_tokens=12, **chat_kw)
    assert r.done and r.message.role == "assistant" and r.message.content == chat.choices[0].message.content
    assert r.done_reason == "length" and r.eval_count == 12 == chat.usage.completion_tokens
    assert r.prompt_eval_count == chat.usage.prompt_tokens and r.eval_duration > 0 and r.total_duration > 0
    parts = list(client.chat(model="tiny:latest", messages=messages, options=dict(options, num_predict=12),
                             stream=True))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].done_reason == "length"
    assert "".join(p.message.content for p in parts) == r.message.content
    assert (parts[-1].eval_count, parts[-1].prompt_eval_count) == (r.eval_count, r.prompt_eval_count)


@pytest.mark.parametrize("options, chat_kw", SAMPLING, ids=["greedy", "seeded"])
def test_a_generate_is_the_completion_of_its_prompt(server, options, chat_kw):
    with _client(server) as client:
        _generate(client, server, options, chat_kw)


def _generate(client, server, options, chat_kw):
    opts = dict(options, num_predict=10)
    templated = client.generate(model="tiny", prompt="the cat is", system="you are terse", options=opts)
    raw = client.generate(model="tiny", prompt="the cat is", raw=True, options=opts)
    with _openai(server) as oc:
        chat = oc.chat.completions.create(model="tiny", max_tokens=10, **chat_kw, messages=[
            {"role": "system", "content": "you are terse"}, {"role": "user", "content": "the cat is"}])
        text = oc.completions.create(model="tiny", prompt="the cat is", max_tokens=10, **chat_kw)
    assert templated.response == chat.choices[0].message.content
    assert templated.prompt_eval_count == chat.usage.prompt_tokens
    assert raw.response == text.choices[0].text and raw.prompt_eval_count == text.usage.prompt_tokens
    assert raw.response != templated.response  # (the control: the template made another prompt)
    streamed = list(client.generate(model="tiny", prompt="the cat is", raw=True, options=opts, stream=True))
    assert "".join(p.response for p in streamed) == raw.response and streamed[-1].done


def test_the_stream_is_lines_of_json(server):
    with server.http.stream("POST", "/api/chat", json={"model": "tiny", "messages": MESSAGES,
                                                       "options": {"num_predict": 4, "temperature": 0}}) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in r.iter_lines() if line]
    assert lines[-1]["done"] is True and all(line["done"] is False for line in lines[:-1])
    assert all(line["model"] == "tiny" and line["created_at"].endswith("Z") for line in lines)
    whole = server.http.post("/api/chat", json={"model": "tiny", "messages": MESSAGES, "stream": False,
                                                "options": {"num_predict": 4, "temperature": 0}}).json()
    assert "".join(line["message"]["content"] for line in lines) == whole["message"]["content"]


def test_a_stop_ends_the_answer_and_nothing_to_generate_loads(server):
    with _client(server) as client:
        _stop_and_load(client)


def _stop_and_load(client):
    free = client.generate(model="tiny", prompt="the cat is", raw=True, options={"temperature": 0, "num_predict": 12})
    stop = re.findall(r"[a-z]{2,}", free.response[1:])[0]  # a word after the first character
    cut = client.generate(model="tiny", prompt="the cat is", raw=True,
                          options={"temperature": 0, "num_predict": 12, "stop": [stop]})
    assert cut.done_reason == "stop" and stop not in cut.response and free.response.startswith(cut.response)
    assert client.generate(model="tiny", prompt="").done_reason == "load"
    assert client.chat(model="tiny", messages=[]).done_reason == "load"


def test_the_listings_describe_the_served_model(server, tiny):
    with _client(server) as client:
        _listings(client, server, tiny)


def _listings(client, server, tiny):
    [m] = client.list().models
    assert m.model == "tiny" and m.size == os.path.getsize(tiny.target_q) and len(m.digest) == 64
    assert m.details.format == "gguf" and m.details.family == "llama"
    shown = client.show("tiny")
    assert shown.modelinfo["llama.context_length"] == 512 and shown.parameters == "num_ctx 512"
    assert shown.capabilities == ["completion"] and "<|im_start|>" in shown.template  # (no tools, no FIM tokens)
    [p] = client.ps().models
    assert p.model == "tiny" and p.size_vram == 0 and p.digest == m.digest  # (nothing on a GPU here)
    assert server.http.get("/api/version").json() == {"version": specllama_version()}
    with pytest.raises(ollama.ResponseError) as err:
        client.show("nope")
    assert err.value.status_code == 404 and "does not exist" in err.value.error
    r = server.http.post("/api/show", json={"model": "tiny", "modle": 1})
    assert r.status_code == 400 and "unknown field 'modle'" in r.json()["error"]


def specllama_version():
    import specllama
    return specllama.__version__


BAD = [
    ("unknown field", "/api/chat", {"messages": MESSAGES, "keep": 1}, "unknown field 'keep'"),
    ("unknown option", "/api/chat", {"messages": MESSAGES, "options": {"num_predic": 3}}, "unknown option 'num_predic'"),
    ("mirostat", "/api/generate", {"prompt": "x", "options": {"mirostat": 2}}, "'options.mirostat' is not supported"),
    ("images", "/api/chat", {"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "images"),
    ("generate images", "/api/generate", {"prompt": "x", "images": ["aGk="]}, "'images' is not supported"),
    ("template", "/api/generate", {"prompt": "x", "template": "{{ .Prompt }}"}, "'template' is not supported"),
    ("context", "/api/generate", {"prompt": "x", "context": [1, 2]}, "send the conversation to /api/chat"),
    ("think", "/api/chat", {"messages": MESSAGES, "think": True}, "'think' is not supported"),
    ("think level", "/api/chat", {"messages": MESSAGES, "think": "high"}, "'think' is not supported"),
    ("bad think", "/api/chat", {"messages": MESSAGES, "think": "highest"}, "'think' must be true, false or a level"),
    ("raw think", "/api/generate", {"prompt": "x", "raw": True, "think": True}, "'think' needs a chat prompt"),
    ("format", "/api/chat", {"messages": MESSAGES, "format": "yaml"}, "'format' must be"),
    ("stream", "/api/chat", {"messages": MESSAGES, "stream": "yes"}, "'stream' must be a boolean"),
    ("messages", "/api/chat", {"messages": "hi"}, "'messages' must be a list"),
    ("tool call", "/api/chat", {"messages": [{"role": "assistant", "tool_calls": [{"name": "f"}]}]}, "tool_calls[0]"),
    ("message field", "/api/chat", {"messages": [{"role": "user", "text": "x"}]}, "unknown field 'text'"),
    ("prompt", "/api/generate", {"prompt": 3}, "'prompt' must be a string"),
    ("no fim", "/api/generate", {"prompt": "def f(", "suffix": "\n"}, "fill-in-the-middle"),
    ("num_predict", "/api/generate", {"prompt": "x", "options": {"num_predict": "3"}}, "must be an integer"),
    ("not json", "/api/chat", None, "not valid JSON"),
]


@pytest.mark.parametrize("what, path, body, message", BAD, ids=[b[0] for b in BAD])
def test_what_cannot_be_served_is_an_error(server, what, path, body, message):
    if body is None:
        r = server.http.post(path, content=b"{", headers={"content-type": "application/json"})
    else:
        r = server.http.post(path, json=dict({"model": "tiny"}, **body))
    assert r.status_code == 400 and set(r.json()) == {"error"} and message in r.json()["error"], r.text
    assert server.http.post("/api/generate", json={"model": "tiny", "prompt": "x", "stream": False,
                                                   "options": {"num_predict": 1}}).json()["done"]


def test_the_api_key_is_required(server):
    with _client(server, key="wrong") as client, pytest.raises(ollama.ResponseError) as err:
        client.chat(model="tiny", messages=MESSAGES)
    assert err.value.status_code == 401


def test_a_client_that_leaves_a_stream_stops_its_generation(slow):
    with running(["-m", slow.target, "--no-draft", "-c", "4096", "-np", "1"]) as server:
        body = {"prompt": "the cat", "raw": True, "options": {"num_predict": 4000}}
        with server.http.stream("POST", "/api/generate", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()  # (held: a line iterator let go closes the connection)
            next(line for line in lines if json.loads(line)["response"])
            assert server.health()["slots_processing"] == 1
        server.wait_for(lambda h: h["slots_processing"] == 0, "the slot free again")
        assert _metrics(server)["specllama_generated_tokens_total"] < 4000


# -- on the Qwen2.5-Coder pair ---------------------------------------------------------------------

# (keys in the order the ollama client writes its Tool model, so that the chat request gets the same JSON)
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}}}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


@pytest.mark.real_pair
def test_tool_calls_and_their_results(qwen_server):
    """The model's call comes back as Ollama's tool_calls (arguments an object), whole and streamed;
    sent back with the tool's answer it makes the prompt the chat conversation makes."""
    with ollama.Client(host=qwen_server.url, timeout=600) as client:
        _tool_round_trip(client, qwen_server)


def _tool_round_trip(client, qwen_server):
    r = client.chat(model="qwen", messages=ASK, tools=[WEATHER], options={"temperature": 0, "num_predict": 100})
    [call] = r.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    parts = list(client.chat(model="qwen", messages=ASK, tools=[WEATHER], stream=True,
                             options={"temperature": 0, "num_predict": 100}))
    assert [c.function.arguments for p in parts for c in (p.message.tool_calls or [])] == [{"city": "Paris"}]
    follow = client.chat(model="qwen", tools=[WEATHER], options={"temperature": 0, "num_predict": 24}, messages=[
        *ASK, {"role": "assistant", "content": "", "tool_calls": [call.model_dump(exclude_none=True)]},
        {"role": "tool", "content": "22 C, sunny", "tool_name": "get_weather"}])
    with _openai(qwen_server, key="none") as oc:
        chat = oc.chat.completions.create(model="qwen", temperature=0, max_tokens=24, tools=[WEATHER], messages=[
            *ASK, {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_0", "type": "function",
                 "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "22 C, sunny"}])
    assert follow.prompt_eval_count == chat.usage.prompt_tokens
    assert follow.message.content == (chat.choices[0].message.content or "")


class City(BaseModel):
    name: str
    population: int


@pytest.mark.real_pair
@pytest.mark.slow
def test_a_format_holds_the_answer_and_a_suffix_fills_the_middle(qwen_server):
    with ollama.Client(host=qwen_server.url, timeout=600) as client:
        _format_and_fim(client, qwen_server)


def _format_and_fim(client, qwen_server):
    ask = dict(model="qwen", messages=[{"role": "user", "content": "Name a big city and its population."}],
               options={"temperature": 0, "num_predict": 64})
    assert City.model_validate_json(client.chat(format=City.model_json_schema(), **ask).message.content).name
    with pytest.raises(ValueError):  # (the control: without the format the reply is prose)
        City.model_validate_json(client.chat(**ask).message.content)
    assert json.loads(client.chat(format="json", **ask).message.content)
    prefix, suffix = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
    fim = client.generate(model="qwen", prompt=prefix, suffix=suffix, options={"temperature": 0, "num_predict": 16})
    with _openai(qwen_server, key="none") as oc:
        text = oc.completions.create(model="qwen", prompt=prefix, suffix=suffix, max_tokens=16, temperature=0)
    assert fim.response == text.choices[0].text and "a + b" in fim.response
    assert "insert" in client.show("qwen").capabilities and "tools" in client.show("qwen").capabilities
