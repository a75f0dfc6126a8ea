"""The speculative loop's work on the host per generated token: everything outside llama_decode,
split into choosing the drafted tokens (the draft's sampling, or its top two at T=0), the target's
sampling with the acceptance rule, and the rest (the draft-length rule, lookup, text, bookkeeping).

On a CPU the decodes dwarf it; on a GPU, where a decode of a 7B target takes a few milliseconds,
it is what the GPU waits for. A fixed draft length makes every run do the same drafting work, so
runs and builds compare. Rounds alternate greedy and sampled runs over the prompts; the figures are
medians over rounds.

    python benchmarks/host_work.py --pair qwen2.5-coder --rounds 5 --out host.json
    python benchmarks/host_work.py -m target.gguf -d draft.gguf
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import specllama
from specllama.bench import PROMPTS
from specllama.models import pair_paths
from specllama.provenance import provenance

CHAIN = dict(top_k=40, top_p=0.95, min_p=0.05)  # llama.cpp's default chain


def per_token(runs) -> dict:
    """ms per generated token over the runs' Stats: the host's work and its parts, and the decodes."""
    n = max(1, sum(s.n_generated for s in runs))
    host, draft, accept = (sum(getattr(s, f) for s in runs) for f in ("t_host_ms", "t_draft_sample_ms", "t_accept_ms"))
    return {"host": host / n, "draft_sampling": draft / n, "acceptance": accept / n,
            "rest": (host - draft - accept) / n, "decode": sum(s.t_decode_ms for s in runs) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="qwen2.5-coder")
    ap.add_argument("--target-type", default=None)
    ap.add_argument("-m", "--model")
    ap.add_argument("-d", "--draft")
    ap.add_argument("-n", type=int, default=96, help="tokens per run")
    ap.add_argument("--n-draft", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = (args.model, args.draft) if args.model else pair_paths(args.pair, args.target_type)
    rows = {"greedy": [], "T=0.8": []}
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048, n_threads=args.threads) as dec:
        prompts = [dec.chat_tokens([{"role": "user", "content": text}]) for text in PROMPTS.values()]
        dec.generate(prompts[0], max_tokens=8, temperature=0)  # warm-up
        for k in range(args.rounds):
            for name, temp in (("greedy", 0.0), ("T=0.8", 0.8)):
                figures = []
                for i, prompt in enumerate(prompts):
                    dec.reset()
                    out = dec.generate(prompt, max_tokens=args.n, temperature=temp, seed=k * 100 + i,
                                       n_draft=args.n_draft, adaptive=False, drafter="model", ignore_eos=True,
                                       **CHAIN)
                    figures.append(out.stats)
                total = per_token(figures)
                rows[name].append(total)
                print(f"round {k + 1} {name:6s} host {total['host']:.4f} ms/token (draft sampling "
                      f"{total['draft_sampling']:.4f}, acceptance {total['acceptance']:.4f}, rest "
                      f"{total['rest']:.4f}); decode {total['decode']:.2f}", file=sys.stderr, flush=True)
    medians = {name: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for name, rs in rows.items()}
    for name, m in medians.items():
        print(f"{name:6s} host {m['host']:.4f} ms per generated token: draft sampling {m['draft_sampling']:.4f}, "
              f"acceptance {m['acceptance']:.4f}, rest {m['rest']:.4f} (decodes {m['decode']:.2f})")
    if args.out:
        report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
                  "n": args.n, "n_draft": args.n_draft, "chain": CHAIN, "ms_per_token": medians, "rounds": rows}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
