"""Distributed Speculative Inference (mode="dsi"): lossless, cancellable, and never slower than
SI or non-SI on the simulated servers the orchestrator's own code path runs against.

Exactness is tested as for speculative decoding (see test_greedy_equivalence.py for the numerics
caveat): on the batch-invariant Q4_1 tiny pair DSI's greedy output must be IDENTICAL to plain
decoding, whatever the number of servers, the lookahead and the timing (which decides how the
verification batches are cut); on the default pair (F32 target) it must be identical or first
differ where the target's top-2 gap is within twice the measured batch-kernel difference. At
temperature > 0 the emitted tokens must follow the target's distribution (chi-square, as in
test_sampling_end_to_end.py).
"""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import specllama
from specllama import simulate
from conftest import interrupt_at_step
from test_greedy_equivalence import CHAT_PROMPTS, PROMPTS, _logits_one_by_one, near_tie_reference
from test_sampling_end_to_end import SETTINGS, _pvalue, two_token_distributions


def test_slow_pair_is_batch_invariant(slow):
    model = specllama.Model(slow.target)
    tokens = model.tokenize("the cat is on the hot word and they were all there")
    batched = specllama.Context(model, n_ctx=512).decode(tokens, all_logits=True)
    np.testing.assert_array_equal(batched, _logits_one_by_one(model, tokens))


@pytest.mark.parametrize("wait_for_drafts", [False, True])
@pytest.mark.parametrize("sp,lookahead,device", [(1, 1, False), (1, 4, False), (2, 2, False), (3, 8, False),
                                                 (1, 4, True), (2, 2, True)])
def test_dsi_greedy_identical_on_batch_invariant_pair(slow, sp, lookahead, device, wait_for_drafts):
    """Identical output whatever the threads' timing, the argmax read from whole rows or from the
    device chain's; with wait_for_drafts every token is a judged draft, so the acceptance path is
    exercised however busy the machine is."""
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512) as dec:
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=48, temperature=0, speculative=False, ignore_eos=True)
            dsi = dec.generate(prompt, max_tokens=48, temperature=0, ignore_eos=True, mode="dsi", sp=sp,
                               lookahead=lookahead, wait_for_drafts=wait_for_drafts, device_sampling=device)
            assert dsi.stats.sampling == ("device" if device else "host")
            assert dsi.tokens == plain.tokens, f"prompt {prompt!r}"
            assert dsi.text == plain.text
            d = dsi.dsi
            assert (d.sp, d.lookahead) == (sp, lookahead)
            assert d.n_accepted <= d.n_checked
            # every token came from a judged draft or from the target alone
            assert d.n_checked + d.n_target_only == len(dsi.tokens)
            if wait_for_drafts:  # the last position is the target's alone: the drafter stops before it
                assert d.n_target_only == 1 and d.n_checked == len(dsi.tokens) - 1
                assert d.n_accepted < d.n_checked  # the draft is sometimes wrong: rejections happened


@pytest.mark.parametrize("sp,lookahead", [(1, 3), (2, 2)])
def test_dsi_padded_batches_keep_the_output_and_drop_the_padding(slow, sp, lookahead):
    """verify_shape="padded" (what "auto" does on a GPU of this machine): a server batch shorter than
    sp * lookahead is padded to that length, every row an output; the servers read their tasks'
    rows among them, so the output stays plain decoding's, and so does the next generation's."""
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512, verify_shape="padded",
                                      draft_catch_up="tokens") as dec:
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=48, temperature=0, speculative=False, ignore_eos=True)
            r = dec.generate(prompt, max_tokens=48, temperature=0, ignore_eos=True, mode="dsi", sp=sp,
                             lookahead=lookahead, wait_for_drafts=True)
            assert r.tokens == plain.tokens, f"prompt {prompt!r}"
            assert r.dsi.pad_to == sp * lookahead
            assert r.dsi.n_padded > 0
            assert r.dsi.n_accepted < r.dsi.n_checked  # (rejections: restarts made short batches)
            assert dec.generate(prompt, max_tokens=48, temperature=0, ignore_eos=True).tokens == plain.tokens
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512, verify_shape="exact") as dec:
        r = dec.generate(PROMPTS[0], max_tokens=24, temperature=0, ignore_eos=True, mode="dsi", sp=sp,
                         lookahead=lookahead)
        assert (r.dsi.pad_to, r.dsi.n_padded) == (0, 0)


