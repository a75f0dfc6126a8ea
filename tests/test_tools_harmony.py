"""gpt-oss's harmony format: the reader on llama.cpp's cases, the stream against the whole text,
the grammars (forced, lazy, a schema's answer) against what the template writes and what they
must refuse (llama.cpp's grammar engine), and, on a tiny pair whose vocabulary has the harmony
tags, forced and lazy calls, a schema's answer and a thinking budget through the Python API, the
next turn's prompt, and a real server with the openai client."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specllama
from specllama import completions, templates, tools
from specllama.tools import harmony
from test_server import running
from test_tools import ASK, CLOCK

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
GPT_OSS = TEMPLATES / "openai-gpt-oss-120b.jinja"
SPECIAL = {"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}}}
EDIT = {"type": "function", "function": {"name": "edit", "parameters": {"type": "object", "properties": {
    "oldString": {"type": "string"}, "newString": {"type": "string"}, "replaceAll": {"type": "boolean"}},
    "required": ["oldString", "newString"]}}}
HELLO = "Hello, world!\nWhat's up?"
THOUGHT = "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant"


def _read(text, reasoning=True, given=(SPECIAL,)):
    thought, content, calls = harmony.read(text, reasoning, list(given) if given is not None else None)
    return thought, content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize("text, reasoning, given, want", [  # llama.cpp's tests/test-chat.cpp cases for gpt-oss
    ("<|channel|>final<|message|>" + HELLO, True, None, (None, HELLO, [])),
    ("<|channel|>commentary<|message|>" + HELLO, True, None, (None, HELLO, [])),
    (THOUGHT + "<|channel|>final<|message|>" + HELLO, True, None, ("I'm\nthinking", HELLO, [])),
    (THOUGHT + "<|channel|>final<|message|>" + HELLO, False, None,
     (None, "<|channel|>analysis<|message|>I'm\nthinking<|end|>" + HELLO, [])),
    ("<|channel|>analysis<|message|>I'm\nthinking", True, None, ("I'm\nthinking", "", [])),
    (' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}', True, (SPECIAL,),
     (None, "", [("special_function", {"arg1": 1})])),
    ('<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}', True, (SPECIAL,),
     (None, "", [("special_function", {"arg1": 1})])),
    (' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}', True, (SPECIAL,),
     (None, "", [("special_function", {"arg1": 1})])),
    ('<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}', True, (SPECIAL,),
     (None, "", [("special_function", {"arg1": 1})])),
    (THOUGHT + ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}', True, (SPECIAL,),
     ("I'm\nthinking", "", [("special_function", {"arg1": 1})])),
    ("<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant<|channel|>commentary "
     'to=functions.edit <|constrain|>json<|message|>{"oldString": "if (part < railCount - 1) {", "newString": '
     '"if (part < 4) {", "replaceAll": false}', True, (EDIT,),
     ("Thinking about edit...", "", [("edit", {"oldString": "if (part < railCount - 1) {",
                                               "newString": "if (part < 4) {", "replaceAll": False})])),
    ("<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|><|start|>assistant"
     '<|channel|>final <|constrain|>json<|message|>{"amount": 123.45, "date": "2025-12-03"}', True, None,
     ("I need to output the invoice details in JSON", '{"amount": 123.45, "date": "2025-12-03"}', [])),
    ("<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant to=container.exec"
     "<|channel|>commentary<|message|>python3 -c 'print(\"hello\")'", True, None,
     ("I will execute python to say hello", "", [])),
    ("<|channel|>analysis<|message|>I will execute python to say hello<|end|><|start|>assistant<|channel|>commentary"
     ' to=python <|constrain|>code<|message|>print("hello")', True, None,
     ("I will execute python to say hello", "", [])),
    ("<|channel|>commentary to=assistant" + THOUGHT + "<|channel|>final<|message|>" + HELLO, True, None,
     ("I'm\nthinking", HELLO, [])),
    (THOUGHT + "<|channel|>commentary to=assistant<|channel|>final<|message|>" + HELLO, True, None,
     ("I'm\nthinking", HELLO, [])),
    # and beyond llama.cpp's cases: text that is not a message, calls that are not, a cut header
    (HELLO, True, None, (None, HELLO, [])),
    (THOUGHT + HELLO, True, None, ("I'm\nthinking", "<|start|>assistant" + HELLO, [])),
    (' to=functions.special_function<|channel|>commentary<|message|>{"arg1": ', True, (SPECIAL,),
     (None, ' to=functions.special_function<|channel|>commentary<|message|>{"arg1": ', [])),
    (' to=functions.special_function<|channel|>commentary<|message|>{"arg1": 1}', True, None, (None, "", [])),
    ("<|channel|>analysis<|message|>a<|end|><|start|>assistant<|channel|>analysis<|message|>b<|end|>"
     "<|start|>assistant<|channel|>fin", True, None, ("ab", "", [])),
    ("<|channel|>commentary<|message|>Let me look.<|end|><|start|>assistant to=functions.special_function"
     '<|channel|>commentary json<|message|>{"arg1": 2}', True, (SPECIAL,),
     (None, "Let me look.", [("special_function", {"arg1": 2})])),
    ("<|channel|>analysis<|message|>hm<|start|>assistant to=functions.special_function<|channel|>commentary"
     '<|message|>{"arg1": 3}', True, (SPECIAL,), ("hm", "", [("special_function", {"arg1": 3})])),
])
def test_replies_are_read_as_llama_cpp_reads_them(text, reasoning, given, want):
    assert _read(text, reasoning, given) == want


ANALYSIS, FINAL = "<|channel|>analysis<|message|>", "<|channel|>final<|message|>"


@pytest.mark.parametrize("text, opened, reasoning, want", [
    ("more<|end|><|start|>assistant" + FINAL + HELLO, ANALYSIS, True, ("more", HELLO, [])),
    ("more<|end|><|start|>assistant" + FINAL + HELLO, ANALYSIS, False, (None, "more<|end|>" + HELLO, [])),
    ("more", ANALYSIS, True, ("more", "", [])),
    ("the Nile.", FINAL, True, (None, "the Nile.", [])),
    ('<|start|>assistant to=functions.special_function<|channel|>commentary<|message|>{"arg1": 1}', ANALYSIS, True,
     (None, "", [("special_function", {"arg1": 1})])),
    # negative controls: the same replies read as starting a message of their own
    ("more<|end|><|start|>assistant" + FINAL + HELLO, None, True,
     (None, "more<|end|><|start|>assistant" + FINAL + HELLO, [])),
])
def test_a_reply_that_continues_a_message_is_read_from_inside_it(text, opened, reasoning, want):
    """Where the prompt ends inside a message (a continued, prefilled one), the reply is read from
    inside it: an analysis message's text is thinking, a final one's the answer."""
    thought, content, calls = harmony.read(text, reasoning, [SPECIAL], opened)
    assert (thought, content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]) == want


def test_the_message_a_prompt_ends_inside(tiny):
    """opened_by: the header of the message a rendered prompt ends inside (gpt-oss's template,
    continuing an assistant's thinking or answer), None where the reply starts a message."""
    model = specllama.Model(tiny.target)
    first = [{"role": "user", "content": "Name a river."}]
    thinking = templates.render(model, first + [{"role": "assistant", "content": "", "reasoning_content": "The user"}],
                                True, str(GPT_OSS))
    assert thinking.endswith(ANALYSIS + "The user") and harmony.opened_by(thinking) == ANALYSIS
    answer = templates.render(model, first + [{"role": "assistant", "content": "The longest is "}], True, str(GPT_OSS))
    assert answer.endswith(FINAL + "The longest is ") and harmony.opened_by(answer) == FINAL
    assert harmony.opened_thinking(ANALYSIS) == harmony.MARKUP and harmony.opened_thinking(FINAL) is None
    assert harmony.opened_thinking("<|channel|>analysis to=functions.f<|message|>") is None  # (a call's)
    assert harmony.opened_thinking(None) is None
    assert harmony.opened_by(templates.render(model, first, True, str(GPT_OSS))) is None  # (<|start|>assistant)
    assert harmony.opened_by(thinking + "<|end|><|start|>assistant") is None


def test_parse_reads_the_calls_as_the_other_formats_do():
    """parse(text, tools), as each call format has it: the calls and the content before them (the
    thinking read as content here: read() takes it apart); a text without a call whole."""
    text = THOUGHT + '<|channel|>commentary to=functions.special_function json<|message|>{"arg1": 5}'
    content, calls = harmony.parse(text, [SPECIAL])
    assert content == "<|channel|>analysis<|message|>I'm\nthinking<|end|>"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("special_function", {"arg1": 5})]
    plain = THOUGHT + "<|channel|>final<|message|>" + HELLO
    assert harmony.parse(plain, [SPECIAL]) == (plain, [])


