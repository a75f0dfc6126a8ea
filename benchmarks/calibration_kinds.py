"""How the target keeps a pair's drafts greedy and sampled: the share of reached drafts kept, by the
draft's confidence (greedy: 1 - p2/p1 of its two best tokens; sampled: q of the token it drew), for
each kind of generation. The adaptive rule keeps one calibration curve per kind
(draft_length_model::set_sampled); this shows how far the two differ on a real pair.

Fixed draft lengths on one decoder, every prompt greedy and at --temp (the default chain, which is
llama.cpp's; seeded), so that the drafts are the same whatever the machine's speed; a draft is counted where the
target looked at it (every kept one and the first rejected one).

    python benchmarks/calibration_kinds.py --pair qwen2.5-coder --out calibration.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import specllama
from specllama.bench import PROMPTS
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

N_BINS = 10


def calibration(dec, prompts, temperature, n, n_draft, seed) -> dict:
    kept, seen = [0] * N_BINS, [0] * N_BINS
    for prompt in prompts:
        r = dec.generate(prompt, max_tokens=n, temperature=temperature, seed=seed, n_draft=n_draft, adaptive=False,
                         drafter="model", ignore_eos=True, record_steps=True)
        for step in r.stats.steps:
            for i in range(min(step.n_accepted + 1, step.n_model)):
                b = min(N_BINS - 1, int(step.conf[i] * N_BINS))
                kept[b] += i < step.n_accepted
                seen[b] += 1
    return {"kept": sum(kept), "seen": sum(seen), "share": sum(kept) / max(1, sum(seen)),
            "bins": [{"conf_from": b / N_BINS, "kept": kept[b], "seen": seen[b],
                      "share": kept[b] / seen[b] if seen[b] else None} for b in range(N_BINS)]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-n", type=int, default=64, help="tokens per generation")
    ap.add_argument("--n-draft", type=int, default=4)
    ap.add_argument("--temp", type=float, default=0.8, help="the sampled generations' temperature")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=4, help="how many of specllama.bench's prompts")
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    prompts = list(PROMPTS.values())[: args.prompts]
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048) as dec:
        kinds = {"greedy": calibration(dec, prompts, 0.0, args.n, args.n_draft, args.seed),
                 f"T={args.temp}": calibration(dec, prompts, args.temp, args.n, args.n_draft, args.seed)}
    for name, c in kinds.items():
        bins = " ".join(f"{b['conf_from']:.1f}: {b['kept']}/{b['seen']}" for b in c["bins"] if b["seen"])
        print(f"{name:>8}  kept {c['kept']}/{c['seen']} = {c['share']:.2f}   by confidence  {bins}")
    if args.out:
        report = {"provenance": provenance({"target": target, "draft": draft}), "n": args.n, "n_draft": args.n_draft, "prompts": args.prompts,
                  "seed": args.seed, "kinds": kinds}
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
