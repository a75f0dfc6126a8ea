"""Offline latency model of plain decoding (non-SI), speculative inference (SI) and Distributed
Speculative Inference (DSI, Timor et al.), as in the paper's offline simulation: forward passes
are replaced by their latencies, acceptance by i.i.d. draws with a given rate, and threading
overheads are ignored.

non-SI: N target passes.
SI:     per iteration, `lookahead` draft passes then one target pass that keeps the accepted
        prefix plus one token (the paper's si()).
DSI:    the drafter never waits for verification. Every `lookahead` drafted tokens become a
        verification task for one of `sp` target servers (queued if all are busy). Tasks finish
        in order; the first wrong draft is known when the task verifying it (or the one before,
        whose extra target token covers it) finishes; then every later task and draft is
        dropped, the target's token is emitted and drafting restarts from it.

Times are in units of one target forward pass unless given otherwise.

`online()` runs the native orchestrator (the code path `--mode dsi` uses on real models) against
simulated servers: each forward pass is a real wait, drafts are right where a pattern says, and
the wall time is measured. Given the same pattern (`right[j]`: the drafter proposes the target's
token at generated index j), the offline functions and the online run see the same acceptances.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional, Sequence, Tuple

import numpy as np


def non_si(t_target: float, n: int) -> float:
    return n * t_target


def pattern(n: int, accept: float, rng: np.random.Generator, pad: int = 256) -> np.ndarray:
    """right[j]: whether the drafter proposes the target's token at generated index j (i.i.d.)."""
    return rng.random(n + pad) < accept


def _leading_true(right: np.ndarray, start: int, length: int) -> int:
    seg = right[start:start + length]
    return int(np.argmin(seg)) if not seg.all() else len(seg)


def si(t_target: float, t_draft: float, lookahead: int, n: int, accept: float,
       rng: np.random.Generator, right: Optional[np.ndarray] = None) -> float:
    """One run of SI; returns its latency. right: an acceptance pattern (else drawn from rng)."""
    if right is None:
        right = pattern(n, accept, rng, pad=lookahead + 1)
    total, toks = 0.0, 0
    while toks < n:
        n_acc = min(_leading_true(right, toks, lookahead), lookahead)
        toks += n_acc + 1
        total += lookahead * t_draft + t_target
    return total


def si_expected_tokens_per_iteration(accept: float, lookahead: int) -> float:
    """(1 - a^(k+1)) / (1 - a): the closed form SI's simulation must agree with."""
    if accept >= 1.0:
        return lookahead + 1.0
    return (1.0 - accept ** (lookahead + 1)) / (1.0 - accept)


def dsi(t_target: float, t_draft: float, lookahead: int, n: int, accept: float, sp: int,
        rng: np.random.Generator, right: Optional[np.ndarray] = None) -> float:
    """One run of DSI with `sp` target servers; returns its latency. right: as in si()."""
    if sp < 1 or lookahead < 1:
        raise ValueError("sp and lookahead must be >= 1")
    k = lookahead
    if right is None:
        right = pattern(n, accept, rng, pad=k + 1)
    emitted = 0  # tokens verified and emitted
    t = 0.0  # when drafting (re)starts from the last emitted token
    while emitted < n:
        # draft offsets 0, 1, 2, ... from the restart; offset i is right where the pattern says
        wrong = _leading_true(right, emitted, n - emitted + k + 1)
        free = [t] * sp  # when each target server is free (a restart cancels every task)
        done = t  # results are used in task order
        end = 0
        while True:
            # the task ending at offset `end` verifies drafts [end - k, end) and yields the target's
            # tokens for offsets end - k .. end. The first task (end 0) verifies nothing: it is the
            # target computing the next token from the verified text at once, as plain decoding
            # would, which is why DSI is never slower than non-SI
            ready = t + end * t_draft
            s = min(range(sp), key=free.__getitem__)
            begin = max(ready, free[s])
            free[s] = begin + t_target
            done = max(free[s], done)
            # a wrong draft among this task's offsets (one at end - k was caught by the task
            # before, through its extra token) is caught now
            if wrong <= end:
                emitted += wrong + 1  # the accepted drafts, then the target's own token
                t = done
                break
            if emitted + end + 1 >= n:  # all drafts so far accepted, plus the extra target token
                return done
            end += k
    return t