PIECES = ["<|start|>assistant", "<|channel|>", "analysis", "final", "commentary", "<|message|>", "<|end|>", "<|e",
          "<|constrain|>json", " to=functions.special_function", " to=python", " to=assistant", '{"arg1": 1}',
          "Hi ", "\n", "<", "|", "<|start|>", " to", "=f"]


def test_a_stream_says_what_the_whole_text_says():
    """The reader fed a reply in steps gives, joined, the whole reply's reasoning, content and calls,
    each kind of text in the order it came."""
    rng = random.Random(5)
    for _ in range(600):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randrange(14)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(5, len(text) + 1)))
        reasoning, given = rng.random() < 0.7, rng.choice([None, [SPECIAL]])
        opened = rng.choice([None, None, ANALYSIS, FINAL])
        r = harmony.Reader(reasoning, given, opened)
        pieces = [p for a, b in zip([0] + cuts, cuts + [len(text)]) for p in r.feed(text[a:b])]
        rest, calls = r.finish()
        pieces += rest
        thought, content, want = harmony.read(text, reasoning, given, opened)
        assert "".join(t for k, t in pieces if k == "reasoning") == (thought or ""), text
        assert "".join(t for k, t in pieces if k == "content") == content, text
        assert [c["function"]["arguments"] for c in calls] == [c["function"]["arguments"] for c in want], text


