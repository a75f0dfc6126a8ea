"""Quantized drafts: make one with llama.cpp's quantizer, or try several and rank them.

A quantized copy of the target shares its vocabulary by construction; the question is which type
pays: cheaper types decode faster but agree less. Drafts already on disk, of any vocabulary, can be
measured beside them (a draft of another vocabulary drafts the tokens it shares with the target,
so its acceptance says how much that costs). The sweep
measures, for each type, the draft's cost per token relative to the target's (plain decoding on
each alone) and its acceptance rate against the target (greedy speculative decoding on the bench
prompts), and ranks the types by the speedup Leviathan et al.'s formula predicts from the two,
at the best n_draft for each. On a CPU a verification batch of k tokens costs more than one
decode, so the ranking uses the target's measured cost for each batch size, not the formula's
assumption that it costs the same as one token (both predictions are reported). Each draft's
measured speedup is the adaptive loop's tokens/s with it over plain decoding's on the same prompts.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Callable, List, Optional

from . import _core
from .bench import PROMPTS, predicted_speedup, predicted_speedup_measured
from .decoder import SpeculativeDecoder
from .provenance import provenance

MAX_SWEEP_DRAFT = 12

SWEEP_PROMPTS = ["code", "list"]


def make_draft(target: str, output: str, qtype: str, n_threads: int = 0) -> str:
    """Write output as TARGET quantized to qtype; returns output."""
    if os.path.abspath(target) == os.path.abspath(output):
        raise ValueError("the draft must not overwrite its target")
    part = output + ".part"
    try:
        _core.quantize(target, part, qtype, n_threads)
        os.replace(part, output)
    finally:
        if os.path.exists(part):
            os.unlink(part)
    return output


def _ms_per_token(path: str, prompts: List[List[int]], n_predict: int, n_threads: int) -> float:
    with SpeculativeDecoder(path, n_ctx=1024, n_threads=n_threads) as dec:
        steps = 0
        ms = 0.0
        for p in prompts:
            dec.reset()
            s = dec.generate(p, max_tokens=n_predict, temperature=0, ignore_eos=True).stats
            steps += s.n_steps
            ms += s.t_verify_ms
    return ms / steps


def verify_cost_ms(path: str, prompt: List[int], batch_sizes: List[int], n_threads: int = 0,
                   repeats: int = 3) -> dict:
    """Median ms of one llama_decode of k tokens (after prompt), for each k: the price of a
    verification batch of k - 1 drafts."""
    model = _core.Model(path)
    ctx = _core.Context(model, n_ctx=1024, n_threads=n_threads)
    ctx.decode(prompt, all_logits=False)
    n0 = ctx.n_past
    filler = prompt[-1]
    out = {}
    for k in batch_sizes:
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            ctx.decode([filler] * k, all_logits=True)
            times.append((time.perf_counter() - t) * 1000.0)
            ctx.rollback(n0)
        out[k] = statistics.median(times)
    return out


def _tokens_per_second(dec: SpeculativeDecoder, prompts: List[List[int]], n_predict: int, **kw) -> float:
    n = 0
    ms = 0.0
    for p in prompts:
        dec.reset()
        s = dec.generate(p, max_tokens=n_predict, temperature=0, ignore_eos=True, **kw).stats
        n += s.n_generated
        ms += s.t_total_ms - s.t_prefill_ms
    return n * 1000.0 / ms


def sweep_drafts(target: str, types: List[str], out_dir: Path, n_predict: int = 64, n_threads: int = 0,
                 n_draft: int = 4, progress: Optional[Callable[[int], None]] = None,
                 candidates: Optional[List[str]] = None) -> dict:
    """Measure and rank drafts: target quantized to each of types (written to out_dir), then each
    existing draft GGUF in candidates."""
    unknown = [t for t in types if t not in _core.quantize_types()]
    if unknown:
        raise ValueError(f"unknown quantization type(s) {', '.join(unknown)}; "
                         f"choose from {', '.join(_core.quantize_types())}")
    candidates = list(candidates or [])
    if not types and not candidates:
        raise ValueError("nothing to sweep: give quantization types, candidate drafts or both")
    if types:
        out_dir.mkdir(parents=True, exist_ok=True)
    with SpeculativeDecoder(target, n_ctx=1024, n_threads=n_threads) as t:
        prompts = [t.chat_tokens([{"role": "user", "content": PROMPTS[name]}])
                   if t.target_model.chat_template else t.tokenize(PROMPTS[name]) for name in SWEEP_PROMPTS]
    target_ms = _ms_per_token(target, prompts, n_predict, n_threads)
    verify_ms = verify_cost_ms(target, prompts[0], list(range(1, MAX_SWEEP_DRAFT + 2)), n_threads)
    with SpeculativeDecoder(target, n_ctx=1024, n_threads=n_threads) as plain:
        plain_tps = _tokens_per_second(plain, prompts, n_predict)
    if progress:
        progress(1)
    drafts = []
    stem = Path(target).stem
    todo = [(qtype, None) for qtype in types] + [(Path(c).name, c) for c in candidates]
    for name, given in todo:
        path = given or str(out_dir / f"{stem}.{name}.gguf")
        if given is None:
            make_draft(target, path, name, n_threads)
        draft_ms = _ms_per_token(path, prompts, n_predict, n_threads)
        with SpeculativeDecoder(target, path, n_ctx=1024, n_threads=n_threads) as dec:
            drafted = accepted = 0
            for p in prompts:
                dec.reset()
                s = dec.generate(p, max_tokens=n_predict, temperature=0, n_draft=n_draft, adaptive=False, drafter="model",
                                 ignore_eos=True).stats
                drafted += s.n_drafted
                accepted += s.n_accepted
            cross = dec.cross_vocab
            measured = _tokens_per_second(dec, prompts, n_predict, drafter="model") / plain_tps
        alpha = accepted / drafted if drafted else 0.0
        c = draft_ms / target_ms

        def predict(n, alpha=alpha, draft_ms=draft_ms):
            return predicted_speedup_measured(alpha, n, draft_ms, target_ms, verify_ms[n + 1])

        best_n = max(range(1, MAX_SWEEP_DRAFT + 1), key=predict)
        drafts.append({"type": name if given is None else None, "name": name, "path": path,
                       "vocab": "same" if cross is None else "intersection",
                       "vocab_target_share": 1.0 if cross is None else cross["target_share"],
                       "measured_speedup": measured,
                       "size_mb": os.path.getsize(path) / 1e6,
                       "draft_ms_per_token": draft_ms, "cost_ratio": c, "acceptance_rate": alpha,
                       "best_n_draft": best_n, "predicted_speedup": predict(best_n),
                       "predicted_speedup_leviathan": max(predicted_speedup(alpha, n, c)
                                                          for n in range(1, MAX_SWEEP_DRAFT + 1))})
        if progress:
            progress(1)
    recommended = max(drafts, key=lambda e: e["predicted_speedup"])
    return {"provenance": provenance({"target": target}, n_threads or None), "target_size_mb": os.path.getsize(target) / 1e6, "target_ms_per_token": target_ms,
            "verify_ms_by_batch": verify_ms, "plain_tokens_per_second": plain_tps,
            "n_predict": n_predict, "drafts": drafts, "recommended": recommended,
            "fastest_measured": max(drafts, key=lambda e: e["measured_speedup"])}


def format_sweep(report: dict, target_name: str) -> str:
    """The sweep report as the table `specllama draft --sweep` prints: the drafts ranked by
    predicted speedup, with the measured one beside it."""
    out = []
    out.append(f"target {target_name}: {report['target_size_mb']:.1f} MB, "
               f"{report['target_ms_per_token']:.1f} ms per token")
    v = report["verify_ms_by_batch"]
    out.append(f"verification batch cost: {', '.join(f'{k} tokens {ms:.1f} ms' for k, ms in v.items() if k in (1, 2, 5, 9, 13))}")
    width = max([7] + [len(e["name"]) for e in report["drafts"]])
    out.append(f"{'draft':<{width}} size MB  cost ratio  acceptance  best n_draft  predicted speedup  "
               f"(Leviathan, verify = 1 decode)  measured  vocabulary")
    for e in sorted(report["drafts"], key=lambda e: -e["predicted_speedup"]):  # best first
        vocab = "target's" if e["vocab"] == "same" else f"other ({e['vocab_target_share']:.0%} of the target's shared)"
        out.append(f"{e['name']:<{width}} {e['size_mb']:>7.1f}  {e['cost_ratio']:>10.2f}  {e['acceptance_rate']:>10.1%}  "
                   f"{e['best_n_draft']:>12}  {e['predicted_speedup']:>16.2f}x  {e['predicted_speedup_leviathan']:>29.2f}x  "
                   f"{e['measured_speedup']:>7.2f}x  {vocab}")
    best = report["recommended"]
    out.append(f"recommended: {best['name']} ({best['path']}), predicted {best['predicted_speedup']:.2f}x")
    fast = report["fastest_measured"]
    out.append(f"fastest measured: {fast['name']} ({fast['path']}), {fast['measured_speedup']:.2f}x plain decoding "
               f"({report['plain_tokens_per_second']:.1f} tokens/s) on these prompts")
    return "\n".join(out)