def test_dsi_with_a_bad_draft_cancels_and_stays_exact(slow):
    """A draft that is mostly wrong: rejections cancel tasks and drafts; output still exact.
    (wait_for_drafts: every token is a judged draft, so drafts are checked however busy the machine;
    racing, the target can make a whole reply before the drafter's first draft.)"""
    with specllama.SpeculativeDecoder(slow.target, slow.far, n_ctx=512) as dec:
        n_cancelled = 0
        for prompt in PROMPTS:
            plain = dec.generate(prompt, max_tokens=40, temperature=0, speculative=False, ignore_eos=True)
            dsi = dec.generate(prompt, max_tokens=40, temperature=0, ignore_eos=True, mode="dsi", sp=3,
                               lookahead=2, wait_for_drafts=True)
            assert dsi.tokens == plain.tokens
            assert dsi.dsi.n_accepted < dsi.dsi.n_checked
            n_cancelled += dsi.dsi.n_tasks_cancelled
        assert n_cancelled > 0


def test_dsi_then_plain_generation_still_exact(slow):
    """DSI leaves the decoder's caches holding drafts; later generations must not see them."""
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512) as dec:
        ref = dec.generate(PROMPTS[1], max_tokens=32, temperature=0, speculative=False, ignore_eos=True).tokens
        dec.generate(PROMPTS[1], max_tokens=32, temperature=0, mode="dsi", sp=2, lookahead=3, ignore_eos=True)
        assert dec.generate(PROMPTS[1], max_tokens=32, temperature=0, ignore_eos=True).tokens == ref
        assert dec.generate(PROMPTS[1], max_tokens=32, temperature=0, speculative=False,
                            ignore_eos=True).tokens == ref


def test_dsi_draft_reads_the_prompt_in_its_own_thread(slow, tiny):
    """A draft that decodes the prompt reads it in the drafter's thread as the run starts, so that
    the target's first tokens do not wait for it; a draft whose keys and values the target's stand
    in for copies them before the run. Either way the output is plain decoding's, and a run that
    ends while the draft is still reading leaves its cache fit for the next runs."""
    words = "the cat is on the hot word and they were all there"
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512) as dec:
        assert not dec.shares_prefill
        prompt, other = dec.tokenize(f"{words} {words}"), dec.tokenize(f"{words} and then {words} again")
        plain = {tuple(p): dec.generate(p, max_tokens=24, temperature=0, speculative=False, ignore_eos=True).tokens
                 for p in (prompt, other)}
        dec.reset()
        # with wait_for_drafts every emitted token waits for a draft, so the draft reads all of it
        kw = dict(max_tokens=24, temperature=0, ignore_eos=True, mode="dsi", sp=2, wait_for_drafts=True)
        r = dec.generate(prompt, **kw)
        assert r.tokens == plain[tuple(prompt)]
        assert r.dsi.n_draft_prompt == len(prompt) - 1 and r.dsi.t_draft_prompt_ms > 0
        assert r.stats.n_prompt_shared == 0
        again = dec.generate(prompt, **kw)  # the draft's cache holds the prompt: nothing to read
        assert again.tokens == plain[tuple(prompt)] and again.dsi.n_draft_prompt == 0
        # one token: the run may end while the draft reads (it stops, holding what it held before)
        for _ in range(3):
            dec.reset()
            one = dec.generate(other, max_tokens=1, temperature=0, mode="dsi", sp=2)
            assert one.tokens == plain[tuple(other)][:1]
            assert one.dsi.n_draft_prompt in (0, len(other) - 1)
            assert dec.generate(other, **kw).tokens == plain[tuple(other)]
            assert dec.generate(other, max_tokens=24, temperature=0, ignore_eos=True).tokens == plain[tuple(other)]
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=512) as dec:
        assert dec.shares_prefill
        ref = dec.generate(prompt, max_tokens=16, temperature=0, speculative=False, ignore_eos=True).tokens
        dec.reset()
        r = dec.generate(prompt, **{**kw, "max_tokens": 16})
        assert r.tokens == ref
        assert r.dsi.n_draft_prompt == 0 and r.dsi.t_draft_prompt_ms == 0
        assert r.stats.n_prompt_shared == len(prompt) - 1
        assert r.dsi.n_server_prompt == 0  # (the second server copied the first's keys and values)


