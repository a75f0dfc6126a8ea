"""CPU threads: with n_threads -1, each model on the CPU tunes its own thread count by measuring
its decodes (ThreadTuner, with given costs here). The count changes no batched decode's logits and
no one-token decode's over up to 256 positions (bitwise), so outputs of that length are the same on
any count; past that llama.cpp's flash attention splits a one-token decode among the threads, and
the count changes its rounding."""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

import specllama
from specllama import _core
from specllama._core import ThreadTuner
from specllama.chat import threads_note

IDLE = {1: 46.0, 2: 30.0}  # ms of a one-token decode by thread count: the full count is fastest
BUSY = {1: 31.0, 2: 66.0}  # another process keeps one of the two cores busy


def drive(tuner, cost, n, rng, sizes=(1,), noise=0.1):
    """n decodes priced by cost(threads, n_tokens) with +-noise; the thread count of each."""
    used = []
    for _ in range(n):
        k = rng.choice(sizes)
        th = tuner.next(k)
        tuner.record(k, th, cost(th, k) * (1 + rng.uniform(-noise, noise)))
        used.append(th)
    return used


def by_size(table):
    return lambda th, k: table[th] * (1 + 0.15 * (k - 1))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("sizes", [(1,), (1, 2, 3, 4, 6, 9)])
def test_an_idle_machine_keeps_the_full_count_and_probes_rarely(seed, sizes):
    t = ThreadTuner(2)
    used = drive(t, by_size(IDLE), 2000, random.Random(seed), sizes)
    assert t.threads == 2 and t.n_moves == 0
    # the first probe after the fifth decode (a size's first decode is not measured, the second sets
    # its mean, two more count), then gaps that double from 8 to 128 decodes while probes lose:
    # at most 21 probes in 2000 decodes
    assert 5 <= t.n_probes <= 21
    assert used.count(1) == t.n_probes
    if sizes == (1,):
        assert used[:5] == [2, 2, 2, 2, 1] and used[5:13] == [2] * 8


@pytest.mark.parametrize("seed", range(5))
def test_a_busy_core_moves_the_count_down_soon_and_it_stays(seed):
    t = ThreadTuner(2)
    used = drive(t, by_size(BUSY), 1000, random.Random(seed), (1, 2, 3))
    assert t.threads == 1 and t.n_moves == 1
    # found by the first probes: the decodes of a size are measured from their second one
    assert 1 not in used[:2]
    first_settled = next(i for i in range(len(used)) if used[i] == 1 and used[i + 1] == 1 and used[i + 2] == 1)
    assert first_settled < 40
    assert used[-500:].count(2) <= 6  # (the probes back up, at the longest gaps)


@pytest.mark.parametrize("seed", range(3))
def test_the_count_follows_the_machine_as_it_gets_busy_and_quiet_again(seed):
    rng = random.Random(seed)
    t = ThreadTuner(2)
    drive(t, by_size(IDLE), 600, rng)
    assert t.threads == 2
    used = drive(t, by_size(BUSY), 600, rng)
    # the full count's cost rose by more than 30%: it probes again within a short gap
    assert used.index(1) < 12 and t.threads == 1
    assert used[20:].count(2) <= 8
    used = drive(t, by_size({1: 31.0, 2: 22.0}), 600, rng)
    # one thread costs what it did, so only the periodic probes find the change: within the longest
    # gap, 128 decodes, and two probes
    assert t.threads == 2
    assert used.index(2) <= 130 and used[140:].count(1) <= 6


def test_without_noise_a_probe_must_win_twice_by_fifteen_percent():
    # fewer threads 10% cheaper: not enough; 20% cheaper: moves
    for share, moves in ((0.9, 0), (0.8, 1)):
        t = ThreadTuner(2)
        drive(t, lambda th, k: 30.0 * (share if th == 1 else 1.0), 400, random.Random(0), noise=0.0)
        assert t.n_moves == moves, share
    # a probe that wins once and then loses (one quick spell) does not move the count
    t = ThreadTuner(2)
    wins = iter([20.0, 40.0] + [40.0] * 50)
    for _ in range(400):
        th = t.next(1)
        t.record(1, th, next(wins) if th == 1 else 30.0)
    assert t.n_moves == 0 and t.n_probes >= 3


def test_a_slow_first_decode_is_not_measured():
    # a model's first decode pages its weights in: twenty times the cost, here. Were it measured, the
    # running mean would start far above the full count's real cost and the first probes would win
    t = ThreadTuner(2)
    costs = iter([600.0] + [30.0] * 100)
    for _ in range(60):
        th = t.next(1)
        t.record(1, th, next(costs) if th == 2 else 46.0)
    assert t.n_moves == 0 and t.threads == 2 and t.n_probes >= 1


def test_one_slow_decode_moves_the_mean_little():
    # a descheduled spell: one decode 20x slower than the rest moves the running mean by at most 25%,
    # so the probe right after it (46 ms against the full count's 30) still loses
    t = ThreadTuner(2)
    costs = iter([30.0] * 9 + [600.0] + [30.0] * 100)
    for _ in range(60):
        th = t.next(1)
        t.record(1, th, next(costs) if th == 2 else 46.0)
    assert t.n_moves == 0 and t.n_probes >= 1


