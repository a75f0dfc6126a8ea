"""Whether a draft model's decodes run alongside the target's verification on one device.

Speculative decoding (mode "si") drafts, then verifies: the draft's decodes and the target's never
run at once, and on a GPU where the draft's one-token decode is bound by its kernel launches the
drafting is a fixed toll on every step. DSI (mode "dsi") drafts in one thread while a target
server verifies in another; on one GPU the two contexts' decodes go to separate CUDA streams, and
what DSI gains there is what the GPU runs of one while it runs the other. This program measures
that, in interleaved rounds after a warm-up:

  verify  the target decoding --k tokens after a prompt (then rolled back)
  draft   the draft decoding --m tokens one decode at a time after the prompt (then rolled back)
  both    the two at once, from two threads released together: from the first start to the last end

and reports the medians and the hidden share, (verify + draft - both) / min(verify, draft): 1 where
the shorter of the two is hidden entirely, 0 where they take as long as one after the other, below
0 where running them together slows both (on a CPU with fewer cores than the two contexts'
threads; noise in timings of a millisecond or less also moves it outside 0..1).
Each decode copies one row of logits back, as DSI's drafter and servers do.

    python benchmarks/gpu/overlap.py -m target.gguf -d draft.gguf -ngl all --k 4 --m 4 --out overlap.json
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
from pathlib import Path
from typing import Dict, List

import specllama
from specllama.provenance import provenance


class Probe:
    """The two contexts after a common prompt, and the three timings."""

    def __init__(self, target: str, draft: str, ngl: int, k_max: int, m: int, prompt_tokens: int, threads: int):
        self.k, self.m = k_max, m
        self.target = specllama.Model(target, n_gpu_layers=ngl)
        self.draft = specllama.Model(draft, n_gpu_layers=ngl)
        n_ctx = prompt_tokens + max(k_max, m) + 8
        self.tctx = specllama.Context(self.target, n_ctx=n_ctx, n_threads=threads)
        self.dctx = specllama.Context(self.draft, n_ctx=n_ctx, n_threads=threads)
        rng = random.Random(0)
        n_vocab = min(self.target.n_vocab, self.draft.n_vocab)
        self.toks = [rng.randrange(min(300, n_vocab - 1), n_vocab) for _ in range(prompt_tokens + max(k_max, m))]
        self.base = prompt_tokens
        self.tctx.decode(self.toks[:prompt_tokens], all_logits=False)
        self.dctx.decode(self.toks[:prompt_tokens], all_logits=False)

    def verify(self) -> None:
        self.tctx.decode(self.toks[self.base:self.base + self.k], all_logits=False)
        self.tctx.rollback(self.base)

    def drafts(self) -> None:
        for i in range(self.m):
            self.dctx.decode([self.toks[self.base + i]], all_logits=False)
        self.dctx.rollback(self.base)

    @staticmethod
    def alone(fn) -> float:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1000.0

    def both(self) -> float:
        gate = threading.Barrier(2)
        spans: List[tuple] = []
        errors: List[BaseException] = []

        def run(fn) -> None:
            try:
                gate.wait()
                t0 = time.perf_counter()
                fn()
                spans.append((t0, time.perf_counter()))
            except BaseException as e:  # (reported by the caller)
                errors.append(e)

        threads = [threading.Thread(target=run, args=(fn,)) for fn in (self.verify, self.drafts)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return (max(e for _, e in spans) - min(s for s, _ in spans)) * 1000.0


def measure(probe: Probe, k: int, reps: int) -> Dict[str, float]:
    probe.k = k
    probe.verify()  # warm-up: each shape once, and once together
    probe.drafts()
    probe.both()
    times: Dict[str, List[float]] = {"verify": [], "draft": [], "both": []}
    for _ in range(reps):
        times["verify"].append(probe.alone(probe.verify))
        times["draft"].append(probe.alone(probe.drafts))
        times["both"].append(probe.both())
    med = {name: statistics.median(v) for name, v in times.items()}
    shorter = min(med["verify"], med["draft"])
    med["hidden_share"] = (med["verify"] + med["draft"] - med["both"]) / shorter if shorter > 0 else 0.0
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True, help="the target")
    ap.add_argument("-d", "--draft", required=True)
    ap.add_argument("-ngl", "--n-gpu-layers", dest="ngl", default="all", help="a number, or all (both models)")
    ap.add_argument("--k", default="4", help="verification lengths, comma-separated")
    ap.add_argument("--m", type=int, default=4, help="draft decodes, one token each")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("-t", "--threads", type=int, default=0, help="threads per context (0: llama.cpp's default)")
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    ngl = -1 if args.ngl == "all" else int(args.ngl)
    ks = [int(x) for x in args.k.split(",") if x]
    if not ks or min(ks) < 1 or args.m < 1 or args.reps < 1:
        ap.error("--k values, --m and --reps must be >= 1")
    probe = Probe(args.model, args.draft, ngl, max(ks), args.m, args.prompt_tokens, args.threads)
    rows = {}
    print(" k  m   verify ms  draft ms   both ms  hidden share")
    for k in ks:
        med = measure(probe, k, args.reps)
        rows[str(k)] = med
        print(f"{k:2d} {args.m:2d} {med['verify']:11.3f} {med['draft']:9.3f} {med['both']:9.3f} "
              f"{med['hidden_share']:13.2f}")
    if args.out:
        report = {"provenance": provenance({}, args.threads or None), "target": args.model, "draft": args.draft,
                  "ngl": args.ngl, "m": args.m, "reps": args.reps, "median_ms": rows}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
