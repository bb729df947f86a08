"""Importance-weighted multi-draft selection followed by single-draft speculative sampling.

Source: Khisti, Ebrahimi, Dbouk, Behboodi, Memisevic, Louizos, "Multi-Draft Speculative Sampling:
Canonical Decomposition and Theoretical Limits", ICLR 2025 (arXiv 2410.18234), the canonical
decomposition theorem: every multi-draft token-level verifier can be replaced, without losing
acceptance, by (1) an importance-weighted *selection* of one of the n drafts — a rule that outputs a
drafted token Y, whose marginal law we call ``q_IS`` — followed by (2) single-draft speculative sampling
of Y against p with ``q_IS`` as the proposal: accept Y with probability ``min(1, p(Y)/q_IS(Y))``,
otherwise emit a correction from ``norm((p − q_IS)_+)``. The emitted token is exactly p-distributed
for ANY selection rule as long as ``q_IS`` is its exact marginal, and the selected-draft acceptance is
``Σ_y min(p(y), q_IS(y))``.

Selection rule (this module's; Khisti et al. derive optimal weights from a linear program for two
drafts, which does not scale to V = 49152). Drafts are i.i.d. from q (:data:`DraftLaw.IID`). Rank the
tokens by the likelihood ratio ``p(y)/q(y)``, highest first (ties: lower id first), and give each token
an *eligible* mass ``e(y) ∈ [0, q(y)]``. Each draft x_j is independently eligible with probability
``e(x_j)/q(x_j)``. The selected draft is the eligible draft of highest rank; when no draft is eligible,
the ineligible draft of highest rank. This is a "highest priority wins" rule on 2V virtual tokens
(eligible copies above ineligible ones), so its marginal is exact and closed-form: with ``m(v)`` the
mass of virtual token v and ``C(v)`` the mass of v and everything ranked below it,

    q_IS(y) = Σ_{v ∈ {y_eligible, y_ineligible}} C(v)^n − (C(v) − m(v))^n,

computed as ``m · Σ_{k<n} C^k (C − m)^{n−1−k}`` (no cancellation), in O(V log V).

The eligible masses make the high-ratio tokens, which the selection boosts up to ~n-fold, stop at
p instead of overshooting: with ``y_1, y_2, ...`` in rank order, ``G_k = Σ_{i≤k} p(y_i)`` and
``Q_k = Σ_{i≤k} q(y_i)``, the cumulative eligible mass is the largest ``E_k`` with
``E_k − E_{k−1} ≤ q(y_k)`` and ``1 − (1 − E_k)^n ≤ G_k`` (the top-k tokens are selected, via their
eligible copies, at most as often as p would emit them): ``E_k = Q_k + min_{j≤k}(B_j − Q_j)`` with
``B_j = 1 − (1 − G_j)^{1/n}``, ``B_0 = Q_0 = 0`` (a Lindley recursion, vectorised by a cumulative
minimum). With ``e = q`` (every draft eligible) the rule is "select the highest-ratio draft".

Acceptance (the house definition, P(emitted token is one of the drafts)): at least
``Σ_y min(p(y), q_IS(y))`` (:func:`importance_selection` returns it); a correction can also coincide
with an unselected draft. :meth:`ImportanceVerifier.acceptance` is exact by enumeration on small
supports, otherwise a Monte-Carlo estimate; the closed-form selected-draft acceptance is
:meth:`ImportanceVerifier.selected_acceptance`. It approaches the optimal α* of n i.i.d. drafts
(Hu et al. 2025; :func:`specot.theory.optimal_acceptance`) within about 1–2 points on random
distributions.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..sampling import draw_uniforms, sample_categorical
from ._common import (
    check_draft_probs,
    exact_or_monte_carlo_acceptance,
    first_match,
    first_occurrences,
    gather1,
)
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier

__all__ = ["ImportanceVerifier", "importance_selection"]


def _power_difference(c: Tensor, m: Tensor, n: int) -> Tensor:
    """``c^n − (c − m)^n`` as ``m · Σ_{k<n} c^k (c − m)^{n−1−k}`` (float64, no cancellation)."""
    b = (c - m).clamp_min(0.0)
    acc = torch.zeros_like(c)
    for k in range(n):
        acc = acc + c.pow(k) * b.pow(n - 1 - k)
    return m * acc


def importance_selection(p: Tensor, q: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor]:
    """The selection rule's parameters and exact marginal (see the module docstring).

    Args:
        p: target probabilities ``[B, V]``.
        q: draft probabilities ``[B, V]``.
        n: number of i.i.d. drafts (≥ 1).

    Returns:
        ``(q_is, eligible, rank)``, all ``[B, V]``: the exact law of the selected draft token
        (float64), the eligible mass ``e(y) ∈ [0, q(y)]`` (float64), and each token's rank (int64,
        0 = highest priority).

    Raises:
        ValueError: ``n < 1``.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n (number of drafts) must be an int >= 1, got {n!r}")
    p64, q64 = p.to(torch.float64), q.to(torch.float64)
    B, V = p64.shape
    ratio = torch.where(q64 > 0, p64 / q64.clamp_min(torch.finfo(torch.float64).tiny),
                        torch.where(p64 > 0, torch.full_like(p64, float("inf")), torch.zeros_like(p64)))
    order = torch.sort(-ratio, dim=-1, stable=True).indices  # [B, V], highest ratio first
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(V, device=p.device).expand(B, V))
    ps, qs = p64.gather(-1, order), q64.gather(-1, order)
    zero = torch.zeros(B, 1, dtype=torch.float64, device=p.device)
    G = ps.cumsum(-1).clamp(0.0, 1.0)
    Q = qs.cumsum(-1)
    Bc = 1.0 - (1.0 - G).pow(1.0 / n)
    Bz, Qz = torch.cat([zero, Bc], -1), torch.cat([zero, Q], -1)
    E = Qz[:, 1:] + torch.cummin(Bz - Qz, -1).values[:, 1:]  # [B, V] cumulative eligible mass
    e = torch.diff(torch.cat([zero, E.clamp_min(0.0)], -1), dim=-1).clamp_min(0.0)
    e = torch.minimum(e, qs)
    m = torch.cat([e, qs - e], -1)  # virtual tokens, highest priority first: eligible, then ineligible
    C = torch.flip(torch.cumsum(torch.flip(m, [-1]), -1), [-1]).clamp_max(1.0)  # mass at or below each
    sel = _power_difference(C, m, n)
    q_is_sorted = sel[:, :V] + sel[:, V:]
    q_is = torch.zeros_like(p64).scatter_(-1, order, q_is_sorted)
    eligible = torch.zeros_like(p64).scatter_(-1, order, e)
    return q_is, eligible, rank


