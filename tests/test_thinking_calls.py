"""A tool call made from inside the thinking, as Qwen3.5's template lets the model make one: in the
XML call format under a template that thinks in <think>, a <tool_call> tag ends the thinking too
(as llama-server reads it). The reply splits there, whole and streamed; the lazy call grammar reads
the call from its tag on (in C++, for the draft and the target alike), and a forced call may follow
the thinking without its closing tag; a thinking budget stops at the tag."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

import specllama
from specllama import completions, gbnf, reasoning
from specllama.tools import qwen3_coder as xml
from test_tools import ASK, CLOCK

QWEN35 = Path(__file__).parent / "data" / "chat_templates" / "Qwen-Qwen3.5-4B.jinja"
TERMINAL = {"type": "function", "function": {"name": "run_in_terminal", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}
CALL = "<tool_call>\n<function=run_in_terminal>\n<parameter=command>\npwd\n</parameter>\n</function>\n</tool_call>"
CALLS = xml.ENDS_THINKING


@pytest.mark.parametrize("text, opened, thought, content", [  # (the first two are llama.cpp's cases)
    (CALL, True, None, CALL),
    ("Need to inspect the current directory.\n" + CALL, True, "Need to inspect the current directory.", CALL),
    ("Look first.\n</think>\n\n" + CALL, True, "Look first.", CALL),
    ("<think>Look.\n" + CALL, False, "Look.", CALL),
    ("A plain answer.", False, None, "A plain answer."),
    ("Still <tool_ca", True, "Still <tool_ca", ""),
])
def test_a_call_ends_the_thinking(text, opened, thought, content):
    """The reply splits at the call's tag, which the content keeps, and the call is read from it;
    without the format's tags (negative control) the call stays in the thinking."""
    assert reasoning.split(text, opened, CALLS) == (thought, content)
    if content == CALL:
        assert xml.parse(content, [TERMINAL])[1][0]["function"]["arguments"] == json.dumps({"command": "pwd"})
        if thought is not None and "</think>" not in text:
            assert reasoning.split(text, opened) == (text.removeprefix("<think>").strip(), "")


def test_a_stream_says_what_the_whole_reply_says():
    """StreamSplitter with the call tags, fed random replies in random steps, gives the pieces
    split() gives for the whole reply."""
    rng = random.Random(5)
    pieces = ["<think>", "</think>", "<tool_call>", "<tool", "</thi", "<", "x", " ", "\n", "think>", "_call>"]
    for _ in range(400):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        opened = rng.random() < 0.5
        splitter = reasoning.StreamSplitter(opened, CALLS)
        cuts = sorted(rng.sample(range(len(text) + 1), min(3, len(text) + 1)))
        out = [p for a, b in zip([0] + cuts, cuts + [len(text)]) for p in splitter.feed(text[a:b])]
        out += splitter.finish()
        thought = "".join(t for kind, t in out if kind == reasoning.REASONING) or None
        content = "".join(t for kind, t in out if kind == reasoning.CONTENT)
        assert (thought, content) == reasoning.split(text, opened, CALLS), repr(text)


def _forced(calls):
    grammar = gbnf.renamed(xml.forced_grammar([TERMINAL]), "a-")  # (its root is a-root)
    rules, start = reasoning.grammar_after_thinking(grammar, "a-root", reasoning.MARKUPS[0], True, calls)
    return f"root ::= {start}\n{rules}"


@pytest.mark.parametrize("text, admitted, admitted_without", [
    ("Need to look.\n" + CALL, True, False),
    (CALL, True, False),
    ("Need to look.\n</think>\n\n" + CALL, True, True),
    ("a <tool_call> b\n</think>\n\n" + CALL, False, True),  # (with the tags, a call follows the tag)
    ("Need to look.\n</think>\n\nNo call.", False, False),
])
def test_a_forced_call_may_follow_the_thinking_without_its_closing_tag(grammar_text, text, admitted,
                                                                        admitted_without):
    """The grammar of a forced call after an opened thinking block: the call may end the thinking
    itself, and a call tag in the thinking starts the call. Negative control: without the call
    tags, the thinking must close before the call, and may hold the tag."""
    assert grammar_text.admits(_forced(CALLS), text) == admitted, text
    assert grammar_text.admits(_forced(()), text) == admitted_without, text


