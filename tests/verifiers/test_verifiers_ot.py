"""The optimal i.i.d. verifier ``ot``: exact by enumeration, α* at full vocabulary.

For V <= 8 and n <= 4 every draft tuple is listed with its probability; the verifier's conditional
law π(y | drafts) averaged over them must be p, and its acceptance must be the exact LP optimum of
the OT problem (HiGHS) and Hu et al.'s α* (brute force over all subsets).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from specot.laws import enumerate_draft_law, sample_drafts
from specot.theory import optimal_acceptance, optimal_acceptance_bruteforce
from specot.verifiers import DraftLaw, available_verifiers, draft_sets, get_verifier, ot_selection_law, solve_otm_lp
from specot.verifiers import ot as ot_module
from verifier_helpers import chi_square_pvalue, distributions, enumerate_emitted

LAW_TOL = 1e-10  # emitted law vs p
LP_TOL = 1e-9  # acceptance vs the HiGHS optimum (HiGHS itself is accurate to ~1e-10)
ALPHA_TOL = 1e-12  # acceptance vs the brute-force α*


def _lp_value(p: torch.Tensor, q: torch.Tensor, n: int) -> float:
    t, pr = enumerate_draft_law(q, n, DraftLaw.IID)
    masks, masses = draft_sets(t, pr, p.shape[0])
    return solve_otm_lp(p.numpy(), masks, masses).value


def _check_exact(p: torch.Tensor, q: torch.Tensor, n: int) -> float:
    """Assert the emitted law is p and the acceptance is α* (LP and brute force); return α."""
    v = get_verifier("ot")
    emitted, acc = enumerate_emitted(v, p, q, n, DraftLaw.IID)
    err = float((emitted - p).abs().max())
    assert err < LAW_TOL, f"emitted law differs from p by {err:.3g}"
    a = v.acceptance(p[None], q[None], n)
    assert a.exact
    alpha = float(a.value[0])
    assert abs(alpha - acc) < LAW_TOL, f"acceptance() {alpha} != enumerated acceptance {acc}"
    assert abs(alpha - _lp_value(p, q, n)) < LP_TOL
    assert abs(alpha - optimal_acceptance_bruteforce(p.numpy(), q.numpy(), n, "iid").alpha) < ALPHA_TOL
    return alpha


SIZES = [(V, n) for V in (2, 3, 5, 6, 8) for n in (1, 2, 3, 4) if V**n <= 4096]


@pytest.mark.parametrize("V,n", SIZES, ids=[f"V{V}-n{n}" for V, n in SIZES])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_on_random_distributions(V, n, seed):
    g = torch.Generator().manual_seed(1000 * seed + 10 * V + n)
    scale = (0.5, 2.0, 4.0)[seed]
    p = torch.softmax(scale * torch.randn(V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(scale * torch.randn(V, generator=g, dtype=torch.float64), -1)
    _check_exact(p, q, n)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@given(data=st.data())
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_exact_on_adversarial_distributions(n, data):
    """Dense, sparse, one-hot, tied and uniform p and q; q = p; disjoint supports."""
    V = data.draw(st.integers(2, 6 if n <= 3 else 5), label="V")
    p = data.draw(distributions(V), label="p")
    mode = data.draw(st.sampled_from(["indep", "equal", "disjoint", "scaled-ties"]), label="mode")
    if mode == "equal":
        q = p.clone()
    elif mode == "disjoint":
        assume(int((p > 0).sum()) < V)
        q = torch.where(p > 0, 0.0, 1.0).to(torch.float64)
        q = q / q.sum()
    elif mode == "scaled-ties":  # p/q takes few distinct values: long runs of tied ratios
        r = torch.tensor(data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=V, max_size=V)),
                         dtype=torch.float64)
        q = torch.full((V,), 1.0 / V, dtype=torch.float64)
        p = r * q / (r * q).sum()
    else:
        q = data.draw(distributions(V), label="q")
    _check_exact(p, q, n)


@pytest.mark.parametrize("V,n,seed,scale", [(40, 2, 0, 2.0), (40, 2, 1, 0.5), (64, 2, 3, 3.0), (14, 3, 2, 1.0)])
def test_exact_with_large_levels(V, n, seed, scale):
    """Correlated p and q put dozens of tokens into one level, so the emitted law is exact only if
    the shadows inside that level are (the level sizes are asserted so the test keeps its power)."""
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(V, generator=g, dtype=torch.float64)
    p = torch.softmax(z + 0.5 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(z + 0.5 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    plan = ot_module.OTPlan(p.numpy(), q.numpy(), n)
    assert int(np.diff(plan.blocks).max()) >= 14
    v = get_verifier("ot")
    emitted, acc = enumerate_emitted(v, p, q, n, DraftLaw.IID)
    assert float((emitted - p).abs().max()) < LAW_TOL
    assert abs(acc - optimal_acceptance(p.numpy(), q.numpy(), n, "iid").alpha) < ALPHA_TOL
    assert abs(float(v.acceptance(p[None], q[None], n).value[0]) - acc) < LAW_TOL


@pytest.mark.parametrize("case", ["point-masses", "disjoint", "p-equals-q", "q-support-below-n", "tiny-masses"])
def test_exact_on_named_corner_cases(case):
    d = torch.float64
    n = 3
    if case == "point-masses":
        p, q = torch.tensor([0.0, 1.0, 0.0, 0.0], dtype=d), torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=d)
    elif case == "disjoint":
        p, q = torch.tensor([0.5, 0.5, 0.0, 0.0], dtype=d), torch.tensor([0.0, 0.0, 0.3, 0.7], dtype=d)
    elif case == "p-equals-q":
        p = q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=d)
    elif case == "q-support-below-n":
        p, q = torch.tensor([0.25, 0.25, 0.25, 0.25], dtype=d), torch.tensor([0.6, 0.4, 0.0, 0.0], dtype=d)
    else:
        p = torch.tensor([1e-12, 0.3, 0.7 - 2e-12, 1e-12], dtype=d)
        q = torch.tensor([0.5, 1e-13, 0.5 - 2e-13, 1e-13], dtype=d)
    alpha = _check_exact(p, q, n)
    if case == "point-masses":
        assert alpha == pytest.approx(0.0, abs=1e-15)
    if case == "p-equals-q":
        assert alpha == pytest.approx(1.0, abs=1e-15)


def test_closed_forms_bernoulli_and_uniform():
    """SpecTr App. B: Bernoulli pairs and uniforms U(d) against U(d/r)."""
    v = get_verifier("ot")
    for a, b in [(0.3, 0.7), (0.6, 0.2), (0.1, 0.95)]:
        q = torch.tensor([[1 - a, a]], dtype=torch.float64)
        p = torch.tensor([[1 - b, b]], dtype=torch.float64)
        for n in (1, 2, 3, 5):
            expected = min(b, 1 - (1 - a) ** n) + min(1 - b, 1 - a**n)
            assert abs(float(v.acceptance(p, q, n).value[0]) - expected) < 1e-14
    for d_, r in [(12, 3), (12, 4), (6, 6)]:
        q = torch.full((1, d_), 1 / d_, dtype=torch.float64)
        p = torch.zeros(1, d_, dtype=torch.float64)
        p[0, : d_ // r] = r / d_
        for n in (2, 5, 8):
            assert abs(float(v.acceptance(p, q, n).value[0]) - (1 - (1 - 1 / r) ** n)) < 1e-13


def test_a_planted_perturbation_is_caught(monkeypatch):
    """The enumeration check fails for a construction that is off by a relative 1e-6: every shadow
    targets λ·p·(1 + 1e-6) instead of λ·p, so the selection law is no longer x = λ·p."""
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(2 * torch.randn(6, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(6, generator=g, dtype=torch.float64), -1)
    _check_exact(p, q, 3)  # the real construction passes
    step = ot_module._shadow_step

    def perturbed(free, ze, qk, yk, n):  # type: ignore[no-untyped-def]
        return step(free, ze, qk, yk * (1 + 1e-6), n)

    monkeypatch.setattr(ot_module, "_shadow_step", perturbed)
    with pytest.raises(AssertionError, match="emitted law"):
        _check_exact(p, q, 3)


def test_approximate_verifiers_stay_below_and_ot_reaches_the_optimum():
    """k-Seq and importance selection are approximate: on these cases they stay measurably below α*,
    which ot reaches (the test distinguishes an approximate construction from the exact one)."""
    g = torch.Generator().manual_seed(11)
    gaps = []
    for _ in range(4):
        p = torch.softmax(3 * torch.randn(6, generator=g, dtype=torch.float64), -1)
        q = torch.softmax(3 * torch.randn(6, generator=g, dtype=torch.float64), -1)
        alpha = _check_exact(p, q, 3)
        for name in ("kseq", "importance", "rrs"):
            a = float(get_verifier(name).acceptance(p[None], q[None], 3).value[0])
            assert a <= alpha + 1e-12
            gaps.append(alpha - a)
    assert max(gaps) > 1e-3


def test_selection_law_is_in_the_base_polytope_and_optimal():
    """x = λ·p: x(A) ≤ 1 − (1 − q(A))^n for every subset A, x(V) = 1,
    and Σ min(p, x) = α*."""
    g = torch.Generator().manual_seed(3)
    V, n = 7, 3
    for _ in range(5):
        p = torch.softmax(2 * torch.randn(1, V, generator=g, dtype=torch.float64), -1)
        q = torch.softmax(2 * torch.randn(1, V, generator=g, dtype=torch.float64), -1)
        x = ot_selection_law(p, q, n)[0].numpy()
        qq = q[0].numpy()
        masks = ((np.arange(1 << V)[:, None] >> np.arange(V)) & 1).astype(bool)
        assert np.all(masks @ x <= 1 - (1 - masks @ qq) ** n + 1e-13)
        assert abs(x.sum() - 1) < 1e-13
        alpha = optimal_acceptance(p[0].numpy(), qq, n, "iid").alpha
        assert abs(np.minimum(p[0].numpy(), x).sum() - alpha) < 1e-13


def test_n1_is_speculative_sampling():
    g = torch.Generator().manual_seed(2)
    p = torch.softmax(2 * torch.randn(4, 9, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(4, 9, generator=g, dtype=torch.float64), -1)
    d = torch.multinomial(q, 1, generator=g)
    ours = get_verifier("ot").output_distribution(p, q, d)
    spec = get_verifier("speculative").output_distribution(p, q, d)
    assert torch.allclose(ours, spec, atol=1e-14)


def test_verify_samples_the_output_distribution():
    g = torch.Generator().manual_seed(4)
    p = torch.softmax(2 * torch.randn(1, 7, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(1, 7, generator=g, dtype=torch.float64), -1)
    drafts = torch.tensor([[int(q.argmax()), int(q.argmin()), int(q.argmax())]])
    v = get_verifier("ot")
    pi = v.output_distribution(p, q, drafts)[0].numpy()
    N = 20_000
    out = v.verify(p.expand(N, -1), q.expand(N, -1), drafts.expand(N, -1), torch.Generator().manual_seed(9))
    counts = np.bincount(out.tokens.numpy(), minlength=7)
    assert chi_square_pvalue(counts, pi) > 1e-4  # deterministic under the fixed seed
    idx = out.accepted_index.numpy()
    tok = out.tokens.numpy()
    assert np.all((idx >= 0) == np.isin(tok, drafts[0].numpy()))
    assert np.all(drafts[0].numpy()[idx[idx >= 0]] == tok[idx >= 0])


def test_rows_are_independent_positions():
    """A batch of different (p, q, drafts) rows gives the row-by-row result."""
    g = torch.Generator().manual_seed(8)
    p = torch.softmax(2 * torch.randn(5, 10, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(2 * torch.randn(5, 10, generator=g, dtype=torch.float64), -1)
    d = torch.multinomial(q, 4, replacement=True, generator=g)
    v = get_verifier("ot")
    whole = v.output_distribution(p, q, d)
    for b in range(5):
        assert torch.allclose(whole[b], v.output_distribution(p[b:b + 1], q[b:b + 1], d[b:b + 1])[0], atol=0)
    acc = v.acceptance(p, q, 4).value
    for b in range(5):
        assert float(acc[b]) == pytest.approx(optimal_acceptance(p[b].numpy(), q[b].numpy(), 4, "iid").alpha, abs=1e-13)


def test_temperature_zero_accepts_the_argmax_iff_drafted():
    v = get_verifier("ot")
    assert v.argmax_at_temperature_0
    p = torch.zeros(2, 6, dtype=torch.float64)
    p[:, 3] = 1.0
    q = torch.softmax(torch.arange(6, dtype=torch.float64), -1).expand(2, -1)
    d = torch.tensor([[0, 3, 5], [0, 1, 5]])
    pi = v.output_distribution(p, q, d)
    assert torch.allclose(pi, p, atol=1e-15)
    assert torch.allclose(v.accept_probability(p, q, d), torch.tensor([1.0, 0.0], dtype=torch.float64), atol=1e-15)
    out = v.verify(p, q, d, torch.Generator().manual_seed(0))
    assert out.tokens.tolist() == [3, 3] and out.accepted_index.tolist() == [1, -1]


def test_float32_inputs():
    g = torch.Generator().manual_seed(7)
    p = torch.softmax(torch.randn(1, 6, generator=g), -1)
    q = torch.softmax(torch.randn(1, 6, generator=g), -1)
    v = get_verifier("ot")
    t, pr = enumerate_draft_law(q[0], 3, DraftLaw.IID)
    m = t.shape[0]
    pi = v.output_distribution(p.expand(m, -1), q.expand(m, -1), t)
    assert pi.dtype == torch.float32 and torch.isfinite(pi).all()
    emitted = (pr.unsqueeze(-1) * pi.double()).sum(0)
    assert float((emitted - p[0].double()).abs().max()) < 1e-6
    out = v.verify(p.expand(m, -1), q.expand(m, -1), t, torch.Generator().manual_seed(0))
    assert out.tokens.dtype == torch.int64 and out.accepted_index.dtype == torch.int64


def test_registry_law_and_errors():
    assert "ot" in available_verifiers()
    v = get_verifier("ot")
    v.check_construction(DraftLaw.IID, 4)
    v.check_construction(DraftLaw.WOR, 1)  # one draft: any single-draw law
    with pytest.raises(ValueError, match="not valid"):
        v.check_construction(DraftLaw.WOR, 2)
    p = torch.tensor([[0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    q = torch.tensor([[0.4, 0.3, 0.3, 0.0]], dtype=torch.float64)
    with pytest.raises(ValueError, match="q\\(x\\) = 0"):
        v.verify(p, q, torch.tensor([[0, 3]]))
    with pytest.raises(ValueError, match="batch"):
        v.output_distribution(p, q, torch.tensor([[0], [1]]))
    with pytest.raises(ValueError):
        v.acceptance(p, q, 0)


def _peaked(B: int, V: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random peaked target and draft: shared logits N(0, 6²) plus N(0, 1) noise each (no model)."""
    g = torch.Generator().manual_seed(seed)
    z = 6.0 * torch.randn(B, V, generator=g, dtype=torch.float64)
    p = torch.softmax(z + torch.randn(B, V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(z + torch.randn(B, V, generator=g, dtype=torch.float64), -1)
    return p, q


def test_full_vocabulary_acceptance_is_alpha_star():
    """V = 49152: acceptance() (the verifier's own λ from its minorant) within 1e-6 of specot.theory's
    α* (Hu et al.'s prefix scan), for n = 1..8."""
    V = 49152
    p, q = _peaked(2, V, 0)
    v = get_verifier("ot")
    for n in range(1, 9):
        a = v.acceptance(p, q, n)
        assert a.exact
        for b in range(2):
            alpha = optimal_acceptance(p[b].numpy(), q[b].numpy(), n, "iid").alpha
            assert abs(float(a.value[b]) - alpha) < 1e-6, (n, b, float(a.value[b]), alpha)


def test_full_vocabulary_conditional_acceptance_averages_to_alpha_star():
    """V = 49152, n = 4: the exact P(accept | drafts) of the shadow construction, averaged over 300
    sampled draft sets, agrees with α* within 5 standard errors (Rao–Blackwellised Monte Carlo;
    the false-failure rate of a 5σ bound is ~6e-7, and the seed is fixed)."""
    V, n, S = 49152, 4, 300
    p, q = _peaked(1, V, 1)
    v = get_verifier("ot")
    g = torch.Generator().manual_seed(2)
    drafts = sample_drafts(q.expand(S, -1).contiguous(), n, DraftLaw.IID, g)
    acc = v.accept_probability(p.expand(S, -1), q.expand(S, -1), drafts)
    alpha = float(v.acceptance(p, q, n).value[0])
    se = float(acc.std()) / math.sqrt(S)
    assert abs(float(acc.mean()) - alpha) <= 5 * se + 1e-12, (float(acc.mean()), alpha, se)


def _correlated(V: int, seed: int, scale: float, noise: float = 0.5) -> tuple[torch.Tensor, torch.Tensor]:
    """p and q from shared logits plus independent noise: long levels of similar ratios."""
    g = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(V, generator=g, dtype=torch.float64)
    p = torch.softmax(z + noise * torch.randn(V, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(z + noise * torch.randn(V, generator=g, dtype=torch.float64), -1)
    return p, q


def _count_group_shadows(monkeypatch) -> list[int]:  # type: ignore[no-untyped-def]
    """Route every shadow through the group construction and count its calls."""
    calls = [0]
    group = ot_module._group_shadow

    def counted(*args):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return group(*args)

    monkeypatch.setattr(ot_module, "_GROUP_MIN", -1)
    monkeypatch.setattr(ot_module, "_group_shadow", counted)
    return calls


@pytest.mark.parametrize("V,n,seed,scale", [(40, 2, 0, 2.0), (64, 2, 3, 3.0), (14, 3, 2, 1.0), (16, 3, 6, 0.5),
                                            (8, 4, 4, 1.0), (7, 4, 7, 0.3)])
def test_group_shadows_are_exact(V, n, seed, scale, monkeypatch):
    """The shadow of all tokens before a drafted one, built at once (isotonic regression with the
    level's block equation), gives the exact law: emitted law p to 1e-10, acceptance α* (HiGHS LP to
    1e-9 where it is small enough, brute force / prefix scan to 1e-12). The group path is forced
    and must have been taken."""
    p, q = _correlated(V, seed, scale)
    calls = _count_group_shadows(monkeypatch)
    v = get_verifier("ot")
    emitted, acc = enumerate_emitted(v, p, q, n, DraftLaw.IID)
    assert calls[0] > 0
    assert float((emitted - p).abs().max()) < LAW_TOL
    assert abs(acc - optimal_acceptance(p.numpy(), q.numpy(), n, "iid").alpha) < ALPHA_TOL
    if V**n <= 4096:
        assert abs(acc - _lp_value(p, q, n)) < LP_TOL


def test_a_planted_perturbation_of_the_group_shadow_is_caught(monkeypatch):
    """Enumeration fails for a group construction whose tokens get a relative 1e-6 too much w-mass."""
    p, q = _correlated(14, 2, 1.0)
    calls = _count_group_shadows(monkeypatch)
    v = get_verifier("ot")
    emitted, _ = enumerate_emitted(v, p, q, 3, DraftLaw.IID)
    assert calls[0] > 0 and float((emitted - p).abs().max()) < LAW_TOL
    group = ot_module._group_shadow
    monkeypatch.setattr(ot_module, "_group_shadow", lambda qh, yh, ze, length, n: group(qh, yh * (1 + 1e-6), ze, length, n))
    emitted, _ = enumerate_emitted(v, p, q, 3, DraftLaw.IID)
    assert float((emitted - p).abs().max()) > 1e-8


def _pieces_both_ways(plan, level: int, tokens: list[int], monkeypatch) -> list[tuple[np.ndarray, np.ndarray]]:  # type: ignore[no-untyped-def]
    """Each token's position pieces from the group construction and from one shadow at a time."""
    out = []
    for k in tokens:
        monkeypatch.setattr(ot_module, "_GROUP_MIN", -1)
        group = ot_module._LevelShadows(plan, level).get(k)
        monkeypatch.setattr(ot_module, "_GROUP_MIN", 10**9)
        seq = ot_module._LevelShadows(plan, level).get(k)
        out.append((group, seq))
    return out


@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_group_shadow_equals_one_shadow_at_a_time(n, monkeypatch):
    """V = 3000, one level of thousands of tokens: for tokens hundreds deep in the q order, the
    group construction gives the same position pieces as the token-by-token shadows to 1e-11 (the
    difference is the rounding the one-by-one steps accumulate); a construction that stops early
    (one linearised PAVA step) or perturbs a block would differ by far more."""
    p, q = _correlated(3000, 11, 1.0, noise=0.3)
    plan = ot_module.OTPlan(p.numpy(), q.numpy(), n)
    level = int(np.argmax(np.diff(plan.blocks)))
    b, e = int(plan.blocks[level]), int(plan.blocks[level + 1])
    assert e - b >= 1000
    by_q = b + np.lexsort((np.arange(b, e), -plan.qs[b:e]))
    tokens = [int(by_q[r]) for r in (0, 3, 17, 60, 250, 600)]
    for group, seq in _pieces_both_ways(plan, level, tokens, monkeypatch):
        assert group.shape == seq.shape
        assert float(np.abs(group - seq).max()) < 1e-11
    monkeypatch.setattr(ot_module, "_GROUP_MIN", -1)  # one state, continued after each group
    shared = ot_module._LevelShadows(plan, level)
    for k, (_, seq) in zip(tokens, _pieces_both_ways(plan, level, tokens, monkeypatch)):
        monkeypatch.setattr(ot_module, "_GROUP_MIN", -1)
        got = shared.get(k)
        assert got.shape == seq.shape and float(np.abs(got - seq).max()) < 1e-11
    assert shared._done == 601
    group = ot_module._group_shadow

    def shifted(*args):  # type: ignore[no-untyped-def]  # every block 1e-9 higher
        lo, hi = group(*args)
        return lo + 1e-9, hi + 1e-9

    monkeypatch.setattr(ot_module, "_group_shadow", shifted)
    group, seq = _pieces_both_ways(plan, level, [tokens[-1]], monkeypatch)[0]
    assert group.shape != seq.shape or float(np.abs(group - seq).max()) > 1e-10


def test_support_union_and_q_equals_p_are_exact():
    """Tokens outside one of the supports are solved as two aggregate tokens (q = 0 < p: never
    drafted; p = 0: always rejected), and q = p skips the sort: both exact by enumeration."""
    d = torch.float64
    cases = [
        (torch.tensor([0.0, 0.3, 0.2, 0.0, 0.1, 0.0, 0.4, 0.0], dtype=d),  # p = 0 on 0, 3, 5, 7
         torch.tensor([0.1, 0.0, 0.3, 0.2, 0.15, 0.0, 0.25, 0.0], dtype=d)),  # q = 0 on 1, 5, 7
        (torch.tensor([0.0, 0.5, 0.2, 0.3, 0.0], dtype=d), torch.tensor([0.0, 0.5, 0.2, 0.3, 0.0], dtype=d)),
        (torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=d), torch.tensor([0.0, 0.0, 1.0, 0.0], dtype=d)),  # one-hot q
        (torch.tensor([0.6, 0.4, 0.0, 0.0], dtype=d), torch.tensor([0.0, 0.0, 0.7, 0.3], dtype=d)),  # disjoint
    ]
    for p, q in cases:
        plan = ot_module.OTPlan(p.numpy(), q.numpy(), 3)
        assert plan.cid is not None
        _check_exact(p, q, 3)
    p = torch.softmax(torch.randn(7, generator=torch.Generator().manual_seed(1), dtype=d), -1)
    plan = ot_module.OTPlan(p.numpy(), p.numpy(), 3)
    assert plan.cid is None and np.array_equal(plan.order, np.arange(7)) and plan.lam_level.tolist() == [1.0]
    assert _check_exact(p, p.clone(), 3) == pytest.approx(1.0, abs=1e-15)


def test_top_k_supports_at_full_vocabulary():
    """V = 49152, top-50 p and q (float32, as a model gives them): α* from the reduced problem equals
    specot.theory's prefix scan over the full vocabulary to 1e-12, for n = 2, 4, 8."""
    p, q = _peaked(1, 49152, 3)
    p, q = p.float(), q.float()
    for t in (p, q):
        t.mul_((t >= t.topk(50, -1).values[:, -1:]).float())
        t.div_(t.sum(-1, keepdim=True))
    v = get_verifier("ot")
    pd, qd = (t[0].double().numpy() for t in (p, q))
    for n in (2, 4, 8):
        alpha = optimal_acceptance(pd / pd.sum(), qd / qd.sum(), n, "iid").alpha
        assert abs(float(v.acceptance(p, q, n).value[0]) - alpha) < 1e-12


def test_ratio_order_is_the_exact_float64_order():
    """The packed-word sort orders tokens exactly by the float64 ratio p/q (descending; q = 0 < p
    first, p = 0 last; ties by index), also where ratios collide in float32, overflow or underflow."""
    rng = np.random.default_rng(0)
    values_p = [0.0, 1e-45, 1e-30, 0.1, 0.1 + 1e-9, 0.3, 1.0]
    values_q = [0.0, 1e-45, 1e-300, 0.1, 0.2, 1.0]
    for _ in range(300):
        V = int(rng.integers(1, 40))
        p = rng.choice(values_p, size=V) * rng.choice([1.0, 1.0 + 1e-12], size=V)
        q = rng.choice(values_q, size=V)
        with np.errstate(divide="ignore", invalid="ignore"):
            key = np.where(p > 0, p / q, -1.0)
        expected = np.lexsort((np.arange(V), -key))
        assert np.array_equal(ot_module._ratio_order(p, q), expected)
