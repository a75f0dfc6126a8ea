"""A reasoning model's thinking budget (llama-server's --reasoning-budget): after N thinking tokens
the message and the closing tag are forced, at every drafted and verified position alike, against
an oracle over many sampled replies (negative control: no budget); speculative and plain decoding
give the same replies under keyed draws; chi-square on the tokens around the forced text
(negative control: the target without it); the request fields, --reasoning-budget and Anthropic's
thinking budget through real servers and clients."""

from __future__ import annotations

import numpy as np
import pytest

import specllama
from specllama import RequestError
from test_server import running

TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")


@pytest.fixture(scope="module")
def thinking_pair(tmp_path_factory):
    """The tiny target and the far draft with two words renamed <think> and </think> (tokens
    rendered in the text, as a reasoning model's are): (target, draft, open id, close id, vocabulary)."""
    from tiny_models import random_weights, vocab, write_model

    d = tmp_path_factory.mktemp("thinking_budget")
    toks = vocab()
    o, c = toks.index("\u2581hot"), toks.index("\u2581word")
    toks = vocab(rename={o: "<think>", c: "</think>"})
    tags = ["<think>", "</think>"]
    target = str(write_model(d / "target.gguf", toks, random_weights(len(toks), seed=1), user_defined=tags))
    draft = str(write_model(d / "draft.gguf", toks, random_weights(len(toks), seed=3), user_defined=tags))
    return target, draft, o, c, toks


def _budget(o, c, forced, n, opened):
    return dict(thinking_budget=n, thinking_budget_opened=opened, thinking_budget_start=[o],
                thinking_budget_ends=[[c]], thinking_budget_forced=forced)


def _mid_character(text: bytes) -> bool:
    """Whether text ends inside a UTF-8 character of several bytes."""
    for k in range(1, min(4, len(text)) + 1):
        b = text[-k]
        if b & 0xC0 != 0x80:
            return k < (1 if b < 0x80 else 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else
                        4 if b & 0xF8 == 0xF0 else 1)
    return False


def _where_forced(reply, o, c, n, opened, piece=None):
    """Where the budget's forced text must begin in reply (None: nowhere), by the rule itself: after
    n thinking tokens, or where a character of several tokens ends (three tokens later at most),
    given each token's bytes (piece)."""
    start = 0 if opened else next((i + 1 for i, t in enumerate(reply) if t == o), None)
    if start is None:
        return None
    for i in range(start, len(reply) + 1):
        count = i - start
        if count >= n and (piece is None or count >= n + 3 or
                           not _mid_character(b"".join(piece(t) for t in reply[start:i]))):
            return i
        if i == len(reply) or reply[i] == c:
            return None
    return None


@pytest.mark.parametrize("opened", [True, False])
@pytest.mark.parametrize("acceptance", ["rejection", "keyed"])
def test_the_closing_tag_is_forced_after_the_budget(thinking_pair, opened, acceptance):
    """Replies sampled with the far draft (most drafts rejected, so forced positions are verified
    after rejections too): wherever the thinking ran N tokens without closing, the forced text
    comes right after them. Negative control: the same replies without a budget do not have it there."""
    target, draft, o, c, toks = thinking_pair
    forced = [toks.index("\u2581the"), c]
    model = specllama.Model(target)
    prompt = model.tokenize("the cat") + ([o] if opened else [])
    bias = {o: 5.0} if not opened else {}
    hits = misses = 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=256) as dec:
        for n in (0, 1, 4):
            for seed in range(12):
                kw = dict(temperature=1.0, seed=seed, max_tokens=16, n_draft=3, acceptance=acceptance, logit_bias=bias)
                reply = dec.generate(prompt, **kw, **_budget(o, c, forced, n, opened)).tokens
                at = _where_forced(reply, o, c, n, opened, lambda t: model.token_to_piece(t, True))
                if at is not None and at + len(forced) <= len(reply):
                    assert reply[at:at + len(forced)] == forced, (n, seed, reply)
                    hits += 1
                free = dec.generate(prompt, **kw).tokens
                at = _where_forced(free, o, c, n, opened, lambda t: model.token_to_piece(t, True))
                misses += at is not None and at + len(forced) <= len(free) and free[at:at + len(forced)] != forced
    assert hits >= 12 and misses >= hits // 2, (hits, misses)


