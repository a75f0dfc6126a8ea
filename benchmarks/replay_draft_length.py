"""Draft-length policies compared without the machine's noise: record once, replay exactly.

On this shared machine the same configuration's tokens/s wanders by up to 15% between runs, more
than the differences between draft-length policies that `specllama bench` is asked to resolve
(adaptive within 3% of each prompt's best fixed n_draft). At temperature 0 a speculative run is
determined by two things:

- the trace: for each position of the target's greedy output, whether the draft's greedy token,
  given the correct text before it, is the same token, and how confident the draft was (1 - p2/p1
  for its two most likely tokens, as the drafter computes it); a step drafting from position i is
  accepted up to its first mismatch, so every policy's steps follow from the trace;
- the costs: a draft decode of one token and of two (the catch-up after a fully accepted step
  feeds the last draft and the target's bonus token), and a target batch of 1..n_max+1 tokens.

This program records the trace of each bench prompt (one plain greedy run of the target, one
teacher-forced pass of the draft) and measures the costs (median of interleaved repetitions),
then replays each fixed n_draft and the adaptive rule over the same trace with the same costs. The
adaptive rule is the loop's own (`_core.DraftLengthModel`), fed what the loop feeds it: per-step
draft time over drafts, verification time, and the acceptance of each judged draft. A replay has
no noise: two policies are compared on identical work and identical prices. A clairvoyant rule
that drafts exactly the tokens the target will accept bounds what any draft-length rule can reach
with this draft on this machine.

What it leaves out: the loop's own overhead (under 0.05% in `specllama bench`), and after a
rejected draft the real drafter continues from its own wrong token, whose confidences differ from
the teacher-forced ones used here (they only change how many doomed drafts are made). On a GPU
(`-ngl -1`) it also leaves out that a one-token decode costs less when the one before was one too
(a replayed CUDA graph): the prices are measured with batch sizes interleaved, so plain decoding
is priced too high there and the replayed speedups are not the live ones.

    PYTHONPATH=. python benchmarks/replay_draft_length.py [-n 256] [--held-out] [--json out.json]
    PYTHONPATH=. python benchmarks/replay_draft_length.py --pair qwen2.5-coder --target-type f16 --json f16.json
    PYTHONPATH=. python benchmarks/replay_draft_length.py --replay tests/data/replay_draft_length.json
    PYTHONPATH=. python benchmarks/replay_draft_length.py --replay tests/data/replay_draft_length.json \
        --prices 1.15,1.2,1.15,0.01

The second replays a recorded run's traces and prices through the rule as it is now (seconds, no
models): how a change of the rule would have done on that run's work at that run's prices. The
third replays the same traces at other prices: those above are an H100's for the default pair
(docs/gpu.md: either model's one-token decode about 1.15 ms, launch-bound, so a batch of a dozen
tokens costs little more), where no draft length can pay.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from specllama import _core
from specllama.bench import PROMPTS
from specllama.decoder import SpeculativeDecoder
from specllama.models import pair_paths
from specllama.provenance import provenance


@dataclass
class Trace:
    match: List[bool]  # match[j]: the draft's greedy token for output position j is the target's
    conf: List[float]  # the draft's confidence there, as the drafter computes it: 1 - p2/p1
    top_prob: Optional[List[float]] = None  # p1, the draft's probability of its own token (for comparison)


@dataclass
class Costs:
    draft1_ms: float  # one-token draft decode
    draft2_ms: float  # two-token draft decode (catch-up after a fully accepted step)
    verify_ms: List[float]  # verify_ms[k]: a target batch of k tokens (index 0 unused)

    @property
    def plain_ms(self) -> float:
        return self.verify_ms[1]


def record_trace(target: str, draft: str, prompt: List[int], n_predict: int, n_threads: int, ngl: int = 0) -> Trace:
    with SpeculativeDecoder(target, n_ctx=len(prompt) + n_predict + 8, n_threads=n_threads, n_gpu_layers=ngl) as dec:
        out = dec.generate(prompt, max_tokens=n_predict, temperature=0, speculative=False, ignore_eos=True)
    y = out.tokens
    ctx = _core.Context(_core.Model(draft, ngl), n_ctx=len(prompt) + n_predict + 8, n_threads=n_threads)
    # logits at the last prompt position predict y[0], at the position of y[j-1] predict y[j]
    logits = ctx.decode(list(prompt) + list(y[:-1]), all_logits=True)[len(prompt) - 1:]
    top = logits.argmax(axis=1)
    two = np.partition(logits, -2, axis=1)[:, -2:]  # the two largest logits, smaller first
    conf = 1.0 - np.exp(two[:, 0] - two[:, 1])  # the drafter's greedy confidence: 1 - p2/p1
    p1 = 1.0 / np.exp(logits - two[:, 1:]).sum(axis=1)
    return Trace(match=[bool(t == tok) for t, tok in zip(top, y)], conf=[float(c) for c in conf],
                 top_prob=[float(p) for p in p1])


def by_tenths(match: Sequence[bool], score: Sequence[float]) -> List[tuple]:
    """Positions sorted by score and cut into tenths: (lowest score, positions, acceptance,
    disagreements) for each, lowest first."""
    order = np.argsort(np.asarray(score), kind="stable")
    out = []
    for part in np.array_split(order, 10):
        m = np.asarray(match)[part]
        out.append((float(np.asarray(score)[part].min()), len(part), float(m.mean()), int((~m).sum())))
    return out


def measure_costs(target: str, draft: str, n_max: int, n_threads: int, repeats: int, ngl: int = 0) -> Costs:
    filler = list(range(1000, 1300))  # a context of 300 positions, about where generation runs
    tgt = _core.Context(_core.Model(target, ngl), n_ctx=1024, n_threads=n_threads)
    dft = _core.Context(_core.Model(draft, ngl), n_ctx=1024, n_threads=n_threads)
    tgt.decode(filler, all_logits=False)
    dft.decode(filler, all_logits=False)
    n0 = len(filler)
    samples: Dict[str, List[float]] = {}

    def timed(key: str, ctx, toks: Sequence[int], all_logits: bool) -> None:
        t = time.perf_counter()
        ctx.decode(list(toks), all_logits=all_logits)
        samples.setdefault(key, []).append((time.perf_counter() - t) * 1000.0)
        ctx.rollback(n0)

    for _ in range(repeats):  # interleaved, so that a slow spell of the machine hits every size
        timed("d1", dft, [2000], False)
        timed("d2", dft, [2000, 2001], False)
        for k in range(1, n_max + 2):
            timed(f"v{k}", tgt, range(2000, 2000 + k), True)
    med = {k: statistics.median(v) for k, v in samples.items()}
    return Costs(med["d1"], med["d2"], [0.0] + [med[f"v{k}"] for k in range(1, n_max + 2)])


@dataclass
class Replay:
    ms: float = 0.0
    tokens: int = 0
    steps: int = 0


def _adaptive_length(trace: Trace, i: int, n_cap: int, model) -> int:
    """How many tokens the loop's rule drafts from position i (drafting.cpp: after each drafted
    token it asks whether to draft another; the last one allowed is never asked about)."""
    p_reach = 1.0
    for n in range(1, n_cap):
        more, p_reach = model.keep_drafting(n, trace.conf[i + n - 1], p_reach, n_cap)
        if not more:
            return n
    return n_cap


def _run_of_matches(trace: Trace, i: int, n_cap: int) -> int:
    n = 0
    while n < n_cap and trace.match[i + n]:
        n += 1
    return n


def replay(trace: Trace, costs: Costs, n_max: int, model=None, clairvoyant: bool = False) -> Replay:
    """One generation over trace, drafting at most n_max tokens per step: exactly n_max (fixed);
    as the loop's rule decides when a DraftLengthModel is given (it keeps learning, as the decoder's
    does across generations); or, clairvoyant, exactly the tokens the target will accept, as if the
    rule knew where the draft goes wrong (the bound for any draft-length rule with this draft)."""
    r = Replay()
    n_out = len(trace.match)
    i = 0
    behind = 0  # tokens the draft's next catch-up decodes (the first step's is part of prefill)
    prev_n = -1  # tokens drafted in the step before (-1: it was prefill)
    while i < n_out:
        n_cap = min(n_max, n_out - i - 1)  # the target's own token ends the last step
        if clairvoyant:
            n = _run_of_matches(trace, i, n_cap)
        elif model is not None and n_cap > 0:
            # as the loop plans a step (decoder::plan_step): pricing steps first, then the model
            # drafts where drafting pays, then the rule decides per drafted token
            if not model.pricing(True) and model.model_drafts(True):
                n = _adaptive_length(trace, i, n_cap, model)
            else:
                n = 0
        else:
            n = n_cap
        acc = _run_of_matches(trace, i, n)
        # a catch-up of 3 or more tokens (after plain steps) is priced as 2: no recorded price has them
        catch_up = 0.0 if behind == 0 else (costs.draft1_ms if behind == 1 else costs.draft2_ms)
        draft_ms = (catch_up + (n - 1) * costs.draft1_ms) if n > 0 else 0.0
        verify_ms = costs.verify_ms[n + 1]
        if model is not None:  # the step, reported as the loop reports it (decoder::observe_step)
            model.observe(n_model=n, n=n, n_accepted=acc, conf=list(trace.conf[i:i + n]), probe=-1,
                          catch_up_ms=catch_up if n > 0 else 0.0, draft_ms=draft_ms, verify_ms=verify_ms,
                          prev_n=prev_n)
        r.ms += draft_ms + verify_ms
        r.steps += 1
        r.tokens += acc + 1
        i += acc + 1
        # a fully accepted step leaves the draft two tokens behind (its last draft and the target's
        # token), a rejection one; a step without the model adds the target's token to what it lacks
        behind = (2 if acc == n else 1) if n > 0 else behind + 1
        prev_n = n
    return r


# more prompts, not used anywhere else: held out from every choice made on the bench prompts
HELD_OUT: Dict[str, str] = {
    "story": "Tell me a short story about a lighthouse keeper.",
    "explain": "Explain how a refrigerator works to a ten-year-old.",
    "email": "Write an email asking my landlord to fix the heating.",
    "sql": "Write an SQL query that finds the five customers with the most orders.",
    "facts": "What is the capital of Australia, and why was it chosen?",
    "recipe": "Give me a simple recipe for pancakes.",
    "poem": "Write a poem about autumn rain.",
    "edit": ("Rewrite this function to use a list comprehension: def squares(xs):\n    out = []\n"
             "    for x in xs:\n        out.append(x * x)\n    return out"),
}

BENCH_SWEEP = (4, 6, 8, 10)  # the fixed lengths `specllama bench --sweep-n-draft 4,6,8,10` measures


def replay_round(traces: Dict[str, Trace], costs: Costs, n_draft: int, n_max: int) -> dict:
    """Every fixed n_draft 1..n_max, the adaptive rule (at most n_draft) and the clairvoyant rule
    over each trace at one set of prices: speedups over plain decoding per prompt and on the set.
    The adaptive rule's model is shared across the prompts, in order, as a decoder's is across
    generations; like `specllama bench`, it first learns the costs on 16 tokens of the first."""
    res = {"costs": costs.__dict__, "prompts": {}, "set": {}}
    model = _core.DraftLengthModel()
    first = next(iter(traces.values()))
    replay(Trace(first.match[:16], first.conf[:16]), costs, n_draft, model)
    totals: Dict[str, Replay] = {}
    for name, tr in traces.items():
        runs = {f"fixed_{n}": replay(tr, costs, n) for n in range(1, n_max + 1)}
        runs["adaptive"] = replay(tr, costs, n_draft, model)
        runs["clairvoyant"] = replay(tr, costs, n_draft, clairvoyant=True)
        row = {label: costs.plain_ms * r.tokens / r.ms for label, r in runs.items()}
        row["acceptance_teacher_forced"] = sum(tr.match) / len(tr.match)
        row["adaptive_tokens_per_pass"] = runs["adaptive"].tokens / runs["adaptive"].steps
        best_sweep = max(BENCH_SWEEP, key=lambda n: row[f"fixed_{n}"])
        best_any = max(range(1, n_max + 1), key=lambda n: row[f"fixed_{n}"])
        row["best_fixed_of_sweep"] = best_sweep
        row["best_fixed_of_all"] = best_any
        row["adaptive_vs_best_of_sweep"] = row["adaptive"] / row[f"fixed_{best_sweep}"]
        row["adaptive_vs_best_of_all"] = row["adaptive"] / row[f"fixed_{best_any}"]
        res["prompts"][name] = row
        for label, r in runs.items():
            t = totals.setdefault(label, Replay())
            t.ms += r.ms
            t.tokens += r.tokens
    res["set"] = {label: costs.plain_ms * t.tokens / t.ms for label, t in totals.items()}
    return res


def print_round(k: int, costs: Costs, res: dict, n_max: int, n_draft: int) -> None:
    c = costs
    print(f"\ncosts, round {k + 1}: draft decode {c.draft1_ms:.2f} ms (2 tokens {c.draft2_ms:.2f}); target "
          + ", ".join(f"{n} tokens {c.verify_ms[n]:.1f}" for n in (1, 2, 5, 9, 11) if n < len(c.verify_ms))
          + " ms")
    print(f"{'prompt':>8s} {'accept':>7s} " + " ".join(f"{'fixed ' + str(n):>8s}" for n in BENCH_SWEEP)
          + f" {'best 1-' + str(n_max):>11s} {'adaptive':>9s} {'vs best of sweep':>17s} {'vs best 1-' + str(n_max):>12s}"
          + f" {'clairvoyant':>12s}")
    for name, row in res["prompts"].items():
        bn = row["best_fixed_of_all"]
        print(f"{name:>8s} {row['acceptance_teacher_forced']:7.3f} "
              + " ".join(f"{row[f'fixed_{n}']:7.3f}x" for n in BENCH_SWEEP)
              + f" {row[f'fixed_{bn}']:6.3f}x ({bn:2d})"
              + f" {row['adaptive']:8.3f}x {row['adaptive_vs_best_of_sweep']:17.3f}"
              + f" {row['adaptive_vs_best_of_all']:12.3f} {row['clairvoyant']:11.3f}x")
    st = res["set"]
    best_set = max(BENCH_SWEEP, key=lambda n: st[f"fixed_{n}"])
    print(f"{'set':>8s} {'':7s} " + " ".join(f"{st[f'fixed_{n}']:7.3f}x" for n in BENCH_SWEEP)
          + f" {'':11s} {st['adaptive']:8.3f}x {'':30s} {st['clairvoyant']:11.3f}x")
    print(f"adaptive on the set: {st['adaptive']:.3f}x; the best single fixed n_draft on the set: {best_set}, "
          f"{st[f'fixed_{best_set}']:.3f}x; clairvoyant (at most {n_draft}): {st['clairvoyant']:.3f}x")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--n-predict", type=int, default=256)
    ap.add_argument("--n-max", type=int, default=12, help="fixed n_draft 1..N are replayed")
    ap.add_argument("--n-draft", type=int, default=10, help="the adaptive rule's maximum (specllama's default)")
    ap.add_argument("--held-out", action="store_true", help=f"also the {len(HELD_OUT)} held-out prompts")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0,
                    help="layers of both models on the GPU (-1 = all; a GPU build of llama-cpp-python)")
    ap.add_argument("--cost-repeats", type=int, default=15)
    ap.add_argument("--cost-rounds", type=int, default=3,
                    help="independent cost measurements; each is replayed, to show how much the verdict moves")
    ap.add_argument("--pair", default="smollm2", help="the named pair to record (specllama models lists them)")
    ap.add_argument("--target-type", default=None, help="the pair's target type (e.g. f16 for qwen2.5-coder)")
    ap.add_argument("--json", help="write the traces, costs and results here")
    ap.add_argument("--replay", metavar="JSON",
                    help="replay the traces and prices recorded in an earlier --json file (no measuring)")
    ap.add_argument("--prices", metavar="D1,D2,V1,VTOK",
                    help="with --replay: replay at these prices instead of the recorded ones (ms: a one-token and a "
                         "two-token draft decode, a one-token verification, each further verified token), to ask "
                         "how the rule does on another machine's costs")
    args = ap.parse_args()
    n_max = max(args.n_max, args.n_draft, max(BENCH_SWEEP))

    if args.replay:  # the traces and prices of an earlier run, through this code's rule
        with open(args.replay) as f:
            rec = json.load(f)
        traces = {name: Trace(t["match"], t["conf"], t.get("top_prob")) for name, t in rec["traces"].items()}
        recorded = [Costs(**r["costs"]) for r in rec["rounds"]]
        if args.prices:
            d1, d2, v1, vt = (float(x) for x in args.prices.split(","))
            recorded = [Costs(d1, d2, [0.0] + [v1 + vt * k for k in range(n_max + 2)])]
        n_max = min(n_max, min(len(c.verify_ms) for c in recorded) - 2)
    else:
        target, draft = pair_paths(args.pair, args.target_type)
        texts = dict(PROMPTS, **(HELD_OUT if args.held_out else {}))
        with SpeculativeDecoder(target, n_ctx=512) as dec:
            prompts = {name: dec.chat_tokens([{"role": "user", "content": text}])
                       for name, text in texts.items()}
        print(f"recording traces: {len(prompts)} prompts x {args.n_predict} tokens", file=sys.stderr)
        traces = {name: record_trace(target, draft, p, args.n_predict, args.threads, args.n_gpu_layers)
                  for name, p in prompts.items()}
    # how well each confidence measure tells the draft's mistakes apart
    match = [m for tr in traces.values() for m in tr.match]
    calibration = {}
    for label, key in (("1 - p2/p1 (the drafter's)", "conf"), ("p1", "top_prob")):
        if getattr(next(iter(traces.values())), key) is None:
            continue
        score = [c for tr in traces.values() for c in getattr(tr, key)]
        calibration[key] = by_tenths(match, score)
        print(f"acceptance by tenth of positions ranked by {label}, lowest first "
              f"({len(match)} positions, {match.count(False)} disagreements):")
        print("  " + "  ".join(f"{acc:.3f} ({bad})" for _, _, acc, bad in calibration[key]))
    rounds = []
    n_rounds = len(recorded) if args.replay else args.cost_rounds
    for k in range(n_rounds):
        if args.replay:
            costs = recorded[k]
        else:
            print(f"measuring costs, round {k + 1} of {n_rounds}", file=sys.stderr)
            costs = measure_costs(target, draft, n_max, args.threads, args.cost_repeats, args.n_gpu_layers)
        res = replay_round(traces, costs, args.n_draft, n_max)
        rounds.append(res)
        print_round(k, costs, res, n_max, args.n_draft)
    if args.json:
        # a replay records where its traces and prices came from; a fresh run, this machine and models
        here = (provenance({}, output_options=("--json",)) if args.replay
                else provenance({"target": target, "draft": draft}, args.threads or None, output_options=("--json",)))
        source = rec.get("provenance") if args.replay else here
        out = {"provenance": source, "replayed_with": here if args.replay else None,
               "n_predict": args.n_predict, "n_draft": args.n_draft, "calibration_by_tenths": calibration,
               "traces": {k: v.__dict__ for k, v in traces.items()}, "rounds": rounds}
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
