"""SpecTr bounds / closed forms and the Leviathan speedup model."""

from __future__ import annotations

import numpy as np
import pytest
from theory_helpers import random_pair

from specot.theory import (
    bernoulli_alpha,
    block_efficiency,
    block_walltime_improvement,
    expected_tokens,
    improvement_lower_bound,
    kseq_guarantee_factor,
    kseq_lower_bound,
    operations_factor,
    optimal_acceptance,
    optimal_gamma,
    otm_limit,
    rrs_acceptance,
    spectr_upper_bound,
    tree_acceptance_rates,
    uniform_alpha,
    uniform_kseq_rho,
    walltime_improvement,
)


@pytest.mark.parametrize("a", [0.0, 0.1, 0.25, 0.6, 1.0])
@pytest.mark.parametrize("b", [0.0, 0.05, 0.25, 0.5, 0.9, 1.0])
def test_bernoulli_closed_form_equals_subset_selection(a: float, b: float) -> None:
    for n in (1, 2, 3, 6):
        got = optimal_acceptance(np.array([1 - b, b]), np.array([1 - a, a]), n, "iid").alpha
        assert abs(got - bernoulli_alpha(a, b, n)) < 1e-12


def test_uniform_closed_forms() -> None:
    d = 120
    for dp in (10, 30, 60, 120):
        r = d / dp
        p = np.zeros(d)
        p[:dp] = 1 / dp
        q = np.full(d, 1 / d)
        for n in (1, 2, 5):
            a = uniform_alpha(r, n)
            assert abs(optimal_acceptance(p, q, n, "iid").alpha - a) < 1e-12
            assert abs(kseq_lower_bound(p, q, n) - a) < 1e-10  # k-Seq is optimal here (App. B.2)
            omega0 = np.arange(dp, d)  # tokens outside the target support: Lemma 3 is tight
            assert abs(spectr_upper_bound(p, q, n, omega0) - a) < 1e-12 if n <= 2 else True
        assert uniform_kseq_rho(r, 3) == pytest.approx(r * (1 - (1 - 1 / r) ** 3))


def test_lemma3_sandwich_and_lemma1_monotone_limit() -> None:
    rng = np.random.default_rng(8)
    for _ in range(40):
        V = int(rng.integers(2, 6))
        p, q = random_pair(rng, V)
        prev = 0.0
        for n in (1, 2, 3):
            a = optimal_acceptance(p, q, n, "iid").alpha
            assert a >= prev - 1e-12  # Lemma 1: monotone in n
            prev = a
            ub_all = spectr_upper_bound(p, q, n)
            omega = rng.random(V) < 0.5
            ub = spectr_upper_bound(p, q, n, omega)
            lb = kseq_lower_bound(p, q, n)
            assert lb - 1e-9 <= a <= min(ub, ub_all) + 1e-12
            assert lb >= kseq_guarantee_factor(n) * a - 1e-9  # Lemma 3 lower guarantee
            assert rrs_acceptance(p, q, n) <= a + 1e-12
        lim = otm_limit(p, q)
        assert optimal_acceptance(p, q, 60, "iid").alpha <= lim + 1e-12
    # the limit is approached
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.1, 0.1, 0.0, 0.8])
    assert otm_limit(p, q) == pytest.approx(0.8)
    assert optimal_acceptance(p, q, 200, "iid").alpha == pytest.approx(0.8, abs=1e-6)


def test_rrs_matches_the_verifier() -> None:
    import torch

    from specot.verifiers import get_verifier

    rng = np.random.default_rng(2)
    p, q = rng.dirichlet(np.ones(30)), rng.dirichlet(np.ones(30))
    v = get_verifier("rrs").acceptance(torch.from_numpy(p)[None], torch.from_numpy(q)[None], 4)
    assert abs(float(v.value[0]) - rrs_acceptance(p, q, 4)) < 1e-12


def test_speedup_formulas() -> None:
    assert expected_tokens(0.8, 3) == pytest.approx((1 - 0.8**4) / 0.2)
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.0, 5) == 1.0
    assert np.allclose(expected_tokens(np.array([0.5, 1.0]), 2), [1.75, 3.0])
    assert walltime_improvement(0.8, 3, 0.1) == pytest.approx((1 - 0.8**4) / (0.2 * 1.3))
    assert operations_factor(0.8, 3, 0.05) == pytest.approx(0.2 * (3 * 0.05 + 3 + 1) / (1 - 0.8**4))
    assert improvement_lower_bound(0.8, 0.1) == pytest.approx(1.8 / 1.1)
    assert walltime_improvement(0.8, 1, 0.1) == pytest.approx(improvement_lower_bound(0.8, 0.1))
    opt = optimal_gamma(0.8, 0.1)
    imps = [walltime_improvement(0.8, g, 0.1) for g in range(0, 200)]
    assert opt.gamma == int(np.argmax(imps)) and opt.improvement == pytest.approx(max(imps))
    assert opt.improvement >= improvement_lower_bound(0.8, 0.1)
    assert optimal_gamma(0.1, 0.5).gamma == 0  # alpha < c: do not speculate


def test_block_efficiency() -> None:
    a = 0.7
    assert block_efficiency(np.full(4, a)) == pytest.approx(expected_tokens(a, 4))
    assert block_efficiency([1.0, 1.0, 0.0]) == pytest.approx(3.0)
    batch = block_efficiency(np.array([[0.5, 0.5], [1.0, 1.0]]))
    assert np.allclose(batch, [1.75, 3.0])
    rates = tree_acceptance_rates([4, 2, 1], [0.5, 0.7, 0.8, 0.9])
    assert np.allclose(rates, [0.9, 0.7, 0.5])
    assert block_efficiency(rates) == pytest.approx(1 + 0.9 + 0.9 * 0.7 + 0.9 * 0.7 * 0.5)
    assert block_walltime_improvement(rates, 0.1) == pytest.approx(block_efficiency(rates) / 1.3)
    rates2 = tree_acceptance_rates([2, 2], lambda n: 0.5 + 0.1 * n)
    assert np.allclose(rates2, [0.7, 0.7])


@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda: expected_tokens(1.2, 3), ValueError),
        (lambda: expected_tokens(0.5, -1), ValueError),
        (lambda: expected_tokens(0.5, 1.5), TypeError),
        (lambda: walltime_improvement(0.5, 2, -0.1), ValueError),
        (lambda: block_efficiency(0.5), ValueError),
        (lambda: block_efficiency([0.5, np.nan]), ValueError),
        (lambda: tree_acceptance_rates([0, 2], [0.5, 0.6]), ValueError),
        (lambda: tree_acceptance_rates([3], [0.5, 0.6]), ValueError),
        (lambda: bernoulli_alpha(1.5, 0.5, 2), ValueError),
        (lambda: uniform_alpha(0.5, 2), ValueError),
        (lambda: spectr_upper_bound(np.full(40, 1 / 40), np.full(40, 1 / 40), 5, np.arange(3)), ValueError),
        (lambda: optimal_gamma(0.5, 0.1, max_gamma=0), ValueError),
    ],
)
def test_bad_inputs(call, exc) -> None:  # noqa: ANN001
    with pytest.raises(exc):
        call()