def test_a_budget_spent_inside_a_character_waits_for_it(thinking_pair):
    """The byte tokens of "€" (E2 82 AC) made likely: where the budget runs out inside a character,
    the forced text waits until it ends (three tokens at most), as llama-server's does. Negative
    control: the rule without the wait puts the forced text elsewhere in many of these replies."""
    target, draft, o, c, toks = thinking_pair
    model = specllama.Model(target)
    prompt = model.tokenize("the cat") + [o]
    forced = [c]
    bias = {toks.index(f"<0x{b:02X}>"): 4.0 for b in (0xE2, 0x82, 0xAC)}
    waited = 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=256) as dec:
        for n in (1, 2, 3):
            for seed in range(20):
                reply = dec.generate(prompt, temperature=1.0, seed=seed, max_tokens=12, n_draft=3, logit_bias=bias,
                                     **_budget(o, c, forced, n, True)).tokens
                at = _where_forced(reply, o, c, n, True, lambda t: model.token_to_piece(t, True))
                assert at is not None and reply[at] == c, (n, seed, reply)
                waited += at != _where_forced(reply, o, c, n, True)
    assert waited >= 10, waited


def test_each_thinking_block_gets_a_budget(thinking_pair):
    """A reply that opens a thinking block again after closing one (as some models do) gets a new
    budget for it: the forced tag comes after each block's first N tokens."""
    target, draft, o, c, toks = thinking_pair
    model = specllama.Model(target)
    piece = lambda t: model.token_to_piece(t, True)  # noqa: E731
    prompt = model.tokenize("the cat")
    second_forced = 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=256) as dec:
        for seed in range(40):
            reply = dec.generate(prompt, temperature=1.0, seed=seed, max_tokens=24, n_draft=3,
                                 logit_bias={o: 5.0, c: 1.0}, **_budget(o, c, [c], 2, False)).tokens
            at, blocks = 0, 0
            while o in reply[at:]:  # each block: from its <think> on
                rest = reply[reply.index(o, at):]
                where = _where_forced(rest, o, c, 2, False, piece)
                if where is not None and where < len(rest):
                    assert rest[where] == c, (seed, reply)
                    second_forced += blocks > 0
                closed = rest.index(c) if c in rest else len(rest)
                at = len(reply) - len(rest) + closed + 1
                blocks += 1
    assert second_forced >= 5, second_forced


def test_speculation_and_plain_decoding_agree_under_the_budget(thinking_pair):
    """Keyed draws: a reply depends only on the seed and the (controlled) target, so with the budget
    the speculative reply equals the plain one, forced text included."""
    target, draft, o, c, toks = thinking_pair
    model = specllama.Model(target)
    prompt = model.tokenize("the cat") + [o]
    budget = _budget(o, c, [toks.index("\u2581the"), c], 3, True)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=256) as dec:
        for seed in range(20):
            kw = dict(temperature=1.0, seed=seed, max_tokens=12, **budget)
            spec = dec.generate(prompt, n_draft=4, **kw)
            assert spec.tokens == dec.generate(prompt, speculative=False, **kw).tokens, seed
            at = _where_forced(spec.tokens, o, c, 3, True, lambda t: model.token_to_piece(t, True))
            assert at is None or spec.tokens[at:at + 2] == budget["thinking_budget_forced"][:len(spec.tokens) - at]


