"""The full-vocabulary plan of ``ot`` and its shortcuts: each against the plain computation it stands for.

The plan finds a drafted token's sorted index by a binary search in the sorted words (no inverse
permutation), computes λ of a level only when asked, sums suffixes with torch's scan, runs scipy's
PAVA kernel without its wrapper, and a shadow step's root search stops on a two-cycle at the noise
of its function. Each is checked exactly (bit for bit where the computation is the same) against
the direct form, on crafted float32 ties, partial supports and q = p, and by enumeration where
the order has float32 ties that the float64 ratios break.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
import torch

from specot.laws import sample_drafts
from specot.theory import optimal_acceptance_bruteforce
from specot.verifiers import DraftLaw, get_verifier
from specot.verifiers import ot as ot_module
from specot.verifiers import ot_vocab
from verifier_helpers import enumerate_emitted


def _tied(V: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """p, q whose ratios p/q collide in float32 but not in float64 (runs of near-ties), with a few
    tokens outside one of the supports."""
    rng = np.random.default_rng(seed)
    q = rng.random(V) + 0.05
    r = rng.choice([0.5, 1.0, 2.0], size=V) * (1.0 + rng.choice([0.0, 1e-12, 3e-12, -2e-12], size=V))
    p = q * r
    return p / p.sum(), q / q.sum()


@pytest.mark.parametrize("seed", range(6))
def test_sorted_index_is_the_inverse_permutation(seed):
    """The binary search in the sorted words gives the inverse of the order for every token, also
    inside float32 tie runs re-sorted by the float64 ratio, with the supports reduced, and for q = p."""
    p, q = _tied(3000, seed)  # above the size where the inverse permutation is used directly
    if seed % 2:
        p[:7] = 0.0
        q[7:11] = 0.0
        p, q = p / p.sum(), q / q.sum()
    cases = [(p, q), (p, p.copy())]
    for pp, qq in cases:
        plan = ot_module.OTPlan(pp, qq, 3)
        inv = np.empty_like(plan.order)
        inv[plan.order] = np.arange(plan.order.size)
        tokens = np.arange(pp.size)
        expected = inv[tokens if plan.cid is None else plan.cid[tokens]]
        assert np.array_equal(plan.sorted_index(tokens), expected)
        assert plan.order.size > 1024
    plan = ot_module.OTPlan(p, q, 3)
    key = np.where(plan.qs > 0, plan.ps / np.where(plan.qs > 0, plan.qs, 1.0), np.inf)
    f32 = key.astype(np.float32)
    assert bool(np.any((f32[1:] == f32[:-1]) & (key[1:] != key[:-1])))  # the re-sorted runs are exercised


def test_lambda_on_demand_equals_every_level():
    """λ of a level asked for alone is bit for bit the one of the whole-plan computation."""
    g = torch.Generator().manual_seed(0)
    z = 3.0 * torch.randn(5000, generator=g, dtype=torch.float64)
    p = torch.softmax(z, -1).numpy()
    q = torch.softmax(z + torch.randn(5000, generator=g, dtype=torch.float64), -1).numpy()
    lone = ot_module.OTPlan(p, q, 4)
    levels = np.arange(lone.blocks.size - 1)
    one_by_one = np.array([lone.level_lam(np.array([lv]))[0] for lv in levels[::-1]])[::-1]
    every = ot_module.OTPlan(p, q, 4).lam_level
    assert levels.size > 100 and np.array_equal(one_by_one, every)


def test_suffix_sums_and_pava_are_the_plain_computations():
    """torch's scan gives numpy's sequential suffix sums bit for bit; the PAVA kernel gives
    ``scipy.optimize.isotonic_regression``'s fit and blocks (increasing and decreasing)."""
    rng = np.random.default_rng(1)
    x = rng.random(20000) ** 6
    expected = np.zeros(x.size + 1)
    np.cumsum(x[::-1], out=expected[-2::-1])
    assert np.array_equal(ot_vocab.suffix_sums(x), expected)
    for increasing in (True, False):
        y, w = rng.normal(size=3000), rng.random(3000) + 0.1
        ref = scipy.optimize.isotonic_regression(y, weights=w, increasing=increasing)
        fit, blocks = ot_vocab.isotonic(y.copy(), w.copy(), increasing)
        assert np.array_equal(fit, ref.x) and np.array_equal(blocks, ref.blocks)


@pytest.mark.parametrize("n", [2, 3])
def test_exact_with_float32_ties(n):
    """Enumeration on 6 tokens whose ratios tie in float32 (broken in float64), some drafted tokens
    inside the re-sorted runs: the emitted law is p and the acceptance α* (brute force)."""
    p, q = _tied(6, 3)
    pt, qt = torch.from_numpy(p), torch.from_numpy(q)
    emitted, acc = enumerate_emitted(get_verifier("ot"), pt, qt, n, DraftLaw.IID)
    assert float((emitted - pt).abs().max()) < 1e-12
    assert abs(acc - optimal_acceptance_bruteforce(p, q, n, "iid").alpha) < 1e-12