def online(mode: str, t_target_ms: float, t_draft_ms: float, right: Sequence[bool], n: int,
           lookahead: int = 4, sp: int = 1) -> dict:
    """Run the native orchestrator against simulated servers: mode 'non-si', 'si' or 'dsi'.
    Returns its stats with t_total_ms (measured wall time) and 'correct' (output == target's)."""
    from . import _core
    from .decoder import as_dict

    if mode not in ("non-si", "si", "dsi"):
        raise ValueError(f"mode must be 'non-si', 'si' or 'dsi', got {mode!r}")
    if n < 1 or len(right) < n:
        raise ValueError("need n >= 1 and a pattern of at least n entries")
    overlap = mode == "dsi"
    k = 0 if mode == "non-si" else lookahead
    stats, n_tokens, correct = _core.simulate_dsi(float(t_target_ms), float(t_draft_ms), [bool(x) for x in right[:n]],
                                                  lookahead=k, sp=sp if overlap else 1, overlap=overlap)
    return dict(as_dict(stats), n_tokens=n_tokens, correct=correct)


@dataclass
class GridPoint:
    draft_fraction: float  # drafter latency / target latency
    accept: float
    non_si: float
    si: float
    si_lookahead: int
    dsi: float
    dsi_lookahead: int


def min_lookahead(draft_fraction: float, sp: int) -> int:
    """Smallest lookahead with sp >= target / (lookahead * drafter): a free server for every task."""
    return max(1, math.ceil(1.0 / (sp * draft_fraction) - 1e-9))


def grid(draft_fractions: Sequence[float], accepts: Sequence[float], n: int = 50, sp: int = 7,
         lookaheads: Sequence[int] = tuple(range(1, 21)), repeats: int = 5, seed: int = 0) -> List[GridPoint]:
    """The paper's heatmap grid: SI with its best lookahead; DSI with the best lookahead that keeps
    `sp` servers enough (the paper's Equation 1), both averaged over `repeats` runs."""
    out = []
    for f in draft_fractions:
        for a in accepts:
            def mean(fn):  # every configuration sees the same seeds
                rng = np.random.default_rng(seed)
                return float(np.mean([fn(rng) for _ in range(repeats)]))

            si_times = {k: mean(lambda r, k=k, f=f, a=a: si(1.0, f, k, n, a, r)) for k in lookaheads}
            k_si = min(si_times, key=si_times.get)
            ok = [k for k in lookaheads if k >= min_lookahead(f, sp)] or [max(lookaheads)]
            dsi_times = {k: mean(lambda r, k=k, f=f, a=a: dsi(1.0, f, k, n, a, sp, r)) for k in ok}
            k_dsi = min(dsi_times, key=dsi_times.get)
            out.append(GridPoint(f, a, non_si(1.0, n), si_times[k_si], k_si, dsi_times[k_dsi], k_dsi))
    return out


def proposition1_bound(t_target: float, t_draft: float, accept: float, n: int) -> float:
    """Upper bound on DSI's expected latency (Timor et al., Proposition 1, lookahead 1)."""
    return t_draft * accept * (n - 1) + t_target * ((1 - accept) * (n - 1) + 1)


