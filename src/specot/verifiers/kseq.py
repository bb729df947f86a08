"""k-Seq: SpecTr's multi-draft verifier for i.i.d. drafts (Sun et al. 2023, Algorithm 2).

(SpecTr writes p for the draft and q for the target; here p is the target, q the draft.)

With ``β(ρ) = Σ_x min(q(x), p(x)/ρ)`` and ``p_acc(ρ) = 1 − (1 − β(ρ))^n``, the parameter ρ* is the
smallest ``ρ ≥ 1`` with ``p_acc(ρ) ≤ ρ·β(ρ)``; the difference ``f(ρ) = p_acc(ρ) − ρβ(ρ)`` is
non-increasing (β falls, ``ρβ = Σ min(ρq, p)`` rises), ``f(1) ≥ 0`` and ``f(n) ≤ 0`` (Bernoulli's
inequality), so ρ* is found by bracketing on ``[1, n]`` (regula falsi with the Illinois rule — a
safeguarded bisection that converges superlinearly; ~10 passes over V). We return the upper end of
the final bracket, where ``f ≤ 0`` holds as computed: the algorithm is valid (exact) for every
``ρ ≥ ρ*`` (SpecTr Lemma 4), so the emitted token follows p exactly; the acceptance is
``1 − (1 − β(ρ))^n`` for the returned ρ, within ~1e-12 of the optimum for ρ*.

Algorithm: for i = 1..n accept ``X_i`` with prob ``min(1, p(X_i)/(ρ q(X_i)))``; if none is
accepted emit ``y ~ p_res``, ``p_res ∝ p − min(q, p/ρ)·p_acc/β``. ρ is recomputed from the actual
n at every call (tree nodes have varying numbers of children).

Zero-mass residual: ``p_res`` has mass ``1 − p_acc``; when it is zero (β = 1, i.e. p = q) every
draft is accepted in exact arithmetic; if rounding still rejects all, the token is drawn from p.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..sampling import sample_categorical
from ._common import check_draft_probs, gather1, get_uniforms, safe_normalise, sequential_output_law
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier

__all__ = ["KSeqVerifier", "kseq_rho"]


def _rho_beta(p: Tensor, q: Tensor, rho: Tensor) -> Tensor:
    """``ρ·β(ρ) = Σ min(ρ q, p)`` ``[B]`` in float64, for ``rho [B]``."""
    return torch.minimum(q * rho.to(q.dtype).unsqueeze(-1), p).sum(-1).to(torch.float64)  # input-dtype sum: speed


def kseq_rho(p: Tensor, q: Tensor, n: int, *, rtol: float | None = None, max_iter: int = 200) -> tuple[Tensor, Tensor]:
    """ρ* of k-Seq and β(ρ*) per row.

    Args:
        p: target ``[B, V]``; q: draft ``[B, V]`` (already validated).
        n: number of i.i.d. drafts.

    Returns:
        ``(rho, beta)``: float64 ``[B]`` each; ``rho`` is the valid (upper) end of a bracket of
        relative width ``rtol`` (default 1e-13 for float64 inputs, 1e-7 for float32: any ρ ≥ ρ* is
        exact, a wider bracket only costs ~rtol of acceptance) around ρ* (bracket bookkeeping in numpy: only the evaluation of
        ``Σ min(ρq, p)`` touches the vocabulary).
    """
    B = p.shape[0]
    one = np.ones(B)
    if rtol is None:
        rtol = 1e-13 if p.dtype == torch.float64 else 1e-7

    def f(rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        s = _rho_beta(p, q, torch.from_numpy(rho).to(p.device)).cpu().numpy()
        beta = s / rho
        return (1.0 - np.clip(1.0 - beta, 0.0, None) ** n) - s, beta

    if n == 1:
        return torch.ones(B, dtype=torch.float64, device=p.device), torch.from_numpy(f(one)[1]).to(p.device)
    lo, hi = one.copy(), np.full(B, float(n))
    f_lo, beta_lo = f(lo)
    f_hi, beta_hi = f(hi)
    done = f_lo <= 0  # ρ* = 1 (β(1) ∈ {0, 1})
    hi = np.where(done, lo, hi)
    beta_hi = np.where(done, beta_lo, beta_hi)
    f_hi = np.minimum(np.where(done, f_lo, f_hi), 0.0)
    side = np.zeros(B)  # Illinois rule: +1 if hi was replaced last, -1 if lo
    for _ in range(max_iter):
        done = done | (hi - lo <= rtol * hi)
        if done.all():
            break
        denom = f_lo - f_hi
        x = np.where(denom > 0, hi + f_hi * (hi - lo) / np.where(denom > 0, denom, 1.0), 0.5 * (lo + hi))
        x = np.where((x > lo) & (x < hi), x, 0.5 * (lo + hi))
        x = np.where(done, hi, x)
        fx, bx = f(x)
        to_hi = (fx <= 0) & ~done
        to_lo = (fx > 0) & ~done
        f_lo = np.where(to_hi & (side == 1), 0.5 * f_lo, f_lo)  # Illinois: halve the stale end
        f_hi = np.where(to_lo & (side == -1), 0.5 * f_hi, f_hi)
        hi = np.where(to_hi, x, hi)
        f_hi = np.where(to_hi, fx, f_hi)
        beta_hi = np.where(to_hi, bx, beta_hi)
        lo = np.where(to_lo | (to_hi & (fx == 0)), x, lo)  # an exact root closes the bracket
        f_lo = np.where(to_lo, fx, f_lo)
        side = np.where(to_hi, 1.0, np.where(to_lo, -1.0, side))
    return torch.from_numpy(hi).to(p.device), torch.from_numpy(beta_hi).to(p.device)


@register_verifier("kseq")
class KSeqVerifier(Verifier):
    """SpecTr's k-Seq verifier (lossless for i.i.d. drafts; ``α ≥ (1 − 1/e)·α*``).

    Shapes: ``p, q: [B, V]``, ``drafts: [B, n]`` (i.i.d. from q) → tokens ``[B]``, accepted index
    ``[B]`` (first accepted draft, or −1). ``uniforms`` (optional) ``[B, n + 1]``: column j < n
    decides draft j, column n draws the residual.

    Raises:
        ValueError: a drafted token with ``q(x) = 0``; invalid inputs (see :func:`prepare_inputs`).
    """

    name = "kseq"
    valid_laws = frozenset({DraftLaw.IID})

    def _setup(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        n = d.shape[1]
        rho, beta = kseq_rho(p, q, n)
        qx = check_draft_probs(q, d, self.name).to(torch.float64)  # [B, n]
        px = p.gather(-1, d).to(torch.float64)
        a = (px / (rho.unsqueeze(-1) * qx)).clamp_max(1.0)  # [B, n] accept probabilities
        return p, q, d, rho, beta, a

    @staticmethod
    def _residual(p: Tensor, q: Tensor, rho: Tensor, beta: Tensor, n: int) -> Tensor:
        p_acc = 1.0 - (1.0 - beta).clamp_min(0.0) ** n  # [B]
        scale = torch.where(beta > 0, p_acc / torch.where(beta > 0, beta, torch.ones_like(beta)), torch.zeros_like(beta))
        dt = p.dtype
        w = (p - torch.minimum(q, p / rho.to(dt).unsqueeze(-1)) * scale.to(dt).unsqueeze(-1)).clamp_min(0.0)
        return safe_normalise(w, p)

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None, *,
               uniforms: Tensor | None = None) -> VerifyOutput:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        B, n = d.shape
        rho, beta = kseq_rho(p, q, n)
        qx = check_draft_probs(q, d, self.name).to(torch.float64)
        px = p.gather(-1, d).to(torch.float64)
        u = get_uniforms(uniforms, (B, n + 1), generator, p.device)
        acc = u[:, :n] * rho.unsqueeze(-1) * qx < px  # [B, n]
        any_acc = acc.any(-1)
        first = acc.to(torch.int64).argmax(-1)
        tokens = gather1(d, first)
        idx = torch.where(any_acc, first, torch.full_like(first, -1))
        rej = (~any_acc).nonzero().squeeze(-1)
        if rej.numel():
            res = self._residual(p[rej], q[rej], rho[rej], beta[rej], n)
            tokens[rej] = sample_categorical(res, uniforms=u[rej, n])
        return VerifyOutput(tokens=tokens, accepted_index=idx)

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        p, q, d, rho, beta, a = self._setup(p, q, drafts)
        return sequential_output_law(a, self._residual(p, q, rho, beta, d.shape[1]), d).to(p.dtype)

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``P(some draft accepted | drafts) = 1 − Π_j (1 − a_j)`` ``[B]``."""
        a = self._setup(p, q, drafts)[-1]
        return 1.0 - (1.0 - a).prod(-1)

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Exact acceptance ``1 − (1 − β(ρ*))^n`` per position ``[B]``."""
        self.check_construction(DraftLaw.IID, n)
        p, q, _ = prepare_inputs(p, q)
        _, beta = kseq_rho(p, q, n)
        val = 1.0 - (1.0 - beta).clamp_min(0.0) ** n
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