def test_shadow_step_root_search_ends_on_noise_cycles(monkeypatch):
    """V = 49152, top-50 supports (where Newton cycled between neighbouring floats): every shadow
    step's root search ends within 60 evaluations, at a root whose residual is at float64 noise."""
    g = torch.Generator().manual_seed(3)
    z = 3.0 * torch.randn(1, 49152, generator=g)
    p, q = torch.softmax(z, -1), torch.softmax(z + torch.randn(1, 49152, generator=g), -1)
    for t in (p, q):
        t.mul_((t >= t.topk(50, -1).values[:, -1:]).float())
        t.div_(t.sum(-1, keepdim=True))
    counts: list[int] = []
    residuals: list[float] = []
    solve = ot_module._solve_increasing

    def counted(f, fp, lo, hi, t):  # type: ignore[no-untyped-def]
        calls = [0]

        def fc(x: float) -> float:
            calls[0] += 1
            return f(x)

        root = solve(fc, fp, lo, hi, t)
        counts.append(calls[0])
        residuals.append(abs(f(root)) / max(abs(f(lo)), abs(f(hi)), 1e-300))
        return root

    monkeypatch.setattr(ot_module, "_solve_increasing", counted)
    v = get_verifier("ot")
    for _ in range(40):
        d = sample_drafts(q, 4, DraftLaw.IID, g)
        v.output_distribution(p, q, d)
    assert counts and max(counts) <= 60
    assert max(residuals) < 1e-12


def test_work_arrays_are_reused_only_when_free():
    """A work array comes back for its slot once nothing holds it, and never while something does."""
    a = ot_vocab.work_array("test-slot", 1000, np.float64)
    a_base = a.base
    a[:] = 1.0
    b = ot_vocab.work_array("test-slot", 1000, np.float64)
    assert not np.shares_memory(a, b)  # `a` is held: a new array
    del a, b
    c = ot_vocab.work_array("test-slot", 500, np.float64)
    assert np.shares_memory(c, c.base) and c.base is not a_base  # the slot now holds b's array
    del c
    d = ot_vocab.work_array("test-slot", 500, np.float64)
    e = ot_vocab.work_array("test-slot", 500, np.float64)
    assert not np.shares_memory(d, e)


def test_plans_alive_together_keep_their_arrays():
    """Plans built while others are alive (and verifier calls in between) keep their own arrays:
    every array and law of the first plan equals a plan of the same inputs built afterwards."""
    g = torch.Generator().manual_seed(5)
    rows = []
    for _ in range(3):
        z = 3.0 * torch.randn(2000, generator=g, dtype=torch.float64)
        rows.append((torch.softmax(z, -1), torch.softmax(z + torch.randn(2000, generator=g, dtype=torch.float64), -1)))
    first = ot_module.OTPlan(rows[0][0].numpy(), rows[0][1].numpy(), 4)
    res_first = first.residual
    keep = [first.order.copy(), first.ps.copy(), first.Z.copy(), first.ym.copy(), res_first.copy()]
    others = [ot_module.OTPlan(p.numpy(), q.numpy(), 4) for p, q in rows[1:]]
    v = get_verifier("ot")
    for p, q in rows[1:]:
        d = sample_drafts(q[None], 4, DraftLaw.IID, g)
        v.verify(p[None], q[None], d, g)
        v.output_distribution(p[None], q[None], d)
    again = ot_module.OTPlan(rows[0][0].numpy(), rows[0][1].numpy(), 4)
    for x, y in zip(keep, [first.order, first.ps, first.Z, first.ym, res_first]):
        assert np.array_equal(x, y)
    for x, y in zip(keep, [again.order, again.ps, again.Z, again.ym, again.residual]):
        assert np.array_equal(x, y)
    assert not np.shares_memory(first.ps, others[0].ps) and not np.shares_memory(first.ps, again.ps)


@pytest.mark.parametrize("kind", ["real", "uniform-q", "near-one"])
def test_residual_from_the_head_equals_the_full_formula(kind):
    """The residual computed from the levels before PAVA's means reach 1 (λ asked for only there) is
    bit for bit ``norm(p·(1 − λ)_+)`` with λ of every level, also when many λ lie within 1e-9 of 1."""
    g = torch.Generator().manual_seed(7)
    V = 20000
    z = 3.0 * torch.randn(V, generator=g, dtype=torch.float64)
    p = torch.softmax(z, -1)
    if kind == "real":
        q = torch.softmax(z + torch.randn(V, generator=g, dtype=torch.float64), -1)
    elif kind == "uniform-q":
        q = torch.full((V,), 1.0 / V, dtype=torch.float64)
    else:
        q = p * (1.0 + 1e-10 * torch.randn(V, generator=g, dtype=torch.float64))
        q = q / q.sum()
    for n in (2, 4):
        plan = ot_module.OTPlan(p.numpy(), q.numpy(), n)
        got = plan.residual.copy()
        assert plan._lam_level is None  # λ of the head levels only
        lam = ot_module.OTPlan(p.numpy(), q.numpy(), n).lam
        res = plan._p * np.clip(1.0 - lam, 0.0, None)
        expected = res / res.sum() if res.sum() > 0 else plan._p
        assert np.array_equal(got, expected)
