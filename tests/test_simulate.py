"""The offline SI / DSI latency model (Timor et al.): agreement with closed forms, and DSI never
slower than SI or non-SI across the grid."""

from __future__ import annotations

import numpy as np
import pytest

from specllama import simulate


@pytest.mark.parametrize("accept, k", [(0.0, 3), (0.5, 1), (0.8, 5), (0.95, 8)])
def test_si_tokens_per_iteration_closed_form(accept, k):
    n = 20_000
    iterations = simulate.si(1.0, 0.0, k, n, accept, np.random.default_rng(1))  # latency = target passes
    # n / iterations estimates E[tokens per iteration] (the last iteration may overshoot by <= k)
    assert n / iterations == pytest.approx(simulate.si_expected_tokens_per_iteration(accept, k), rel=0.02)


@pytest.mark.parametrize("f, accept", [(0.1, 0.8), (0.3, 0.5), (0.05, 0.95), (0.5, 0.2)])
def test_dsi_meets_proposition_1(f, accept):
    """Lookahead 1 with enough servers: E[latency] <= t1 p (N-1) + t2 ((1-p)(N-1) + 1)."""
    n, runs = 100, 600
    sp = int(np.ceil(1 / f)) + 1
    rng = np.random.default_rng(2)
    times = np.array([simulate.dsi(1.0, f, 1, n, accept, sp, rng) for _ in range(runs)])
    se = times.std(ddof=1) / np.sqrt(runs)
    assert times.mean() <= simulate.proposition1_bound(1.0, f, accept, n) + 3 * se


def test_dsi_equals_non_si_when_nothing_is_accepted():
    rng = np.random.default_rng(3)
    assert simulate.dsi(1.0, 0.2, 3, 50, 0.0, 7, rng) == pytest.approx(50.0)


def test_dsi_with_a_perfect_drafter_hides_verification():
    # everything accepted: only drafting remains, plus one verification at the end
    assert simulate.dsi(1.0, 0.1, 5, 100, 1.0, 7, np.random.default_rng(0)) == pytest.approx(100 * 0.1 + 1.0)


def test_dsi_never_slower_on_the_grid():
    fractions = [0.02, 0.1, 0.3, 0.6, 1.0]
    accepts = [0.0, 0.3, 0.6, 0.9, 1.0]
    pts = simulate.grid(fractions, accepts, n=60, sp=7, lookaheads=range(1, 16), repeats=20, seed=4)
    for p in pts:
        # same seeds for every algorithm; 2% covers Monte Carlo noise between differently drawn runs
        assert p.dsi <= p.non_si * 1.02, p
        assert p.dsi <= p.si * 1.02, p


def test_heatmap_png(tmp_path):
    pts = simulate.grid([0.1, 0.5], [0.5, 0.9], n=20, repeats=2)
    simulate.plot_heatmaps(pts, tmp_path / "h.png")
    assert (tmp_path / "h.png").read_bytes()[:4] == b"\x89PNG"
