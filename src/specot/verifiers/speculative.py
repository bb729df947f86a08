"""Single-draft speculative sampling and its lenient variant.

Source: Leviathan et al. 2023, Algorithm 1 and App. A.5 (lenience); Chen et al. 2023.

One draft ``x ~ q``. Accept with probability ``min(1, p(x) / (l·q(x)))``; on rejection emit
``y ~ norm((p − l·q)_+)`` (the residual distribution). With ``l = 1`` this is the maximal coupling
of p and q: the emitted token is distributed exactly as p and the acceptance rate is
``β = Σ_x min(p(x), q(x)) = 1 − TV(p, q)``. With ``l < 1`` it is lossy: acceptance rises to
``Σ_x min(p(x)/l, q(x))`` and no token is emitted with probability above ``p(y)/l``.

A deterministic draft (an n-gram proposal) is a one-hot q on the drafted token.

Zero-mass residual: when ``(p − l·q)_+`` has no mass (``l = 1`` and ``p = q``) a rejection has
probability zero in exact arithmetic; if rounding nevertheless rejects, the token is drawn from p.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import check_probability_scalar
from ..sampling import draw_uniforms, sample_categorical
from ._common import safe_normalise
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier

__all__ = ["SpeculativeVerifier", "LenientVerifier", "residual_distribution"]


def residual_distribution(p: Tensor, q: Tensor, scale: float | Tensor = 1.0) -> Tensor:
    """``norm((p − scale·q)_+)`` per row, ``[B, V]``; rows with zero mass fall back to p.

    Args:
        p: ``[B, V]`` target probabilities.
        q: ``[B, V]`` draft probabilities (or any non-negative weights).
        scale: scalar or ``[B, 1]`` multiplier of q (the lenience l, or k-Seq's factor).
    """
    return safe_normalise((p - scale * q).clamp_min_(0.0), p)  # [B, V]


def _draft_probs(q: Tensor, x: Tensor) -> Tensor:
    qx = q.gather(-1, x.unsqueeze(-1)).squeeze(-1)  # [B]
    if bool((qx <= 0).any()):
        b = int((qx <= 0).nonzero()[0])
        raise ValueError(
            f"drafted token {int(x[b])} at position {b} has draft probability q(x) = 0; "
            "drafts must be sampled from q (for a deterministic draft pass a one-hot q)"
        )
    return qx


@register_verifier("speculative")
class SpeculativeVerifier(Verifier):
    """Speculative sampling (the maximal coupling), optionally lenient.

    Args:
        lenience: ``l ∈ (0, 1]``; ``1`` (default) is lossless speculative sampling.

    Shapes: ``p, q: [B, V]``, ``drafts: [B, 1]`` → tokens ``[B]``, accepted index ``[B]`` (0 or −1).

    Raises:
        ValueError: ``lenience`` outside ``(0, 1]``; more than one draft per position; a drafted
            token with ``q(x) = 0``; invalid probabilities (see :func:`prepare_inputs`).
    """

    name = "speculative"
    argmax_at_temperature_0 = True
    valid_laws = frozenset({DraftLaw.IID})
    max_drafts = 1

    def __init__(self, lenience: float = 1.0) -> None:
        self.lenience = check_probability_scalar(lenience, "lenience")
        self.lossless = self.lenience == 1.0  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lenience={self.lenience})"

    def _inputs(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        if d.shape[1] != 1:
            raise ValueError(f"{self.name!r} verifies one draft per position; got drafts of shape {tuple(d.shape)}")
        x = d[:, 0]  # [B]
        return p, q, x, _draft_probs(q, x)

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``min(1, p(x) / (l·q(x)))`` per position, ``[B]``."""
        p, _, x, qx = self._inputs(p, q, drafts)
        px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        return (px / (self.lenience * qx)).clamp_max(1.0)

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None) -> VerifyOutput:
        p, q, x, qx = self._inputs(p, q, drafts)
        px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)  # [B]
        u = draw_uniforms(x.shape, generator, p.device)  # [B]
        accept = u * (self.lenience * qx) < px  # u < p(x)/(l q(x)), no division
        tokens = x.clone()
        rejected = (~accept).nonzero().squeeze(-1)
        if rejected.numel():
            res = residual_distribution(p[rejected], q[rejected], self.lenience)
            tokens[rejected] = sample_categorical(res, generator)
        idx = torch.where(accept, torch.zeros_like(x), torch.full_like(x, -1))
        return VerifyOutput(tokens=tokens, accepted_index=idx)

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        p, q, x, qx = self._inputs(p, q, drafts)
        px = p.gather(-1, x.unsqueeze(-1)).squeeze(-1)
        a = (px / (self.lenience * qx)).clamp_max(1.0)  # [B]
        out = (1.0 - a).unsqueeze(-1) * residual_distribution(p, q, self.lenience)  # [B, V]
        out.scatter_add_(-1, x.unsqueeze(-1), a.unsqueeze(-1))
        return out

    def acceptance(self, p: Tensor, q: Tensor, n: int = 1, **kwargs: object) -> Acceptance:
        """Exact acceptance ``Σ_x min(p(x)/l, q(x))`` per position ``[B]`` (n must be 1)."""
        if n != 1:
            raise ValueError(f"{self.name!r} verifies a single draft; acceptance needs n=1, got n={n}")
        p, q, _ = prepare_inputs(p, q)
        val = torch.minimum(p / self.lenience, q).sum(-1).to(torch.float64)
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)


@register_verifier("lenient")
class LenientVerifier(SpeculativeVerifier):
    """Lenient speculative sampling (Leviathan et al. App. A.5) — lossy, ``π(y) ≤ p(y)/l``.

    Args:
        lenience: ``l ∈ (0, 1]``, default 0.5. ``l = 1`` is plain speculative sampling.
    """

    name = "lenient"

    def __init__(self, lenience: float = 0.5) -> None:
        super().__init__(lenience=lenience)
