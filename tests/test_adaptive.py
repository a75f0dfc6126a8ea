"""Adaptive draft length: it stays within n_draft, drafts long when the draft is usually right
and short when it is usually wrong, and learns the pair's costs and calibration."""

from __future__ import annotations

import json
import math
import random
import threading
from pathlib import Path

import pytest
from conftest import in_threads, load_benchmark

import specllama
from specllama import _core
from specllama.cli import _stats_line


def _tokens_per_step(dec, prompt, **kw):
    s = dec.generate(prompt, max_tokens=120, temperature=0, ignore_eos=True, **kw).stats
    return s.n_drafted / s.n_steps, s


@pytest.mark.default_pair
@pytest.mark.slow
def test_adaptive_drafts_less_for_a_worse_draft(default_pair, tmp_path_factory):
    """On the real pair the Q4_1 draft agrees with the target about 95% of the time and a Q4_0
    requantization about 70%: at the same prices, adaptive drafting must draft longer for the
    first. The prices are given (StepPrices, about this CPU's), so the draft lengths depend only
    on the drafts' agreement and confidence, not on how busy the machine is."""
    target, good_draft = default_pair
    bad_draft = str(tmp_path_factory.mktemp("q4_0") / "draft_q4_0.gguf")
    specllama.quantize(target, bad_draft, "q4_0")
    prompt = "<|im_start|>user\nList ten common fruits, one per line.<|im_end|>\n<|im_start|>assistant\n"
    prices = specllama.StepPrices(draft_ms=10.0, verify_ms=25.0, verify_token_ms=3.5)
    with specllama.SpeculativeDecoder(target, good_draft, n_ctx=1024) as good, \
            specllama.SpeculativeDecoder(target, bad_draft, n_ctx=1024) as bad:
        _, fixed_good = _tokens_per_step(good, prompt, n_draft=4, adaptive=False, prices=prices)
        _, fixed_bad = _tokens_per_step(bad, prompt, n_draft=4, adaptive=False, prices=prices)
        assert fixed_good.acceptance_rate > fixed_bad.acceptance_rate + 0.1  # the premise
        for dec in (good, bad):  # learn the prices and the calibration first
            _tokens_per_step(dec, prompt, n_draft=12, prices=prices)
        per_good, s_good = _tokens_per_step(good, prompt, n_draft=12, prices=prices)
        per_bad, _ = _tokens_per_step(bad, prompt, n_draft=12, prices=prices)
    assert len(s_good.accepted_hist) == 13  # never beyond n_draft
    assert per_good > per_bad + 1, (per_good, per_bad)


def test_fixed_mode_always_drafts_n(tiny):
    drafted = []
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=1024) as dec:
        dec.generate("the cat is", max_tokens=120, temperature=0, ignore_eos=True, n_draft=5, adaptive=False,
                     on_step=lambda tokens, text, n_drafted, n_accepted: drafted.append(n_drafted))
    # 5 every step, except where the draft proposed an end token (it stops there) or near the end
    assert max(drafted) == 5 and drafted.count(5) >= 0.8 * len(drafted)


def test_recorded_steps_are_what_the_generation_did(tiny):
    """record_steps keeps one StepTrace per verification step: its drafts and what was kept add
    up to the generation's counts, each model draft carries its confidence, and at given prices
    each step is priced at them."""
    prices = specllama.StepPrices(draft_ms=1.0, verify_ms=5.0, verify_token_ms=0.5)
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=1024) as dec:
        s = dec.generate("the cat is", max_tokens=60, temperature=0, ignore_eos=True, n_draft=6, prices=prices,
                         drafter="model", record_steps=True).stats
        unrecorded = dec.generate("the cat is", max_tokens=8, temperature=0, ignore_eos=True).stats
    assert len(s.steps) == s.n_steps and unrecorded.steps == []
    assert sum(t.n_drafted for t in s.steps) == s.n_drafted
    assert sum(t.n_accepted for t in s.steps) == s.n_accepted
    assert sum(t.n_accepted + 1 for t in s.steps) >= s.n_generated  # (the last step may be cut short)
    assert any(t.n_model > 0 for t in s.steps)
    for t in s.steps:
        assert 0 <= t.n_accepted <= t.n_drafted <= t.n_max
        assert len(t.conf) == t.n_model and all(0.0 <= c <= 1.0 for c in t.conf)
        assert t.draft_ms == pytest.approx(t.n_model * prices.draft_ms)
        assert t.verify_ms == pytest.approx(prices.verify_ms + t.n_drafted * prices.verify_token_ms)
        assert t.as_dict()["n_accepted"] == t.n_accepted
    assert json.loads(json.dumps(s.as_dict()))["steps"][1]["n_drafted"] == s.steps[1].n_drafted


def test_cost_model_learns(tiny):
    """The cost model learns each price from the steps. Given prices here: measured ones on a loaded
    machine may end a generation just after a verification far below its price started every price
    again (a busy spell that ended), with no draft decode measured since."""
    prices = specllama.StepPrices(draft_ms=1.5, verify_ms=6.0, verify_token_ms=0.5)
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=1024) as dec:
        _tokens_per_step(dec, "the cat is", n_draft=8, adaptive=False, prices=prices)
        m = dec._native().cost_model()
    assert m["draft_ms"] == pytest.approx(1.5)
    assert m["catch_up_ms"] == pytest.approx(1.5)  # the draft's catch-up decode, paid once per step
    assert m["verify_ms"][:9] == pytest.approx([6.0 + 0.5 * k for k in range(9)]), m  # (a batch of k + 1 tokens)
    assert 0 <= m["acceptance"] <= 1, m
    assert all(0 <= p <= 1 for p in m["accept_prob_by_confidence"]), m


def _replay_module():
    return load_benchmark("replay_draft_length.py")


def _synthetic_trace(seed: int, informative: bool):
    """600 positions; 12% are near-ties where the draft is unsure (confidence < 0.15) and wrong half
    the time, the rest it gets right with confidence 0.6-1. Uninformative: the same right and wrong
    positions with confidences drawn at random."""
    rng = random.Random(seed)
    match, conf = [], []
    for _ in range(600):
        if rng.random() < 0.12:
            conf.append(rng.uniform(0.0, 0.15))
            match.append(rng.random() < 0.5)
        else:
            conf.append(rng.uniform(0.6, 1.0))
            match.append(True)
    if not informative:
        conf = [rng.random() for _ in match]
    return match, conf


def _adaptive_and_fixed(mod, match, conf):
    # a CPU-like price list: draft decode 10 ms, catch-up of two tokens 16 ms, a target batch of k
    # tokens 20 + 4 (k - 1) ms
    costs = mod.Costs(10.0, 16.0, [0.0] + [20.0 + 4.0 * (k - 1) for k in range(1, 16)])
    speed = lambda r: costs.plain_ms * r.tokens / r.ms  # noqa: E731
    model = _core.DraftLengthModel()
    mod.replay(mod.Trace(match[:100], conf[:100]), costs, 12, model)  # learn costs and calibration
    adaptive = speed(mod.replay(mod.Trace(match, conf), costs, 12, model))
    fixed = {n: speed(mod.replay(mod.Trace(match, conf), costs, n)) for n in range(1, 13)}
    return adaptive, fixed


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_adaptive_rule_stops_before_near_ties(seed):
    """The loop's own keep-drafting rule (DraftLengthModel), replayed on a trace (exactly what a
    greedy run does given which drafts match and the costs; see benchmarks/replay_draft_length.py):
    where the draft's confidence marks the risky tokens, it ends steps at them and beats every
    fixed draft length (by 9.5-14% on seeds 0-7); where confidence says nothing, it stays close to
    the best fixed length chosen in hindsight (0.976-1.007 of it on seeds 0-7, from the costs and
    the mean acceptance alone)."""
    mod = _replay_module()
    adaptive, fixed = _adaptive_and_fixed(mod, *_synthetic_trace(seed, informative=True))
    assert adaptive > 1.05 * max(fixed.values()), (adaptive, fixed)
    blind, fixed_blind = _adaptive_and_fixed(mod, *_synthetic_trace(seed, informative=False))
    assert blind > 0.95 * max(fixed_blind.values()), (blind, fixed_blind)
    assert blind < adaptive  # the premise: confidence is what it gained from


def _model_with_costs(step_tokens: int, step_ms: float):
    """A rule that has measured a draft decode of 10 ms and a target batch of k tokens as
    20 + 4 (k - 1) ms, has seen every draft accepted, and whose recent steps made step_tokens
    tokens in step_ms."""
    m = _core.DraftLengthModel()
    for _ in range(50):
        m.observe_draft_decode(10.0)
        m.observe_catch_up(10.0)
        for k in (3, 6, 9):
            m.observe_verify(k, 20.0 + 4.0 * (k - 1))
        m.observe_acceptance(0.9, True)
        m.observe_step(step_tokens, step_ms)
    return m


def test_rule_extends_a_step_while_it_beats_the_long_run_rate():
    """One more drafted token costs a draft decode and a verified position (10 + 4 ms here) and
    adds p_reach x (the overall acceptance) expected tokens; it is drafted while that beats the
    loop's long-run tokens per ms times its cost (the renewal-reward optimum), not the step's own
    rate so far (which early in a step is low, and would draft on after a likely rejection)."""
    fast, slow = _model_with_costs(8, 100.0), _model_with_costs(2, 100.0)
    assert fast.rate == pytest.approx(0.08) and slow.rate == pytest.approx(0.02)
    # thresholds: 0.08 * 14 = 1.12 (more than any chance: stop), 0.02 * 14 = 0.28
    for p_reach in (0.3, 0.5, 0.9):
        assert not fast.keep_going(1, p_reach)
        assert slow.keep_going(1, p_reach)
    assert not slow.keep_going(1, 0.25)
    # 4 drafted, chance 0.5 that all are kept, about 3 tokens expected: the step so far costs
    # 10 + 4 x 10 + 36 = 86 ms, and 0.5 / 14 beats its own 3 / 86 tokens per ms, but not a
    # long-run rate of 0.04 (0.5 < 0.04 x 14 = 0.56): stop
    mid = _model_with_costs(4, 100.0)
    assert not mid.keep_going(4, 0.5)
    assert mid.keep_going(4, 0.6)