@pytest.fixture(scope="module")
def qwen35_decoder(tmp_path_factory):
    """The tiny target and a perturbed draft with three words renamed <think>, </think> and
    <tool_call>, each one token rendered in the text as in Qwen's vocabulary: (decoder, the call
    tag's id, the closing tag's id)."""
    from tiny_models import perturbed, random_weights, vocab, write_model

    d = tmp_path_factory.mktemp("thinking_calls")
    toks = vocab()
    ids = [toks.index(w) for w in ("\u2581hot", "\u2581word", "\u2581but")]
    names = ["<think>", "</think>", "<tool_call>"]
    toks = vocab(rename=dict(zip(ids, names)))
    w = random_weights(len(toks), seed=1)
    target = str(write_model(d / "target.gguf", toks, w, user_defined=names))
    draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), user_defined=names))
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048) as dec:
        yield dec, ids[2], ids[1]


@pytest.fixture(scope="module")
def split_tag_decoder(tmp_path_factory):
    """As qwen35_decoder, with the call tag spelled in three rendered tokens, <t, ool_cal and l>
    (the last two longer than </think> together): (decoder, their ids, the closing tag's id)."""
    from tiny_models import perturbed, random_weights, vocab, write_model

    d = tmp_path_factory.mktemp("split_call_tag")
    toks = vocab()
    ids = [toks.index(w) for w in ("\u2581hot", "\u2581word", "\u2581but", "\u2581what", "\u2581some")]
    names = ["<think>", "</think>", "<t", "ool_cal", "l>"]
    toks = vocab(rename=dict(zip(ids, names)))
    w = random_weights(len(toks), seed=1)
    target = str(write_model(d / "target.gguf", toks, w, user_defined=names))
    draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), user_defined=names))
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048) as dec:
        yield dec, ids[2:], ids[1]


def _request(dec, *tags, bias=6.0, **fields):
    """The prompt's tokens and options of an auto-choice request under Qwen3.5's template (its
    prompt opens the thinking), the call tag's tokens made likely by a logit bias."""
    req = completions.parse(dict(messages=ASK, tools=[CLOCK], temperature=1.0, max_tokens=120,
                                 logit_bias={str(tag): bias for tag in tags}, **fields), "chat")
    tokens = completions.prompt_tokens(dec, req, str(QWEN35))
    return req, tokens, completions.options_for(dec, req, len(tokens))


def _held(text):
    """Whether what follows the reply's first call tag is a call to get_time by its schema (or
    the start of one, where the reply was cut off)."""
    after = text[text.index(xml.OPEN):]
    call = re.fullmatch(r"<tool_call>\n<function=get_time>\n(.*)", after, re.S)
    return call is not None and all(m in ("zone", "hours") for m in re.findall(r"<parameter=([^>\n]*)>", after))


def test_with_tool_choice_auto_a_call_from_inside_the_thinking_is_held_to_the_schema(qwen35_decoder):
    """tool_choice "auto", the prompt having opened the thinking: a reply that writes the call tag
    before any closing tag goes on as a call by the schema (the grammar reads it from its tag),
    comes back as tool_calls with the text before it as reasoning_content. Negative control: the
    same options without the call tags (grammar_thinking_calls) leave the call free."""
    dec, tag, close = qwen35_decoder
    req, tokens, opts = _request(dec, tag)
    assert list(opts.grammar_thinking_calls) == [xml.OPEN] and opts.grammar_thinking == "open"
    called = 0
    for seed in range(16):
        out = dec.create_chat_completion(ASK, chat_template=str(QWEN35), tools=[CLOCK], temperature=1.0,
                                         max_tokens=120, logit_bias={str(tag): 6.0}, seed=seed, return_tokens=True)
        choice = out["choices"][0]
        toks = choice["tokens"]
        if tag not in toks or (close in toks and toks.index(close) < toks.index(tag)):
            continue
        text = dec.target_model.detokenize(toks)
        assert _held(text), text
        called += choice["finish_reason"] == "tool_calls"
        if choice["finish_reason"] == "tool_calls":
            args = json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
            assert args["zone"] in ("UTC", "CET") and isinstance(args["hours"], int)
            before = text[:text.index(xml.OPEN)].strip()
            assert choice["message"].get("reasoning_content") == (before or None)
    assert called >= 4, called
    opts.grammar_thinking_calls = []
    texts = [dec.generate(tokens, opts, seed=seed).text for seed in range(16)]
    free = sum(not _held(text) for text in texts if xml.OPEN in text)
    assert free >= 4, free


