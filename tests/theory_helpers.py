"""Shared helpers for the theory tests: random small cases and independent references.

The references here do not use :mod:`specot.theory`: exact enumeration of ordered draws for
successive sampling, of n-subsets for conditional Poisson sampling, and the OTM linear program of
:mod:`specot.verifiers.otm` (the ground truth for α*).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from specot.laws import enumerate_draft_law
from specot.verifiers.otm import draft_sets, solve_otm_lp


def random_pair(rng: np.random.Generator, V: int) -> tuple[np.ndarray, np.ndarray]:
    """A random (p, q) pair over V tokens, often degenerate: zeros, ties, equal, one-hot, disjoint."""
    kind = rng.integers(0, 10)

    def dist() -> np.ndarray:
        style = rng.integers(0, 5)
        if style == 0:  # grid values → many ties
            x = rng.integers(0, 4, V).astype(float)
        elif style == 1:  # sparse
            x = rng.dirichlet(np.full(V, 0.3)) * (rng.random(V) < 0.6)
        elif style == 2:
            x = rng.dirichlet(np.full(V, 5.0))
        elif style == 3:  # peaked
            x = np.exp(rng.standard_normal(V) * 3)
        else:
            x = rng.dirichlet(np.ones(V))
        if x.sum() <= 0:
            x[rng.integers(V)] = 1.0
        return x / x.sum()

    p, q = dist(), dist()
    if kind == 0:
        q = p.copy()
    elif kind == 1:  # one-hot target
        p = np.zeros(V)
        p[rng.integers(V)] = 1.0
    elif kind == 2:  # disjoint supports where possible
        half = rng.permutation(V)
        m = np.zeros(V, bool)
        m[half[: V // 2]] = True
        if m.any() and (~m).any():
            p = np.where(m, p + 1e-3, 0.0)
            q = np.where(~m, q + 1e-3, 0.0)
            p, q = p / p.sum(), q / q.sum()
    elif kind == 3:  # uniform draft
        q = np.full(V, 1.0 / V)
    return p, q


def support(q: np.ndarray) -> int:
    return int((q > 0).sum())


def cps_sets(q: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Conditional Poisson sampling by enumeration: every n-subset S with mass ∝ Π_{i∈S} q(i)."""
    V = q.shape[0]
    subsets = list(itertools.combinations(range(V), n))
    w = np.array([math.prod(q[list(s)]) for s in subsets])
    keep = w > 0
    tuples = np.array(subsets, dtype=np.int64)[keep]
    return tuples, w[keep] / w[keep].sum()


def law_tuples(q: np.ndarray, n: int, law: str) -> tuple[np.ndarray, np.ndarray]:
    """Ordered (or unordered for cps) draft tuples with their probabilities."""
    if law == "cps":
        return cps_sets(q, n)
    t, pr = enumerate_draft_law(torch.from_numpy(q.copy()), n, law)
    return t.numpy(), pr.numpy()


def lp_alpha(p: np.ndarray, q: np.ndarray, n: int, law: str) -> float:
    """Ground truth: the exact OTM LP optimum over the enumerated draft law."""
    return lp_alpha_and_violation(p, q, n, law)[0]


def lp_alpha_and_violation(p: np.ndarray, q: np.ndarray, n: int, law: str) -> tuple[float, float]:
    """The OTM LP optimum and the total constraint violation of HiGHS's solution.

    HiGHS works to a primal feasibility tolerance of 1e-7 (scipy's default): on degenerate cases
    its plan can accept up to ~5e-9 more target mass than exists, and the reported value is off by
    that much. Removing the violating mass gives a feasible plan, so the true optimum lies within
    the total violation of the reported value (on the dual side the value is an upper bound).
    """
    tuples, probs = law_tuples(q, n, law)
    masks, masses = draft_sets(tuples, probs, p.shape[0])
    sol = solve_otm_lp(p, masks, masses)
    acc = sol.accepted
    viol = float(np.clip(acc.sum(1) - masses, 0, None).sum() + np.clip(acc.sum(0) - p, 0, None).sum())
    return sol.value, viol


def successive_Q_exact(q: np.ndarray, H: np.ndarray, n: int) -> float:
    """P(all n successive draws lie in H) by enumerating ordered draws (remaining mass summed)."""
    V = q.shape[0]
    tot = 0.0
    for seq in itertools.permutations(range(V), n):
        pr = 1.0
        left = set(range(V))
        for x in seq:
            rem = sum(q[y] for y in left)
            if q[x] == 0 or rem <= 0:
                pr = 0.0
                break
            pr *= q[x] / rem
            left.discard(x)
        if pr and all(H[x] for x in seq):
            tot += pr
    return tot


def softmax_case(rng: np.random.Generator, V: int, temperature: float, scale: float = 3.0) -> tuple[np.ndarray, np.ndarray]:
    """Real-looking (p, q): softmax of correlated random logits at a temperature."""
    base = rng.standard_normal(V) * scale
    lp = base + 0.5 * rng.standard_normal(V) * scale
    lq = base + 0.5 * rng.standard_normal(V) * scale
    p = np.exp((lp - lp.max()) / temperature)
    q = np.exp((lq - lq.max()) / temperature)
    return p / p.sum(), q / q.sum()