def _model_with_stepped_costs():
    """A rule that measured a draft decode of 10 ms and target batches whose cost rises in steps,
    as a CPU's matrix kernels change with the batch's size: 20 ms + 1 per token within a step, 15 ms
    more at 5 and at 9 tokens; whose steps made 5 tokens per 100 ms (0.05 per ms)."""
    m = _core.DraftLengthModel()
    m.observe_verify(1, 20.0)
    m.observe_verify(1, 20.0)
    for _ in range(50):
        m.observe_draft_decode(10.0)
        m.observe_catch_up(10.0)
        for k in range(2, 11):
            m.observe_verify(k, 20.0 + (k - 1) + 15.0 * ((k - 1) // 4))
        m.observe_acceptance(0.9, True)
        m.observe_step(5, 100.0)
    return m


def test_a_batch_sizes_own_measured_cost_prices_it():
    """Where a batch's cost rises in steps (Qwen2.5-Coder-1.5B Q8_0 on 2 Xeon cores: 4 tokens
    161 ms, 5 tokens 239, 8 tokens 234), a straight line through all sizes misprices every one of
    them: it charges each token the mean rise (here about 5 ms). A size measured steadily is priced
    mostly by its own mean: the 16 ms rise from 4 to 5 tokens shows, and so do the 3 ms from 5 to 8."""
    m = _model_with_stepped_costs()
    assert m.verify_ms(5) - m.verify_ms(4) > 10.0
    assert m.verify_ms(8) - m.verify_ms(5) < 10.0
    assert m.verify_ms(9) - m.verify_ms(8) > 10.0
    # not measured: the line through the sizes measured, above its largest
    assert m.verify_ms(14) > m.verify_ms(10)
    assert m.verify_ms(1) == pytest.approx(20.0)


def test_the_rule_looks_past_a_step_in_the_batchs_cost():
    """After 3 drafts (a batch of 4 tokens), a 4th costs a draft decode and the step to 5 tokens
    (10 + about 12 ms) for 0.88 expected tokens, less than the long-run 0.05 per ms buys (1.1).
    Four more cost 40 + about 19 ms for about 3.4 tokens, more than that rate buys (3.0): the step
    is worth drafting where it may draft 7 in all, and not where it may draft only 4."""
    m = _model_with_stepped_costs()
    assert m.rate == pytest.approx(0.05)
    assert not m.keep_going_p(3, 0.9, 0.98, True)  # one token ahead only
    assert not m.keep_going_p(3, 0.9, 0.98, True, 4)
    assert m.keep_going_p(3, 0.9, 0.98, True, 7)
    # a likelier rejection ahead leaves it short
    assert not m.keep_going_p(3, 0.5, 0.98, True, 7)


def test_looking_further_ahead_changes_nothing_where_a_batchs_cost_is_a_line():
    """Each further token adds less expected gain than the one before and costs the same: where
    one token ahead does not pay, no longer run does."""
    m = _model_with_costs(4, 100.0)
    for n in range(0, 10):
        for p_reach in (0.1, 0.3, 0.5, 0.7, 0.9):
            assert m.keep_going(n, p_reach, 12) == m.keep_going(n, p_reach), (n, p_reach)


def _model_with_rates(plain_ms: float, step_tokens: float, step_ms: float, n_steps: int = 50):
    """A rule that priced steady plain steps at plain_ms and whose drafting steps made step_tokens
    tokens in step_ms each."""
    m = _core.DraftLengthModel()
    m.observe_verify(1, plain_ms)
    m.observe_verify(1, plain_ms)
    for _ in range(n_steps):
        m.observe_step(step_tokens, step_ms, True)
    return m


def test_drafting_pauses_where_it_makes_fewer_tokens_per_ms_than_plain_steps():
    """Rates measured on an H100 with the default pair fully offloaded (both models bound by kernel
    launches): plain steps 1.15 ms per token, drafting steps 0.35 tokens per ms (3 tokens in
    8.6 ms): the loop steps plainly. On this machine's CPU (plain 23 ms, drafting steps 9
    tokens in 130 ms) drafting pays."""
    assert not _model_with_rates(1.15, 3, 8.6).draft_pays()
    assert _model_with_rates(23.0, 9, 136.0).draft_pays()
    # not enough measured to stop: nothing, no plain price, or too few drafting steps
    assert _core.DraftLengthModel().draft_pays()
    m = _core.DraftLengthModel()
    for _ in range(50):
        m.observe_step(3, 8.6, True)
    assert not m.knows_plain_step and m.draft_pays()
    assert _model_with_rates(1.15, 3, 8.6, n_steps=1).draft_pays()
    # a clear loss (under half the plain rate: 0.40 here) pauses after two drafting steps; a
    # smaller one (0.86) after four
    assert not _model_with_rates(1.15, 3, 8.6, n_steps=2).draft_pays()
    assert _model_with_rates(1.15, 3, 4.0, n_steps=3).draft_pays()
    assert not _model_with_rates(1.15, 3, 4.0, n_steps=4).draft_pays()
    # plain steps do not count as drafting steps
    m = _model_with_rates(1.15, 3, 8.6)
    for _ in range(200):
        m.observe_step(1, 1.15, False)
    assert not m.draft_pays()


def test_greedy_and_sampled_generations_keep_their_own_evidence():
    """A draft's confidence means another thing greedy (1 - p2/p1) than sampled (q of the drawn
    token), and the target keeps drafts by another rule, so each kind of generation has its own
    acceptance, calibration, rates and pause; the prices are the machine's and shared. Greedy
    steps that paused drafting leave the sampled kind drafting, and the other way round."""
    m = _model_with_rates(1.15, 3, 8.6)  # greedy drafting steps at 0.30 of the plain rate
    for _ in range(50):
        m.observe_acceptance(0.95, False)
    assert not m.sampled and not m.draft_pays() and m.acceptance < 0.1
    m.set_sampled(True)
    # nothing drafted yet in this kind: it drafts, at the prior acceptance, and at the shared prices
    assert m.sampled and m.draft_pays() and m.acceptance == pytest.approx(0.8)
    assert m.verify_ms(1) == pytest.approx(1.15) and m.knows_plain_step
    for _ in range(50):
        m.observe_acceptance(0.95, True)
        m.observe_step(4, 3.0, True)  # 1.53 of the plain rate
    assert m.draft_pays() and m.accept_prob(0.95) > 0.9
    m.set_sampled(False)
    assert not m.draft_pays() and m.accept_prob(0.95) < 0.1
    m.set_sampled(True)
    assert m.draft_pays() and m.accept_prob(0.95) > 0.9


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2])
def test_a_pause_of_greedy_generations_leaves_sampled_ones_drafting(slow, seed):
    """A draft that is always wrong greedy (an unrelated model) is kept about half the time at
    T=10, where both distributions are nearly flat and the rejection rule keeps a draft with
    probability min(1, p/q). At prices where drafting pays at that rate and not at all greedy,
    greedy generations pause it; a sampled generation that follows drafts in its steps, judging
    the draft on its own evidence, and the greedy generation after it starts paused, its evidence
    kept. (Seeded and adaptive, so that the run is reproducible.)"""
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=10.0, verify_token_ms=2.0)
    kw = dict(max_tokens=120, ignore_eos=True, prices=prices, drafter="model", n_draft=4, adaptive=True,
              seed=seed, top_k=0, top_p=1.0, min_p=0.0, acceptance="rejection")
    with specllama.SpeculativeDecoder(slow.target, slow.far, n_ctx=512) as dec:
        dec.generate("the cat is", temperature=0, **kw)
        greedy = dec.generate("the cat is", temperature=0, **kw).stats
        assert greedy.n_accepted == 0 and greedy.n_paused_steps >= greedy.n_steps - 10, greedy
        sampled = dec.generate("the cat is", temperature=10.0, **kw).stats
        assert sampled.n_accepted >= 0.3 * sampled.n_drafted, sampled
        assert sampled.n_paused_steps == 0 and sampled.n_steps < 0.7 * 120, sampled
        again = dec.generate("the cat is", temperature=0, **kw).stats
        assert again.n_paused_steps >= again.n_steps - 10, again


def test_a_fresh_decoder_prices_plain_steps_first_and_does_not_call_them_pauses(tiny):
    """The first three steps of a decoder's life are plain (the rule needs a steady plain step's
    price: the first after prefill is not steady); they are not reported as paused steps, which
    the stats line would call drafting that did not pay. (At given prices where drafting pays:
    measured, this draft costs what its target does.)"""
    prices = specllama.StepPrices(draft_ms=0.1, verify_ms=1.0, verify_token_ms=0.02)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=256) as dec:
        first = dec.generate("the cat is", max_tokens=3, temperature=0, ignore_eos=True, prices=prices).stats
        assert first.n_steps == 3 and first.n_drafted == 0 and first.n_paused_steps == 0
        assert dec._native().cost_model()["verify_ms"][0] > 0  # priced
        then = dec.generate("the cat is", max_tokens=12, temperature=0, ignore_eos=True, prices=prices).stats
        assert then.n_drafted > 0  # it drafts from the next generation on
    assert "left out" not in _stats_line(first)


def _probe_gaps(m, probe_tokens: int, probe_ms: float, n_steps: int = 1200):
    """Steps between the probes of a paused rule whose probes make probe_tokens in probe_ms."""
    probes = []
    for i in range(1, n_steps):
        if m.draft_this_step():
            assert m.probing
            m.observe_step(probe_tokens, probe_ms, True)
            probes.append(i)
    return [b - a for a, b in zip([0] + probes, probes)]


def test_a_paused_drafter_probes_at_doubling_gaps():
    """While drafting does not pay, the model still drafts now and then, so that a change of
    prices or acceptance is noticed: after 4 plain steps, then 8, 16, 32, 64, then every 128,
    where a probe costs little beyond the plain steps it stands for (here one token in 1.2 ms
    against plain steps of 1.15 ms). The pause here is a small loss (drafting steps at 0.86 of
    the plain rate), such as a busy spell can cause."""
    m = _model_with_rates(1.15, 3, 4.0)
    assert not m.draft_pays()
    gaps = _probe_gaps(m, 1, 1.2, 600)
    assert gaps[:7] == [4, 8, 16, 32, 64, 128, 128], gaps
    assert not m.draft_pays() and 0 < m.skipped_steps < 128
    # once drafting pays again (here: the draft got fast), it drafts every step and the gaps start over
    for _ in range(100):
        m.observe_step(3, 2.0, True)
    assert m.draft_pays() and m.draft_this_step() and m.skipped_steps == 0
    assert all(m.draft_this_step() for _ in range(20))


def test_a_pause_ends_with_a_probe_not_with_a_plain_steps_price():
    """A paused rule drafts again only after a drafting step (a probe) shows that drafting pays:
    plain steps that get slower (a busy spell: 1.15 ms, then 2 ms) make the drafting steps' old
    rate beat them, but the loop stays paused until its next probe, whose draft catches up on the
    last 32 tokens alone, rather than resume at once with a draft that must decode every token
    it sat out."""
    m = _model_with_rates(1.15, 3, 4.0)
    assert not m.draft_this_step()
    for _ in range(2):
        m.observe_verify(1, 2.0)
        m.observe_step(1, 2.0, False)
    assert m.draft_pays() and m.paused()  # the rates say it pays; the pause holds
    assert [m.draft_this_step() for _ in range(3)] == [False, False, True] and m.probing
    m.observe_step(3, 4.0, True)
    assert not m.paused() and m.draft_this_step() and not m.probing


def test_a_resumption_that_does_not_pay_is_the_same_pause():
    """A probe that ends a pause, and a drafting step after it that does not pay, leave the pause's
    gaps doubling: the next probes come 16, 32 and 64 steps later, not 4, 8 and 16 as a new pause's
    (on a GPU, where a probe is three steps, such resumptions of one step brought a paused draft
    back every 12 steps at acceptance 0.6). Drafting steps that pay start the gaps over: a pause
    after them is a new one."""
    m = _model_with_rates(1.15, 3, 4.0)
    events = []
    for i in range(1, 200):
        if m.draft_this_step():
            probing = m.probing
            if probing:  # the second probe pays (3 tokens in 2 ms); the others barely lose
                m.observe_step(3, 2.0, True) if len(events) == 1 else m.observe_step(1, 1.2, True)
            else:  # the step after the pause ended: 3 tokens in 8.6 ms
                m.observe_step(3, 8.6, True)
            events.append(("probe" if probing else "draft", i, m.paused()))
    assert events[:3] == [("probe", 4, True), ("probe", 12, False), ("draft", 13, True)], events
    assert [i for _, i, _ in events[3:6]] == [13 + 16, 13 + 16 + 32, 13 + 16 + 32 + 64], events
    # drafting that pays (3 tokens in 2 ms, many steps) ends the pause and starts the gaps over
    for _ in range(40):
        m.observe_step(3, 2.0, True)
    assert not m.paused() and m.draft_this_step() and not m.probing
    for _ in range(60):  # then a small loss pauses it again: a new pause, probed after 4 steps
        m.observe_step(3, 4.0, True)
    assert m.paused()
    assert [m.draft_this_step() for _ in range(4)] == [False, False, False, True] and m.probing


def _paused_on_a_gpu(reads: bool = True, batches_priced: bool = True):
    """A rule priced as the 7B-shaped pair on an H200 (plain step 5.05 ms, draft decode 1.42, catch-up
    1.5, verifications of 2 and 4 tokens 7.14 and 7.35, unless not batches_priced), settle_steps 2,
    whose drafting steps made 2 tokens in 12 ms (a loss): paused."""
    m = _core.DraftLengthModel()
    m.set_settle_steps(2)
    m.set_read_probes(reads)
    for _ in range(2):
        m.observe_verify(1, 5.05)
    m.observe_draft_decode(1.42)
    m.observe_catch_up(1.5)
    if batches_priced:
        m.observe_verify(2, 7.14)
        m.observe_verify(4, 7.35)
    for _ in range(6):
        m.observe_step(2, 12.0, True)
    assert m.paused()
    return m