@pytest.mark.parametrize("share_prefill", [True, False])
def test_dsi_servers_copy_or_read_the_prompt_in_their_threads(slow, share_prefill):
    """Servers beyond the first copy its keys and values before the run where that pays (on a CPU),
    or read the prompt in their threads as the run starts (share_prefill=False, as on a GPU), and get
    tasks once they have; the output is plain decoding's either way, and stays so in later runs."""
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=512, share_prefill=share_prefill) as dec:
        for prompt in PROMPTS:
            n_prompt = len(dec.tokenize(prompt))
            plain = dec.generate(prompt, max_tokens=40, temperature=0, speculative=False, ignore_eos=True).tokens
            for _ in range(2):
                dec.reset()
                r = dec.generate(prompt, max_tokens=40, temperature=0, ignore_eos=True, mode="dsi", sp=3,
                                 lookahead=2)
                assert r.tokens == plain
                d = r.dsi
                assert len(d.n_server_tasks) == 3 and sum(d.n_server_tasks) == d.n_tasks
                if share_prefill:
                    assert d.n_server_prompt == 0
                else:  # each server read all of it, or was stopped with nothing read
                    assert d.n_server_prompt in (0, n_prompt - 1, 2 * (n_prompt - 1))
                again = dec.generate(prompt, max_tokens=40, temperature=0, ignore_eos=True, mode="dsi", sp=3,
                                     lookahead=2)
                assert again.tokens == plain


@pytest.mark.slow
@pytest.mark.parametrize("verify_shape,device_sampling,wait_for_drafts",
                         [("exact", False, True), ("padded", False, True), ("exact", True, True),
                          ("exact", False, False)])
def test_dsi_sampling_follows_target(slow, verify_shape, device_sampling, wait_for_drafts):
    """Also with the sampling chains on the device (the CPU backend runs them): the drafter's q and
    the servers' p are the chain's distributions over the candidates that came back. With
    wait_for_drafts both tokens are drafts the rejection rule judged (the third is the target's
    alone); without, the first token comes from the prompt's own pass before the drafter has read
    the prompt, a draw from the target's distribution."""
    prompt, p1, p2, q1 = two_token_distributions(slow.target, slow.far, "the cat is on the")
    n = 2000
    firsts, seconds, n_checked, n_rejected, n_padded, n_target_only = [], [], 0, 0, 0, 0
    with specllama.SpeculativeDecoder(slow.target, slow.far, n_ctx=128, verify_shape=verify_shape) as dec:
        for seed in range(n):
            r = dec.generate(prompt, max_tokens=3 if wait_for_drafts else 2, seed=seed, ignore_eos=True,
                             mode="dsi", sp=2, lookahead=1, device_sampling=device_sampling,
                             wait_for_drafts=wait_for_drafts, **SETTINGS)
            assert len(r.tokens) == (3 if wait_for_drafts else 2)
            assert r.stats.sampling == ("device" if device_sampling else "host")
            firsts.append(r.tokens[0])
            seconds.append(r.tokens[1])
            n_checked += r.dsi.n_checked
            n_rejected += r.dsi.n_checked - r.dsi.n_accepted
            n_padded += r.dsi.n_padded
            n_target_only += r.dsi.n_target_only
    if wait_for_drafts:
        assert n_checked == 2 * n and n_target_only == n
        assert n_rejected > n // 2, "the rejection rule must be exercised for this test to mean anything"
    else:
        assert n_target_only > n // 2, "the target's own draws must be exercised for this case to mean anything"
    assert (n_padded > 0) == (verify_shape == "padded")
    firsts, seconds = np.array(firsts), np.array(seconds)
    assert _pvalue(firsts, p1) > 1e-4
    assert _pvalue(seconds, p2) > 1e-4
    with pytest.raises(AssertionError):
        assert _pvalue(firsts, np.where(q1 > 0, q1, 0)) > 1e-4


