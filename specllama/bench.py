"""Plain vs speculative decoding on the same engine, same prompts, same seeds, same token counts.

Each prompt is run plainly (speculative=False) and speculatively on ONE SpeculativeDecoder, with
both caches emptied before every run so each pays the same prefill, and with ignore_eos so both
emit exactly max_tokens tokens. Throughput is generated tokens over the time after prefill.
The report sets the measured speedup beside what Leviathan et al.'s analysis predicts from the
measured acceptance rate and costs.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .decoder import SpeculativeDecoder, Stats, as_dict
from .provenance import provenance

# varied on purpose: acceptance depends on the kind of text
PROMPTS: Dict[str, str] = {
    "chat": "Write a short, friendly reply to a colleague who asks how your weekend went.",
    "code": "Write a Python function that checks whether a string is a palindrome, with a docstring.",
    "summary": ("Summarize in three sentences: The Amazon rainforest covers much of the Amazon basin of "
                "South America. The basin covers seven million square kilometres, of which five and a half "
                "million are covered by the rainforest. The region includes territory of nine nations, and "
                "the majority of the forest is contained within Brazil. It represents over half of the "
                "planet's remaining rainforests."),
    "list": "List ten common fruits, one per line, with their colour.",
}


def expected_tokens_per_step(alpha: float, n_draft: int) -> float:
    """E[tokens per step] = (1 - a^(g+1)) / (1 - a) for i.i.d. acceptance a (Leviathan et al. eq. 1)."""
    if alpha >= 1.0:
        return n_draft + 1.0
    return (1.0 - alpha ** (n_draft + 1)) / (1.0 - alpha)


def predicted_speedup(alpha: float, n_draft: int, c: float) -> float:
    """Leviathan et al. Theorem 3.8: (1 - a^(g+1)) / ((1 - a)(g c + 1)), c = draft/target cost."""
    return expected_tokens_per_step(alpha, n_draft) / (n_draft * c + 1.0)


def predicted_speedup_measured(alpha: float, n_draft: int, t_draft: float, t_target: float,
                               t_verify: float) -> float:
    """The same with the measured cost of a verification batch instead of assuming it equals one
    target decode: E[tokens] * t_target / (g * t_draft + t_verify)."""
    return expected_tokens_per_step(alpha, n_draft) * t_target / (n_draft * t_draft + t_verify)


@dataclass
class Run:
    prompt: str
    mode: str  # "plain", "fixed", "adaptive" or "dsi"
    n_draft: int  # drafted tokens per step: exactly (fixed) or at most (adaptive); DSI: the lookahead
    stats: Stats
    tokens: List[int]
    sp: int = 0  # DSI: target servers
    dsi: Optional[dict] = None
    seed: Optional[int] = None

    def as_dict(self) -> dict:
        d = {"prompt": self.prompt, "mode": self.mode, "n_draft": self.n_draft, "seed": self.seed,
             "stats": as_dict(self.stats)}
        if self.mode == "dsi":
            d.update(sp=self.sp, dsi=self.dsi)
        return d


def _reset_and_run(dec: SpeculativeDecoder, name: str, prompt: List[int], mode: str, n_draft: int,
                   max_tokens: int, temperature: float, seed: int, sp: int = 0,
                   dsi_threads: Tuple[int, int] = (0, 0), drafter: str = "auto") -> Run:
    dec.reset()
    if mode == "dsi":
        out = dec.generate(prompt, max_tokens=max_tokens, temperature=temperature, seed=seed, ignore_eos=True,
                           mode="dsi", sp=sp, lookahead=n_draft, threads_draft=dsi_threads[0],
                           threads_server=dsi_threads[1])
        return Run(name, mode, n_draft, out.stats, out.tokens, sp, as_dict(out.dsi), seed)
    # the rejection rule, as a generation without a seed verifies (the seed here only repeats the runs;
    # with a seed of its own a generation would draw keyed)
    out = dec.generate(prompt, max_tokens=max_tokens, temperature=temperature, seed=seed, n_draft=n_draft,
                       speculative=mode != "plain", adaptive=mode == "adaptive", drafter=drafter, ignore_eos=True,
                       acceptance="rejection")
    return Run(name, mode, n_draft if mode != "plain" else 0, out.stats, out.tokens, seed=seed)


def throughput(stats: Sequence[Stats]) -> float:
    """Tokens per second after the prompt, over the runs' Stats together."""
    tokens = sum(s.n_generated for s in stats)
    ms = sum(s.t_total_ms - s.t_prefill_ms for s in stats)
    return tokens * 1000.0 / ms if ms > 0 else 0.0