def _next_probe(m, limit: int = 400) -> int:
    """Plain steps until the next probe begins (draft_this_step true): how many steps it took."""
    for i in range(1, limit):
        if m.draft_this_step():
            assert m.probing
            return i
    raise AssertionError("no probe")


def _to_a_third_probe(m, n_left=100):
    """The pause's first probe (three drafting steps, each 2 tokens in 11 ms: 0.9 ms beyond plain steps),
    its second (a read that foretold 6 of 24 positions), and the third's start."""
    assert _next_probe(m) == 12 and not m.read_due  # the pause's first probe: three drafting steps
    for _ in range(3):
        m.observe_step(2, 11.0, True)
        if m.draft_this_step():
            assert m.probing and not m.read_due
    assert _next_probe(m) == 23 and m.read_due  # (24 steps after the probe's first)
    assert not m.observe_read(24, 6, 3.5, n_left)
    assert not m.probing and m.paused() and m.read_acceptance == pytest.approx((6 + 1.6) / 26)
    # the read counts as the pause's second probe: the gaps are the doubled 48 steps, or as many as keep the
    # cheaper of the two probes (the first's 3 x 0.9 ms, the read's 3.5) within 1% of the plain steps between
    assert _next_probe(m) == max(48, math.ceil(3 * (11.0 - 2 * 5.05) / (0.01 * 5.05))) and m.read_due


def test_a_probe_reads_first_and_drafts_only_where_the_read_says_drafting_pays():
    """Probes that read first (on a GPU): the pause's first probe drafts (its drafting steps price what
    reads are judged by); later ones begin with a read, and one whose positions the draft foretold too
    rarely for drafting to pay at these prices (6 of 24) is called off: the step is plain, the pause goes
    on, its gaps doubling. A read of a text the draft foretells (31 of 32: the pause's reads together,
    earlier ones weighing less) lets the probe draft its three steps, where what drafting saves at that
    acceptance over the tokens left (0.87 ms a token at these prices) beats what the first probe cost
    (2.7 ms); with two tokens left it does not."""
    m = _paused_on_a_gpu()
    _to_a_third_probe(m)
    assert m.observe_read(32, 31, 3.5, 100)
    assert m.probing and 0.75 < m.read_acceptance < 0.85
    assert [m.draft_this_step() for _ in range(2)] == [True, True] and m.probing and not m.read_due
    near_the_end = _paused_on_a_gpu()
    _to_a_third_probe(near_the_end)
    assert not near_the_end.observe_read(32, 31, 3.5, 2) and not near_the_end.probing
    # without reads, every probe drafts; and so does every probe before a verified batch is priced (a read is
    # judged at a drafting step's price)
    plain = _paused_on_a_gpu(reads=False)
    assert _next_probe(plain) == 12 and not plain.read_due
    unpriced = _paused_on_a_gpu(batches_priced=False)
    for _ in range(2):
        _next_probe(unpriced)
        assert unpriced.probing and not unpriced.read_due
        for _ in range(3):
            unpriced.observe_step(2, 11.0, True)
            unpriced.draft_this_step()


def test_probes_that_cost_much_come_rarely_enough_to_cost_one_percent():
    """Where a probe costs several plain steps (here 3 tokens in 8.6 ms against plain steps of
    1.15 ms: 5.15 ms more than plain steps; a recurrent target on a CPU: 20-40 ms against 6.5),
    the gaps after the pause's second probe are as long as it takes for the probes to cost at
    most 1% of the plain steps between them: 5.15 / (0.01 x 1.15) = 448 steps. Before that, a
    pause after a small loss keeps the doubling gaps (one costly probe may be bad luck, and a
    small loss may be a busy spell's); a pause after a clear loss (here the drafting steps made
    0.40 of the plain rate) starts at what its drafting steps cost, at most 128 steps."""
    small = _model_with_rates(1.15, 3, 4.0)
    gaps = _probe_gaps(small, 3, 8.6)
    assert gaps[:4] == [4, 8, 448, 448], gaps
    assert all((8.6 - 3 * 1.15) / (g * 1.15) <= 0.01 for g in gaps[2:])
    assert small.probe_gap() == 448
    clear = _model_with_rates(1.15, 3, 8.6)
    gaps = _probe_gaps(clear, 3, 8.6)
    assert gaps[:4] == [128, 128, 448, 448], gaps
    # the lesser of the last two probes' costs sets the gap: one cheap probe shortens it at once
    m = _model_with_rates(1.15, 3, 4.0)
    gaps = _probe_gaps(m, 3, 8.6, 500) + _probe_gaps(m, 1, 1.2, 600)
    assert gaps[:3] == [4, 8, 448] and gaps[4] == 64, gaps


def test_the_prompt_prices_a_first_batch():
    """Before any batch is verified, the target's prompt pass prices a batch's further tokens: a
    recurrent target on a CPU takes its prompt at nearly a decode per token (Mamba-130M's shape:
    5.2 ms against 6.5 ms for one token), where even a likely second draft does not pay, and the
    first batch stops at one draft; a transformer's prompt costs far less per token, and the first
    batch goes on to its usual 3 drafts."""
    def priced(prompt_token_ms):
        m = _core.DraftLengthModel()
        for _ in range(3):
            m.observe_verify(1, 6.5)
            m.observe_step(1, 6.5, False)
        if prompt_token_ms is not None:
            m.observe_prompt(17, 17 * prompt_token_ms)
        return m
    assert not priced(5.2).keep_going(1, 0.8)
    assert priced(0.6).keep_going(1, 0.8) and priced(0.6).keep_going(2, 0.7)
    assert priced(None).keep_going(1, 0.8)  # no price: the usual first batch
    assert not any(priced(p).keep_going(3, 1.0) for p in (None, 0.6, 0.0))  # at most 3 drafts
    few = priced(None)
    few.observe_prompt(5, 5 * 5.2)  # a prompt of fewer than 8 tokens prices nothing
    assert few.keep_going(1, 0.8)


def _priced_plain(plain_ms: float, prompt_token_ms: float, decodes_again: bool, checkpoint_ms=None):
    """A rule that priced plain steps (three, as a new decoder's first steps), a 17-token prompt and,
    if given, a checkpoint."""
    m = _core.DraftLengthModel()
    m.set_decodes_again(decodes_again)
    for _ in range(3):
        m.observe_verify(1, plain_ms)
        m.observe_step(1, plain_ms, False)
    m.observe_prompt(17, 17 * prompt_token_ms)
    if checkpoint_ms is not None:
        m.observe_checkpoint(checkpoint_ms)
    return m


def test_a_recurrent_target_starts_paused_where_its_prices_say_drafting_cannot_pay():
    """Before any drafting step is measured, whether to draft is predicted from the prices: a
    recurrent target on a CPU (Mamba-130M's shape on the 2-core CPU: plain step 6.5 ms, a prompt
    token 4.7 ms) whose rejected draft is decoded again: one draft kept at the prior acceptance 0.8
    makes 1.8 tokens, 11.7 ms of plain steps, for a 2-token batch (11.2 ms) and, one time in five,
    the last token decoded again (6.5 ms): 0.8 ms more than plain steps, and the loop starts
    paused. Its first probe comes when that cost is 1% of the plain steps before it: after 13
    steps. Where the target drops a rejected draft for free (a transformer's KV cache) the same
    prices pay, as a transformer's prompt price (0.6 ms a token) does on either, and a recurrent
    target with no prompt price drafts its usual first batch."""
    rec = _priced_plain(6.5, 4.7, True)
    assert rec.priced_excess_ms() == pytest.approx(0.8)
    assert not rec.pays_at_prices() and not rec.draft_pays()
    assert not rec.keep_going(1, 0.8)  # a first batch (a probe's) stops at one draft
    assert rec.probe_gap() == 13
    assert [rec.draft_this_step() for _ in range(13)] == [False] * 12 + [True] and rec.probing
    # priced with the draft's prompt price (0.9 ms a token: a Mamba draft of 4 layers), the draft's
    # decode costs at least that: 1.7 ms more than plain steps; and a probe's catch-up on the last
    # 32 tokens adds 29 ms: the first probe waits the longest gap the doubling gaps reach, 128 steps
    with_draft = _priced_plain(6.5, 4.7, True)
    with_draft.observe_draft_prompt(17, 17 * 0.9)
    assert with_draft.priced_excess_ms() == pytest.approx(1.7)
    assert with_draft.probe_gap() == 128
    # at a plain step of 8.5 ms the batch alone would pay (0.4 ms less than plain steps); with the
    # draft's decode it does not (0.5 ms more)
    slow_steps = _priced_plain(8.5, 4.7, True)
    assert slow_steps.priced_excess_ms() == pytest.approx(-0.4) and slow_steps.draft_pays()
    slow_steps.observe_draft_prompt(17, 17 * 0.9)
    assert slow_steps.priced_excess_ms() == pytest.approx(0.5) and not slow_steps.draft_pays()
    assert _priced_plain(6.5, 4.7, False).draft_pays()
    assert _priced_plain(6.5, 0.6, True).draft_pays() and _priced_plain(6.5, 0.6, True).keep_going(1, 0.8)
    fresh = _core.DraftLengthModel()
    fresh.set_decodes_again(True)
    for _ in range(3):
        fresh.observe_verify(1, 6.5)
        fresh.observe_step(1, 6.5, False)
    assert fresh.draft_pays()
    # drafts judged so far move the prediction: a draft the target kept ten times in ten pays
    good = _priced_plain(6.5, 4.7, True)
    for _ in range(10):
        good.observe_acceptance(0.9, True)
    assert good.draft_pays()
    # at prices that do not change, a predicted pause lasts until two probes have measured drafting;
    # then their rate decides (two that made 2 tokens in 12 ms beat plain steps' 13 ms: drafting
    # resumes)
    measured = _priced_plain(6.5, 4.7, True)
    for i in range(2):
        assert any(measured.draft_this_step() for _ in range(128)) and measured.probing
        measured.observe_step(2, 12.0, True)
        assert measured.draft_pays() == (i == 1)
    # one drafting step that was not a probe (a first batch, its catch-up and verification not yet
    # steady) stops nothing, however it went
    first = _priced_plain(6.5, 0.6, True)
    assert first.draft_this_step() and not first.probing
    first.observe_step(1, 40.0, True)
    assert first.draft_pays()


def test_a_prompt_dearer_per_token_than_plain_steps_prices_no_batch():
    """A prompt of 8 tokens or more costs less per token than the same model's one-token decodes. One
    that cost a plain step or more per token ran under other conditions than the plain steps after
    it (weights read from disk at their first use, a busy spell: the Qwen2.5-Coder-1.5B F16 target
    on 2 cores, a plain step 95 ms, took its 40-token chat prompt in 4-10 s beside four busy loops,
    1 s without), and prices nothing: the rule drafts its first batch as where no prompt was priced.
    Taken as a batch's price, 230 ms a token would predict a pause whose first probe waits 128 steps.
    Just under a plain step per token the prompt still prices (and there a transformer's draft does
    not pay)."""
    busy = _priced_plain(95.0, 230.0, False)
    assert busy.pays_at_prices() and busy.draft_pays()
    assert busy.verify_ms(2) == pytest.approx(95.0)  # no price per further token yet
    assert busy.keep_going(1, 0.8) and busy.keep_going(2, 0.8) and not busy.keep_going(3, 1.0)
    assert [busy.draft_this_step() for _ in range(3)] == [True] * 3
    assert _priced_plain(95.0, 95.0, False).draft_pays()
    near = _priced_plain(95.0, 94.0, False)
    assert near.verify_ms(2) == pytest.approx(189.0)
    assert not near.pays_at_prices() and not near.keep_going(1, 0.8)
    # the same price against a plain step that a busy spell slowed as much prices a batch again
    slow = _priced_plain(240.0, 230.0, False)
    assert slow.verify_ms(2) == pytest.approx(470.0)


