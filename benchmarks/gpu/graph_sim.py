"""The adaptive draft length on a simulated GPU: decode prices that follow llama.cpp's CUDA graphs,
driving the rule the decoding loop uses (specllama._core.DraftLengthModel, configured as a decoder
on a GPU configures it), through the sequence of generations benchmarks/gpu/shaped_bench.py runs.

The price model: llama.cpp's CUDA backend keeps one recorded graph per context here; a decode shaped
unlike the one before runs without it, the next alike records it (that decode's price plus
--capture-ms), and later alike ones replay it. The target's prices are what verify_shapes.py
measured on an H200 for Qwen2.5-7B's shape (F16; benchmarks/results/gpu_h200_shaped_7dff48a.json):
a replayed decode of k tokens (fixed shape) and one run without its graph (varying shape). The
draft's are parameters: a replayed one-token decode (--draft-ms), one without its graph
(--draft-direct-ms), and a first-use surcharge on its first --cold-calls decodes. Acceptance is
independent per draft at the given rate, and the draft's confidence is drawn at random: it tells
the rule nothing here, where a real draft's near-ties tell it where to stop. Every figure is
tokens per ms against plain decoding on the same prices: no timing is involved, and a seed fixes
the outcome.

    python benchmarks/gpu/graph_sim.py [--acceptance 0.8,0.6] [--draft-ms 1.1,1.7,2.5] [--seeds 6] [--ahead]

--replay RESULTS checks the price model against a GPU: it prices the steps each generation of a
shaped_bench.py results file took (replay_table) and compares them with what they measured.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

from specllama import _core

# verify_shapes.py on an H200 (driver 580.159.04, CUDA 13.0), Qwen2.5-7B's shape in F16, ms for
# k = 1..16 tokens: the same shape every decode (its graph replayed) and a new shape every decode
REPLAYED = [5.862, 7.139, 7.309, 7.350, 7.497, 7.556, 7.574, 7.640, 7.877, 7.884, 7.949, 7.977, 8.017, 8.091,
            8.159, 8.223]
DIRECT = [7.123, 8.553, 8.601, 8.621, 8.757, 8.830, 8.854, 8.957, 9.212, 9.153, 9.184, 9.245, 9.320, 9.295,
          9.357, 9.505]
GRAPH_SETTLE_STEPS = 2  # what a decoder on a GPU gives its rule (decoder_params::settle_steps)
# a plain step of that target where the device samples: plain decoding made 196.7-198.6 tokens/s
# (shaped_bench.py on an H200 at commit cec9678), where the table's one-token decode (verify_shapes.py,
# its logits read back whole) took 5.86 ms
PLAIN_MS_DEVICE_SAMPLING = 5.05


def _target_ms(table, k):
    return table[min(k, 16) - 1] + 0.06 * max(0, k - 16)


class Context:
    """One context's decode prices: a new shape runs directly, the next alike records, then replays."""

    def __init__(self, replayed, direct, capture_ms=1.0, cold_calls=0, cold_ms=0.0):
        self.replayed, self.direct, self.capture_ms = replayed, direct, capture_ms
        self.cold_calls, self.cold_ms = cold_calls, cold_ms
        self.shape, self.alike, self.calls = None, 0, 0

    def decode(self, k: int) -> float:
        self.calls += 1
        self.alike = self.alike + 1 if k == self.shape else 0
        self.shape = k
        ms = (self.direct(k) if self.alike == 0 else self.direct(k) + self.capture_ms if self.alike == 1
              else self.replayed(k))
        return ms + (self.cold_ms if self.calls <= self.cold_calls else 0.0)


def _contexts(draft_ms, draft_direct_ms, plain_ms, capture_ms, cold_calls, cold_ms):
    """The target's and the draft's Context: the target at the table's prices, its one-token decode moved to
    plain_ms where given; the draft's replayed decode draft_ms, without its graph draft_direct_ms."""
    moved = 0.0 if plain_ms is None else plain_ms - REPLAYED[0]
    price = lambda table: lambda k: _target_ms(table, k) + (moved if k == 1 else 0.0)  # noqa: E731
    return (Context(price(REPLAYED), price(DIRECT), capture_ms),
            Context(lambda k: draft_ms + 0.02 * (k - 1), lambda k: draft_direct_ms + 0.05 * (k - 1), capture_ms,
                    cold_calls, cold_ms))