@register_verifier("importance")
class ImportanceVerifier(Verifier):
    """Importance-weighted draft selection + single-draft speculative sampling (Khisti et al.,
    ICLR 2025, canonical decomposition), with the capped ratio-priority selection rule of this module — lossless
    for n i.i.d. drafts.

    Shapes: ``p, q: [B, V]``, ``drafts: [B, n]`` (i.i.d. from q) → tokens ``[B]``, accepted index
    ``[B]`` (the first draft equal to the emitted token, −1 if none). Randomness: ``n + 1`` uniforms
    per position (eligibility coins, the acceptance test), plus one per rejected position.

    Raises:
        ValueError: a drafted token with ``q(x) = 0``; invalid inputs (see :func:`prepare_inputs`).
    """

    name = "importance"
    valid_laws = frozenset({DraftLaw.IID})

    @staticmethod
    def _law(p: Tensor, q: Tensor, n: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(q_is, eligible, rank, residual)`` ``[B, V]`` (residual = ``norm((p − q_is)_+)``, falling
        back to p); solved once when every row repeats the first (a broadcast p, as in enumeration
        and Monte-Carlo acceptance)."""
        B = p.shape[0]
        if B > 1 and p.stride(0) == 0 and (q.stride(0) == 0 or bool((q == q[:1]).all())):
            one = ImportanceVerifier._law(p[:1], q[:1], n)
            return one[0].expand(B, -1), one[1].expand(B, -1), one[2].expand(B, -1), one[3].expand(B, -1)
        q_is, elig, rank = importance_selection(p, q, n)
        p64 = p.to(torch.float64)
        res = (p64 - q_is).clamp_min(0.0)
        res = torch.where(res.sum(-1, keepdim=True) > 0, res, p64)
        return q_is, elig, rank, res / res.sum(-1, keepdim=True)

    def _select(self, p: Tensor, q: Tensor, d: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Per draft: eligibility probability, eligible key, ineligible key ``[B, n]``; and
        ``q_is [B, V]``, the normalised residual ``[B, V]``."""
        qx = check_draft_probs(q, d, self.name).to(torch.float64)
        q_is, elig, rank, res = self._law(p, q, d.shape[1])
        pi = (elig.gather(-1, d) / qx).clamp(0.0, 1.0)  # [B, n]
        r = rank.gather(-1, d)  # [B, n]
        return pi, r, r + p.shape[1], q_is, res

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None) -> VerifyOutput:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        B, n = d.shape
        pi, key_e, key_i, q_is, res_all = self._select(p, q, d)
        u = draw_uniforms((B, n + 1), generator, p.device)
        key = torch.where(u[:, :n] < pi, key_e, key_i)
        sel = key.argmin(-1)  # [B] first draft of highest priority
        y = d.gather(-1, sel.unsqueeze(-1)).squeeze(-1)
        py = gather1(p, y).to(torch.float64)
        accept = u[:, n] * gather1(q_is, y) < py  # u < p(Y) / q_IS(Y)
        tokens = y.clone()
        rej = (~accept).nonzero().squeeze(-1)
        if rej.numel():
            tokens[rej] = sample_categorical(res_all[rej], generator)
        return VerifyOutput(tokens=tokens, accepted_index=first_match(d, tokens))

    def selection_law(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``P(draft j is selected | drafts)`` ``[B, n]`` (float64; ties between equal tokens go to the
        lower index)."""
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        pi, key_e, key_i, _, _ = self._select(p, q, d)
        return self._selection_law(pi, key_e, key_i)

    @staticmethod
    def _selection_law(pi: Tensor, key_e: Tensor, key_i: Tensor) -> Tensor:
        n = pi.shape[1]
        j = torch.arange(n, device=pi.device)
        # draft k beats draft j among eligible copies: smaller key, or equal key and lower index
        beats = (key_e[:, None, :] < key_e[:, :, None]) | ((key_e[:, None, :] == key_e[:, :, None])
                                                          & (j[None, None, :] < j[None, :, None]))  # [B, j, k]
        none_better = torch.where(beats, (1.0 - pi)[:, None, :], torch.ones_like(beats, dtype=torch.float64)).prod(-1)
        s_elig = pi * none_better
        all_inelig = (1.0 - pi).prod(-1, keepdim=True)  # [B, 1]
        top_inelig = key_i.argmin(-1, keepdim=True)  # first draft of highest rank
        s_inelig = torch.zeros_like(pi).scatter_(-1, top_inelig, all_inelig)
        return s_elig + s_inelig

    def _parts(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(s, a, res, d)``: selection law ``[B, n]``, acceptance of each draft if selected
        ``[B, n]``, the normalised residual ``[B, V]`` and the drafts."""
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        pi, key_e, key_i, q_is, res = self._select(p, q, d)
        s = self._selection_law(pi, key_e, key_i)  # [B, n]
        a = (p.to(torch.float64).gather(-1, d) / q_is.gather(-1, d).clamp_min(torch.finfo(torch.float64).tiny))
        return s, a.clamp_max(1.0), res, d

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        s, a, res, d = self._parts(p, q, drafts)
        out = (s * (1.0 - a)).sum(-1, keepdim=True) * res
        out.scatter_add_(-1, d, s * a)
        return out

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``P(emitted token ∈ drafts | drafts)`` ``[B]`` (float64): the selected draft is accepted,
        or the correction lands on a drafted token."""
        s, a, res, d = self._parts(p, q, drafts)
        first = first_occurrences(d)  # count each distinct drafted token once
        acc = (s * a).sum(-1)
        return acc + (1.0 - acc) * (res.gather(-1, d) * first).sum(-1)

    def selected_acceptance(self, p: Tensor, q: Tensor, n: int) -> Tensor:
        """Closed-form ``Σ_y min(p(y), q_IS(y))`` ``[B]`` (float64): the probability that the selected
        draft is accepted, a lower bound on :meth:`acceptance`."""
        p, q, _ = prepare_inputs(p, q)
        q_is = importance_selection(p, q, n)[0]
        return torch.minimum(p.to(torch.float64), q_is).sum(-1)

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Acceptance ``[B]`` (P(emitted token is a draft)): exact by enumeration on small supports,
        else Monte-Carlo.

        Keyword args:
            method: ``"auto"`` (default), ``"exact"`` or ``"mc"``.
            samples: Monte-Carlo draft samples per position (default 4096).
            generator: ``torch.Generator`` for the Monte-Carlo draws.
        """
        self.check_construction(DraftLaw.IID, n)
        p, q, _ = prepare_inputs(p, q)
        return exact_or_monte_carlo_acceptance(self, p, q, n, DraftLaw.IID, kwargs)

