"""Time to first token with speculation on and off, on one decoder, in interleaved rounds.

A stream's first token comes from the generation's first step, which drafts nothing. Speculation
can still delay it by whatever runs before that step: the draft model's own pass over the prompt.
Each round runs a short chat prompt and a long one (a source file of this repository, cut to
--long-tokens tokens, as an editor or an agent sends) with speculation on (the decoder's defaults,
greedy) and off, the order alternating from round to round, each from an empty cache
(reset()). Reported per prompt: the medians over rounds of the time to the first reported token
and of the decode tokens/s after it, and the median of the rounds' ratios, speculative over plain.

With --mode dsi the speculative runs are DSI's (--sp target servers), whose target servers and
draft split the decoder's threads while they run.

    python benchmarks/first_token.py --pair qwen2.5-coder --target-type f16 --fixed-draft 4 --rounds 3
    python benchmarks/first_token.py --pair qwen2.5-coder --target-type f16 --mode dsi --sp 2 --rounds 2
    python benchmarks/first_token.py -m target.gguf -d draft.gguf -ngl all
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import specllama
from specllama.models import add_pair_options, pair_from_options
from specllama.provenance import provenance

HERE = Path(__file__).resolve().parent
SHORT = "Write a Python function that reverses a string, with a docstring."
LONG_SOURCE = HERE.parent / "specllama" / "cli.py"


def one_run(dec, prompt, n, speculative, fixed, dsi=None):
    """(ms to the first reported token, decode tokens/s after it, tokens the draft model drafted);
    dsi: the speculative run's DSI options, else SI"""
    dec.reset()
    first = []
    t0 = time.perf_counter()

    def on_step(*_):
        if not first:
            first.append(time.perf_counter())
        return False

    kw = dict(n_draft=fixed, adaptive=False) if fixed else {}
    if dsi and speculative:
        kw = dict(mode="dsi", **dsi, **(dict(lookahead=fixed) if fixed else {}))
    r = dec.generate(prompt, max_tokens=n, temperature=0, ignore_eos=True, speculative=speculative, on_step=on_step,
                     **kw)
    end = time.perf_counter()
    s = r.stats
    drafted = r.dsi.n_drafted if r.dsi is not None else s.n_drafted - s.n_lookup_drafted
    return (first[0] - t0) * 1000.0, (s.n_generated - 1) / max(1e-9, end - first[0]), drafted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_pair_options(ap, "qwen2.5-coder")
    ap.add_argument("-ngl", "--n-gpu-layers", dest="ngl", default=None,
                    help="both models' layers to offload (all; default: as the decoder places them)")
    ap.add_argument("-n", type=int, default=128,
                    help="tokens per run (the adaptive rule leaves the draft model out of generations too short "
                         "to win back its prompt pass)")
    ap.add_argument("--fixed-draft", type=int, default=0, metavar="N",
                    help="draft N tokens every step instead of the adaptive rule's lengths (which may leave the "
                         "draft model out where it does not pay)")
    ap.add_argument("--long-tokens", type=int, default=1024, help="the long prompt's length in tokens")
    ap.add_argument("--mode", choices=("si", "dsi"), default="si", help="the speculative runs' mode")
    ap.add_argument("--sp", type=int, default=2, help="DSI's target servers (--mode dsi)")
    ap.add_argument("--no-share-prefill", action="store_true",
                    help="no copies of keys and values between the decoder's contexts (as where a model is "
                         "offloaded to a GPU): the draft, and DSI's servers, process the prompt themselves")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=0)
    ap.add_argument("--out", help="write the report as JSON here")
    args = ap.parse_args()
    target, draft = pair_from_options(args)
    placement = {}
    if args.ngl is not None:
        ngl = -1 if args.ngl == "all" else int(args.ngl)
        placement = dict(n_gpu_layers=ngl, n_gpu_layers_draft=ngl)
    runs = {}
    if args.no_share_prefill:
        placement["share_prefill"] = False
    with specllama.SpeculativeDecoder(target, draft, n_ctx=args.long_tokens + args.n + 256, n_threads=args.threads,
                                      **placement) as dec:
        code = dec.tokenize(LONG_SOURCE.read_text(encoding="utf-8"), add_special=False)[:args.long_tokens]
        prompts = {"short chat": dec.chat_tokens([{"role": "user", "content": SHORT}]), "long code": code}
        dsi = dict(sp=args.sp) if args.mode == "dsi" else None
        one_run(dec, prompts["short chat"], 4, True, args.fixed_draft, dsi)  # (first uses: buffers, pages mapped)
        for r in range(args.rounds):
            for name, prompt in prompts.items():
                for spec in ((True, False) if r % 2 == 0 else (False, True)):
                    runs.setdefault((name, spec), []).append(one_run(dec, prompt, args.n, spec, args.fixed_draft,
                                                                     dsi))
    report = {"provenance": provenance({"target": target, "draft": draft}, args.threads or None),
              "n": args.n, "fixed_draft": args.fixed_draft, "mode": args.mode, "rounds": args.rounds,
              "share_prefill": not args.no_share_prefill, "results": {}}
    if dsi:
        report["sp"] = args.sp
    lengths = (f"fixed {args.fixed_draft}-token drafts" if args.fixed_draft and not dsi
               else f"lookahead {args.fixed_draft}" if args.fixed_draft else "the default draft lengths")
    print(f"{args.rounds} rounds, {args.n} tokens per run, greedy, "
          f"{f'DSI with {args.sp} target servers, ' if dsi else ''}{lengths}")
    print("prompt      tokens  first token ms: speculative  plain  ratio   tokens/s after it: speculative  plain  "
          "model drafts")
    for name, prompt in prompts.items():
        on, off = runs[(name, True)], runs[(name, False)]
        res = {"prompt_tokens": len(prompt),
               "first_token_ms": {"speculative": statistics.median(x[0] for x in on),
                                  "plain": statistics.median(x[0] for x in off)},
               "first_token_ratio": statistics.median(a[0] / b[0] for a, b in zip(on, off)),
               "tokens_per_second": {"speculative": statistics.median(x[1] for x in on),
                                     "plain": statistics.median(x[1] for x in off)},
               "model_drafted": statistics.median(x[2] for x in on),
               "rounds": {"speculative": on, "plain": off}}
        report["results"][name] = res
        ft, tps = res["first_token_ms"], res["tokens_per_second"]
        print(f"{name:11s} {len(prompt):6d}  {ft['speculative']:25.0f} {ft['plain']:6.0f} "
              f"{res['first_token_ratio']:5.2f}x  {tps['speculative']:29.1f} {tps['plain']:6.1f}  "
              f"{res['model_drafted']:12.0f}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
