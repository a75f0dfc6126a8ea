"""The speculative loop's work on the host per generated token: everything outside llama_decode,
split into choosing the drafted tokens (the draft's sampling, or its top two at T=0), the target's
sampling with the acceptance rule, and the rest (the draft-length rule, lookup, text, bookkeeping).

On a CPU the decodes dwarf it; on a GPU, where a decode of a 7B target takes a few milliseconds,
it is what the GPU waits for. Each run is made twice, with the sampling chain inside llama_decode
(device sampling: only each row's candidates come back) and on the host (whole rows of logits come
back), so the two compare in one run: host work, bytes of logits read back and the time per token
after the prompt. A fixed draft length makes every run do the same drafting work. Rounds alternate
greedy and sampled runs over the prompts, the order of the two samplings rotating; the figures are
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
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

CHAIN = dict(top_k=40, top_p=0.95, min_p=0.05)  # llama.cpp's default chain


def per_token(runs) -> dict:
    """per generated token over the runs' Stats: ms of the host's work and its parts, of the decodes
    and of everything after the prompt, and bytes of logits read back."""
    n = max(1, sum(s.n_generated for s in runs))
    host, draft, accept = (sum(getattr(s, f) for s in runs) for f in ("t_host_ms", "t_draft_sample_ms", "t_accept_ms"))
    return {"host": host / n, "draft_sampling": draft / n, "acceptance": accept / n,
            "rest": (host - draft - accept) / n, "decode": sum(s.t_decode_ms for s in runs) / n,
            "after_prompt": sum(s.t_total_ms - s.t_prefill_ms for s in runs) / n,
            "logits_bytes": sum(s.logits_bytes for s in runs) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-n", type=int, default=96, help="tokens per run")
    ap.add_argument("--n-draft", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    modes = ("device", "host")
    rows = {(name, mode): [] for name in ("greedy", "T=0.8") for mode in modes}
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048, n_threads=args.threads) as dec:
        prompts = [dec.chat_tokens([{"role": "user", "content": text}]) for text in PROMPTS.values()]
        for mode in modes:  # warm-up: each sampling's graphs
            dec.generate(prompts[0], max_tokens=8, temperature=0, device_sampling=mode == "device")
        for k in range(args.rounds):
            for name, temp in (("greedy", 0.0), ("T=0.8", 0.8)):
                for mode in (modes if k % 2 == 0 else modes[::-1]):
                    figures = []
                    for i, prompt in enumerate(prompts):
                        dec.reset()
                        out = dec.generate(prompt, max_tokens=args.n, temperature=temp, seed=k * 100 + i,
                                           n_draft=args.n_draft, adaptive=False, drafter="model", ignore_eos=True,
                                           device_sampling=mode == "device", **CHAIN)
                        assert out.stats.sampling == mode, (out.stats.sampling, out.stats.host_sampling_reason)
                        figures.append(out.stats)
                    total = per_token(figures)
                    rows[name, mode].append(total)
                    print(f"round {k + 1} {name:6s} {mode:6s} host {total['host']:.4f} ms/token (draft sampling "
                          f"{total['draft_sampling']:.4f}, acceptance {total['acceptance']:.4f}, rest "
                          f"{total['rest']:.4f}); decode {total['decode']:.2f}, after the prompt "
                          f"{total['after_prompt']:.2f}; {total['logits_bytes']:.0f} bytes of logits",
                          file=sys.stderr, flush=True)
    medians = {f"{name} {mode}": {key: statistics.median(r[key] for r in rs) for key in rs[0]}
               for (name, mode), rs in rows.items()}
    for key, m in medians.items():
        print(f"{key:13s} host {m['host']:.4f} ms per generated token: draft sampling {m['draft_sampling']:.4f}, "
              f"acceptance {m['acceptance']:.4f}, rest {m['rest']:.4f}; decodes {m['decode']:.2f}, after the "
              f"prompt {m['after_prompt']:.2f}; logits read back {m['logits_bytes']:.0f} bytes")
    for name in ("greedy", "T=0.8"):
        d, h = medians[f"{name} device"], medians[f"{name} host"]
        print(f"{name:6s} device/host: bytes {h['logits_bytes'] / max(d['logits_bytes'], 1):.0f}x fewer, "
              f"time per token after the prompt {d['after_prompt'] / h['after_prompt']:.3f}x")
    if args.out:
        report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
                  "n": args.n, "n_draft": args.n_draft, "chain": CHAIN, "per_token": medians,
                  "rounds": {f"{name} {mode}": r for (name, mode), r in rows.items()}}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
