"""Draft laws: the law enum, samplers of n drafts from q, and their exact enumeration on small vocabularies.

A *draft law* (:class:`DraftLaw`) says how the ``n`` drafts at one position are
drawn from the draft distribution ``q``:

* ``IID`` — i.i.d. from q (with replacement); SpecTr (Sun et al. 2023).
* ``WOR`` — successive sampling without replacement: draft j is drawn from q renormalised after
  removing drafts 1..j−1. Sampled as an exponential race (``T_i = E_i / q(i)``, ``E_i ~ Exp(1)``;
  the n earliest arrivals, in arrival order), which is the Gumbel top-k trick written with
  exponentials (``−log T_i = log q(i) + Gumbel``). Hu et al. 2025 §3.
* ``GREEDY`` — drafts 1..n−1 are the top-(n−1) tokens of q in decreasing order (ties: lower token
  id first), draft n is drawn from q with those removed. Hu et al. 2025 §5.
* ``SPECHUB`` (n = 2) — draft 1 ~ q; draft 2 is the top-1 token of q (first maximal id) unless
  draft 1 is that token, in which case draft 2 is drawn from q with it removed. Hu et al. §5.3.

For ``n = 1`` the IID, WOR and SPECHUB laws are one draw from q (and so is GREEDY).

:func:`sample_drafts` draws ``[B, n]`` drafts from ``q [B, V]``; :func:`enumerate_draft_law` lists
every ordered draft tuple of ``q [V]`` with its exact probability (small vocabularies only), which
the exactness tests and the optimal-transport LP (:mod:`specot.verifiers.otm`) are built on.
"""

from __future__ import annotations

import enum
import itertools
import math

import numpy as np
import torch
from torch import Tensor

from ._validation import check_probs
from .sampling import draw_uniforms

__all__ = ["DraftLaw", "sample_drafts", "enumerate_draft_law", "MAX_ENUMERATED_TUPLES", "top_tokens"]

class DraftLaw(str, enum.Enum):
    """How the ``n`` drafts at one position were drawn from the draft distribution q.

    * ``IID`` — i.i.d. from q (with replacement); SpecTr (Sun et al. 2023).
    * ``WOR`` — successive sampling without replacement (Gumbel top-k / sequential sampling;
      Hu et al. 2025, Sec. 3).
    * ``GREEDY`` — the top-(n−1) tokens of q, then one token sampled from q with those removed
      (Hu et al. 2025, Sec. 5).
    * ``SPECHUB`` — n = 2: one sampled draft; the second is the top-1 token of q, or (when the first
      draft is the top-1 token) a sample without replacement (Sun et al. 2024, SpecHub; Hu et al.
      2025, Sec. 5.3).

    For ``n = 1`` all four laws coincide (one draw from q).
    """

    IID = "iid"
    WOR = "wor"
    GREEDY = "greedy"
    SPECHUB = "spechub"


#: Largest number of ordered draft tuples :func:`enumerate_draft_law` will list.
MAX_ENUMERATED_TUPLES = 200_000


def _as_law(law: DraftLaw | str) -> DraftLaw:
    try:
        return law if isinstance(law, DraftLaw) else DraftLaw(law)
    except ValueError:
        raise ValueError(f"unknown draft law {law!r}; use one of {[v.value for v in DraftLaw]}") from None


def _check_n(n: object, law: DraftLaw) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"n (number of drafts) must be an int, got {type(n).__name__}")
    if n < 1:
        raise ValueError(f"n (number of drafts) must be >= 1, got {n}")
    if law == DraftLaw.SPECHUB and n > 2:
        raise ValueError(f"the SpecHub draft law is defined for n <= 2 drafts, got n={n}")
    return n