def plot_heatmaps(points: List[GridPoint], path, title: Optional[str] = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fs = sorted({p.draft_fraction for p in points})
    accs = sorted({p.accept for p in points})
    idx = {(p.draft_fraction, p.accept): p for p in points}

    def field(fn):
        return np.array([[fn(idx[(f, a)]) for f in fs] for a in accs])

    panels = [("SI vs non-SI", field(lambda p: p.non_si / p.si)),
              ("DSI vs SI", field(lambda p: p.si / p.dsi)),
              ("DSI vs non-SI", field(lambda p: p.non_si / p.dsi)),
              ("DSI vs the better of SI and non-SI", field(lambda p: min(p.si, p.non_si) / p.dsi))]
    fig, axes = plt.subplots(1, 4, figsize=(18, 4.2))
    for ax, (name, z) in zip(axes, panels):
        # red: slower, white: equal, green: faster (log scale, centred on 1)
        lim = max(abs(math.log(float(z.min()))), abs(math.log(float(z.max()))), 0.1)
        im = ax.imshow(np.log(z), origin="lower", aspect="auto", cmap="RdYlGn", vmin=-lim, vmax=lim,
                       extent=[fs[0], fs[-1], accs[0], accs[-1]])
        ax.set_title(f"{name}: log speedup (min {z.min():.2f}x, max {z.max():.1f}x)", fontsize=8)
        ax.set_xlabel("drafter latency / target latency")
        ax.set_ylabel("acceptance rate")
        fig.colorbar(im, ax=ax)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(target_ms: float, draft_ms: float, accept: float, n: int, sp: int, lookahead: Optional[int] = None,
           repeats: int = 50, online_too: bool = False) -> Iterator[str]:
    """The lines `specllama simulate` prints: the offline model's latency of non-SI, SI and DSI
    (each at its best lookahead, or the one given) and, online_too, the native orchestrator's
    measured wall time against simulated servers on one acceptance pattern. Raises RuntimeError
    if the orchestrator emits a wrong token."""

    def mean(fn):
        rng = np.random.default_rng(0)
        return float(np.mean([fn(rng) for _ in range(repeats)]))

    ks = [lookahead] if lookahead else list(range(1, 33))
    si_t = {k: mean(lambda r, k=k: si(target_ms, draft_ms, k, n, accept, r)) for k in ks}
    dsi_t = {k: mean(lambda r, k=k: dsi(target_ms, draft_ms, k, n, accept, sp, r)) for k in ks}
    k_si, k_dsi = min(si_t, key=si_t.get), min(dsi_t, key=dsi_t.get)
    plain = non_si(target_ms, n)
    yield f"simulated (offline model), {n} tokens, target {target_ms} ms, drafter {draft_ms} ms, acceptance {accept}:"
    yield f"  non-SI  {plain:9.1f} ms"
    yield f"  SI      {si_t[k_si]:9.1f} ms  lookahead {k_si:>2}  {plain / si_t[k_si]:.2f}x non-SI"
    yield (f"  DSI     {dsi_t[k_dsi]:9.1f} ms  lookahead {k_dsi:>2}, {sp} target servers  "
           f"{plain / dsi_t[k_dsi]:.2f}x non-SI, {si_t[k_si] / dsi_t[k_dsi]:.2f}x SI")
    if not online_too:
        return
    right = pattern(n, accept, np.random.default_rng(0))
    rows = [("non-SI", "non-si", 1, non_si(target_ms, n)),
            ("SI", "si", k_si, si(target_ms, draft_ms, k_si, n, accept, None, right)),
            ("DSI", "dsi", k_dsi, dsi(target_ms, draft_ms, k_dsi, n, accept, sp, None, right))]
    yield (f"online (native orchestrator, simulated servers), one acceptance pattern "
           f"({float(np.mean(right[:n])):.2f} right):")
    wall = {}
    for label, mode, k, offline in rows:
        r = online(mode, target_ms, draft_ms, right, n, lookahead=k, sp=sp)
        if not r["correct"]:
            raise RuntimeError(f"online {label} emitted a wrong token (a bug: please report it)")
        wall[label] = r["t_total_ms"]
        extra = (f"  {r['n_tasks_cancelled']}/{r['n_tasks']} tasks cancelled, "
                 f"{r['verify_hidden_share']:.0%} of verification hidden" if mode == "dsi" else "")
        yield f"  {label:<7} {r['t_total_ms']:9.1f} ms  (offline model on the same pattern {offline:.1f} ms){extra}"
    yield f"  DSI {wall['non-SI'] / wall['DSI']:.2f}x non-SI, {wall['SI'] / wall['DSI']:.2f}x SI (measured)"


def write_heatmap(out_dir: Path, sp: int) -> Tuple[Path, Path]:
    """The paper's Figure 2 grid (offline model, 100 tokens): grid.json and heatmaps.png in out_dir."""
    fractions = [round(x, 2) for x in np.linspace(0.02, 1.0, 25)]
    accepts = [round(x, 2) for x in np.linspace(0.0, 1.0, 21)]
    pts = grid(fractions, accepts, n=100, sp=sp, repeats=5)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "grid.json").write_text(json.dumps([p.__dict__ for p in pts], indent=1))
    plot_heatmaps(pts, out_dir / "heatmaps.png", title=f"offline simulation, SP = {sp}, 100 tokens")
    return out_dir / "grid.json", out_dir / "heatmaps.png"
