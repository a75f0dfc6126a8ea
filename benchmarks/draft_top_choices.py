"""Where a greedy target's token stands among the draft's choices: at each position of the target's
greedy answers, the rank of the target's token in the draft's logits for the same prefix (0: the
draft's first choice, which a chain of drafts keeps; 1: its second; ...).

A chain of drafts is kept up to the first position where the target's token is not the draft's
first choice. The share at rank 1 is what verifying the draft's second choice beside each draft
(a leaf of a token tree, one more verified token per draft) would keep besides; with those shares
as independent per-position chances, the report gives the expected tokens per step of a chain of
g drafts and of the same chain with those leaves (tokens_per_step).

The answers are the pair's own: the chat template of the target, specllama's greedy generation
(its output is the target's greedy output), then one pass of the draft over prompt and answer.

    python benchmarks/draft_top_choices.py --pair qwen2.5-coder -n 128 --out top_choices.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import llama_cpp
import numpy as np

import specllama
from specllama.bench import PROMPTS
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

MAX_RANK = 4  # ranks 0..3, then "4 or worse"


def answers(target, draft, prompts, n) -> list:
    """(prompt tokens, greedy answer tokens) per prompt."""
    out = []
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048) as dec:
        if dec.cross_vocab is not None:
            raise SystemExit("draft_top_choices.py: the draft's vocabulary is not the target's: its ranks of the "
                             "target's tokens mean nothing")
        for p in prompts:
            toks = dec.chat_tokens([{"role": "user", "content": p}])
            r = dec.generate(toks, max_tokens=n, temperature=0.0, ignore_eos=True)
            out.append((list(toks), list(r.tokens)))
    return out


def ranks(draft_path, pairs) -> np.ndarray:
    """The rank of each answer token in the draft's logits over the same prefix."""
    llm = llama_cpp.Llama(draft_path, n_ctx=2048, logits_all=True, verbose=False)
    found = []
    for prompt, answer in pairs:
        llm.reset()
        llm.eval(prompt + answer)
        rows = np.asarray(llm.scores[len(prompt) - 1: len(prompt) + len(answer) - 1])
        for row, tok in zip(rows, answer):
            found.append(min(MAX_RANK, int((row > row[tok]).sum())))
    return np.asarray(found)


def tokens_per_step(a1: float, a2: float, g: int) -> float:
    """Expected tokens per step at independent per-position chances: a1 the draft's first choice is
    the target's token, a2 its second is. A chain of g drafts stops at the first miss (the target's
    token, one more); with the second choice verified beside each draft, a miss there on the first
    choice that the second catches keeps the leaf and the token the target makes after it."""
    e = sum(a1 ** j * (a2 * (j + 2) + (1 - a1 - a2) * (j + 1)) for j in range(g))
    return e + a1 ** g * (g + 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-n", type=int, default=128, help="tokens per answer")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="how many of specllama.bench's prompts")
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    pairs = answers(target, draft, list(PROMPTS.values())[: args.prompts], args.n)
    r = ranks(draft, pairs)
    share = [float((r == k).mean()) for k in range(MAX_RANK + 1)]
    a1, a2 = share[0], share[1]
    report = {"provenance": provenance({"target": target, "draft": draft}), "target": Path(target).name, "draft": Path(draft).name,
              "positions": int(r.size), "rank_share": share,
              "second_given_first_missed": a2 / (1 - a1) if a1 < 1 else None,
              "tokens_per_step": {g: {"chain": tokens_per_step(a1, 0.0, g), "with_second": tokens_per_step(a1, a2, g)}
                                  for g in (2, 3, 4, 6, 8)}}
    print(f"{r.size} positions; the target's token is the draft's choice "
          + ", ".join(f"#{k + 1}: {s:.3f}" for k, s in enumerate(share[:MAX_RANK])) + f", worse: {share[MAX_RANK]:.3f}")
    print(f"where the first choice missed, the second was the target's token {report['second_given_first_missed']:.2f}")
    for g, t in report["tokens_per_step"].items():
        print(f"  g={g}: chain {t['chain']:.2f} tokens per step, with second choices verified {t['with_second']:.2f} "
              f"({t['with_second'] / t['chain']:.2f}x)")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