def test_a_predicted_pause_ends_where_the_prices_measured_since_say_drafting_pays():
    """Before any drafting step is measured, a pause is the prediction at the prices measured so far,
    asked again at each step. Plain steps priced while a busy spell passes (150 ms where they cost
    95) beside a prompt priced at 130 ms a token predict that no first batch pays; as plain steps
    cost 95 ms again their estimate falls below the prompt's price, which then prices nothing, and
    the third such step starts drafting, not a probe. A pause that drafting steps made ends only with
    a probe (test_a_pause_ends_with_a_probe_not_with_a_plain_steps_price)."""
    m = _priced_plain(150.0, 130.0, False)
    assert not m.pays_at_prices() and not m.draft_this_step() and m.paused()
    resumed = []
    for _ in range(5):
        m.observe_verify(1, 95.0)
        m.observe_step(1, 95.0, False)
        resumed.append(m.draft_this_step())
    assert resumed == [False, False, True, True, True] and not m.probing and not m.paused()


def test_a_catch_up_on_what_the_draft_sat_out_prices_no_catch_up():
    """A probe's draft first reads what it sat out (the last 32 tokens, or a prompt it never read): a
    one-off that counts in its step's time, not a step's catch-up price, which would price every
    step after it and the pause's next probe. After a predicted pause's first probe whose catch-up
    read 32 tokens in 180 ms (a draft whose one-token decodes cost 37 ms), a first batch is priced
    at the draft's decode and pays; taken as the catch-up's price, the 180 ms would predict a loss."""
    def probed(resumed):
        m = _priced_plain(95.0, 80.0, False)
        assert not m.draft_this_step()
        m.observe(1, 1, 1, [0.9], -1, 180.0, 180.0, 110.0, 0, n_decodes=0, resumed=resumed)
        return m
    took = probed(False)
    assert took.catch_up_ms == pytest.approx(180.0) and took.priced_excess_ms() > 0.0
    sat_out = probed(True)
    assert sat_out.catch_up_ms == 0.0 and sat_out.priced_excess_ms() < 0.0


def _drafting_step(m, kept, catch_up_ms=20.0, prev_n=3, resumed=False, decode_ms=17.0):
    """A step of three drafts (after the catch-up, two draft decodes; a verification of four tokens
    110 ms) of which the target kept kept."""
    m.observe(3, 3, kept, [0.5] * 3, -1, catch_up_ms, catch_up_ms + 2 * decode_ms, 110.0, prev_n, resumed=resumed)


def _plain_step(m, ms=58.0, prev_n=0, n_prompt=0):
    """A plain step (prev_n -1 and n_prompt: a generation's first, its prompt pass)."""
    m.observe(0, 0, 0, [], -1, 0.0, 0.0, ms, prev_n, n_prompt=n_prompt)


def _paused_on_a_text(draft_ms=17.0, plain_ms=58.0, n_steps=300):
    """A rule paused on a text where drafting makes 0.71 of the plain rate (each step keeps one draft
    of three: two tokens in 164 ms against plain steps of 58 ms, the Qwen2.5-Coder pair's prices on a
    2-core EPYC), its probes alike until their gaps are the long ones that keep their cost near 1%."""
    m = _core.DraftLengthModel()
    for _ in range(3):
        _plain_step(m, plain_ms)
    prev_n = 0
    for _ in range(n_steps):
        if m.draft_this_step():
            _drafting_step(m, 1, catch_up_ms=draft_ms, prev_n=prev_n, decode_ms=draft_ms)
            prev_n = 3
        else:
            _plain_step(m, plain_ms, prev_n)
            prev_n = 0
    assert m.paused()
    return m


def _steps_to_probe(m, plain_ms=58.0, most=200):
    for i in range(1, most):
        if m.draft_this_step():
            assert m.probing
            return i
        _plain_step(m, plain_ms)
    return None


def test_a_new_generation_probes_a_pause_its_text_may_not_hold():
    """What the target keeps differs with the text (the Qwen2.5-Coder pair on a 2-core EPYC: drafting
    made 0.8-1.0x plain steps on a chat prompt, 1.3-1.9x on code), so a pause learned on one generation's
    text is probed as a new pause is in the next generation (after four steps, then eight), where
    drafts kept at 0.9 would pay at the prices measured. The first of those probes is judged on its
    own steps (those before it were other texts'), and where it pays, the new text's drafting steps
    are judged as a new decoder's first ones: only a clear loss pauses them before four are measured.
    Within a generation the probe waits for the long gap and is weighed against the steps before it:
    a probe that keeps two drafts of three (three tokens in 164 ms: 1.06x plain, where the steps that
    paused made 0.71x) ends the pause in a new generation only."""
    same = _paused_on_a_text()
    left = same.probe_gap() - same.skipped_steps
    assert same.probe_gap() > 50 and left > 4 and _steps_to_probe(same) == left
    _drafting_step(same, 2, prev_n=0)
    assert same.paused()
    new = _paused_on_a_text()
    _plain_step(new, 400.0, prev_n=-1, n_prompt=40)  # the next generation's prompt pass
    assert _steps_to_probe(new) == 4
    _drafting_step(new, 2, prev_n=0)
    assert not new.paused() and new.draft_this_step() and not new.probing
    # steps as the ones that paused (0.71x) pause it again once four of the new text's are measured
    for _ in range(3):
        assert not new.paused()
        _drafting_step(new, 1)
    assert new.paused()
    # a first probe that does not pay (here no draft kept) leaves the pause; the second probe comes
    # after eight steps, and where it does not pay either the pause keeps its long gaps
    failed = _paused_on_a_text()
    _plain_step(failed, 400.0, prev_n=-1, n_prompt=40)
    assert _steps_to_probe(failed) == 4
    _drafting_step(failed, 0, prev_n=0)
    assert failed.paused() and _steps_to_probe(failed) == 8
    _drafting_step(failed, 0, prev_n=0)
    left = failed.probe_gap() - failed.skipped_steps
    assert failed.paused() and left > 50 and _steps_to_probe(failed) == left
    # where the prices leave no text room to pay (the draft's decodes cost what a plain step does: a
    # small pair bound by kernel launches on a GPU), a new generation waits for the long gap too
    slow = _paused_on_a_text(draft_ms=58.0)
    assert slow.priced_excess_ms(0.9) > 0.0
    left = slow.probe_gap() - slow.skipped_steps
    _plain_step(slow, 400.0, prev_n=-1, n_prompt=40)
    assert left > 4 and _steps_to_probe(slow, most=400) == left


def _drafting_steps_until_paused(m, kept, prev_n, most=100):
    """Drafting steps, each keeping kept drafts of three, until the rule pauses (None: it never did)."""
    for i in range(1, most):
        assert m.draft_this_step() and not m.probing
        _drafting_step(m, kept, prev_n=prev_n)
        prev_n = 3
        if m.paused():
            return i
    return None


def test_a_new_text_drafted_in_from_its_first_step_is_judged_on_its_own_steps():
    """A decoder whose steps kept every draft (four tokens in 164 ms: 1.41x plain steps of 58 ms) meets a
    text where each step keeps one draft of three (0.71x). Within the generation the earlier text's
    evidence (33 steps' weight) keeps it drafting for more than 20 such steps; in a new generation the
    new text's first drafting step weighs as much as all before it, and the rule pauses once four of
    them are measured (not before: only a clear loss pauses a new text's first steps)."""
    def drafting_well():
        m = _core.DraftLengthModel()
        for _ in range(3):
            _plain_step(m)
        assert _drafting_steps_until_paused(m, 3, prev_n=0, most=60) is None
        return m

    same = drafting_well()
    assert _drafting_steps_until_paused(same, 1, prev_n=3) > 20
    new = drafting_well()
    _plain_step(new, 400.0, prev_n=-1, n_prompt=40)  # the next generation's prompt pass
    assert _drafting_steps_until_paused(new, 1, prev_n=0) == 4
    # a new text that pays as the last did drafts on
    good = drafting_well()
    _plain_step(good, 400.0, prev_n=-1, n_prompt=40)
    assert _drafting_steps_until_paused(good, 3, prev_n=0) is None


def test_a_probe_is_judged_without_its_read_of_what_the_draft_sat_out():
    """A probe's draft first reads what it sat out (up to 32 tokens: 120-200 ms on the Qwen2.5-Coder pair on
    a 2-core EPYC, two to three plain steps; 150 ms here). That is the price of coming back, paid once, not
    of drafting on: the probe counts in the drafting rate with a step's catch-up in its place. A probe
    that keeps all three drafts (four tokens in 164 ms with a step's catch-up, 294 ms with the read) ends
    the pause; the same time with a catch-up that is a step's own (not a resumption) leaves it paused."""
    for resumed in (True, False):
        m = _paused_on_a_text()
        _steps_to_probe(m, most=400)
        _drafting_step(m, 3, catch_up_ms=150.0, prev_n=0, resumed=resumed)
        assert m.paused() != resumed, resumed



def test_a_new_texts_first_probe_reads_all_its_draft_sat_out_where_drafting_wins_it_back():
    """A probe's draft reads the last 32 tokens it sat out alone, but a new text's first probe reads all
    of them (the reply may depend on the whole prompt: a code edit's) where drafts kept at 0.9 would
    win that read back before the generation ends. Here a draft prompt token costs 4.5 ms and a step
    of three drafts kept at 0.9 saves about 39 ms: over the 92 tokens left (23 steps of four tokens at
    most) a 150-token read pays, a 2000-token one does not; a probe within the generation reads 32. The
    tokens left count at most as many as the last generations' median length."""
    new = _paused_on_a_text()
    new.observe_draft_prompt(40, 180.0)
    _plain_step(new, 400.0, prev_n=-1, n_prompt=40)
    assert _steps_to_probe(new) == 4
    assert new.probe_window(150, 92) == 0
    assert new.probe_window(2000, 92) == 32 and new.probe_window(150, 8) == 32 and new.probe_window(20, 92) == 32
    # where the generations before stopped early (three of 8 tokens), it looks no further than they ran
    for _ in range(3):
        new.observe_generation(8)
    assert new.probe_window(150, 92) == 32
    for _ in range(5):
        new.observe_generation(96)
    assert new.probe_window(150, 92) == 0
    same = _paused_on_a_text()
    same.observe_draft_prompt(40, 180.0)
    _steps_to_probe(same, most=400)
    assert same.probe_window(150, 92) == 32


def test_a_probe_in_a_new_generation_reads_its_prompt_as_what_the_draft_sat_out(tiny):
    """A draft paused in one generation still holds that generation's text (here 133 prompt tokens and
    what followed); the next generation's first probe reads the new prompt (14 tokens) and the steps
    since, fewer tokens than the cache holds but more than one step brings: a resumption
    (StepTrace.resumed), judged as coming back and not as the step's own catch-up. A probe within the
    generation that reads the few tokens sat out since the last one is not."""
    prices = specllama.StepPrices(draft_ms=1.0, verify_ms=10.0, verify_token_ms=1.0)
    kw = dict(max_tokens=40, temperature=0, ignore_eos=True, prices=prices, record_steps=True)
    with specllama.SpeculativeDecoder(tiny.target, tiny.far_draft, n_ctx=1024) as dec:
        long = " ".join(["the cat is on the mat"] * 6)
        for _ in range(2):  # (the unrelated draft loses: the rule pauses it)
            first = dec.generate(long, **{**kw, "max_tokens": 80}).stats
        assert first.steps[-1].paused
        new = dec.generate("a dog and a cat", **kw).stats
    assert new.n_prompt < first.n_prompt
    probes = [(i, t.resumed) for i, t in enumerate(new.steps) if t.probe]
    assert probes[:2] == [(4, True), (12, False)], probes


def test_a_recurrent_targets_checkpoint_is_priced_before_any_batch():
    """Where a batch's tokens cost little (a GPU: a plain step 0.85 ms, a prompt token 0.1 ms),
    what a recurrent target's draft costs beyond its batch is the checkpoint before it and, after a
    rejection, the restore and the decode again. Priced at the state's save where the prompt ends
    (0.93 ms on an H100 for Mamba-130M's shape, in host memory), no first batch pays at the prior
    acceptance (the best, 3 drafts, costs 0.48 ms more than plain steps): the loop starts paused,
    and its first probe comes after 57 steps. Unpriced, or at half that price, a first batch pays,
    as it does for a target that drops a rejected draft for free."""
    gpu = _priced_plain(0.85, 0.1, True, checkpoint_ms=0.93)
    assert gpu.priced_excess_ms() == pytest.approx(0.481, abs=0.001)
    assert not gpu.draft_pays() and gpu.probe_gap() == 57
    assert _priced_plain(0.85, 0.1, True).draft_pays()
    assert _priced_plain(0.85, 0.1, True, checkpoint_ms=0.45).draft_pays()
    assert _priced_plain(0.85, 0.1, False, checkpoint_ms=0.93).draft_pays()


