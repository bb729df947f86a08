"""The audit's statistics on synthetic laws (numpy only, no model): tests, Holm, power, recheck."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specot.audit.stats import (END, audit_exact_law, audit_two_sample, compare_greedy, detectable_tv, holm, pooled_chisquare,
                                pool_cells, recheck)

V = 6


def _markov(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A first-order Markov law on V tokens: (p0 [V], P [V, V] rows = previous token)."""
    rng = np.random.default_rng(seed)
    p0 = rng.dirichlet(np.ones(V) * 2)
    P = rng.dirichlet(np.ones(V) * 2, size=V)
    return p0, P


def _law(p0, P):
    return lambda prefixes: np.stack([p0 if not s else P[s[-1]] for s in prefixes])


def _draw(p0, P, n, k, rng, tamper=None):
    out = np.zeros((n, k), np.int64)
    out[:, 0] = rng.choice(V, n, p=p0)
    for j in range(1, k):
        for i in range(n):
            row = P[out[i, j - 1]]
            if tamper is not None and j == tamper[0]:
                row = tamper[1]
            out[i, j] = rng.choice(V, p=row)
    return out


def test_holm_matches_the_textbook_example():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_pool_cells_merges_rare_cells():
    cells = pool_cells(np.array([50.0, 2.0, 1.0, 30.0, 1.0]))
    assert [list(c) for c in cells[:1]] == [[0]]
    assert sum(len(c) for c in cells) == 5
    assert all(np.array([50.0, 2.0, 1.0, 30.0, 1.0])[c].sum() >= 5 for c in cells)


def test_exact_samples_pass_and_a_deviation_fails():
    p0, P = _markov()
    rng = np.random.default_rng(1)
    good = audit_exact_law(_draw(p0, P, 3000, 3, rng), _law(p0, P))
    assert good.exact and good.min_adjusted_pvalue > 1e-3
    assert len(good.tests) > 3 and good.positions[0].tests == 1
    bad_row = np.roll(P[0], 1)  # position 1 drawn from a wrong row
    bad = audit_exact_law(_draw(p0, P, 3000, 3, rng, tamper=(1, bad_row)), _law(p0, P))
    assert not bad.exact and bad.label == "NOT EXACT"
    assert bad.positions[1].tv_low > bad.positions[1].tv_null95


def test_a_token_outside_the_support_fails():
    p0, P = _markov()
    p0 = p0.copy()
    p0[5] = 0.0
    p0 /= p0.sum()
    s = _draw(p0, P, 500, 2, np.random.default_rng(2))
    s[0, 0] = 5
    v = audit_exact_law(s, _law(p0, P))
    assert not v.exact and v.tests[0].outside_support == 1


def test_two_sample_homogeneity():
    p0, P = _markov()
    rng = np.random.default_rng(3)
    a, b = _draw(p0, P, 3000, 3, rng), _draw(p0, P, 3000, 3, rng)
    assert audit_two_sample(a, b).exact
    c = _draw(p0, P, 3000, 3, rng, tamper=(2, np.roll(P[1], 2)))
    v = audit_two_sample(c, b)
    assert not v.exact and v.positions[2].min_adjusted_pvalue < 1e-3


def test_end_padding_is_not_tested_after_the_end():
    p0, P = _markov()
    s = _draw(p0, P, 400, 3, np.random.default_rng(4))
    s[:50, 1:] = END
    v = audit_exact_law(s, _law(p0, P))
    assert all(END not in t.prefix for t in v.tests)


def test_detectable_tv_is_detected_with_the_stated_power():
    """Simulated: a worst-case deviation of the stated TV (half the cells gain, proportionally) is
    detected in >= 85 % of 400 runs (0.9 stated, Monte-Carlo and asymptotic slack)."""
    p = np.array([0.3, 0.2, 0.2, 0.15, 0.15])
    n, level = 2000, 1e-3
    delta = detectable_tv(n, len(p) - 1, level)
    assert 0.02 < delta < 0.2
    gain = np.array([1, 1, 0, 0, 0], bool)  # P(gain) = 0.5: the least detectable split
    q = p + np.where(gain, delta * p / p[gain].sum(), -delta * p / p[~gain].sum())
    rng = np.random.default_rng(5)
    from scipy.stats import chisquare
    hits = sum(chisquare(rng.multinomial(n, q), p * n).pvalue < level for _ in range(400))
    assert hits / 400 >= 0.85
    assert detectable_tv(4 * n, len(p) - 1, level) == pytest.approx(delta / 2, rel=1e-3)


def test_false_failure_rate_is_at_most_alpha():
    """200 exact runs at alpha = 0.05: the family-wise false-failure rate stays below 0.1."""
    p0, P = _markov(7)
    rng = np.random.default_rng(8)
    fails = sum(not audit_exact_law(_draw(p0, P, 400, 2, rng), _law(p0, P), alpha=0.05, n_boot=0).exact
                for _ in range(200))
    assert fails / 200 <= 0.1


def test_recheck_recomputes_the_verdict_from_json():
    p0, P = _markov()
    v = audit_exact_law(_draw(p0, P, 2000, 3, np.random.default_rng(9), tamper=(1, np.roll(P[0], 1))), _law(p0, P))
    again = recheck(json.loads(json.dumps(v.to_dict())))
    assert again.exact == v.exact is False
    assert again.min_adjusted_pvalue == pytest.approx(v.min_adjusted_pvalue)
    assert recheck(v.to_dict(), alpha=1e-300).min_adjusted_pvalue == pytest.approx(v.min_adjusted_pvalue)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match=r"\[n, k\]"):
        audit_exact_law(np.zeros(5, np.int64), lambda s: None)
    with pytest.raises(ValueError, match="alpha"):
        audit_two_sample(np.zeros((3, 2), np.int64), np.zeros((3, 2), np.int64), alpha=2)
    with pytest.raises(ValueError, match="probability rows"):
        audit_exact_law(np.zeros((3, 2), np.int64), lambda s: np.ones((len(s), 3)))


def test_compare_greedy_labels():
    same = compare_greedy([[1, 2, 3]], [[1, 2, 3]], None, 1e-3)
    assert same.label == "exact"
    tie = compare_greedy([[1, 2, 4]], [[1, 2, 3]], lambda i, pre, a, b: 1e-5, 1e-3)
    assert tie.label == "near-tie" and tie.differences[0]["position"] == 2
    assert compare_greedy([[1, 5, 4]], [[1, 2, 3]], lambda i, pre, a, b: 0.7, 1e-3).label == "NOT EXACT"
    assert compare_greedy([[1, 5]], [[1, 2]], None, 1e-3).label == "NOT EXACT"


def test_pooled_chisquare_pools_rare_cells():
    from scipy.stats import chisquare

    obs, probs = [50, 30, 15, 3, 2], [0.5, 0.3, 0.15, 0.03, 0.02]
    stat, dof, pv = pooled_chisquare(obs, probs, merge_rest=False)  # rest 3 + 2 pooled: expected 5
    assert dof == 3 and pv == pytest.approx(chisquare([50, 30, 15, 5], [50, 30, 15, 5]).pvalue)
    assert pooled_chisquare([98, 1, 1], [0.98, 0.01, 0.01])[1] == 0  # one cell left: nothing to test