def top_tokens(q: Tensor, k: int) -> Tensor:
    """The ``k`` most probable tokens of each row of ``q [B, V]``, decreasing, ties to the lower id.

    Returns int64 ``[B, k]``. This is the deterministic part of the GREEDY law (and the top-1 of
    SPECHUB); verifiers rely on the same tie rule.
    """
    if k == 0:
        return torch.empty(q.shape[0], 0, dtype=torch.int64, device=q.device)
    if k == 1:
        return q.argmax(-1, keepdim=True)  # first maximal index
    vals, idx = torch.topk(q, k, dim=-1)  # [B, k]
    # topk's order among equal values is unspecified: fix ties (lower id first) exactly by a stable
    # sort of the candidates, and widen the candidate set when a tie crosses the boundary.
    kth = vals[:, -1:]  # [B, 1]
    n_ge = (q >= kth).sum(-1)  # [B]
    if bool((n_ge > k).any()):  # a tie straddles the cut: fall back to a full stable sort
        order = torch.sort(q, dim=-1, descending=True, stable=True).indices
        return order[:, :k]
    # no straddling tie: the candidate set is exact; order it (value desc, id asc)
    key_idx, perm = torch.sort(idx, dim=-1)
    v2 = vals.gather(-1, perm)
    o2 = torch.sort(v2, dim=-1, descending=True, stable=True).indices
    return key_idx.gather(-1, o2)