def _catch_up(draft: Context, sat_out: int) -> float:
    """A drafting step's catch-up on the sat_out tokens its draft lacks: token by token up to 4
    (draft_catch_up "auto" on a GPU), else one batch of at most the probe window's 32."""
    return sum(draft.decode(1) for _ in range(sat_out)) if sat_out <= 4 else draft.decode(min(sat_out, 32))


def _read_tokens(sat_out: int) -> int:
    """What a probe's read decodes, as one batch: what the draft sat out but its last token, the last 32 at most."""
    return min(sat_out - 1, 32)


class Loop:
    """The decoding loop's steps on those prices: a catch-up token by token (up to 4, else one
    batch), the rule's draft length, a verification padded as the decoder pads it on a GPU
    ("padded": in each generation to the rule's padded_length + 1, and no more drafts), or to
    n_draft + 1 every step ("full", for comparison), or "exact"; plain steps where the rule pauses.
    fixed: draft that many every step instead (no rule; padded to n_draft + 1 unless exact).
    unpriced: what a padded generation that begins before the rule knows its prices pads for:
    "repad" (as the decoder: the first batch's length, then once they are known what they give),
    "first" (the first batch's length throughout), "n_draft" (n_draft throughout), for comparison.
    warm_up: price the target's steps for the rule before the first generation as a decoder on a
    GPU does on creation (decoder::price_steps: each shape decoded three times, the last priced);
    False: the rule learns every price from the generations' steps.
    plain_ms: the target's replayed one-token decode instead of the table's (its decode without a
    graph moved by as much): a plain step costs less where the device samples and only the token
    comes back (PLAIN_MS_DEVICE_SAMPLING).
    reads: which generations' probes read first (draft_length_model::set_read_probes): "all" (as the
    decoder on a GPU), "greedy" (greedy ones alone), "none" (every probe drafts). A read is one batch of
    the draft over what it sat out (at most the probe window's 32 tokens), each position foretold at
    the acceptance rate."""

    def __init__(self, acceptance, draft_ms=1.1, draft_direct_ms=3.5, n_draft=10, verify_shape="padded",
                 settle=None, cold_calls=0, cold_ms=3.0, capture_ms=1.0, fixed=None, seed=0, unpriced="repad",
                 warm_up=True, plain_ms=None, reads="all"):
        self.rng = random.Random(seed)
        self.acceptance, self.n_draft, self.fixed = acceptance, n_draft, fixed
        self.verify_shape = verify_shape
        self.reads = reads
        self.pad_to = 0
        self.unpriced = unpriced
        self.target, self.draft = _contexts(draft_ms, draft_direct_ms, plain_ms, capture_ms, cold_calls, cold_ms)
        self.rule = _core.DraftLengthModel()
        self.rule.set_settle_steps(GRAPH_SETTLE_STEPS if settle is None else settle)
        self.lengths: list[int] = []
        if warm_up:
            self._price_steps()

    def _price_steps(self) -> None:
        """decoder::warm_up: n_draft + 1 tokens and the draft's one-token shape decoded once, then
        price_steps: the target's verification of the first batch's padded length (or n_draft + 1)
        and two plain steps, each shape steady (its third decode in a row); the draft's decodes are
        priced by the steps."""
        rule, n_batch = self.rule, 0
        if self.verify_shape == "padded" and self.fixed is None:
            n_batch = rule.padded_length(self.n_draft) + 1
        n_batch = n_batch or self.n_draft + 1
        if n_batch != self.n_draft + 1:
            self.target.decode(self.n_draft + 1)
        self.draft.decode(1)
        rule.observe_verify(n_batch, [self.target.decode(n_batch) for _ in range(3)][-1])
        for ms in [self.target.decode(1) for _ in range(4)][-2:]:
            rule.observe_verify(1, ms)

    def _drafting_step(self, n_max, sat_out):
        catch_up, n_single = _catch_up(self.draft, sat_out), sat_out if sat_out <= 4 else 0
        n, p_reach, confs, draft_ms = 0, 1.0, [], catch_up
        while True:
            n += 1
            conf = self.rng.random()
            confs.append(conf)
            if n >= min(self.fixed or n_max, n_max):
                break
            if self.fixed is None:
                more, p_reach = self.rule.keep_drafting(n, conf, p_reach, n_max)
                if not more:
                    break
            draft_ms += self.draft.decode(1)
        kept = 0
        while kept < n and self.rng.random() < self.acceptance:
            kept += 1
        n_verified = max(self.pad_to, n + 1)
        verify_ms = self.target.decode(n_verified)
        return n, kept, confs, catch_up, n_single, draft_ms, verify_ms, n_verified

    def _read(self, sat_out, n_left):
        """A probe's read: the draft decodes what it sat out but the last token (the last 32 at most)
        as one batch, each position foretold at the acceptance rate; whether the probe drafts, the
        read's ms, and what the draft lacks after it (the last token)."""
        n = _read_tokens(sat_out)
        ms = self.draft.decode(n) if n > 0 else 0.0
        foretold = sum(self.rng.random() < self.acceptance for _ in range(n))
        return self.rule.observe_read(n, foretold, ms, n_left), ms, 1

    def _pad(self) -> int:
        """The rule's padded length (n_draft while it is unpriced, where unpriced is "n_draft"), and
        the verifications padded to one more."""
        n = self.rule.padded_length(self.n_draft)
        if self.unpriced == "n_draft" and not self.rule.knows_draft_prices:
            n = self.n_draft
        self.pad_to = n + 1
        self.rule.set_padded(self.pad_to)
        return n

    def generate(self, n_tokens: int, speculative: bool = True, n_prompt: int = 30, sampled: bool = False) -> float:
        """Tokens per ms of one generation (its prompt pass included); sampled: the kind whose
        evidence the rule uses (the decoder's greedy and sampled generations keep theirs apart)."""
        rule = self.rule
        rule.set_sampled(sampled)
        rule.set_read_probes(self.fixed is None and speculative and rule.settle_steps > 0 and
                             (self.reads == "all" or (self.reads == "greedy" and not sampled)))
        total_ms = self.target.decode(n_prompt)
        rule.observe_prompt(n_prompt, total_ms)
        # the draft takes the prompt in before the first step it drafts in, or in a probe's read before it
        # (decoder::prefill, draft_prompt): a generation it sits out entirely never reads it
        unread = n_prompt if speculative else 0
        adaptive_pad = self.verify_shape == "padded" and self.fixed is None
        n_draft = self._pad() if adaptive_pad else self.n_draft
        if not adaptive_pad:
            self.pad_to = 0 if self.verify_shape == "exact" else self.n_draft + 1
            rule.set_padded(self.pad_to)
        # a generation that began before the prices were measured pads again, once, when they are
        repad = adaptive_pad and self.unpriced == "repad" and not rule.knows_draft_prices
        made, prev_n, sat_out, step = 0, -1, 1, 0
        while made < n_tokens:
            if repad and rule.knows_draft_prices:
                repad, n_draft = False, self._pad()
            n_max = min(n_draft, n_tokens - made - 1) if speculative and step > 0 else 0
            pricing = self.fixed is None and rule.pricing(True)
            drafts = n_max > 0 and (self.fixed is not None or (not pricing and rule.model_drafts(True)))
            read_ms = 0.0
            if drafts and rule.read_due:
                drafts, read_ms, sat_out = self._read(sat_out + unread, n_tokens - made)
                unread = 0
            if drafts and unread:
                read_ms = self.draft.decode(unread)
                rule.observe_draft_prompt(unread, read_ms)
                unread = 0
            if drafts:
                n, kept, confs, catch_up, n_single, draft_ms, verify_ms, n_verified = self._drafting_step(n_max, sat_out)
                rule.observe(n, n, kept, confs, -1, catch_up, draft_ms, verify_ms, prev_n,
                             n_catch_up=n_single, n_verified=n_verified)
                sat_out = 1 if kept < n else 2
                tokens, ms, prev_n = kept + 1, read_ms + draft_ms + verify_ms, n
                self.lengths.append(n)
            else:
                verify_ms = self.target.decode(1)
                # (the first step tells the rule a generation began, as the decoder's first step, which
                # takes the prompt's last token, does: prev_n -1, its time the prompt's)
                rule.observe(0, 0, 0, [], -1, 0.0, 0.0, verify_ms, prev_n, n_prompt=n_prompt if step == 0 else 0)
                sat_out += 1
                tokens, ms, prev_n = 1, read_ms + verify_ms, 0
            made += tokens
            total_ms += ms
            step += 1
        return made / total_ms