def test_the_template_gets_the_format():
    assert tools.format_of(GPT_OSS.read_text()) is harmony
    others = [p for p in TEMPLATES.glob("*.jinja") if p != GPT_OSS]
    assert others and not any(harmony.is_harmony(p.read_text()) for p in others)


def _template_turn(thought, name, arguments):
    """What gpt-oss's template writes for a past turn of thinking and a call, as the reply after the
    generation prompt (<|start|>assistant) up to the call's end (<|call|>, an end-of-generation token)."""
    msgs = templates._thinking_field(GPT_OSS.read_text(), [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": None, "reasoning_content": thought, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}]}])
    text = templates.render_jinja(GPT_OSS.read_text(), msgs, False, "", "", tools=[CLOCK, SPECIAL])
    start = text.index(harmony.ROLE, text.index("<|start|>user")) + len(harmony.ROLE)
    return text[start:text.rindex(harmony.CALL)]


_THOUGHTS = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20).filter(lambda t: "<|" not in t)
_TURNS = st.one_of(
    st.tuples(_THOUGHTS, st.just("get_time"), st.builds(lambda z, h: {"zone": z, "hours": h},
                                                         st.sampled_from(["UTC", "CET"]), st.integers(-99, 99))),
    st.tuples(_THOUGHTS, st.just("special_function"), st.builds(lambda a: {"arg1": a}, st.integers(0, 999))))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_TURNS)
def test_the_grammar_admits_what_the_template_writes_and_the_reader_reads_it_back(grammar_text, turn):
    """Random turns of thinking and a call, written as gpt-oss's template writes a past turn: the
    forced grammar admits the text (llama.cpp's engine), the named tool's grammar only where it is
    the one called, and the reader reads the thinking and the call back."""
    thought, name, arguments = turn
    text = _template_turn(thought, name, arguments)
    checked = tools.check_tools([CLOCK, SPECIAL])
    assert grammar_text.admits(harmony.forced_grammar(checked), text), text
    assert grammar_text.admits(harmony.forced_grammar(checked, "get_time"), text) == (name == "get_time")
    assert _read(text, True, checked) == (thought or None, "", [(name, arguments)])


CALL = ' to=functions.get_time<|channel|>commentary <|constrain|>json<|message|>{"zone": "UTC", "hours": 3}'


