"""Reasoning models: the thinking (<think>...</think>) split from the answer (the parser, its stream
form against the whole-text form over every way a reply can be cut into steps; reasoning_content
from the Python API and a real server, Responses reasoning items, Anthropic thinking blocks and
Ollama's think, each with its own client; a grammar makes the tiny model write the tags, as a
reasoning model would); grammars that let the model think first (a schema's after a thinking block,
a lazy one reading from after the thinking), checked against llama.cpp's grammar engine and by
chi-square; the chat templates of reasoning models; --chat-template-kwargs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specllama
from specllama import RequestError, reasoning
from test_server import running

ROOT = Path(specllama.__file__).parent.parent


@pytest.mark.parametrize("text, opened, want", [
    ("<think>\nLet me see.\n</think>\n\nParis.", False, ("Let me see.", "Paris.")),
    ("  <think>a</think>b", False, ("a", "b")),
    ("Paris.", False, (None, "Paris.")),
    ("  Paris.", False, (None, "  Paris.")),
    ("The tag <think> is HTML-like.", False, (None, "The tag <think> is HTML-like.")),
    ("<think>cut off in the middle", False, ("cut off in the middle", "")),
    ("<think>\n\n</think>\n\nParis.", False, (None, "Paris.")),
    ("<thi", False, (None, "<thi")),
    ("Let me see.\n</think>\n\nParis.", True, ("Let me see.", "Paris.")),
    ("</think>Paris.", True, (None, "Paris.")),
    ("still thinking", True, ("still thinking", "")),
    ("<think>a</think>b</think>c", False, ("a", "b</think>c")),
    ("<|channel>thought\nLet me see.<channel|>Paris.", False, ("Let me see.", "Paris.")),  # Gemma 4's
    ("<|channel>thought\n<channel|>Paris.", False, (None, "Paris.")),
    ("<|channel>thought\ncut off", False, ("cut off", "")),
    ("<think>a<channel|>b", False, ("a<channel|>b", "")),
    ("a<channel|>b", ("<|channel>thought", "<channel|>"), ("a", "b")),
])
def test_split(text, opened, want):
    assert reasoning.split(text, opened) == want


def test_a_prompt_that_opens_the_thinking():
    assert reasoning.opened_by("<|im_start|>assistant\n<think>\n") == ("<think>", "</think>")
    assert reasoning.opened_by("<|turn>model\n<|channel>thought\n") == ("<|channel>thought", "<channel|>")
    assert not reasoning.opened_by("<|turn>model\n<|channel>thought\n<channel|>")  # Gemma 4, thinking off
    assert not reasoning.opened_by("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # thinking turned off
    assert not reasoning.opened_by("<|im_start|>assistant\n")
    # a prompt that continues an assistant's message: open where it was opened before or in the
    # message's text and not closed in it
    assert reasoning.opened_by("assistant\n<think>\nThe user", "The user") == ("<think>", "</think>")
    assert reasoning.opened_by("assistant\n<think>The user", "<think>The user") == ("<think>", "</think>")
    assert reasoning.opened_by("assistant\n[THINK]a[/THINK]b[THINK]c", "[THINK]a[/THINK]b[THINK]c") == \
        ("[THINK]", "[/THINK]")
    assert not reasoning.opened_by("assistant\n<think>\nHm.</think>The", "Hm.</think>The")
    assert not reasoning.opened_by("assistant\n<think>a</think>The", "<think>a</think>The")
    assert not reasoning.opened_by("user\nWhy <think>?\nassistant\nThe", "The")  # (opened in the user's text)
    with pytest.raises(ValueError):
        reasoning.opened_by("assistant\n<think>\n", "The user")


def _streamed(text, cuts, opened):
    s = reasoning.StreamSplitter(opened)
    pieces, at = [], 0
    for cut in sorted(set(cuts)) + [len(text)]:
        pieces += s.feed(text[at:cut])
        at = cut
    pieces += s.finish()
    assert all(t for _, t in pieces)  # no empty piece
    thought = "".join(t for k, t in pieces if k == reasoning.REASONING)
    content = "".join(t for k, t in pieces if k == reasoning.CONTENT)
    kinds = [k for k, _ in pieces]
    assert kinds == sorted(kinds, key=lambda k: k == reasoning.CONTENT)  # the thinking comes first
    return thought or None, content


_FRAGMENTS = st.sampled_from(["<think>", "</think>", "<", "</", "<th", "</thi", "think>", " ", "\n", "a", "b c", ">",
                              "<|channel>thought", "<channel|>", "<|chan", "<channel", "|>"])


@settings(max_examples=400, deadline=None)
@given(st.lists(_FRAGMENTS, max_size=12).map("".join), st.lists(st.integers(0, 60), max_size=8),
       st.sampled_from([None, *reasoning.MARKUPS]))
def test_a_stream_says_what_the_whole_text_says_however_it_is_cut(text, cuts, opened):
    assert _streamed(text, [c for c in cuts if c <= len(text)], opened) == reasoning.split(text, opened)


_GEMMA_REPLY = "Hello, world!\nWhat's up?"


@pytest.mark.parametrize("text, opened, want", [  # (the first six are llama.cpp's Gemma 4 cases)
    ("<|channel>thought\nI'm\nthinking<channel|>" + _GEMMA_REPLY, False, ("I'm\nthinking", _GEMMA_REPLY)),
    ("<|channel>thought\n<channel|>" + _GEMMA_REPLY + "<channel|>", False, (None, _GEMMA_REPLY)),
    ("<|channel>thought\n<channel|>" + _GEMMA_REPLY + "<|channel>thought\n<channel|>", False, (None, _GEMMA_REPLY)),
    ("<|channel>thought\n<channel|>" + _GEMMA_REPLY + "<|channel>thought\n<channel|><channel|>", False,
     (None, _GEMMA_REPLY)),
    ("<|channel><|channel>thought\n<channel|>" + _GEMMA_REPLY, False, (None, _GEMMA_REPLY)),
    ("<|channel>thought<channel|>" + _GEMMA_REPLY, False, (None, _GEMMA_REPLY)),
    (_GEMMA_REPLY + "<channel|>", False, (None, _GEMMA_REPLY)),
    ("A<|channel>thought\nB<channel|>C", False, ("B", "AC")),
    ("<|channel>thought X<channel|>Y<|channel>thought\n Z <channel|>\nW", False, ("X\nZ", "YW")),
    ("still thinking<channel|>Paris.<channel|>", reasoning.MARKUPS[1], ("still thinking", "Paris.")),
    ("Paris.<|channel>", False, (None, "Paris.")),
    ("Paris.<|chan", False, (None, "Paris.<|chan")),
])
def test_gemma4s_channels(text, opened, want):
    """Gemma 4's channel markup read as llama-server reads it: thought blocks anywhere are the
    thinking, an empty one or a lone tag at the end of the answer (or anywhere) is dropped.
    Negative control: read as other markups are, the tags stay in the content."""
    assert reasoning.split(text, opened, channels=True) == want
    other_tags = re.sub(r"^<\|channel>thought.*?<channel\|>", "", text, flags=re.S) if not opened else \
        text.replace("<channel|>", "", 1)
    if "<|channel>" in other_tags or "<channel|>" in other_tags:
        assert reasoning.split(text, opened) != want


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["<|channel>", "thought", "<|channel>thought", "<channel|>", "<|chan", "<chan",
                                 "nel|>", " ", "\n", "a", "b c", "thou"]), max_size=12).map("".join),
       st.lists(st.integers(0, 60), max_size=8), st.sampled_from([None, reasoning.MARKUPS[1]]))
def test_gemma4s_channels_streamed_as_whole(text, cuts, opened):
    s = reasoning.StreamSplitter(opened, channels=True)
    pieces, at = [], 0
    for cut in sorted(set(c for c in cuts if c <= len(text))) + [len(text)]:
        pieces += s.feed(text[at:cut])
        at = cut
    pieces += s.finish()
    assert all(t for _, t in pieces)
    thought = "".join(t for k, t in pieces if k == reasoning.REASONING) or None
    assert (thought, "".join(t for k, t in pieces if k == reasoning.CONTENT)) == \
        reasoning.split(text, opened, channels=True)


def test_a_stream_passes_on_what_is_certain_at_once():
    s = reasoning.StreamSplitter()
    assert s.feed(" <th") == []  # may open a thinking block
    assert s.feed("ink>\nSo") == [("reasoning", "So")]
    assert s.feed(" it is  ") == [("reasoning", " it is")]  # whitespace that may end it waits
    assert s.feed("</th") == []
    assert s.feed("ink>\n\nPar") == [("content", "Par")]
    assert s.feed("is.") == [("content", "is.")] and s.finish() == []
    s = reasoning.StreamSplitter()
    assert s.feed("Hello") == [("content", "Hello")]  # not a thinking block: content from the start


THINK_GRAMMAR = 'root ::= "<think>" [a-z]{2,8} " " [a-z]{2,8} "</think>" "\\n\\n" [a-z]{2,8} " " [a-z]{2,8}'


GEMMA4_GRAMMAR = 'root ::= "<|channel>thought\\n" [a-z]{2,8} " " [a-z]{2,8} "<channel|>" [a-z]{2,8} " " [a-z]{2,8}'


MAGISTRAL_GRAMMAR = 'root ::= "[THINK]" [a-z]{2,8} " " [a-z]{2,8} "[/THINK]" [a-z]{2,8} " " [a-z]{2,8}'


@pytest.mark.parametrize("grammar, open_tag, close", [(THINK_GRAMMAR, "<think>", "</think>\n\n"),
                                                      (GEMMA4_GRAMMAR, "<|channel>thought\n", "<channel|>"),
                                                      (MAGISTRAL_GRAMMAR, "[THINK]", "[/THINK]")],
                         ids=["think", "gemma4", "mistral"])
def test_a_chat_completion_carries_the_thinking_apart(tiny, grammar, open_tag, close):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        msgs = [{"role": "user", "content": "the cat"}]
        for seed in range(3):
            kw = dict(grammar=grammar, temperature=1.0, seed=seed, max_tokens=90)
            whole = dec.create_chat_completion(msgs, reasoning_format="none", **kw)["choices"][0]["message"]
            text = whole["content"]
            assert text.startswith(open_tag) and "reasoning_content" not in whole
            want_thought, want_content = text[len(open_tag):text.index(close)], text[text.index(close) + len(close):]
            msg = dec.create_chat_completion(msgs, **kw)["choices"][0]["message"]
            assert (msg["reasoning_content"], msg["content"]) == (want_thought, want_content)
            assert dec.create_chat_completion(msgs, reasoning_format="deepseek", **kw)["choices"][0]["message"] == msg
            thought, content, roles = "", "", []
            for chunk in dec.create_chat_completion(msgs, stream=True, **kw):
                for choice in chunk["choices"]:
                    thought += choice["delta"].get("reasoning_content", "")
                    content += choice["delta"].get("content") or ""
                    roles.append(choice["delta"].get("role"))
            assert (thought, content) == (want_thought, want_content) and roles[0] == "assistant"
        with pytest.raises(RequestError, match="reasoning_format") as err:
            dec.create_chat_completion(msgs, reasoning_format="hidden", max_tokens=2)
        assert err.value.param == "reasoning_format"


OPENING_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
                    "{{ m.content }}<|im_end|>\n{% endfor %}"
                    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


def test_a_reply_inside_a_thinking_block_the_template_opened(tiny, tmp_path):
    template = tmp_path / "opens_thinking.jinja"
    template.write_text(OPENING_TEMPLATE)
    grammar = 'root ::= [a-z]{2,8} "\\n</think>\\n\\n" [a-z]{2,8}'
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        msgs = [{"role": "user", "content": "the cat"}]
        kw = dict(grammar=grammar, temperature=1.0, seed=4, max_tokens=40, chat_template=str(template))
        text = dec.create_chat_completion(msgs, reasoning_format="none", **kw)["choices"][0]["message"]["content"]
        msg = dec.create_chat_completion(msgs, **kw)["choices"][0]["message"]
        assert msg["reasoning_content"] == text.split("\n")[0] and msg["content"] == text.split("\n")[-1]
        # the same text without the template's opening tag is an answer with no thinking
        msg = dec.create_chat_completion(msgs, **dict(kw, chat_template=None))["choices"][0]["message"]
        assert "reasoning_content" not in msg and "</think>" in msg["content"]


CONTINUING_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n"
                       "{% if m.reasoning_content %}<think>\n{{ m.reasoning_content }}\n</think>\n\n{% endif %}"
                       "{{ m.content }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("last, opens", [({"content": "", "reasoning_content": "so"}, True),
                                         ({"content": "<think>so"}, True),
                                         ({"content": "<think>so</think>it"}, False),
                                         ({"content": "so"}, False)],
                         ids=["reasoning_content", "opened_in_content", "closed_in_content", "content"])
def test_a_continued_message_goes_on_thinking_where_its_thinking_is_open(tiny, tmp_path, last, opens):
    """A conversation that ends with an assistant's message is continued from it: where the message
    has thinking and no text yet (or its text opens a thinking block it does not close), the reply
    goes on inside the thinking, which comes back as reasoning_content up to the closing tag, whole
    and streamed alike; the continuation only, not the message given. Negative controls: a message
    whose thinking is closed, or that has none, is continued as text."""
    template = tmp_path / "continues.jinja"
    template.write_text(CONTINUING_TEMPLATE)
    grammar = 'root ::= [a-z]{2,8} "</think>" [a-z]{2,8}'
    msgs = [{"role": "user", "content": "the cat"}, dict(last, role="assistant")]
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        for seed in range(3):
            kw = dict(grammar=grammar, temperature=1.0, seed=seed, max_tokens=40, chat_template=str(template))
            text = dec.create_chat_completion(msgs, reasoning_format="none", **kw)["choices"][0]["message"]["content"]
            thought, answer = text.split("</think>")
            msg = dec.create_chat_completion(msgs, **kw)["choices"][0]["message"]
            if opens:
                assert (msg.get("reasoning_content"), msg["content"]) == (thought, answer)
            else:
                assert "reasoning_content" not in msg and msg["content"] == text
            deltas = [c["choices"][0]["delta"] for c in dec.create_chat_completion(msgs, stream=True, **kw)
                      if c["choices"]]
            assert "".join(d.get("reasoning_content", "") for d in deltas) == msg.get("reasoning_content", "")
            assert "".join(d.get("content") or "" for d in deltas) == msg["content"]


def test_a_tool_call_after_the_thinking(tiny):
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    grammar = ('root ::= "<think>" [a-z]{2,8} "</think>\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", '
               '\\"arguments\\": {\\"city\\": \\"" [a-z]{2,8} "\\"}}\\n</tool_call>"')
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=1024) as dec:
        kw = dict(grammar=grammar, temperature=1.0, seed=5, max_tokens=200, tools=[weather])
        msgs = [{"role": "user", "content": "the cat"}]
        r = dec.create_chat_completion(msgs, **kw)["choices"][0]
        assert r["finish_reason"] == "tool_calls" and r["message"]["content"] is None
        assert r["message"]["reasoning_content"].isalpha()
        city = json.loads(r["message"]["tool_calls"][0]["function"]["arguments"])["city"]
        thought, calls = "", []
        for chunk in dec.create_chat_completion(msgs, stream=True, **kw):
            for choice in chunk["choices"]:
                thought += choice["delta"].get("reasoning_content", "")
                calls += choice["delta"].get("tool_calls") or []
                assert not choice["delta"].get("content")
        assert thought == r["message"]["reasoning_content"]
        assert json.loads(calls[0]["function"]["arguments"]) == {"city": city}


@pytest.fixture(scope="module")
def thinking_servers(tiny):
    args = ["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "256"]
    with running(args) as auto, running(args + ["--reasoning-format", "none"]) as none:
        yield auto, none


@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_client_reads_the_thinking_from_the_server(thinking_servers, stream):
    from openai import OpenAI

    auto, none = thinking_servers
    kw = dict(model="target_q4_1", messages=[{"role": "user", "content": "the cat"}], temperature=1.0, seed=7,
              max_tokens=60, extra_body={"grammar": THINK_GRAMMAR})

    def ask(server, **fields):
        extra = dict(kw, extra_body=dict(kw["extra_body"], **fields))
        with OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
            if not stream:
                m = client.chat.completions.create(**extra).choices[0].message
                return (m.model_extra or {}).get("reasoning_content"), m.content
            thought, content = "", ""
            for chunk in client.chat.completions.create(stream=True, **extra):
                for choice in chunk.choices:
                    thought += (choice.delta.model_extra or {}).get("reasoning_content") or ""
                    content += choice.delta.content or ""
            return thought or None, content

    whole = ask(none)
    assert whole[0] is None and whole[1].startswith("<think>")
    assert ask(auto) == reasoning.split(whole[1]) and ask(auto)[0]
    assert ask(none, reasoning_format="auto") == ask(auto)
    assert ask(auto, reasoning_format="none") == whole


@pytest.fixture(scope="module")
def opening_server(tiny, tmp_path_factory):
    template = tmp_path_factory.mktemp("templates") / "opens_thinking.jinja"
    template.write_text(OPENING_TEMPLATE)
    with running(["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "256", "--alias", "tiny",
                  "--chat-template", str(template)]) as s:
        yield s


def test_ollamas_think_field(opening_server):
    """A reply that starts inside the thinking its template opened, and never closes it (the tiny
    model does not write </think>): think true, all of it is message.thinking; think false, it is
    the content, as it is for Ollama's own clients that turn thinking off."""
    import ollama

    with ollama.Client(host=opening_server.url, timeout=600) as client:
        assert "thinking" in client.show("tiny").capabilities
        kw = dict(model="tiny", messages=[{"role": "user", "content": "the cat"}],
                  options={"temperature": 1.0, "seed": 3, "num_predict": 16})
        plain = client.chat(think=False, **kw).message
        assert plain.content and plain.thinking is None
        r = client.chat(think=True, **kw).message
        assert (r.thinking, r.content) == (plain.content.strip(), "")
        assert client.chat(**kw).message.thinking == r.thinking  # not given: the thinking comes apart too
        parts = list(client.chat(think=True, stream=True, **kw))
        assert "".join(p.message.thinking or "" for p in parts) == r.thinking
        assert "".join(p.message.content for p in parts) == "" and parts[-1].done
        g = client.generate(model="tiny", prompt="the cat", think=True, options=kw["options"])
        assert g.thinking and g.response == ""
        # a past turn's thinking reaches the template as reasoning_content
        history = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b", "thinking": "c d e"},
                   {"role": "user", "content": "d"}]
        with_thinking = client.chat(**dict(kw, messages=history)).prompt_eval_count
        history[1].pop("thinking")
        assert with_thinking > client.chat(**dict(kw, messages=history)).prompt_eval_count