@pytest.mark.slow
@pytest.mark.parametrize("n", [0, 1])
def test_sampling_around_the_forced_text_follows_the_target(thinking_pair, n):
    """A budget of 0 forces the closing tag first, and the next token follows the target after it;
    a budget of 1 leaves the first token the target's and forces the second. Chi-square against
    the target's distributions; negative control: the target's distribution without the forced tag."""
    from test_grammar import CHAIN, N, _marginals
    from test_sampling_end_to_end import _pvalue, first_two_tokens, pvalue_or_zero

    target, draft, o, c, toks = thinking_pair
    prompt = specllama.Model(target).tokenize("the cat") + [o]
    firsts, seconds, n_rejected = first_two_tokens(target, draft, prompt, CHAIN, N, **_budget(o, c, [c], n, True))
    free = _marginals(target, prompt, constrained=False)[0]
    if n == 0:  # (the second token is a draft the target verified: the far draft's, mostly rejected)
        assert (firsts == c).all() and n_rejected > N // 10, "the pair must disagree for this test to mean anything"
        after = _marginals(target, prompt + [c], constrained=False)[0]
        assert _pvalue(seconds, after) > 1e-4
        assert pvalue_or_zero(seconds, free) < 1e-6
    else:  # (the forced second token is drafted as forced, and kept; after a first token that ends
        # inside a character, the budget waits)
        model = specllama.Model(target)
        whole = np.array([not _mid_character(model.token_to_piece(int(t), True)) for t in firsts])
        assert (seconds[whole] == c).all() and whole.mean() > 0.5
        assert _pvalue(firsts, free) > 1e-4
        assert pvalue_or_zero(firsts, _marginals(target, prompt + [c], constrained=False)[0]) < 1e-6


def test_a_budget_needs_its_tokens(thinking_pair):
    target, draft, o, c, toks = thinking_pair
    with specllama.SpeculativeDecoder(target, draft, n_ctx=128) as dec:
        for bad in (dict(thinking_budget_forced=[]), dict(thinking_budget_start=[], thinking_budget_opened=False),
                    dict(thinking_budget_forced=[10 ** 6]), dict(thinking_budget_ends=[[c], [-1]])):
            with pytest.raises(ValueError, match="thinking budget"):
                dec.generate([1, 2], max_tokens=2, **dict(_budget(o, c, [c], 2, True), **bad))
        assert dec.generate([1, 2], max_tokens=2, **dict(_budget(o, c, [], -1, True))).tokens  # (-1: none)


# --- through the chat API and servers -----------------------------------------------------------

@pytest.fixture(scope="module")
def template_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("budget_template") / "opens_thinking.jinja"
    path.write_text(TEMPLATE)
    return str(path)


def test_a_chat_request_with_a_budget(thinking_pair, template_file):
    """reasoning_budget_tokens (or thinking_budget_tokens) and reasoning_budget_message through
    create_chat_completion: the reasoning is the first N tokens, then the message, and the answer
    follows the closing tag; bad values are 400s naming the field."""
    target, draft, o, c, toks = thinking_pair
    messages = [{"role": "user", "content": "the cat"}]
    with specllama.SpeculativeDecoder(target, draft, n_ctx=256) as dec:
        forced = dec.tokenize(" the", add_special=False) + [c]
        closed = 0
        for field in ("reasoning_budget_tokens", "thinking_budget_tokens"):
            for seed in range(6):
                out = dec.create_chat_completion(messages, chat_template=template_file, temperature=1.0, seed=seed,
                                                 max_tokens=20, return_tokens=True,
                                                 **{field: 3, "reasoning_budget_message": " the"})
                tokens = out["choices"][0]["tokens"]
                end = tokens.index(c)
                at = _where_forced(tokens, o, c, 3, True, lambda t: dec.target_model.token_to_piece(t, True))
                if at is not None:  # (else the model closed the thinking itself)
                    assert tokens[at:at + len(forced)] == forced, tokens
                    closed += 1
                    assert end == at + len(forced) - 1
                assert out["choices"][0]["message"]["reasoning_content"] == dec.detokenize(tokens[:end]).strip()
        assert closed >= 6
        for bad, value in (("reasoning_budget_tokens", -2), ("thinking_budget_tokens", "4"),
                           ("reasoning_budget_message", 7)):
            with pytest.raises(RequestError) as e:
                dec.create_chat_completion(messages, chat_template=template_file, max_tokens=2, **{bad: value})
            assert e.value.param == bad


