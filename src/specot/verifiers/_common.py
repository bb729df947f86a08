"""Shared helpers of the multi-draft verifiers (private)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..laws import enumerate_draft_law, sample_drafts
from ..sampling import draw_uniforms
from .base import Acceptance, DraftLaw, Verifier

__all__: list[str] = []

#: Largest number of enumerated draft tuples used for an exact acceptance by enumeration.
EXACT_ENUMERATION_LIMIT = 5_000


def gather1(t: Tensor, idx: Tensor) -> Tensor:
    """``t[b, idx[b]]`` for ``t [B, V]`` and ``idx [B]`` → ``[B]``."""
    return t.gather(-1, idx.unsqueeze(-1)).squeeze(-1)


def check_draft_probs(q: Tensor, drafts: Tensor, name: str) -> Tensor:
    """``q(drafts)`` ``[B, n]``; raise ``ValueError`` if a drafted token has ``q(x) = 0``."""
    qx = q.gather(-1, drafts)
    if bool((qx <= 0).any()):
        b, j = (qx <= 0).nonzero()[0].tolist()
        raise ValueError(
            f"{name}: draft {j} at position {b} (token {int(drafts[b, j])}) has draft probability q(x) = 0; "
            "drafts must be sampled from q under the verifier's draft law (see specot.laws.sample_drafts)"
        )
    return qx


def get_uniforms(uniforms: Tensor | None, shape: tuple[int, int], generator: torch.Generator | None,
                 device: torch.device) -> Tensor:
    """Pre-drawn uniforms ``[B, k]`` (checked) or fresh ones from ``generator`` (float64)."""
    if uniforms is None:
        return draw_uniforms(shape, generator, device)
    if not isinstance(uniforms, Tensor) or tuple(uniforms.shape) != tuple(shape):
        got = tuple(uniforms.shape) if isinstance(uniforms, Tensor) else type(uniforms).__name__
        raise ValueError(f"uniforms must be a tensor of shape {tuple(shape)} ([B, n + 1]), got {got}")
    u = uniforms.to(torch.float64)
    if bool(((u < 0) | (u >= 1) | torch.isnan(u)).any()):
        raise ValueError("uniforms must lie in [0, 1)")
    return u


def unique_rows(p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Distinct ``(p, q)`` row pairs: ``(p_u [U, V], q_u [U, V], inverse [B])`` (per-row solvers run once)."""
    if p.shape[0] <= 1:
        return p, q, torch.zeros(p.shape[0], dtype=torch.int64, device=p.device)
    both = torch.cat([p, q], -1)
    uniq, inv = torch.unique(both, dim=0, return_inverse=True)
    V = p.shape[1]
    return uniq[:, :V], uniq[:, V:], inv


def first_match(drafts: Tensor, tokens: Tensor) -> Tensor:
    """Index of the first draft equal to the emitted token, or −1 ``[B]``."""
    match = drafts == tokens.unsqueeze(-1)
    first = match.to(torch.int64).argmax(-1)
    return torch.where(match.any(-1), first, torch.full_like(first, -1))


def first_occurrences(drafts: Tensor) -> Tensor:
    """bool ``[B, n]``: True where ``drafts[b, j]`` differs from every earlier draft of row b (each
    distinct drafted token counted once)."""
    n = drafts.shape[1]
    first = torch.ones_like(drafts, dtype=torch.bool)
    for j in range(1, n):
        first[:, j] = ~(drafts[:, :j] == drafts[:, j:j + 1]).any(-1)
    return first


def sequential_output_law(a: Tensor, residual: Tensor, drafts: Tensor) -> Tensor:
    """Exact ``π(y | drafts)`` ``[B, V]`` of a verifier that tries drafts in order, accepting draft j
    with probability ``a[:, j]`` (``a [B, n]``, float64) and otherwise drawing from ``residual [B, V]``.

    Shared by k-Seq, RRS and RRS without replacement.
    """
    B, n = a.shape
    reach = torch.cumprod(torch.cat([torch.ones(B, 1, dtype=torch.float64, device=a.device), 1.0 - a], -1), -1)  # [B, n+1]
    out = reach[:, n:] * residual.to(torch.float64)
    out.scatter_add_(-1, drafts, reach[:, :n] * a)
    return out


