"""The rejection rule reproduces the target distribution exactly.

specllama.accept_trials runs the native acceptance code (the same function the decoding loop
calls) on fixed per-position distributions: drafts drawn from q_i, then the rule. For every
emitted position j, among the trials that reached it, the token must follow p_j (chi-square),
and the chance of reaching position j+1 must be prod_{i<=j} sum_x min(p_i, q_i). Power check:
the same statistics reject two classic bugs (resampling from p instead of the residual, and
dropping the bonus token) at the sample size used here.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

import specllama

N_TRIALS = 200_000
ALPHA = 1e-4  # per check; fixed seeds make each outcome deterministic


def _norm(a):
    a = np.asarray(a, dtype=np.float64)
    return (a / a.sum()).astype(np.float32)


def _chi2_pvalue(samples, p):
    """p-value that samples (token ids) follow p, pooling cells with small expected counts."""
    n = len(samples)
    counts = np.bincount(samples, minlength=len(p)).astype(np.float64)
    expected = p.astype(np.float64) * n
    assert counts[expected == 0].sum() == 0, "a token with zero target probability was emitted"
    keep = expected >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    exp *= obs.sum() / exp.sum()
    if len(obs) < 2:
        return 1.0
    return stats.chisquare(obs, exp).pvalue


def _check(out, p, q, rule="rejection", overlap=None):
    """Assert that accept_trials output follows p; return the p-values for inspection. overlap: the
    chance of keeping each draft, where the rule's is not one of the two closed forms below."""
    n_draft = q.shape[0]
    lengths = (out >= 0).sum(axis=1)
    assert lengths.min() >= 1, "every step emits at least one token"
    # chance of keeping a draft: sum min(p, q) for the rejection rule, sum p q for sample-and-match
    if overlap is None:
        overlap = (np.minimum(p[:n_draft], q) if rule == "rejection" else p[:n_draft] * q).sum(axis=1)
    pvalues = []
    for j in range(n_draft + 1):
        reached = out[:, j] >= 0
        # reaching position j needs the first j drafts accepted
        expect = float(np.prod(overlap[:j]))
        got = reached.mean()
        sd = np.sqrt(expect * (1 - expect) / len(out)) + 1e-12
        assert abs(got - expect) < 5 * sd + 1e-9, f"position {j} reached {got:.4f}, expected {expect:.4f}"
        if reached.sum() >= 50:
            pv = _chi2_pvalue(out[reached, j], p[j])
            pvalues.append(pv)
            assert pv > ALPHA, f"position {j}: emitted tokens do not follow p (p-value {pv:.2e})"
    return pvalues


def _random_case(rng, vocab, n_draft, concentration):
    p = np.stack([_norm(rng.dirichlet(np.full(vocab, concentration))) for _ in range(n_draft + 1)])
    q = np.stack([_norm(rng.dirichlet(np.full(vocab, concentration))) for _ in range(n_draft)])
    return p, q


CASES = {}
_rng = np.random.default_rng(7)
CASES["random"] = _random_case(_rng, 12, 3, 1.0)
CASES["random_peaked"] = _random_case(_rng, 30, 4, 0.3)
_p, _ = _random_case(_rng, 10, 3, 1.0)
CASES["q_equals_p"] = (_p, _p[:3].copy())
_p = np.zeros((3, 10), np.float32)
_p[:, :5] = 0.2
_q = np.zeros((2, 10), np.float32)
_q[:, 5:] = 0.2
CASES["disjoint_supports"] = (_p, _q)
_p = np.zeros((3, 8), np.float32)
_p[0, 3] = _p[1, 1] = _p[2, 6] = 1.0
_q = np.zeros((2, 8), np.float32)
_q[0, 3] = 1.0
_q[1, 2] = 1.0
CASES["one_hot"] = (_p, _q)
_p = np.stack([_norm(_rng.dirichlet(np.ones(10))) for _ in range(3)])
_q = np.zeros((2, 10), np.float32)
_q[0, 0] = _q[1, 0] = 1.0
CASES["one_hot_draft"] = (_p, _q)