@pytest.mark.parametrize("text, admitted", [
    (CALL, True),
    (CALL.replace("UTC", "PST"), False),  # (not in the enum)
    (CALL.replace(', "hours": 3', ""), False),  # (a required key left out)
    (CALL.replace("get_time", "get_date"), False),  # (no such tool)
    ('<|channel|>analysis to=functions.get_time json<|message|>{"zone": "CET", "hours": 1}', True),
    (THOUGHT + "<|channel|>commentary<|message|>Let me see.<|end|><|start|>assistant" + CALL, True),
    ("<|channel|>analysis<|message|>hm<|start|>assistant" + CALL, True),  # (a message the next one's start ends)
    ("<|channel|>final<|message|>Sure.<|end|><|start|>assistant" + CALL, False),  # (forced: no answer first)
    (THOUGHT, False),  # (thinking alone)
    (' to=functions.get_timejson<|message|>{"zone": "UTC", "hours": 3}', False),  # (no channel)
])
def test_the_forced_grammar_holds_a_call_to_the_schemas(grammar_text, text, admitted):
    assert grammar_text.admits(harmony.forced_grammar(tools.check_tools([CLOCK, SPECIAL])), text) == admitted


@pytest.mark.parametrize("text, admitted, triggered", [
    (CALL, True, True),
    (THOUGHT + CALL, True, True),
    (THOUGHT + CALL.replace("UTC", "PST"), False, True),
    ('<|channel|>commentary to=functions.get_time json<|message|>{"zone": "CET", "hours": 1}', True, True),
    (THOUGHT + "<|channel|>final<|message|>It is noon.", True, False),
    ("<|channel|>commentary to=assistant" + THOUGHT + "<|channel|>final<|message|>Hi", True, False),
    (THOUGHT + "<|channel|>commentary to=python json<|message|>print(1)", True, False),
    ("<|channel|>analysis<|message|>I could write to=functions.get_time here<|end|>", True, False),
])
def test_the_lazy_grammar_starts_at_a_calls_header(grammar_text, text, admitted, triggered):
    """tool_choice "auto": the grammar starts where a message's header names a function (the
    reply's first or one after <|start|>assistant), not at a stray to=assistant, a built-in
    recipient or a recipient written in the thinking's text; from there the call follows the
    schema."""
    gbnf, patterns = harmony.lazy_grammar(tools.check_tools([CLOCK]))
    assert grammar_text.lazy_admits(gbnf, patterns, text) == (admitted, triggered)


@pytest.mark.parametrize("text, admitted", [
    ('<|channel|>final<|message|>{"a": 1}', True),
    (THOUGHT + '<|channel|>final <|constrain|>json<|message|>{"a": 1}', True),
    (THOUGHT + THOUGHT + '<|channel|>commentary to=assistant<|channel|>final<|message|>{"a": 1}', True),
    (THOUGHT + '<|channel|>final<|message|>{"a": "x"}', False),
    ('<|channel|>commentary<|message|>Sure.<|end|><|start|>assistant<|channel|>final<|message|>{"a": 1}', False),
    ('{"a": 1}', False),
])
def test_a_schemas_answer_is_a_final_message(grammar_text, text, admitted):
    from specllama import gbnf, schemas

    answer = gbnf.renamed(schemas.to_grammar({"type": "object", "properties": {"a": {"type": "integer"}},
                                              "required": ["a"]}), "answer-")
    grammar, root = harmony.answer_grammar(answer, "answer-root")
    assert grammar_text.admits(f"root ::= {root}\n" + grammar, text) == admitted


