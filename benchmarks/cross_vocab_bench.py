"""Drafts of another vocabulary on the default pair, in one run: plain decoding, the same-vocabulary
Q4_1 draft, and drafts whose vocabulary differs from the target's:
  renamed    the same draft with one token's text changed: the pairing's own cost (identical weights
             and output layer, every other token shared)
  topN       the draft cut to its first N tokens (specllama draft --vocab-top N): fewer merges, a
             smaller output layer
Each configuration runs the same chat prompts, greedy (or sampled at --temp, each prompt with its own
seed: keyed draws, the default with a seed), rotated over rounds; figures are medians of the rounds'
aggregate tokens/s. With --json the prompts ask for JSON by a schema, which the output must follow
(its grammar, as the server's response_format makes it; generations end where the JSON does).
Also reported: acceptance, and the draft's time per drafted token (renamed against same: what
moving the logits to the target's ids and converting tokens costs), and the pairing's own measured
time (Stats.t_vocab_ms) as a share of the generation time after the prompt.

    python benchmarks/cross_vocab_bench.py [--rounds 3] [-n 128] [--top 32768,24576] [--temp 0.8] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

import gguf

import specllama
from specllama import schemas
from specllama.models import default_pair
from specllama.provenance import provenance
from specllama.vocab_trim import rewrite_gguf, trim_vocab

PROMPTS = ["Write a short story about a robot who learns to paint.", "Explain how a bicycle works.",
           "List five facts about the moon.", "What is the capital of France and why is it famous?"]
JSON_PROMPTS = ["Describe the moon as JSON: its name and five facts.", "Describe a bicycle as JSON: its name and "
                "five facts about how it works.", "Describe Paris as JSON: its name and five facts.",
                "Describe a robot who paints as JSON: its name and five facts about it."]
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"},
                                           "facts": {"type": "array", "items": {"type": "string"}, "maxItems": 5}},
          "required": ["name", "facts"]}


def renamed_copy(src: str, dst: str) -> None:
    """src with the text of its last token changed (no tensor changes)."""
    def change(name, value):
        return list(value[:-1]) + [value[-1] + "\u2603"] if name == "tokenizer.ggml.tokens" else value

    rewrite_gguf(gguf.GGUFReader(src), dst, change)


def run(dec, prompts, n, speculative, temp, grammar=None):
    gen = dec_tokens = 0
    secs = draft_ms = vocab_ms = 0.0
    drafted = accepted = 0
    for i, p in enumerate(prompts):
        sampling = dict(temperature=temp, seed=i + 1) if temp > 0 else dict(temperature=0)
        shape = dict(grammar=grammar) if grammar else dict(ignore_eos=True)
        r = dec.generate(p, max_tokens=n, speculative=speculative, **sampling, **shape)
        s = r.stats
        gen += s.n_generated
        secs += (s.t_total_ms - s.t_prefill_ms) / 1000
        draft_ms += s.t_draft_ms
        vocab_ms += s.t_vocab_ms
        drafted += s.n_drafted
        accepted += s.n_accepted
        dec_tokens += len(r.tokens)
    return {"tps": gen / secs, "drafted": drafted, "accepted": accepted, "draft_ms": draft_ms,
            "vocab_ms": vocab_ms, "loop_ms": secs * 1000}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=128, help="tokens per prompt")
    ap.add_argument("--top", default="32768,24576", help="vocabulary sizes of the cut drafts")
    ap.add_argument("--temp", type=float, default=0.0, help="sampling temperature (0: greedy)")
    ap.add_argument("--json", action="store_true", help="prompts that ask for JSON, with a schema's grammar")
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the report as JSON here")
    args = ap.parse_args()

    target, draft = default_pair()
    tmp = Path(tempfile.mkdtemp(prefix="specllama-xvocab-"))
    drafts = {"same": draft}
    renamed_copy(draft, str(tmp / "renamed.gguf"))
    drafts["renamed"] = str(tmp / "renamed.gguf")
    for n in [int(x) for x in args.top.split(",") if x]:
        trim_vocab(draft, str(tmp / f"top{n}.gguf"), n)
        drafts[f"top{n}"] = str(tmp / f"top{n}.gguf")

    decoders = {name: specllama.SpeculativeDecoder(target, path, n_ctx=2048, n_threads=args.threads)
                for name, path in drafts.items()}
    prompts = [decoders["same"].chat_tokens([{"role": "user", "content": p}])
               for p in (JSON_PROMPTS if args.json else PROMPTS)]
    grammar = schemas.to_grammar(SCHEMA) if args.json else None
    configs = ["plain"] + list(drafts)
    rounds = {c: [] for c in configs}
    for r in range(args.rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for c in order:
            dec = decoders["same" if c == "plain" else c]
            res = run(dec, prompts, args.n, c != "plain", args.temp, grammar)
            rounds[c].append(res)
            print(f"round {r + 1} {c:10s} {res['tps']:6.1f} tok/s", file=sys.stderr, flush=True)
    report = {"target": Path(target).name, "draft": Path(draft).name, "n": args.n, "rounds": args.rounds,
              "temperature": args.temp, "json": args.json,
              "provenance": provenance({"target": target, "draft": draft}, args.threads or None),
              "configs": {}}
    plain = statistics.median(x["tps"] for x in rounds["plain"])
    print(f"{'draft':10s} {'tok/s':>7s} {'vs plain':>9s} {'acceptance':>11s} {'draft ms/token':>15s} {'shared':>8s} "
          f"{'pairing':>8s}")
    for c in configs:
        tps = statistics.median(x["tps"] for x in rounds[c])
        dr = sum(x["drafted"] for x in rounds[c])
        ac = sum(x["accepted"] for x in rounds[c])
        ms = sum(x["draft_ms"] for x in rounds[c])
        vocab_share = sum(x["vocab_ms"] for x in rounds[c]) / sum(x["loop_ms"] for x in rounds[c])
        cv = decoders[c].cross_vocab if c in decoders and c != "same" else None
        shared = f"{cv['target_share']:.0%}" if cv else ("-" if c == "plain" else "100%")
        row = {"tps": tps, "vs_plain": tps / plain, "acceptance": ac / dr if dr else None,
               "draft_ms_per_token": ms / dr if dr else None, "target_share": cv["target_share"] if cv else None,
               "vocab_share_of_time": vocab_share}
        report["configs"][c] = row
        acc = f"{row['acceptance']:.3f}" if dr else "-"
        dms = f"{row['draft_ms_per_token']:.2f}" if dr else "-"
        print(f"{c:10s} {tps:7.1f} {tps / plain:8.2f}x {acc:>11s} {dms:>15s} {shared:>8s} {vocab_share:8.2%}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))
    for d in decoders.values():
        d.close()


if __name__ == "__main__":
    main()
