"""Speculative decoding on a recurrent (Mamba) target: what rollback by checkpoint costs, and
speculative against plain decoding, in one run.

No recurrent model is available from a package registry here, so the pair is built: a Mamba
target of Mamba-130M's shape (width 768, inner 1536, state 16, 24 layers; the tiny test
vocabulary), random weights, whose last layers barely change the residual stream, and as its
draft the target's first layers alone (so the two agree often, as a real pair does). Both Q4_1.

Reported:
  checkpoint_ms    saving the state's recurrent part (before each verification with drafts)
  restore_ms[k]    going back to it and decoding k kept tokens again (k = 0: the restore alone)
  plain, fixed n_draft and adaptive: tokens/s after the prompt (vs plain: the median of each
                   round's ratio to plain decoding in the same round), acceptance, rollback time per
                   step, and the prompt's time (both models'; a paused draft skips it) per
                   generation (one decoder for every round, so the adaptive rule has learned
                   what drafting earns here)
  fresh:           plain and adaptive on a new decoder each time, on one prompt (what one
                   `specllama generate` pays, the adaptive rule's first steps included)

With --checkpoint-memory host,device the checkpoint costs and every speculative configuration
are measured once per place the checkpoints are kept (llama.cpp's host-memory copy, or its
on-device flag), each on its own decoder, in the same rounds.

    python benchmarks/recurrent_bench.py [-n 128] [--rounds 3] [-ngl -1] [--checkpoint-memory host,device]
                                         [--out report.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from tiny_models import mamba_weights, vocab, write_mamba  # noqa: E402

import specllama  # noqa: E402
from specllama.provenance import provenance  # noqa: E402

SHAPE = dict(n_embd=768, d_inner=1536, d_state=16, d_conv=4, dt_rank=48)
PROMPTS = ["the cat is on the", "she was out with a", "what some of the", "they have one word for"]


def build(d: Path, n_base: int, n_layer: int):
    toks = vocab()
    w = mamba_weights(len(toks), seed=21, n_layer=n_layer, **SHAPE)
    for i in range(n_base, n_layer):  # the later layers barely change the residual stream
        w[f"blk.{i}.ssm_out.weight"] *= 0.05
    base = {k: v for k, v in w.items() if not k.startswith("blk.") or int(k.split(".")[1]) < n_base}
    paths = {}
    for name, weights in (("target", w), ("draft", base)):
        f32 = write_mamba(d / f"{name}.f32.gguf", toks, weights, d_state=SHAPE["d_state"], d_conv=SHAPE["d_conv"],
                          dt_rank=SHAPE["dt_rank"])
        paths[name] = str(d / f"{name}.q4_1.gguf")
        specllama.quantize(str(f32), paths[name], "q4_1")
        f32.unlink()
    return paths


def rollback_costs(path: str, ngl: int, memory: str, repeats: int = 20) -> dict:
    m = specllama.Model(path, n_gpu_layers=ngl)
    ctx = specllama.Context(m, n_ctx=512, checkpoint_memory=memory)
    prompt = m.tokenize(" ".join(PROMPTS))
    ctx.decode(prompt, all_logits=False)
    n = ctx.n_past
    ck, restore = [], {k: [] for k in range(5)}
    for _ in range(repeats):
        for k in range(5):
            t = time.perf_counter()
            ctx.checkpoint()
            ck.append((time.perf_counter() - t) * 1000)
            ctx.decode([100, 101, 102, 103, 104, 105])
            t = time.perf_counter()
            ctx.rollback(n + k)
            restore[k].append((time.perf_counter() - t) * 1000)
            ctx.rollback(n)
    return {"checkpoint_ms": statistics.median(ck), "restore_ms": {k: statistics.median(v) for k, v in restore.items()}}


def run_fresh(paths, n, load, **kw):
    with specllama.SpeculativeDecoder(paths["target"], paths["draft"], n_ctx=1024, **load) as dec:
        s = dec.generate(PROMPTS[0], max_tokens=n, temperature=0, ignore_eos=True, **kw).stats
    return {"tps": s.n_generated * 1000 / (s.t_total_ms - s.t_prefill_ms), "steps": s.n_steps,
            "prefill_ms": s.t_prefill_ms, "rollback_ms_per_step": s.t_rollback_ms / s.n_steps,
            "acceptance": s.n_accepted / s.n_drafted if s.n_drafted else None}


def run(dec, n, **kw):
    gen = steps = 0
    ms = roll = prefill = 0.0
    drafted = accepted = 0
    for p in PROMPTS:
        dec.reset()
        s = dec.generate(p, max_tokens=n, temperature=0, ignore_eos=True, **kw).stats
        gen += s.n_generated
        steps += s.n_steps
        ms += s.t_total_ms - s.t_prefill_ms
        prefill += s.t_prefill_ms
        roll += s.t_rollback_ms
        drafted += s.n_drafted
        accepted += s.n_accepted
    return {"tps": gen * 1000 / ms, "steps": steps, "prefill_ms": prefill / len(PROMPTS),
            "rollback_ms_per_step": roll / steps,
            "acceptance": accepted / drafted if drafted else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base-layers", type=int, default=4)
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="layers of both models to offload")
    ap.add_argument("--checkpoint-memory", default="auto",
                    help="where checkpoints are kept: auto, host or device, or several, comma-separated")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    memories = args.checkpoint_memory.split(",")
    d = Path(tempfile.mkdtemp(prefix="specllama-mamba-"))
    paths = build(d, args.base_layers, args.layers)
    costs = {}
    for mem in memories:
        costs[mem] = rollback_costs(paths["target"], args.n_gpu_layers, mem)
        print(f"{mem}: checkpoint {costs[mem]['checkpoint_ms']:.2f} ms; restore and decode again k tokens: "
              + ", ".join(f"k={k} {v:.2f} ms" for k, v in costs[mem]["restore_ms"].items()))
    spec = {"n_draft 2": dict(n_draft=2, adaptive=False, drafter="model"),
            "n_draft 4": dict(n_draft=4, adaptive=False, drafter="model"), "adaptive": dict(drafter="model")}
    tag = (lambda c, mem: f"{c} ({mem})") if len(memories) > 1 else (lambda c, mem: c)
    configs = {"plain": (memories[0], dict(speculative=False))}
    for mem in memories:
        configs.update({tag(c, mem): (mem, kw) for c, kw in spec.items()})
    rounds = {c: [] for c in configs}
    decs = {mem: specllama.SpeculativeDecoder(paths["target"], paths["draft"], n_ctx=1024, checkpoint_memory=mem,
                                              n_gpu_layers=args.n_gpu_layers, n_gpu_layers_draft=args.n_gpu_layers)
            for mem in memories}
    try:
        for r in range(args.rounds):
            names = list(configs)
            for c in names[r % len(names):] + names[:r % len(names)]:
                mem, kw = configs[c]
                rounds[c].append(run(decs[mem], args.n, **kw))
                print(f"round {r + 1} {c:24s} {rounds[c][-1]['tps']:7.1f} tok/s", file=sys.stderr, flush=True)
    finally:
        for dec in decs.values():
            dec.close()
    fresh = {"plain, fresh": (memories[0], dict(speculative=False))}
    fresh.update({tag("adaptive, fresh", mem): (mem, dict(drafter="model")) for mem in memories})
    for r in range(args.rounds):
        for c in list(fresh)[r % len(fresh):] + list(fresh)[:r % len(fresh)]:
            mem, kw = fresh[c]
            load = dict(checkpoint_memory=mem, n_gpu_layers=args.n_gpu_layers, n_gpu_layers_draft=args.n_gpu_layers)
            rounds.setdefault(c, []).append(run_fresh(paths, args.n, load, **kw))
            print(f"round {r + 1} {c:24s} {rounds[c][-1]['tps']:7.1f} tok/s", file=sys.stderr, flush=True)
    # "vs plain" pairs each round with plain decoding's in the same round (adjacent in time: a
    # shared machine's speed drifts by more than the differences measured here), then takes the median
    plain = [x["tps"] for x in rounds["plain"]]
    plain_fresh = [x["tps"] for x in rounds["plain, fresh"]]
    report = {"provenance": provenance(paths), "shape": SHAPE, "layers": args.layers, "base_layers": args.base_layers,
              "n": args.n, "rounds": args.rounds, "n_gpu_layers": args.n_gpu_layers,
              **(costs[memories[0]] if len(memories) == 1 else {"rollback_costs": costs}), "configs": {}}
    print(f"{'config':24s} {'tok/s':>7s} {'vs plain':>9s} {'acceptance':>11s} {'rollback ms/step':>17s} "
          f"{'prompt ms':>10s}")
    for c, rs in rounds.items():
        tps = statistics.median(x["tps"] for x in rs)
        base = plain_fresh if "fresh" in c else plain
        vs = statistics.median(x["tps"] / b for x, b in zip(rs, base))
        acc = rs[-1]["acceptance"]
        rb = statistics.median(x["rollback_ms_per_step"] for x in rs)
        pf = statistics.median(x["prefill_ms"] for x in rs)
        report["configs"][c] = {"tps": tps, "vs_plain": vs, "acceptance": acc, "rollback_ms_per_step": rb,
                                "prefill_ms": pf, "rounds_tps": [x["tps"] for x in rs]}
        print(f"{c:24s} {tps:7.1f} {vs:8.2f}x {acc if acc is None else round(acc, 3)!s:>11s} {rb:17.2f} "
              f"{pf:10.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
