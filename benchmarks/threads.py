"""Tuned thread counts against a fixed count, on an idle machine and on one where other processes keep
cores busy: what the tuner (specllama/_core ThreadTuner, engine/thread_tuner.h) gains and costs.

Two decoders of the same pair: one with n_threads -1 (tuned, at most the physical cores), one with
the physical cores (fixed: the default, and llama.cpp's). Each round runs, for each
decoder in turn (the order alternating), a speculative and a plain (`speculative=False`) generation
of each prompt, greedy; the wall time of each (prompt included) is kept, and medians over rounds are
reported with their ratios. --busy K starts K processes that spin on a core each for the whole run.
--fresh makes both decoders anew every round (a command-line run's first generation; otherwise the
tuner keeps what it measured, as in a server). Greedy outputs of the two decoders are compared,
plain and speculative apart.

    python benchmarks/threads.py --pair smollm2 --busy 1 --out threads_busy.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import specllama
from cold_start import busy_spell
from specllama._core import cpu_cores
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

PROMPTS = {
    "story": "Tell me a story about a lighthouse keeper.",
    "code": "Write a Python function that checks whether a string is a palindrome, with tests.",
}


def run_one(dec, prompt, n, speculative):
    dec.reset()
    t0 = time.perf_counter()
    out = dec.generate(prompt, max_tokens=n, temperature=0, speculative=speculative)
    s = out.stats
    return {"s": time.perf_counter() - t0, "tokens": out.tokens, "n_threads": s.n_threads,
            "n_threads_draft": s.n_threads_draft, "probes": s.n_thread_probes, "tuned": s.threads_tuned}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "smollm2")
    ap.add_argument("-n", type=int, default=128, help="tokens per generation")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="processes kept spinning during the run")
    ap.add_argument("--fresh", action="store_true", help="new decoders every round")
    ap.add_argument("--prompts", default=",".join(PROMPTS), help="of: " + ",".join(PROMPTS))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    physical = cpu_cores()[0]
    configs = {"tuned": -1, "fixed": physical}
    names = args.prompts.split(",")
    runs = {(c, p, m): [] for c in configs for p in names for m in ("spec", "plain")}
    with busy_spell(args.busy):
        decs = {}
        for r in range(args.rounds):
            if args.fresh or not decs:
                for d in decs.values():
                    d.close()
                decs = {c: specllama.SpeculativeDecoder(target, draft, n_threads=t) for c, t in configs.items()}
            order = list(configs) if r % 2 == 0 else list(configs)[::-1]
            for p in names:
                for c in order:
                    prompt = decs[c].chat_tokens([{"role": "user", "content": PROMPTS[p]}])
                    for m in ("spec", "plain") if r % 2 == 0 else ("plain", "spec"):
                        runs[(c, p, m)].append(run_one(decs[c], prompt, args.n, m == "spec"))
                    print(f"round {r + 1} {p} {c}: " + ", ".join(
                        f"{m} {runs[(c, p, m)][-1]['s']:.2f} s" for m in ("spec", "plain")), file=sys.stderr)
        for d in decs.values():
            d.close()
    rows = {}
    for p in names:
        med = {(c, m): statistics.median(x["s"] for x in runs[(c, p, m)]) for c in configs for m in ("spec", "plain")}
        # plain decoding's greedy output is the same on any thread count up to 256 positions; a speculative
        # one can differ from it where a batched verification and a one-token decode round a near-tie
        # apart (docs/how-it-works.md#exactness), and tuned and fixed runs verify in batches of other sizes
        same = {m: all(a["tokens"] == b["tokens"] for a, b in zip(runs[("tuned", p, m)], runs[("fixed", p, m)]))
                for m in ("spec", "plain")}
        last = {c: runs[(c, p, "spec")][-1] for c in configs}
        rows[p] = {
            "median_s": {f"{c} {m}": round(v, 3) for (c, m), v in med.items()},
            "tuned_over_fixed_speed": {m: round(med[("fixed", m)] / med[("tuned", m)], 3) for m in ("spec", "plain")},
            "spec_over_plain_speed": {c: round(med[(c, "plain")] / med[(c, "spec")], 3) for c in configs},
            "tuned_threads_last": {"target": last["tuned"]["n_threads"], "draft": last["tuned"]["n_threads_draft"]},
            "tuned_probes_per_generation": statistics.median(x["probes"] for m in ("spec", "plain")
                                                             for x in runs[("tuned", p, m)]),
            "greedy_outputs_equal": same,
        }
    report = {**provenance({"target": target, "draft": draft}, physical),
              "settings": {"n": args.n, "rounds": args.rounds, "busy": args.busy, "fresh": args.fresh,
                           "physical_cores": physical},
              "prompts": rows}
    for p, row in rows.items():
        print(f"{p}: tuned/fixed speed spec {row['tuned_over_fixed_speed']['spec']:.2f}x plain "
              f"{row['tuned_over_fixed_speed']['plain']:.2f}x; spec/plain tuned {row['spec_over_plain_speed']['tuned']:.2f}x "
              f"fixed {row['spec_over_plain_speed']['fixed']:.2f}x; tuned threads {row['tuned_threads_last']}; "
              f"probes/generation {row['tuned_probes_per_generation']}; tuned and fixed outputs equal "
              f"{row['greedy_outputs_equal']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
