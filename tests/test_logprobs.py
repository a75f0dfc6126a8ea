"""Log-probabilities of the emitted tokens (GenerateOptions.logprobs; OpenAI's logprobs and
top_logprobs): each entry is the target's final distribution at the token's position, as plain
decoding would see it (the chain's when sampling, the softmax of the logits when greedy), with
the controls applied, whichever step drafted the token; and in OpenAI's shapes from the server."""

from __future__ import annotations

import math

import numpy as np
import pytest

import specllama
from test_server import _client, server  # noqa: F401  (the module's server fixture)

CHAIN = dict(temperature=0.9, top_k=20, top_p=0.95, min_p=0.0)


@pytest.mark.parametrize("greedy", [True, False])
def test_each_tokens_logprob_is_the_targets_at_its_position(tiny, greedy):
    """Q4_1 weights (a verification batch's logits equal a fresh pass's), a draft that disagrees
    often, a penalty (so that the position's history matters): every entry is the distribution
    plain decoding has at that position."""
    settings = dict(CHAIN, temperature=0.0) if greedy else CHAIN
    controls = dict(repeat_penalty=1.5, repeat_last_n=16)
    model = specllama.Model(tiny.target_q)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        prompt = dec.tokenize("the cat is on the")
        r = dec.generate(prompt, max_tokens=24, ignore_eos=True, seed=3, n_draft=4, adaptive=False, logprobs=3,
                         **settings, **controls)
    assert r.stats.n_drafted > 0 and len(r.logprobs) == len(r.tokens)
    # at temperature 0 the entries are the softmax of the controlled logits
    chain = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0) if greedy else settings
    for i, (e, tok) in enumerate(zip(r.logprobs, r.tokens)):
        hist = prompt + list(r.tokens[:i])
        row = specllama.Context(model, n_ctx=256).decode(hist, all_logits=False)[-1]
        with np.errstate(divide="ignore"):
            lp = np.log(specllama.sampling_distribution(row, **chain, history=hist, **controls).astype(np.float64))
        assert e.token == tok
        assert e.logprob == pytest.approx(lp[tok], abs=1e-4), i
        likeliest = [int(t) for t in np.argsort(-lp, kind="stable") if lp[t] > -np.inf][:3]  # (sampling: the chain's)
        assert [t for t, _ in e.top] == likeliest, i
        assert [v for _, v in e.top] == pytest.approx([lp[t] for t, _ in e.top], abs=1e-4)
        if greedy:
            assert e.top[0][0] == tok


def test_logprobs_out_of_range_are_refused(tiny):
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=128) as dec:
        with pytest.raises(ValueError, match="logprobs"):
            dec.generate("the cat", max_tokens=2, logprobs=21)


def test_openai_logprobs_streamed_and_not(server):  # noqa: F811
    """The official client: chat's logprobs with top_logprobs, the chosen token's logprob equal to
    its entry among the top ones (greedy: the first), streamed equal to whole; completions'
    tokens, token_logprobs, top_logprobs and text_offset."""
    client = _client(server)
    msgs = [{"role": "user", "content": "the cat is on"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, temperature=0, max_tokens=12, logprobs=True,
                                       top_logprobs=2)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens and "".join(c.token for c in content).startswith(
        r.choices[0].message.content[:1])
    for c in content:
        assert len(c.top_logprobs) == 2 and c.top_logprobs[0].token == c.token
        assert c.top_logprobs[0].logprob == c.logprob <= 0 and bytes(c.bytes).decode("utf-8", "replace") == c.token
    streamed = []
    for chunk in client.chat.completions.create(model="tiny", messages=msgs, temperature=0, max_tokens=12,
                                                logprobs=True, top_logprobs=2, stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.content
    assert [(c.token, c.logprob) for c in streamed] == [(c.token, c.logprob) for c in content]

    t = client.completions.create(model="tiny", prompt="she was out with", temperature=0, max_tokens=10, logprobs=2)
    lp = t.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 10
    assert lp.text_offset == [sum(len(x) for x in lp.tokens[:i]) for i in range(10)]
    assert all(max(top.values()) == pytest.approx(v) and not math.isinf(v)
               for top, v in zip(lp.top_logprobs, lp.token_logprobs))


@pytest.mark.parametrize("body, param", [({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                                         ({"top_logprobs": 2}, "top_logprobs"),
                                         ({"logprobs": "yes"}, "logprobs")])
def test_bad_logprobs_requests_are_400s(server, body, param):  # noqa: F811
    r = server.post("/v1/chat/completions", dict(body, messages=[{"role": "user", "content": "hi"}], max_tokens=2))
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
