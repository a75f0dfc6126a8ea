"""Recurrent (Mamba) and hybrid (Jamba: Mamba and attention layers) models as target and as
draft: rollback by checkpoint, output unchanged.

A recurrent state cannot drop a rejected draft's tail. Before a verification (and before a draft
model's draft decodes) the cache saves its state's recurrent part; when not every draft is kept it
restores that state and decodes the kept tokens again. The fixtures are tiny random models of each
architecture quantized to Q4_1, whose batched and one-token logits are bitwise equal (checked
here), so greedy speculative output must equal plain output token for token. Partners: the tiny llama models of
the same vocabulary.
"""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import assert_ctrl_c_leaves_usable
from test_rollback import _restart_checks
from test_sampling_end_to_end import N, _pvalue, first_two_tokens, two_token_distributions
from tiny_models import (jamba_weights, mamba_weights, parts_only_at_near_ties, perturbed, vocab, write_jamba,
                         write_mamba)

import specllama

PROMPTS = ["the cat is", "she was out with", "what some of the", "<|im_start|>user\nhi<|im_end|>\n"]
GREEDY = dict(temperature=0, ignore_eos=True)
ARCHS = {"mamba": (mamba_weights, write_mamba), "jamba": (jamba_weights, write_jamba)}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def rec(request, tiny, tmp_path_factory):
    """A target, a draft made from it by noise, and an unrelated model ("far") of one architecture."""
    weights_of, write = ARCHS[request.param]
    d = tmp_path_factory.mktemp(request.param)
    toks = vocab()
    w = weights_of(len(toks), seed=11)
    ns = SimpleNamespace(arch=request.param)
    for name, weights in [("target", w), ("draft", perturbed(w, seed=12, noise=0.15)),
                          ("far", weights_of(len(toks), seed=13))]:
        f32 = write(d / f"{name}.gguf", toks, weights)
        setattr(ns, name, str(d / f"{name}_q4_1.gguf"))
        specllama.quantize(str(f32), getattr(ns, name), "q4_1")
    ns.llama_target, ns.llama_draft = tiny.target_q, tiny.draft_q
    return ns


def test_batched_and_one_token_logits_are_equal(rec):
    """The premise of the exact greedy comparisons below."""
    m = specllama.Model(rec.target)
    p = m.tokenize("the cat is on the hot word and")
    a, b = specllama.Context(m, n_ctx=128), specllama.Context(m, n_ctx=128)
    one = np.array([a.decode([t])[0] for t in p])
    assert np.array_equal(one, b.decode(p))


@pytest.mark.parametrize("checkpoint,memory", [(True, "host"), (True, "device"), (False, "host")])
def test_rollback_equals_a_fresh_context(rec, checkpoint, memory):
    """After decoding n drafts and keeping k, the next logits equal those of a fresh context fed
    only the kept text: from a checkpoint (a copy in host memory, or llama.cpp's copy where the
    state lives, which on this CPU is host memory too), or (none taken) by decoding everything
    again."""
    m = specllama.Model(rec.target)
    ctx = specllama.Context(m, n_ctx=256, checkpoint_memory=memory)
    assert ctx.recurrent and ctx.checkpoint_memory == memory
    prompt = m.tokenize("the cat is on the")
    drafts = [100, 101, 102, 103, 104]
    for keep in (0, 2, 4):
        ctx.rollback(0)
        ctx.decode(prompt, all_logits=False)
        if checkpoint:
            ctx.checkpoint()
        ctx.decode(drafts)
        ctx.rollback(len(prompt) + keep)
        assert ctx.tokens == prompt + drafts[:keep]
        got = ctx.decode([200])[0]
        fresh = specllama.Context(m, n_ctx=256)
        fresh.decode(prompt + drafts[:keep], all_logits=False)
        assert np.array_equal(got, fresh.decode([200])[0]), keep
    # the negative control: the state after the drafts is not the kept text's
    ctx.rollback(0)
    ctx.decode(prompt + drafts, all_logits=False)
    fresh = specllama.Context(m, n_ctx=256)
    fresh.decode(prompt + drafts[:2], all_logits=False)
    assert not np.array_equal(ctx.decode([200])[0], fresh.decode([200])[0])