class SequentialRoundsVerifier(Verifier):
    """A verifier that tries its drafts in order (RRS, RRS without replacement): subclasses define
    ``_rounds(p, q, drafts) -> (a [B, n] float64, residual [B, V], drafts [B, n])``, the acceptance
    probability of each round and the residual left after the last; the output law and the
    acceptance given the drafts follow from them alone."""

    def _rounds(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        a, res, d = self._rounds(p, q, drafts)
        return sequential_output_law(a, res, d).to(res.dtype)

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``1 − Π_j (1 − a_j)`` ``[B]`` given the drafts."""
        a = self._rounds(p, q, drafts)[0]
        return 1.0 - (1.0 - a).prod(-1)


def safe_normalise(w: Tensor, fallback: Tensor) -> Tensor:
    """``w / Σ w`` per row; rows with zero mass become ``fallback`` normalised (no NaN)."""
    mass = w.sum(-1, keepdim=True)
    empty = mass <= 0
    if bool(empty.any()):
        w = torch.where(empty, fallback, w)
        mass = w.sum(-1, keepdim=True)
    return w / mass


def enumerated_acceptance(verifier: Verifier, p: Tensor, q: Tensor, n: int, law: DraftLaw) -> Tensor:
    """Exact ``E[P(accept | drafts)]`` ``[B]`` by enumerating every draft tuple (small support only)."""

    out = torch.empty(p.shape[0], dtype=torch.float64)
    for b in range(p.shape[0]):
        tuples, probs = enumerate_draft_law(q[b].to(torch.float64), n, law)
        m = tuples.shape[0]
        pb = p[b].to(torch.float64).expand(m, -1)
        qb = q[b].to(torch.float64).expand(m, -1)
        acc = verifier.accept_probability(pb, qb, tuples)  # type: ignore[attr-defined]
        out[b] = (acc * probs).sum()
    return out


def enumeration_size(q: Tensor, n: int, law: DraftLaw) -> int:
    """Largest number of tuples :func:`enumerate_draft_law` would list over the rows of ``q``."""
    s = int((q > 0).sum(-1).max())
    if law == DraftLaw.IID or n == 1:
        return s**n
    if law == DraftLaw.WOR:
        return math.perm(s, n) if s >= n else 0
    return s


def monte_carlo_acceptance(verifier: Verifier, p: Tensor, q: Tensor, n: int, law: DraftLaw, samples: int,
                           generator: torch.Generator | None) -> Acceptance:
    """Rao–Blackwellised Monte-Carlo estimate of α ``[B]``: mean of ``P(accept | drafts)`` over drafts
    sampled from the law, with its standard error."""

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 2:
        raise ValueError(f"samples must be an int >= 2, got {samples!r}")
    B, V = p.shape
    chunk = max(1, min(samples, 2_000_000 // max(V, 1)))  # bound memory to ~2M entries per pass
    acc = torch.empty(B, samples, dtype=torch.float64)
    for b in range(B):
        for s0 in range(0, samples, chunk):
            m = min(chunk, samples - s0)
            pe = p[b : b + 1].expand(m, V)
            qe = q[b : b + 1].expand(m, V).contiguous()
            drafts = sample_drafts(qe, n, law, generator)
            acc[b, s0 : s0 + m] = verifier.accept_probability(pe, qe, drafts).to(torch.float64)  # type: ignore[attr-defined]
    return Acceptance(value=acc.mean(-1), stderr=acc.std(-1) / math.sqrt(samples), exact=False, samples=samples)


def exact_or_monte_carlo_acceptance(verifier: Verifier, p: Tensor, q: Tensor, n: int, law: DraftLaw,
                                    kwargs: dict[str, object]) -> Acceptance:
    """Acceptance ``[B]`` of ``verifier`` with ``n`` drafts under ``law``: exact by enumeration when
    the draft law has at most :data:`EXACT_ENUMERATION_LIMIT` tuples (or ``method="exact"``), else a
    Monte-Carlo estimate (``method="mc"``, ``samples`` draft samples, ``generator``).

    Raises:
        ValueError: an unknown ``method``.
    """
    method = kwargs.get("method", "auto")
    if method not in ("auto", "exact", "mc"):
        raise ValueError(f"method must be 'auto', 'exact' or 'mc', got {method!r}")
    if method == "exact" or (method == "auto" and enumeration_size(q, n, law) <= EXACT_ENUMERATION_LIMIT):
        val = enumerated_acceptance(verifier, p, q, n, law)
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
    return monte_carlo_acceptance(verifier, p, q, n, law, kwargs.get("samples", 4096),  # type: ignore[arg-type]
                                  kwargs.get("generator"))  # type: ignore[arg-type]