@pytest.fixture(scope="module")
def harmony_decoder(tmp_path_factory):
    """A tiny target that writes harmony's markup and a perturbed draft: words renamed to its tags
    (rendered in the text, as llama.cpp renders gpt-oss's), <|return|> and <|call|> (ends of
    generation) and its words (with the pieces the tokenizer builds them from), the model steered
    to write a message's header after <|start|>assistant, an analysis message more often than a
    call, and <|end|> now and then in a message's text (tiny_models.steered): (decoder, {text: id})."""
    from tiny_models import perturbed, random_weights, steered, vocab, write_model

    d = tmp_path_factory.mktemp("harmony")
    names = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|constrain|>", "<|return|>", "<|call|>",
             "analysis", "final", "commentary", "assistant", "\u2581to=functions."]
    toks = vocab()
    renamed = [toks.index("\u2581" + w) for w in ("hot", "word", "but", "what", "some", "we", "can", "out", "other",
                                                   "were", "all", "there")]
    toks = vocab(rename=dict(zip(renamed, names)))
    toks += [w[:k] for w in names[7:11] for k in range(2, len(w))]
    i = dict(zip(names, renamed))
    to = i["\u2581to=functions."]
    follows = {i["assistant"]: {i["<|channel|>"]: 8, to: 6.5},
               i["<|channel|>"]: {i["analysis"]: 8, i["commentary"]: 5, i["final"]: 6},
               i["analysis"]: {i["<|message|>"]: 8, to: 5}, i["commentary"]: {i["<|message|>"]: 6, to: 7},
               i["final"]: {i["<|message|>"]: 8}, i["<|message|>"]: {}, i["<|end|>"]: {i["<|start|>"]: 10},
               i["<|start|>"]: {i["assistant"]: 10}}
    w = steered(random_weights(len(toks), seed=1), follows, {i["<|end|>"]: 4.5, i["<|return|>"]: 2.5}, seed=7)
    target = str(write_model(d / "target.gguf", toks, w, user_defined=names[:5], space_prefix=False))
    draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), user_defined=names[:5],
                            space_prefix=False))
    with specllama.SpeculativeDecoder(target, draft, n_ctx=4096) as dec:
        yield dec, {n.replace("\u2581", " "): t for n, t in i.items()}


def test_a_forced_call_after_thinking_whole_and_streamed(harmony_decoder):
    """tool_choice "required": each reply is a call by the schema (unless max_tokens cuts it off),
    after the thinking where the model thinks first; the whole answer and the stream give the same
    thinking, text and call (the same tokens: both decoded without a draft, since past a few
    hundred positions llama.cpp's batched and one-token logits part, so a seed's speculative reply
    can differ at a near tie with the draft lengths, which follow measured times)."""
    dec, _ = harmony_decoder
    fields = dict(tools=[CLOCK], tool_choice="required", temperature=0.9, max_tokens=300, chat_template=str(GPT_OSS))
    thought = called = 0
    for seed in range(16):
        whole = dec.create_chat_completion(ASK, seed=seed, **fields)["choices"][0]
        msg = whole["message"]
        if whole["finish_reason"] == "length":
            assert "tool_calls" not in msg, msg
        else:
            assert whole["finish_reason"] == "tool_calls", msg
            (call,) = msg["tool_calls"]
            args = json.loads(call["function"]["arguments"])
            assert call["function"]["name"] == "get_time" and args["zone"] in ("UTC", "CET")
            called += 1
            thought += bool(msg.get("reasoning_content"))
        whole = dec.create_chat_completion(ASK, seed=seed, speculative=False, **fields)["choices"][0]
        msg = whole["message"]
        chunks = list(dec.create_chat_completion(ASK, seed=seed, stream=True, speculative=False, **fields))
        deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
        assert "".join(d.get("reasoning_content") or "" for d in deltas) == (msg.get("reasoning_content") or "")
        assert "".join(d.get("content") or "" for d in deltas) == (msg["content"] or "")
        streamed = [c["function"] for d in deltas for c in d.get("tool_calls", [])]
        assert streamed == [c["function"] for c in msg.get("tool_calls", [])]
        assert chunks[-1]["choices"][0]["finish_reason"] == whole["finish_reason"]
    assert called >= 9 and thought >= 5, (called, thought)  # (12 and 8 of 16 on the machines tested)


