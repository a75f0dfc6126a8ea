"""Slots in one process: aggregate tokens/s of N slots (SpeculativeDecoder.slots) generating at once
in N threads, with speculation on (the default: the slots' shared rule prices the merged rounds)
and off (plain steps, merged), in one run, and how many slots' decodes each llama_decode merged.
With --rounds N the two run N times in turn on the same slots: the slots' group prices its merged
rounds in its first requests (one slot drafting one token a step until it has), so a first round includes
what that costs and the later ones show the group's choice once priced, as a server that has been
running a while makes it.

    python benchmarks/slots_bench.py                    # default pair, 1, 2 and 4 slots, greedy
    python benchmarks/slots_bench.py --slots 2,4,8 -n 256 --temp 0.8
    python benchmarks/slots_bench.py -m target.gguf -d draft.gguf --slots 4 -n 128 --temp 0.8 --rounds 2
"""

import argparse
import json
import threading
import time

import specllama
from specllama.models import default_pair
from specllama.provenance import portable_settings, provenance

from serve_bench import PROMPTS  # the same mix of prompts as the server benchmark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", help="target GGUF (default: the default pair)")
    ap.add_argument("-d", "--draft", help="draft GGUF")
    ap.add_argument("--slots", default="1,2,4")
    ap.add_argument("-n", "--n-predict", type=int, default=192)
    ap.add_argument("--requests-per-slot", type=int, default=2)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--rounds", type=int, default=1, help="speculative and plain in turn this many times on the "
                    "same slots")
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = (args.model, args.draft) if args.model else default_pair()
    report = {"provenance": provenance({"target": target, "draft": draft}), "args": portable_settings(vars(args)),
              "runs": []}
    dec = specllama.SpeculativeDecoder(target, draft, n_ctx=1024)
    prompts = [dec.chat_tokens([{"role": "user", "content": p}]) for p in PROMPTS]
    dec.generate(prompts[0], max_tokens=16, temperature=0)  # the weights are touched
    for n in (int(x) for x in args.slots.split(",")):
        slots = dec.slots(n)
        modes = [("speculative", {}), ("plain", {"speculative": False})] * args.rounds
        for k, (name, kw) in enumerate(modes):
            for s in slots:
                s.reset()
            before = slots[0].slot_batching
            stats = []

            def run(i):
                for j in range(args.requests_per_slot):
                    out = slots[i].generate(prompts[(i + j) % len(prompts)], max_tokens=args.n_predict,
                                            temperature=args.temp, seed=i * 100 + j, ignore_eos=True, **kw)
                    stats.append(out.stats)

            threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            after = slots[0].slot_batching
            decodes = after["decodes"] - before["decodes"]
            row = {"slots": n, "mode": name, "round": k // 2 + 1,
                   "tokens_per_s": sum(s.n_generated for s in stats) / wall,
                   "slots_per_decode": (after["chunks"] - before["chunks"]) / max(1, decodes),
                   "drafted": sum(s.n_drafted for s in stats), "accepted": sum(s.n_accepted for s in stats)}
            report["runs"].append(row)
            print(f"{n} slot(s), round {row['round']}, {name:11s}: {row['tokens_per_s']:6.1f} tokens/s, "
                  f"{row['slots_per_decode']:.2f} slots per llama_decode, drafted {row['drafted']}, "
                  f"accepted {row['accepted']}", flush=True)
        for s in slots:
            s.close()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