@pytest.mark.parametrize("name", sorted(CASES))
def test_emitted_tokens_follow_target(name):
    p, q = CASES[name]
    out = specllama.accept_trials(p, q, N_TRIALS, seed=11)
    _check(out, p, q)


@pytest.mark.parametrize("name", ["random", "one_hot_draft", "q_equals_p"])
def test_sample_and_match_is_exact_but_keeps_fewer(name):
    """llama.cpp's rule, kept for comparison: output follows p too, but drafts survive with
    probability sum p q <= sum min(p, q)."""
    p, q = CASES[name]
    out = specllama.accept_trials(p, q, N_TRIALS, seed=12, rule="match")
    _check(out, p, q, rule="match")
    rejection = specllama.accept_trials(p, q, N_TRIALS, seed=12)
    if name != "one_hot_draft":  # equal there: q one-hot makes sum p q = sum min(p, q) = p(x)
        assert (rejection[:, 1] >= 0).mean() > (out[:, 1] >= 0).mean() + 0.01


def _gumbel_coupling(p, q, n, rng):
    """The chance that Gumbel-max draws from p and from q with the same noise pick the same token,
    per row, estimated with numpy's generator (n draws)."""
    out = []
    for pi, qi in zip(p, q):
        g = rng.gumbel(size=(n, len(pi)))
        with np.errstate(divide="ignore"):
            same = np.argmax(np.log(pi) + g, axis=1) == np.argmax(np.log(qi) + g, axis=1)
        out.append(same.mean())
    return np.array(out)


@pytest.mark.parametrize("name", ["random", "random_peaked", "disjoint_supports", "one_hot_draft"])
def test_keyed_draws_are_exact_and_keep_what_gumbel_coupling_keeps(name):
    """Draws keyed by position on both sides (a new key per trial): output follows p at every
    position, and a draft is kept as often as Gumbel-max draws from p and q with shared noise agree
    (estimated independently here), between (1 - tv) / (1 + tv) and the rejection rule's sum min(p, q)."""
    p, q = CASES[name]
    out = specllama.accept_trials(p, q, N_TRIALS, seed=13, rule="keyed")
    coupling = _gumbel_coupling(p[:len(q)], q, N_TRIALS, np.random.default_rng(1))
    _check(out, p, q, overlap=coupling)
    tv = 0.5 * np.abs(p[:len(q)] - q).sum(axis=1)
    kept_first = (out[:, 1] >= 0).mean()
    assert (1 - tv[0]) / (1 + tv[0]) - 0.01 <= kept_first <= np.minimum(p[0], q[0]).sum() + 0.01


def test_keyed_draws_keep_every_draft_of_the_targets_own_distribution():
    """Where q = p the draft's keyed draw is the target's: every draft is kept (sample-and-match
    with independent draws keeps sum p^2 of them)."""
    p, q = CASES["q_equals_p"]
    out = specllama.accept_trials(p, q, 20_000, seed=14, rule="keyed")
    assert (out >= 0).all()
    _check(out, p, q, overlap=np.ones(len(q)))
    match = specllama.accept_trials(p, q, 20_000, seed=14, rule="match")
    assert (match[:, 1] >= 0).mean() < 0.5


@pytest.mark.parametrize("settings", [
    dict(temperature=1.0, top_k=5, top_p=1.0, min_p=0.0),
    dict(temperature=0.7, top_k=0, top_p=0.8, min_p=0.0),
    dict(temperature=1.3, top_k=20, top_p=0.9, min_p=0.05),
])
def test_standardized_sampling_on_both_sides(settings):
    """p and q transformed with the same top-k/top-p/min-p/temperature: output follows the
    transformed p (the distribution plain sampling with those settings draws from)."""
    rng = np.random.default_rng(3)
    vocab = 40
    logits_p = rng.normal(0, 2, size=(3, vocab)).astype(np.float32)
    logits_q = (logits_p[:2] + rng.normal(0, 1.5, size=(2, vocab))).astype(np.float32)
    p = np.stack([specllama.sampling_distribution(lp, **settings) for lp in logits_p])
    q = np.stack([specllama.sampling_distribution(lq, **settings) for lq in logits_q])
    out = specllama.accept_trials(p, q, N_TRIALS, seed=5)
    _check(out, p, q)