def test_an_auto_call_is_held_to_the_schema_from_its_header(harmony_decoder):
    """tool_choice "auto": where the model opens a call's header, the lazy grammar holds the call
    from there on, and the reply comes back as the call; replies without one stay text. Negative
    control: the same generations without the grammar write no call that reads as one."""
    dec, _ = harmony_decoder
    req = completions.parse(dict(messages=ASK, tools=[CLOCK], temperature=0.9, max_tokens=160), "chat")
    tokens = completions.prompt_tokens(dec, req, str(GPT_OSS))
    assert req.harmony
    called = free = 0
    for seed in range(16):
        opts = completions.options_for(dec, req, len(tokens))
        opts.seed = seed
        out = dec.generate(tokens, opts)
        text = out.text
        _, _, calls = harmony.read(text, True, [CLOCK])
        header = text.split(harmony.END)[-1].split(harmony.MESSAGE)[0]  # (the last message's)
        if out.finish_reason == "stop" and harmony._TO in header:
            assert [c["function"]["name"] for c in calls] == ["get_time"], text
            assert json.loads(calls[0]["function"]["arguments"])["zone"] in ("UTC", "CET")
            called += 1
        opts.grammar, opts.grammar_trigger_patterns = "", []
        free += bool(harmony.read(dec.generate(tokens, opts).text, True, [CLOCK])[2])
    assert called >= 3 and free == 0, (called, free)


def test_a_schemas_answer_after_thinking(harmony_decoder):
    """response_format with a JSON schema: the answer is a final message by the schema (or the
    thinking is cut off by max_tokens), after the thinking where the model thinks first, which
    comes back apart."""
    dec, _ = harmony_decoder
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    thought = answered = 0
    for seed in range(16):
        out = dec.create_chat_completion(ASK, chat_template=str(GPT_OSS), temperature=0.9, seed=seed, max_tokens=300,
                                         response_format={"type": "json_schema", "json_schema": {"name": "x",
                                                                                                 "schema": schema}})
        msg = out["choices"][0]["message"]
        if out["choices"][0]["finish_reason"] == "length":  # (cut off while thinking)
            assert msg["content"] == "" and msg["reasoning_content"], msg
            continue
        assert isinstance(json.loads(msg["content"])["a"], int), msg
        answered += 1
        thought += bool(msg.get("reasoning_content"))
    assert answered >= 8 and thought >= 5, (answered, thought)  # (11 and 8 of 16 on the machines tested)


def test_the_thinking_budget_ends_the_analysis(harmony_decoder):
    """reasoning_budget_tokens: after that many tokens of an analysis message (and those that finish
    a character it cut into) its <|end|> is forced. Negative control: without the budget the
    messages run longer."""
    dec, ids = harmony_decoder
    fields = dict(tools=[CLOCK], tool_choice="required", temperature=0.9, max_tokens=300, chat_template=str(GPT_OSS),
                  logit_bias={str(ids["<|end|>"]): -4.0}, return_tokens=True)
    longest = {2: 0, -1: 0}
    for seed in range(6):
        for budget in longest:
            toks = dec.create_chat_completion(ASK, seed=seed, reasoning_budget_tokens=budget, **fields)["choices"][0][
                "tokens"] + [ids["<|end|>"]]  # (one cut off by max_tokens ends there)
            heads = (k for k in range(len(toks) - 2) if toks[k:k + 3] == [ids["<|channel|>"], ids["analysis"],
                                                                          ids["<|message|>"]])
            for at in (k for k in heads if k == 0 or toks[k - 2:k] == [ids["<|start|>"], ids["assistant"]]):
                # (an analysis message's; not a call's written on the analysis channel)
                longest[budget] = max(longest[budget], toks.index(ids["<|end|>"], at) - at - 3)
    assert longest[2] <= 2 + 3 < longest[-1], longest  # (and up to three that finish a character's bytes)