def _resume_after(m, plain_ms: float, step_tokens: int, step_ms: float, n_steps: int):
    """Steps, and probes among them, until a paused rule drafts again where plain steps cost
    plain_ms and drafting steps make step_tokens in step_ms."""
    probes = 0
    for i in range(1, n_steps + 1):
        if m.draft_this_step():
            m.observe_step(step_tokens, step_ms, True)
            probes += 1
            if m.draft_pays():
                return i, probes
        else:
            m.observe_verify(1, plain_ms)
            m.observe_step(1, plain_ms, False)
    return None, probes


def test_a_pause_from_a_busy_spell_ends_with_the_next_good_probes():
    """A busy spell of the machine slows the drafting steps alone, and the loop pauses (plain steps
    were priced before it); once the machine is idle again, good probes resume drafting: a probe
    weighs as much as all drafting steps before it, and drafting resumes once the weighted rate is
    within 3% of plain steps' (the probes alone make 1.3 times as many tokens per ms). After 50
    steps of a spell that doubled the drafting steps (their weighted rate 0.73 of the plain rate,
    the steps before the spell included) the probes come at the doubling gaps from 4, and three
    resume drafting within 28 steps; after one that made them 3.3 times as long (0.46: a clear
    loss, such as a recurrent target's rejected drafts cost) the first probe waits the longest
    gap, 128 steps, and then the doubling gaps again."""
    for spell_ms, first_gap, most_steps in ((272.0, 4, 4 + 8 + 16), (450.0, 128, 128 + 8 + 16)):
        m = _model_with_rates(20.0, 9, 136.0)
        assert m.draft_pays()
        for _ in range(50):  # busy: drafting steps take longer
            m.observe_step(9, spell_ms, True)
        assert not m.draft_pays() and m.probe_gap() == first_gap, (spell_ms, m.probe_gap())
        # idle again: plain steps 20 ms, drafting steps as before the spell
        steps, probes = _resume_after(m, 20.0, 9, 136.0, 400)
        assert steps is not None and steps <= most_steps and probes <= 3, (spell_ms, steps, probes)


def _drafting_run(m, n_steps: int, slowed, kept=None):
    """A generation on m at the Qwen2.5-Coder pair's prices on 2 EPYC cores (a draft decode 17 ms, a
    two-token catch-up 30 ms, a verification of k tokens 60 + 10 k ms), in which the target keeps each
    step's first kept drafts (confidence 0.95) and rejects the next (confidence 0.3); kept None: every
    draft. slowed(step): how many times as long the step's draft decodes and its verification take (a
    number for both, or a pair). The drafts of each step, as the loop plans and reports them
    (decoder::plan_step, observe_step)."""
    lengths, prev_n, behind = [], -1, 0
    conf = [0.95] * 10 if kept is None else [0.95] * kept + [0.3] + [0.95] * (9 - kept)
    for step in range(n_steps):
        x = slowed(step)
        dx, vx = x if isinstance(x, tuple) else (x, x)
        n = 0
        if not m.pricing(True) and m.model_drafts(True):
            n, p_reach = 10, 1.0
            for k in range(1, 10):
                more, p_reach = m.keep_drafting(k, conf[k - 1], p_reach, 10)
                if not more:
                    n = k
                    break
        n_kept = n if kept is None else min(n, kept)
        catch_up = 0.0 if n == 0 or behind == 0 else (17.0 if behind == 1 else 30.0) * dx
        draft_ms = catch_up + (n - 1) * 17.0 * dx if n else 0.0
        m.observe(n_model=n, n=n, n_accepted=n_kept, conf=conf[:n], probe=-1, catch_up_ms=catch_up,
                  draft_ms=draft_ms, verify_ms=(60.0 + 10.0 * (n + 1)) * vx, prev_n=prev_n)
        lengths.append(n)
        behind = (2 if n_kept == n else 1) if n > 0 else behind + 1
        prev_n = n
    return lengths


def _priced_again_then_as(lengths, quiet, after: int) -> bool:
    """From step after on: drafting steps, then two or more plain steps (plain steps priced again), a
    first batch of three drafts, and then exactly quiet's drafts"""
    j = next((j for j in range(after, len(lengths)) if lengths[j] == 0), len(lengths))
    k = next((k for k in range(j, len(lengths)) if lengths[k] > 0), len(lengths))
    return k - j >= 2 and k < len(lengths) - 1 and lengths[k] == 3 and lengths[k + 1:] == quiet[k + 1:]


@pytest.mark.parametrize("kept", [None, 2, 3, 4])
@pytest.mark.parametrize("spell", [3.0, 6.0])
@pytest.mark.parametrize("last", [5, 6, 8])
@pytest.mark.parametrize("tail", [None, 1.0, 2.5])
def test_prices_measured_in_a_spell_at_a_decoders_start_start_again_when_it_ends(kept, spell, last, tail):
    """A new decoder whose first steps meet a busy spell (another program, weights read from disk at their
    first use) measures its first prices at several times their cost, and not by one factor: a spell that
    ends in the middle of a step leaves that step's draft decodes slow and its verification nearly quiet
    (tail: that step's verification, times its cost). Nothing makes a decode faster than its cost, so the
    first verification below half the price measured in the spell starts every price again, and the
    long-run rate and the drafting steps' evidence with them: plain steps are priced again, then a first
    batch of three drafts, and from there the decoder drafts as one that never met the spell did (all
    ten drafts a step where every draft is kept, one more than the target keeps where it rejects a draft
    the draft model doubted). Followed step by step (an estimate moves 3% of the way a step), the
    spell's prices kept the steps after it at one draft each, or paused the draft."""
    quiet_model, spelled_model = _core.DraftLengthModel(), _core.DraftLengthModel()
    quiet = _drafting_run(quiet_model, 60, lambda step: 1.0, kept)
    steady = 10 if kept is None else kept + 1
    assert quiet[:3] == [0, 0, 0] and set(quiet[5:]) == {steady}, quiet

    def slowed(step):
        if step < last or (step == last and tail is None):
            return spell
        return (spell, tail) if step == last else 1.0
    spelled = _drafting_run(spelled_model, 60, slowed, kept)
    assert _priced_again_then_as(spelled, quiet, last), spelled
    for price in ("draft_ms", "catch_up_ms"):
        assert getattr(spelled_model, price) == pytest.approx(getattr(quiet_model, price), rel=0.05), price


@pytest.mark.parametrize("spell", [3.0, 6.0])
def test_prompt_prices_measured_in_a_spell_start_again_with_the_rest(spell):
    """A new decoder met by a busy spell prices its prompt passes in it too: the target's (it prices a
    first batch's further tokens until a batch is verified; here the spell makes it 66 ms a token,
    nearly a plain step's 70) and the draft's (5 ms a token quiet; it weighs the draft's read of a long
    prompt against what drafting saves). The target keeps two drafts a step. The prompt prices start
    again with every other price: the first batch after the spell has three drafts, not one, and the
    decoder then drafts as a quiet one does, and a
    prompt the spell's draft price would have kept the draft from reading is read, as the quiet price
    has it."""
    def run(model, x, draft_x, slowed):
        model.observe_prompt(400, 66.0 / spell * x * 400)
        model.observe_draft_prompt(400, 5.0 * draft_x * 400)
        return _drafting_run(model, 60, slowed, kept=2)

    def slowed(step):
        return spell if step < 6 else 1.0
    quiet_model, spelled_model, stale = (_core.DraftLengthModel() for _ in range(3))
    quiet = run(quiet_model, 1.0, 1.0, lambda step: 1.0)
    spelled = run(spelled_model, spell, spell, slowed)
    assert _priced_again_then_as(spelled, quiet, 6), spelled
    run(stale, 1.0, spell, lambda step: 1.0)  # (a quiet decoder with the spell's draft price)
    cases = [(n_prompt, n_gen) for n_prompt in (500, 1000, 2000, 4000, 8000) for n_gen in (16, 64, 256)]
    differ = [c for c in cases if quiet_model.draft_prompt_after(*c) == 0 < stale.draft_prompt_after(*c)]
    assert differ, "the spell's draft price must keep the draft from some read the quiet price makes"
    assert all(spelled_model.draft_prompt_after(*c) == 0 for c in differ)


@pytest.mark.parametrize("at", [4, 5, 6, 10, 20])
@pytest.mark.parametrize("slower", [10.0, 40.0])
def test_one_preempted_step_does_not_pause_a_draft_that_pays(at, slower):
    """A step the OS preempted (its verification 10 or 40 times its price) counts in the drafting steps'
    rate for at most twice what its work costs at the prices measured before it, as each price does.
    Counted whole, one such step early in a generation where every draft is kept paused the draft for the
    rest of it."""
    lengths = _drafting_run(_core.DraftLengthModel(), 50, lambda step: slower if step == at else 1.0)
    assert lengths[:4] == [0, 0, 0, 3] and set(lengths[4:]) == {10}, lengths


def test_the_first_lookup_token_of_a_plain_step_pays_for_leaving_plain_steps():
    """A lookup proposal where the model drafted nothing turns a plain step into a batch; on a GPU
    the plain step after it then records its CUDA graph again (measured on an H100 with the
    default pair: adaptive steps that left plain decoding cost about 4.5 ms more verification in
    all, the batch included, for about half a token). The rule charges the extra cost of that next
    plain step, as measured, to the first token only."""
    m = _core.DraftLengthModel()
    for _ in range(2):
        m.observe_verify(1, 20.0)
    for k in range(2, 7):
        m.observe_verify(k, 20.0 + 4.0 * (k - 1))
    for _ in range(50):
        m.observe_step(1, 20.0, False)
    assert m.rate == pytest.approx(0.05)
    # 0.5 expected tokens against 0.05 x 4 ms: worth it while leaving costs nothing (a CPU)
    assert m.leave_ms == 0.0 and m.keep_going_p(0, 1.0, 0.5, False)
    for _ in range(200):
        m.observe_leave(8.0)
    assert m.leave_ms == pytest.approx(8.0, rel=0.01)
    assert not m.keep_going_p(0, 1.0, 0.5, False)  # 0.5 < 0.05 x (4 + 8)
    assert m.keep_going_p(1, 1.0, 0.5, False)  # the second token leaves nothing


def _plain_fixed_adaptive(target, draft, prices):
    """200 tokens at the given prices from one decoder: plainly, drafting 4 every step, and adaptively
    (at most 4), in that order; each speculative output is checked to be plain decoding's."""
    kw = dict(max_tokens=200, temperature=0, ignore_eos=True, prices=prices)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512) as dec:
        plain = dec.generate("the cat is", speculative=False, **kw)
        fixed = dec.generate("the cat is", drafter="model", n_draft=4, adaptive=False, **kw)
        adaptive = dec.generate("the cat is", drafter="model", n_draft=4, **kw)
    assert fixed.tokens == plain.tokens and adaptive.tokens == plain.tokens
    return plain, fixed, adaptive


@pytest.mark.slow
def test_a_draft_that_does_not_pay_is_paused_and_the_output_is_unchanged(slow):
    """An unrelated draft (nearly always wrong) for the slow target: after the first steps have
    priced it, the adaptive loop stops drafting with it, apart from the probes; fixed-length
    drafting drafts every step; the output is plain decoding's either way."""
    # a draft at a fifth of the target's cost: a wrong draft then loses more than it could gain
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=10.0, verify_token_ms=2.0)
    plain, fixed, adaptive = _plain_fixed_adaptive(slow.target, slow.far, prices)
    assert fixed.stats.n_accepted < 0.2 * fixed.stats.n_drafted  # it is a bad draft
    assert fixed.stats.n_drafted >= 4 * (fixed.stats.n_steps - 4)  # fewer only where max_tokens caps it
    # the decoder priced plain steps and this draft's steps in the two runs before: from its first
    # step it drafts only in the probes, at gaps of 4, 8, 16, ... steps
    assert adaptive.stats.n_drafted <= 4 * 8, adaptive.stats
    assert adaptive.stats.n_steps > 150
    # the stats say so: steps without the draft model, counted and named in the stats line
    assert fixed.stats.n_paused_steps == 0
    assert adaptive.stats.n_paused_steps >= adaptive.stats.n_steps - 10
    assert f"draft model left out of {adaptive.stats.n_paused_steps} of 200 steps" in _stats_line(adaptive.stats)
    assert "left out" not in _stats_line(fixed.stats)