@pytest.mark.parametrize("pair", ["rec/rec", "rec/llama", "llama/rec"])
def test_greedy_output_is_the_targets(rec, pair):
    """A recurrent or hybrid target, draft, or both: greedy speculative output equals plain
    decoding at every draft length. The pair of one architecture has drafts both kept and
    corrected; the tiny llama models are unrelated to the others, so there every draft is
    corrected (a restore in every step)."""
    kind_t, kind_d = pair.split("/")
    target = rec.target if kind_t == "rec" else rec.llama_target
    draft = rec.draft if kind_d == "rec" else rec.llama_draft
    drafted = accepted = 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as dec:
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=60, speculative=False, **GREEDY)
            for n_draft in (1, 3, 6):
                r = dec.generate(prompt, max_tokens=60, n_draft=n_draft, drafter="model", adaptive=False, **GREEDY)
                assert r.tokens == plain.tokens, (prompt, n_draft)
                assert r.stats.rollback == "checkpoint"
                drafted += r.stats.n_drafted
                accepted += r.stats.n_accepted
            spec = dec.generate(prompt, max_tokens=60, **GREEDY)  # adaptive, with prompt lookup
            assert spec.tokens == plain.tokens
    assert drafted - accepted >= 30 and (accepted >= 30 or pair != "rec/rec"), (drafted, accepted)


def test_cli_names_the_rollback(rec):
    from click.testing import CliRunner

    from specllama.cli import main

    for extra, memory in (([], "host"), (["--checkpoint-memory", "device"], "device")):
        r = CliRunner().invoke(main, ["generate", "the cat", "-m", rec.target, "-d", rec.draft, "-n", "20",
                                      "--temp", "0", "--n-draft", "3", "--fixed-draft", *extra])
        assert r.exit_code == 0, r.output
        assert f"recurrent memory: rejected drafts undone from checkpoints in {memory} memory" in r.stderr
    r = CliRunner().invoke(main, ["generate", "the cat", "-m", rec.target, "--checkpoint-memory", "gpu"])
    assert r.exit_code == 2 and "'gpu' is not one of" in r.output


@pytest.mark.parametrize("pair", ["rec/rec", "rec/llama", "llama/rec"])
def test_checkpoints_in_device_memory(rec, pair):
    """checkpoint_memory="device" (llama.cpp's copy of the state kept where the state lives, one per
    sequence): the same greedy output as plain decoding, for a recurrent target, draft or both;
    alone, in slots (sampling on the host or on the device), and across a retried prompt, whose checkpoint stays in host memory. "auto"
    keeps checkpoints in host memory where a model is not offloaded."""
    kind_t, kind_d = pair.split("/")
    target = rec.target if kind_t == "rec" else rec.llama_target
    draft = rec.draft if kind_d == "rec" else rec.llama_draft
    kw = dict(GREEDY, max_tokens=40, n_draft=3, drafter="model", adaptive=False)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512, checkpoint_memory="device") as dec:
        slot = dec.slots(2)[1]
        redecoded = 0
        for prompt in PROMPTS[:3]:
            plain = dec.generate(prompt, max_tokens=40, speculative=False, **GREEDY)
            for gen, on_device in ((dec, False), (slot, False), (dec, False), (slot, True)):
                r = gen.generate(prompt, device_sampling=on_device, **kw)
                assert r.tokens == plain.tokens, prompt
                assert r.stats.sampling == ("device" if on_device else "host")
                assert (r.stats.rollback, r.stats.checkpoint_memory) == ("checkpoint", "device")
                redecoded += r.stats.n_redecoded
        assert redecoded > 0
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as dec:
        assert dec.generate(PROMPTS[0], **kw).stats.checkpoint_memory == "host"
    with specllama.SpeculativeDecoder(rec.llama_target, rec.llama_draft, n_ctx=512, checkpoint_memory="device") as dec:
        assert dec.generate(PROMPTS[0], **kw).stats.checkpoint_memory == ""  # a KV cache takes none


