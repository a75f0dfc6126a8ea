"""Speculative decoding with the KV cache in other number formats (cache_type_k / cache_type_v, as
llama.cpp's -ctk / -ctv): for each format, plain and speculative decoding of the same chat prompts
on one decoder, so that the speedup is measured against plain decoding with the same cache; the
cache's size per position (the GGUF's footprint, as llama.cpp allocates it); whether greedy
speculative output is the plain output with that cache; and each format's speed against F16's.
Rounds interleave the formats and, within each, plain and speculative runs (the order rotating);
the figures are medians over rounds of tokens per second after the prompt.

    python benchmarks/cache_types.py --pair qwen2.5-coder --target-type f16 --rounds 2 -n 64 --out cache_types.json
    python benchmarks/cache_types.py -m target.gguf -d draft.gguf --formats f16,q8_0,q4_0
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import specllama
from specllama import _core
from specllama.bench import PROMPTS, throughput
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance


def run(dec, prompts, mode: str, n: int):
    """Each prompt once from an empty cache: the Stats and the tokens."""
    stats, tokens = [], []
    for prompt in prompts:
        dec.reset()
        out = dec.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True, speculative=mode == "specllama")
        stats.append(out.stats)
        tokens.append(out.tokens)
    return stats, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("--formats", default="f16,q8_0,q4_0", help="cache formats, keys and values alike (f16 first)")
    ap.add_argument("-n", type=int, default=96, help="tokens per run")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prompts", default=",".join(PROMPTS), help="comma-separated names of specllama.bench's prompts")
    ap.add_argument("-c", "--ctx-size", type=int, default=2048)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    formats = args.formats.split(",")
    decoders = {f: specllama.SpeculativeDecoder(target, draft, n_ctx=args.ctx_size, n_threads=args.threads,
                                                cache_type_k=f, cache_type_v=f, cache_type_k_draft=f,
                                                cache_type_v_draft=f) for f in formats}
    names = args.prompts.split(",")
    prompts = [decoders[formats[0]].chat_tokens([{"role": "user", "content": PROMPTS[n]}]) for n in names]
    speed = {(f, m): [] for f in formats for m in ("plain", "specllama")}
    same, acceptance = {f: True for f in formats}, {f: [] for f in formats}
    for k in range(args.rounds):
        for f in (formats if k % 2 == 0 else formats[::-1]):
            replies = {}
            for mode in (("plain", "specllama") if k % 2 == 0 else ("specllama", "plain")):
                stats, replies[mode] = run(decoders[f], prompts, mode, args.n)
                speed[f, mode].append(throughput(stats))
                if mode == "specllama":
                    acceptance[f].append(sum(s.n_accepted for s in stats) / max(1, sum(s.n_drafted for s in stats)))
            same[f] = same[f] and replies["plain"] == replies["specllama"]
            print(f"round {k + 1} {f:5s} plain {speed[f, 'plain'][-1]:.2f} tokens/s, specllama "
                  f"{speed[f, 'specllama'][-1]:.2f}", file=sys.stderr, flush=True)
    for dec in decoders.values():
        dec.close()
    rows = {}
    base = statistics.median(speed[formats[0], "specllama"])
    for f in formats:
        plain, spec = (statistics.median(speed[f, m]) for m in ("plain", "specllama"))
        kv = {name: _core.model_footprint(path, f, f)["kv_bytes_per_position"] for name, path in
              (("target", target), ("draft", draft))}
        rows[f] = {"plain": plain, "specllama": spec, "speedup": spec / plain, f"vs_{formats[0]}": spec / base,
                   "acceptance": statistics.median(acceptance[f]), "greedy_same_as_plain": same[f],
                   "kv_mib_per_1k_positions": {m: b * 1024 / (1 << 20) for m, b in kv.items()}}
        print(f"{f:5s} plain {plain:.2f} tokens/s, specllama {spec:.2f} ({spec / plain:.2f}x plain, "
              f"{spec / base:.2f}x {formats[0]}'s), acceptance {rows[f]['acceptance']:.3f}, greedy output "
              f"{'the same as' if same[f] else 'NOT the same as'} plain decoding's; cache per 1k positions: "
              f"target {rows[f]['kv_mib_per_1k_positions']['target']:.1f} MiB, draft "
              f"{rows[f]['kv_mib_per_1k_positions']['draft']:.1f} MiB")
    if args.out:
        report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
                  "n": args.n, "rounds": args.rounds, "prompts": names, "formats": rows,
                  "per_round": {f"{f} {m}": v for (f, m), v in speed.items()}}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
