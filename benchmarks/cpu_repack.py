"""Quantized weights repacked for the CPU's kernels (llama.cpp's CPU_REPACK buffer) against the
weights as stored (SPECLLAMA_NO_REPACK=1), on one machine in one run.

The pair is loaded both ways in one process. Each interleaved round measures, for each load:
what a batch of n tokens costs the target after a 64-token context (the prices of a plain step, a
verification and a prompt), then, per --prompts prompt (chat templated), plain decoding and the
adaptive rule. Reported: the batch costs' medians, decode tokens/s medians, and the medians of
each round's ratios (speculative over plain in each load, repacked over as stored for each way).
Each load's weight buffers (Model.weight_buffers) show what was repacked.

    python benchmarks/cpu_repack.py --pair qwen2.5-coder --rounds 3 -n 96 --out repack.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import specllama
from specllama.bench import PROMPTS
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

LOADS = {"repacked": "0", "as stored": "1"}  # SPECLLAMA_NO_REPACK for each
BATCHES = (1, 2, 3, 4, 5, 6, 8, 11, 16, 128)


def load(setting: str, target: str, draft: str, threads: int):
    """(a Context on the target, its Model, a SpeculativeDecoder on the pair), loaded with
    SPECLLAMA_NO_REPACK=setting"""
    before = os.environ.get("SPECLLAMA_NO_REPACK")
    os.environ["SPECLLAMA_NO_REPACK"] = setting
    try:
        model = specllama.Model(target)
        ctx = specllama.Context(model, n_ctx=512, n_threads=threads)
        return ctx, model, specllama.SpeculativeDecoder(target, draft, n_threads=threads)
    finally:
        if before is None:
            del os.environ["SPECLLAMA_NO_REPACK"]
        else:
            os.environ["SPECLLAMA_NO_REPACK"] = before


def batch_costs(ctx, tokens) -> dict:
    """ms to decode each BATCHES size after a 64-token context"""
    out = {}
    for n in BATCHES:
        ctx.rollback(0)
        ctx.decode(tokens[:64])
        t0 = time.perf_counter()
        ctx.decode(tokens[64:64 + n])
        out[str(n)] = (time.perf_counter() - t0) * 1000
    return out


def run_round(loads, prompts, tokens, n) -> dict:
    rd = {"batch_ms": {}, "tokens_per_second": {}}
    for name, (ctx, _, dec) in loads.items():
        rd["batch_ms"][name] = batch_costs(ctx, tokens)
    for prompt, text in prompts.items():
        row = rd["tokens_per_second"][prompt] = {}
        for name, (_, _, dec) in loads.items():
            chat = dec.chat_tokens([{"role": "user", "content": text}])
            for way, extra in (("plain", dict(speculative=False)), ("adaptive", {})):
                dec.reset()
                row[f"{way}, {name}"] = dec.generate(chat, max_tokens=n, temperature=0, ignore_eos=True,
                                                     **extra).stats.tokens_per_second
    return rd


def summarize(rounds, prompts) -> dict:
    med = statistics.median
    out = {"batch_ms": {name: {k: med(rd["batch_ms"][name][k] for rd in rounds) for k in rounds[0]["batch_ms"][name]}
                        for name in LOADS}}
    for prompt in prompts:
        tps = [rd["tokens_per_second"][prompt] for rd in rounds]
        out[prompt] = {
            "tokens_per_second": {w: med(t[w] for t in tps) for w in tps[0]},
            "adaptive_over_plain": {name: med(t[f"adaptive, {name}"] / t[f"plain, {name}"] for t in tps)
                                    for name in LOADS},
            "repacked_over_as_stored": {way: med(t[f"{way}, repacked"] / t[f"{way}, as stored"] for t in tps)
                                        for way in ("plain", "adaptive")},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("--prompts", default="chat,code", help=f"of {', '.join(PROMPTS)}")
    ap.add_argument("-n", type=int, default=96, help="tokens per generation")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    prompts = {name: PROMPTS[name] for name in args.prompts.split(",")}
    loads = {name: load(setting, target, draft, args.threads) for name, setting in LOADS.items()}
    tokens = loads["repacked"][1].tokenize(" ".join(PROMPTS.values()) * 4)[:64 + max(BATCHES)]
    if len(tokens) < 64 + max(BATCHES):
        raise SystemExit("the prompts tokenize to too few tokens for the batch table")
    rounds = []
    for r in range(args.rounds):
        rd = run_round(loads, prompts, tokens, args.n)
        rounds.append(rd)
        for name in LOADS:
            print(f"round {r + 1} {name} batch ms: " + ", ".join(f"{k} {v:.1f}" for k, v in rd["batch_ms"][name].items()),
                  flush=True)
        for prompt in prompts:
            print(f"round {r + 1} {prompt}: " + ", ".join(f"{w} {v:.2f}" for w, v in rd["tokens_per_second"][prompt].items()),
                  flush=True)
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None), "n": args.n,
              "weight_buffers": {name: {"target": dec.target_model.weight_buffers,
                                        "draft": dec.draft_model.weight_buffers} for name, (_, _, dec) in loads.items()},
              "rounds": rounds, "summary": summarize(rounds, prompts)}
    for name, (_, _, dec) in loads.items():
        dec.close()
    print(json.dumps(report["summary"], indent=1))
    print("weight buffers:", json.dumps(report["weight_buffers"]))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