def test_checkpoint_memory_is_checked(rec):
    m = specllama.Model(rec.target)
    with pytest.raises(ValueError, match="checkpoint_memory must be auto, host or device, got 'gpu'"):
        specllama.Context(m, checkpoint_memory="gpu")
    with pytest.raises(ValueError, match="checkpoint_memory must be auto, host or device, got 'GPU'"):
        specllama.SpeculativeDecoder(rec.target, rec.draft, checkpoint_memory="GPU")
    with pytest.raises(TypeError, match="checkpoint_memory"):
        specllama.SpeculativeDecoder(rec.target, rec.draft, checkpoint_memory=None)


def test_cli_chat_and_bench_on_recurrent_pairs(rec, tmp_path):
    """`specllama chat` (two turns, the history kept in the state) prints plain decoding's replies;
    `specllama bench` with the recurrent model as target and as draft measures outputs identical
    to plain decoding's, with drafts rejected and undone."""
    from click.testing import CliRunner

    from specllama.chat import ChatSession
    from specllama.cli import main

    with specllama.SpeculativeDecoder(rec.target, n_ctx=512) as plain_dec:
        plain = ChatSession(plain_dec)
        want = ["".join(c.text for c in plain.send(q, max_tokens=16, temperature=0)) for q in ("the cat", "and she")]
    r = CliRunner().invoke(main, ["chat", "-m", rec.target, "-d", rec.draft, "-n", "16", "--temp", "0", "-c", "512"],
                           input="the cat\nand she\n/exit\n")
    assert r.exit_code == 0, r.output
    assert r.stdout == want[0] + "\n" + want[1] + "\n"
    for target, draft in ((rec.target, rec.draft), (rec.llama_target, rec.target)):
        r = CliRunner().invoke(main, ["bench", "-m", target, "-d", draft, "-n", "24", "--prompts", "code,list",
                                      "--sweep-n-draft", "3", "-o", str(tmp_path), "--json"])
        assert r.exit_code == 0, r.output
        rep = json.loads(r.stdout)
        for e in rep["sweep"]:
            assert e["outputs_identical"] == len(e["per_prompt"]) == 2, e
        fixed = [run["stats"] for run in rep["runs"] if run["mode"] == "fixed"]
        assert sum(s["n_drafted"] - s["n_accepted"] for s in fixed) > 0
        assert {s["rollback"] for s in fixed} == {"checkpoint"}  # the recurrent model's, target or draft


def test_llama_pair_keeps_kv_rollback(rec):
    with specllama.SpeculativeDecoder(rec.llama_target, rec.llama_draft) as dec:
        r = dec.generate("the cat", max_tokens=8, **GREEDY)
        assert r.stats.rollback == "kv" and r.stats.t_rollback_ms == 0


def test_chat_turns_reuse_the_prompt(rec):
    """Turn by turn, the history already in the recurrent state is not processed again, and the
    replies equal plain decoding's."""
    from specllama.chat import ChatSession

    turns = ["the cat is on", "and she was", "what of it"]
    with specllama.SpeculativeDecoder(rec.target, rec.draft, n_ctx=1024) as dec:
        session = ChatSession(dec)
        replies = []
        for t in turns:
            chunks = list(session.send(t, max_tokens=30, temperature=0, n_draft=3))
            replies.append("".join(c.text for c in chunks))
        assert chunks[-1].stats.n_prompt_cached > 0
    with specllama.SpeculativeDecoder(rec.target, n_ctx=1024) as plain_dec:
        plain = ChatSession(plain_dec)
        assert replies == ["".join(c.text for c in plain.send(t, max_tokens=30, temperature=0)) for t in turns]