def test_a_responses_reply_starts_with_a_reasoning_item(thinking_servers):
    from openai import OpenAI

    auto, none = thinking_servers
    kw = dict(model="target_q4_1", input="the cat", temperature=1.0, max_output_tokens=60,
              extra_body={"grammar": THINK_GRAMMAR, "seed": 8})
    with OpenAI(base_url=none.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        thought, content = reasoning.split(client.responses.create(**kw).output_text)
    with OpenAI(base_url=auto.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        r = client.responses.create(**kw)
        assert [o.type for o in r.output] == ["reasoning", "message"]
        assert r.output[0].content[0].text == thought and r.output_text == content
        events = list(client.responses.create(stream=True, **kw))
        deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        done = [e.item for e in events if e.type == "response.output_item.done"]
        assert deltas == thought and [i.type for i in done] == ["reasoning", "message"]
        assert done[0].content[0].text == thought and done[0].status == "completed"
        final = events[-1].response
        assert events[-1].type == "response.completed" and [o.type for o in final.output] == ["reasoning", "message"]
        assert final.output[0].content[0].text == thought and final.output_text == content
        with client.responses.stream(**kw) as stream:
            assert stream.get_final_response().output[0].content[0].text == thought


def test_an_anthropic_reply_starts_with_a_thinking_block(thinking_servers):
    from anthropic import Anthropic

    auto, none = thinking_servers
    kw = dict(model="target_q4_1", max_tokens=60, messages=[{"role": "user", "content": "the cat"}],
              extra_body={"grammar": THINK_GRAMMAR, "seed": 9, "temperature": 1.0})
    with Anthropic(base_url=none.url, api_key="none", max_retries=0, timeout=600) as client:
        thought, content = reasoning.split(client.messages.create(**kw).content[0].text)
    with Anthropic(base_url=auto.url, api_key="none", max_retries=0, timeout=600) as client:
        m = client.messages.create(**kw)
        assert [b.type for b in m.content] == ["thinking", "text"]
        assert (m.content[0].thinking, m.content[1].text) == (thought, content)
        events = list(client.messages.create(stream=True, **kw))
        deltas = "".join(e.delta.thinking for e in events if e.type == "content_block_delta"
                         and e.delta.type == "thinking_delta")
        starts = [(e.index, e.content_block.type) for e in events if e.type == "content_block_start"]
        assert deltas == thought and starts == [(0, "thinking"), (1, "text")]
        with client.messages.stream(**kw) as stream:
            final = stream.get_final_message()
        assert [b.type for b in final.content] == ["thinking", "text"] and final.content[0].thinking == thought


def test_past_thinking_reaches_the_template(opening_server):
    """A Responses reasoning item before the assistant's message, and an Anthropic thinking block,
    reach the chat template as that message's reasoning_content (this template writes it out)."""
    from anthropic import Anthropic
    from openai import OpenAI

    def turns(thought):
        return [{"role": "user", "content": "a"}, *thought, {"role": "assistant", "content": "b"},
                {"role": "user", "content": "d"}]

    with OpenAI(base_url=opening_server.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        sizes = [client.responses.create(model="tiny", max_output_tokens=1, input=turns(t)).usage.input_tokens
                 for t in ([], [{"type": "reasoning", "summary": [],
                                 "content": [{"type": "reasoning_text", "text": "c d e"}]}])]
        assert sizes[1] > sizes[0]
    with Anthropic(base_url=opening_server.url, api_key="none", max_retries=0, timeout=600) as client:
        sizes = [client.messages.count_tokens(model="tiny", messages=[
            {"role": "user", "content": "a"},
            {"role": "assistant", "content": blocks + [{"type": "text", "text": "b"}]},
            {"role": "user", "content": "d"}]).input_tokens
            for blocks in ([], [{"type": "thinking", "thinking": "c d e", "signature": ""}])]
        assert sizes[1] > sizes[0]


# -- a grammar that lets the model think before the answer it holds ----------------------------------

_GRAMMAR_FRAGMENTS = st.sampled_from(["<think>", "</think>", "<", "</thi", "nk>", "</think", " ", "\n", "a", "b",
                                      ">", "/", "k", "<|channel>thought", "<channel|>", "<chan", "nel|>", "<channel"])


def _thinks_then_answers(text, opened, markup):
    """What the wrapped grammar must admit: (a thinking block in markup, optional unless the prompt
    opened it) then the answer's grammar, [a-z]+."""
    open_tag, close = markup
    head = "" if opened else r"[ \t\n]{0,8}" + re.escape(open_tag)
    m = re.fullmatch(head + r"(.*?)" + re.escape(close) + r"[ \t\n]{0,8}[a-z]+", text, re.S)
    return bool(m and close not in m.group(1)) or (not opened and bool(re.fullmatch("[a-z]+", text)))


def _fragments(max_size):
    return st.lists(_GRAMMAR_FRAGMENTS, max_size=max_size).map("".join)


# texts shaped as a thinking block then an answer, each part drawn from fragments that may break it
def _shaped(open_tag, close):
    return st.tuples(st.sampled_from(["", " ", "\n\n"]), st.sampled_from(["", open_tag, open_tag[:4]]), _fragments(6),
                     st.sampled_from(["", close, close + "\n\n", close[:-1]]), _fragments(4)).map("".join)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
@pytest.mark.parametrize("markup", reasoning.MARKUPS, ids=["think", "gemma4", "mistral", "seed", "command"])
def test_the_thinking_grammar_admits_a_thinking_block_then_the_answer(grammar_text, markup, data):
    text = data.draw(st.one_of(_shaped(*markup), _fragments(10)))
    opened = data.draw(st.booleans())
    gbnf, start = reasoning.grammar_after_thinking('answer ::= [a-z]+', "answer", markup, opened)
    assert grammar_text.admits(f"{gbnf}root ::= {start}\n", text) == _thinks_then_answers(text, opened, markup)


def test_the_thinking_grammar_on_examples(grammar_text):
    gbnf, start = reasoning.grammar_after_thinking('answer ::= [a-z]+', "answer")
    g = f"{gbnf}root ::= {start}\n"
    for text in ["abc", "<think>x < y, </th </thinking> <<</think>\n\nabc", " <think></think>abc"]:
        assert grammar_text.admits(g, text), text
    for text in ["<think>a</think>b</think>c", "<think>abc", "x<think>a</think>b", "<think>a</think>"]:
        assert not grammar_text.admits(g, text), text
    gbnf, start = reasoning.grammar_after_thinking('answer ::= [a-z]+', "answer", reasoning.MARKUPS[1])
    g = f"{gbnf}root ::= {start}\n"
    assert grammar_text.admits(g, "<|channel>thought\nx <channel <chan|> <<channel|>abc")
    assert not grammar_text.admits(g, "<|channel>thought\na<channel|>b<channel|>c")


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def test_a_schema_holds_after_the_thinking_the_template_opened(tiny, tmp_path):
    """With the thinking open, the reply may not start as the JSON does: the schema holds after it."""
    template = tmp_path / "opens_thinking.jinja"
    template.write_text(OPENING_TEMPLATE)
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    thoughts = []
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        msgs = [{"role": "user", "content": "the cat"}]
        for seed in range(3):
            kw = dict(response_format=fmt, temperature=1.0, seed=seed, max_tokens=24, chat_template=str(template))
            msg = dec.create_chat_completion(msgs, **kw)["choices"][0]["message"]
            assert msg["reasoning_content"] and "</think>" not in msg["reasoning_content"]
            thoughts.append(msg["reasoning_content"])
            # without the split, the grammar holds from the reply's first token
            text = dec.create_chat_completion(msgs, reasoning_format="none", **kw)["choices"][0]["message"]["content"]
            assert text.lstrip().startswith("{")
    assert not all(t.startswith("{") for t in thoughts)  # (the tiny model's thinking is its own, not the JSON)


@pytest.mark.real_pair
@pytest.mark.parametrize("reasoning_format", ["auto", "none"])
def test_the_real_pair_thinks_then_answers_by_the_schema(qwen_decoder, tmp_path, reasoning_format):
    """Qwen2.5-Coder with its template made to open a thinking block, asked to think and then answer
    by a JSON schema: it closes its thinking and the answer follows the schema; without the split
    the answer is the JSON from the first token."""
    source = qwen_decoder.target_model.chat_template
    opening = source.replace("{{- '<|im_start|>assistant\\n' }}\n{%- endif %}",
                             "{{- '<|im_start|>assistant\\n<think>\\n' }}\n{%- endif %}")
    assert opening != source
    template = tmp_path / "qwen_opens_thinking.jinja"
    template.write_text(opening)
    msgs = [{"role": "system",
             "content": "Think step by step inside <think></think> tags, then answer with JSON only."},
            {"role": "user", "content": "Alice was born in 1990. It is 2024. Give her name and age as JSON."}]
    r = qwen_decoder.create_chat_completion(
        msgs, chat_template=str(template), temperature=0, max_tokens=200, reasoning_format=reasoning_format,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})["choices"][0]
    assert r["finish_reason"] == "stop"
    answer = json.loads(r["message"]["content"])
    assert isinstance(answer["name"], str) and isinstance(answer["age"], int)
    assert bool(r["message"].get("reasoning_content")) == (reasoning_format == "auto")


# -- template variables given once: --chat-template-kwargs ------------------------------------------

SWITCHABLE_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                       "{% if add_generation_prompt %}<|im_start|>assistant\n"
                       "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}"
                       "{% endif %}")


def test_template_variables_for_every_request(tiny, tmp_path):
    """serve --chat-template-kwargs sets variables a request's chat_template_kwargs (and Ollama's
    think) override; generate and chat take the same option."""
    import ollama
    from openai import OpenAI

    template = tmp_path / "switchable.jinja"
    template.write_text(SWITCHABLE_TEMPLATE)
    args = ["-m", tiny.target_q, "-d", tiny.draft_q, "-c", "256", "--alias", "tiny", "--chat-template", str(template)]
    kw = dict(model="tiny", messages=[{"role": "user", "content": "the cat"}], max_tokens=1)
    with running(args + ["--chat-template-kwargs", '{"enable_thinking": false}']) as s:
        with OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
            off = client.chat.completions.create(**kw).usage.prompt_tokens
            on = client.chat.completions.create(**kw, extra_body={"chat_template_kwargs": {"enable_thinking": True}})
            assert on.usage.prompt_tokens < off
        with ollama.Client(host=s.url, timeout=600) as client:
            think = dict(model="tiny", prompt="the cat", options={"num_predict": 1})
            assert client.generate(think=True, **think).prompt_eval_count == on.usage.prompt_tokens
            assert client.generate(**think).prompt_eval_count == off
    for command in (["generate", "--chat", "--json", "-n", "1"], ["chat", "-n", "1"]):
        sizes = []
        for extra in ([], ["--chat-template-kwargs", '{"enable_thinking": false}']):
            r = subprocess.run([sys.executable, "-m", "specllama", *command, "-m", tiny.target_q, "-d", tiny.draft_q,
                                "-c", "256", "--chat-template", str(template), *extra,
                                *(["the cat"] if command[0] == "generate" else [])],
                               input="the cat\n/stats\n", capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=tmp_path)
            assert r.returncode == 0, r.stderr
            sizes.append(json.loads(r.stdout)["stats"]["n_prompt"] if command[0] == "generate"
                         else int(re.search(r"(\d+) prompt tokens processed", r.stderr + r.stdout).group(1)))
        assert sizes[1] > sizes[0], (command, sizes)


# -- the templates of reasoning models (tests/data/chat_templates, from llama.cpp's models/templates) ------

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
THINKING_TEMPLATES = ["Qwen-Qwen3-0.6B", "HuggingFaceTB-SmolLM3-3B", "Qwen-QwQ-32B",
                      "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "google-gemma-4-31B-it", "Qwen-Qwen3.5-4B",
                      "mistralai-Ministral-3-14B-Reasoning-2512", "GLM-4.6", "GLM-4.7-Flash",
                      "LFM2.5-8B-A1B", "deepseek-ai-DeepSeek-V3.1", "NVIDIA-Nemotron-Nano-v2",
                      "CohereForAI-c4ai-command-r7b-12-2024-tool_use", "Apertus-8B-Instruct",
                      "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "deepseek-ai-DeepSeek-R1-Distill-Llama-8B",
                      "google-gemma-4-31B-it-interleaved", "llama-cpp-deepseek-r1", "openbmb-MiniCPM5-1B",
                      "ByteDance-Seed-OSS", "ibm-granite-granite-3.3-2B-Instruct", "Kimi-K2-Thinking",
                      "deepseek-ai-DeepSeek-V3.2", "deepseek-ai-DeepSeek-V4", "deepseek-ai-DeepSeek-V4-Flash-0731",
                      "MiniMax-M2"]


def _render(name, messages, **variables):
    from specllama import templates

    return templates.render_jinja((TEMPLATES / f"{name}.jinja").read_text(), messages, True, "", "", **variables)


def test_which_templates_have_a_thinking_mode():
    names = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
    assert set(THINKING_TEMPLATES) < set(names)
    for name in names:
        markup = reasoning.template_markup((TEMPLATES / f"{name}.jinja").read_text())
        assert (markup is not None) == (name in THINKING_TEMPLATES), name


def test_reasoning_templates_open_and_close_the_thinking():
    msgs = [{"role": "user", "content": "2+2?"}]
    assert not reasoning.opened_by(_render("Qwen-Qwen3-0.6B", msgs))  # the model opens it
    off = _render("Qwen-Qwen3-0.6B", msgs, enable_thinking=False)
    assert off.endswith("<think>\n\n</think>\n\n") and not reasoning.opened_by(off)
    assert reasoning.opened_by(_render("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", msgs, enable_thinking=True))
    assert reasoning.opened_by(_render("Qwen-QwQ-32B", msgs, enable_thinking=True))
    gemma = (TEMPLATES / "google-gemma-4-31B-it.jinja").read_text()
    assert reasoning.template_markup(gemma) == ("<|channel>thought", "<channel|>")
    assert reasoning.template_markup((TEMPLATES / "Qwen-Qwen3-0.6B.jinja").read_text()) == ("<think>", "</think>")
    off = _render("google-gemma-4-31B-it", msgs)  # Gemma 4 thinks only where asked
    assert off.endswith("<|channel>thought\n<channel|>") and not reasoning.opened_by(off)
    assert not reasoning.opened_by(_render("google-gemma-4-31B-it", msgs, enable_thinking=True))  # the model opens it


def test_qwen3_renders_the_thinking_of_a_call_in_progress():
    """Qwen3's template shows the reasoning_content of the assistant's turns after the last user
    message (a tool loop in progress), which is how past thinking sent back reaches the model."""
    call = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}
    msgs = [{"role": "user", "content": "Weather in Oslo?"},
            {"role": "assistant", "content": "", "reasoning_content": "I should look it up.", "tool_calls": [call]},
            {"role": "tool", "content": "sunny"}]
    prompt = _render("Qwen-Qwen3-0.6B", msgs)
    assert "<think>\nI should look it up.\n</think>\n\n<tool_call>" in prompt
    assert "I should look it up." not in _render("Qwen-Qwen3-0.6B", [dict(m, reasoning_content=None) for m in msgs])


