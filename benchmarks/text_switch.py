"""One decoder across texts, as a server or a session uses it: the adaptive rule's pause, learned on a
text where drafting pays little, against the next texts, where it may pay a lot.

One decoder generates every --prompts prompt (chat templated; greedy, or sampled at --temp, round r
at --seed + r) in turn, round after round, each plainly and then with the adaptive rule, after a
warm-up on the first prompt (as benchmarks/compare.py's sequence). Reported per prompt: the median
over the rounds of each speculative generation's tokens/s after its prompt over the plain one's just
before it, and each generation's steps as compare.py's step pattern (one character a step: the
model's drafts, + for ten or more, P a probe of the paused model, L prompt lookup's drafts alone, p
a step the model sat out paused), and below it the drafts the target kept in each (compare.py's
kept pattern).

Whether the rule pauses on a text depends on this machine's prices at the time (on the 2-core EPYC
the Qwen2.5-Coder pair's drafting made 0.8-1.2x plain steps on the chat prompt): compare two
builds by running this alternately with each on PYTHONPATH, several times.

    python benchmarks/text_switch.py --pair qwen2.5-coder --target-type f16 --rounds 2 -n 96 --out switch.json
    python benchmarks/text_switch.py --pair qwen2.5-coder --target-type f16 --rounds 3 -n 96 --temp 0.8
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import specllama
from compare import QUOTING, kept_pattern, named_prompts, step_pattern
from specllama.bench import PROMPTS
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance


def main() -> None:
    prompts_all = {**PROMPTS, **QUOTING}
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("--prompts", default="chat,code,code-edit", help=f"in turn, of {', '.join(prompts_all)}")
    ap.add_argument("-n", type=int, default=96, help="tokens per generation")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--temp", type=float, default=0.0, help="temperature (0: greedy)")
    ap.add_argument("--seed", type=int, default=0, help="round r samples at seed + r (with --temp)")
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    texts = named_prompts(ap, args.prompts, prompts_all)
    names = list(texts)
    target, draft = pair_from_options(args)
    kw = dict(temperature=args.temp, ignore_eos=True, record_steps=True)
    rounds = []
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048, n_threads=args.threads) as dec:
        tokens = {k: dec.chat_tokens([{"role": "user", "content": text}]) for k, text in texts.items()}
        dec.generate(tokens[names[0]], max_tokens=32, **kw)
        dec.generate(tokens[names[0]], max_tokens=32, speculative=False, **kw)
        for r in range(args.rounds):
            row = {}
            for name in names:
                plain = dec.generate(tokens[name], max_tokens=args.n, speculative=False, seed=args.seed + r,
                                     **kw).stats
                spec = dec.generate(tokens[name], max_tokens=args.n, seed=args.seed + r, **kw).stats
                row[name] = {"plain": plain.tokens_per_second, "speculative": spec.tokens_per_second,
                             "vs_plain": spec.tokens_per_second / plain.tokens_per_second,
                             "paused_steps": spec.n_paused_steps, "steps": step_pattern(spec.steps),
                             "kept": kept_pattern(spec.steps)}
                print(f"round {r + 1} {name:10s} plain {plain.tokens_per_second:5.2f} speculative "
                      f"{spec.tokens_per_second:5.2f} ({row[name]['vs_plain']:.2f}x)  {row[name]['steps']}\n"
                      f"{'kept':>58s}  {row[name]['kept']}", flush=True)
            rounds.append(row)
    summary = {name: statistics.median(rd[name]["vs_plain"] for rd in rounds) for name in names}
    print("speculative over plain, median of rounds: " + ", ".join(f"{k} {v:.2f}x" for k, v in summary.items()))
    if args.out:
        report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
                  "n": args.n, "temperature": args.temp, "seed": args.seed, "prompts": names, "rounds": rounds,
                  "summary": summary}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