def test_a_retry_comes_back_to_the_prompts_checkpoint(rec):
    """The same prompt again (a retried reply): both models go back to the checkpoint kept where
    the prompt ended, so the retry decodes again only what its steps' rollbacks do, as the first
    did; a Context without that checkpoint decodes the prompt again."""
    prompt = "the cat is on the hot word and she was out with what some of the"
    kw = dict(GREEDY, max_tokens=40, n_draft=3, drafter="model", adaptive=False)
    with specllama.SpeculativeDecoder(rec.target, rec.draft, n_ctx=512) as dec:
        first = dec.generate(prompt, **kw)
        retry = dec.generate(prompt, **kw)
        assert retry.tokens == first.tokens
        assert retry.stats.n_prompt_cached == len(dec.tokenize(prompt)) - 1
        assert retry.stats.n_redecoded == first.stats.n_redecoded > 0
    m = specllama.Model(rec.target)
    ctx = specllama.Context(m, n_ctx=256)
    p = m.tokenize(prompt)
    ctx.decode(p, all_logits=False)
    ctx.checkpoint()
    ctx.decode(m.tokenize(" the cat", add_special=False), all_logits=False)
    ctx.checkpoint()  # replaces the one before
    ctx.rollback(len(p) - 1)
    assert ctx.n_redecoded == len(p) - 1


@pytest.mark.slow
def test_sampling_follows_the_targets_distribution(rec):
    """A recurrent target and a recurrent draft that disagrees often, at temperature 1: the first
    drafted token follows the target's marginal (chi-square)."""
    prompt, p1, p2, q1 = two_token_distributions(rec.target, rec.far, "the cat is on the")
    firsts, seconds, n_rejected = first_two_tokens(rec.target, rec.far, prompt, drafter="model")
    assert n_rejected > N // 4
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    with pytest.raises(AssertionError):
        assert _pvalue(firsts, q1) > 1e-4


def test_ctrl_c_leaves_the_decoder_usable(rec):
    assert_ctrl_c_leaves_usable(rec.target, rec.draft, 4096, PROMPTS)


def test_slots_alone_and_together(rec):
    """Slots (sequences of one context per model; a checkpoint per sequence, saved and restored on
    the batcher's thread): each slot alone gives exactly what the decoder gives; together (decodes
    merged) the Mamba slots too, and the Jamba slots up to near-ties (llama.cpp's attention over a
    cache shared by several sequences rounds otherwise)."""
    kw = dict(GREEDY, max_tokens=40, n_draft=3)
    prompts = PROMPTS[:3]
    with specllama.SpeculativeDecoder(rec.target, rec.draft, n_ctx=256) as dec:
        want = [dec.generate(p, speculative=False, **kw).tokens for p in prompts]
        slots = dec.slots(3)
        for slot in slots:
            assert [slot.generate(p, **kw).tokens for p in prompts] == want
        got = [None] * 3

        def run(i):
            got[i] = slots[i].generate(prompts[(i + 1) % 3], **kw)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert all(r is not None and r.stats.rollback == "checkpoint" for r in got)
        for i, r in enumerate(got):
            p, w = prompts[(i + 1) % 3], want[(i + 1) % 3]
            assert r.tokens == w if rec.arch == "mamba" else parts_only_at_near_ties(rec.target, dec.tokenize(p), r.tokens, w)
        assert slots[0].slot_batching["chunks"] > slots[0].slot_batching["decodes"]  # some were merged


