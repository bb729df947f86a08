"""Optimal multi-draft acceptance α* by subset selection (Hu et al. 2025).

For any joint law of the ``n`` drafts, LP duality and total unimodularity give

    α*(p, P_draft) = 1 + min_{H ⊆ V} [ P(H) − Q(H) ],   P(H) = Σ_{i∈H} p(i),
                                                        Q(H) = P_draft(all n drafts lie in H).

α* is the acceptance of the best possible *lossless* verifier for that draft law (the OTM-n
optimum of SpecTr for the i.i.d. law). Laws (``law=``):

* ``"iid"`` — with replacement, ``Q(H) = q(H)^n``.
* ``"wor"`` — successive sampling without replacement (Gumbel top-k / sequential sampling, the law
  specot's ``wor`` drafter has). ``Q(H)`` is computed exactly from the exponential race
  (:mod:`specot.theory.successive`), to ~1e-13.
* ``"cps"`` — *conditional Poisson sampling*: an n-subset S drawn with probability ∝ Π_{i∈S} q(i),
  ``Q(H) = e_n(q_H)/e_n(q_V)``. This is the formula Hu et al. print for sampling without
  replacement; it is a different law and misstates α* for successive sampling (by up to ~0.07,
  see docs/theory.md). Offered so the two can be compared; no specot drafter samples it.
* ``"greedy"`` — Hu et al. §5: top-(n−1) tokens of q (ties to the lower id) plus one draw from q
  with them removed (``q¬Top``). Closed form (Theorem 7):
  ``α* = Σ_{i∈Top} p(i) + Σ_i min(p(i), q¬Top(i))``.
* ``"spechub"`` (n ≤ 2) — SpecHub's law. Its ``Q(H) = 1[top ∈ H]·q¬top(H)`` equals the greedy
  law's at n = 2, so α* is the same closed form.
* a :class:`JointDraftLaw` — any joint law given explicitly as ordered tuples with probabilities
  (small V): brute force over all ``2^V`` subsets (zeta transform).

For ``iid``, ``wor`` and ``cps`` the minimising H is searched among the prefixes of V sorted by
``q(i)/p(i)`` descending (tokens with p = 0 < q first). Hu et al. prove this for "q-convex" Q
(Theorems 3, 4, 6: with and without replacement). specot checks it against the minimum over all
subsets (``tests/theory/test_theory_optimal.py``, :func:`optimal_acceptance_bruteforce`); see docs/theory.md
for the outcome per law. The successive-sampling scan does not evaluate every prefix: a
branch-and-bound over prefix intervals uses ``Q(H_k) ≤ q(H_k)^n``, a lower bound from the top-j
masses, and the monotonicity of Q along the prefixes to prune, then evaluates the surviving
prefixes exactly; the result is the exact prefix minimum (up to the quadrature's ~1e-13).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

from .._validation import sum_tolerance
from .successive import SuccessivePrefixEvaluator
from .successive import successive_subset_probability

__all__ = [
    "OptimalAcceptance",
    "JointDraftLaw",
    "THEORY_LAWS",
    "MAX_BRUTE_FORCE_VOCAB",
    "optimal_acceptance",
    "optimal_acceptance_all_laws",
    "optimal_acceptance_bruteforce",
    "set_probability",
    "scan_order",
]

#: Draft laws :func:`optimal_acceptance` knows by name.
THEORY_LAWS = ("iid", "wor", "cps", "greedy", "spechub")
#: Largest vocabulary for the brute-force laws (2^V subsets).
MAX_BRUTE_FORCE_VOCAB = 20


@dataclass(frozen=True)
class OptimalAcceptance:
    """The optimal acceptance α* for one (p, q, n, draft law).

    Attributes:
        alpha: α* ∈ [0, 1], the acceptance rate of the best lossless verifier for this draft law.
        H: int64 token ids (sorted) of a minimising set ``H*`` of ``P(H) − Q(H)``; ``α* = 1 + P(H*) − Q(H*)``.
        law: the draft law assumed (``"iid"``, ``"wor"``, ``"cps"``, ``"greedy"``, ``"spechub"``
            or ``"joint"``), with a human-readable description in ``law_description``.
        method: how it was computed (``"prefix-scan"``, ``"prefix-scan+branch-and-bound"``,
            ``"closed-form"``, ``"brute-force"``).
        n: number of drafts.
        law_description: one line naming the law (e.g. that ``cps`` is conditional Poisson sampling).
        evaluations: number of exact ``Q(H)`` evaluations (for the successive-sampling scan).
    """

    alpha: float
    H: np.ndarray
    law: str
    method: str
    n: int
    law_description: str = ""
    evaluations: int = 0
    extra: dict = field(default_factory=dict, compare=False, repr=False)


_DESCRIPTIONS = {
    "iid": "i.i.d. drafts from q (with replacement); Q(H) = q(H)^n",
    "wor": "successive sampling without replacement (Gumbel top-k / sequential); exact Q(H) by the exponential race",
    "cps": "conditional Poisson sampling (NOT successive sampling); Q(H) = e_n(q_H)/e_n(q_V), Hu et al.'s formula",
    "greedy": "top-(n-1) tokens of q plus one draw from q without them (Hu et al. Sec. 5); closed form, Theorem 7",
    "spechub": "SpecHub (n <= 2): one draw from q plus the top-1 token; Q(H) as the greedy law at n = 2",
    "joint": "an explicit joint draft law (ordered tuples with probabilities)",
}


@dataclass(frozen=True)
class JointDraftLaw:
    """An explicit joint law of ``n`` drafts: ordered tuples and their probabilities.

    Args:
        tuples: int ``[M, n]`` token ids (e.g. from :func:`specot.laws.enumerate_draft_law`).
        probs: ``[M]`` probabilities (≥ 0, summing to 1).

    Use as ``optimal_acceptance(p, None, n, law=JointDraftLaw(tuples, probs))``; only the set of
    distinct tokens of each tuple matters for α*.
    """

    tuples: np.ndarray
    probs: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.tuples.detach().cpu() if isinstance(self.tuples, torch.Tensor) else self.tuples)
        pr = np.asarray(self.probs.detach().cpu() if isinstance(self.probs, torch.Tensor) else self.probs)
        if t.ndim != 2 or t.shape[0] == 0 or t.shape[1] == 0:
            raise ValueError(f"JointDraftLaw.tuples must be a non-empty int array [M, n], got shape {t.shape}")
        if not np.issubdtype(t.dtype, np.integer):
            raise TypeError(f"JointDraftLaw.tuples must hold integer token ids, got dtype {t.dtype}")
        pr = pr.astype(np.float64)
        if pr.shape != (t.shape[0],):
            raise ValueError(f"JointDraftLaw.probs must have shape [{t.shape[0]}], got {pr.shape}")
        if not np.all(np.isfinite(pr)) or (pr < 0).any():
            raise ValueError("JointDraftLaw.probs must be finite and >= 0")
        if abs(pr.sum() - 1.0) > 1e-9:
            raise ValueError(f"JointDraftLaw.probs must sum to 1 (got {pr.sum():.12g}); normalise them")
        if (t < 0).any():
            raise ValueError("JointDraftLaw.tuples has negative token ids")
        object.__setattr__(self, "tuples", t.astype(np.int64))
        object.__setattr__(self, "probs", pr)

    @property
    def n(self) -> int:
        """Number of drafts per tuple."""
        return int(self.tuples.shape[1])


# ---------------------------------------------------------------------------------------- input


def _to_prob_vector(x: object, name: str) -> np.ndarray:
    """Validate a probability vector (torch / numpy / sequence) ``[V]`` or batch ``[B, V]`` → float64 numpy.

    Same rules and messages as :func:`specot._validation.check_probs` (tolerance
    :func:`specot._validation.sum_tolerance` of the input dtype), checked in numpy: torch's
    multi-threaded reductions cost ~40 ms per call on a loaded 2-core machine, numpy's 0.1 ms.
    Rows within tolerance are renormalised exactly in float64.
    """
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
        tdtype = x.dtype
        arr = x.detach().cpu().to(torch.float64).numpy()
    elif isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"{name} must be a floating-point array of probabilities, got dtype {x.dtype}")
        tdtype = {np.dtype(np.float32): torch.float32, np.dtype(np.float16): torch.float16}.get(x.dtype, torch.float64)
        arr = np.asarray(x, dtype=np.float64)
    elif isinstance(x, (list, tuple)):
        tdtype = torch.float64
        arr = np.asarray(x, dtype=np.float64)
    else:
        raise TypeError(f"{name} must be a torch.Tensor or numpy array of probabilities, got {type(x).__name__}")
    if arr.ndim not in (1, 2):
        raise ValueError(f"{name} must have shape [V] or [B, V], got {tuple(arr.shape)}")
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} must have a non-empty vocabulary axis, got shape {tuple(arr.shape)}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} contains NaN or infinite entries; pass finite probabilities")
    if (arr < 0).any():
        raise ValueError(f"{name} contains negative entries (min {arr.min():.3g}); probabilities must be >= 0")
    sums = arr.sum(-1).reshape(-1)
    tol = sum_tolerance(tdtype, arr.shape[-1])
    worst = int(np.abs(sums - 1.0).argmax())
    err = abs(float(sums[worst]) - 1.0)
    if err > tol:
        raise ValueError(
            f"{name} rows must sum to 1 (row {worst} sums to {float(sums[worst]):.6g}, |error| {err:.3g} > "
            f"tolerance {tol:.3g}); normalise with p / p.sum(-1, keepdim=True) or pass softmax output"
        )
    return arr / arr.sum(-1, keepdims=True)


def _check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"n (number of drafts) must be an int, got {type(n).__name__}")
    if int(n) < 1:
        raise ValueError(f"n (number of drafts) must be >= 1, got {n}")
    return int(n)


def _law_name(law: object) -> str:
    if isinstance(law, JointDraftLaw):
        return "joint"
    value = getattr(law, "value", law)  # accept specot.DraftLaw members
    if not isinstance(value, str) or value not in THEORY_LAWS:
        raise ValueError(
            f"unknown draft law {law!r}; use one of {', '.join(THEORY_LAWS)} or a JointDraftLaw(tuples, probs)"
        )
    return value


def _check_support(q: np.ndarray, n: int, law: str) -> None:
    if law in ("wor", "cps", "greedy", "spechub") and n >= 2:
        s = int((q > 0).sum())
        if s < n:
            raise ValueError(
                f"draft law {law!r} needs at least n={n} tokens with q > 0, but q has {s}; use fewer drafts or 'iid'"
            )
    if law == "spechub" and n > 2:
        raise ValueError(f"the SpecHub draft law is defined for n <= 2 drafts, got n={n}")


# ---------------------------------------------------------------------------------------- scans


def scan_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The subset-selection scan order: ``q(i)/p(i)`` descending (``p = 0 < q`` first, ``p = q = 0`` last).

    Ties are left in numpy's (deterministic) quicksort order: for the q-convex laws the minimum over
    prefixes does not depend on the order inside a tie (Hu et al. Thm 6), which the tests check
    with shuffled tie orders. Returns int64 ``[V]``.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(p > 0, q / np.where(p > 0, p, 1.0), np.where(q > 0, np.inf, -1.0))
    return np.argsort(-ratio).astype(np.int64)


def _elementary_prefix(q_sorted: np.ndarray, n: int) -> np.ndarray:
    """``e_n(q_{[0..k)})`` for every prefix length k = 0..V → ``[V+1]`` (all-positive recursions).

    Blocked: a sequential recursion inside blocks of ~√V tokens (vectorised over blocks), then
    block prefix products. Relative error O(V·eps): every operation adds non-negative terms.
    """
    V = q_sorted.shape[0]
    b = max(1, int(math.ceil(math.sqrt(V))))
    nb = int(math.ceil(V / b))
    x = np.zeros(nb * b)
    x[:V] = q_sorted
    x = x.reshape(nb, b)
    W = np.zeros((nb, b, n + 1))  # within-block prefix polynomials (inclusive)
    cur = np.zeros((nb, n + 1))
    cur[:, 0] = 1.0
    for j in range(b):
        nxt = cur.copy()
        nxt[:, 1:] += x[:, j : j + 1] * cur[:, :-1]
        W[:, j] = nxt
        cur = nxt
    # exclusive block-prefix products BP[k] = Π_{blocks < k}
    BP = np.zeros((nb, n + 1))
    acc = np.zeros(n + 1)
    acc[0] = 1.0
    for k in range(nb):
        BP[k] = acc
        acc = np.convolve(acc, W[k, -1])[: n + 1]
    # e_n(prefix through token (k, j)) = Σ_u BP[k, u]·W[k, j, n−u]
    full = np.einsum("ku,kju->kj", BP, W[:, :, ::-1]).reshape(-1)[:V]
    return np.concatenate([[0.0] if n > 0 else [1.0], full])


def _cps_prefix_Q(q_sorted: np.ndarray, n: int) -> np.ndarray:
    e = _elementary_prefix(q_sorted, n)
    return np.clip(e / e[-1], 0.0, 1.0)


def _top_masses(q: np.ndarray, n: int) -> np.ndarray:
    """``S_j`` = sum of the j largest q, j = 0..n−1 → ``[n]``."""
    k = min(n - 1, q.shape[0])
    top = np.sort(np.partition(q, q.shape[0] - k)[q.shape[0] - k :])[::-1] if k > 0 else np.zeros(0)
    return np.concatenate([[0.0], np.cumsum(top)])[:n]


def _wor_scan(P: np.ndarray, q_sorted: np.ndarray, n: int) -> tuple[int, float, int]:
    """Exact minimum of ``f(k) = P_k − Q(H_k)`` over prefixes for successive sampling.

    Branch-and-bound over prefix intervals: for k between evaluated prefixes k1 < k < k2,
    ``Q(H_{k1}) ≤ Q(H_k) ≤ min(Q(H_{k2}), c_k^n)`` (Q grows along prefixes; sampling without
    replacement puts no more mass inside H than i.i.d. sampling) and
    ``Q(H_k) ≥ Π_j (c_k − S_j)_+/(1 − S_j)`` (each successive draw lands in H with probability
    ≥ (c − S_j)/(1 − S_j), S_j the top-j mass). Prefixes whose lower bound on f cannot beat the
    best value are discarded; the rest are evaluated exactly in batches.

    Returns ``(k*, f(k*), evaluations)``.
    """
    V = q_sorted.shape[0]
    ev = SuccessivePrefixEvaluator(q_sorted, n)
    c, a = ev.c, ev.a
    Qhi = np.where(a <= 0, 1.0, c**n)
    S = _top_masses(q_sorted, n)
    Qlo = np.ones(V + 1)
    for j in range(n):
        Qlo *= np.clip((c - S[j]) / (1.0 - S[j]), 0.0, 1.0)
    lb_pt = P - Qhi
    Ek = np.array([0, V], dtype=np.int64)
    EQ = np.array([0.0, 1.0])
    best_k, best_f = 0, 0.0
    alive = np.arange(1, V, dtype=np.int64)
    evaluations = 0
    rounds = 0
    while alive.size:
        rounds += 1
        pos = np.searchsorted(Ek, alive)  # Ek[pos−1] < k < Ek[pos]
        lbk = np.maximum(lb_pt[alive], P[alive] - EQ[pos])
        ubk = P[alive] - np.maximum(Qlo[alive], EQ[pos - 1])
        ub_min = float(ubk.min())
        keep = (lbk < best_f) & (lbk <= ub_min)
        alive, pos, lbk, ubk = alive[keep], pos[keep], lbk[keep], ubk[keep]
        if not alive.size:
            break
        if alive.size <= 48 or rounds > 40:
            new = alive
        else:
            _, starts, counts = np.unique(pos, return_index=True, return_counts=True)
            order = np.lexsort((lbk, pos))  # within each gap, smallest lower bound first
            per_gap = int(np.clip(96 // starts.size, 1, 32))  # evenly spaced probes per gap
            frac = (np.arange(1, per_gap + 1) / (per_gap + 1))[None, :]
            probes = starts[:, None] + (counts[:, None] * frac).astype(np.int64)
            pick = [alive[order[starts]], alive[probes.reshape(-1)], alive[[int(np.argmin(ubk))]]]
            new = np.unique(np.concatenate(pick))
        Qn = ev.evaluate(new)
        evaluations += new.size
        fn = P[new] - Qn
        i = int(np.argmin(fn))
        if fn[i] < best_f:
            best_f, best_k = float(fn[i]), int(new[i])
        Ek_all = np.concatenate([Ek, new])
        EQ_all = np.concatenate([EQ, Qn])
        o = np.argsort(Ek_all, kind="stable")
        Ek, EQ = Ek_all[o], np.maximum.accumulate(EQ_all[o])  # Q is monotone along prefixes
        alive = alive[~np.isin(alive, new, assume_unique=True)]
    return best_k, best_f, evaluations


def set_probability(q: object, H: object, n: int, law: str | JointDraftLaw) -> float:
    """``Q(H)``: probability that all ``n`` drafts lie in the token set ``H`` under ``law``.

    Args:
        q: draft distribution ``[V]`` (ignored for a :class:`JointDraftLaw`; pass its V via H's mask).
        H: bool mask ``[V]`` or an iterable of token ids.
        n: drafts.
        law: one of :data:`THEORY_LAWS` or a :class:`JointDraftLaw`.
    """
    name = _law_name(law)
    n = _check_n(n)
    if name == "joint":
        assert isinstance(law, JointDraftLaw)
        mask = np.asarray(H, dtype=bool) if np.asarray(H).dtype == bool else None
        ids = set(np.flatnonzero(mask).tolist()) if mask is not None else set(int(i) for i in H)  # type: ignore[union-attr]
        inside = np.array([set(row.tolist()) <= ids for row in law.tuples])
        return float(law.probs[inside].sum())
    qv = _to_prob_vector(q, "q (draft probs)")
    if qv.ndim != 1:
        raise ValueError("set_probability takes one distribution q [V]")
    V = qv.shape[0]
    Hm = np.asarray(H)
    if Hm.dtype != bool:
        m = np.zeros(V, dtype=bool)
        m[np.asarray(list(H), dtype=np.int64)] = True  # type: ignore[arg-type]
        Hm = m
    _check_support(qv, n, name)
    return float(_set_probabilities(qv, Hm[None, :], n, name)[0])


def _set_probabilities(q: np.ndarray, masks: np.ndarray, n: int, law: str) -> np.ndarray:
    """``Q(H)`` for each row of ``masks [M, V]`` (exact methods, any subsets) → ``[M]``."""
    c = (masks * q).sum(1)
    if n == 1:
        return c
    if law == "iid":
        return c**n
    if law == "wor":
        return successive_subset_probability(q, masks, n)
    if law == "cps":
        # e_n of each subset by the DP over tokens (vectorised over subsets)
        E = np.zeros((masks.shape[0], n + 1))
        E[:, 0] = 1.0
        for i in range(q.shape[0]):
            xi = np.where(masks[:, i], q[i], 0.0)[:, None]
            E[:, 1:] = E[:, 1:] + xi * E[:, :-1]
        full = np.zeros(n + 1)
        full[0] = 1.0
        for i in range(q.shape[0]):
            full[1:] = full[1:] + q[i] * full[:-1]
        return E[:, n] / full[n]
    if law in ("greedy", "spechub"):
        top = _greedy_top(q, n - 1)
        rest = np.ones(q.shape[0], dtype=bool)
        rest[top] = False
        rest_mass = float(q[rest].sum())
        has_top = masks[:, top].all(1)
        return np.where(has_top, (masks * np.where(rest, q, 0.0)).sum(1) / rest_mass, 0.0)
    raise ValueError(f"unknown law {law!r}")


def _greedy_top(q: np.ndarray, k: int) -> np.ndarray:
    """Top-k token ids of q, decreasing, ties to the lower id (as :func:`specot.laws.top_tokens`)."""
    V = q.shape[0]
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k >= V:
        return np.lexsort((np.arange(V), -q)).astype(np.int64)
    kth = np.partition(q, V - k)[V - k]  # k-th largest value
    cand = np.flatnonzero(q >= kth)  # every token that can be in the top k (ties included)
    return cand[np.lexsort((cand, -q[cand]))][:k].astype(np.int64)


# ---------------------------------------------------------------------------------------- main


def _single(p: np.ndarray, q: np.ndarray | None, n: int, law: str, joint: JointDraftLaw | None) -> OptimalAcceptance:
    V = p.shape[0]
    desc = _DESCRIPTIONS[law]
    if law == "joint":
        assert joint is not None
        return _joint_bruteforce(p, joint, desc)
    assert q is not None
    _check_support(q, n, law)
    if n == 1 or law in ("greedy", "spechub"):
        k = n - 1 if law in ("greedy", "spechub") else 0
        top = _greedy_top(q, k)
        rest = np.ones(V, dtype=bool)
        rest[top] = False
        q_rest = np.where(rest, q, 0.0)
        q_rest = q_rest / q_rest.sum()
        alpha = float(p[top].sum() + np.minimum(p, q_rest)[rest].sum())
        H = np.sort(np.concatenate([top, np.flatnonzero(rest & (q_rest > p))]))
        method = "closed-form"
        return OptimalAcceptance(min(1.0, alpha), H.astype(np.int64), law, method, n, desc)
    order = scan_order(p, q)
    ps, qs = p[order], q[order]
    P = np.concatenate([[0.0], np.cumsum(ps)])
    evaluations = 0
    if law == "iid":
        c = np.concatenate([[0.0], np.cumsum(qs)])
        f = P - c**n
        f[0], f[-1] = 0.0, 0.0
        k = int(np.argmin(f))
        fk = float(f[k])
        method = "prefix-scan"
    elif law == "cps":
        Q = _cps_prefix_Q(qs, n)
        f = P - Q
        f[0], f[-1] = 0.0, 0.0
        k = int(np.argmin(f))
        fk = float(f[k])
        method = "prefix-scan"
    else:  # wor
        k, fk, evaluations = _wor_scan(P, qs, n)
        method = "prefix-scan+branch-and-bound"
    alpha = min(1.0, max(0.0, 1.0 + fk))
    return OptimalAcceptance(alpha, np.sort(order[:k]), law, method, n, desc, evaluations)


def _zeta_subsets(F: np.ndarray, V: int) -> np.ndarray:
    """Sum over subsets: ``G[mask] = Σ_{sub ⊆ mask} F[sub]`` (in place on a copy), F ``[2^V]``."""
    G = F.copy()
    for i in range(V):
        view = G.reshape(-1, 2, 1 << i)
        view[:, 1, :] += view[:, 0, :]
    return G


def _subset_masses(p: np.ndarray) -> np.ndarray:
    """``P(H)`` for every bitmask H over V tokens → ``[2^V]``."""
    V = p.shape[0]
    F = np.zeros(1 << V)
    F[1 << np.arange(V)] = p
    return _zeta_subsets(F, V)


def _joint_bruteforce(p: np.ndarray, joint: JointDraftLaw, desc: str) -> OptimalAcceptance:
    V = p.shape[0]
    if V > MAX_BRUTE_FORCE_VOCAB:
        raise ValueError(
            f"an explicit joint draft law needs a brute force over 2^V subsets; V={V} exceeds "
            f"MAX_BRUTE_FORCE_VOCAB={MAX_BRUTE_FORCE_VOCAB}"
        )
    if int(joint.tuples.max()) >= V:
        raise ValueError(f"JointDraftLaw has token id {int(joint.tuples.max())} outside the vocabulary of size {V}")
    bits = np.bitwise_or.reduce(np.left_shift(1, joint.tuples), axis=1)
    F = np.bincount(bits, weights=joint.probs, minlength=1 << V)
    Q = _zeta_subsets(F, V)
    f = _subset_masses(p) - Q
    f[0] = 0.0
    f[-1] = 0.0
    m = int(np.argmin(f))
    H = np.flatnonzero((m >> np.arange(V)) & 1).astype(np.int64)
    return OptimalAcceptance(min(1.0, max(0.0, 1.0 + float(f[m]))), H, "joint", "brute-force", joint.n, desc)


def optimal_acceptance_bruteforce(p: object, q: object, n: int, law: str | JointDraftLaw = "iid") -> OptimalAcceptance:
    """α* as the minimum of ``P(H) − Q(H)`` over ALL ``2^V`` subsets (reference; V ≤ 20).

    Same arguments and result as :func:`optimal_acceptance` (one distribution ``[V]``), with
    ``method="brute-force"``. ``Q(H)`` is computed exactly for every subset (successive sampling
    by the per-token quadrature of :func:`specot.theory.successive.successive_subset_probability`).

    Raises:
        ValueError: ``V > MAX_BRUTE_FORCE_VOCAB`` and the errors of :func:`optimal_acceptance`.
    """
    name = _law_name(law)
    n = _check_n(n)
    pv = _to_prob_vector(p, "p (target probs)")
    if pv.ndim != 1:
        raise ValueError("optimal_acceptance_bruteforce takes one distribution p [V]")
    V = pv.shape[0]
    if name == "joint":
        assert isinstance(law, JointDraftLaw)
        if law.n != n:
            raise ValueError(f"n={n} disagrees with the joint law's tuples of {law.n} drafts")
        return _joint_bruteforce(pv, law, _DESCRIPTIONS["joint"])
    qv = _to_prob_vector(q, "q (draft probs)")
    if qv.shape != pv.shape:
        raise ValueError(f"vocabulary mismatch: p has shape {pv.shape}, q has {qv.shape}")
    if V > MAX_BRUTE_FORCE_VOCAB:
        raise ValueError(f"brute force over 2^V subsets: V={V} exceeds MAX_BRUTE_FORCE_VOCAB={MAX_BRUTE_FORCE_VOCAB}")
    _check_support(qv, n, name)
    masks = ((np.arange(1 << V)[:, None] >> np.arange(V)) & 1).astype(bool)
    Q = _set_probabilities(qv, masks, n, name)
    f = _subset_masses(pv) - Q
    f[0], f[-1] = 0.0, 0.0
    m = int(np.argmin(f))
    H = np.flatnonzero(masks[m]).astype(np.int64)
    return OptimalAcceptance(min(1.0, max(0.0, 1.0 + float(f[m]))), H, name, "brute-force", n, _DESCRIPTIONS[name])


def optimal_acceptance(
    p: object, q: object, n: int, law: str | JointDraftLaw = "wor"
) -> OptimalAcceptance | list[OptimalAcceptance]:
    """Optimal acceptance α* of n drafts under a draft law (Hu et al. 2025, subset selection).

    Args:
        p: target distribution, torch tensor or numpy array ``[V]`` or a batch ``[B, V]``.
        q: draft distribution, same shape (``None`` allowed for a :class:`JointDraftLaw`).
        n: number of drafts per position (≥ 1).
        law: ``"iid"``, ``"wor"`` (default), ``"cps"``, ``"greedy"``, ``"spechub"`` (or the
            :class:`specot.DraftLaw` members) or an explicit :class:`JointDraftLaw`.

    Returns:
        :class:`OptimalAcceptance` (``alpha``, minimising set ``H``, ``law``, ``method``); a list of
        them for a batch. Computed in float64; inputs within :func:`specot._validation.check_probs`'
        tolerance are renormalised exactly first.

    Raises:
        TypeError: non-float or non-tensor inputs, non-integer n.
        ValueError: unnormalised, negative or NaN probabilities, shape mismatch, ``n < 1``,
            an unknown law, fewer than n tokens with q > 0 for ``wor``/``cps``/``greedy``/``spechub``,
            ``n > 2`` for ``spechub``, or V > :data:`MAX_BRUTE_FORCE_VOCAB` for a joint law.
    """
    name = _law_name(law)
    n = _check_n(n)
    pv = _to_prob_vector(p, "p (target probs)")
    joint = law if isinstance(law, JointDraftLaw) else None
    if joint is not None:
        if joint.n != n:
            raise ValueError(f"n={n} disagrees with the joint law's tuples of {joint.n} drafts")
        if pv.ndim != 1:
            raise ValueError("a JointDraftLaw describes one position: pass p of shape [V]")
        return _single(pv, None, n, name, joint)
    qv = _to_prob_vector(q, "q (draft probs)")
    if pv.shape[-1] != qv.shape[-1]:
        raise ValueError(
            f"vocabulary mismatch: p (target probs) has {pv.shape[-1]} entries, q (draft probs) has {qv.shape[-1]}; "
            "target and draft must share one tokenizer"
        )
    if pv.shape != qv.shape:
        raise ValueError(f"shape mismatch: p (target probs) {pv.shape} vs q (draft probs) {qv.shape}")
    if pv.ndim == 1:
        return _single(pv, qv, n, name, None)
    return [_single(pv[b], qv[b], n, name, None) for b in range(pv.shape[0])]


def optimal_acceptance_all_laws(
    p: object, q: object, n: int, laws: Sequence[str] = ("iid", "wor", "cps", "greedy")
) -> dict[str, OptimalAcceptance]:
    """α* for each named law (one distribution ``[V]``); laws that do not apply (e.g. ``spechub``
    with n > 2, too small a support) are left out of the result rather than raising."""
    out: dict[str, OptimalAcceptance] = {}
    for law in laws:
        _law_name(law)
        try:
            r = optimal_acceptance(p, q, n, law)
        except ValueError as exc:
            if "needs at least" in str(exc) or "SpecHub" in str(exc):
                continue
            raise
        assert isinstance(r, OptimalAcceptance)
        out[law] = r
    return out
