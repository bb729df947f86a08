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


def _two_token_law(W: int = 12, seed: int = 10):
    """First token uniform over W tokens (W prefixes at position 1), second token from P[W, W]."""
    P = np.random.default_rng(seed).dirichlet(np.ones(W) * 3, size=W)
    return np.full(W, 1.0 / W), P


def _draw_rows(p0, P, n, rng):
    """[n, 2] samples, vectorised: position 1 by inverse CDF of each sample's row of P."""
    first = rng.choice(len(p0), n, p=p0)
    cdf = np.cumsum(P[first], axis=1)
    second = np.minimum((rng.random((n, 1)) > cdf).sum(1), len(p0) - 1)
    return np.stack([first, second], 1).astype(np.int64)


def test_the_position_test_pools_every_prefix_and_has_its_stated_power():
    """A deviation spread over all 12 prefixes of position 1 — each conditional law moved by the
    position test's detectable TV in the least detectable direction (half the mass gains,
    proportionally) — is caught in >= 80 % of 100 simulated audits (0.9 stated; the Monte-Carlo
    false-failure rate of this check is about 0.2 %), while each per-prefix test alone (1/12 of the
    samples) states a TV more than twice as large."""
    p0, P = _two_token_law()
    n = 3000
    law = lambda pre: np.stack([p0 if not s else P[s[-1]] for s in pre])  # noqa: E731
    rng = np.random.default_rng(11)
    exact = audit_exact_law(_draw_rows(p0, P, n, rng), law, n_boot=0)
    pos = exact.positions[1]
    assert exact.exact and pos.coverage == 1.0
    pooled = [t for t in exact.tests if t.position == 1 and t.group_sizes]
    assert len(pooled) == 1 and len(pooled[0].group_prefixes) == 12 and pos.detectable_tv == pooled[0].detectable_tv
    single = min(t.detectable_tv for t in exact.tests if t.position == 1 and not t.group_sizes)
    assert single > 2 * pos.detectable_tv
    delta = pos.detectable_tv
    Q = np.empty_like(P)
    for i, row in enumerate(P):
        gain = np.zeros(len(row), bool)
        gain[np.argsort(-row)[::2]] = True  # about half the mass
        Q[i] = row + np.where(gain, delta * row / row[gain].sum(), -delta * row / row[~gain].sum())
    assert np.allclose(0.5 * np.abs(Q - P).sum(1), delta) and (Q >= 0).all()
    hits = sum(not audit_exact_law(_draw_rows(p0, Q, n, rng), law, n_boot=0).exact for _ in range(100))
    assert hits >= 80


def test_two_sample_position_test_and_recheck_of_grouped_tests():
    p0, P = _two_token_law()
    rng = np.random.default_rng(12)
    a, b = _draw_rows(p0, P, 3000, rng), _draw_rows(p0, P, 3000, rng)
    v = audit_two_sample(a, b, n_boot=0)
    pooled = [t for t in v.tests if t.group_sizes]
    assert v.exact and len(pooled) == 1 and pooled[0].dof == sum(s - 1 for s in pooled[0].group_sizes)
    assert v.positions[1].detectable_tv == pooled[0].detectable_tv < 0.2
    Q = np.roll(P, 1, axis=1)
    bad = audit_two_sample(_draw_rows(p0, Q, 3000, rng), b)
    again = recheck(json.loads(json.dumps(bad.to_dict())))
    assert not bad.exact and not again.exact
    assert again.min_adjusted_pvalue == pytest.approx(bad.min_adjusted_pvalue)
    assert again.positions[1].coverage == pytest.approx(bad.positions[1].coverage)


class _MarkovEngine:
    """A fake engine with an exact law (``Adapter``'s interface): a Markov chain on V tokens."""

    engine, method, has_law, near_tie = "markov", "plain", True, 0.0

    def __init__(self, p0, P):
        self.p0, self.P, self.drawn = p0, P, []

    def sample_first_tokens(self, prompt_ids, k, n_samples, sampling, seed):
        self.drawn.append((n_samples, seed))
        return _draw_rows(self.p0, self.P, n_samples, np.random.default_rng(seed))[:, :k]

    def target_law(self, prompt_ids, prefixes, sampling):
        return np.stack([self.p0 if not s else self.P[s[-1]] for s in prefixes])


def test_a_target_tv_sizes_the_audit_from_a_pilot_set_aside():
    from specot.audit.run import audit_sampling
    from specot.audit.stats import samples_for_tv
    from specot.sampling import SamplingConfig

    p0, P = _two_token_law()
    eng = _MarkovEngine(p0, P)
    row = audit_sampling(eng, SamplingConfig(1.0), [1], k=2, samples=1000, target_tv=0.06, seed=3)
    (pilot_n, pilot_seed), (n, seed) = eng.drawn
    assert pilot_n == row.pilot_samples == 1000 and pilot_seed != seed == 3  # the pilot is another sample
    assert n == row.verdict.n > 1000 and row.verdict.exact
    assert row.verdict.position_tv <= 0.06 * 1.02  # the prediction reached (1/sqrt(n) at fixed cells)
    assert samples_for_tv(row.verdict, 0.5) == row.verdict.n  # never fewer than already drawn
    capped = audit_sampling(_MarkovEngine(p0, P), SamplingConfig(1.0), [1], k=2, samples=1000, target_tv=0.01,
                            max_samples=5000)
    assert capped.verdict.n == 5000 and capped.verdict.position_tv > 0.01
    with pytest.raises(ValueError, match="target TV"):
        samples_for_tv(row.verdict, 1.5)


def test_a_one_token_law_is_covered_without_power_and_fails_on_any_other_token():
    p0, P = _two_token_law()
    P = P.copy()
    P[0] = np.eye(len(p0))[3]  # after token 0 the law is token 3 alone
    law = lambda pre: np.stack([p0 if not s else P[s[-1]] for s in pre])  # noqa: E731
    s = _draw_rows(p0, P, 3000, np.random.default_rng(13))
    v = audit_exact_law(s, law, n_boot=0)
    pooled = next(t for t in v.tests if t.group_sizes)
    behind0 = int((s[:, 0] == 0).sum())
    assert v.exact and v.positions[1].coverage == 1.0 and (0,) in pooled.group_prefixes
    assert pooled.n_eff == len(s) - behind0
    s[np.flatnonzero(s[:, 0] == 0)[0], 1] = 4
    assert not audit_exact_law(s, law, n_boot=0).exact