def bench(acceptance, rounds=2, n_tokens=128, kinds="alternate", **kw) -> float:
    """shaped_bench.py's sequence on one decoder (a short run before each measured one; plain and
    speculative in turn, two temperatures a round): median speculative over median plain. kinds
    "alternate": the rounds' second runs are sampled generations, whose evidence the rule keeps
    apart from the greedy ones' as the decoder does (here at the same acceptance: what learning
    each kind on its own costs); "greedy": every run greedy."""
    loop = Loop(acceptance, **kw)
    plain, spec = [], []
    for i in range(rounds * 2):
        sampled = kinds == "alternate" and i % 2 == 1
        loop.generate(4, speculative=False, sampled=sampled)
        plain.append(loop.generate(n_tokens, speculative=False, sampled=sampled))
        loop.generate(4, sampled=sampled)
        spec.append(loop.generate(n_tokens, sampled=sampled))
    return statistics.median(spec) / statistics.median(plain)


def mean_over_seeds(acceptance, seeds, **kw) -> float:
    return statistics.mean(bench(acceptance, seed=s, **kw) for s in range(seeds))


def first_generation(acceptance, n_tokens=128, seed=0, **kw) -> float:
    """A new decoder's one generation (as `specllama generate` runs one) against plain decoding's."""
    plain = Loop(acceptance, seed=seed, **kw).generate(n_tokens, speculative=False)
    return Loop(acceptance, seed=seed, **kw).generate(n_tokens) / plain