def run_bench(dec: SpeculativeDecoder, n_drafts: Sequence[int], max_tokens: int = 128, temperature: float = 0.0,
              seed: int = 0, prompts: Optional[Dict[str, str]] = None, adaptive_max: Optional[int] = None,
              progress: Optional[Callable[[int], None]] = None,
              dsi: Sequence[Tuple[int, int]] = (), dsi_threads: Tuple[int, int] = (0, 0), repeats: int = 1,
              drafter: str = "auto", threads: Optional[int] = None) -> dict:
    """Measure plain decoding once per prompt, speculative decoding with each fixed n_draft,
    (given adaptive_max) adaptive drafting of at most adaptive_max tokens, and DSI with each
    (sp, lookahead) in dsi (dsi_threads: drafter and per-server threads, 0 = split the budget).
    With repeats > 1 every run is repeated (interleaved) and the median-speed run of each prompt
    and configuration is the one reported; when sampling, round r uses seed + r, so that the median
    is taken over `repeats` samples of each configuration, not over one sample's timing alone (at
    temperature > 0 how many drafts a sample keeps varies from sample to sample). drafter: as in
    generate() (DSI drafts with the model).

    Returns the report dict (see `specllama bench --json`); its top-level speedup is the
    adaptive configuration's when there is one, else the best fixed n_draft's."""
    if not dec.has_draft and drafter != "lookup":
        raise ValueError("bench compares plain and speculative decoding: it needs a draft model (or drafter='lookup')")
    prompts = prompts or PROMPTS
    tokenized = {name: dec.chat_tokens([{"role": "user", "content": text}])
                 for name, text in prompts.items()}
    configs = ([("fixed", n, 0) for n in n_drafts] + ([("adaptive", adaptive_max, 0)] if adaptive_max else [])
               + [("dsi", k, sp) for sp, k in dsi])
    # warm-up: first-touch page faults of the mapped weights would count against the first run
    first = next(iter(tokenized.values()))
    for mode, n, sp in [("plain", 1, 0)] + configs:  # also teaches the adaptive model this machine's costs
        _reset_and_run(dec, "warm-up", first, mode, n, 16, temperature, seed, sp, dsi_threads, drafter)

    all_runs: List[Run] = []
    started = time.time()
    source = provenance({"target": dec.model_path, "draft": dec.draft_path}, threads)  # the code as it starts
    for rep in range(repeats):  # interleaved, so that a slow spell of the machine hits every configuration
        for name, toks in tokenized.items():
            for mode, n, sp in [("plain", 1, 0)] + configs:
                all_runs.append(_reset_and_run(dec, name, toks, mode, n, max_tokens, temperature, seed + rep, sp,
                                               dsi_threads, drafter))
                if progress:
                    progress(1)
    runs = _median_runs(all_runs, list(tokenized), configs)
    plain = [r.stats for r in runs if r.mode == "plain"]
    plain_tps = throughput(plain)
    t_target = sum(s.t_verify_ms for s in plain) / sum(s.n_steps for s in plain)
    sweep = [_sweep_entry(runs, mode, n, sp, list(tokenized), plain_tps, t_target) for mode, n, sp in configs]
    report = {
        "provenance": source,
        "drafter": dec.drafter_name(drafter=drafter),  # what "auto" ran
        "max_tokens": max_tokens,
        "temperature": temperature,
        "seed": seed,
        "prompts": list(tokenized),
        "plain_tokens_per_second": plain_tps,
        "target_ms_per_token": t_target,
    }
    report.update(_summary(sweep, list(tokenized)))
    report.update({
        "sweep": sweep,
        "repeats": repeats,
        "runs": [r.as_dict() for r in runs],  # the median runs
        "all_runs": [r.as_dict() for r in all_runs] if repeats > 1 else None,
        "seconds": time.time() - started,
    })
    return report


