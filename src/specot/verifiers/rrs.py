"""Recursive rejection sampling with replacement (SpecInfer's multi-round verification).

Source: Hu et al. 2025, App. A (π^{RRS,w}); Yang et al. 2024 / Jeon et al. 2024 (SpecInfer).

Drafts ``x_1..x_n`` i.i.d. from q. Round j accepts ``x_j`` with probability
``a_j = min(1, p_j(x_j)/q(x_j))`` where ``p_1 = p`` and ``p_{j+1} = norm((p_j − q)_+)``; if every
round rejects, the token is drawn from ``p_{n+1}``. Each round is speculative sampling of ``p_j``
against q, so the output follows p exactly. The ``p_j`` do not depend on the drafts, so rounds are
independent and the acceptance is exactly ``1 − Π_j (1 − β_j)`` with ``β_j = Σ_x min(p_j(x), q(x))``.

Zero-mass residual: if ``(p_j − q)_+`` has no mass (``p_j = q``), round j accepts with probability
1 in exact arithmetic; the next target is then taken to be ``p_j`` itself (as
:func:`specot.verifiers.residual_distribution` does).

``verify`` stops computing residuals for a position as soon as a draft is accepted there.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..sampling import sample_categorical
from ._common import SequentialRoundsVerifier, check_draft_probs, gather1, get_uniforms
from .base import Acceptance, DraftLaw, VerifyOutput, prepare_inputs, register_verifier
from .speculative import residual_distribution

__all__ = ["RRSVerifier"]


def _next_residual(w: Tensor, z: Tensor, qd: Tensor) -> tuple[Tensor, Tensor]:
    """Unnormalised residual step: ``p_j = w / z``; returns ``(w', z')`` with ``p_{j+1} = w'/z'``.

    Zero-mass rows keep ``(w, z)`` (the documented fallback).
    """
    w2 = (w - z.unsqueeze(-1) * qd).clamp_min_(0.0)
    z2 = w2.sum(-1, dtype=torch.float64).to(w.dtype)
    empty = z2 <= 0
    if bool(empty.any()):
        w2 = torch.where(empty.unsqueeze(-1), w, w2)
        z2 = torch.where(empty, z, z2)
    return w2, z2


@register_verifier("rrs")
class RRSVerifier(SequentialRoundsVerifier):
    """Multi-round recursive rejection sampling for i.i.d. drafts (lossless).

    Shapes: ``p, q: [B, V]``, ``drafts: [B, n]`` → tokens ``[B]``, accepted index ``[B]``.
    ``uniforms`` (optional) ``[B, n + 1]``: column j decides round j, column n the residual draw.

    Raises:
        ValueError: a drafted token with ``q(x) = 0``; invalid inputs.
    """

    name = "rrs"
    valid_laws = frozenset({DraftLaw.IID})

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None, *,
               uniforms: Tensor | None = None) -> VerifyOutput:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        B, n = d.shape
        qx_all = check_draft_probs(q, d, self.name)
        u = get_uniforms(uniforms, (B, n + 1), generator, p.device)
        tokens = d[:, 0].clone()
        idx = torch.full((B,), -1, dtype=torch.int64, device=p.device)
        rows = torch.arange(B, device=p.device)  # positions still undecided
        w, z, qd = p, torch.ones(B, dtype=p.dtype, device=p.device), q
        for j in range(n):
            x = d[rows, j]
            acc = u[rows, j] * qx_all[rows, j].to(torch.float64) * z.to(torch.float64) < gather1(w, x).to(torch.float64)
            if bool(acc.any()):
                tokens[rows[acc]] = x[acc]
                idx[rows[acc]] = j
                keep = ~acc
                rows, w, z, qd = rows[keep], w[keep], z[keep], qd[keep]
            if rows.numel() == 0:
                return VerifyOutput(tokens=tokens, accepted_index=idx)
            w, z = _next_residual(w, z, qd)
        tokens[rows] = sample_categorical(w, uniforms=u[rows, n])
        return VerifyOutput(tokens=tokens, accepted_index=idx)

    def _rounds(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Accept probabilities ``a [B, n]`` (float64), the final residual ``[B, V]`` and drafts."""
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        qx = check_draft_probs(q, d, self.name).to(torch.float64)
        pj = p
        a = []
        for j in range(d.shape[1]):
            a.append((gather1(pj, d[:, j]).to(torch.float64) / qx[:, j]).clamp_max(1.0))
            pj = residual_distribution(pj, q)
        return torch.stack(a, -1), pj, d

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Exact acceptance ``1 − Π_{j=1..n} (1 − Σ_x min(p_j(x), q(x)))`` per position ``[B]``."""
        self.check_construction(DraftLaw.IID, n)
        p, q, _ = prepare_inputs(p, q)
        pj = p
        miss = torch.ones(p.shape[0], dtype=torch.float64)
        for _ in range(n):
            miss = miss * (1.0 - torch.minimum(pj, q).sum(-1, dtype=torch.float64)).clamp_min(0.0)
            pj = residual_distribution(pj, q)
        val = 1.0 - miss
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