def first_of_each_kind(acceptance, n_tokens=128, seed=0, **kw) -> tuple[float, float]:
    """A decoder's first greedy generation and then its first sampled one, as shaped_bench.py's first round
    runs them (a plain and a short run before each): each one's tokens per ms against plain decoding's."""
    loop, out = Loop(acceptance, seed=seed, **kw), []
    for sampled in (False, True):
        loop.generate(4, speculative=False, sampled=sampled)
        plain = loop.generate(n_tokens, speculative=False, sampled=sampled)
        loop.generate(4, sampled=sampled)
        out.append(loop.generate(n_tokens, sampled=sampled) / plain)
    return out[0], out[1]


def fixed_with_ahead(acceptance, draft_ms, n_draft, ahead, hidden, seed=0, n_tokens=128) -> float:
    """Fixed draft lengths with generate_params::draft_ahead on these prices, against plain decoding:
    the draft's replayed one-token decodes (draft_ms), the target's padded verification of
    n_draft + 1 tokens (replayed). During a verification the draft makes `ahead` decodes (its last
    draft, its guess of the target's token, drafts after the guess); the two together cost
    verify + drafting - hidden * min(verify, drafting), hidden being the share of the shorter that
    running them at once hides (benchmarks/gpu/overlap.py measures it). A step that keeps every
    draft and whose own token is the guess (independent, at the acceptance rate) hands the next
    step ahead - 1 drafts made; the first step is plain."""
    rng = random.Random(seed)
    plain_ms, verify_ms = _target_ms(REPLAYED, 1), _target_ms(REPLAYED, n_draft + 1)
    made, total_ms, ready, unread = 1, plain_ms, 0, 0
    while made < n_tokens:
        n = min(n_draft, n_tokens - made - 1)
        if n <= 0:
            made, total_ms = made + 1, total_ms + plain_ms
            continue
        taken = min(ready, n)
        # the catch-up (the target's last token, and a fully kept step's last draft unless it was
        # read during the verification: unread) and the drafts after it; drafts made ahead need neither
        decodes = n - taken if taken else n + unread
        n_ahead = min(ahead, n_tokens - made - n - 1) if ahead else 0
        a_ms = n_ahead * draft_ms
        total_ms += decodes * draft_ms + verify_ms + a_ms - hidden * min(verify_ms, a_ms)
        kept = 0
        while kept < n and rng.random() < acceptance:
            kept += 1
        full = kept == n
        ready = n_ahead - 1 if n_ahead > 1 and full and rng.random() < acceptance else 0
        unread = 1 if full and n_ahead == 0 else 0
        made += kept + 1
    return n_tokens / total_ms * plain_ms


