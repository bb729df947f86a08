"""Mentored decoding: KL-bounded lossy single-draft verification (Tran-Thien 2023).

(The paper writes p for the draft and q for the target; here p is the target, q the draft.)

One draft ``x ~ q``. Maximise the acceptance ``R = Σ_i q_i r_i`` subject to ``KL(p ‖ π) ≤ D``, where
``r_i`` is the acceptance probability of token i, ``s`` the fallback distribution and
``π_i = q_i r_i + s_i (1 − R)`` the emitted distribution. For ``α ∈ (0, 1]`` (ratios ``p_i/q_i``):

* ``p_i/q_i ≤ α``: ``r_i = p_i/(α q_i)``, ``s_i = 0``   → ``π_i = p_i/α``;
* ``α < p_i/q_i < β``: ``r_i = 1``, ``s_i = 0``          → ``π_i = q_i``;
* ``p_i/q_i ≥ β``: ``r_i = 1``, ``s_i ∝ p_i/β − q_i``    → ``π_i = p_i/β``;

with β ≥ 1 fixed by ``Σ (q_i − p_i/α)_+ = Σ (p_i/β − q_i)_+ = 1 − R``, and
``KL = ln α·Σ_{low} p + Σ_{mid} p ln(p/q) + ln β·Σ_{high} p``. KL and R both fall as α rises; α = 1
is lossless speculative sampling (KL = 0). Algorithm 1 of the paper: bisection on α until KL lies in
``(1 ± tol)·D``; when ``KL(p ‖ q) ≤ D`` every draft is accepted (π = q).

Implementation (per position, float64, numpy): sort the ratios once (O(V log V)); with prefix
sums every evaluation of ``c(α)``, β and KL costs O(log V), so the bisection on ``log α`` is cheap.
We always return an α whose KL (as computed) is ``≤ D(1 + tol)``; the reported
:meth:`MentoredVerifier.kl_to_target` is recomputed from the emitted distribution π itself.
``D = 0`` gives α = β = 1 exactly: speculative sampling. Fast path (the paper's): the draft is
accepted at once when ``u < min(1, p_x/q_x)`` (since ``r_x`` is never smaller), so the solve runs only
for the other positions.

Zero-mass fallback: when ``1 − R = 0`` every draft is accepted; a rounding rejection draws from p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..sampling import sample_categorical
from ._common import check_draft_probs, gather1, get_uniforms, safe_normalise, unique_rows
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier

__all__ = ["MentoredVerifier", "MentoredSolution", "mentored_solve"]


@dataclass(frozen=True)
class MentoredSolution:
    """Per-position solution of the mentored program, float64 ``[B]`` each.

    Attributes:
        alpha: α (0 means "accept every draft": ``KL(p ‖ q) ≤ D``).
        beta: β (``inf`` when α = 0).
        kl: the KL of the solution by the closed form (≤ D(1 + tol)).
        acceptance: R, the acceptance rate.
    """

    alpha: Tensor
    beta: Tensor
    kl: Tensor
    acceptance: Tensor


def _solve_row(p: np.ndarray, q: np.ndarray, D: float, tol: float, max_iter: int = 200) -> tuple[float, float, float, float]:
    """(α, β, KL, R) for one position."""
    if D == 0.0:
        return 1.0, 1.0, 0.0, float(np.minimum(p, q).sum())
    keep = (p > 0) | (q > 0)
    p, q = p[keep], q[keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(q > 0, p / q, np.inf)
        lr = np.where((p > 0) & (q > 0), np.log(r), 0.0)
    order = np.argsort(r, kind="stable")
    rs, ps, qs, ls = r[order], p[order], q[order], (p * lr)[order]
    Pc = np.concatenate([[0.0], np.cumsum(ps)])
    Qc = np.concatenate([[0.0], np.cumsum(qs)])
    Lc = np.concatenate([[0.0], np.cumsum(ls)])
    Ptot, Qtot = Pc[-1], Qc[-1]
    m = int(np.searchsorted(rs, np.inf, side="left"))  # finite ratios: rs[:m]
    p_inf = Ptot - Pc[m]
    kl_all = math.inf if p_inf > 0 else float(Lc[m])
    if kl_all <= D:
        return 0.0, math.inf, kl_all, 1.0
    rf = rs[:m]
    # H[j] = G(rs[j]) with G(β) = Σ_{r>β} (p/β − q), non-increasing in j (j tokens with r ≤ β on the left piece)
    with np.errstate(divide="ignore", invalid="ignore"):
        H = np.where(rf > 0, (Ptot - Pc[:m]) / rf - (Qtot - Qc[:m]), np.inf)
    negH = -H

    def evaluate(alpha: float) -> tuple[float, float, float]:
        ka = int(np.searchsorted(rs, alpha, side="right"))
        c = Qc[ka] - Pc[ka] / alpha
        c = max(c, 0.0)
        j = int(np.searchsorted(negH, -c, side="left"))  # first j with H[j] <= c
        a_j, c_j = Ptot - Pc[j], Qtot - Qc[j]
        if j >= m and p_inf > 0 and c + c_j <= 0:
            return math.inf, math.inf, 1.0
        beta = a_j / (c + c_j) if c + c_j > 0 else (rf[m - 1] if m else 1.0)
        beta = max(beta, 1.0)
        jb = int(np.searchsorted(rs, beta, side="left"))  # tokens with r < β are mid/low
        jb = max(jb, ka)
        kl = math.log(alpha) * Pc[ka] + (Lc[jb] - Lc[ka]) + math.log(beta) * (Ptot - Pc[jb])
        R = Pc[ka] / alpha + (Qtot - Qc[ka])
        return beta, max(kl, 0.0), min(R, 1.0)

    lo, hi = -745.0, 0.0  # log α bracket; KL(hi) = 0 <= D, KL(lo) ~ KL(p‖q) > D
    best = (1.0, 1.0, 0.0, float(np.minimum(p, q).sum()))
    for _ in range(max_iter):
        mid = 0.5 * (lo + hi)
        alpha = math.exp(mid)
        beta, kl, R = evaluate(alpha)
        if kl <= D * (1.0 + tol):
            hi = mid
            best = (alpha, beta, kl, R)
            if kl >= D * (1.0 - tol):
                break
        else:
            lo = mid
        if hi - lo < 1e-15:
            break
    return best


def mentored_solve(p: Tensor, q: Tensor, D: float, tol: float = 1e-3) -> MentoredSolution:
    """Solve the mentored program for every row of ``p, q [B, V]`` (validated) → :class:`MentoredSolution`."""
    pu, qu, inv = unique_rows(p, q)  # solve each distinct row once
    pn = pu.detach().to(torch.float64).cpu().numpy()
    qn = qu.detach().to(torch.float64).cpu().numpy()
    rows = [_solve_row(pn[b], qn[b], D, tol) for b in range(pn.shape[0])]
    a, bt, kl, R = (torch.tensor(v, dtype=torch.float64, device=p.device)[inv] for v in zip(*rows))
    return MentoredSolution(alpha=a, beta=bt, kl=kl, acceptance=R)


@register_verifier("mentored")
class MentoredVerifier(Verifier):
    """Mentored decoding (lossy, ``KL(p ‖ π) ≤ D(1 + tol)``; D = 0 is speculative sampling).

    Args:
        D: KL budget ``≥ 0`` (nats). tol: relative tolerance of the bisection (default 1e-3).

    Shapes: ``p, q: [B, V]``, ``drafts: [B, 1]`` → tokens ``[B]``, accepted index ``[B]`` (0 / −1).
    ``uniforms`` (optional) ``[B, 2]``.

    Raises:
        ValueError: negative / non-finite D or tol outside (0, 1); n ≠ 1; ``q(x) = 0``; bad inputs.
    """

    name = "mentored"
    valid_laws = frozenset({DraftLaw.IID})
    max_drafts = 1
    lossless = False

    def __init__(self, D: float = 0.1, tol: float = 1e-3) -> None:
        if isinstance(D, bool) or not isinstance(D, (int, float)) or not math.isfinite(D) or D < 0:
            raise ValueError(f"D (KL budget) must be a finite number >= 0, got {D!r}")
        if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < 1:
            raise ValueError(f"tol must lie in (0, 1), got {tol!r}")
        self.D, self.tol = float(D), float(tol)
        self.lossless = self.D == 0.0  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"MentoredVerifier(D={self.D}, tol={self.tol})"

    def solve(self, p: Tensor, q: Tensor) -> MentoredSolution:
        """α, β, KL and acceptance per position ``[B]`` (see :func:`mentored_solve`)."""
        p, q, _ = prepare_inputs(p, q)
        return mentored_solve(p, q, self.D, self.tol)

    @staticmethod
    def _accept_probs(p: Tensor, q: Tensor, alpha: Tensor) -> Tensor:
        """``r [B, V]`` float64: ``min(1, p/(α q))``, 1 where α = 0 (accept all)."""
        p64, q64 = p.to(torch.float64), q.to(torch.float64)
        a = alpha.unsqueeze(-1)
        with torch.no_grad():
            r = torch.where(q64 > 0, (p64 / (a * q64).clamp_min(1e-300)).clamp_max(1.0), torch.ones_like(p64))
        return torch.where(a == 0, torch.ones_like(r), r)

    @staticmethod
    def _fallback(p: Tensor, q: Tensor, beta: Tensor) -> Tensor:
        """``s ∝ (p/β − q)_+`` ``[B, V]`` float64; zero mass (or β = ∞) → p."""
        p64, q64 = p.to(torch.float64), q.to(torch.float64)
        b = beta.unsqueeze(-1)
        w = torch.where(torch.isinf(b), torch.zeros_like(p64), (p64 / b - q64).clamp_min(0.0))
        return safe_normalise(w, p64)

    def emitted_distribution(self, p: Tensor, q: Tensor) -> Tensor:
        """The emitted marginal ``π [B, V]`` (float64): ``q·r + s·(1 − R)``."""
        p, q, _ = prepare_inputs(p, q)
        sol = mentored_solve(p, q, self.D, self.tol)
        r = self._accept_probs(p, q, sol.alpha)
        R = (q.to(torch.float64) * r).sum(-1, keepdim=True)
        return q.to(torch.float64) * r + self._fallback(p, q, sol.beta) * (1.0 - R).clamp_min(0.0)

    def kl_to_target(self, p: Tensor, q: Tensor) -> Tensor:
        """``KL(p ‖ π)`` ``[B]`` of the emitted distribution π (nats), computed from π itself."""
        pi = self.emitted_distribution(p, q)
        p64 = prepare_inputs(p, q)[0].to(torch.float64)
        pos = p64 > 0
        terms = torch.where(pos, p64 * (torch.log(torch.where(pos, p64, 1.0)) - torch.log(pi.clamp_min(1e-300))), 0.0)
        return terms.sum(-1)

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None, *,
               uniforms: Tensor | None = None) -> VerifyOutput:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        if d.shape[1] != 1:
            raise ValueError(f"{self.name!r} verifies one draft per position; got drafts of shape {tuple(d.shape)}")
        B = d.shape[0]
        x = d[:, 0]
        qx = check_draft_probs(q, d, self.name)[:, 0].to(torch.float64)
        px = gather1(p, x).to(torch.float64)
        u = get_uniforms(uniforms, (B, 2), generator, p.device)
        accept = u[:, 0] * qx < px  # fast path: r_x >= min(1, p/q)
        slow = (~accept).nonzero().squeeze(-1)
        tokens = x.clone()
        if slow.numel() and self.D > 0:
            sol = mentored_solve(p[slow], q[slow], self.D, self.tol)
            a = sol.alpha
            r = torch.where(a == 0, torch.ones_like(a), (px[slow] / (a * qx[slow]).clamp_min(1e-300)).clamp_max(1.0))
            acc2 = u[slow, 0] < r
            accept[slow[acc2]] = True
            rej = ~acc2
            if bool(rej.any()):
                rows = slow[rej]
                tokens[rows] = sample_categorical(self._fallback(p[rows], q[rows], sol.beta[rej]), uniforms=u[rows, 1])
        elif slow.numel():  # D = 0: speculative sampling
            w = (p[slow] - q[slow]).clamp_min(0.0)
            tokens[slow] = sample_categorical(safe_normalise(w, p[slow]), uniforms=u[slow, 1])
        idx = torch.where(accept, torch.zeros_like(x), torch.full_like(x, -1))
        return VerifyOutput(tokens=tokens, accepted_index=idx)

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        if d.shape[1] != 1:
            raise ValueError(f"{self.name!r} verifies one draft per position; got drafts of shape {tuple(d.shape)}")
        check_draft_probs(q, d, self.name)
        sol = mentored_solve(p, q, self.D, self.tol)
        r = gather1(self._accept_probs(p, q, sol.alpha), d[:, 0])  # [B]
        out = (1.0 - r).unsqueeze(-1) * self._fallback(p, q, sol.beta)
        out.scatter_add_(-1, d, r.unsqueeze(-1))
        return out.to(p.dtype)

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``r_x`` ``[B]``: the acceptance probability of the drafted token."""
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        check_draft_probs(q, d, self.name)
        sol = mentored_solve(p, q, self.D, self.tol)
        return gather1(self._accept_probs(p, q, sol.alpha), d[:, 0])

    def acceptance(self, p: Tensor, q: Tensor, n: int = 1, **kwargs: object) -> Acceptance:
        """Exact acceptance ``R = Σ_i q_i r_i`` per position ``[B]`` (n must be 1)."""
        self.check_construction(DraftLaw.IID, n)
        p, q, _ = prepare_inputs(p, q)
        sol = mentored_solve(p, q, self.D, self.tol)
        val = (q.to(torch.float64) * self._accept_probs(p, q, sol.alpha)).sum(-1)
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
