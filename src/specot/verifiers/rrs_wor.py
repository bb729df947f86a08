"""Recursive rejection sampling without replacement.

Source: Hu et al. 2025, App. A (π^{RRS,wo}); Jeon et al. 2024.

Drafts by successive sampling without replacement from q (:data:`DraftLaw.WOR`). Round j uses
``q_j`` = q with drafts ``x_1..x_{j−1}`` removed and renormalised (the law of ``x_j`` given the
earlier drafts), accepts ``x_j`` with probability ``a_j = min(1, p_j(x_j)/q_j(x_j))``, and on
rejection moves to ``p_{j+1} = norm((p_j − q_j)_+)``. After n rejections the token is drawn from
``p_{n+1}``. By induction each round emits exactly ``p_j``, so the output follows p.

Acceptance: no closed form. :meth:`RRSWORVerifier.acceptance` is exact by enumeration when the
draft law has at most :data:`specot.verifiers._common.EXACT_ENUMERATION_LIMIT` ordered tuples
(small vocabularies), otherwise a Rao–Blackwellised Monte-Carlo estimate (mean of
``P(accept | drafts)`` over sampled drafts) with its standard error.

Zero-mass residual: as in :mod:`specot.verifiers.rrs` (the target stays ``p_j``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..sampling import sample_categorical
from ._common import (
    SequentialRoundsVerifier,
    check_draft_probs,
    exact_or_monte_carlo_acceptance,
    gather1,
    get_uniforms,
)
from .base import Acceptance, DraftLaw, VerifyOutput, prepare_inputs, register_verifier
from .speculative import residual_distribution

__all__ = ["RRSWORVerifier"]


def _check_distinct(d: Tensor, name: str) -> None:
    if d.shape[1] > 1:
        s = torch.sort(d, dim=-1).values
        if bool((s[:, 1:] == s[:, :-1]).any()):
            b = int((s[:, 1:] == s[:, :-1]).any(-1).nonzero()[0])
            raise ValueError(
                f"{name}: drafts at position {b} repeat a token {d[b].tolist()}; drafts drawn without replacement "
                "must be distinct (use the 'wor' draft law, or 'rrs' for i.i.d. drafts)"
            )


@register_verifier("rrs_wor")
class RRSWORVerifier(SequentialRoundsVerifier):
    """Recursive rejection sampling for drafts drawn without replacement (lossless).

    Shapes: ``p, q: [B, V]`` (q the ORIGINAL draft distribution), ``drafts: [B, n]`` distinct, in
    draw order → tokens ``[B]``, accepted index ``[B]``. ``uniforms`` (optional) ``[B, n + 1]``.

    Raises:
        ValueError: repeated drafts, a draft with ``q(x) = 0``; invalid inputs.
    """

    name = "rrs_wor"
    valid_laws = frozenset({DraftLaw.WOR})

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None, *,
               uniforms: Tensor | None = None) -> VerifyOutput:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        B, n = d.shape
        _check_distinct(d, self.name)
        qx_all = check_draft_probs(q, d, self.name).to(torch.float64)
        u = get_uniforms(uniforms, (B, n + 1), generator, p.device)
        tokens = d[:, 0].clone()
        idx = torch.full((B,), -1, dtype=torch.int64, device=p.device)
        rows = torch.arange(B, device=p.device)
        # p_j = w / z (unnormalised); q_j = qm / qz
        w, z = p, torch.ones(B, dtype=torch.float64, device=p.device)
        qm, qz = q, torch.ones(B, dtype=torch.float64, device=p.device)
        for j in range(n):
            x = d[rows, j]
            # u < p_j(x)/q_j(x)  <=>  u·q(x)·z < w(x)·qz
            acc = u[rows, j] * qx_all[rows, j] * z < gather1(w, x).to(torch.float64) * qz
            if bool(acc.any()):
                tokens[rows[acc]] = x[acc]
                idx[rows[acc]] = j
                keep = ~acc
                rows, x, w, z, qm, qz = rows[keep], x[keep], w[keep], z[keep], qm[keep], qz[keep]
            if rows.numel() == 0:
                return VerifyOutput(tokens=tokens, accepted_index=idx)
            w2 = (w - (z / qz).to(w.dtype).unsqueeze(-1) * qm).clamp_min(0.0)
            z2 = w2.sum(-1, dtype=torch.float64)
            empty = z2 <= 0  # zero-mass residual: keep p_j
            if bool(empty.any()):
                w2 = torch.where(empty.unsqueeze(-1), w, w2)
                z2 = torch.where(empty, z, z2)
            w, z = w2, z2
            if j + 1 < n:
                qm = qm.scatter(-1, x.unsqueeze(-1), 0.0)
                qz = qm.sum(-1, dtype=torch.float64)
        tokens[rows] = sample_categorical(w, uniforms=u[rows, n])
        return VerifyOutput(tokens=tokens, accepted_index=idx)

    def _rounds(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        _check_distinct(d, self.name)
        check_draft_probs(q, d, self.name)
        pj, qj = p, q
        a = []
        for j in range(d.shape[1]):
            x = d[:, j]
            a.append((gather1(pj, x).to(torch.float64) / gather1(qj, x).to(torch.float64)).clamp_max(1.0))
            pj = residual_distribution(pj, qj)
            qm = qj.scatter(-1, x.unsqueeze(-1), 0.0)
            qj = qm / qm.sum(-1, keepdim=True).clamp_min(torch.finfo(qm.dtype).tiny)
        return torch.stack(a, -1), pj, d

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Acceptance ``[B]``: exact by enumeration on small supports, else Monte-Carlo.

        Keyword args:
            method: ``"auto"`` (default), ``"exact"`` or ``"mc"``.
            samples: Monte-Carlo draft samples per position (default 4096).
            generator: ``torch.Generator`` for the Monte-Carlo draws.
        """
        self.check_construction(DraftLaw.WOR, n)
        p, q, _ = prepare_inputs(p, q)
        return exact_or_monte_carlo_acceptance(self, p, q, n, DraftLaw.WOR, kwargs)
