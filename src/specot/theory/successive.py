"""Exact set probabilities of successive sampling without replacement (the ``wor`` draft law).

Successive sampling draws ``n`` distinct tokens from ``q [V]``: draft j is drawn from q
renormalised after removing drafts ``1..j−1``. This is the law of Gumbel top-k drafting and of
sequential sampling (Hu et al. 2025 §3 *define* it). We need

    Q(H) = P(all n drafts lie in H),   H ⊆ V,

for the subset-selection formula ``α* = 1 + min_H [p(H) − Q(H)]``.

**Not** ``e_n(q_H)/e_n(q_V)``: that ratio (Hu et al.'s formula) is the law of *conditional Poisson
sampling* (:mod:`specot.theory.optimal`, law ``"cps"``), a different law.

Exponential race
----------------------------
Token i arrives at ``T_i ~ Exp(q_i)``, independently; the first n arrivals, in order, are a
successive sample. With ``a = q(V∖H)``, ``c = q(H)`` and ``N_H(t)`` the number of arrivals of H by
time t (Poisson-binomial with probabilities ``1 − e^{−q_i t}``):

    1 − Q(H) = ∫_0^∞ a e^{−a t} P(N_H(t) < n) dt.

Sampling *with* replacement is the same race with H's arrivals replaced by a Poisson process of
rate c, whose integral is known in closed form (``1 − c^n``). We integrate the difference, which
is non-negative and vanishes like ``t^n`` at 0 (so no node is wasted near 0):

    Q(H) = c^n − Δ(H),   Δ(H) = ∫_0^∞ a e^{−a t} [P(N_H(t) < n) − P(Poisson(c t) < n)] dt ≥ 0.

Quadrature: the trapezoidal rule in ``s = log t`` with step ``h`` (0.25 for n ≤ 4, 0.2 above). Every term of
the integrand is ``t^j e^{−λ t}``; in ``s`` these are translates of a smooth bump whose Fourier
transform is ``Γ(j+1−iω)``, so the discretisation error is ``≈ |Γ(j+1−2πi/h)| ≈ 1e-15`` at
``h = 0.25`` (a property of the bump, not of q). The range ``[t_lo, t_hi]`` is set from proven
bounds: the integrand is ``≤ t^n/n!`` near 0 and ``≤ P(Gamma(n, λ) > t)`` with
``λ = 1 − (sum of the n−1 largest q)`` at ∞ (the n-th arrival is stochastically earlier than a
Gamma(n, λ) variable), each truncation costing ≤ 1e-14. Accuracy is *checked*, not assumed: the
tests compare with exact enumeration of all ordered draws on small vocabularies (agreement to
~1e-15) and with a finer grid and a per-token evaluation on V = 49152.

Two evaluators:

* :func:`successive_subset_probability` — any subsets ``[M, V]``; cost ``O(M·V·T·n)``.
* :class:`SuccessivePrefixEvaluator` — prefixes ``H_k`` of a fixed order (the subset-selection
  scan), any batch of k, cost independent of V per prefix after ``O(V·R)`` set-up: tokens with
  ``q_i·t_hi ≤ ρ`` ("tail") enter through prefix sums of the moments ``Σ q_i^r`` (``r ≤ R``)
  and a Taylor series of ``(e^{q t} − 1)^m`` (coefficients ``m!·S(r, m)/r!``, all positive);
  the few larger tokens ("head", at most about ``n + 50(n−1)/0.75`` of them) enter exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.special

__all__ = [
    "QuadratureGrid",
    "successive_grid",
    "successive_subset_probability",
    "default_step",
    "SuccessivePrefixEvaluator",
]

#: Truncation tolerance of each end of the integration range.
_TRUNC_EPS = 1e-14


@dataclass(frozen=True)
class QuadratureGrid:
    """Nodes and weights of the trapezoidal rule in ``log t``.

    Attributes:
        t: nodes ``[T]`` (time of the exponential race, unitless).
        w: weights ``[T]`` (``h·t``, the Jacobian of ``t = e^s`` included).
        h: the step in ``s = log t``.
    """

    t: np.ndarray
    w: np.ndarray
    h: float


def _top_mass(q: np.ndarray, k: int) -> float:
    """Sum of the ``k`` largest entries of ``q``."""
    if k <= 0:
        return 0.0
    if k >= q.shape[0]:
        return float(q.sum())
    return float(np.partition(q, q.shape[0] - k)[q.shape[0] - k :].sum())


def successive_grid(q: np.ndarray, n: int, h: float = 0.25) -> QuadratureGrid:
    """The quadrature grid for successive sampling of ``n`` drafts from ``q [V]``.

    ``t_lo`` bounds the left truncation by ``t_lo^{n+1}/(n+1)! ≤ 1e-14``; ``t_hi`` bounds the right
    one by ``(n/λ)·P(Gamma(n+1, λ) > t_hi) ≤ 1e-14`` with ``λ`` the mass outside the top n−1 tokens.

    Raises:
        ValueError: ``n < 2`` (use ``Q(H) = q(H)`` for one draft) or fewer than n tokens with q > 0.
    """
    if n < 2:
        raise ValueError(f"the quadrature is for n >= 2 drafts (n = 1 is Q(H) = q(H)); got n={n}")
    lam = float(np.sum(q)) - _top_mass(q, n - 1)
    # recompute λ as a sum of the small entries (no cancellation)
    if q.shape[0] > n - 1:
        part = np.partition(q, q.shape[0] - (n - 1))
        lam = float(part[: q.shape[0] - (n - 1)].sum())
    if not lam > 0:
        raise ValueError(f"successive sampling of n={n} drafts needs at least n tokens with q > 0")
    t_lo = (math.factorial(n + 1) * _TRUNC_EPS) ** (1.0 / (n + 1))
    target = _TRUNC_EPS * lam / n
    x = float(scipy.special.gammainccinv(n + 1, min(target, 0.5)))
    t_hi = max(x / lam, 2.0 * t_lo)
    s_lo, s_hi = math.log(t_lo), math.log(t_hi)
    count = int(math.ceil((s_hi - s_lo) / h)) + 1
    s = s_lo + h * np.arange(count, dtype=np.float64)
    t = np.exp(s)
    return QuadratureGrid(t=t, w=h * t, h=h)


def default_step(n: int) -> float:
    """Default quadrature step in ``log t``: 0.25 for n ≤ 4, 0.2 above (the ``t^j e^{−λt}`` bumps
    with larger j have a slower-decaying Fourier transform ``Γ(j+1−iω)``)."""
    return 0.25 if n <= 4 else 0.2


def _poisson_below(mu: np.ndarray, n: int) -> np.ndarray:
    """``P(Poisson(mu) < n)`` elementwise (regularised upper incomplete gamma)."""
    return scipy.special.gammaincc(n, mu)


def successive_subset_probability(q: np.ndarray, masks: np.ndarray, n: int, h: float | None = None) -> np.ndarray:
    """``Q(H) = P(all n successive draws from q lie in H)`` for each subset H.

    Args:
        q: draft distribution ``[V]`` (float64, sums to 1, at least n positive entries).
        masks: bool ``[M, V]``, one subset per row.
        n: number of drafts (≥ 1).
        h: quadrature step in ``log t`` (default :func:`default_step`).

    Returns:
        float64 ``[M]``. Per-token exact evaluation of the Poisson-binomial at every node:
        cost ``O(M·V·T·n)`` — meant for small vocabularies and for checking the fast evaluator.
    """
    q = np.asarray(q, dtype=np.float64)
    masks = np.atleast_2d(np.asarray(masks, dtype=bool))
    c = (masks * q).sum(1)  # [M]
    a = ((~masks) * q).sum(1)  # [M], summed directly (no 1 − c cancellation)
    if n == 1:
        return c
    grid = successive_grid(q, n, default_step(n) if h is None else h)
    t = grid.t  # [T]
    out = np.empty(masks.shape[0])
    for m in range(masks.shape[0]):
        qi = q[masks[m] & (q > 0)]
        # P(N_H(t) = j), j < n, by the stable convex-combination recursion, all nodes at once
        e = np.exp(-np.outer(t, qi))  # [T, |H|] not-yet-arrived probabilities
        poly = np.zeros((t.shape[0], n))
        poly[:, 0] = 1.0
        for i in range(qi.shape[0]):
            stay, come = e[:, i : i + 1], 1.0 - e[:, i : i + 1]
            poly[:, 1:] = poly[:, 1:] * stay + poly[:, :-1] * come
            poly[:, 0] *= stay[:, 0]
        below = poly.sum(1)
        diff = below - _poisson_below(c[m] * t, n)
        out[m] = c[m] ** n - float(np.sum(grid.w * a[m] * np.exp(-a[m] * t) * diff))
    return np.clip(out, 0.0, 1.0)


@lru_cache(maxsize=None)
def _series_coefficients(n: int, R: int) -> np.ndarray:
    """``C[m, r]`` with ``(e^y − 1)^m = Σ_r C[m, r] y^r`` for ``1 ≤ m < n``, ``r ≤ R``.

    ``C[m, r] = m!·S(r, m)/r!`` (Stirling numbers of the second kind), all ≥ 0.
    """
    S = np.zeros((R + 1, n + 1))
    S[0, 0] = 1.0
    for r in range(1, R + 1):
        for m in range(1, min(r, n) + 1):
            S[r, m] = m * S[r - 1, m] + S[r - 1, m - 1]
    C = np.zeros((n, R + 1))
    for m in range(1, n):
        for r in range(m, R + 1):
            C[m, r] = math.exp(math.lgamma(m + 1) - math.lgamma(r + 1)) * S[r, m]
    return C


class SuccessivePrefixEvaluator:
    """``Q(H_k)`` for prefixes ``H_k = {order[0..k−1]}`` of a fixed token order, in batches of k.

    Args:
        q_sorted: draft probabilities in scan order ``[V]`` (float64, sums to 1).
        n: drafts (≥ 2; at least n positive entries).
        h: quadrature step in ``log t`` (default :func:`default_step`).
        R: Taylor order for the tail tokens (default 16).

    Set-up cost ``O(V·R)`` plus ``O(head·T·n)``; :meth:`evaluate` costs ``O(K·T·n·(R + n))`` for
    K prefixes, independent of V. The tail split is exact up to the Taylor remainder, bounded by
    ``(mρ)^{R+1}/(R+1)!·e^{mρ}`` per token (``mρ ≤ 0.75``: < 1e-16 at R = 16).
    """

    def __init__(self, q_sorted: np.ndarray, n: int, h: float | None = None, R: int = 16) -> None:
        q = np.asarray(q_sorted, dtype=np.float64)
        if n < 2:
            raise ValueError("SuccessivePrefixEvaluator needs n >= 2 (n = 1 is Q(H) = q(H))")
        self.n, self.V, self.R = n, q.shape[0], R
        self.grid = successive_grid(q, n, default_step(n) if h is None else h)
        t = self.grid.t
        T = t.shape[0]
        t_hi = float(t[-1])
        rho = min(0.5, 0.75 / (n - 1))
        theta = rho / t_hi  # tail: q_i·t ≤ ρ at every node
        self.theta = theta
        head = q > theta
        self.head_idx = np.flatnonzero(head)
        # prefix sums: c_k = q(H_k), a_k = q(V∖H_k) (suffix sums, no cancellation)
        self.c = np.concatenate([[0.0], np.cumsum(q)])
        self.a = np.concatenate([np.cumsum(q[::-1])[::-1], [0.0]])
        self.head_count = np.concatenate([[0], np.cumsum(head)])  # heads among the first k tokens
        tail_q = np.where(head, 0.0, q)
        self.c_tail = np.concatenate([[0.0], np.cumsum(tail_q)])
        # scaled moments M[r, k] = Σ_{i<k, tail} (q_i/θ)^{r+1}, r = 0..R−1   ([R, V+1], rows contiguous)
        u = tail_q / theta
        self.M = np.zeros((R, q.shape[0] + 1))
        pw = u.copy()
        for r in range(R):
            if r:
                pw *= u
            np.cumsum(pw, out=self.M[r, 1:])
        # series matrix: P_m(k, t) = Σ_r C[m, r] (θ t)^r M[k, r]   → Cmat [R, T·(n−1)]
        C = _series_coefficients(n, R)[1:, 1:]  # [n−1, R] for m = 1..n−1, r = 1..R
        tt = (theta * t)[None, :] ** np.arange(1, R + 1)[:, None]  # [R, T]
        self.Cmat = (tt[:, :, None] * C.T[:, None, :]).reshape(R, T * (n - 1))  # [R, T·(n−1)]
        # head prefix polynomials: HP[j, t, :] = law of the count among the first j heads, truncated
        hq = q[self.head_idx]
        HP = np.zeros((hq.shape[0] + 1, T, n))
        HP[0, :, 0] = 1.0
        if hq.shape[0]:
            stay_all = np.exp(-np.outer(hq, t))  # [heads, T]
            cur = HP[0].copy()
            for j in range(hq.shape[0]):
                stay = stay_all[j][:, None]
                nxt = cur * stay
                nxt[:, 1:] += cur[:, :-1] * (1.0 - stay)
                HP[j + 1] = nxt
                cur = nxt
        self.HP = HP

    def evaluate(self, ks: np.ndarray) -> np.ndarray:
        """``Q(H_k)`` for each prefix length ``k`` in ``ks [K]`` (ints in ``[0, V]``) → ``[K]``."""
        ks = np.asarray(ks, dtype=np.int64)
        n, t, w = self.n, self.grid.t, self.grid.w
        T, K = t.shape[0], ks.shape[0]
        if K == 0:
            return np.zeros(0)
        c, a = self.c[ks], self.a[ks]
        # Σ_{tail∩H_k} x_i(t)^m, m = 1..n−1, as Σ_r M[r, k]·Cmat[r] (explicit loop: a BLAS call for
        # this small product spins threads and costs ~10 ms on a loaded 2-core machine)
        Mk = self.M[:, ks]  # [R, K]
        Pm = np.zeros((K, self.Cmat.shape[1]))
        for r in range(self.R):
            Pm += Mk[r][:, None] * self.Cmat[r][None, :]
        Pm = Pm.reshape(K, T, n - 1)
        # tail log-generating function Σ_m (−1)^{m+1} P_m z^m / m; exponentiate as a power series
        L = Pm * (((-1.0) ** np.arange(n - 1)) / np.arange(1, n))  # [K, T, n−1]
        E = np.zeros((K, T, n))
        E[:, :, 0] = 1.0
        for j in range(1, n):
            acc = np.zeros((K, T))
            for m in range(1, j + 1):
                acc += m * L[:, :, m - 1] * E[:, :, j - m]
            E[:, :, j] = acc / j
        E *= np.exp(-np.outer(self.c_tail[ks], t))[:, :, None]
        # combine with the exact head polynomial: P(N < n) = Σ_{u+v<n} head[u]·tail[v]
        Hk = self.HP[self.head_count[ks]]  # [K, T, n]
        Ecum = np.cumsum(E, axis=2)  # Ecum[..., v] = Σ_{v' ≤ v} tail[v']
        below = np.einsum("ktu,ktu->kt", Hk, Ecum[:, :, ::-1])
        diff = below - _poisson_below(np.outer(c, t), n)
        delta = np.einsum("t,kt->k", w, a[:, None] * np.exp(-np.outer(a, t)) * diff)
        return np.clip(c**n - delta, 0.0, 1.0)
