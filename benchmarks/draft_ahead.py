"""Drafting while the target verifies (GenerateOptions.draft_ahead) against the same fixed draft
length without it, on one decoder, in interleaved rounds.

Each round runs every prompt greedy and at T=0.8 (llama.cpp's default chain, seeded) with
draft_ahead 0 and each --ahead value, the order rotating from round to round. Reported per
setting: the median over rounds of the decode tokens/s summed over prompts, its ratio to
draft_ahead 0 in the same round, how many tokens were drafted during verifications and how many
of them became drafts, and whether the greedy text is draft_ahead 0's.

On a CPU llama_decode computes before it returns, so the drafts made during a verification are
made after it: a step that uses them saves their decodes, and one that does not has paid for
them. On a GPU the verification is queued and the draft's decodes run beside it
(benchmarks/gpu/overlap.py measures how far they do there).

    python benchmarks/draft_ahead.py --pair qwen2.5-coder --rounds 3 --ahead 1,3,5 --out ahead.json
    python benchmarks/draft_ahead.py -m target.gguf -d draft.gguf -ngl all
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import specllama
from specllama.bench import PROMPTS
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

CHAIN = dict(top_k=40, top_p=0.95, min_p=0.05)  # llama.cpp's default chain


def run_round(dec, prompts, n, n_draft, order):
    """{(sampling, ahead): (tokens/s summed over prompts, drafted ahead, used, token lists)}"""
    out = {}
    for name, temp in (("greedy", 0.0), ("T=0.8", 0.8)):
        for ahead in order:
            tps, drafted, used, texts = 0.0, 0, 0, []
            for i, prompt in enumerate(prompts):
                dec.reset()
                r = dec.generate(prompt, max_tokens=n, temperature=temp, seed=i, ignore_eos=True, adaptive=False,
                                 n_draft=n_draft, draft_ahead=ahead, drafter="model",
                                 **(CHAIN if temp > 0 else {}))
                s = r.stats
                tps += s.n_generated / max(1e-9, (s.t_total_ms - s.t_prefill_ms) / 1000.0)
                drafted += s.n_ahead_drafted
                used += s.n_ahead_used
                texts.append(r.tokens)
            out[(name, ahead)] = (tps, drafted, used, texts)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-ngl", "--n-gpu-layers", dest="ngl", default="0", help="both models' layers to offload (all)")
    ap.add_argument("-n", type=int, default=64, help="tokens per run")
    ap.add_argument("--n-draft", type=int, default=4)
    ap.add_argument("--ahead", default="1,3,5", help="draft_ahead values to measure beside 0")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    ngl = -1 if args.ngl == "all" else int(args.ngl)
    aheads = [0] + [int(x) for x in args.ahead.split(",") if x]
    rounds = []
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048, n_threads=args.threads, n_gpu_layers=ngl,
                                      n_gpu_layers_draft=ngl) as dec:
        prompts = [dec.chat_tokens([{"role": "user", "content": text}]) for text in PROMPTS.values()]
        for r in range(args.rounds):
            order = aheads[r % len(aheads):] + aheads[:r % len(aheads)]
            rounds.append(run_round(dec, prompts, args.n, args.n_draft, order))
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
              "n": args.n, "n_draft": args.n_draft, "rounds": args.rounds, "prompts": len(PROMPTS), "results": {}}
    print(f"fixed n_draft {args.n_draft}, {len(PROMPTS)} prompts x {args.n} tokens, {args.rounds} rounds")
    print("sampling  ahead  tok/s (sum)  vs ahead 0  drafted ahead  used  greedy text as ahead 0")
    for name in ("greedy", "T=0.8"):
        for ahead in aheads:
            tps = statistics.median(rd[(name, ahead)][0] for rd in rounds)
            ratio = statistics.median(rd[(name, ahead)][0] / rd[(name, 0)][0] for rd in rounds)
            drafted = sum(rd[(name, ahead)][1] for rd in rounds)
            used = sum(rd[(name, ahead)][2] for rd in rounds)
            same = all(rd[(name, ahead)][3] == rd[(name, 0)][3] for rd in rounds) if name == "greedy" else None
            report["results"][f"{name} ahead {ahead}"] = {"tokens_per_second": tps, "ratio": ratio,
                                                          "drafted_ahead": drafted, "used": used, "same_text": same}
            print(f"{name:8s} {ahead:6d} {tps:12.1f} {ratio:11.2f}x {drafted:14d} {used:5d}  "
                  f"{'' if same is None else same}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
