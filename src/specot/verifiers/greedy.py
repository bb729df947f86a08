"""Greedy multi-draft verification (Hu et al. 2025, §5 and App. D; Theorem 7).

Draft law :data:`DraftLaw.GREEDY`: drafts ``x_1..x_{n−1}`` are the top-(n−1) tokens ``T`` of q
(deterministic), draft ``x_n`` is drawn from ``q¬T = norm(q·1{x ∉ T})``. Verification is
single-draft speculative sampling of ``x_n`` against p with draft law ``q¬T``, in which the tokens
of T count as accepted (App. D):

* accept ``x_n`` with probability ``a = min(1, p(x_n)/q¬T(x_n))``;
* otherwise draw ``y ~ norm((p − q¬T)_+)``; if ``y ∈ T`` it is accepted (index of y in drafts).

The emitted token follows p exactly and the acceptance is
``α = p(T) + Σ_x min(p(x), q¬T(x))``, which equals the optimum α* for this draft law (Theorem 7).

The verifier checks that the first n−1 drafts are distinct and that no other token has a larger q
(any deterministic tie-break among equal values is valid); ``n = 1`` is speculative sampling.

Zero-mass residual: ``(p − q¬T)_+`` has no mass only when ``p = q¬T`` (then ``p(T) = 0`` and ``a = 1``);
a rounding rejection then draws from p.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..laws import top_tokens
from ..sampling import sample_categorical
from ._common import check_draft_probs, gather1, get_uniforms, safe_normalise
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier

__all__ = ["GreedyVerifier", "top_last_output", "top_last_verify"]


def _masked_rest(q: Tensor, top: Tensor) -> tuple[Tensor, Tensor]:
    """``q`` with the ``top [B, k]`` tokens zeroed ``[B, V]`` and its mass ``[B]`` (float64)."""
    qr = q.scatter(-1, top, 0.0) if top.shape[1] else q
    return qr, qr.sum(-1, dtype=torch.float64)


def _residual(p: Tensor, qr: Tensor, qz: Tensor) -> Tensor:
    """``norm((p − qr/qz)_+)`` ``[B, V]`` (zero mass → p)."""
    w = (p * qz.to(p.dtype).unsqueeze(-1) - qr).clamp_min(0.0)
    return safe_normalise(w, p)


def top_last_verify(p: Tensor, q: Tensor, top: Tensor, last: Tensor, top_pos: Tensor, last_pos: Tensor,
                    u: Tensor) -> VerifyOutput:
    """Core of greedy verification (also used by SpecHub).

    Args:
        p, q: ``[B, V]`` validated. top: deterministic draft tokens ``[B, k]``; last: the sampled
        draft ``[B]``, drawn from q with ``top`` removed. top_pos ``[B, k]`` / last_pos ``[B]``:
        their indices in the caller's drafts. u: uniforms ``[B, 2]``.
    """
    qr, qz = _masked_rest(q, top)
    qx = gather1(qr, last).to(torch.float64)
    if bool((qx <= 0).any()):
        b = int((qx <= 0).nonzero()[0])
        raise ValueError(f"the sampled draft {int(last[b])} at position {b} has q(x) = 0 once the top drafts are removed")
    px = gather1(p, last).to(torch.float64)
    acc = u[:, 0] * qx < px * qz  # u < p(x) / q¬T(x)
    tokens = last.clone()
    idx = torch.where(acc, last_pos, torch.full_like(last_pos, -1))
    rej = (~acc).nonzero().squeeze(-1)
    if rej.numel():
        y = sample_categorical(_residual(p[rej], qr[rej], qz[rej]), uniforms=u[rej, 1])
        tokens[rej] = y
        if top.shape[1]:
            hit = top[rej] == y.unsqueeze(-1)
            pos = gather1(top_pos[rej], hit.to(torch.int64).argmax(-1))
            idx[rej] = torch.where(hit.any(-1), pos, torch.full_like(pos, -1))
    return VerifyOutput(tokens=tokens, accepted_index=idx)


def top_last_output(p: Tensor, q: Tensor, top: Tensor, last: Tensor) -> tuple[Tensor, Tensor]:
    """Exact ``π(y | drafts)`` ``[B, V]`` and ``P(accept | drafts)`` ``[B]`` of greedy verification."""
    qr, qz = _masked_rest(q, top)
    qx = gather1(qr, last).to(torch.float64)
    if bool((qx <= 0).any()):
        b = int((qx <= 0).nonzero()[0])
        raise ValueError(f"the sampled draft {int(last[b])} at position {b} has q(x) = 0 once the top drafts are removed")
    a = (gather1(p, last).to(torch.float64) * qz / qx).clamp_max(1.0)  # [B]
    res = _residual(p, qr, qz).to(torch.float64)
    out = (1.0 - a).unsqueeze(-1) * res
    out.scatter_add_(-1, last.unsqueeze(-1), a.unsqueeze(-1))
    acc = a + (1.0 - a) * res.gather(-1, top).sum(-1) if top.shape[1] else a
    return out, acc


def greedy_acceptance(p: Tensor, q: Tensor, top: Tensor) -> Tensor:
    """``p(T) + Σ min(p, q¬T)`` ``[B]`` (Hu et al. Theorem 7)."""
    qr, qz = _masked_rest(q, top)
    pt = p.gather(-1, top).sum(-1, dtype=torch.float64) if top.shape[1] else torch.zeros(p.shape[0], dtype=torch.float64)
    return pt + torch.minimum(p.to(torch.float64), qr.to(torch.float64) / qz.unsqueeze(-1)).sum(-1)


@register_verifier("greedy")
class GreedyVerifier(Verifier):
    """Greedy-draft verifier (lossless, optimal for the GREEDY draft law: α = α*).

    Shapes: ``p, q: [B, V]``, ``drafts: [B, n]`` = (top-(n−1) of q, one sampled) → tokens ``[B]``,
    accepted index ``[B]``. ``uniforms`` (optional) ``[B, 2]``: accept test, residual draw.

    Raises:
        ValueError: the first n−1 drafts are not a top-(n−1) set of q, the last draft is among
            them or has ``q = 0``; invalid inputs.
    """

    name = "greedy"
    argmax_at_temperature_0 = True
    valid_laws = frozenset({DraftLaw.GREEDY})

    def check_construction(self, law: DraftLaw | str, n: int) -> None:
        law = DraftLaw(law) if not isinstance(law, DraftLaw) else law
        if n == 1 and law in (DraftLaw.IID, DraftLaw.WOR, DraftLaw.SPECHUB):
            law = DraftLaw.GREEDY  # one draft: every law is one draw from q
        super().check_construction(law, n)

    def _split(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        n = d.shape[1]
        top, last = d[:, : n - 1], d[:, n - 1]
        check_draft_probs(q, d, self.name)
        if n > 1:
            qt = q.gather(-1, top)
            s = torch.sort(top, dim=-1).values
            if bool((s[:, 1:] == s[:, :-1]).any()):
                raise ValueError(f"{self.name}: the first n-1 greedy drafts must be distinct tokens")
            rest_max = q.scatter(-1, top, -1.0).max(-1).values
            if bool((qt.min(-1).values < rest_max).any()):
                b = int((qt.min(-1).values < rest_max).nonzero()[0])
                raise ValueError(
                    f"{self.name}: drafts[:, :n-1] at position {b} are not the top-{n - 1} tokens of q; greedy drafts "
                    "must come from specot.laws.sample_drafts(q, n, 'greedy')"
                )
        return p, q, top, last

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None, *,
               uniforms: Tensor | None = None) -> VerifyOutput:
        p, q, top, last = self._split(p, q, drafts)
        B, k = top.shape
        u = get_uniforms(uniforms, (B, 2), generator, p.device)
        pos = torch.arange(k, device=p.device).expand(B, k)
        return top_last_verify(p, q, top, last, pos, torch.full((B,), k, dtype=torch.int64, device=p.device), u)

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        p, q, top, last = self._split(p, q, drafts)
        return top_last_output(p, q, top, last)[0].to(p.dtype)

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``P(accept | drafts)`` ``[B]``: ``a + (1 − a)·res(T)``."""
        p, q, top, last = self._split(p, q, drafts)
        return top_last_output(p, q, top, last)[1]

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Exact acceptance ``p(T) + Σ min(p, q¬T)`` ``[B]`` (T = top-(n−1) of q; Theorem 7)."""
        self.check_construction(DraftLaw.GREEDY, n)
        p, q, _ = prepare_inputs(p, q)

        if n > 1 and bool(((q > 0).sum(-1) < n).any()):
            raise ValueError(f"the greedy draft law needs at least n={n} tokens with q > 0")
        val = greedy_acceptance(p, q, top_tokens(q, n - 1))
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