@pytest.mark.parametrize("pair", ["rec/rec", "rec/llama", "llama/rec"])
def test_dsi_output_is_the_targets(rec, pair):
    """DSI with recurrent or hybrid target servers, drafter, or both: each server and the drafter
    keep their checkpoint where the verified text ends, and cancelled tasks (llama_decode aborted
    mid-batch) go back to it. Greedy output equals plain decoding."""
    kind_t, kind_d = pair.split("/")
    target = rec.target if kind_t == "rec" else rec.llama_target
    draft = rec.draft if kind_d == "rec" else rec.llama_draft
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as dec:
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=60, speculative=False, **GREEDY)
            for sp, lookahead in ((2, 3), (3, 1)):
                r = dec.generate(prompt, max_tokens=60, mode="dsi", sp=sp, lookahead=lookahead, **GREEDY)
                assert r.tokens == plain.tokens, (prompt, sp, lookahead)
                assert r.stats.rollback == "checkpoint"
        # the next ordinary generation still gives the same
        assert dec.generate(PROMPTS[0], max_tokens=60, **GREEDY).tokens == \
            dec.generate(PROMPTS[0], max_tokens=60, speculative=False, **GREEDY).tokens


def test_server_with_a_recurrent_pair(rec):
    """`specllama serve` with two slots on the recurrent pair: greedy replies equal plain
    decoding's, the second from the slot that holds the first conversation."""
    from test_server import CHAT, running

    first = [{"role": "user", "content": "the cat is on"}]
    with specllama.SpeculativeDecoder(rec.target, n_ctx=512) as dec:
        want = dec.create_chat_completion(first, temperature=0, max_tokens=24)["choices"][0]["message"]["content"]
        second = first + [{"role": "assistant", "content": want}, {"role": "user", "content": "and she was"}]
        want2 = dec.create_chat_completion(second, temperature=0, max_tokens=24)["choices"][0]["message"]["content"]
    # a fixed draft length, so that every reply drafts whatever this machine's timings teach the
    # adaptive rule
    args = ["-m", rec.target, "-d", rec.draft, "-c", "512", "-np", "2", "--fixed-draft", "--n-draft", "3"]
    with running(args) as server:
        r = server.post(CHAT, {"messages": first, "temperature": 0, "max_tokens": 24}).json()
        assert r["choices"][0]["message"]["content"] == want
        assert r["timings"]["draft_n"] > 0
        r = server.post(CHAT, {"messages": second, "temperature": 0, "max_tokens": 24}).json()
        assert r["choices"][0]["message"]["content"] == want2
        assert r["timings"]["cache_n"] > 0


def test_restart_forgets_a_states_earlier_tokens(rec):
    """What a paused draft's probe does when it lags far behind (kv_cache::restart_at), on a
    recurrent state: the same checks as a KV cache's (test_rollback.py), and the state is exactly a
    fresh one's fed only the tokens after the restart."""
    m = specllama.Model(rec.target)
    _restart_checks(m, "the cat is on the hot word and she was out with a cat on the word of what some of the cat is")
    seq = m.tokenize("the cat is on the hot word and she was out with a cat on the word")
    ctx = specllama.Context(m, n_ctx=256)
    ctx.decode(seq[:12], all_logits=False)
    ctx.restart_at(seq, 8)
    got = ctx.decode(seq[8:20])
    assert np.array_equal(got, specllama.Context(m, n_ctx=256).decode(seq[8:20]))


@pytest.mark.parametrize("pair", ["rec/rec", "llama/llama"])
def test_a_probe_far_behind_catches_up_on_the_last_tokens_alone(rec, pair):
    """Prices at which drafting never pays: the loop pauses, then probes at gaps that grow with
    what a probe costs, and a probe whose draft lags more than 32 tokens behind catches up on
    the last 32 alone (on a KV cache too, where the draft cannot copy the target's keys and
    values). The output is still exactly plain decoding's, and the next generations too. (One thread
    given: past 256 positions a one-token decode's flash attention on the CPU splits the keys among
    the threads, so a tuned count's probes would round the plain and the speculative run's
    one-token decodes apart: tests/test_threads.py.)"""
    target, draft = (rec.target, rec.draft) if pair == "rec/rec" else (rec.llama_target, rec.llama_draft)
    prices = specllama.StepPrices(draft_ms=10.0, verify_ms=10.0, verify_token_ms=10.0)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=1024, share_prefill=False, n_threads=1) as dec:
        for prompt in PROMPTS[:2]:
            plain = dec.generate(prompt, max_tokens=320, speculative=False, prices=prices, **GREEDY)
            r = dec.generate(prompt, max_tokens=320, drafter="model", prices=prices, **GREEDY)
            assert r.tokens == plain.tokens
            assert r.stats.n_window_catch_ups >= 1 and r.stats.n_paused_steps > 250, r.stats