def _reference_distribution(logits, temperature, top_k, top_p, min_p):
    """numpy statement of llama.cpp's chain: top-k; top-p on the softmax of the tokens top-k kept;
    min-p against the most likely token; then temperature on the survivors."""
    logits = logits.astype(np.float64)
    order = np.argsort(-logits, kind="stable")
    probs = np.exp(logits - logits.max())
    keep = order[: top_k] if top_k > 0 else order
    cum = np.cumsum(probs[keep]) / probs[keep].sum()
    if top_p < 1.0:
        keep = keep[: int(np.searchsorted(cum, top_p) + 1)]
    keep = keep[probs[keep] >= min_p * probs[keep[0]]]
    out = np.zeros_like(probs)
    e = np.exp((logits[keep] - logits[keep[0]]) / temperature)
    out[keep] = e / e.sum()
    return out


@pytest.mark.parametrize("settings", [
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    dict(temperature=0.5, top_k=7, top_p=1.0, min_p=0.0),
    dict(temperature=1.0, top_k=0, top_p=0.6, min_p=0.0),
    dict(temperature=2.0, top_k=0, top_p=1.0, min_p=0.1),
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
])
def test_sampling_distribution_matches_reference(settings):
    rng = np.random.default_rng(9)
    for _ in range(20):
        logits = rng.normal(0, 3, size=500).astype(np.float32)
        got = specllama.sampling_distribution(logits, **settings)
        want = _reference_distribution(logits, **settings)
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_greedy_distribution_is_argmax():
    logits = np.array([0.1, 3.0, -1.0, 3.0], np.float32)
    got = specllama.sampling_distribution(logits, temperature=0.0)
    assert got.tolist() == [0.0, 1.0, 0.0, 0.0]  # ties go to the lowest id


def _buggy_trials(p, q, n, rng, bug):
    """numpy versions of the rule with a known bug, for the power check."""
    n_draft = q.shape[0]
    out = np.full((n, n_draft + 1), -1, np.int64)
    for t in range(n):
        for i in range(n_draft + 1):
            if i == n_draft:
                if bug != "no_bonus":
                    out[t, i] = rng.choice(len(p[i]), p=p[i])
                break
            x = rng.choice(len(q[i]), p=q[i])
            if rng.random() * q[i][x] < p[i][x]:
                out[t, i] = x
                continue
            if bug == "resample_from_p":
                out[t, i] = rng.choice(len(p[i]), p=p[i])
            else:
                r = np.maximum(p[i] - q[i], 0)
                out[t, i] = rng.choice(len(r), p=r / r.sum())
            break
    return out


@pytest.mark.parametrize("bug", ["resample_from_p", "no_bonus"])
def test_checks_catch_known_bugs(bug):
    """The same checks, at a tenth of the sample size, reject a wrong residual or a missing bonus."""
    p, q = CASES["random"]
    p64, q64 = p.astype(np.float64), q.astype(np.float64)
    p64 /= p64.sum(axis=1, keepdims=True)
    q64 /= q64.sum(axis=1, keepdims=True)
    out = _buggy_trials(p64, q64, N_TRIALS // 10, np.random.default_rng(1), bug)
    with pytest.raises(AssertionError):
        _check(out, p, q)


def test_accept_trials_rejects_bad_input():
    p = np.full((2, 4), 0.25, np.float32)
    with pytest.raises(ValueError, match="n_draft"):
        specllama.accept_trials(p, p, 10)
    with pytest.raises(ValueError, match="sums to"):
        specllama.accept_trials(np.ones((2, 4), np.float32), p[:1], 10)
