"""What a verification batch of k tokens costs on the target, when every batch has the same length
and when the lengths vary from batch to batch as adaptive draft lengths make them.

llama.cpp's CUDA backend records a CUDA graph for a batch's shape and replays it when the next
batch has the same shape; a batch of another length is recorded again. This program measures,
on one context, llama_decode of k tokens followed by a rollback of them, --reps times for each k
in --k: "fixed" runs all repetitions of one k before the next k, "varying" cycles through the k
values. The medians per k, and varying over fixed, say whether draft lengths should be held to a
few sizes (or batches padded) on this machine. Run it again with GGML_CUDA_DISABLE_GRAPHS=1 for
the cost without graphs.

    python benchmarks/gpu/verify_shapes.py -m target.gguf -ngl all --out verify_shapes.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

import specllama
from specllama.provenance import provenance


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-ngl", "--n-gpu-layers", dest="ngl", default="all", help="a number, or all")
    ap.add_argument("--k", default="1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", help="batch lengths")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    ks = [int(x) for x in args.k.split(",") if x]
    model = specllama.Model(args.model, n_gpu_layers=-1 if args.ngl == "all" else int(args.ngl))
    ctx = specllama.Context(model, n_ctx=args.prompt_tokens + max(ks) + 8, n_threads=args.threads)
    rng = random.Random(0)
    toks = [rng.randrange(300, model.n_vocab) for _ in range(args.prompt_tokens + max(ks))]
    ctx.decode(toks[:args.prompt_tokens], all_logits=False)
    base = args.prompt_tokens

    def one(k: int) -> float:
        t0 = time.perf_counter()
        ctx.decode(toks[base:base + k], all_logits=False)
        ms = (time.perf_counter() - t0) * 1000.0
        ctx.rollback(base)
        return ms

    for k in ks:  # warm-up: every shape once
        one(k)
    times = {"fixed": {k: [] for k in ks}, "varying": {k: [] for k in ks}}
    for k in ks:
        for _ in range(args.reps):
            times["fixed"][k].append(one(k))
    for _ in range(args.reps):
        for k in ks:
            times["varying"][k].append(one(k))
    med = {order: {k: statistics.median(v) for k, v in per.items()} for order, per in times.items()}
    print(" k   fixed ms  varying ms  varying/fixed")
    for k in ks:
        print(f"{k:2d} {med['fixed'][k]:9.3f} {med['varying'][k]:11.3f} {med['varying'][k] / med['fixed'][k]:14.2f}")
    if args.out:
        report = {"provenance": provenance({}, args.threads or None), "model": args.model, "ngl": args.ngl,
                  "cuda_graphs": os.environ.get("GGML_CUDA_DISABLE_GRAPHS") != "1", "reps": args.reps,
                  "median_ms": {order: {str(k): v for k, v in m.items()} for order, m in med.items()}}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
