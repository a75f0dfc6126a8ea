"""Probes that read first (Decoder.settle_steps > 0, as on a GPU): while the adaptive rule has paused
the draft, a probe begins with the draft reading what it sat out, and the rule lets it draft only where
what the draft foretold of that text says drafting pays. What a read judges is checked against the
models' own logits (teacher forcing), on both sampling paths; the output stays the target's. Given
prices only: nothing here is timed."""

from __future__ import annotations

import numpy as np
import pytest

import specllama

# a plain step 5.05 ms, a draft decode 1.42, each further token of a verification 2: where the near draft
# keeps about half its drafts here, drafting loses and pauses; a read is priced as one draft decode
PRICES = specllama.StepPrices(draft_ms=1.42, verify_ms=5.05, verify_token_ms=2.0)
CHAIN = dict(temperature=0.8, top_k=8, top_p=1.0, min_p=0.0)
PROMPT = "the cat is"


@pytest.fixture(scope="module")
def pair(tiny):
    """The tiny target and its near draft, in Q4_1."""
    return tiny.target_q, tiny.draft_q


def _generate(dec, **kw):
    dec.reset()
    return dec.generate(PROMPT, max_tokens=160, ignore_eos=True, prices=PRICES, record_steps=True, drafter="model",
                        **kw)


def _reads_of_a_paused_generation(dec, **kw):
    """The second of two generations (the first learns the pause); its probes are reads that the
    rule called off, until the first that read a window alone (the last 32 tokens) or drafted: the
    trace, prompt + tokens, and for each of those reads its step's index and the index in prompt +
    tokens of the step's first token."""
    for _ in range(2):
        r = _generate(dec, **kw)
    full = list(dec.tokenize(PROMPT)) + list(r.tokens)
    reads, n = [], r.stats.n_prompt
    for i, t in enumerate(r.stats.steps):
        if t.n_drafted > 0 or (t.read and t.read_n >= 32):
            break
        if t.read:
            reads.append((i, n))
        n += t.n_accepted + 1
    assert len(reads) >= 2, r.stats.steps  # (the premise: reads at a new text's gaps, called off)
    return r, full, reads


def _draft_rows(path, full, reads):
    """The draft's logits as its reads made them: each read decodes, as one batch, the tokens since
    the last (from the first) up to its step's last token; their batches' lengths change the logits
    of a near-tie here, so the same batches are decoded. Row j follows full[j]."""
    ctx = specllama.Context(specllama.Model(path), n_ctx=512)
    rows, done = {}, 0
    for _, at in reads:
        for j, row in enumerate(ctx.decode(full[done:at - 1], all_logits=True)):
            rows[done + j] = np.asarray(row)
        done = at - 1
    return rows


@pytest.mark.parametrize("device", [True, False], ids=["device", "host"])
def test_a_greedy_read_counts_where_the_drafts_top_token_came_next(pair, device):
    """Each read decodes the tokens the draft lacks but the last, and counts where its top token (what it
    would draft) is the token that came: the draft's own logits, decoded in the same batches, say the same.
    The output is plain decoding's."""
    target, draft = pair
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=2, share_prefill=False) as dec, \
            specllama.SpeculativeDecoder(target, None, n_ctx=512) as plain_dec:
        r, full, reads = _reads_of_a_paused_generation(dec, temperature=0, device_sampling=device)
        plain = plain_dec.generate(PROMPT, max_tokens=160, ignore_eos=True, temperature=0)
    assert r.tokens == plain.tokens
    s = r.stats
    assert s.n_probe_reads == sum(t.read for t in s.steps) >= len(reads)
    assert s.n_probe_reads_off == sum(t.read and t.n_drafted == 0 for t in s.steps)
    rows = _draft_rows(draft, full, reads)
    done = 0
    for i, at in reads:
        t = s.steps[i]
        assert t.read_n == at - 1 - done and t.read_ms == PRICES.draft_ms
        want = sum(int(rows[j - 1].argmax() == full[j]) for j in range(done + 1, at))
        assert t.read_foretold == want, (i, at)
        done = at - 1
    assert sum(s.steps[i].read_foretold for i, _ in reads) > 0  # (a read that foretold nothing proves little)


