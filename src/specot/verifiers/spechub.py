"""Verification for SpecHub's n = 2 draft construction. Hu et al. 2025 §5.3.

Draft law :data:`DraftLaw.SPECHUB`: ``x_1 ~ q``; ``x_2 = t`` (the top-1 token of q, first maximal
id) when ``x_1 ≠ t``, otherwise ``x_2 ~ q¬t`` (without replacement). The draft SET is always
``{t, z}`` with ``P(z = i) = q(i) + q(t)·q(i)/(1 − q(t)) = q¬t(i)`` — the same set law as the
GREEDY law with n = 2 (Hu et al. §5.3 note the two are "essentially equivalent"). The optimal
acceptance depends only on the set law, so we verify with the greedy rule on ``(T = {t}, z)``:
accept z w.p. ``min(1, p(z)/q¬t(z))``, else draw ``y ~ norm((p − q¬t)_+)``, accepted if ``y = t``.

Guarantee: lossless, acceptance exactly ``α* = p(t) + Σ_x min(p(x), q¬t(x))`` (Hu et al. Thm 7 via
the set-law equivalence). This is NOT the LP-derived transport of the SpecHub paper (Sun et al.
2024b, not in the project's sources); its acceptance is at least SpecHub's, since α* is optimal.
With n = 1 it is speculative sampling.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._common import check_draft_probs, get_uniforms
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier
from .greedy import greedy_acceptance, top_last_output, top_last_verify

__all__ = ["SpecHubVerifier"]


@register_verifier("spechub")
class SpecHubVerifier(Verifier):
    """Optimal verifier for SpecHub drafts (n ≤ 2, lossless, α = α*).

    Shapes: ``p, q: [B, V]``, ``drafts: [B, n]`` with n ∈ {1, 2} → tokens ``[B]``, accepted index
    ``[B]``. ``uniforms`` (optional) ``[B, 2]``.

    Raises:
        ValueError: drafts not of the SpecHub form (neither draft is the top-1 token, or
            ``x_1 ≠ t`` and ``x_2 ≠ t``, or repeated tokens), a draft with ``q = 0``; invalid inputs.
    """

    name = "spechub"
    valid_laws = frozenset({DraftLaw.SPECHUB})
    max_drafts = 2

    def _split(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        B, n = d.shape
        if n > 2:
            raise ValueError(f"{self.name!r} takes at most 2 drafts per position, got {n}")
        check_draft_probs(q, d, self.name)
        if n == 1:
            e = torch.empty(B, 0, dtype=torch.int64, device=p.device)
            return p, q, e, d[:, 0], e, torch.zeros(B, dtype=torch.int64, device=p.device)
        t = q.argmax(-1)  # [B] first maximal id, as the sampler
        first_is_top = d[:, 0] == t
        bad = (d[:, 0] == d[:, 1]) | (~first_is_top & (d[:, 1] != t))
        if bool(bad.any()):
            b = int(bad.nonzero()[0])
            raise ValueError(
                f"{self.name}: drafts {d[b].tolist()} at position {b} are not of the SpecHub form (top-1 token of q "
                f"is {int(t[b])}); draw them with specot.laws.sample_drafts(q, 2, 'spechub')"
            )
        last = torch.where(first_is_top, d[:, 1], d[:, 0])
        last_pos = torch.where(first_is_top, 1, 0).to(torch.int64)
        top_pos = (1 - last_pos).unsqueeze(-1)
        return p, q, t.unsqueeze(-1), last, top_pos, last_pos

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None, *,
               uniforms: Tensor | None = None) -> VerifyOutput:
        p, q, top, last, top_pos, last_pos = self._split(p, q, drafts)
        u = get_uniforms(uniforms, (p.shape[0], 2), generator, p.device)
        return top_last_verify(p, q, top, last, top_pos, last_pos, u)

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        p, q, top, last, _, _ = self._split(p, q, drafts)
        return top_last_output(p, q, top, last)[0].to(p.dtype)

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``P(accept | drafts)`` ``[B]``."""
        p, q, top, last, _, _ = self._split(p, q, drafts)
        return top_last_output(p, q, top, last)[1]

    def acceptance(self, p: Tensor, q: Tensor, n: int = 2, **kwargs: object) -> Acceptance:
        """Exact acceptance ``p(t) + Σ min(p, q¬t)`` for n = 2 (``Σ min(p, q)`` for n = 1) ``[B]``."""
        self.check_construction(DraftLaw.SPECHUB, n)
        p, q, _ = prepare_inputs(p, q)
        if n == 2 and bool(((q > 0).sum(-1) < 2).any()):
            raise ValueError("the SpecHub draft law with n=2 needs at least 2 tokens with q > 0")
        top = q.argmax(-1, keepdim=True) if n == 2 else torch.empty(p.shape[0], 0, dtype=torch.int64)
        val = greedy_acceptance(p, q, top)
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