@pytest.fixture(scope="module")
def budget_server(thinking_pair, template_file):
    target, draft, o, c, toks = thinking_pair
    with running(["-m", target, "-d", draft, "-c", "256", "--chat-template", template_file, "--alias", "tiny",
                  "--reasoning-budget", "2"]) as s:
        yield s


def test_the_servers_budget_and_a_requests(budget_server, thinking_pair):
    """--reasoning-budget 2 holds for a request that gives none (and for -1, as llama-server reads
    it); a request's budget overrides it; the openai client reads the reasoning apart."""
    from openai import OpenAI

    target, draft, o, c, toks = thinking_pair
    client = OpenAI(base_url=budget_server.url + "/v1", api_key="none", max_retries=0, timeout=600)
    kw = dict(model="tiny", messages=[{"role": "user", "content": "the cat"}], temperature=1.0, max_tokens=16)
    for extra, n in (({}, 2), ({"reasoning_budget_tokens": -1}, 2), ({"reasoning_budget_tokens": 5}, 5)):
        for seed in range(4):
            out = client.chat.completions.create(seed=seed, extra_body=dict(extra, return_tokens=True), **kw)
            tokens = out.choices[0].model_extra["tokens"]
            piece = specllama.Model(target).token_to_piece
            at = _where_forced(tokens, o, c, n, True, lambda t: piece(t, True))
            assert at == tokens.index(c) or (at is None and tokens.index(c) < n), (extra, tokens)
            assert out.choices[0].message.model_extra["reasoning_content"] == \
                specllama.Model(target).detokenize(tokens[:tokens.index(c)]).strip()


def test_anthropics_thinking_budget(budget_server, thinking_pair):
    """Anthropic's thinking {"type": "enabled", "budget_tokens": N} is the budget (and a thinking
    block comes back)."""
    from anthropic import Anthropic

    from openai import OpenAI

    messages = [{"role": "user", "content": "the cat"}]
    with Anthropic(base_url=budget_server.url, api_key="none", max_retries=0, timeout=600) as client, \
            OpenAI(base_url=budget_server.url + "/v1", api_key="none", max_retries=0, timeout=600) as openai:
        thoughts = []
        for budget in (1, 6):
            m = client.messages.create(model="tiny", max_tokens=16, messages=messages,
                                       thinking={"type": "enabled", "budget_tokens": budget},
                                       extra_body={"seed": 3, "temperature": 1.0})
            assert m.content[0].type == "thinking"
            chat = openai.chat.completions.create(model="tiny", max_tokens=16, messages=messages, seed=3,
                                                  temperature=1.0, extra_body={"reasoning_budget_tokens": budget})
            assert m.content[0].thinking == chat.choices[0].message.model_extra["reasoning_content"]
            thoughts.append(m.content[0].thinking)
        assert len(thoughts[0]) < len(thoughts[1])


@pytest.mark.real_pair
def test_the_qwen_pair_thinks_within_its_budget(qwen_decoder, tmp_path):
    """The Qwen2.5-Coder pair under a template that opens the thinking (its vocabulary spells
    </think> in several tokens), greedy: with a budget of 24 the reasoning is the reply's first 24
    tokens and the closing tag's tokens follow them; without one it runs on to max_tokens."""
    from test_reasoning import OPENING_TEMPLATE

    template = tmp_path / "opens_thinking.jinja"
    template.write_text(OPENING_TEMPLATE)
    messages = [{"role": "system", "content": "Think step by step inside <think> </think>, then answer."},
                {"role": "user", "content": "Is 391 a prime number?"}]
    close = qwen_decoder.tokenize("</think>", add_special=False)
    assert len(close) > 1
    for budget in (-1, 24):
        out = qwen_decoder.create_chat_completion(messages, chat_template=str(template), temperature=0, max_tokens=80,
                                                  reasoning_budget_tokens=budget, return_tokens=True)
        tokens, msg = out["choices"][0]["tokens"], out["choices"][0]["message"]
        if budget < 0:
            assert len(tokens) == 80 and msg["content"] == ""
        else:
            assert tokens[24:24 + len(close)] == close
            assert msg["reasoning_content"] == qwen_decoder.detokenize(tokens[:24]).strip()