@pytest.mark.parametrize("device", [True, False], ids=["device", "host"])
def test_a_sampled_read_estimates_the_rejection_rules_acceptance(pair, device):
    """At each token x a plain step drew from the target's p, a read adds min(1, q(x) / p(x)) for the
    draft's q there: its mean over p's draws is sum min(p, q), the chance that the rejection rule keeps a
    draft at that position. The target's p here comes from its own logits, decoded as its plain steps
    decode them (one token each after the prompt); the draft's q as its reads decoded it."""
    target, draft = pair
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=2, share_prefill=False) as dec:
        r, full, reads = _reads_of_a_paused_generation(dec, seed=1, adaptive=True, acceptance="rejection",
                                                       device_sampling=device, **CHAIN)
    s = r.stats
    n_prompt = s.n_prompt
    rows = _draft_rows(draft, full, reads)
    tctx = specllama.Context(specllama.Model(target), n_ctx=512)
    tctx.decode(full[:n_prompt - 1], all_logits=False)
    p_rows = {j: np.asarray(tctx.decode([full[j]], all_logits=False)[-1]) for j in range(n_prompt - 1, reads[-1][1])}
    done = 0
    for i, at in reads:
        t = s.steps[i]
        judged = range(max(done + 1, n_prompt), at)  # (the generated tokens it read: a prompt's has no p)
        assert t.read_n == len(judged)
        want = 0.0
        for j in judged:
            p = specllama.sampling_distribution(p_rows[j - 1], **CHAIN)
            q = specllama.sampling_distribution(rows[j - 1], **CHAIN)
            want += min(1.0, q[full[j]] / p[full[j]])
        assert t.read_foretold == pytest.approx(want, rel=1e-4, abs=1e-6), (i, at)
        done = at - 1
    assert sum(s.steps[i].read_foretold for i, _ in reads) > 0.5


def _pit_pvalue(u):
    """Chi-square test that u (randomized probability integral transforms) is uniform on [0, 1), 20 bins."""
    from scipy import stats

    counts = np.histogram(u, bins=20, range=(0.0, 1.0))[0]
    return stats.chisquare(counts).pvalue


def _pit(p, x, rng):
    """Where token x falls in distribution p, its tokens from the most likely down (ties by id), uniformly
    within x's own mass: uniform on [0, 1) exactly where x was drawn from p, and high where x is a token p
    finds less likely than the draws it makes (as a draft's token unchecked may be)."""
    order = np.lexsort((np.arange(len(p)), -p))
    rank = int(np.nonzero(order == x)[0][0])
    return float(np.sum(p[order[:rank]]) + rng.random() * p[x])


def test_reads_keep_the_output_the_targets_distribution(pair):
    """Over seeded sampled generations whose paused draft reads at their 13th step (at these prices some
    reads call the probe off, some let it draft), the token that step emits is drawn from the target's
    distribution given the text before it: the probability integral transforms of those tokens under that
    distribution (from the target's own logits) are uniform. Negative control: a token drawn from the
    draft's distribution at the same place instead fails the same test."""
    target, draft = pair
    prices = specllama.StepPrices(draft_ms=1.42, verify_ms=5.05, verify_token_ms=1.5)
    kw = dict(drafter="model", adaptive=True, acceptance="rejection", max_tokens=40, ignore_eos=True,
              prices=prices, record_steps=True, **CHAIN)
    rng = np.random.default_rng(0)
    tm, dm = specllama.Model(target), specllama.Model(draft)
    got, control, outcomes = [], [], []
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=2) as dec:
        prompt = list(dec.tokenize(PROMPT))
        for seed in range(2):  # (the rule learns the pause and prices its first probe)
            dec.generate(PROMPT, seed=seed, **kw)
        for seed in range(100, 2600):
            r = dec.generate(PROMPT, seed=seed, **kw)
            at, i = len(prompt), 0
            for i, t in enumerate(r.stats.steps):
                if t.read:
                    break
                at += t.n_accepted + 1
            else:
                continue
            outcomes.append(r.stats.steps[i].n_drafted > 0)
            full = prompt + list(r.tokens)
            rows = [specllama.Context(m, n_ctx=512).decode(full[:at], all_logits=False)[-1] for m in (tm, dm)]
            p, q = (specllama.sampling_distribution(row, **CHAIN).astype(np.float64) for row in rows)
            p, q = p / p.sum(), q / q.sum()
            got.append(_pit(p, full[at], rng))
            control.append(_pit(p, int(rng.choice(len(q), p=q)), rng))
    assert len(got) >= 600 and 0.05 < np.mean(outcomes) < 0.95, (len(got), np.mean(outcomes))
    assert _pit_pvalue(np.array(got)) > 1e-3
    assert _pit_pvalue(np.array(control)) < 1e-3


@pytest.mark.parametrize("kw", [dict(temperature=0), dict(acceptance="rejection", adaptive=True, seed=3, **CHAIN)],
                         ids=["greedy", "rejection"])
