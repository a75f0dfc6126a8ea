"""Tool calls in Mistral's formats ([TOOL_CALLS]name[ARGS]{...}, with [CALL_ID]id for Mistral Small
3.2, and Mistral Nemo's [TOOL_CALLS][{...}]): the parser on llama.cpp's cases, the stream against
the whole text, the flavour each template gets, the forced grammar against what each template
writes for a past call (llama.cpp's grammar engine) and the parser reading it back, forced calls
through the Python API and a real server with the openai client, and the ids the templates take
back; Magistral's [THINK] thinking."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specllama
from specllama import reasoning, templates, tools
from specllama.tools import mistral
from test_tools import ASK, CLOCK, forced_call, template_server

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"
SMALL, DEVSTRAL, NEMO, MINISTRAL = (TEMPLATES / f"{n}.jinja" for n in (
    "Mistral-Small-3.2-24B-Instruct-2506", "unsloth-mistral-Devstral-Small-2507",
    "mistralai-Mistral-Nemo-Instruct-2407", "mistralai-Ministral-3-14B-Reasoning-2512"))
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "units": {"enum": ["celsius", "fahrenheit"]}, "detailed": {"type": "boolean"}}, "required": ["city", "days"]}}}


def _calls(text):
    content, calls = mistral.parse(text)
    return content, [(c["function"]["name"], json.loads(c["function"]["arguments"]), c["id"]) for c in calls]


@pytest.mark.parametrize("text, content, calls", [  # llama.cpp's tests/test-chat.cpp cases for Mistral's templates
    ('[TOOL_CALLS]special_function[ARGS]{"arg1":1}', None, [("special_function", {"arg1": 1}, None)]),
    ('[TOOL_CALLS]special_function[ARGS]{"arg1": 1}[TOOL_CALLS]special_function_with_opt[ARGS]{"arg1": 1, "arg2": 2}',
     None, [("special_function", {"arg1": 1}, None), ("special_function_with_opt", {"arg1": 1, "arg2": 2}, None)]),
    ('[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}]', None,
     [("special_function", {"arg1": 1}, "123456789")]),
    ('[TOOL_CALLS]special_function[CALL_ID]123456789[ARGS]{"arg1": 1}', None,
     [("special_function", {"arg1": 1}, "123456789")]),
    ('[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{"arg1": 1}'
     '[TOOL_CALLS]special_function_with_opt[CALL_ID]000000002[ARGS]{"arg1": 1, "arg2": 2}', None,
     [("special_function", {"arg1": 1}, "000000001"),
      ("special_function_with_opt", {"arg1": 1, "arg2": 2}, "000000002")]),
    ('Hello, world!\nWhat\'s up?[TOOL_CALLS]special_function[ARGS]{"arg1": 1}', "Hello, world!\nWhat's up?",
     [("special_function", {"arg1": 1}, None)]),
    ("Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ('[TOOL_CALLS]f[ARGS]{"a": ', '[TOOL_CALLS]f[ARGS]{"a": ', []),  # (cut off: no call)
    ("[TOOL_CALLS][1, 2]", "[TOOL_CALLS][1, 2]", []),
    ('[TOOL_CALLS]bad name[ARGS]{}', '[TOOL_CALLS]bad name[ARGS]{}', []),
    ('[TOOL_CALLS]f[ARGS]' + "[" * 5000, '[TOOL_CALLS]f[ARGS]' + "[" * 5000, []),
])
def test_calls_are_parsed_out_of_the_text(text, content, calls):
    got_content, got = _calls(text)
    assert got_content == content
    assert [(n, a) for n, a, _ in got] == [(n, a) for n, a, _ in calls]
    for (_, _, want), (_, _, call_id) in zip(calls, got):  # the model's id, or nine letters and digits
        assert call_id == want if want else (len(call_id) == 9 and call_id.isalnum())


def test_a_stream_says_what_the_whole_text_says():
    from test_tools import check_stream

    rng = random.Random(3)
    pieces = ["[TOOL_CALLS]", "[TOOL", "_CALLS]", "f", "[ARGS]", '{"a": 1}', "[CALL_ID]", "abcdefghi", "Hi ", "[", "]"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(10)))
        cuts = sorted(rng.sample(range(len(text) + 1), min(4, len(text) + 1)))
        check_stream(mistral.ARGS_FLAVOUR, text, [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])])


def test_each_template_gets_its_flavour():
    assert tools.format_of(SMALL.read_text()) is mistral.IDS_FLAVOUR
    assert tools.format_of(DEVSTRAL.read_text()) is mistral.ARGS_FLAVOUR
    assert tools.format_of(MINISTRAL.read_text()) is mistral.ARGS_FLAVOUR
    assert tools.format_of(NEMO.read_text()) is mistral.LIST_FLAVOUR
    assert reasoning.template_markup(MINISTRAL.read_text()) == ("[THINK]", "[/THINK]")


def _template_calls(template, calls):
    """The text the template writes for a past turn of calls (name, arguments, id)."""
    msgs = [{"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for n, a, i in calls]}]
    text = templates.render_jinja(template.read_text(), msgs, False, "<s>", "</s>", tools=[WEATHER, CLOCK])
    return text[text.index(mistral.OPEN):text.rindex("</s>")]


_ID = st.text("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=9, max_size=9)
# (keys in the schema's order, as the JSON schema converter's grammars hold them)
_ARGS = st.builds(lambda city, days, more: {"city": city, "days": days, **dict(sorted(more.items(), reverse=True))},
                  st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12), st.integers(1, 14),
                  st.fixed_dictionaries({}, optional={"units": st.sampled_from(["celsius", "fahrenheit"]),
                                                      "detailed": st.booleans()}))
_CALLS = st.lists(st.one_of(st.tuples(st.just("get_weather"), _ARGS, _ID),
                            st.tuples(st.just("get_time"), st.builds(lambda z, h: {"zone": z, "hours": h},
                                                                     st.sampled_from(["UTC", "CET"]),
                                                                     st.integers(-99, 99)), _ID)),
                  min_size=1, max_size=3)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_CALLS, st.sampled_from([SMALL, DEVSTRAL, MINISTRAL, NEMO]))
def test_the_grammar_admits_what_the_template_writes_and_the_parser_reads_it_back(grammar_text, calls, template):
    """Random calls written as each template writes a past turn of calls: its flavour's forced
    grammar admits the text (llama.cpp's engine), one call (not parallel) admits only one, and the
    parser reads the calls back, with their ids where the template writes them."""
    fmt = tools.format_of(template.read_text())
    text = _template_calls(template, calls)
    checked = tools.check_tools([WEATHER, CLOCK])
    assert grammar_text.admits(fmt.forced_grammar(checked), text), text
    assert grammar_text.admits(fmt.forced_grammar(checked, parallel=False), text) == (len(calls) == 1)
    content, got = _calls(text)
    assert content is None and [(n, a) for n, a, _ in got] == [(n, a) for n, a, _ in calls]
    if fmt is not mistral.ARGS_FLAVOUR:
        assert [i for _, _, i in got] == [i for _, _, i in calls]


@pytest.mark.parametrize("text, admitted", [
    ('[TOOL_CALLS]get_time[ARGS]{"zone": "UTC", "hours": 3}', True),
    ('[TOOL_CALLS]get_time[ARGS]{"zone": "PST", "hours": 3}', False),  # (not in the enum)
    ('[TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}', False),  # (a required key left out)
    ('[TOOL_CALLS]get_date[ARGS]{}', False),  # (no such tool)
    ('Sure.[TOOL_CALLS]get_time[ARGS]{"zone": "UTC", "hours": 3}', False),  # (forced: calls only)
])
def test_the_forced_grammar_holds_calls_to_the_schemas(grammar_text, text, admitted):
    grammar = mistral.ARGS_FLAVOUR.forced_grammar(tools.check_tools([CLOCK, WEATHER]))
    assert grammar_text.admits(grammar, text) == admitted


def test_the_named_tool_and_a_schema_that_cannot_be_followed(grammar_text):
    fmt = mistral.IDS_FLAVOUR
    named = fmt.forced_grammar(tools.check_tools([CLOCK, WEATHER]), "get_time")
    assert grammar_text.admits(named, '[TOOL_CALLS]get_time[CALL_ID]a1b2c3d4e[ARGS]{"zone": "CET", "hours": 1}')
    assert not grammar_text.admits(named, '[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "x", "days": 1}')
    assert not grammar_text.admits(named, '[TOOL_CALLS]get_time[CALL_ID]a1b2[ARGS]{"zone": "CET", "hours": 1}')
    grammar, triggers = fmt.lazy_grammar(tools.check_tools([CLOCK]))
    assert triggers == [r"\[TOOL_CALLS\]"] and grammar == fmt.forced_grammar(tools.check_tools([CLOCK]))
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "number", "maximum": 3}}}}}
    with pytest.raises(ValueError, match="'maximum'"):
        fmt.forced_grammar(tools.check_tools([bad]))


@pytest.mark.parametrize("template", [SMALL, MINISTRAL, NEMO], ids=["small-3.2", "ministral", "nemo"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_forced_call_in_the_templates_flavour(call_decoder, template, stream):
    """The tiny pair under each template with a call forced: the reply is calls in the template's
    flavour, read back into tool_calls by the schema, with ids the template takes back (a next
    turn with the calls and their results renders). (Under Ministral 3's template, which thinks in
    [THINK] first, the grammar would let the tiny model think to max_tokens: asked for no
    reasoning format, the call comes at once.)"""
    fields = dict(tools=[CLOCK], tool_choice="required", temperature=0.9, seed=2, max_tokens=300,
                  parallel_tool_calls=False, reasoning_format="none" if template == MINISTRAL else "auto")
    calls, finish, _, text = forced_call(call_decoder, template, stream, **fields)
    if text is not None:
        assert text.startswith(mistral.OPEN + ("[" if template == NEMO else "get_time")), text
    assert finish == "tool_calls" and calls
    for call in calls:
        args = json.loads(call["function"]["arguments"])
        assert call["function"]["name"] == "get_time" and args["zone"] in ("UTC", "CET")
        assert len(call["id"]) == 9 and call["id"].isalnum()
    turn = ASK + [{"role": "assistant", "content": None, "tool_calls": calls}] + \
        [{"role": "tool", "tool_call_id": c["id"], "content": "12:00"} for c in calls]
    call_decoder.chat_tokens(turn, template=str(template))


@pytest.fixture(scope="module")
def small_server(tiny):
    with template_server(tiny, SMALL) as s:
        yield s


def test_the_openai_client_gets_calls_and_sends_them_back(small_server):
    """Through a real server with the openai client, under Mistral Small 3.2's template: a forced
    call comes back with the id the model wrote, and the next turn, the call and its result sent
    back, is served."""
    from openai import OpenAI

    client = OpenAI(base_url=small_server.url + "/v1", api_key="none", max_retries=0, timeout=600)
    fields = dict(model=client.models.list().data[0].id, tools=[CLOCK], temperature=0.7, seed=5, max_tokens=120)
    out = client.chat.completions.create(messages=ASK, tool_choice="required", parallel_tool_calls=False, **fields)
    call = out.choices[0].message.tool_calls[0]
    assert out.choices[0].finish_reason == "tool_calls" and call.function.name == "get_time"
    assert len(call.id) == 9 and call.id.isalnum()
    messages = ASK + [out.choices[0].message.model_dump(exclude_none=True),
                       {"role": "tool", "tool_call_id": call.id, "content": "12:00"}]
    again = client.chat.completions.create(messages=messages, **fields)
    assert again.choices[0].finish_reason in ("stop", "length", "tool_calls")


@pytest.mark.parametrize("text, want", [  # llama.cpp's cases for Ministral 3's reasoning template
    ("[THINK]I'm\nthinking[/THINK]Hello, world!\nWhat's up?", ("I'm\nthinking", "Hello, world!\nWhat's up?")),
    ('[THINK]I\'m\nthinking[/THINK][TOOL_CALLS]special_function[ARGS]{"arg1":1}',
     ("I'm\nthinking", '[TOOL_CALLS]special_function[ARGS]{"arg1":1}')),
    ('[THINK]Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more[/THINK]'
     '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}',
     ('Let me think about [TOOL_CALLS]special_function[ARGS]{"arg1":1} and more',
      '[TOOL_CALLS]special_function[ARGS]{"arg1": 1}')),
])
def test_magistrals_thinking(text, want):
    """[THINK]...[/THINK] is the thinking, and the calls are read from the answer after it (a call
    in the thinking is not one)."""
    assert reasoning.split(text) == want
    assert _calls(want[1])[1][0][:2] == ("special_function", {"arg1": 1}) if mistral.OPEN in want[1] else True


@pytest.fixture(scope="module")
def control_tags_decoder(tmp_path_factory):
    """The tiny target and a perturbed draft with words renamed [TOOL_CALLS], [ARGS], [CALL_ID]
    and [THINK], [/THINK], control tokens as in Mistral's vocabularies (left out of text unless
    spelled out)."""
    from tiny_models import perturbed, random_weights, vocab, write_model

    d = tmp_path_factory.mktemp("control_tags")
    toks = vocab()
    names = ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"]
    ids = [toks.index(w) for w in ("\u2581hot", "\u2581word", "\u2581but", "\u2581what", "\u2581some")]
    toks = vocab(rename=dict(zip(ids, names)))
    w = random_weights(len(toks), seed=1)
    target = str(write_model(d / "target.gguf", toks, w, control=names))
    draft = str(write_model(d / "draft.gguf", toks, perturbed(w, seed=2, noise=0.15), control=names))
    with specllama.SpeculativeDecoder(target, draft, n_ctx=4096) as dec:
        yield dec, dict(zip(names, ids))


def test_control_token_tags_are_spelled_out(control_tags_decoder):
    """Where the call tags are control tokens (as in Mistral's vocabularies), a forced call's tags
    are spelled out in the text, so the call is read, as llama-server's preserved tokens are; a
    reply's [THINK] block the same (biased to open one), read apart. Negative control: without
    them preserved, the text leaves the tags out and no call is read."""
    from specllama import completions

    dec, ids = control_tags_decoder
    assert dec.target_model.detokenize([ids["[TOOL_CALLS]"]]) == ""  # (a control token: not in plain text)
    bias = {str(ids[t]): 20.0 for t in ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")}  # (the tags as one token each)
    req = completions.parse(dict(messages=ASK, tools=[CLOCK], tool_choice="required", temperature=0.9,
                                 max_tokens=300, parallel_tool_calls=False, logit_bias=bias), "chat")
    tokens = completions.prompt_tokens(dec, req, str(SMALL))
    opts = completions.options_for(dec, req, len(tokens))
    assert set(opts.preserved_tokens) >= {ids["[TOOL_CALLS]"], ids["[ARGS]"], ids["[CALL_ID]"], ids["[THINK]"]}
    for seed in range(3):
        out = dec.generate(tokens, opts, seed=seed)
        assert out.text.startswith("[TOOL_CALLS]get_time[CALL_ID]") and "[ARGS]" in out.text, out.text
        call = completions.response(req, "x", "m", 0, out.text, out.finish_reason, out.stats)["choices"][0]
        assert call["finish_reason"] == "tool_calls"
        opts.preserved_tokens = []
        plain = dec.generate(tokens, opts, seed=seed)
        assert plain.tokens == out.tokens and ids["[TOOL_CALLS]"] in out.tokens and "[TOOL_CALLS]" not in plain.text
        assert mistral.parse(plain.text)[1] == []
        opts.preserved_tokens = completions._preserved(dec, mistral.ARGS_FLAVOUR.TAGS + reasoning.TAGS)
    thought = dec.create_chat_completion(ASK, chat_template=str(MINISTRAL), temperature=1.0, seed=1, max_tokens=40,
                                         logit_bias={str(ids["[THINK]"]): 30.0, str(ids["[/THINK]"]): 3.0})
    message = thought["choices"][0]["message"]
    assert message.get("reasoning_content") is not None and "[THINK]" not in message["content"]


def test_past_thinking_reaches_ministrals_template(call_decoder):
    """An assistant turn's reasoning_content reaches Ministral 3's template as the thinking block it
    reads past thinking from (beside text, or beside calls with content null), as llama.cpp gives
    it; a template without such blocks gets the message as it is."""
    from specllama import templates

    calls = [{"id": "abcdefghi", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}]
    turns = [{"role": "user", "content": "Hi"},
             {"role": "assistant", "content": "Hello.", "reasoning_content": "They greet me."},
             {"role": "user", "content": "Time?"},
             {"role": "assistant", "content": None, "reasoning_content": "Look it up.", "tool_calls": calls},
             {"role": "tool", "tool_call_id": "abcdefghi", "content": "12:00"}]
    text = call_decoder.apply_chat_template(turns, template=str(MINISTRAL))
    assert "[THINK]They greet me.[/THINK]Hello.</s>" in text
    assert '[THINK]Look it up.[/THINK][TOOL_CALLS]get_time[ARGS]{"zone": "UTC"}</s>' in text
    assert templates._thinking_blocks(NEMO.read_text(), turns) is turns