@pytest.mark.slow
def test_sampling_under_the_thinking_grammar_follows_the_constrained_target(tiny):
    """The answer's grammar after an optional thinking block, from its own start rule: the first
    two sampled tokens follow the target's distribution under that grammar (llama.cpp's sampler,
    the same text from rule root); the negative controls are the target under the answer's grammar
    alone and without a grammar."""
    from test_grammar import CHAIN, N, _marginals
    from test_sampling_end_to_end import _pvalue, first_two_tokens, pvalue_or_zero

    answer = 'answer ::= (" the" | " cat" | " is" | " on" | " a" | " mat")+ "."'
    gbnf, start = reasoning.grammar_after_thinking(answer, "answer")
    as_root = f"{gbnf}root ::= {start}\n"
    prompt = specllama.Model(tiny.target).tokenize("the cat")
    p1, p2 = _marginals(tiny.target, prompt, gbnf=as_root)
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, N, grammar=gbnf,
                                                   grammar_root=start)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    answer_alone = _marginals(tiny.target, prompt, gbnf=answer.replace("answer ::=", "root ::="))
    assert pvalue_or_zero(firsts, answer_alone[0]) < 1e-6  # (the thinking block may start with a newline)
    assert pvalue_or_zero(seconds, _marginals(tiny.target, prompt, constrained=False)[1]) < 1e-6