def test_the_thinking_budget_leaves_a_call_on_the_analysis_channel(harmony_decoder, monkeypatch):
    """A call written on the analysis channel (to=functions.get_time<|channel|>analysis<|message|>,
    which the reader takes as a call) is no thinking: the budget does not cut its arguments. The
    model is biased to open its reply with such a call. Negative control: counted from the
    channel's markup alone, the budget forces <|end|> into the arguments, which the grammar
    refuses."""
    dec, ids = harmony_decoder
    fields = dict(tools=[CLOCK], tool_choice="required", temperature=0.9, max_tokens=120, chat_template=str(GPT_OSS),
                  logit_bias={str(ids[" to=functions."]): 12.0, str(ids["analysis"]): 12.0, **{
                      str(t): -30.0 for t in dec.target_model.tokenize("<", add_special=False)}},  # (markup as tags)
                  return_tokens=True, reasoning_budget_tokens=2)
    for seed in range(4):
        choice = dec.create_chat_completion(ASK, seed=seed, **fields)["choices"][0]
        toks = choice["tokens"]
        at = toks.index(ids["<|channel|>"])  # (the markup as the tokens the budget counts from)
        assert toks[0] == ids[" to=functions."] and toks[at:at + 3] == [ids["<|channel|>"], ids["analysis"],
                                                                       ids["<|message|>"]], toks
        assert dec.target_model.detokenize(toks[:at], special=True) == " to=functions.get_time"
        assert choice["finish_reason"] in ("tool_calls", "length")
        if choice["finish_reason"] == "tool_calls":
            assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])["zone"] in ("UTC", "CET")
    monkeypatch.setattr(harmony, "MARKUP", (harmony.CHANNEL + "analysis" + harmony.MESSAGE, harmony.END))
    with pytest.raises(ValueError, match="the grammar allows no token here"):
        for seed in range(4):
            dec.create_chat_completion(ASK, seed=seed, **fields)


def test_a_continued_analysis_message_goes_on_as_thinking(harmony_decoder):
    """A conversation that ends with an assistant's thinking (reasoning_content, no content) is
    continued inside its analysis message: the reply's text up to that message's <|end|> is
    reasoning_content, the final message after it the content, whole and streamed alike; a thinking
    budget counts from the reply's start. Negative controls: read as starting a message of its own,
    the same replies have no thinking; without the budget the first message runs longer."""
    dec, ids = harmony_decoder
    msgs = ASK + [{"role": "assistant", "content": "", "reasoning_content": "Berlin is"}]
    fields = dict(temperature=0.9, max_tokens=120, speculative=False)
    req = completions.parse(dict(messages=msgs, **fields), "chat")
    fields["chat_template"] = str(GPT_OSS)
    tokens = completions.prompt_tokens(dec, req, str(GPT_OSS))
    assert req.opened == ANALYSIS and req.thinking_open == harmony.MARKUP
    differs = 0
    for seed in range(8):
        opts = completions.options_for(dec, req, len(tokens))
        opts.seed = seed
        text = dec.generate(tokens, opts).text
        msg = dec.create_chat_completion(msgs, seed=seed, **fields)["choices"][0]["message"]
        thought, content, _ = harmony.read(text, True, None, ANALYSIS)
        assert (msg.get("reasoning_content"), msg["content"]) == (thought, content)
        first = min([text.find(t) for t in harmony.BREAKS if t in text] + [len(text)])
        assert (thought or "").startswith(text[:first])  # (the continued message's text, then later analyses')
        differs += harmony.read(text, True, None)[:2] != (thought, content)
        deltas = [c["choices"][0]["delta"] for c in dec.create_chat_completion(msgs, seed=seed, stream=True, **fields)
                  if c["choices"]]
        assert "".join(d.get("reasoning_content") or "" for d in deltas) == (msg.get("reasoning_content") or "")
        assert "".join(d.get("content") or "" for d in deltas) == msg["content"]
    assert differs >= 6, differs  # (8 of 8 on the machines tested)
    longest = {2: 0, -1: 0}
    for seed in range(6):
        for budget in longest:
            toks = dec.create_chat_completion(msgs, seed=seed, reasoning_budget_tokens=budget, return_tokens=True,
                                              logit_bias={str(ids["<|end|>"]): -4.0}, **fields)["choices"][0]["tokens"]
            longest[budget] = max(longest[budget], (toks + [ids["<|end|>"]]).index(ids["<|end|>"]))
    assert longest[2] <= 2 + 3 < longest[-1], longest  # (and up to three that finish a character's bytes)


