"""Where a greedy target's token stands among the draft's choices: at each position of the target's
greedy answers, the rank of the target's token in the draft's logits for the same prefix (0: the
draft's first choice, which a chain of drafts keeps; 1: its second; ...).

A chain of drafts is kept up to the first position where the target's token is not the draft's
first choice. The share at rank 1 is what verifying the draft's second choice beside each draft
(a leaf of a token tree, one more verified token per draft) would keep besides; with those shares
as independent per-position chances, the report gives the expected tokens per step of a chain of
g drafts and of the same chain with those leaves (tokens_per_step).

The answers are the target's own: its chat template, its plain greedy decoding, then one pass of
the draft over prompt and answer.

It also reports, per prompt, how often the draft's first choice is the target's over the prompt's
own text (both models reading it, each position foretelling the next), beside the same share over
the answer: whether a pass over the prompt, which both models make before any drafting, could tell
what share of drafts a generation will keep.

    python benchmarks/draft_top_choices.py --pair qwen2.5-coder -n 128 --out top_choices.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import specllama
from specllama.bench import PROMPTS, expected_tokens_per_step
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

MAX_RANK = 4  # ranks 0..3, then "4 or worse"


def answers(dec, prompts, n) -> list:
    """(prompt tokens, greedy answer tokens) per prompt: dec's target decoding plainly, one token a
    decode (speculation's batched verifications can round a near-tie the other way)."""
    out = []
    for p in prompts:
        toks = dec.chat_tokens([{"role": "user", "content": p}])
        r = dec.generate(toks, max_tokens=n, temperature=0.0, ignore_eos=True, speculative=False)
        out.append((list(toks), list(r.tokens)))
    return out


def _same_vocab(dec, why: str) -> None:
    if dec.cross_vocab is not None:
        raise SystemExit(f"draft_top_choices.py: the draft's vocabulary is not the target's: {why}")


def _rows(model, prompt, answer) -> np.ndarray:
    full = list(prompt) + list(answer)
    return np.asarray(specllama.Context(model, n_ctx=len(full)).decode(full, all_logits=True))


def logit_rows(model, pairs) -> list:
    """Per (prompt, answer): model's logits at every position of prompt + answer, from one pass."""
    return [_rows(model, prompt, answer) for prompt, answer in pairs]


def ranks(dec, pairs, draft_rows=None) -> np.ndarray:
    """The rank of each answer token in the logits of dec's draft over the same prefix (draft_rows:
    logit_rows(dec.draft_model, pairs), where the caller has them)."""
    _same_vocab(dec, "its ranks of the target's tokens mean nothing")
    found = []
    for (prompt, answer), rows in zip(pairs, draft_rows or logit_rows(dec.draft_model, pairs)):
        for row, tok in zip(rows[len(prompt) - 1: -1], answer):
            found.append(min(MAX_RANK, int((row > row[tok]).sum())))
    return np.asarray(found)


def prompt_agreement(dec, pairs, draft_rows=None) -> list:
    """Per (prompt, answer): the share of the prompt's positions (each foretelling the next prompt
    token) where the draft's first choice is the target's, and the same share over the answer's
    positions (each foretelling the next answer token from prompt and answer so far); None for a
    part without positions (a one-token prompt, an empty answer). draft_rows as for ranks()."""
    _same_vocab(dec, "its first choices are not the target's tokens")
    out = []
    draft_rows = draft_rows or logit_rows(dec.draft_model, pairs)
    for (prompt, answer), d_rows in zip(pairs, draft_rows):
        same = np.argmax(_rows(dec.target_model, prompt, answer), axis=1) == np.argmax(d_rows, axis=1)
        n = len(prompt)
        out.append(tuple(float(part.mean()) if part.size else None for part in (same[: n - 1], same[n - 1: -1])))
    return out


def tokens_per_step(a1: float, a2: float, g: int) -> float:
    """Expected tokens per step at independent per-position chances: a1 the draft's first choice is
    the target's token, a2 its second is. A chain of g drafts stops at the first miss (Leviathan et
    al.'s expectation); with the second choice verified beside each draft, a miss on the first
    choice that the second catches keeps the leaf as well: one token more wherever the chain reaches
    such a miss."""
    return expected_tokens_per_step(a1, g) + a2 * sum(a1 ** j for j in range(g))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-n", type=int, default=128, help="tokens per answer")
    ap.add_argument("--prompts", type=int, default=len(PROMPTS), help="how many of specllama.bench's prompts")
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    with specllama.SpeculativeDecoder(target, draft, n_ctx=2048) as dec:
        pairs = answers(dec, list(PROMPTS.values())[: args.prompts], args.n)
        draft_rows = logit_rows(dec.draft_model, pairs)  # (one pass of the draft for both)
        r = ranks(dec, pairs, draft_rows)
        agreement = prompt_agreement(dec, pairs, draft_rows)
    share = [float((r == k).mean()) for k in range(MAX_RANK + 1)]
    a1, a2 = share[0], share[1]
    report = {"provenance": provenance({"target": target, "draft": draft}), "positions": int(r.size),
              "rank_share": share,
              "second_given_first_missed": a2 / (1 - a1) if a1 < 1 else None,
              "tokens_per_step": {g: {"chain": tokens_per_step(a1, 0.0, g), "with_second": tokens_per_step(a1, a2, g)}
                                  for g in (2, 3, 4, 6, 8)},
              "first_choice_agreement": {name: {"prompt": a[0], "answer": a[1]}
                                         for name, a in zip(list(PROMPTS)[: args.prompts], agreement)}}
    print(f"{r.size} positions; the target's token is the draft's choice "
          + ", ".join(f"#{k + 1}: {s:.3f}" for k, s in enumerate(share[:MAX_RANK])) + f", worse: {share[MAX_RANK]:.3f}")
    if a1 < 1:
        print(f"where the first choice missed, the second was the target's token {a2 / (1 - a1):.2f}")
    for g, t in report["tokens_per_step"].items():
        print(f"  g={g}: chain {t['chain']:.2f} tokens per step, with second choices verified {t['with_second']:.2f} "
              f"({t['with_second'] / t['chain']:.2f}x)")
    print("the draft's first choice is the target's, over the prompt's own text / over the answer:")
    for name, a in report["first_choice_agreement"].items():
        print(f"  {name}: " + " / ".join("-" if x is None else f"{x:.2f}" for x in (a["prompt"], a["answer"])))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
