"""Questions about long documents, one request each, as a chat client sends them without max_tokens
(the reply may run to the room left in the context): what the draft's read of each new prompt costs
against plain decoding, and whether it is won back.

Each request is a new document (the first --chars characters of one of the repository's docs) and a
question; most questions are answered in a sentence, every --long-every-th asks for a long answer.
Two decoders of the same pair take the same requests in turn, one speculative (adaptive), one plain
(`speculative=False`), so that each processes every prompt itself; the order of the two alternates
request by request. Reported per request: tokens generated, the wall time of each (the prompt's pass
included, and the draft's read of it wherever it comes), their ratio, and the speculative run's step
pattern (compare.py's: `.` a step without the draft model). Greedy.

    python benchmarks/long_prompt.py --pair qwen2.5-coder --target-type f16 --out long_prompt.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import specllama
from compare import step_pattern
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

ROOT = Path(__file__).resolve().parent.parent
SHORT = ["In one sentence: what is this text about?",
         "Which command does this text show first? Answer with the command alone.",
         "In one sentence: who is this text written for?",
         "Name the most important figure in this text, in a few words."]
LONG = "Summarize this text section by section, in detail."


def requests(n: int, chars: int, long_every: int):
    files = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    out = []
    for i in range(n):
        doc = files[i % len(files)].read_text()[:chars]
        question = LONG if long_every and (i + 1) % long_every == 0 else SHORT[i % len(SHORT)]
        out.append((files[i % len(files)].name, question, doc + "\n\n" + question))
    return out


def timed(dec, tokens, n_ctx, **kw):
    t0 = time.perf_counter()
    out = dec.generate(tokens, max_tokens=n_ctx - len(tokens), temperature=0, record_steps=True, **kw)
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-n", "--requests", type=int, default=8)
    ap.add_argument("--chars", type=int, default=6000, help="characters of each document")
    ap.add_argument("--long-every", type=int, default=6, help="every n-th question asks for a long answer (0: none)")
    ap.add_argument("-c", "--ctx-size", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    rows = []
    with specllama.SpeculativeDecoder(target, draft, n_ctx=args.ctx_size, n_threads=args.threads) as spec, \
            specllama.SpeculativeDecoder(target, draft, n_ctx=args.ctx_size, n_threads=args.threads) as plain:
        for dec in (spec, plain):  # (graphs and first allocations)
            dec.generate(dec.chat_tokens([{"role": "user", "content": "Hi"}]), max_tokens=4, temperature=0,
                         speculative=False)
        for i, (name, question, text) in enumerate(requests(args.requests, args.chars, args.long_every)):
            tokens = spec.chat_tokens([{"role": "user", "content": text}])
            runs = {}
            for kind in (("spec", "plain") if i % 2 == 0 else ("plain", "spec")):
                runs[kind] = timed(spec, tokens, args.ctx_size) if kind == "spec" else \
                    timed(plain, tokens, args.ctx_size, speculative=False)
            (t_spec, s), (t_plain, p) = runs["spec"], runs["plain"]
            row = {"document": name, "question": question, "n_prompt": len(tokens),
                   "n_generated": s.stats.n_generated, "plain_s": t_plain, "speculative_s": t_spec,
                   "vs_plain": t_plain / t_spec,
                   "same_text": s.text == p.text, "steps": step_pattern(s.stats.steps)}
            rows.append(row)
            print(f"{i + 1:2d} {name:18s} prompt {len(tokens):5d} gen {row['n_generated']:4d}  "
                  f"plain {t_plain:6.1f} s  speculative {t_spec:6.1f} s ({row['vs_plain']:.2f}x)  {row['steps']}",
                  flush=True)
    total = sum(r["plain_s"] for r in rows) / sum(r["speculative_s"] for r in rows)
    median = statistics.median(r["vs_plain"] for r in rows)
    print(f"all requests: {total:.3f}x plain decoding's time; median request {median:.3f}x")
    if args.out:
        report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
                  "settings": vars(args), "requests": rows, "vs_plain_total": total, "vs_plain_median": median}
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