def test_probes_read_only_where_their_drafting_steps_are_transitions_and_the_read_can_judge(pair, tiny, kw):
    """Reads stand in for probes where a probe's drafting steps are transitions (settle_steps > 0, as
    on a GPU) and what a read judges is what the step would verify: not with settle_steps 0 (a CPU's
    default), nor under a grammar or logit_bias (the draft's choice there is not its top token), nor for
    sampling verified by another rule than rejection, nor with a draft of another vocabulary, nor in slots
    that share their decodes."""
    target, draft = pair
    for settle, extra, want in [(2, {}, True), (0, {}, False), (2, dict(grammar=r'root ::= [^\x00]*'), False),
                                (2, dict(logit_bias={40: 1.0}), False)] + \
            ([(2, dict(acceptance="match"), False)] if "acceptance" in kw else []):
        with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=settle, share_prefill=False) as dec:
            for _ in range(2):
                r = _generate(dec, **dict(kw, **extra))
        assert (r.stats.n_probe_reads > 0) == want, (settle, extra)
        assert any(t.probe or t.read for t in r.stats.steps), (settle, extra)  # (paused: probes were due)
        if not want:
            assert not any(t.read for t in r.stats.steps)
    with specllama.SpeculativeDecoder(target, tiny.bigger_vocab, n_ctx=512, settle_steps=2) as dec:
        for _ in range(2):
            r = _generate(dec, **kw)
    assert r.stats.n_probe_reads == 0 and any(t.probe for t in r.stats.steps)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=2, share_prefill=False) as dec:
        slot = dec.slots(2)[0]  # (slots share their decodes: a read there is not the draft's alone)
        for _ in range(2):
            r = _generate(slot, **kw)
    assert r.stats.n_probe_reads == 0 and any(t.probe for t in r.stats.steps)


def test_probe_reads_false_makes_every_probe_draft(pair):
    """probe_reads=False (a decoder's setting, sibling()'s too): with settle_steps 2, every probe of
    the paused draft drafts, as where reads never were; a setting of another type is refused."""
    target, draft = pair
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=2, share_prefill=False,
                                      probe_reads=False) as dec:
        assert dec.probe_reads is False
        for _ in range(2):
            r = _generate(dec, temperature=0)
        assert r.stats.n_probe_reads == 0 and any(t.probe for t in r.stats.steps)
        with dec.sibling(probe_reads=True) as sib:
            assert sib.probe_reads
            for _ in range(2):
                r = _generate(sib, temperature=0)
            assert r.stats.n_probe_reads > 0
        with pytest.raises(TypeError, match="probe_reads must be a bool"):
            dec.sibling(probe_reads=1)
    with pytest.raises(TypeError, match="probe_reads must be a bool"):
        specllama.SpeculativeDecoder(target, draft, n_ctx=512, probe_reads="no")


@pytest.mark.parametrize("device", [True, False], ids=["device", "host"])
def test_a_read_judges_at_most_a_batch_of_positions(pair, device):
    """With n_batch 16, fewer than a probe window's 32 tokens: a read decodes what the draft sat out in
    chunks and judges the last 16 positions, the outputs one batch holds; the output is plain decoding's."""
    target, draft = pair
    with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=2, n_batch=16) as dec, \
            specllama.SpeculativeDecoder(target, None, n_ctx=512) as plain_dec:
        for _ in range(2):
            r = _generate(dec, temperature=0, device_sampling=device)
        plain = plain_dec.generate(PROMPT, max_tokens=160, ignore_eos=True, temperature=0)
    assert r.tokens == plain.tokens
    reads = [t.read_n for t in r.stats.steps if t.read]
    assert reads and max(reads) == 16, reads  # (a window's read, cut to the batch)


def test_a_sampled_generation_after_greedy_ones_that_paused_reads_before_it_drafts(pair):
    """Greedy generations pause the draft (at these prices it loses here); the decoder's first sampled
    generation then drafts in no step before a read, its first at the first gap (the 13th step). Negative
    control: with probe_reads=False its first drafting step is its second."""
    target, draft = pair
    for reads in (True, False):
        with specllama.SpeculativeDecoder(target, draft, n_ctx=512, settle_steps=2, share_prefill=False,
                                          probe_reads=reads) as dec:
            for _ in range(2):
                greedy = _generate(dec, temperature=0)
            assert greedy.stats.steps[-1].paused or greedy.stats.steps[-2].paused
            r = _generate(dec, seed=1, adaptive=True, acceptance="rejection", **CHAIN)
        steps = r.stats.steps
        first = next(i for i, t in enumerate(steps) if t.n_drafted > 0 or t.read)
        if reads:
            assert first == 12 and steps[first].read, [(t.n_drafted, t.read) for t in steps[:14]]
        else:
            assert first == 1 and steps[1].n_drafted > 0 and not any(t.read for t in steps)