# -- a lazy grammar (tool calls, "auto") reads the reply from after the thinking -----------------------

LAZY_GRAMMAR = 'root ::= " the" (" cat" | " is" | " on")+ "."'


_TRIGGER = re.compile(rb" the\b")  # (as llama.cpp's std::regex reads the trigger)


def _lazy_grammar_admits(text: bytes) -> bool:
    """Whether text (from the trigger " the" on) starts a sentence of LAZY_GRAMMAR."""
    assert text.startswith(b" the")
    rest, words = text[4:], 0
    while rest:
        word = next((w for w in (b" cat", b" is", b" on") if rest.startswith(w)), None)
        if word is None:
            return any(w.startswith(rest) for w in (b" cat", b" is", b" on")) or (words > 0 and rest == b".")
        rest, words = rest[len(word):], words + 1
    return True


@pytest.fixture(scope="module", params=reasoning.MARKUPS, ids=["think", "gemma4", "mistral", "seed", "command"])
def thinking_vocab(tmp_path_factory, request):
    """The tiny target and the far draft with two words renamed as a markup's opening and closing
    tags: (target, draft, vocabulary, markup)."""
    from tiny_models import random_weights, vocab, write_model

    d = tmp_path_factory.mktemp("thinking_vocab")
    toks = vocab()
    open_tag, close = request.param
    toks = vocab(rename={toks.index("\u2581hot"): open_tag, toks.index("\u2581word"): close})
    target = str(write_model(d / "target.gguf", toks, random_weights(len(toks), seed=1)))
    draft = str(write_model(d / "draft.gguf", toks, random_weights(len(toks), seed=3)))
    return target, draft, toks, request.param