@pytest.mark.slow
def test_the_steps_of_a_fixed_length_generation_are_never_marked_paused(slow):
    """A decoder whose rule paused the draft (the unrelated draft at a fifth of the target's cost)
    records the pause in its adaptive generation's step traces; a fixed-length generation after it
    drafts all it may in every step, and its traces say neither paused nor probe."""
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=10.0, verify_token_ms=2.0)
    kw = dict(max_tokens=60, temperature=0, ignore_eos=True, prices=prices, drafter="model", n_draft=4,
              record_steps=True)
    with specllama.SpeculativeDecoder(slow.target, slow.far, n_ctx=512) as dec:
        dec.generate("the cat is", **kw)
        adaptive = dec.generate("the cat is", **kw).stats
        fixed = dec.generate("the cat is", adaptive=False, **kw).stats
    assert sum(t.paused for t in adaptive.steps) >= adaptive.n_steps - 10, adaptive
    # each drafts as many as it may: 4, fewer only where max_tokens caps it
    assert all(t.n_drafted == t.n_max for t in fixed.steps), [(t.n_drafted, t.n_max) for t in fixed.steps]
    assert sum(t.n_max == 4 for t in fixed.steps) >= fixed.n_steps - 5
    assert not any(t.paused or t.probe for t in fixed.steps)


@pytest.mark.slow
def test_a_draft_as_costly_as_the_target_is_left_out_even_where_it_agrees(slow):
    """Prices of a GPU on which the draft's decode costs what the target's does (both bound by
    kernel launches) and a verification batch costs little more than one token: every drafted token
    costs a whole target decode, so no acceptance rate can pay for it. A draft that agrees with the
    target more often than not is left out of every step but the probes, so that the loop runs at plain
    decoding's speed; the output is plain decoding's."""
    prices = specllama.StepPrices(draft_ms=1.0, verify_ms=1.0, verify_token_ms=0.02)
    plain, fixed, adaptive = _plain_fixed_adaptive(slow.target, slow.draft, prices)
    assert fixed.stats.n_accepted > 0.5 * fixed.stats.n_drafted  # a useful draft, yet not worth its price
    # priced at these prices, the run's cost: a draft decode per drafted token, a verification per step
    def cost(st):
        return st.n_drafted * prices.draft_ms + st.n_steps * prices.verify_ms + st.n_drafted * prices.verify_token_ms
    assert cost(fixed.stats) > 1.2 * cost(plain.stats)  # drafting every step would be slower than plain
    assert cost(adaptive.stats) <= 1.03 * cost(plain.stats), adaptive.stats
    assert adaptive.stats.n_paused_steps >= adaptive.stats.n_steps - 10


def test_adaptive_rule_on_recorded_traces_is_within_3_percent_of_the_best_fixed_length():
    """The rule replayed over the real traces and prices recorded by
    benchmarks/replay_draft_length.py (default pair, 12 prompts x 256 tokens, three cost
    measurements; in tests/data): on every prompt at every price within 3% of
    that prompt's best fixed n_draft of 1-12 chosen in hindsight, and ahead of the best single
    fixed n_draft on the set."""
    mod = _replay_module()
    path = Path(__file__).resolve().parent / "data" / "replay_draft_length.json"
    rec = json.loads(path.read_text())
    traces = {name: mod.Trace(t["match"], t["conf"]) for name, t in rec["traces"].items()}
    for recorded in rec["rounds"]:
        res = mod.replay_round(traces, mod.Costs(**recorded["costs"]), 10, 12)
        worst = min(res["prompts"].items(), key=lambda kv: kv[1]["adaptive_vs_best_of_all"])
        assert worst[1]["adaptive_vs_best_of_all"] >= 0.97, worst
        assert res["set"]["adaptive"] > max(res["set"][f"fixed_{n}"] for n in range(1, 13)), res["set"]


def _replay_recorded(name: str):
    mod = _replay_module()
    rec = json.loads((Path(__file__).resolve().parent / "data" / name).read_text())
    traces = {prompt: mod.Trace(t["match"], t["conf"]) for prompt, t in rec["traces"].items()}
    return [mod.replay_round(traces, mod.Costs(**r["costs"]), 10, 12) for r in rec["rounds"]]


def test_adaptive_rule_on_the_real_pairs_traces():
    """The rule replayed over traces and prices recorded on the Qwen2.5-Coder pair (4 prompts x
    160 tokens, two cost measurements each; tests/data). F16 target on 2 Xeon cores, where drafting
    pays: every prompt within 5% of its best fixed n_draft of 1-12 chosen in hindsight, and the set
    ahead of the best single fixed n_draft. Q8_0 target on 2 EPYC cores, where a two-token batch
    costs 2.5 plain steps and no length pays: every prompt at least 0.97x plain decoding."""
    for res in _replay_recorded("replay_draft_length_qwen2.5-coder_f16.json"):
        worst = min(res["prompts"].items(), key=lambda kv: kv[1]["adaptive_vs_best_of_all"])
        assert worst[1]["adaptive_vs_best_of_all"] >= 0.95, worst
        assert res["set"]["adaptive"] > max(res["set"][f"fixed_{n}"] for n in range(1, 13)), res["set"]
    for res in _replay_recorded("replay_draft_length_qwen2.5-coder_q8_0.json"):
        assert max(res["set"][f"fixed_{n}"] for n in range(1, 13)) < 0.7  # no length pays
        for prompt, row in res["prompts"].items():
            assert row["adaptive"] >= 0.97, (prompt, row)


# -- slots sharing their decodes: the group's draft length ---------------------------------------


def _priced(target_ms, draft_ms, acceptance, n_max=10):
    """A BatchDrafting rule given decode costs by token count (functions of n) and an acceptance rate."""
    rule = _core.BatchDrafting()
    for n in range(1, 4 * (n_max + 1) + 1):
        rule.observe_decode(False, n, target_ms(n))
    for n in range(1, 5):
        rule.observe_decode(True, n, draft_ms(n))
    rule.observe_step(100, round(100 * acceptance))
    return rule


def test_slots_draft_until_the_shared_batch_prices_it_out():
    """Several slots merge their decodes: a draft whose decodes cost what the target's do gives
    plain steps (no model drafts); a cheap draft before a target whose batches cost little more
    than one token keeps drafting; one slot alone leaves the slot's own rule its n_max, and a rule
    not priced yet lets a slot draft one token, which prices the merged rounds."""
    as_costly = _priced(lambda n: 10.0 * n, lambda n: 10.0 * n, 0.95)
    assert as_costly.cap(4, 10) == 0
    assert as_costly.rate(4, 0) > as_costly.rate(4, 3) > 0
    memory_bound = _priced(lambda n: 20.0 + 0.2 * n, lambda n: 2.0 + 0.1 * n, 0.95)
    assert memory_bound.cap(4, 10) >= 4
    assert memory_bound.rate(4, memory_bound.cap(4, 10)) > memory_bound.rate(4, 0)
    # a compute-bound target: every token costs, and only a very good, very cheap draft pays
    compute_bound = _priced(lambda n: 5.0 + 3.0 * n, lambda n: 1.0 + 0.5 * n, 0.6)
    assert compute_bound.cap(4, 10) == 0
    assert as_costly.cap(1, 10) == 10  # one slot: its own rule decides
    assert _core.BatchDrafting().cap(4, 7) == 1  # no costs measured yet: one draft, to price them
    assert _core.BatchDrafting().cap(1, 7) == 7
    # the caps the rule gives are the best of the rates it reports, drafting only by a margin
    margin = _core.BatchDrafting.draft_margin
    assert margin > 1
    for rule in (as_costly, memory_bound, compute_bound):
        for n in (2, 3, 4):
            priced = [rule.rate(n, k) / (margin if k else 1) for k in range(11)]
            assert rule.cap(n, 10) == priced.index(max(priced))
    barely = _priced(lambda n: 20.0 + 0.2 * n, lambda n: 2.0 + 0.1 * n, 0.95)
    best = max(range(1, 11), key=lambda k: barely.rate(4, k))
    assert (barely.cap(4, 10) > 0) == (barely.rate(4, best) > margin * barely.rate(4, 0))


def test_one_slot_at_a_time_drafts_to_price_the_rounds():
    """Until the merged rounds are priced, one slot drafts one token a step and the others none, so
    that one slot's draft reads its prompt, not every slot's; when its generation ends another slot
    takes over. Drafting is priced once eight drafts are judged: a first rejected draft alone would
    price it at nothing, and a group priced out of drafting judges no more drafts."""
    r = _core.BatchDrafting()
    assert r.cap(4, 7, slot=2) == 1
    assert [r.cap(4, 7, slot=s) for s in (0, 1, 3)] == [0, 0, 0]
    assert r.cap(4, 7, slot=2) == 1 and r.cap(4, 7) == 1  # (-1: any slot, as before slots had numbers)
    assert r.cap(1, 7, slot=0) == 7  # one slot generating: its own rule decides
    r.leave(0)  # not the exploring slot: nothing changes
    assert r.cap(4, 7, slot=1) == 0
    r.leave(2)
    assert r.cap(4, 7, slot=1) == 1 and r.cap(4, 7, slot=2) == 0
    for n in range(1, 45):  # memory-bound costs, every count measured
        r.observe_decode(False, n, 20.0 + 0.2 * n)
    for n in range(1, 5):
        r.observe_decode(True, n, 2.0 + 0.1 * n)
    for i in range(7):  # the first judged draft rejected, the next six kept
        r.observe_step(1, 0 if i == 0 else 1)
        assert r.rate(4, 1) < 0 and r.cap(4, 7, slot=3) == 0 and r.cap(4, 7, slot=1) == 1
    r.observe_step(1, 1)
    assert r.rate(4, 1) > 0
    assert r.cap(4, 7, slot=3) == r.cap(4, 7, slot=1) == r.cap(4, 7) > 0  # priced: every slot drafts
    # prompt lookup's drafts cost no draft prompt pass: every slot prices them
    assert [r.lookup_cap(4, 6) for _ in range(3)] == [1, 1, 1]