def _inverse_cdf(weights: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF draws: ``weights [B, V]`` (positive row mass), uniforms ``u [B, m]`` → ``[B, m]``.

    Same rule as :func:`specot.sampling.sample_categorical` (float64, never a zero-weight index),
    sharing one cumulative sum across the ``m`` draws of a row.
    """
    cdf = weights.to(torch.float64).cumsum(-1)  # [B, V]
    total = cdf[:, -1:]
    if bool((total <= 0).any()):
        raise ValueError("cannot sample from a row with zero total probability mass")
    cdf = cdf.contiguous()
    idx = torch.searchsorted(cdf, (u * total).contiguous(), right=True)  # [B, m]
    last = torch.searchsorted(cdf, total.contiguous(), right=False)  # [B, 1]: first index reaching the total
    return torch.minimum(idx, last)


def _check_support(q: Tensor, need: int, law: DraftLaw) -> None:
    support = (q > 0).sum(-1)
    if bool((support < need).any()):
        b = int((support < need).nonzero()[0])
        raise ValueError(
            f"draft law {law.value!r} needs at least {need} tokens with q > 0 but row {b} of q has only "
            f"{int(support[b])}; use fewer drafts or the 'iid' law"
        )


def sample_drafts(q: Tensor, n: int, law: DraftLaw | str, generator: torch.Generator | None = None) -> Tensor:
    """Draw ``n`` drafts per row of ``q [B, V]`` under ``law`` (see the module docstring).

    Args:
        q: draft probabilities ``[B, V]`` (rows sum to 1).
        n: drafts per position (``n <= 2`` for SPECHUB).
        law: a :class:`DraftLaw` or its string value.
        generator: source of all randomness.

    Returns:
        int64 ``[B, n]``; ``drafts[:, j]`` is the j-th draft in the order the law defines.

    Raises:
        ValueError: bad probabilities, unknown law, ``n < 1``, ``n > 2`` for SPECHUB, or fewer than
            ``n`` tokens with ``q > 0`` for WOR / GREEDY / SPECHUB (n = 2).
    """
    law = _as_law(law)
    n = _check_n(n, law)
    check_probs(q, "q (draft probs)", ndim=2)
    B, V = q.shape
    q64 = q.to(torch.float64)
    if law == DraftLaw.IID or n == 1:
        return _inverse_cdf(q64, draw_uniforms((B, n), generator, q.device))
    if law == DraftLaw.WOR:
        _check_support(q64, n, law)
        e = -torch.log1p(-draw_uniforms((B, V), generator, q.device))  # Exp(1), finite since u < 1
        t = torch.where(q64 > 0, e / q64, torch.full_like(e, math.inf))  # arrival times
        return torch.topk(t, n, dim=-1, largest=False, sorted=True).indices
    if law == DraftLaw.GREEDY:
        _check_support(q64, n, law)
        top = top_tokens(q64, n - 1)  # [B, n-1]
        rest = q64.scatter(-1, top, 0.0)
        last = _inverse_cdf(rest, draw_uniforms((B, 1), generator, q.device))
        return torch.cat([top, last], dim=-1)
    # SPECHUB, n == 2
    _check_support(q64, 2, law)
    u = draw_uniforms((B, 2), generator, q.device)
    first = _inverse_cdf(q64, u[:, :1])  # [B, 1]
    top = q64.argmax(-1, keepdim=True)
    other = _inverse_cdf(q64.scatter(-1, top, 0.0), u[:, 1:])
    second = torch.where(first == top, other, top)
    return torch.cat([first, second], dim=-1)


def enumerate_draft_law(q: Tensor | np.ndarray, n: int, law: DraftLaw | str) -> tuple[Tensor, Tensor]:
    """Every ordered draft tuple of ``q [V]`` under ``law`` with its exact probability.

    Only tokens with ``q > 0`` appear. Probabilities are products of (conditional) float64 ratios:
    IID ``Π q(x_j)``; WOR ``Π q(x_j) / (1 − Σ_{i<j} q(x_i))``; GREEDY ``q¬Top(x_n)`` on the single
    top-(n−1) prefix; SPECHUB (n = 2) ``q(x_1)`` for ``(x_1, top)`` and ``q(top)·q¬top(x_2)`` for
    ``(top, x_2)``.

    Args:
        q: draft probabilities ``[V]`` (torch or numpy; computed in float64).
        n: drafts per tuple.
        law: a :class:`DraftLaw` or its string value.

    Returns:
        ``(tuples, probs)``: int64 ``[M, n]`` and float64 ``[M]`` (summing to 1 up to rounding).

    Raises:
        ValueError: more than :data:`MAX_ENUMERATED_TUPLES` tuples (``s^n`` for IID, ``s!/(s−n)!``
            for WOR, with s the support size of q), fewer than ``n`` tokens with ``q > 0`` for
            WOR / GREEDY / SPECHUB, ``n > 2`` for SPECHUB, or invalid probabilities.
    """
    law = _as_law(law)
    n = _check_n(n, law)
    qt = torch.as_tensor(q)
    if qt.ndim != 1:
        raise ValueError(f"q must be one distribution of shape [V], got shape {tuple(qt.shape)}")
    check_probs(qt, "q (draft probs)", ndim=1)  # in the input's dtype (its own sum tolerance)
    qt = qt.to(torch.float64)
    qn = qt.numpy()
    support = np.flatnonzero(qn > 0)
    s = len(support)
    if law == DraftLaw.IID or n == 1:
        count = s**n
    elif law == DraftLaw.WOR:
        count = math.perm(s, n) if s >= n else 0
    else:
        count = s  # GREEDY / SPECHUB: at most s tuples (one random token)
    if count > MAX_ENUMERATED_TUPLES:
        raise ValueError(
            f"enumerating law {law.value!r} with n={n} over {s} supported tokens lists {count} tuples, above "
            f"MAX_ENUMERATED_TUPLES={MAX_ENUMERATED_TUPLES}; use a smaller vocabulary or Monte-Carlo"
        )
    if law != DraftLaw.IID and n > 1 and s < n:
        raise ValueError(
            f"draft law {law.value!r} needs at least n={n} tokens with q > 0, but q has {s}; use fewer drafts"
        )
    rows: list[tuple[int, ...]] = []
    probs: list[float] = []
    if law == DraftLaw.IID or n == 1:
        for tup in itertools.product(support.tolist(), repeat=n):
            rows.append(tup)
            probs.append(float(np.prod(qn[list(tup)])))
    elif law == DraftLaw.WOR:
        for tup in itertools.permutations(support.tolist(), n):
            pr, left = 1.0, set(support.tolist())
            for x in tup:
                pr *= qn[x] / float(qn[sorted(left)].sum())  # remaining mass, summed (no 1 − used cancellation)
                left.discard(x)
            rows.append(tup)
            probs.append(pr)
    elif law == DraftLaw.GREEDY:
        top = top_tokens(qt.unsqueeze(0), n - 1)[0].tolist()
        rest_mass = float(np.delete(qn, top).sum())
        for x in support.tolist():
            if x not in top:
                rows.append((*top, x))
                probs.append(qn[x] / rest_mass)
    else:  # SPECHUB, n == 2
        t = int(qt.argmax())
        rest_mass = float(np.delete(qn, [t]).sum())
        for x in support.tolist():
            if x != t:
                rows.append((x, t))
                probs.append(float(qn[x]))
                rows.append((t, x))
                probs.append(float(qn[t] * qn[x] / rest_mass))
    tuples = torch.tensor(rows, dtype=torch.int64).reshape(-1, n)
    return tuples, torch.tensor(probs, dtype=torch.float64)