def _split_at_the_thinking(text: bytes, thinking: str, markup):
    """(the thinking, the rest the lazy grammar reads) of a reply as the grammar sees it."""
    open_tag, close = (t.encode() for t in markup)
    if thinking == "optional" and text.lstrip().startswith(open_tag):
        text, thinking = text.lstrip()[len(open_tag):], "open"
    if thinking != "open":
        return b"", text
    end = text.find(close)
    return (text, b"") if end < 0 else (text[:end], text[end + len(close):])


@pytest.mark.parametrize("thinking", ["optional", "open"])
def test_a_trigger_inside_the_thinking_does_not_start_the_grammar(thinking_vocab, thinking):
    """Replies full of a markup's opening and closing tags and the trigger " the" (their logits
    raised): after the thinking, the text from the first " the" on follows the grammar; inside it, a
    " the" followed by what the grammar would refuse shows the grammar did not start there. The
    negative control, the same lazy grammar reading the whole reply, always holds from the first
    " the" on."""
    target, draft, toks, markup = thinking_vocab
    bias = {toks.index(markup[0]): 10.0, toks.index(markup[1]): 5.0, toks.index("\u2581the"): 10.0}
    kw = dict(max_tokens=14, temperature=1.0, n_draft=3, grammar=LAZY_GRAMMAR, grammar_trigger_patterns=[r" the\b"],
              logit_bias=bias, grammar_thinking_tags=markup)
    free_inside, held_after, held_whole = 0, 0, 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=256) as dec:
        prompt = [dec.target_model.bos, toks.index("\u2581it"), toks.index("\u2581is")]

        def reply(**extra):
            out = dec.generate(prompt, seed=seed, **kw, **extra)
            return b"".join(dec.target_model.token_to_piece(t, True) for t in out.tokens)

        for seed in range(80):
            text = reply(grammar_thinking=thinking)
            inside, after = _split_at_the_thinking(text, thinking, markup)
            found = _TRIGGER.search(after)
            if found:
                assert _lazy_grammar_admits(after[found.start():]), (seed, text)
                held_after += len(inside) > 0 and len(after) > found.end()
            found = _TRIGGER.search(inside)
            if found and len(inside) > found.end() and not _lazy_grammar_admits(inside[found.start():]):
                free_inside += 1
            whole = reply()
            found = _TRIGGER.search(whole)
            if found:
                assert _lazy_grammar_admits(whole[found.start():]), (seed, whole)
                held_whole += len(whole) > found.end()
    assert free_inside >= 5, "replies must hold a trigger inside the thinking for this test to mean anything"
    assert held_after >= 3 and held_whole >= 5