def _replayed_steps(steps: dict):
    """(mark, n_model, kept, n_verified, measured ms or None) for each step of a measured generation
    (compare.step_summary): from step_ms where it was recorded; else from the patterns, a probe's
    drafts and each step's verification length being the least the generation's verified lengths
    allow (kept -1 where the pattern says more than 9)."""
    per_step = steps.get("step_ms")
    for i, (mark, kept) in enumerate(zip(steps["pattern"], steps["kept"])):
        k = -1 if kept == "+" else 0 if kept == "." else int(kept)
        if per_step:
            n_model, n_verified, *ms = per_step[i]
            yield mark, n_model, k, n_verified, sum(ms)
            continue
        lengths = sorted(steps.get("verified") or [1])
        n_model = 0 if mark in ".prL" else lengths[0] - 1 if mark in "PR" else 10 if mark == "+" else int(mark)
        n_verified = min([n for n in lengths if n > n_model] or [n_model + 1]) if n_model else 1
        yield mark, n_model, k, n_verified, None


def replay(steps: dict, draft_ms: float, plain_ms: float, draft_direct_ms=3.5, capture_ms=1.0, cold_calls=0,
           cold_ms=3.0) -> dict:
    """What this price model says a measured generation's steps cost (compare.step_summary's record
    of them, as shaped_bench.py's results keep it), step by step in the decoding loop's shapes, the
    draft's replayed decode and the plain step at draft_ms and plain_ms (the run's own medians): ms
    by kind of step (plain, drafting, probe: its steps and its read), and the measured ms of each
    kind where step_ms was recorded (else None). Each generation begins after a prompt pass of
    another shape; catch-ups and reads are the loop's (_catch_up, _read_tokens)."""
    target, draft = _contexts(draft_ms, draft_direct_ms, plain_ms, capture_ms, cold_calls, cold_ms)
    target.shape = draft.shape = -1  # (the prompt's pass)
    priced = {"plain": 0.0, "drafting": 0.0, "probe": 0.0}
    measured, sat_out = (dict(priced) if steps.get("step_ms") else None), 1
    for mark, n_model, kept, n_verified, ms in _replayed_steps(steps):
        kind = "probe" if mark in "PRr" else "drafting" if n_model else "plain"
        if measured is not None:
            measured[kind] += ms
        if mark in "Rr":  # (the read)
            priced[kind] += draft.decode(_read_tokens(sat_out)) if sat_out > 1 else 0.0
            sat_out = 1
        if n_model == 0:
            priced[kind] += target.decode(n_verified)
            sat_out += 1
            continue
        x = _catch_up(draft, sat_out) + sum(draft.decode(1) for _ in range(n_model - 1)) + target.decode(n_verified)
        priced[kind] += x
        sat_out = 1 if 0 <= kept < n_model else 2
    return {"priced": priced, "measured": measured}


def replay_table(path: str) -> None:
    """replay() over every speculative generation in one of shaped_bench.py's results files, at the
    run's median draft decode (the file's where the run has none) and plain decoding's step at its
    temperature (the median of its runs' tokens per second): measured ms (its steps' sum,
    step_ms_sum where step_ms was not recorded), priced ms, and their ratio; where step_ms was
    recorded, the ratio for each kind of step too."""
    with open(path) as f:
        results = json.load(f)
    figs = [r for fig in results["acceptances"].values() for runs in fig["runs"].values() for rounds in runs.values()
            for r in rounds if isinstance(r, dict)]
    draft_mss = [r["steps"]["draft_decode_ms"] for r in figs if (r.get("steps") or {}).get("draft_decode_ms")]
    file_draft_ms = statistics.median(draft_mss) if draft_mss else 1.42
    print("acceptance T run round: measured ms, priced ms (plain + drafting + probe), measured / priced")
    for acceptance, fig in results["acceptances"].items():
        for temp, runs in fig["runs"].items():
            plain_ms = 1000.0 / statistics.median(r["decode_tokens_per_second"] for r in runs["plain"])
            for name, rounds in runs.items():
                for i, r in enumerate(rounds):
                    s = r.get("steps") if isinstance(r, dict) else None
                    if not s or "pattern" not in s:
                        continue
                    out = replay(s, s.get("draft_decode_ms") or file_draft_ms, plain_ms)
                    m, p = out["measured"], out["priced"]
                    measured, total = (sum(m.values()) if m else s["step_ms_sum"]), sum(p.values())
                    kinds = "".join(f", {k} {m[k] / p[k]:.3f}" for k in p if m and p[k] > 0)
                    print(f"{acceptance} {temp} {name} {i}: {measured:.1f}, {total:.1f} ({p['plain']:.1f} + "
                          f"{p['drafting']:.1f} + {p['probe']:.1f}), {measured / total:.3f}{kinds}")


