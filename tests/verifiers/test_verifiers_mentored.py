"""Mentored decoding: KL(p ‖ π) <= D(1 + tol), acceptance >= speculative sampling, D = 0 exact."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specot.verifiers import get_verifier
from verifier_helpers import distributions, enumerate_emitted


def _kl(p: torch.Tensor, pi: torch.Tensor) -> float:
    m = p > 0
    return float((p[m] * (p[m].log() - pi[m].log())).sum()) if bool((pi[m] > 0).all()) else float("inf")


@given(data=st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_kl_bound_and_acceptance(data):
    V = data.draw(st.integers(2, 6))
    p = data.draw(distributions(V))
    q = data.draw(distributions(V))
    D = data.draw(st.sampled_from([0.0, 1e-3, 0.01, 0.1, 0.5, 2.0]))
    v = get_verifier("mentored", D=D, tol=1e-3)
    emitted, acc = enumerate_emitted(v, p, q, 1, "iid")
    kl = _kl(p, emitted)
    assert kl <= D * (1 + 1e-3) + 1e-12
    assert abs(float(v.kl_to_target(p[None], q[None])[0]) - kl) < 1e-9 or kl == float("inf")
    a = float(v.acceptance(p[None], q[None], 1).value[0])
    assert abs(a - acc) < 1e-10
    spec = float(torch.minimum(p, q).sum())
    assert a >= spec - 1e-12
    if D == 0:
        assert float((emitted - p).abs().max()) < 1e-10 and abs(a - spec) < 1e-12


def test_d_zero_is_speculative_sampling():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(2 * torch.randn(4, 7, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(4, 7, generator=g, dtype=torch.float64), -1)
    d = torch.multinomial(q, 1, generator=g)
    m, s = get_verifier("mentored", D=0.0), get_verifier("speculative")
    assert torch.allclose(m.output_distribution(p, q, d), s.output_distribution(p, q, d), atol=1e-14)
    u = torch.rand(4, 2, generator=g, dtype=torch.float64)
    ref = s.verify(p, q, d, torch.Generator().manual_seed(5))
    assert m.lossless and m.verify(p, q, d, uniforms=u).tokens.shape == ref.tokens.shape


def test_bisection_reaches_the_budget_and_accept_all():
    g = torch.Generator().manual_seed(1)
    p = torch.softmax(2 * torch.randn(3, 40, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(3, 40, generator=g, dtype=torch.float64), -1)
    D = 0.05
    sol = get_verifier("mentored", D=D, tol=1e-3).solve(p, q)
    assert torch.all(sol.kl <= D * (1 + 1e-3)) and torch.all(sol.kl >= D * (1 - 1e-3))
    # a large budget accepts every draft: π = q, acceptance 1
    big = get_verifier("mentored", D=100.0)
    assert torch.allclose(big.acceptance(p, q, 1).value, torch.ones(3, dtype=torch.float64))
    # more budget, more acceptance
    a1 = get_verifier("mentored", D=0.01).acceptance(p, q, 1).value
    a2 = get_verifier("mentored", D=0.1).acceptance(p, q, 1).value
    assert torch.all(a2 >= a1 - 1e-12)


def test_target_mass_outside_draft_support():
    p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    q = torch.tensor([[0.6, 0.4, 0.0]], dtype=torch.float64)  # q = 0 where p > 0: KL(p‖q) = ∞
    v = get_verifier("mentored", D=0.05)
    emitted, _ = enumerate_emitted(v, p[0], q[0], 1, "iid")
    assert torch.isfinite(emitted).all() and _kl(p[0], emitted) <= 0.05 * (1 + 1e-3)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_budget(bad):
    with pytest.raises(ValueError, match="D"):
        get_verifier("mentored", D=bad)