def test_the_thinking_setting_needs_a_lazy_grammar(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=128) as dec:
        with pytest.raises(ValueError, match="must be lazy"):
            dec.generate(dec.target_model.tokenize("the"), max_tokens=2, grammar=LAZY_GRAMMAR, grammar_thinking="open")


@pytest.mark.slow
def test_sampling_with_the_grammar_reading_after_the_thinking_follows_the_target(tiny):
    """With the thinking open and never closed in the first two tokens, the lazy grammar reads
    nothing: the first two sampled tokens follow the target's own distribution (with the logit
    bias that makes the trigger likely); the negative control is the same lazy grammar reading
    the whole reply, which constrains the token after the trigger."""
    from test_grammar import CHAIN, N, _marginals
    from test_sampling_end_to_end import _pvalue, first_two_tokens, pvalue_or_zero
    from tiny_models import vocab

    the = vocab().index("\u2581the")
    controls = dict(logit_bias={the: 17.0})
    prompt = specllama.Model(tiny.target).tokenize("the cat")
    p1, p2 = _marginals(tiny.target, prompt, constrained=False, controls=controls)
    assert 0.2 < p1[the] < 0.8, "the trigger must come in some generations and not in others"
    firsts, seconds, n_rejected = first_two_tokens(tiny.target, tiny.far_draft, prompt, CHAIN, N, grammar=LAZY_GRAMMAR,
                                                   grammar_trigger_patterns=[r" the\b"], grammar_thinking="open",
                                                   **controls)
    assert n_rejected > N // 10, "the pair must disagree for this test to mean anything"
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    lazy = _marginals(tiny.target, prompt, gbnf=LAZY_GRAMMAR, controls=controls, triggers=[r" the\b"])[1]
    assert pvalue_or_zero(seconds, lazy) < 1e-6