def test_a_new_decoder_on_a_recurrent_target_starts_paused_where_prices_say_drafting_cannot_pay(rec):
    """At a recurrent target's prices on this CPU (a plain step 6.5 ms, a further batch token 4.7 ms,
    given as StepPrices so that the decision does not depend on the machine), a new decoder does not
    draft after its three pricing steps: a rejected draft would be decoded again, and at the prior
    acceptance no first batch pays. Steps 4 and 5 are paused (step 6, with one token left to make,
    drafts nothing). A transformer target at the same prices drops a rejected draft for free, and
    drafts from its fourth step. Both outputs are plain decoding's."""
    prices = specllama.StepPrices(draft_ms=0.5, verify_ms=6.5, verify_token_ms=4.7)
    kw = dict(GREEDY, max_tokens=6, drafter="model", prices=prices)
    for target, recurrent in ((rec.target, True), (rec.llama_target, False)):
        with specllama.SpeculativeDecoder(target, rec.draft, n_ctx=256) as dec:
            r = dec.generate(PROMPTS[0], **kw)
            model = dec._native().cost_model()  # (before the plain run below prices plain steps as measured)
            assert r.tokens == dec.generate(PROMPTS[0], max_tokens=6, speculative=False, **GREEDY).tokens
        if recurrent:
            assert r.stats.n_drafted == 0 and r.stats.n_paused_steps == 2, r.stats
            assert model["paused"] and not model["pays_at_prices"]
        else:
            assert r.stats.n_drafted > 0, r.stats


def test_a_probe_that_reads_what_its_draft_sat_out_prices_no_catch_up(rec):
    """At the recurrent target's prices above, a new decoder starts paused and its draft never reads
    the first prompt; in the next generation the first probe's draft reads both prompts and the
    tokens since before drafting. That read counts in the probe's time, not as the price of a step's
    catch-up (given prices make a catch-up cost one draft decode, 0.5 ms: the rule would hold that);
    the generation ends with the probe."""
    prices = specllama.StepPrices(draft_ms=0.5, verify_ms=6.5, verify_token_ms=4.7)
    kw = dict(GREEDY, drafter="model", prices=prices)
    with specllama.SpeculativeDecoder(rec.target, rec.draft, n_ctx=512) as dec:
        assert dec.generate(PROMPTS[0], max_tokens=6, **kw).stats.n_drafted == 0
        r = dec.generate(PROMPTS[1], max_tokens=13, record_steps=True, **kw)
        drafting = [t for t in r.stats.steps if t.n_model > 0]
        assert len(drafting) == 1 and drafting[0].probe and drafting[0].catch_up_ms == 0.5, r.stats.steps
        assert dec._native().cost_model()["catch_up_ms"] == 0.0


def test_device_sampling_on_recurrent_models(rec):
    """The chain in the decode graph on recurrent and hybrid models, whose rejected drafts go back to
    a checkpoint: the same tokens as sampling on the host, greedy and with one seed."""
    with specllama.SpeculativeDecoder(rec.target, rec.draft, n_ctx=512) as dec:
        for prompt in PROMPTS[:2]:
            for kw in (dict(temperature=0), dict(temperature=0.8, seed=5)):
                got = [dec.generate(prompt, max_tokens=40, n_draft=3, drafter="model", adaptive=False,
                                    ignore_eos=True, device_sampling=on, **kw) for on in (True, False)]
                assert [g.stats.sampling for g in got] == ["device", "host"]
                assert got[0].stats.rollback == "checkpoint" and got[0].stats.n_accepted < got[0].stats.n_drafted
                assert got[0].tokens == got[1].tokens, (prompt, kw)