def test_a_call_tag_of_several_tokens_ends_the_thinking_too(split_tag_decoder):
    """The call tag spelled in three tokens (all made likely): a reply that completes it before any
    closing tag goes on as a call by the schema, the grammar reading it from the tag's first token
    (which the thinking phase keeps until it knows). Negative control: without the call tags, free."""
    dec, pieces, close = split_tag_decoder
    # (a repeat penalty over the last two tokens keeps the model from writing one piece over and over)
    _, tokens, opts = _request(dec, *pieces, bias=20.0, repeat_penalty=3.0, repeat_last_n=2)
    called = 0
    for seed in range(24):
        text = dec.generate(tokens, opts, seed=seed).text
        if xml.OPEN not in text or 0 <= text.find("</think>") < text.index(xml.OPEN):
            continue
        called += 1
        assert _held(text), text
    assert called >= 4, called
    opts.grammar_thinking_calls = []  # (negative control: the calls go free)
    texts = [dec.generate(tokens, opts, seed=seed).text for seed in range(8)]
    assert sum(not _held(text) for text in texts if xml.OPEN in text) >= 4


def test_a_forced_call_from_inside_the_thinking(qwen35_decoder):
    """tool_choice "required", the call tag made likely: replies call straight from the thinking
    (no closing tag before the call), and every reply is a call by the schema, the text before
    its tag the reasoning, streamed as whole."""
    dec, tag, close = qwen35_decoder
    straight = 0
    for seed in range(12):
        out = dec.create_chat_completion(ASK, chat_template=str(QWEN35), tools=[CLOCK], tool_choice="required",
                                         temperature=1.0, max_tokens=200, logit_bias={str(tag): 6.0}, seed=seed,
                                         return_tokens=True)
        choice = out["choices"][0]
        assert choice["finish_reason"] == "tool_calls", choice
        args = json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
        assert args["zone"] in ("UTC", "CET") and isinstance(args["hours"], int)
        toks = choice["tokens"]
        straight += close not in toks[:toks.index(tag)]
        if seed < 4:  # streamed, the same reasoning and calls
            chunks = dec.create_chat_completion(ASK, chat_template=str(QWEN35), tools=[CLOCK], tool_choice="required",
                                                temperature=1.0, max_tokens=200, logit_bias={str(tag): 6.0},
                                                seed=seed, stream=True)
            deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
            assert ("".join(d.get("reasoning_content") or "" for d in deltas) or None) == \
                choice["message"].get("reasoning_content")
            calls = [c["function"]["arguments"] for d in deltas for c in d.get("tool_calls", [])]
            assert calls == [c["function"]["arguments"] for c in choice["message"]["tool_calls"]]
    assert straight >= 4, straight


def test_a_thinking_budget_stops_at_the_call_tag(qwen35_decoder):
    """With a budget of two thinking tokens, a call begun from inside the thinking within them is
    not cut by a forced closing tag: the replies come back as calls. Negative control: with only
    </think> ending the thinking for the budget, the budget forces it into the call."""
    dec, tag, close = qwen35_decoder
    req, tokens, opts = _request(dec, tag, reasoning_budget_tokens=2)
    assert len(opts.thinking_budget_ends) == 2
    forced_in_call = early = 0
    for seed in range(12):
        toks = dec.generate(tokens, opts, seed=seed).tokens
        if tag in toks[:2]:
            early += 1
            assert close not in toks[toks.index(tag):], toks
    assert early >= 4, early
    narrow = opts.copy()
    narrow.thinking_budget_ends = [[close]]
    for seed in range(12):
        try:
            toks = dec.generate(tokens, narrow, seed=seed).tokens
        except ValueError:  # (the grammar allows no closing tag inside the call)
            forced_in_call += 1
            continue
        forced_in_call += tag in toks[:2] and close in toks[toks.index(tag):]
    assert forced_in_call >= 3, forced_in_call
