"""What a verification of k tokens costs, per target number format: the curve that decides whether
speculation can pay on a machine.

A target whose batched verification of k tokens costs little more than one token (memory-bound:
the weights are read once per pass, whatever k) gains from every kept draft; one whose
verification costs nearly k decodes (compute-bound: a small quantized model on few cores) gains
nothing, whatever the draft. This program measures the curve with specllama's own loop: for each
k it generates with a fixed draft length of k - 1 (greedy, the draft model alone), records every
step (GenerateOptions.record_steps) and takes the median time of the verifications of exactly k
tokens, interleaved over --rounds; it also reports the draft's decode and the break-even it
implies: the tokens a step of k must keep on average to beat plain steps.

    python benchmarks/cost_curve.py --pair qwen2.5-coder --target-types q4_k_m,f16 --k 1,2,4,8 --json curve.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import specllama
from specllama.bench import PROMPTS
from specllama.models import DEFAULT_PAIR, pair_paths
from specllama.provenance import provenance


def measure(dec, prompt, ks, n_tokens, rounds):
    verify = defaultdict(list)
    draft = []
    for _ in range(rounds):
        for k in ks:
            dec.reset()
            opts = dict(speculative=False) if k == 1 else dict(n_draft=k - 1, adaptive=False, drafter="model")
            s = dec.generate(prompt, max_tokens=n_tokens, temperature=0, ignore_eos=True, record_steps=True,
                             **opts).stats
            for i, t in enumerate(s.steps):
                if i == 0:
                    continue  # the first step follows the prompt pass
                verify[t.n_drafted + 1].append(t.verify_ms)
                if t.n_model > 1:
                    draft.append((t.draft_ms - t.catch_up_ms) / (t.n_model - 1))
    return ({k: statistics.median(verify[k]) for k in ks if verify[k]},
            statistics.median(draft) if draft else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pair", default=DEFAULT_PAIR)
    ap.add_argument("--target-types", default="", help="comma-separated target types of the pair (default: its default)")
    ap.add_argument("--k", default="1,2,4,8", help="verification batch sizes")
    ap.add_argument("-n", "--n-predict", type=int, default=48, help="tokens per run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",")]
    report = {"curves": {}}
    for tt in [x for x in args.target_types.split(",") if x] or [None]:
        target, draft = pair_paths(args.pair, tt)
        with specllama.SpeculativeDecoder(target, draft, n_ctx=1024, n_threads=args.threads) as dec:
            prompt = dec.chat_tokens([{"role": "user", "content": PROMPTS["code"]}])
            dec.generate(prompt, max_tokens=8, temperature=0)  # page the weights in
            curve, draft_ms = measure(dec, prompt, ks, args.n_predict, args.rounds)
            if "provenance" not in report:  # (hashes the models: once; each curve names its target)
                report["provenance"] = provenance({"target": target, "draft": draft}, args.threads or None)
        v1 = curve.get(1)
        rows = {k: {"verify_ms": ms, "per_token_ms": ms / k,
                    # a step of k (k - 1 drafts, the draft's catch-up counted as one decode) beats
                    # plain steps when it keeps more than this many tokens on average
                    "break_even_tokens": (ms + (k - 1) * draft_ms) / v1 if v1 and draft_ms else None}
                for k, ms in curve.items()}
        name = tt or "default"
        report["curves"][name] = {"target": Path(target).name, "verify": rows, "draft_decode_ms": draft_ms}
        print(f"{name}: draft decode {draft_ms:.1f} ms" if draft_ms else f"{name}:", file=sys.stderr)
        for k, r in rows.items():
            be = f"{r['break_even_tokens']:.2f}" if r["break_even_tokens"] else "-"
            print(f"  k={k:<3} verify {r['verify_ms']:7.1f} ms  ({r['per_token_ms']:6.1f} ms/token)  "
                  f"tokens a step must make to pay: {be}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()