def test_a_new_group_of_slots_drafts_from_one_slot_until_its_rounds_are_priced(tiny):
    """Four new slots generating at once, their merged rounds not priced yet: one slot drafts with
    the model and the others take plain steps, so in the order the four's steps ran, every drafting
    step up to the first drafting slot's last is that slot's (eight tokens: it judges at most seven
    drafts, short of pricing the rounds), and only a slot that drafted ran its prompt through the
    draft model."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as first:
        slots = first.slots(4)
        prompts = [first.tokenize(p) for p in ("the cat is", "she was out with", "what some of the",
                                                "they were all there and")]
        order, lock = [], threading.Lock()
        all_in = threading.Barrier(4)

        def run(i):
            first_step = [True]

            def step(tokens, text, n_drafted, n_accepted):
                if first_step:  # the four generate at once from here
                    first_step.pop()
                    all_in.wait(60)
                with lock:
                    order.append((i, n_drafted))

            return slots[i].generate(prompts[i], max_tokens=8, ignore_eos=True, temperature=0, drafter="model",
                                     n_draft=4, on_step=step)

        in_threads(run, [(i,) for i in range(4)])
        drafting = [i for i, n in order if n > 0]
        assert drafting, order  # a slot drafted
        last = max(k for k, i in enumerate(drafting) if i == drafting[0])
        assert drafting[:last + 1] == [drafting[0]] * (last + 1), order
        for i, (slot, prompt) in enumerate(zip(slots, prompts)):
            read = slot._native().draft_cached_tokens()[:len(prompt) - 1] == prompt[:-1]
            assert read == (i in drafting), (i, order)


def test_a_slot_whose_draft_fell_behind_drafts_only_where_the_rest_of_its_reply_pays_for_the_read():
    """A slot's draft reads what it has not read (its prompt, or the steps the slots took without
    drafts) before it drafts, and that read holds every slot. Where drafting beats plain steps by
    a little (a CPU's compute-bound costs), a read of 150 tokens is not won back in the last 20
    tokens of a reply, and is in a long one; where a read costs little against what drafting saves
    (a GPU's shape), it pays within a few tokens. While the rounds are not priced it pays (the
    exploring slot reads its prompt), as does a draft that is one token behind."""
    def rule(target_ms, draft_ms, acceptance):
        r = _priced(target_ms, draft_ms, acceptance)
        for n in (40, 150, 300):
            r.observe_decode(True, n, draft_ms(n))
        return r

    cpu = rule(lambda n: 140.0 + 10.0 * n, lambda n: 30.0 + 6.0 * n, 0.8)
    k = cpu.cap(4, 10)
    assert k > 0 and cpu.rate(4, k) < 1.5 * cpu.rate(4, 0)  # drafting pays, by a little
    saved = 1 / cpu.rate(4, 0) - 1 / cpu.rate(4, k)  # ms of the group's time per token
    read = 30.0 + 6.0 * 150
    assert not cpu.catch_up_pays(4, k, 150, 20)
    assert cpu.catch_up_pays(4, k, 150, int(read / saved) + 1)
    assert not cpu.catch_up_pays(4, k, 150, int(read / saved) - 1)
    assert cpu.catch_up_pays(4, k, 1, 20)  # one token behind: a step's own catch-up
    assert cpu.catch_up_pays(1, k, 150, 20)  # one slot generating: its own rule decides
    gpu = rule(lambda n: 20.0 + 0.2 * n, lambda n: 2.0 + 0.01 * n, 0.8)
    assert gpu.catch_up_pays(4, gpu.cap(4, 10), 150, 10)
    assert _core.BatchDrafting().catch_up_pays(4, 1, 150, 20)  # not priced: the exploring slot reads


def _expected_tokens(a, k):
    return (1 - a ** (k + 1)) / (1 - a)


def test_prompt_lookup_drafts_of_slots_are_priced_by_the_verification_they_add():
    """A slot's prompt-lookup drafts cost no draft decode, but every one of them lengthens the merged
    verification that all slots wait for: where each token costs compute (a CPU), lookup drafts
    kept half the time are left out; where a longer batch costs little, they stay."""
    def rule(target_ms, lookup_acceptance, n_max=10):
        r = _priced(target_ms, lambda n: 1.0 + 0.5 * n, 0.9, n_max)
        r.observe_step(0, 0, 100, round(100 * lookup_acceptance))
        return r

    compute_bound = rule(lambda n: 5.0 + 3.0 * n, 0.5)
    assert compute_bound.lookup_cap(8, 10) == 0
    assert compute_bound.lookup_rate(8, 0) > compute_bound.lookup_rate(8, 1) > 0
    memory_bound = rule(lambda n: 20.0 + 0.2 * n, 0.5)
    assert memory_bound.lookup_cap(8, 10) > 0
    assert compute_bound.lookup_cap(1, 10) == 10  # one slot: its own rule decides
    unpriced = _priced(lambda n: 5.0 + 3.0 * n, lambda n: 1.0 + 0.5 * n, 0.9)  # no lookup step seen
    assert unpriced.lookup_cap(8, 6) == 1  # one lookup draft, to price them
    # the cap is the best of the rounds' rates, lookup's extra tokens counted at 1 / margin
    margin = _core.BatchDrafting.draft_margin
    for r, t in ((compute_bound, lambda n: 5.0 + 3.0 * n), (memory_bound, lambda n: 20.0 + 0.2 * n)):
        priced = [(8 + (_expected_tokens(0.5, k) - 1) / margin) / t(8 + k) for k in range(11)]
        assert r.lookup_cap(8, 10) == priced.index(max(priced))
    # the rate is the round's: one slot's expected extra tokens over the longer verification
    t = lambda n: 20.0 + 0.2 * n  # noqa: E731
    assert memory_bound.lookup_rate(8, 3) == pytest.approx((7 + _expected_tokens(0.5, 3)) / t(11), rel=1e-6)
    # lookup's acceptance does not dilute the model's: the model's rates are those of a rule that
    # saw no lookup step
    assert memory_bound.rate(4, 3) == pytest.approx(
        _priced(t, lambda n: 1.0 + 0.5 * n, 0.9).rate(4, 3), rel=1e-9)


def test_slot_round_prices_hold_against_noisy_decode_costs():
    """Decode costs measured with noise (the count a round of plain steps uses seen slow, the longer
    ones fast, as a busy machine makes them) do not make drafting look better than it is: the rule
    prices decodes by a line fitted through the counts near each, so one noisy count does not decide."""
    true_ms = lambda n: 10.0 + 4.0 * n  # noqa: E731  (compute-bound)
    noisy = {n: true_ms(n) * (1.15 if n == 8 else 0.85 if 9 <= n <= 16 else 1.0) for n in range(1, 45)}
    r = _core.BatchDrafting()
    for n, ms in noisy.items():
        r.observe_decode(False, n, ms)
    r.observe_step(0, 0, 100, 60)
    # priced from the noisy table count by count, lookup drafts would look worth their cost
    raw = [(7 + _expected_tokens(0.6, k)) / noisy[8 + k] for k in range(1, 9)]
    assert max(raw) > _core.BatchDrafting.draft_margin * 8 / noisy[8]
    # with the true costs they are not, and the rule follows the true costs
    assert max((7 + _expected_tokens(0.6, k)) / true_ms(8 + k) for k in range(1, 9)) < 8 / true_ms(8)
    assert r.lookup_cap(8, 8) == 0
    for k in range(9):
        assert r.lookup_rate(8, k) == pytest.approx((7 + _expected_tokens(0.6, k)) / true_ms(8 + k), rel=0.1)


def test_a_slot_group_reads_acceptance_from_the_drafts_the_target_judged():
    """The group prices a round of k drafts at a per-draft acceptance rate a, as if each draft were
    kept with chance a once every draft before it was. So it counts a draft only when the target
    judged it: the drafts after the first rejected one were never weighed. Steps of one draft and of
    six, each draft kept at 0.8, read 0.8 alike; counted with every draft drafted (the negative
    control), the six-draft steps read 0.59 and would price every length longer than one below
    what it makes."""
    rng = random.Random(7)
    a = 0.8

    def kept(k):  # drafts kept of k, each kept at a while all before it were
        n = 0
        while n < k and rng.random() < a:
            n += 1
        return n

    def mean_read(k, count):
        reads = []
        for _ in range(200):
            rule = _core.BatchDrafting()
            for _ in range(60):
                n = kept(k)
                if count == "judged":
                    rule.observe_verified(k, k, k, n)
                else:
                    rule.observe_step(k, n)
            reads.append(rule.acceptance())
        return sum(reads) / len(reads)

    assert mean_read(1, "judged") == pytest.approx(a, abs=0.02)
    assert mean_read(6, "judged") == pytest.approx(a, abs=0.02)
    every = a * (1 - a ** 6) / (1 - a) / 6  # 0.59: kept drafts over all drafted
    assert mean_read(6, "every") == pytest.approx(every, abs=0.02)
    assert every < a - 0.15
    # which drafts a step's verification judged: the model's up to its first rejected one, and
    # prompt lookup's (after the model's, or after grammar-forced drafts) only where every draft
    # before them was kept
    for (n_model, n_before_lookup, n, n_accepted), (model, lookup) in {
            (4, 4, 4, 1): ((2, 1), None),        # the third and fourth were never weighed
            (4, 4, 4, 4): ((4, 4), None),
            (2, 2, 5, 1): ((2, 1), None),        # the model's second rejected: lookup's not judged
            (2, 2, 5, 3): ((2, 2), (2, 1)),
            (0, 0, 3, 3): (None, (3, 3)),
            (0, 1, 4, 0): (None, None),          # a forced draft rejected before lookup's
            (0, 1, 4, 2): (None, (2, 1)),
    }.items():
        rule = _core.BatchDrafting()
        rule.observe_verified(n_model, n_before_lookup, n, n_accepted)
        for got, want in ((rule.acceptance(), model), (rule.acceptance(lookup=True), lookup)):
            assert got == (-1.0 if want is None else pytest.approx(want[1] / want[0])), (n_model, n, n_accepted)


def test_a_slot_group_drafting_on_memory_bound_prices_finds_the_best_length():
    """Four slots whose decodes cost little more per token (a GPU's shape: a target decode 20 ms +
    0.2 ms a token, a draft decode 2 + 0.1), each draft kept at 0.8: the group, fed each round's
    steps at the cap it chose, settles where rounds make within 2% of the best length's tokens per
    ms (five drafts). Fed every drafted token as judged (the negative control), it reads acceptance
    low whenever it drafts long, and its lengths make 4% fewer."""
    def target(n):
        return 20.0 + 0.2 * n

    def draft(n):
        return 2.0 + 0.1 * n

    a, n_slots = 0.8, 4

    def true_rate(k):
        return n_slots * _expected_tokens(a, k) / (target(n_slots * (k + 1)) + k * draft(n_slots))

    best = max(true_rate(k) for k in range(11))
    assert max(range(11), key=true_rate) == 5

    def settled(count):
        rng = random.Random(3)
        rule = _core.BatchDrafting()
        for n in range(1, 45):
            rule.observe_decode(False, n, target(n))
        for n in range(1, 5):
            rule.observe_decode(True, n, draft(n))
        caps = []
        for _ in range(400):
            k = rule.cap(n_slots, 10)
            caps.append(k)
            for _ in range(n_slots):
                kept = 0
                while kept < k and rng.random() < a:
                    kept += 1
                if count == "judged":
                    rule.observe_verified(k, k, k, kept)
                else:
                    rule.observe_step(k, kept)
        return sum(true_rate(k) for k in caps[100:]) / 300 / best

    assert settled("judged") > 0.98
    assert settled("every") < 0.97


def test_slots_feed_their_group_the_drafts_the_target_judged(tiny):
    """A slot's verified steps reach its group as judged drafts (the model's up to the first
    rejected one): the group's acceptance is the decayed count of those, kept over judged, from
    the slot's own step records."""
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as first:
        slot = first.slots(2)[0]
        assert slot._native().slot_round_rates(2)["acceptance"] == -1.0  # nothing judged yet
        res = slot.generate("the cat is", max_tokens=80, ignore_eos=True, temperature=0, drafter="model",
                            n_draft=6, adaptive=False, record_steps=True)
        steps = [s for s in res.stats.steps if s.n_model > 0]
        assert any(s.n_accepted + 1 < s.n_model for s in steps)  # drafts the target never weighed
        judged = kept = 0.0
        for s in steps:
            judged = 0.98 * judged + min(s.n_model, s.n_accepted + 1)
            kept = 0.98 * kept + min(s.n_model, s.n_accepted)
        assert slot._native().slot_round_rates(2)["acceptance"] == pytest.approx(kept / judged, rel=1e-9)


def test_slots_that_have_only_drafted_price_plain_steps_below_their_decodes():
    """Slots that have drafted from their first merged round have seen only long verifications:
    the cost of a round of plain steps is then read down the line of the costs seen, not taken as
    the smallest decode's, which would price plain steps as dear as drafting and keep the slots
    drafting on a machine where plain steps are faster."""
    target_ms = lambda n: 5.0 + 3.0 * n  # noqa: E731  (compute-bound)
    r = _core.BatchDrafting()
    for n in range(12, 21):  # 4 slots verifying 2..4 drafts each
        r.observe_decode(False, n, target_ms(n))
    for n in range(1, 5):
        r.observe_decode(True, n, 1.0 + 0.5 * n)
    r.observe_step(100, 90)
    assert r.rate(4, 0) == pytest.approx(4 / target_ms(4), rel=1e-6)
    assert r.cap(4, 10) == 0
    # never below the per-token cost of the smallest decode seen
    steep = _core.BatchDrafting()
    steep.observe_decode(False, 12, 12.0)
    steep.observe_decode(False, 13, 30.0)
    assert steep.rate(4, 0) == pytest.approx(4 / 4.0, rel=1e-6)