def test_which_grammar_a_chat_request_gets(tiny, tmp_path):
    """A template that thinks: a schema's grammar after a thinking block, the tool calls' lazy
    grammar reading from after the thinking; a template that does not, or reasoning_format none,
    or a GBNF given as such: the grammar as it is."""
    from specllama import completions

    opening = tmp_path / "opens_thinking.jinja"
    opening.write_text(OPENING_TEMPLATE)
    switchable = tmp_path / "switchable.jinja"
    switchable.write_text(SWITCHABLE_TEMPLATE)
    weather = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
    schema = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON}}}
    msgs = [{"role": "user", "content": "the cat"}]

    def options(template, **body):
        req = completions.parse(dict(body, messages=msgs), "chat")
        tokens = completions.prompt_tokens(dec, req, template)
        o = completions.options_for(dec, req, len(tokens))
        return o.grammar_root, o.grammar_thinking, bool(o.grammar_trigger_patterns)

    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        assert options(str(opening), **schema)[:2] == ("specllama-thinking", "")
        assert options(str(switchable), **schema)[:2] == ("specllama-thinking", "")
        assert options(None, **schema)[:2] == ("root", "")  # (CHATML: no thinking mode)
        assert options(str(opening), reasoning_format="none", **schema)[:2] == ("root", "")
        assert options(str(opening), grammar='root ::= "a"')[:2] == ("root", "")
        assert options(str(opening), tools=[weather]) == ("root", "open", True)
        assert options(str(switchable), tools=[weather]) == ("root", "optional", True)
        assert options(None, tools=[weather]) == ("root", "", True)
        assert options(str(opening), tools=[weather], tool_choice="required")[:2] == ("specllama-thinking", "")
        # Gemma 4's thought channel: the schema after it; the lazy call grammar reads the whole reply
        gemma = str(TEMPLATES / "google-gemma-4-31B-it.jinja")
        req = completions.parse(dict(schema, messages=msgs, chat_template_kwargs={"enable_thinking": True}), "chat")
        o = completions.options_for(dec, req, len(completions.prompt_tokens(dec, req, gemma)))
        assert o.grammar_root == "specllama-thinking" and '"<|channel>thought"' in o.grammar
        assert "</think>" not in o.grammar
        assert options(gemma, tools=[weather]) == ("root", "optional", True)
        req = completions.parse(dict(tools=[weather], messages=msgs), "chat")
        o = completions.options_for(dec, req, len(completions.prompt_tokens(dec, req, gemma)))
        assert o.grammar_thinking_tags == ("<|channel>thought", "<channel|>")