def test_dsi_stops_streams_and_cancels(slow):
    with specllama.SpeculativeDecoder(slow.target, slow.draft, n_ctx=256) as dec:
        plain = dec.generate(PROMPTS[0], max_tokens=60, temperature=0, speculative=False, ignore_eos=True)
        # streaming gives the same tokens, in pieces, with stats at the end
        chunks = list(dec.stream(PROMPTS[0], max_tokens=60, temperature=0, ignore_eos=True, mode="dsi", sp=2))
        assert [t for c in chunks for t in c.tokens] == plain.tokens
        assert "".join(c.text for c in chunks) == plain.text
        assert chunks[-1].finish_reason == "length" and chunks[-1].dsi is not None
        # a stop string inside the text
        stop = re.findall(r" [a-z]{3,}", plain.text[8:])[-1]  # the tiny vocabulary also has raw bytes
        r = dec.generate(PROMPTS[0], max_tokens=60, temperature=0, ignore_eos=True, mode="dsi", stop=stop)
        assert r.finish_reason == "stop" and r.text == plain.text[:plain.text.index(stop)]
        # on_step returning True
        seen = []
        r = dec.generate(PROMPTS[0], max_tokens=60, temperature=0, ignore_eos=True, mode="dsi",
                         on_step=lambda toks, *_: seen.extend(toks) or True)
        assert r.finish_reason == "cancelled" and r.tokens == seen == plain.tokens[:len(seen)]
        # closing a stream early
        it = dec.stream(PROMPTS[0], max_tokens=60, temperature=0, ignore_eos=True, mode="dsi")
        next(it)
        it.close()
        # the context filling up
        long_prompt = dec.tokenize(" ".join(["the cat is on the hot word"] * 24))[:200]
        r = dec.generate(long_prompt, max_tokens=500, temperature=0, ignore_eos=True, mode="dsi", sp=2)
        assert r.finish_reason == "length" and r.context_full
        assert len(long_prompt) + len(r.tokens) == dec.n_ctx + 1
        # and the decoder is still exact
        assert dec.generate(PROMPTS[0], max_tokens=60, temperature=0, ignore_eos=True, mode="dsi").tokens == \
            plain.tokens


def test_dsi_ctrl_c_leaves_decoder_usable(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=4096) as dec:
        ref = dec.generate(PROMPTS[2], max_tokens=20, temperature=0, ignore_eos=True, speculative=False).tokens
        with pytest.raises(KeyboardInterrupt):
            dec.generate(PROMPTS[2], max_tokens=3900, temperature=0, ignore_eos=True, mode="dsi", sp=2,
                         on_step=interrupt_at_step(3))
        assert dec.generate(PROMPTS[2], max_tokens=20, temperature=0, ignore_eos=True, mode="dsi").tokens == ref


def test_dsi_bad_arguments(tiny):
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256) as dec:
        for kw, msg in [(dict(sp=0), "sp must be"), (dict(sp=65), "sp must be"), (dict(lookahead=0), "lookahead"),
                        (dict(threads_draft=-1), "threads_draft"), (dict(drafter="lookup"), "draft model"),
                        (dict(acceptance="match"), "rejection rule"), (dict(speculative=False), "speculative")]:
            with pytest.raises(ValueError, match=msg):
                dec.generate("the cat", max_tokens=4, mode="dsi", **kw)
        with pytest.raises(ValueError, match="mode must be"):
            dec.generate("the cat", max_tokens=4, mode="parallel")
        with pytest.raises(TypeError):
            dec.generate("the cat", max_tokens=4, mode="dsi", sp=1.5)
        with pytest.raises(ValueError, match="lookahead must be in"):
            dec.generate([1, 2], max_tokens=4, mode="dsi", lookahead=600)
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=256, n_batch=16) as small_batch:
        with pytest.raises(ValueError, match=r"lookahead must be in \[1, n_batch - 1 = 15\], got 20"):
            small_batch.stream("the cat", max_tokens=4, mode="dsi", lookahead=20)  # refused before it runs
    with specllama.SpeculativeDecoder(tiny.target, n_ctx=256) as dec:
        with pytest.raises(ValueError, match="needs a draft model"):
            dec.generate("the cat", max_tokens=4, mode="dsi")