def test_a_paused_draft_model_takes_the_prompt_in_only_when_it_probes(tiny):
    """While drafting does not pay, a new prompt is not run through the draft model: the model
    catches up at its next probe (with everything it missed), and the output is plain decoding's.
    Injected prices (a draft as costly as the target) make the pause certain."""
    prices = specllama.StepPrices(draft_ms=1.0, verify_ms=1.0, verify_token_ms=0.02)
    kw = dict(temperature=0, ignore_eos=True, prices=prices, drafter="model", n_draft=4)
    with specllama.SpeculativeDecoder(tiny.target_q, tiny.draft_q, n_ctx=512) as dec:
        native = dec._native()
        # (priced too: a plain generation prices the rule's plain step, which must not be this machine's)
        plain = dec.generate("the dog", max_tokens=200, speculative=False, **kw).tokens
        priced = dec.generate("the cat is", max_tokens=100, **kw)  # prices plain and drafting steps: a pause
        assert priced.stats.n_paused_steps > 0
        prompt = dec.tokenize("the dog")
        first = dec.generate("the dog", max_tokens=1, **kw)  # one plain step: no probe
        assert first.stats.n_drafted == 0
        assert native.draft_cached_tokens()[:len(prompt) - 1] != prompt[:-1]  # the draft never saw it
        # drafting every step (adaptive=False) runs the prompt through the draft before the
        # second step, its first drafting one
        dec.generate("a bird", max_tokens=3, **dict(kw, adaptive=False))
        bird = dec.tokenize("a bird")
        assert native.draft_cached_tokens()[:len(bird)] == bird
        # a generation long enough for probes: the draft catches up on the prompt and what followed
        res = dec.generate("the dog", max_tokens=200, **kw)
        assert res.stats.n_drafted > 0 and res.tokens == plain


def test_a_first_slow_drafting_step_does_not_keep_the_draft_out_of_later_generations():
    """A decoder's first drafting steps on a GPU may cost far more than later ones (an H200,
    Qwen2.5-0.5B's shape drafting for a 7B one: a plain step 5.7 ms, a first drafting step 1 token
    in 23.8 ms). One such
    step is too little to pause on; nor does it keep the draft from taking a later generation's
    prompt in, where the draft would sit out every generation and never be measured again. With
    the evidence of a pause, drafting that saves time still sits out a short answer to a long
    prompt, and drafting that loses is paused (its probes see changed prices)."""
    m = _model_with_rates(5.7, 1, 23.8, n_steps=1)
    m.observe_draft_prompt(12, 3.0)  # 0.25 ms per draft prompt token
    assert not m.paused()
    assert m.draft_prompt_pays(12, 128) and m.draft_prompt_pays(2000, 16)
    # steps that save 1.7 ms per token (4 tokens in 16 ms)
    saving = _model_with_rates(5.7, 4, 16.0, n_steps=20)
    saving.observe_draft_prompt(12, 3.0)
    assert not saving.draft_prompt_pays(2000, 16)  # 16 x 1.7 ms < 2000 x 0.25 ms
    assert saving.draft_prompt_pays(2000, 4000) and saving.draft_prompt_pays(12, 16)
    losing = _model_with_rates(5.7, 2, 16.0, n_steps=4)
    losing.observe_draft_prompt(12, 3.0)
    assert losing.paused() and losing.draft_prompt_pays(2000, 16)


def test_a_draft_sits_out_a_short_answer_to_a_long_new_prompt(tiny):
    """At given prices (a draft token 2 ms, a plain step 10 ms, each verified token beyond the
    first 1 ms), a drafting step saves about 2 ms per token. A generation of 4 tokens after about
    100 new prompt tokens cannot win back the draft's pass over them (200 ms): the draft model sits
    it out and the loop decodes plainly; one of 200 tokens can, and drafts. Both outputs are plain
    decoding's."""
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=10.0, verify_token_ms=1.0)
    kw = dict(temperature=0, ignore_eos=True, prices=prices, drafter="model", n_draft=4)
    long_prompt = " ".join(["the cat is on the mat and"] * 4)
    first = "she was in the house with a word"  # long enough to price the draft's prompt tokens
    # (the draft's own prompt pass: not a copy of the target's, which would cost next to nothing)
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=1024, share_prefill=False) as dec:
        dec.generate(first, max_tokens=120, **kw)  # prices plain and drafting steps, and prompt tokens
        short = dec.generate(long_prompt, max_tokens=4, **kw)
        assert short.stats.n_prompt > 90 and short.stats.n_drafted == 0
        assert short.stats.n_paused_steps > 0  # (the stats say so: steps without the draft model)
        dec.reset()
        dec.generate(first, max_tokens=120, **kw)
        long = dec.generate(long_prompt, max_tokens=200, **kw)
        assert long.stats.n_drafted > 0
        plain = dec.generate(long_prompt, max_tokens=200, temperature=0, ignore_eos=True, speculative=False)
    assert short.tokens == plain.tokens[:4] and long.tokens == plain.tokens


def test_a_draft_that_sat_out_reads_again_once_the_generations_it_sat_out_would_have_paid_for_it():
    """A draft that saves 1.7 ms a token (steps of 4 tokens in 16 ms against 5.7 ms plain ones) sits out
    16 tokens after 2000 new prompt tokens (a read of 500 ms). That judgement rests on the texts it last
    drafted in, and sitting out measures nothing new; so once the generations it sat out since it last
    drafted have made as many tokens as drafts kept at 0.9 would have saved the read in, it reads. A step
    the model drafts in starts that count again."""
    m = _model_with_rates(5.7, 4, 16.0, n_steps=20)
    m.observe_draft_prompt(12, 3.0)  # 0.25 ms a draft prompt token
    good = -m.priced_excess_ms(0.9) / 4  # ms saved a token, in steps of at most 4 tokens
    need = 2000 * 0.25 / good
    assert 120 < need < 200
    m.observe_sat_out(100)
    assert not m.draft_prompt_pays(2000, 16)
    m.observe_sat_out(int(need) - 100)
    assert not m.draft_prompt_pays(2000, 16)
    m.observe_sat_out(1)
    assert m.draft_prompt_pays(2000, 16)
    assert not m.draft_prompt_pays(4000, 16)  # a read twice as long: twice the tokens
    m.observe_step(4, 16.0, True)
    assert not m.draft_prompt_pays(2000, 16)
    # where drafting saves nothing even at 0.9 (a draft decode as dear as a plain step), it never does
    dear = _model_with_rates(5.7, 4, 20.0, n_steps=20)
    dear.observe_draft_prompt(12, 3.0)
    dear.observe_draft_decode(6.0)
    dear.observe_catch_up(6.0)
    dear.observe_verify(4, 8.0)
    assert dear.priced_excess_ms(0.9) > 0
    dear.observe_sat_out(100000)
    assert not dear.draft_prompt_pays(2000, 16)


def test_generations_sat_out_lead_to_a_read_and_the_count_starts_again(tiny):
    """The same in the loop, at given prices (a draft token 2 ms, a plain step 10 ms, each verified token
    beyond the first 1 ms): 8-token answers to two long prompts the draft never read, in turn. The first
    ones sit out; within the tokens that drafts kept at 0.9 (3.9 ms a token saved) would have saved the
    read of one (about 200 ms) in, one reads it and drafts, and the next, of the other, sits out again.
    Every output is plain decoding's."""
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=10.0, verify_token_ms=1.0)
    kw = dict(temperature=0, ignore_eos=True, prices=prices, drafter="model", n_draft=4)
    prompts = [" ".join(["the cat is on the mat and"] * 4), " ".join(["a dog ran to the big red house"] * 4)]
    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=1024, share_prefill=False) as dec:
        plain = [dec.generate(p, max_tokens=8, speculative=False, **kw).tokens for p in prompts]
        dec.generate("she was in the house with a word", max_tokens=120, **kw)  # prices every step
        drafted = []
        for k in range(16):
            res = dec.generate(prompts[k % 2], max_tokens=8, **kw)
            assert res.tokens == plain[k % 2]
            drafted.append(res.stats.n_drafted > 0)
    first = drafted.index(True)
    assert 3 <= first <= 12  # 24-96 tokens sat out before a read of about 100 tokens
    assert not drafted[first + 1]  # (the other prompt, unread: the count starts again)
    assert drafted[first + 2]  # (the prompt read: nothing to read again)


def test_a_long_prompt_is_read_late_where_the_replies_before_stopped_short_of_winning_it_back():
    """With no limit of its own a reply may run to the room left in the context, and a question about a
    long document is often answered in a sentence. Where the last generations' median length would not
    win the read back (1.7 ms saved a token against 2000 prompt tokens at 0.25 ms: 295 tokens), the
    draft sits out until the generation has made that many tokens, and reads then; after long replies,
    or for a short read, it reads before its first drafting step as before."""
    m = _model_with_rates(5.7, 4, 16.0, n_steps=20)
    m.observe_draft_prompt(12, 3.0)
    saved = 5.7 - 16.0 / 4
    assert m.typical_length == -1 and m.draft_prompt_after(2000, 4000) == 0  # (no lengths yet)
    for n in (20, 30):
        m.observe_generation(n)
    assert m.typical_length == -1 and m.draft_prompt_after(2000, 4000) == 0
    m.observe_generation(25)
    assert m.typical_length == 25
    assert m.draft_prompt_after(2000, 4000) == math.ceil(2000 * 0.25 / saved)
    assert not m.draft_prompt_pays(2000, 4000)
    assert m.draft_prompt_after(2000, 16) > 16  # (too short to win it back even at its limit: never)
    assert m.draft_prompt_after(100, 4000) == 0  # 25 tokens win a read of 100 back
    for n in (400, 500, 600, 700, 800):  # 20 30 25 400 500 600 700 800: the upper median, 500
        m.observe_generation(n)
    assert m.typical_length == 500 and m.draft_prompt_after(2000, 4000) == 0
    m.observe_generation(10)  # the first (20) leaves the last 8: 30 25 400 ... 800 10
    assert m.typical_length == 500
    for n in (10, 10, 10, 10):
        m.observe_generation(n)
    assert m.typical_length == 10


def test_a_generation_after_short_ones_reads_a_long_new_prompt_once_it_has_run_long_enough(tiny):
    """At given prices (a draft token 2 ms, a plain step 10 ms, each verified token beyond the first
    1 ms), the draft's read of about 100 new prompt tokens costs about 200 ms. After three 8-token
    replies, a reply allowed 300 tokens sits out until it has made as many tokens as that read costs at
    what drafting saved a token, and then drafts; after long replies the same request drafts from its
    second step. Both outputs are plain decoding's."""
    prices = specllama.StepPrices(draft_ms=2.0, verify_ms=10.0, verify_token_ms=1.0)
    kw = dict(temperature=0, ignore_eos=True, prices=prices, drafter="model", n_draft=4, record_steps=True)
    long_prompt = " ".join(["the cat is on the mat and"] * 4)
    first = "she was in the house with a word"

    def first_drafted_at(res):  # tokens generated before the first step the model drafted in
        made = 0
        for t in res.stats.steps:
            if t.n_model > 0:
                return made
            made += t.n_accepted + 1
        return None

    with specllama.SpeculativeDecoder(tiny.target, tiny.draft, n_ctx=1024, share_prefill=False) as dec:
        plain = dec.generate(long_prompt, max_tokens=300, speculative=False, **kw).tokens
        dec.reset()
        dec.generate(first, max_tokens=120, **kw)  # prices every step
        for _ in range(3):
            dec.generate(first, max_tokens=8, **kw)
        late = dec.generate(long_prompt, max_tokens=300, **kw)
        dec.reset()
        for _ in range(3):
            dec.generate(first, max_tokens=120, **kw)
        early = dec.generate(long_prompt, max_tokens=300, **kw)
    assert late.tokens == plain and early.tokens == plain
    assert 30 <= first_drafted_at(late) <= 160  # (63 here: the read's ~200 ms at ~3 ms a token saved)
    assert first_drafted_at(early) <= 8