def test_many_cores_step_down_to_the_fastest_count_and_ignore_small_differences():
    # sixteen threads where four cores are busy: the fastest count is twelve
    cost = lambda th, k: 30.0 * (1.0 if th <= 12 else 2.5) * (16 / th) ** 0.3  # noqa: E731
    t = ThreadTuner(16)
    drive(t, cost, 1500, random.Random(1))
    assert t.threads == 12
    # and back up where the cores come free (and sixteen threads compute a decode a quarter faster
    # than twelve): the probes take turns below the count and at the full count
    drive(t, lambda th, k: 30.0 * 16 / th, 1500, random.Random(2))
    assert t.threads == 16
    # an idle many-core machine where twelve threads are within noise of sixteen (1.5% slower): a
    # move needs two probes 15% below the mean in a row, which noise of +-10% never gives, and
    # +-15% rarely; wherever the count goes, the decodes cost no more than 1% beyond sixteen's
    flat = lambda th, k: 30.0 * (16 / th) ** 0.05  # noqa: E731
    for noise, most_moves in ((0.1, 0), (0.15, 2)):
        for seed in range(5):
            t = ThreadTuner(16)
            used = drive(t, flat, 2000, random.Random(seed), noise=noise)
            assert t.n_moves <= most_moves, (noise, seed)
            assert sum(flat(th, 1) for th in used) <= 1.01 * 2000 * flat(16, 1), (noise, seed)


def test_large_decodes_and_a_single_thread_are_never_probed():
    t = ThreadTuner(2)
    for _ in range(300):
        th = t.next(64)  # a prompt chunk: run at the current count, not measured
        assert th == 2
        t.record(64, th, 500.0)
    assert t.n_probes == 0
    one = ThreadTuner(1)
    assert drive(one, lambda th, k: 10.0, 300, random.Random(0)) == [1] * 300 and one.n_probes == 0
    with pytest.raises(ValueError, match="max_threads"):
        ThreadTuner(0)


# ---- the count changes no result -------------------------------------------------------------------


@pytest.mark.parametrize("which", ["target", "draft"])
def test_logits_are_bitwise_the_same_on_any_number_of_threads(default_pair, which):
    model = specllama.Model(default_pair[0 if which == "target" else 1])
    prompt = list(range(100, 160))
    rows = {}
    for n in (1, 2, 3):
        ctx = specllama.Context(model, n_ctx=256, n_threads=n)
        batch = np.array(ctx.decode(prompt, all_logits=True))  # a batch, as a verification
        one = np.array(ctx.decode([42], all_logits=False))  # a one-token decode, as a draft's
        rows[n] = (batch, one)
        assert ctx.n_threads == n and not ctx.threads_tuned
    for n in (2, 3):
        assert np.array_equal(rows[n][0], rows[1][0]) and np.array_equal(rows[n][1], rows[1][1]), n


def test_past_256_positions_a_one_token_decode_rounds_by_the_thread_count(tiny):
    # llama.cpp's flash attention on the CPU splits a one-token decode's keys among the threads once
    # the cache shows 512 cells (more than 256 positions): each thread's part is summed apart, so the
    # count changes the rounding there (as a batched and a one-token pass round apart: exactness).
    # Batched decodes, and one-token decodes over fewer positions, stay bitwise the same
    model = specllama.Model(tiny.target_q)
    seq = [int(x) for x in np.random.default_rng(0).integers(5, 300, 320)]
    rows = {}
    for n in (1, 2):
        ctx = specllama.Context(model, n_ctx=1024, n_threads=n)
        short = np.array(ctx.decode(seq[:200], all_logits=True))
        one_short = np.array(ctx.decode([seq[200]], all_logits=False))
        ctx.decode(seq[201:300], all_logits=False)
        one_long = np.array([ctx.decode([t], all_logits=False)[-1] for t in seq[300:320]])
        rows[n] = (short, one_short, one_long)
    assert np.array_equal(rows[1][0], rows[2][0]) and np.array_equal(rows[1][1], rows[2][1])
    assert not np.array_equal(rows[1][2], rows[2][2])
    np.testing.assert_allclose(rows[1][2], rows[2][2], atol=0.5)


def test_a_tuned_context_measures_its_decodes_and_probes(default_pair):
    if _core.cpu_cores()[0] < 2:
        pytest.skip("one core: nothing to tune")
    ctx = specllama.Context(specllama.Model(default_pair[1]), n_ctx=128, n_threads=-1)
    ctx.decode(list(range(100, 110)), all_logits=False)
    for tok in range(200, 215):  # the second to the ninth one-token decode are measured; the probe follows
        ctx.decode([tok], all_logits=False)
    assert ctx.n_thread_probes >= 1


