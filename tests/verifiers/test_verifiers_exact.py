"""Exactness by enumeration: every lossless verifier emits exactly p, and its acceptance() is exact.

For V <= 6 and n <= 3 we list every draft tuple with its probability (specot.drafting.
enumerate_draft_law), combine with the verifier's conditional law π(y | drafts), and compare.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from specot.laws import enumerate_draft_law
from specot.verifiers import DraftLaw, draft_sets, get_verifier, kseq_rho, solve_otm_lp
from verifier_helpers import LOSSLESS, distributions, enumerate_emitted

TOL = 1e-10


def _support(q: torch.Tensor) -> int:
    return int((q > 0).sum())


def _lp_value(p: torch.Tensor, q: torch.Tensor, n: int, law: DraftLaw) -> float:
    t, pr = enumerate_draft_law(q, n, law)
    masks, masses = draft_sets(t, pr, p.shape[0])
    return solve_otm_lp(p.numpy(), masks, masses).value


def _check(name, law, params, p, q, n):
    v = get_verifier(name, **params)
    emitted, acc = enumerate_emitted(v, p, q, n, law)
    assert float((emitted - p).abs().max()) < TOL, f"{name}/{law.value} n={n}: emitted != p"
    a = v.acceptance(p.unsqueeze(0), q.unsqueeze(0), n)
    assert a.exact
    assert abs(float(a.value[0]) - acc) < TOL, f"{name}/{law.value} n={n}: acceptance {float(a.value[0])} != {acc}"
    return acc


CASES = [(name, law, params, n) for name, law, params, ns in LOSSLESS for n in ns]
IDS = [f"{c[0]}-{c[1].value}-n{c[3]}" for c in CASES]


@pytest.mark.parametrize("name,law,params,n", CASES, ids=IDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_emitted_equals_p_random(name, law, params, n, seed):
    g = torch.Generator().manual_seed(100 * seed + n)
    V = 5 + seed % 2
    p = torch.softmax(2.5 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2.5 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    _check(name, law, params, p, q, n)


@pytest.mark.parametrize("name,law,params,n", CASES, ids=IDS)
@given(data=st.data())
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_emitted_equals_p_degenerate(name, law, params, n, data):
    """Hypothesis: dense, sparse, one-hot, tied and uniform p and q (p = q, disjoint supports, ...)."""
    V = data.draw(st.integers(2, 5), label="V")
    p = data.draw(distributions(V), label="p")
    mode = data.draw(st.sampled_from(["indep", "equal", "disjoint"]), label="mode")
    if mode == "equal":
        q = p.clone()
    elif mode == "disjoint" and _support(p) < V:
        q = torch.where(p > 0, 0.0, 1.0).to(torch.float64)
        q = q / q.sum()
    else:
        q = data.draw(distributions(V), label="q")
    assume(law == DraftLaw.IID or n == 1 or _support(q) >= n)
    _check(name, law, params, p, q, n)


def test_float32_inputs():
    g = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(1, 6, generator=g), -1)
    q = torch.softmax(torch.randn(1, 6, generator=g), -1)
    for name, law, params, ns in LOSSLESS:
        v = get_verifier(name, **params)
        n = ns[-1]
        t, pr = enumerate_draft_law(q[0], n, law)
        m = t.shape[0]
        pi = v.output_distribution(p.expand(m, -1), q.expand(m, -1), t)
        assert pi.dtype == torch.float32 and torch.isfinite(pi).all()
        emitted = (pr.unsqueeze(-1) * pi.double()).sum(0)
        assert float((emitted - p[0].double()).abs().max()) < 1e-5
        out = v.verify(p.expand(m, -1), q.expand(m, -1), t, torch.Generator().manual_seed(0))
        assert out.tokens.dtype == torch.int64 and out.accepted_index.dtype == torch.int64


@pytest.mark.parametrize("law,n", [(DraftLaw.IID, 2), (DraftLaw.IID, 3), (DraftLaw.WOR, 2), (DraftLaw.WOR, 3),
                                   (DraftLaw.GREEDY, 2), (DraftLaw.GREEDY, 3), (DraftLaw.SPECHUB, 2)])
def test_otm_acceptance_is_lp_optimum_and_dominates(law, n):
    g = torch.Generator().manual_seed(11 * n)
    for _ in range(3):
        p = torch.softmax(2 * torch.randn(5, generator=g, dtype=torch.float64), -1)
        q = torch.softmax(2 * torch.randn(5, generator=g, dtype=torch.float64), -1)
        opt = get_verifier("otm", law=law)
        a_star = float(opt.acceptance(p[None], q[None], n).value[0])
        assert abs(a_star - _lp_value(p, q, n, law)) < TOL
        _, acc = enumerate_emitted(opt, p, q, n, law)
        assert abs(acc - a_star) < TOL
        others = {DraftLaw.IID: ["kseq", "rrs"], DraftLaw.WOR: ["rrs_wor"], DraftLaw.GREEDY: ["greedy"],
                  DraftLaw.SPECHUB: ["spechub"]}[law]
        for name in others:
            a = float(get_verifier(name).acceptance(p[None], q[None], n).value[0])
            assert a <= a_star + TOL
            if name in ("greedy", "spechub"):  # Hu et al. Theorem 7: greedy verification is optimal
                assert abs(a - a_star) < TOL


def test_kseq_within_one_minus_one_over_e_of_optimum():
    g = torch.Generator().manual_seed(5)
    for n in (2, 3):
        for _ in range(5):
            p = torch.softmax(3 * torch.randn(5, generator=g, dtype=torch.float64), -1)
            q = torch.softmax(3 * torch.randn(5, generator=g, dtype=torch.float64), -1)
            a = float(get_verifier("kseq").acceptance(p[None], q[None], n).value[0])
            assert a >= (1 - (1 - 1 / n) ** n) * _lp_value(p, q, n, DraftLaw.IID) - TOL


@pytest.mark.parametrize("a,b", [(0.3, 0.7), (0.6, 0.2), (0.5, 0.5), (0.1, 0.95), (0.9, 0.05)])
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_spectr_bernoulli_closed_form(a, b, n):
    """SpecTr App. B: q = Ber(a), p = Ber(b): α_n = min(b, 1 − (1 − a)^n) + min(1 − b, 1 − a^n)."""
    q = torch.tensor([1 - a, a], dtype=torch.float64)
    p = torch.tensor([1 - b, b], dtype=torch.float64)
    expected = min(b, 1 - (1 - a) ** n) + min(1 - b, 1 - a**n)
    assert abs(_lp_value(p, q, n, DraftLaw.IID) - expected) < TOL
    assert abs(float(get_verifier("otm").acceptance(p[None], q[None], n).value[0]) - expected) < TOL


@pytest.mark.parametrize("d,r", [(6, 2), (6, 3), (6, 6), (4, 4), (12, 3), (12, 4)])
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_spectr_uniform_closed_form(d, r, n):
    """SpecTr App. B: q = U(d), p = U(d/r): α_n = 1 − (1 − 1/r)^n, attained by k-Seq with
    ρ* = r(1 − (1 − 1/r)^n)."""
    q = torch.full((1, d), 1 / d, dtype=torch.float64)
    p = torch.zeros(1, d, dtype=torch.float64)
    p[0, : d // r] = r / d
    alpha = 1 - (1 - 1 / r) ** n
    rho, _ = kseq_rho(p, q, n)
    assert abs(float(rho[0]) - r * alpha) < 1e-10
    assert abs(float(get_verifier("kseq").acceptance(p, q, n).value[0]) - alpha) < 1e-12
    if d**n <= 5000:
        assert abs(_lp_value(p[0], q[0], n, DraftLaw.IID) - alpha) < TOL


def test_kseq_rho_recomputed_per_n_and_monotone_acceptance():
    g = torch.Generator().manual_seed(3)
    p = torch.softmax(2 * torch.randn(4, 50, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(4, 50, generator=g, dtype=torch.float64), -1)
    v = get_verifier("kseq")
    prev = torch.zeros(4, dtype=torch.float64)
    for n in range(1, 9):
        rho, beta = kseq_rho(p, q, n)
        assert (rho >= 1).all() and (rho <= n).all()
        acc = 1 - (1 - beta) ** n
        assert torch.all(acc <= rho * beta + 1e-12)  # validity: p_acc <= ρβ
        a = v.acceptance(p, q, n).value
        assert torch.all(a >= prev - 1e-12)
        prev = a


def test_rrs_closed_form_and_rrs_wor_mc_agrees_with_exact():
    g = torch.Generator().manual_seed(9)
    p = torch.softmax(2 * torch.randn(2, 6, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(2, 6, generator=g, dtype=torch.float64), -1)
    v = get_verifier("rrs_wor")
    exact = v.acceptance(p, q, 3)
    mc = v.acceptance(p, q, 3, method="mc", samples=4000, generator=torch.Generator().manual_seed(1))
    assert exact.exact and not mc.exact and mc.samples == 4000
    assert torch.all(mc.stderr > 0)
    # 5 standard errors: false-failure rate ~ 6e-7 per row (deterministic under the fixed seed)
    assert torch.all((mc.value - exact.value).abs() <= 5 * mc.stderr + 1e-12)


def test_no_nan_in_zero_mass_residuals():
    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    for name, law, params, ns in LOSSLESS:
        v = get_verifier(name, **params)
        for n in ns:
            if law != DraftLaw.IID and n > 2:
                continue
            t, _ = enumerate_draft_law(p[0], n, law)
            m = t.shape[0]
            pi = v.output_distribution(p.expand(m, -1), p.expand(m, -1), t)  # p = q: residuals are empty
            assert torch.isfinite(pi).all()
            out = v.verify(p.expand(m, -1), p.expand(m, -1), t, torch.Generator().manual_seed(0))
            assert (out.accepted_index >= 0).all()