def ahead_table(acceptances, draft_mss, seeds, n_draft=4) -> None:
    print(f"fixed n_draft {n_draft}: tokens per ms against plain decoding, mean over seeds; hidden: the share of the "
          "shorter of verification and drafting that running them at once hides")
    print(f"{'acceptance':>10} {'draft ms':>8} {'hidden':>6} {'ahead 0':>8} {'ahead 2':>8} {'ahead 5':>8}")
    for acceptance in acceptances:
        for draft_ms in draft_mss:
            for hidden in (0.0, 0.5, 1.0):
                row = [statistics.mean(fixed_with_ahead(acceptance, draft_ms, n_draft, ahead, hidden, seed=s)
                                       for s in range(seeds)) for ahead in (0, 2, 5)]
                print(f"{acceptance:>10} {draft_ms:>8} {hidden:>6} " + " ".join(f"{x:>8.2f}" for x in row))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acceptance", default="0.8,0.6")
    ap.add_argument("--draft-ms", default="1.1,1.7,2.5", help="the draft's replayed one-token decode, ms "
                    "(1.7: the 0.5B shape's on the H200)")
    ap.add_argument("--draft-direct-ms", type=float, default=3.5, help="the draft's decode without its graph, ms")
    ap.add_argument("--cold-calls", type=int, default=8, help="the draft's first decodes that cost --cold-ms more")
    ap.add_argument("--cold-ms", type=float, default=3.0)
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--kinds", choices=("alternate", "greedy"), default="alternate",
                    help="alternate: greedy and sampled runs in turn, as shaped_bench.py runs them (the rule "
                    "learns each kind apart); greedy: every run greedy")
    ap.add_argument("--ahead", action="store_true", help="fixed lengths with draft_ahead instead (fixed_with_ahead)")
    ap.add_argument("--reads", choices=("all", "greedy", "none"), default="all",
                    help="which generations' probes read first (all: as the decoder on a GPU; none: every probe "
                    "drafts)")
    ap.add_argument("--plain-ms", type=float, default=None,
                    help=f"the target's one-token decode, ms, instead of the table's {REPLAYED[0]} "
                    f"({PLAIN_MS_DEVICE_SAMPLING}: a plain step that samples on the device)")
    ap.add_argument("--replay", metavar="RESULTS", help="price the steps of a shaped_bench.py results file instead "
                    "(replay_table)")
    args = ap.parse_args()
    if args.replay:
        replay_table(args.replay)
        return
    if args.ahead:
        ahead_table([float(a) for a in args.acceptance.split(",")], [float(d) for d in args.draft_ms.split(",")],
                    args.seeds)
        return
    print("tokens per ms against plain decoding, mean over seeds; settle: the rule's settle_steps")
    print(f"{'acceptance':>10} {'draft ms':>8} {'verify':>7} {'settle 0':>8} {'settle 2':>8} {'best fixed':>10}")
    for acceptance in (float(a) for a in args.acceptance.split(",")):
        for draft_ms in (float(d) for d in args.draft_ms.split(",")):
            for shape in ("padded", "full", "exact"):
                kw = dict(draft_ms=draft_ms, draft_direct_ms=args.draft_direct_ms, verify_shape=shape,
                          cold_calls=args.cold_calls, cold_ms=args.cold_ms, kinds=args.kinds, plain_ms=args.plain_ms,
                          reads=args.reads)
                s0 = mean_over_seeds(acceptance, args.seeds, settle=0, **kw)
                s2 = mean_over_seeds(acceptance, args.seeds, settle=2, **kw)
                # a fixed length, verified at its own length (padded to it, or exact)
                fixed = dict(kw, verify_shape="exact" if shape == "exact" else "full")
                best = max((mean_over_seeds(acceptance, args.seeds, fixed=k, **dict(fixed, n_draft=k)), k)
                           for k in range(2, 11))
                print(f"{acceptance:>10} {draft_ms:>8} {shape:>7} {s0:>8.2f} {s2:>8.2f} {best[0]:>7.2f} ({best[1]})")


if __name__ == "__main__":
    main()