def test_a_context_tunes_only_where_asked(default_pair):
    model = specllama.Model(default_pair[1])
    physical = _core.cpu_cores()[0]
    assert not specllama.Context(model, n_ctx=128).threads_tuned  # (the default: the physical cores)
    tuned = specllama.Context(model, n_ctx=128, n_threads=-1)
    assert tuned.threads_tuned and 1 <= tuned.n_threads <= physical
    tuned.set_n_threads(1)
    assert not tuned.threads_tuned and tuned.n_threads == 1
    tuned.set_n_threads(0)
    assert tuned.threads_tuned
    fixed = specllama.Context(model, n_ctx=128, n_threads=3)
    assert not fixed.threads_tuned and fixed.n_threads == 3
    fixed.set_n_threads(1)
    fixed.set_n_threads(0)  # back to the count it was made with
    assert not fixed.threads_tuned and fixed.n_threads == 3 and fixed.n_thread_probes == 0


def _outputs(dec, prompt):
    greedy = dec.generate(prompt, max_tokens=96, temperature=0)
    seeded = dec.generate(prompt, max_tokens=96, temperature=0.9, seed=7)  # keyed draws: plain decoding's sample
    plain = dec.generate(prompt, max_tokens=48, temperature=0, speculative=False)
    return (greedy.tokens, seeded.tokens, plain.tokens), (greedy.stats, plain.stats)


def test_outputs_are_the_same_tuned_or_on_any_given_count(default_pair):
    messages = [{"role": "user", "content": "Write a short poem about the sea."}]
    physical = _core.cpu_cores()[0]
    results = {}
    for n, nd in ((-1, 0), (1, 1), (2, 1)):
        with specllama.SpeculativeDecoder(*default_pair, n_threads=n, n_threads_draft=nd) as dec:
            results[(n, nd)], (spec, plain) = _outputs(dec, dec.chat_tokens(messages))
        if n == -1:
            assert spec.threads_tuned and plain.threads_tuned
            assert 1 <= spec.n_threads <= physical and 1 <= spec.n_threads_draft <= physical
        else:
            assert not spec.threads_tuned and spec.n_thread_probes == 0
            assert (spec.n_threads, spec.n_threads_draft) == (n, nd)
        assert plain.n_threads_draft == 0
    assert results[(1, 1)] == results[(-1, 0)] == results[(2, 1)]


def test_dsi_sets_its_own_counts_and_tuning_resumes_after_it(default_pair):
    with specllama.SpeculativeDecoder(*default_pair, n_threads=-1) as dec:
        prompt = dec.tokenize("The lighthouse keeper")
        out = dec.generate(prompt, max_tokens=12, temperature=0, mode="dsi", sp=2, lookahead=2)
        assert out.dsi.n_threads_draft >= 1 and out.dsi.n_threads_server >= 1
        after = dec.generate(prompt, max_tokens=12, temperature=0).stats
        assert after.threads_tuned and after.n_threads >= 1


def test_the_stats_line_says_where_fewer_threads_were_used():
    def stats(tuned, n, nd):
        return SimpleNamespace(threads_tuned=tuned, n_threads=n, n_threads_draft=nd)

    assert threads_note(stats(True, 1, 1), 2) == ("; 1 (draft 1) of 2 CPU threads, where the decodes measured "
                                                  "faster (another process may be keeping a core busy)")
    assert threads_note(stats(True, 2, 1), 2).startswith("; 2 (draft 1) of 2 CPU threads")
    assert threads_note(stats(True, 3, 0), 4).startswith("; 3 of 4 CPU threads")
    assert threads_note(stats(True, 2, 2), 2) == threads_note(stats(True, 2, 0), 2) == ""
    assert threads_note(stats(False, 1, 1), 2) == ""  # counts given: the user knows them


def test_slots_tune_their_shared_contexts(default_pair):
    if _core.cpu_cores()[0] < 2:
        pytest.skip("one core: nothing to tune")
    messages = [{"role": "user", "content": "Write a short poem about the sea."}]
    outs = {}
    for n in (-1, 2):
        with specllama.SpeculativeDecoder(*default_pair, n_threads=n) as dec:
            slots = dec.slots(2)
            try:
                out = slots[0].generate(slots[0].chat_tokens(messages), max_tokens=64, temperature=0)
            finally:
                for s in slots:
                    s.close()
        outs[n] = out.tokens
        assert out.stats.threads_tuned == (n == -1)
        if n == -1:
            assert out.stats.n_thread_probes >= 1 and 1 <= out.stats.n_threads <= _core.cpu_cores()[0]
        else:
            assert out.stats.n_thread_probes == 0 and out.stats.n_threads == 2
    assert outs[-1] == outs[2]


def test_a_count_moved_from_outside_is_probed_from_there():
    # the draft follows the target's count (both share the cores); its own probes correct it: on an
    # idle machine it is back at the full count soon
    t = ThreadTuner(2)
    t.move_to(1)
    assert t.threads == 1 and t.n_moves == 1
    used = drive(t, by_size(IDLE), 40, random.Random(0))
    assert t.threads == 2 and used.index(2) < 12
    t.move_to(5)  # clamped
    assert t.threads == 2 and t.n_moves == 2
    t.move_to(0)
    assert t.threads == 1