def _median_runs(all_runs: List[Run], prompts: List[str], configs) -> List[Run]:
    """Per prompt and configuration (plain first), the run with the median speed."""
    runs: List[Run] = []
    for name in prompts:
        for mode, n, sp in [("plain", 1, 0)] + configs:
            same = sorted((r for r in all_runs if (r.prompt, r.mode, r.sp) == (name, mode, sp)
                           and (r.n_draft == n or mode == "plain")), key=lambda r: r.stats.tokens_per_second)
            runs.append(same[(len(same) - 1) // 2])
    return runs


def _sweep_entry(runs: List[Run], mode: str, n: int, sp: int, prompts: List[str], plain_tps: float,
                 t_target: float) -> dict:
    """One configuration's figures over the prompts, against plain decoding's."""
    mine = [r for r in runs if r.mode == mode and r.n_draft == n and r.sp == sp]
    spec = [r.stats for r in mine]
    n_drafted = sum(s.n_drafted for s in spec)
    alpha = sum(s.n_accepted for s in spec) / n_drafted if n_drafted else 0.0
    t_draft = sum(s.t_draft_ms for s in spec) / n_drafted if n_drafted else 0.0
    t_verify = sum(s.t_verify_ms for s in spec) / sum(s.n_steps for s in spec)
    tps = throughput(spec)
    per_prompt = {}
    n_identical = 0
    for name in prompts:
        plain_run = next(r for r in runs if r.prompt == name and r.mode == "plain")
        spec_run = next(r for r in mine if r.prompt == name)
        p, s = plain_run.stats, spec_run.stats
        n_identical += plain_run.tokens == spec_run.tokens
        per_prompt[name] = {"identical_to_plain": plain_run.tokens == spec_run.tokens,
                            "plain_tokens_per_second": p.tokens_per_second,
                            "speculative_tokens_per_second": s.tokens_per_second,
                            "speedup": s.tokens_per_second / p.tokens_per_second,
                            "acceptance_rate": s.acceptance_rate,
                            "mean_accepted_length": s.mean_accepted_length}
    total_ms = sum(s.t_total_ms - s.t_prefill_ms for s in spec)
    n_generated = max(1, sum(s.n_generated for s in spec))
    loop_ms = sum(s.t_other_ms for s in spec)
    entry = {
        "mode": mode,
        "n_draft": n,
        "label": {"fixed": f"{n}", "adaptive": f"adaptive <= {n}", "dsi": f"DSI sp {sp} lookahead {n}"}[mode],
        "speculative_tokens_per_second": tps,
        "speedup": tps / plain_tps if plain_tps else 0.0,
        "acceptance_rate": alpha,
        "mean_accepted_length": sum(s.n_generated for s in spec) / sum(s.n_steps for s in spec),
        "cost_ratio": t_draft / t_target if t_target else 0.0,
        "draft_ms_per_token": t_draft,
        "verify_ms_per_step": t_verify,
        "predicted_speedup": predicted_speedup(alpha, n, t_draft / t_target),
        "predicted_speedup_measured_verify": predicted_speedup_measured(alpha, n, t_draft, t_target, t_verify),
        "loop_overhead_share": loop_ms / total_ms if total_ms else 0.0,
        # the loop's work on the host outside llama_decode, per generated token, and two of its parts
        "host_ms_per_token": sum(s.t_host_ms for s in spec) / n_generated,
        "draft_sampling_ms_per_token": sum(s.t_draft_sample_ms for s in spec) / n_generated,
        "acceptance_ms_per_token": sum(s.t_accept_ms for s in spec) / n_generated,
        # at temperature 0: prompts whose speculative output equals the plain output token for token
        "outputs_identical": n_identical,
        "per_prompt": per_prompt,
    }
    if mode == "dsi":
        entry.update(_dsi_figures(mine, sp))
    return entry


def _dsi_figures(mine: List[Run], sp: int) -> dict:
    """Leviathan's formula describes SI; DSI reports how much verification it hid instead."""
    used = sum(r.dsi["t_verify_ms"] - r.dsi["t_verify_wasted_ms"] for r in mine)
    hidden = sum(r.dsi["t_verify_hidden_ms"] for r in mine)
    return {"sp": sp, "predicted_speedup": None, "predicted_speedup_measured_verify": None,
            "loop_overhead_share": None, "host_ms_per_token": None, "draft_sampling_ms_per_token": None,
            "acceptance_ms_per_token": None,
            "verify_hidden_share": hidden / used if used else 0.0,
            "tasks_cancelled_share": (sum(r.dsi["n_tasks_cancelled"] for r in mine)
                                      / max(1, sum(r.dsi["n_tasks"] for r in mine))),
            "threads": {"draft": mine[0].dsi["n_threads_draft"], "per_server": mine[0].dsi["n_threads_server"]}}


def _summary(sweep: List[dict], prompts: List[str]) -> dict:
    """The report's headline: the adaptive configuration's figures where there is one, else the
    best fixed n_draft's (else the best DSI's), and adaptive against each prompt's best fixed n_draft."""
    fixed = [e for e in sweep if e["mode"] == "fixed"]
    best_fixed = max(fixed, key=lambda e: e["speedup"]) if fixed else None
    adaptive = next((e for e in sweep if e["mode"] == "adaptive"), None)
    # adaptive against the best fixed n_draft of each prompt (what a user tuning by hand would pick)
    adaptive_vs_best = None
    if adaptive and fixed:
        adaptive_vs_best = {}
        for name in prompts:
            best_f = max(fixed, key=lambda e: e["per_prompt"][name]["speculative_tokens_per_second"])
            adaptive_vs_best[name] = {
                "best_fixed_n_draft": best_f["n_draft"],
                "ratio": (adaptive["per_prompt"][name]["speculative_tokens_per_second"]
                          / best_f["per_prompt"][name]["speculative_tokens_per_second"])}
    dsi_entries = [e for e in sweep if e["mode"] == "dsi"]
    best_dsi = max(dsi_entries, key=lambda e: e["speedup"]) if dsi_entries else None
    best = adaptive or best_fixed or best_dsi
    return {
        "mode": best["mode"],
        "n_draft": best["n_draft"],
        "best_n_draft": best_fixed["n_draft"] if best_fixed else None,
        "best_fixed_speedup": best_fixed["speedup"] if best_fixed else None,
        "adaptive_speedup": adaptive["speedup"] if adaptive else None,
        "adaptive_vs_best_fixed_by_prompt": adaptive_vs_best,
        "dsi_speedup": best_dsi["speedup"] if best_dsi else None,
        "dsi_best": best_dsi["label"] if best_dsi else None,
        "speculative_tokens_per_second": best["speculative_tokens_per_second"],
        "speedup": best["speedup"],
        "acceptance_rate": best["acceptance_rate"],
        "mean_accepted_length": best["mean_accepted_length"],
        "predicted_speedup": best["predicted_speedup"],
        "predicted_speedup_measured_verify": best["predicted_speedup_measured_verify"],
    }


def write_report(report: dict, out_dir: Path) -> Dict[str, Path]:
    """report.json and speedup.png in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path = out_dir / "report.json"
    json_path.write_text(json.dumps(report, indent=2))
    png_path = out_dir / "speedup.png"
    plot_report(report, png_path)
    return {"json": json_path, "png": png_path}


def plot_report(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = [e for e in report["sweep"] if e["mode"] == "fixed"]
    adaptive = next((e for e in report["sweep"] if e["mode"] == "adaptive"), None)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ns = [e["n_draft"] for e in sweep]
    ax1.plot(ns, [e["speedup"] for e in sweep], "o-", label="measured, fixed n_draft")
    ax1.plot(ns, [e["predicted_speedup_measured_verify"] for e in sweep], "s--",
             label="predicted (measured verify cost)")
    ax1.plot(ns, [e["predicted_speedup"] for e in sweep], "^:", label="predicted (Leviathan, c)")
    if adaptive:
        ax1.axhline(adaptive["speedup"], color="tab:red", ls="-.", label=f"measured, {adaptive['label']}")
    for e in report["sweep"]:
        if e["mode"] == "dsi":
            ax1.axhline(e["speedup"], color="tab:purple", ls=":", lw=1, label=f"measured, {e['label']}")
    ax1.axhline(1.0, color="grey", lw=0.8)
    ax1.set_xlabel("n_draft (tokens drafted per step)")
    ax1.set_ylabel("speedup over plain decoding")
    ax1.set_title("Speculative vs plain, same engine")
    ax1.legend(fontsize=8)
    ax1.set_xticks(ns)

    best = next(e for e in report["sweep"] if e["mode"] == report["mode"] and e["n_draft"] == report["n_draft"])
    names = list(best["per_prompt"])
    x = range(len(names))
    plain = [best["per_prompt"][n]["plain_tokens_per_second"] for n in names]
    spec = [best["per_prompt"][n]["speculative_tokens_per_second"] for n in names]
    ax2.bar([i - 0.2 for i in x], plain, width=0.4, label="plain")
    ax2.bar([i + 0.2 for i in x], spec, width=0.4, label=f"speculative (n_draft {best['label']})")
    for i, n in enumerate(names):
        pp = best["per_prompt"][n]
        ax2.annotate(f"{pp['speedup']:.2f}x\na={pp['acceptance_rate']:.2f}", (i + 0.2, spec[i]),
                     ha="center", va="bottom", fontsize=8)
    ax2.set_ylim(0, max(spec + plain) * 1.25)
    ax2.set_xticks(list(x))
    ax2.set_xticklabels(names)
    ax2.set_ylabel("tokens / s (after prefill)")
    ax2.set_title("Per prompt")
    ax2.legend(fontsize=8, loc="lower right")
    models = report["provenance"]["models"]
    drafters = ([f"draft {models['draft']['file']}"] if "draft" in models else []) + (
        ["lookup"] if "lookup" in report.get("drafter", "model") else [])
    fig.suptitle(f"{models['target']['file']} + {' + '.join(drafters)}, "
                 f"{report['max_tokens']} tokens, T={report['temperature']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def format_report(r: dict) -> str:
    """The report as the table `specllama bench` prints."""
    lines = [f"plain decoding: {r['plain_tokens_per_second']:.1f} tokens/s "
             f"({r['target_ms_per_token']:.1f} ms per target decode)",
             "",
             "n_draft         tokens/s  speedup  acceptance  tokens/pass  predicted  predicted(meas.)  loop overhead  "
             "host ms/token  same output"]
    for e in r["sweep"]:
        if e["mode"] == "dsi":
            continue
        lines.append(f"{e['label']:>14}  {e['speculative_tokens_per_second']:>8.1f}  {e['speedup']:>6.2f}x  "
                     f"{e['acceptance_rate']:>10.1%}  {e['mean_accepted_length']:>11.2f}  "
                     f"{e['predicted_speedup']:>8.2f}x  {e['predicted_speedup_measured_verify']:>15.2f}x  "
                     f"{e['loop_overhead_share']:>12.2%}  {e['host_ms_per_token']:>13.3f}  "
                     f"{e['outputs_identical']:>5}/{len(e['per_prompt'])}")
    dsi = [e for e in r["sweep"] if e["mode"] == "dsi"]
    if dsi:
        lines += ["", "DSI (sp, lookahead)      tokens/s  speedup  acceptance  threads (drafter, per server)  "
                      "verification hidden  tasks cancelled  same output"]
        for e in dsi:
            lines.append(f"{e['label']:>24}  {e['speculative_tokens_per_second']:>8.1f}  {e['speedup']:>6.2f}x  "
                         f"{e['acceptance_rate']:>10.1%}  {e['threads']['draft']:>14}, {e['threads']['per_server']:<14}  "
                         f"{e['verify_hidden_share']:>19.0%}  {e['tasks_cancelled_share']:>15.0%}  "
                         f"{e['outputs_identical']:>5}/{len(e['per_prompt'])}")
    best = next(e for e in r["sweep"] if e["mode"] == r["mode"] and e["n_draft"] == r["n_draft"])
    lines += ["", f"per prompt, {best['label']}:"]
    for name, p in best["per_prompt"].items():
        lines.append(f"  {name:<8} plain {p['plain_tokens_per_second']:6.1f}  speculative "
                     f"{p['speculative_tokens_per_second']:6.1f} tokens/s  {p['speedup']:.2f}x  "
                     f"acceptance {p['acceptance_rate']:.1%}")
    lines += ["", f"{best['label']}: {r['speedup']:.2f}x plain decoding"]
    if r["best_n_draft"] is not None:
        lines.append(f"best fixed n_draft: {r['best_n_draft']}, {r['best_fixed_speedup']:.2f}x")
    if r.get("adaptive_vs_best_fixed_by_prompt"):
        lines.append("adaptive vs each prompt's best fixed n_draft: " + ", ".join(
            f"{name} {v['ratio']:.2f} (n_draft {v['best_fixed_n_draft']})"
            for name, v in r["adaptive_vs_best_fixed_by_prompt"].items()))
    if r.get("dsi_best"):
        lines.append(f"best DSI: {r['dsi_best']}, {r['dsi_speedup']:.2f}x")
    return "\n".join(lines)
