"""SpecTr's bounds and closed forms for the optimal i.i.d. multi-draft acceptance α_n (OTM-n).

Source: Sun et al. 2023 (SpecTr), Lemma 1, Lemma 3 and Appendix B. SpecTr writes p for
the *draft* and q for the *target*; here, as everywhere in specot, **p is the target and q the
draft**. α_n(p, q) is the optimum of the OTM-n transport problem for n i.i.d. drafts from q, equal
to :func:`specot.theory.optimal_acceptance` with ``law="iid"``.

* :func:`spectr_upper_bound` — Lemma 3: for any ``Ω₀ ⊆ V``,
  ``α_n ≤ Σ_{y∈Ω₀} min(p(y), 1 − (1 − q(y))^n) + Σ_{x∈V^n} min(Π_i q(x_i), Σ_{y∈S(x)∖Ω₀} p(y))``.
* :func:`kseq_lower_bound` — the acceptance of k-Seq, ``1 − (1 − β(ρ*))^n``, which Lemma 3 shows is
  at least ``(1 − (1 − 1/n)^n) ≥ 1 − 1/e`` times the optimum.
* :func:`otm_limit` — Lemma 1: α_n is non-decreasing in n with limit ``Σ_{x: q(x) > 0} p(x)``
  (= 1 when p/q is bounded).
* :func:`bernoulli_alpha`, :func:`uniform_alpha`, :func:`uniform_kseq_rho` — Appendix B closed forms.
* :func:`rrs_acceptance` — multi-round rejection sampling with replacement (SpecInfer), the
  "multi-round" curve of SpecTr Fig. 6: ``1 − Π_j (1 − Σ_x min(p_j(x), q(x)))``,
  ``p_{j+1} = norm((p_j − q)_+)`` (Hu et al. App. A).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from .optimal import _check_n, _to_prob_vector
from ..verifiers.kseq import kseq_rho

__all__ = [
    "spectr_upper_bound",
    "kseq_lower_bound",
    "kseq_guarantee_factor",
    "otm_limit",
    "bernoulli_alpha",
    "uniform_alpha",
    "uniform_kseq_rho",
    "rrs_acceptance",
    "MAX_LEMMA3_TUPLES",
]

#: Most tuples ``|V|^n`` :func:`spectr_upper_bound` enumerates for a general Ω₀.
MAX_LEMMA3_TUPLES = 2_000_000


def _pair(p: object, q: object) -> tuple[np.ndarray, np.ndarray]:
    pv = _to_prob_vector(p, "p (target probs)")
    qv = _to_prob_vector(q, "q (draft probs)")
    if pv.ndim != 1 or qv.shape != pv.shape:
        raise ValueError(f"p and q must be distributions of the same shape [V]; got {pv.shape} and {qv.shape}")
    return pv, qv


def spectr_upper_bound(p: object, q: object, n: int, omega0: object | None = None) -> float:
    """SpecTr Lemma 3 upper bound on α_n for a chosen ``Ω₀ ⊆ V``.

    Args:
        p: target ``[V]``; q: draft ``[V]``.
        n: number of i.i.d. drafts.
        omega0: bool mask ``[V]`` or token ids; ``None`` means ``Ω₀ = V`` (the second sum vanishes and
            the bound is ``Σ_y min(p(y), 1 − (1 − q(y))^n)``, cheap for any V). Any other Ω₀
            enumerates the ``|supp q|^n`` draft tuples.

    Returns:
        The bound (≥ α_n for every Ω₀).

    Raises:
        ValueError: bad probabilities, n < 1, or more than :data:`MAX_LEMMA3_TUPLES` tuples.
    """
    n = _check_n(n)
    pv, qv = _pair(p, q)
    V = pv.shape[0]
    if omega0 is None:
        mask = np.ones(V, dtype=bool)
    else:
        arr = np.asarray(omega0)
        if arr.dtype == bool:
            if arr.shape != (V,):
                raise ValueError(f"omega0 mask must have shape [{V}], got {arr.shape}")
            mask = arr
        else:
            mask = np.zeros(V, dtype=bool)
            mask[arr.astype(np.int64)] = True
    with np.errstate(divide="ignore"):
        cover = -np.expm1(n * np.log1p(-np.minimum(qv, 1.0)))  # 1 − (1 − q)^n, accurate for tiny q
    cover = np.where(qv >= 1.0, 1.0, cover)
    first = float(np.minimum(pv, cover)[mask].sum())
    if mask.all():
        return min(1.0, first)
    sup = np.flatnonzero(qv > 0)
    count = len(sup) ** n
    if count > MAX_LEMMA3_TUPLES:
        raise ValueError(
            f"Lemma 3 with a proper Ω₀ enumerates |supp q|^n = {count} tuples (> {MAX_LEMMA3_TUPLES}); "
            "use omega0=None or a smaller vocabulary"
        )
    p_out = np.where(mask, 0.0, pv)
    second = 0.0
    for tup in itertools.product(sup.tolist(), repeat=n):
        prob = float(np.prod(qv[list(tup)]))
        second += min(prob, float(p_out[list(set(tup))].sum()))
    return min(1.0, first + second)


def kseq_guarantee_factor(n: int) -> float:
    """``1 − (1 − 1/n)^n``: k-Seq reaches at least this fraction of α_n (SpecTr Lemma 3); ≥ 1 − 1/e."""
    n = _check_n(n)
    return 1.0 - (1.0 - 1.0 / n) ** n


def kseq_lower_bound(p: object, q: object, n: int) -> float:
    """k-Seq's acceptance ``1 − (1 − β(ρ*))^n`` (SpecTr Algorithm 2 / Theorem 1), a lower bound on α_n.

    ρ* is found by :func:`specot.verifiers.kseq.kseq_rho` (the verifier's own solver, so the bound and
    the verifier agree exactly).
    """
    n = _check_n(n)
    pv, qv = _pair(p, q)
    _, beta = kseq_rho(torch.from_numpy(pv)[None], torch.from_numpy(qv)[None], n)
    b = float(beta[0])
    return 1.0 - max(0.0, 1.0 - b) ** n


def otm_limit(p: object, q: object) -> float:
    """``lim_{n→∞} α_n = Σ_{x: q(x) > 0} p(x)`` (SpecTr Lemma 1; = 1 when p/q is bounded)."""
    pv, qv = _pair(p, q)
    return float(pv[qv > 0].sum())


def _check_unit(x: object, name: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a number, got {type(x).__name__}")
    v = float(x)
    if not (0.0 <= v <= 1.0):
        raise ValueError(f"{name} must lie in [0, 1], got {v}")
    return v


def bernoulli_alpha(a: float, b: float, n: int) -> float:
    """α_n for a Bernoulli draft ``q = Ber(a)`` and target ``p = Ber(b)`` (SpecTr App. B.1, eq. 10):
    ``min(b, 1 − (1 − a)^n) + min(1 − b, 1 − a^n)``."""
    a, b, n = _check_unit(a, "a (draft Bernoulli parameter)"), _check_unit(b, "b (target Bernoulli parameter)"), _check_n(n)
    return min(b, 1.0 - (1.0 - a) ** n) + min(1.0 - b, 1.0 - a**n)


def _check_ratio(r: object) -> float:
    if isinstance(r, bool) or not isinstance(r, (int, float, np.floating, np.integer)):
        raise TypeError(f"r must be a number, got {type(r).__name__}")
    v = float(r)
    if not (v >= 1.0 and math.isfinite(v)):
        raise ValueError(f"r (support ratio d / d_target) must be a finite number >= 1, got {v}")
    return v


def uniform_alpha(r: float, n: int) -> float:
    """α_n for a uniform draft ``q = U(d)`` and target ``p = U(d/r)`` (SpecTr App. B.1): ``1 − (1 − 1/r)^n``."""
    r, n = _check_ratio(r), _check_n(n)
    return 1.0 - (1.0 - 1.0 / r) ** n


def uniform_kseq_rho(r: float, n: int) -> float:
    """k-Seq's ρ* for the uniform pair of :func:`uniform_alpha`: ``r(1 − (1 − 1/r)^n)`` (App. B.2)."""
    r, n = _check_ratio(r), _check_n(n)
    return r * (1.0 - (1.0 - 1.0 / r) ** n)


def rrs_acceptance(p: object, q: object, n: int) -> float:
    """Acceptance of multi-round rejection sampling with i.i.d. drafts (SpecInfer; Hu et al. App. A):
    ``1 − Π_{j=1}^n (1 − Σ_x min(p_j(x), q(x)))`` with ``p_1 = p``, ``p_{j+1} = norm((p_j − q)_+)``."""
    n = _check_n(n)
    pj, qv = _pair(p, q)
    miss = 1.0
    for _ in range(n):
        beta = float(np.minimum(pj, qv).sum())
        miss *= max(0.0, 1.0 - beta)
        res = np.clip(pj - qv, 0.0, None)
        s = res.sum()
        if s <= 0:
            break
        pj = res / s
    return 1.0 - miss