@pytest.fixture(scope="module")
def channel_decoder(tmp_path_factory):
    """The tiny target and a perturbed draft with two words renamed as Gemma 4's channel tags, each
    one token rendered in the text: (decoder, the closing tag's id)."""
    from tiny_models import perturbed, random_weights, vocab, write_model

    d = tmp_path_factory.mktemp("channels")
    toks = vocab()
    ids = [toks.index("\u2581hot"), toks.index("\u2581word")]
    names = ["<|channel>", "<channel|>"]
    toks = vocab(rename=dict(zip(ids, names)))
    w = random_weights(len(toks), seed=1)
    target = str(write_model(d / "target.gguf", toks, w, user_defined=names))
    draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), user_defined=names))
    with specllama.SpeculativeDecoder(target, draft, n_ctx=1024) as dec:
        yield dec, ids[1]


def test_a_gemma4_answers_lone_channel_tags_are_dropped(channel_decoder):
    """Under Gemma 4's template, replies made to write lone <channel|> tags (a logit bias; the
    <|channel> tags they write open no thought either) come back without them, whole and streamed.
    Negative control: with reasoning_format "none" they stay."""
    dec, close = channel_decoder
    template = str(TEMPLATES / "google-gemma-4-31B-it.jinja")
    fields = dict(chat_template=template, temperature=1.0, max_tokens=24, logit_bias={str(close): 8.0})
    messages = [{"role": "user", "content": "the cat"}]
    dropped = 0
    for seed in range(8):
        out = dec.create_chat_completion(messages, seed=seed, return_tokens=True, **fields)
        text = dec.target_model.detokenize(out["choices"][0]["tokens"])
        assert "<|channel>thought" not in text
        content = out["choices"][0]["message"]["content"]
        assert content == text.replace("<channel|>", "").replace("<|channel>", "")
        assert "reasoning_content" not in out["choices"][0]["message"]
        dropped += "<channel|>" in text
        whole = dec.create_chat_completion(messages, seed=seed, reasoning_format="none", **fields)
        assert whole["choices"][0]["message"]["content"] == text
        if seed < 3:
            chunks = dec.create_chat_completion(messages, seed=seed, stream=True, **fields)
            assert "".join(ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"]) == content
    assert dropped >= 4, dropped