def test_the_next_turn_shows_the_thinking_before_the_call(harmony_decoder):
    """A turn of reasoning_content and a call sent back (content null, as OpenAI's clients send it)
    renders as llama.cpp renders it: the thinking as the call's analysis message, then the call
    and its result. Negative control: without the conversion the template fails on the null."""
    dec, _ = harmony_decoder
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_time", "arguments": '{"zone": "CET", "hours": 1}'}}
    turn = ASK + [{"role": "assistant", "content": None, "reasoning_content": "Berlin is CET.", "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "c1", "content": "12:00"}]
    prompt = templates.render(dec.target_model, turn, template=str(GPT_OSS), tools=[CLOCK])
    assert prompt.endswith('<|start|>assistant<|channel|>analysis<|message|>Berlin is CET.<|end|><|start|>assistant '
                           'to=functions.get_time<|channel|>commentary json<|message|>{"zone": "CET", "hours": 1}'
                           '<|call|><|start|>functions.get_time to=assistant<|channel|>commentary<|message|>"12:00"'
                           '<|end|><|start|>assistant')
    with pytest.raises(specllama.ChatTemplateError):
        templates.render_jinja(GPT_OSS.read_text(), templates.normalize_messages(tools.call_arguments(turn)),
                               True, "", "", tools=[CLOCK])


@pytest.fixture(scope="module")
def harmony_server(harmony_decoder):
    dec, _ = harmony_decoder  # (the same model files, served)
    with running(["-m", dec.model_path, "-d", dec.draft_path, "-c", "4096", "--alias", "tiny",
                  "--chat-template", str(GPT_OSS)]) as s:
        yield s


def test_the_openai_client_gets_thinking_and_a_call(harmony_server):
    """Through a real server with the openai client, under gpt-oss's template: a forced call comes
    back with the thinking apart (the first seed whose reply thinks and calls, its thinking free of
    the tags the tiny model may write in it), whole and streamed alike, and the next turn, the call
    and its result sent back, is served."""
    from openai import OpenAI

    with OpenAI(base_url=harmony_server.url + "/v1", api_key="none", max_retries=0, timeout=600) as client:
        fields = dict(model=client.models.list().data[0].id, messages=ASK, tools=[CLOCK], temperature=0.9,
                      max_tokens=300, tool_choice="required")
        for seed in range(16):
            out = client.chat.completions.create(seed=seed, **fields)
            msg = out.choices[0].message
            thought = msg.model_extra.get("reasoning_content") or ""
            if out.choices[0].finish_reason == "tool_calls" and thought and "<|" not in thought:
                break  # (gpt-oss's template refuses thinking sent back with its tags in it, as llama-server's does)
        else:
            raise AssertionError("no reply of 16 thought and called")
        assert msg.tool_calls[0].function.name == "get_time" and msg.content is None
        chunks = list(client.chat.completions.create(seed=seed, stream=True, **fields))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(d.model_extra.get("reasoning_content") or "" for d in deltas) == \
            msg.model_extra["reasoning_content"]
        assert [t.function.arguments for d in deltas for t in d.tool_calls or []] == \
            [msg.tool_calls[0].function.arguments]
        messages = ASK + [msg.model_dump(exclude_none=True),
                          {"role": "tool", "tool_call_id": msg.tool_calls[0].id, "content": "12:00"}]
        again = client.chat.completions.create(**dict(fields, messages=messages, tool_choice="auto"))
        assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")


def test_ollamas_think_levels(harmony_server):
    """Ollama's think under gpt-oss's template: a level reaches the template (the prompts of "low"
    and "high" differ by the word), and the analysis comes back as message.thinking; think false
    leaves the same generation's analysis (same prompt and seed) in the content as written."""
    import ollama

    with ollama.Client(host=harmony_server.url, timeout=600) as client:
        assert "thinking" in client.show("tiny").capabilities
        kw = dict(model="tiny", messages=ASK)
        low, high = (client.chat(think=level, options={"num_predict": 1}, **kw).prompt_eval_count
                     for level in ("low", "high"))
        assert high == low + 1  # ("high" is one letter longer, a token a letter in the tiny vocabulary)
        thought = 0
        for seed in range(6):
            options = {"temperature": 0.9, "seed": seed, "num_predict": 200}
            r = client.chat(think=True, options=options, **kw).message
            raw = client.chat(think=False, options=options, **kw).message
            assert raw.thinking is None
            if r.thinking:
                thought += 1
                assert "<|channel|>analysis<|message|>" in raw.content, (r, raw)
        assert thought >= 3
