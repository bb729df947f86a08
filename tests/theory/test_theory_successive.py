"""Exact successive-sampling Q(H): quadrature vs enumeration, fine grids and the per-token path."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.integrate
from theory_helpers import softmax_case, successive_Q_exact

from specot.theory import SuccessivePrefixEvaluator, optimal_acceptance, successive_subset_probability
from specot.theory.successive import successive_grid


def test_subset_probability_matches_enumeration_to_1e12() -> None:
    rng = np.random.default_rng(11)
    worst = 0.0
    for _ in range(60):
        V = int(rng.integers(3, 7))
        n = int(rng.integers(2, min(V, 4) + 1))
        q = rng.dirichlet(np.full(V, float(rng.choice([0.1, 0.5, 2.0]))))
        if rng.random() < 0.3:  # zeros and ties
            q[rng.integers(V)] = 0.0
            q[0] = q[1] = max(q[0], q[1])
            q /= q.sum()
        if (q > 0).sum() < n:
            continue
        masks = np.array(list(itertools.product([False, True], repeat=V)))
        exact = np.array([successive_Q_exact(q, m, n) for m in masks])
        worst = max(worst, np.abs(successive_subset_probability(q, masks, n) - exact).max())
        order = rng.permutation(V)
        ev = SuccessivePrefixEvaluator(q[order], n)
        ks = np.arange(V + 1)
        pref = np.array([successive_Q_exact(q, np.isin(np.arange(V), order[:k]), n) for k in ks])
        worst = max(worst, np.abs(ev.evaluate(ks) - pref).max())
    assert worst < 1e-12, worst


def test_cps_formula_is_not_successive_sampling() -> None:
    q = np.array([0.6, 0.3, 0.1])
    H = np.array([True, True, False])
    # successive: P(both in {0,1}) = .6*.3/.4 + .3*.6/.7
    exact = 0.6 * 0.3 / 0.4 + 0.3 * 0.6 / 0.7
    assert successive_Q_exact(q, H, 2) == pytest.approx(exact, abs=1e-15)
    assert successive_subset_probability(q, H[None], 2)[0] == pytest.approx(exact, abs=1e-13)
    cps = (0.6 * 0.3) / (0.6 * 0.3 + 0.6 * 0.1 + 0.3 * 0.1)
    assert abs(cps - exact) > 0.01


@pytest.mark.parametrize("temperature", [0.3, 1.0])
@pytest.mark.parametrize("n", [2, 8])
def test_prefix_evaluator_on_large_vocab_vs_finer_grid_and_direct(temperature: float, n: int) -> None:
    """V = 49152: the fast (moment/Taylor) evaluator vs a grid of half the step with a longer series,
    and vs the per-token evaluation (no Taylor series) on a few prefixes."""
    rng = np.random.default_rng(int(temperature * 10) + n)
    V = 49152
    _, q = softmax_case(rng, V, temperature)
    order = rng.permutation(V)
    qs = q[order]
    ks = np.concatenate([[0, 1, V - 1, V], rng.integers(0, V + 1, 40)])
    a = SuccessivePrefixEvaluator(qs, n).evaluate(ks)
    b = SuccessivePrefixEvaluator(qs, n, h=0.1, R=28).evaluate(ks)
    assert np.abs(a - b).max() < 1e-11
    masks = np.zeros((3, V), bool)
    for i, k in enumerate(ks[4:7]):
        masks[i, order[:k]] = True
    direct = successive_subset_probability(q, masks, n)
    assert np.abs(direct - a[4:7]).max() < 1e-11


def test_quadrature_vs_adaptive_integration() -> None:
    """The trapezoid-in-log-t rule against scipy's adaptive quad on the raw integral 1 − Q(H)."""
    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.full(200, 0.3))
    H = rng.random(200) < 0.6
    n = 4
    a = q[~H].sum()
    qi = q[H]

    def integrand(t: float) -> float:
        poly = np.zeros(n)
        poly[0] = 1.0
        for x in qi:
            e = np.exp(-x * t)
            poly[1:] = poly[1:] * e + poly[:-1] * (1 - e)
            poly[0] *= e
        return a * np.exp(-a * t) * poly.sum()

    t_hi = float(successive_grid(q, n).t[-1])
    val, err = scipy.integrate.quad(integrand, 0, t_hi, epsabs=1e-14, epsrel=1e-13, limit=400, points=[1, 10, 100])
    assert err < 1e-11
    assert abs((1 - val) - successive_subset_probability(q, H[None], n)[0]) < 1e-11


def test_peaked_and_nearly_degenerate_draft() -> None:
    """Almost all mass on the top n−1 tokens: the n-th draw comes from a 1e-12 tail (t up to 1e13)."""
    V = 12
    q = np.full(V, 1e-12 / (V - 2))
    q[0], q[1] = 0.5, 0.5 - 1e-12
    q /= q.sum()
    H = np.zeros(V, bool)
    H[[0, 1, 2, 3, 4]] = True
    exact = successive_Q_exact(q, H, 3)
    assert abs(exact - 3 / 10) < 1e-9  # third draw uniform over the 10 tail tokens
    assert abs(successive_subset_probability(q, H[None], 3)[0] - exact) < 1e-11
    ev = SuccessivePrefixEvaluator(q, 3)
    assert abs(ev.evaluate(np.array([5]))[0] - exact) < 1e-11


def test_n1_and_errors() -> None:
    q = np.array([0.2, 0.8])
    assert successive_subset_probability(q, np.array([[True, False]]), 1)[0] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="at least n tokens"):
        successive_grid(np.array([1.0, 0.0, 0.0]), 2)
    with pytest.raises(ValueError, match="n >= 2"):
        SuccessivePrefixEvaluator(q, 1)


def test_wor_alpha_on_large_vocab_matches_all_prefix_scan() -> None:
    """The branch-and-bound returns the exact minimum over ALL prefixes (checked by evaluating every
    prefix of a V = 3000 case)."""
    from specot.theory.optimal import scan_order

    rng = np.random.default_rng(9)
    for temp, n in ((0.5, 3), (1.0, 8)):
        p, q = softmax_case(rng, 3000, temp)
        r = optimal_acceptance(p, q, n, "wor")
        order = scan_order(p, q)
        ev = SuccessivePrefixEvaluator(q[order], n)
        ks = np.arange(3001)
        f = np.concatenate([[0.0], np.cumsum(p[order])]) - ev.evaluate(ks)
        f[0] = f[-1] = 0.0
        assert abs(r.alpha - (1 + f.min())) < 1e-12
        assert r.evaluations < 3000