@pytest.mark.default_pair
@pytest.mark.slow
def test_dsi_greedy_equivalent_on_default_pair(default_decoder):
    dec = default_decoder
    n_tokens = 48
    for question in CHAT_PROMPTS:
        prompt, check = near_tie_reference(dec, question, n_tokens)
        for sp, lookahead in [(1, 4), (2, 3)]:
            r = dec.generate(prompt, max_tokens=n_tokens, temperature=0, mode="dsi", sp=sp, lookahead=lookahead,
                             wait_for_drafts=True)
            # every position but the last (the drafter stops before it) is a judged draft
            assert r.dsi.n_target_only <= 1 and r.dsi.n_checked >= len(r.tokens) - 1
            check(r.tokens, f"DSI sp={sp}")


# --- the orchestrator against simulated servers ---------------------------------------------------

POINTS = [  # drafter latency / target latency, acceptance, sp, lookahead
    (0.1, 0.9, 4, 3), (0.3, 0.5, 2, 2), (0.6, 0.8, 2, 1), (0.9, 0.2, 2, 1), (0.2, 0.0, 3, 2),
]


@pytest.mark.parametrize("f,accept,sp,k", POINTS)
def test_online_orchestrator_on_simulated_servers_emits_the_targets_text(f, accept, sp, k):
    """The real orchestrator with simulated forward passes: every mode emits exactly the simulated
    target's text, and DSI's task counts add up. How its wall time compares with the offline model
    and with SI is measured by `specllama simulate --online` (a benchmark, not a test)."""
    t_target, n = 5.0, 30
    right = simulate.pattern(n, accept, np.random.default_rng(7))
    for m in ("non-si", "si", "dsi"):
        r = simulate.online(m, t_target, f * t_target, right, n, lookahead=k, sp=sp)
        assert r["correct"] and r["n_tokens"] == n, (m, r)
        assert r["n_tasks_cancelled"] <= r["n_tasks"] and r["n_accepted"] <= r["n_checked"]


def test_servers_reading_the_prompt_get_no_tasks_and_the_run_does_not_wait_for_them():
    """The drafter and every server but the first read the prompt in their threads as the run
    starts; a server gets tasks only once it has read it, and a run that ends first stops the reads.
    Here the servers' reads never end by themselves while the drafter drafts far ahead of the first
    server (lookahead 2, so tasks queue up for a free server): the first server verifies every task,
    and the run returns with the reads stopped. Likewise with a drafter whose read never ends: every
    token is the target's alone."""
    from specllama import _core

    n = 40
    done = []
    # (in a thread: a run that gave a task to a server still reading would never end)
    run = threading.Thread(target=lambda: done.append(_core.simulate_dsi(
        5.0, 0.1, [True] * n, lookahead=2, sp=3, n_prompt=20, prompt_ms=1e9)), daemon=True)
    run.start()
    run.join(timeout=600)
    assert done, "the run waited for a server that was still reading the prompt"
    stats, n_tokens, correct = done[0]
    assert correct and n_tokens == n
    assert stats.n_server_tasks == [stats.n_tasks, 0, 0] and stats.n_server_prompt == 0  # (stopped: nothing read)
    assert stats.n_checked > 0  # (drafts were judged: the drafter drafted while the servers read)
    stats, n_tokens, correct = _core.simulate_dsi(1.0, 0.5, [True] * n, lookahead=2, sp=3, n_prompt=20,
                                                  draft_prompt_ms=1e9)
    assert correct and n_tokens == n
    assert stats.n_draft_prompt == 0 and stats.n_drafted == 0 and stats.n_target_only == n
    # reads that end: the drafter and both servers read the prompt's 19 tokens before the last
    stats, n_tokens, correct = _core.simulate_dsi(1.0, 0.5, [True] * 400, lookahead=2, sp=3, n_prompt=20,
                                                  prompt_ms=1.0, draft_prompt_ms=1.0)
    assert correct and n_tokens == 400 and sum(stats.n_server_tasks) == stats.n_tasks
    assert stats.n_draft_prompt == 19 and stats.n_server_prompt in (0, 19, 38)


def test_online_modes_validate():
    right = [True] * 5
    with pytest.raises(ValueError, match="mode must be"):
        simulate.online("fast", 10, 1, right, 5)
    with pytest.raises(ValueError, match="pattern"):
        simulate.online("dsi", 10, 1, right, 6)
    with pytest.raises(ValueError, match="lookahead"):
        simulate.online("dsi", 10, 1, right, 5, lookahead=0)
    with pytest.raises(ValueError, match="sp"):
        simulate.online("dsi", 10, 1, right, 5, sp=0)
