"""A new decoder's first generation against a decoder that has generated before, greedy, in
interleaved rounds: what a one-shot `specllama generate` pays for the adaptive rule's learning,
and what an adaptive memory (specllama.adaptive_memory) saves of it.

Each round runs every --prompts prompt (chat templated) five ways: plain decoding, a fixed draft
length and the adaptive rule on one decoder that generated every prompt once before the first round
("warm"), the adaptive rule on a decoder made for that generation alone ("new"; its loading is
not timed), and the same on a new decoder that resumes an adaptive memory ("resumed"), as one
`specllama generate` after another does: a decoder with that memory generated every prompt once
before the first round, and each resumed decoder writes what it learned back when it closes.
Reported per prompt: decode tokens/s medians over the rounds and the median of each round's ratio
to plain decoding, and the new decoders' steps as compare.py's step and kept patterns (one
character a step: the model's drafts, + for ten or more, p a plain step of a paused draft, P its
probe, and under it the drafts kept), so that where a new decoder's first steps go is seen.

With --busy N a sixth way runs a new decoder whose prompt pass meets a busy spell: N processes
spinning on the CPU from just before the generation until its first step ends (its prompt pass and
first token), as where another program is busy for a moment, or where the weights are read from
disk at their first use; --busy-steps K makes the spell last until its K-th step ends (the steps
that price plain decoding, then the first drafting steps). Its prompt's time is reported beside the
quiet new decoder's.

    python benchmarks/cold_start.py --pair qwen2.5-coder --target-type q8_0 --rounds 3 -n 96 --out cold.json
    python benchmarks/cold_start.py --pair qwen2.5-coder --target-type f16 --rounds 3 -n 64 --busy 4
    python benchmarks/cold_start.py --pair qwen2.5-coder --target-type f16 --prompts code -n 96 --busy 2 --busy-steps 6
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import specllama
from compare import kept_pattern, step_pattern
from specllama.bench import PROMPTS
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance


@contextlib.contextmanager
def busy_spell(n):
    """n processes spinning on the CPU; yields a function that stops them (they stop on leaving, too)"""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]

    def stop():
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        procs.clear()

    try:
        yield stop
    finally:
        stop()


def new_decoder_run(target, draft, tokens, kw, args, busy=0, memory=False):
    """a new decoder's first generation's Stats; busy: processes spinning until its args.busy_steps-th
    step ends; memory: its adaptive memory's file"""
    with specllama.SpeculativeDecoder(target, draft, n_threads=args.threads, adaptive_memory=memory) as new:
        with busy_spell(busy) as stop:
            steps = []

            def on_step(*_):
                steps.append(1)
                if len(steps) >= args.busy_steps:
                    stop()
                return False
            return new.generate(tokens, record_steps=True, on_step=on_step if busy else None, **kw).stats


def run_round(warm, target, draft, prompts, args) -> dict:
    """{prompt: {way: tokens/s}}, {prompt: the new decoders' step and kept patterns} and {prompt: {way:
    prompt ms}}"""
    kw = dict(max_tokens=args.n, temperature=0, ignore_eos=True)
    ways = {"plain": dict(speculative=False), f"fixed {args.fixed}": dict(n_draft=args.fixed, adaptive=False),
            "adaptive, warm": {}}
    tps, steps, prompt_ms = {}, {}, {}
    for name, text in prompts.items():
        tokens = warm.chat_tokens([{"role": "user", "content": text}])
        row = {}
        for way, extra in ways.items():
            warm.reset()
            row[way] = warm.generate(tokens, **kw, **extra).stats.tokens_per_second
        news = {"adaptive, new decoder": (0, False), "adaptive, resumed": (0, args.memory)}
        if args.busy:
            news[f"adaptive, new decoder, {args.busy} busy"] = (args.busy, False)
        steps[name], prompt_ms[name] = {}, {}
        for way, (busy, memory) in news.items():
            s = new_decoder_run(target, draft, tokens, kw, args, busy, memory)
            row[way] = s.tokens_per_second
            steps[name][way] = {"steps": step_pattern(s.steps), "kept": kept_pattern(s.steps)}
            prompt_ms[name][way] = s.t_prefill_ms
        tps[name] = row
    return tps, steps, prompt_ms


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("--prompts", default="chat,code", help=f"of {', '.join(PROMPTS)}")
    ap.add_argument("-n", type=int, default=96, help="tokens per generation")
    ap.add_argument("--fixed", type=int, default=3, help="the fixed draft length run beside the rule")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, metavar="N",
                    help="also a new decoder whose prompt pass runs beside N processes spinning on the CPU")
    ap.add_argument("--busy-steps", type=int, default=1, metavar="K",
                    help="with --busy: the spell lasts until the new decoder's K-th step ends (1: its prompt pass)")
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    prompts = {name: PROMPTS[name] for name in args.prompts.split(",")}
    memory_dir = tempfile.TemporaryDirectory(prefix="specllama-cold-start-")
    args.memory = Path(memory_dir.name) / "memory.json"
    with specllama.SpeculativeDecoder(target, draft, n_threads=args.threads, adaptive_memory=args.memory) as first:
        for text in prompts.values():  # (the run before the resumed ones: it writes the memory on closing)
            first.generate(first.chat_tokens([{"role": "user", "content": text}]), max_tokens=args.n,
                           temperature=0, ignore_eos=True)
    rounds = []
    with specllama.SpeculativeDecoder(target, draft, n_threads=args.threads) as warm:
        for text in prompts.values():  # (the warm decoder's rule learns from one generation of each)
            warm.generate(warm.chat_tokens([{"role": "user", "content": text}]), max_tokens=args.n, temperature=0,
                          ignore_eos=True)
        for r in range(args.rounds):
            tps, steps, prompt_ms = run_round(warm, target, draft, prompts, args)
            rounds.append({"tokens_per_second": tps, "new_decoder_steps": steps, "new_decoder_prompt_ms": prompt_ms})
            for name in prompts:
                print(f"round {r + 1} {name}: " + ", ".join(f"{w} {v:.2f}" for w, v in tps[name].items()), flush=True)
                for way, pattern in steps[name].items():
                    print(f"  {way}: prompt {prompt_ms[name][way]:.0f} ms", flush=True)
                    print(f"    steps: {pattern['steps']}", flush=True)
                    print(f"    kept:  {pattern['kept']}", flush=True)
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
              "n": args.n, "fixed": args.fixed, "busy": args.busy, "busy_steps": args.busy_steps,
              "rounds": rounds, "summary": {}}
    for name in prompts:
        ways = rounds[0]["tokens_per_second"][name]
        report["summary"][name] = {
            w: {"tokens_per_second": statistics.median(rd["tokens_per_second"][name][w] for rd in rounds),
                "vs_plain": statistics.median(rd["tokens_per_second"][name][w] / rd["tokens_per_second"][name]["plain"]
                                              for rd in rounds)} for w in ways}
        print(f"{name}: " + ", ".join(f"{w} {v['tokens_per_second']:.2f} ({v['vs_plain']:.2f}x)"
                                      for w, v in report["summary"][name].items()))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
