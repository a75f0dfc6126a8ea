"""Predicted Outputs on code edits: a request that gives the file it asks to edit as its prediction
(GenerateOptions.prediction, the server's `prediction`) against the same request without one, on
one decoder, in interleaved rounds.

Each task is a chat request that asks for a small edit of a Python file and for the whole file
back; the file is also in the prompt, so prompt lookup can copy it too. Settings per task:
plain decoding, the default drafter (draft model and prompt lookup), prompt lookup alone, and
each of the last two with the file as prediction. Each round runs every setting on every task,
the order rotating from round to round. Reported per setting: the median over rounds of the
decode tokens/s summed over tasks, its ratio to plain decoding and to the default drafter in the
same round, the prediction's drafted and kept tokens, and whether the text is plain
decoding's (greedy, or with a seed plain decoding's sample: keyed draws).

    python benchmarks/prediction_bench.py --pair qwen2.5-coder --rounds 3 --out prediction.json
    python benchmarks/prediction_bench.py --pair smollm2 -n 160
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import specllama
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

FILES = {
    "inventory": '''class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, count):
        if count <= 0:
            raise ValueError("count must be positive")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count):
        have = self.items.get(name, 0)
        if count > have:
            raise ValueError(f"only {have} of {name} left")
        self.items[name] = have - count
        if self.items[name] == 0:
            del self.items[name]

    def total(self):
        return sum(self.items.values())
''',
    "parse": '''import csv


def read_rows(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return [row for row in reader]


def summarize(rows, key):
    totals = {}
    for row in rows:
        totals[row[key]] = totals.get(row[key], 0) + float(row["amount"])
    return totals


def main(path):
    rows = read_rows(path)
    for name, amount in sorted(summarize(rows, "category").items()):
        print(f"{name}: {amount:.2f}")
''',
}
EDITS = {
    "inventory": "Rename the method `total` to `count_all`.",
    "parse": "Add a docstring to the function `summarize`.",
}
# (name, speculative, drafter, with the file as prediction)
SETTINGS = [("plain", False, "auto", False), ("default", True, "auto", False), ("lookup", True, "lookup", False),
            ("default+prediction", True, "auto", True), ("lookup+prediction", True, "lookup", True)]


def run_round(dec, tasks, n, temp, order):
    """{setting: (tokens/s summed over tasks, prediction drafted, kept, token lists)}"""
    out = {}
    for name, speculative, drafter, predicted in order:
        tps, drafted, kept, tokens = 0.0, 0, 0, []
        for i, (prompt, source) in enumerate(tasks):
            dec.reset()
            r = dec.generate(prompt, max_tokens=n, temperature=temp, seed=i, speculative=speculative,
                             drafter=drafter, prediction=source if predicted else [])
            s = r.stats
            tps += s.tokens_per_second
            drafted += s.n_prediction_drafted
            kept += s.n_prediction_accepted
            tokens.append(list(r.tokens))
        out[name] = (tps, drafted, kept, tokens)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-ngl", "--n-gpu-layers", dest="ngl", default="0", help="both models' layers to offload (all)")
    ap.add_argument("-n", type=int, default=256, help="tokens per reply at most")
    ap.add_argument("--temp", type=float, default=0.0, help="temperature (seeded where > 0)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    ngl = -1 if args.ngl == "all" else int(args.ngl)
    rounds = []
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048, n_threads=args.threads, n_gpu_layers=ngl,
                                      n_gpu_layers_draft=ngl) as dec:
        tasks = []
        for key, source in FILES.items():
            ask = f"{EDITS[key]} Reply with the whole file in a python code block.\n\n```python\n{source}```"
            tasks.append((dec.chat_tokens([{"role": "user", "content": ask}]), f"```python\n{source}```"))
        for r in range(args.rounds):
            k = r % len(SETTINGS)
            rounds.append(run_round(dec, tasks, args.n, args.temp, SETTINGS[k:] + SETTINGS[:k]))
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
              "n": args.n, "temperature": args.temp, "rounds": args.rounds, "tasks": list(EDITS.values()),
              "results": {}}
    print(f"{len(tasks)} edits x at most {args.n} tokens, T={args.temp}, {args.rounds} rounds")
    print("setting              tok/s (sum)  vs plain  vs default  prediction kept/drafted  text as plain")
    for name, *_ in SETTINGS:
        tps = statistics.median(rd[name][0] for rd in rounds)
        vs_plain = statistics.median(rd[name][0] / rd["plain"][0] for rd in rounds)
        vs_default = statistics.median(rd[name][0] / rd["default"][0] for rd in rounds)
        drafted = sum(rd[name][1] for rd in rounds)
        kept = sum(rd[name][2] for rd in rounds)
        same = all(rd[name][3] == rd["plain"][3] for rd in rounds)  # (seeded: keyed draws, plain's sample)
        report["results"][name] = {"tokens_per_second": tps, "vs_plain": vs_plain, "vs_default": vs_default,
                                   "prediction_drafted": drafted, "prediction_kept": kept, "same_text": same}
        print(f"{name:20s} {tps:11.1f} {vs_plain:8.2f}x {vs_default:10.2f}x {kept:12d}/{drafted:<10d}  "
              f"{same}")
    report["reply_tokens"] = [len(t) for t in rounds[0]["plain"][3]]
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
