"""Optimal transport multi-draft verification (OTM), solved exactly as a linear program.

Source: Sun et al. 2023 (SpecTr) §3, the OTM-n problem; Hu et al. 2025 §3 (LP duality).

A valid selection rule is a coupling of the draft law and the target p whose cost is
``1{Y ∉ S(X)}``, S(X) the set of distinct drafts. The cost depends on X only through S(X), so the
LP over (distinct set S, token y) with set masses ``m(S) = P(S(X) = S)`` has the same optimum
(exact aggregation). We solve it in its b-matching form (Hu et al. §3): accepted mass
``a(S, y) ≥ 0`` for ``y ∈ S`` only, with ``Σ_y a(S, y) ≤ m(S)`` and ``Σ_S a(S, y) ≤ p(y)``,
maximising ``Σ a``; then the unmatched mass is coupled independently,
``r(S, y) = (m(S) − a(S, ·))·(p(y) − a(·, y)) / (1 − α)``. The result ``π(S, y) = a + r`` is a
coupling of (m, p) whose acceptance is the LP optimum (at an optimum no set with spare mass
contains a token with spare target mass, else the flow could be augmented).

The LP is solved by ``scipy.optimize.linprog(method="highs")`` in float64. Size limit: the
verifier enumerates the draft law (:func:`specot.laws.enumerate_draft_law`, at most
:data:`MAX_OTM_SETS` distinct sets and :data:`MAX_OTM_VARIABLES` LP variables) and raises
``ValueError`` above it — OTM is the reference optimum for small vocabularies, not a fast path.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import scipy.optimize
import scipy.sparse
import torch
from torch import Tensor

from ..laws import enumerate_draft_law
from ..sampling import sample_categorical
from ._common import unique_rows
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier

__all__ = ["OTMSolution", "solve_otm_lp", "draft_sets", "OTMVerifier", "MAX_OTM_SETS", "MAX_OTM_VARIABLES"]

#: Most distinct draft sets the OTM verifier accepts per position.
MAX_OTM_SETS = 20_000
#: Most LP variables (Σ_S |S|) the OTM verifier accepts per position.
MAX_OTM_VARIABLES = 200_000


@dataclass(frozen=True)
class OTMSolution:
    """Optimal coupling of a draft-set law and a target distribution.

    Attributes:
        value: optimal acceptance rate ``α* = max Σ_{S, y∈S} π(S, y)``.
        plan: coupling mass ``π(S, y)`` ``[M, V]``; rows sum to the set masses, columns to p.
        accepted: the accepted part ``a(S, y)`` of the plan ``[M, V]`` (zero off ``y ∈ S``).
    """

    value: float
    plan: np.ndarray
    accepted: np.ndarray


def draft_sets(tuples: Tensor | np.ndarray, probs: Tensor | np.ndarray, V: int) -> tuple[np.ndarray, np.ndarray]:
    """Aggregate ordered draft tuples into distinct draft sets.

    Args:
        tuples: ``[M, n]`` token ids (e.g. from :func:`specot.laws.enumerate_draft_law`).
        probs: ``[M]`` tuple probabilities.
        V: vocabulary size.

    Returns:
        ``(set_masks, set_masses)``: bool ``[K, V]`` (one row per distinct set, in order of first
        appearance) and float64 ``[K]`` with ``set_masses[k] = Σ`` of the probabilities of the
        tuples whose set of distinct tokens is row k.
    """
    t = np.asarray(tuples, dtype=np.int64)
    pr = np.asarray(probs, dtype=np.float64)
    if t.ndim != 2 or pr.shape != (t.shape[0],):
        raise ValueError(f"tuples must be [M, n] and probs [M]; got {t.shape} and {pr.shape}")
    masks = np.zeros((t.shape[0], V), dtype=bool)
    masks[np.arange(t.shape[0])[:, None], t] = True
    uniq, first, inv = np.unique(masks, axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    masses = np.zeros(len(uniq), dtype=np.float64)
    np.add.at(masses, inv, pr)
    order = np.argsort(first)  # keep first-appearance order
    return uniq[order], masses[order]


def solve_otm_lp(p: np.ndarray, set_masks: np.ndarray, set_masses: np.ndarray) -> OTMSolution:
    """Solve the optimal-transport multi-draft LP exactly (HiGHS).

    Args:
        p: target distribution ``[V]``.
        set_masks: bool ``[M, V]``, row k the k-th distinct draft set.
        set_masses: ``[M]`` probability of each set (sums to 1).

    Returns:
        :class:`OTMSolution` with the optimal acceptance and a full coupling plan ``[M, V]``.

    Raises:
        ValueError: shape mismatch or a solver failure (message carries HiGHS's status).
    """
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    masks = np.asarray(set_masks, dtype=bool)
    m = np.asarray(set_masses, dtype=np.float64).reshape(-1)
    if masks.ndim != 2 or masks.shape[1] != p.shape[0] or masks.shape[0] != m.shape[0]:
        raise ValueError(f"shapes disagree: p {p.shape}, set_masks {masks.shape}, set_masses {m.shape}")
    M, V = masks.shape
    rows, cols = np.nonzero(masks)  # one LP variable a(S, y) per (set, member)
    nvar = rows.shape[0]
    accepted = np.zeros((M, V), dtype=np.float64)
    if nvar:
        a_ub = scipy.sparse.csr_matrix(
            (np.ones(2 * nvar), (np.concatenate([rows, M + cols]), np.concatenate([np.arange(nvar)] * 2))),
            shape=(M + V, nvar),
        )
        b_ub = np.concatenate([m, p])
        # HiGHS's default feasibility tolerance (1e-7) lets a plan overshoot a marginal by ~5e-9;
        # tighter tolerances make the optimum exact to ~1e-15 on the enumeration tests.
        res = scipy.optimize.linprog(-np.ones(nvar), A_ub=a_ub, b_ub=b_ub, bounds=(0, None), method="highs",
                                     options={"primal_feasibility_tolerance": 1e-10,
                                              "dual_feasibility_tolerance": 1e-10})
        if res.status != 0:
            raise ValueError(f"OTM linear program failed: {res.message} (status {res.status})")
        accepted[rows, cols] = np.clip(res.x, 0.0, None)
    value = float(accepted.sum())
    spare_s = np.clip(m - accepted.sum(1), 0.0, None)  # [M]
    spare_y = np.clip(p - accepted.sum(0), 0.0, None)  # [V]
    tot = spare_y.sum()
    plan = accepted.copy()
    if tot > 0:
        plan += np.outer(spare_s, spare_y / tot)
    return OTMSolution(value=value, plan=plan, accepted=accepted)


@lru_cache(maxsize=256)
def _solve_cached(p_bytes: bytes, q_bytes: bytes, n: int, law: str) -> tuple[np.ndarray, np.ndarray, OTMSolution]:

    p = np.frombuffer(p_bytes, dtype=np.float64)
    q = np.frombuffer(q_bytes, dtype=np.float64)
    tuples, probs = enumerate_draft_law(torch.from_numpy(q.copy()), n, law)
    masks, masses = draft_sets(tuples, probs, p.shape[0])
    if masks.shape[0] > MAX_OTM_SETS or int(masks.sum()) > MAX_OTM_VARIABLES:
        raise ValueError(
            f"OTM LP too large: {masks.shape[0]} distinct draft sets and {int(masks.sum())} variables (limits "
            f"MAX_OTM_SETS={MAX_OTM_SETS}, MAX_OTM_VARIABLES={MAX_OTM_VARIABLES}); use 'kseq', 'rrs' or "
            "'greedy' for large vocabularies"
        )
    return masks, masses, solve_otm_lp(p, masks, masses)


@register_verifier("otm")
class OTMVerifier(Verifier):
    """Exact optimal-transport verifier for a known draft law (small vocabularies only).

    Args:
        law: the draft law the drafts follow (default ``"iid"``); any :class:`DraftLaw`.

    Given drafts with set S, the emitted token is drawn from ``π(S, ·) / m(S)`` of the LP plan; the
    accepted index is the first draft equal to it when it lies in S (−1 otherwise). Lossless, and
    its acceptance is the LP optimum α* (exact).

    Shapes: ``p, q: [B, V]``, ``drafts: [B, n]`` → ``[B]``. One LP per distinct (p, q, n) row,
    cached (256 entries).

    Raises:
        ValueError: the LP exceeds :data:`MAX_OTM_SETS` / :data:`MAX_OTM_VARIABLES`, the drafts are
            impossible under the law (set mass 0), or invalid inputs.
    """

    name = "otm"
    valid_laws = frozenset(DraftLaw)

    def __init__(self, law: DraftLaw | str = DraftLaw.IID) -> None:
        try:
            self.law = law if isinstance(law, DraftLaw) else DraftLaw(law)
        except ValueError:
            raise ValueError(f"unknown draft law {law!r}; use one of {[v.value for v in DraftLaw]}") from None
        self.valid_laws = frozenset({self.law})  # type: ignore[misc]
        self.max_drafts = 2 if self.law == DraftLaw.SPECHUB else None  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"OTMVerifier(law={self.law.value!r})"

    def _row(self, p: Tensor, q: Tensor, n: int) -> tuple[np.ndarray, np.ndarray, OTMSolution]:
        # float64, renormalised: float32 inputs sum to 1 only within float32 rounding
        pn = p.detach().to(torch.float64).cpu().numpy().copy()
        qn = q.detach().to(torch.float64).cpu().numpy().copy()
        pn, qn = pn / pn.sum(), qn / qn.sum()
        return _solve_cached(pn.tobytes(), qn.tobytes(), n, self.law.value)

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        B, V = p.shape
        out = torch.empty(B, V, dtype=torch.float64)
        pu, qu, inv = unique_rows(p, q)  # one LP per distinct (p, q) row
        smask = torch.zeros(B, V, dtype=torch.bool).scatter_(-1, d.cpu(), True).numpy()
        skeys = np.packbits(smask, axis=1)
        for u in range(pu.shape[0]):
            masks, masses, sol = self._row(pu[u], qu[u], d.shape[1])
            index = {np.packbits(masks[k]).tobytes(): k for k in range(masks.shape[0])}
            cond = np.divide(sol.plan, masses[:, None], out=np.zeros_like(sol.plan), where=masses[:, None] > 0)
            for b in (inv == u).nonzero().squeeze(-1).tolist():
                k = index.get(skeys[b].tobytes())
                if k is None:
                    raise ValueError(
                        f"drafts {d[b].tolist()} at position {b} have probability 0 under draft law {self.law.value!r}"
                    )
                # a possible set whose mass underflowed to 0: any law is exact; use p
                out[b] = torch.from_numpy(cond[k]) if masses[k] > 0 else p[b].to(torch.float64)
        return out.to(p.dtype)

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None) -> VerifyOutput:
        pi = self.output_distribution(p, q, drafts).to(torch.float64)
        _, _, d = prepare_inputs(p, q, drafts)
        assert d is not None
        tokens = sample_categorical(pi, generator)
        match = d == tokens.unsqueeze(-1)  # [B, n]
        first = match.to(torch.int64).argmax(-1)
        idx = torch.where(match.any(-1), first, torch.full_like(first, -1))
        return VerifyOutput(tokens=tokens, accepted_index=idx)

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """P(accepted | drafts) ``[B]``: the plan's mass on the draft set."""
        pi = self.output_distribution(p, q, drafts).to(torch.float64)
        _, _, d = prepare_inputs(p, q, drafts)
        assert d is not None
        s = torch.zeros_like(pi, dtype=torch.bool).scatter_(-1, d, True)
        return (pi * s).sum(-1)

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Exact acceptance: the LP optimum α* per position ``[B]``."""
        p, q, _ = prepare_inputs(p, q)
        self.check_construction(self.law, n)
        val = torch.tensor([self._row(p[b], q[b], n)[2].value for b in range(p.shape[0])], dtype=torch.float64)
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
