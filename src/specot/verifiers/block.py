"""Block verification: verify a γ-token draft chain jointly (lossless, optimal for one chain).

Source: Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, "Block Verification Accelerates
Speculative Decoding", ICLR 2025 (arXiv 2403.10444), Algorithm 2 (block verification) and its
residual distribution ``p_res^block``; the paper proves it lossless and optimal in the expected number
of accepted tokens among valid verification rules that see one draft chain.

Notation (the paper's M_b is the target model, M_s the draft model). The draft model proposed
``x_1..x_γ``, ``x_i ~ q_{i−1} = M_s(· | c, x^{i−1})``; the target model gives
``p_i = M_b(· | c, x^i)`` for ``i = 0..γ`` in one forward pass. Block verification computes

* the sequence-level weights ``w_0 = 1``, ``w_i = min(1, w_{i−1} · p_{i−1}(x_i) / q_{i−1}(x_i))``
  (the paper's ``p_i``; equivalently ``w_i = min_{j ≤ i} Π_{j < k ≤ i} p_{k−1}(x_k)/q_{k−1}(x_k)``);
* the residual mass ``S_i = Σ_x [w_i p_i(x) − q_i(x)]_+`` for ``i < γ``;
* the stopping probabilities ``h_γ = w_γ``, ``h_i = S_i / (S_i + 1 − w_i)`` for ``1 ≤ i < γ``,
  ``h_0 = 1``;

draws ``η_1..η_γ ~ U(0, 1)`` and accepts ``τ = max{i : η_i < h_i}`` (0 if none) draft tokens. The
committed tokens are ``x_1..x_τ`` and one more token ``Y``: the bonus token ``Y ~ p_γ`` when
``τ = γ``, otherwise the correction ``Y ~ norm([w_τ p_τ − q_τ]_+)`` (the block residual
distribution). Hence the exact conditional law given the drafts,

    P(τ = i, Y = y | x^γ) = h_i Π_{j > i} (1 − h_j) · res_i(y),

with ``res_i = norm([w_i p_i − q_i]_+)`` (``i < γ``) and ``res_γ = p_γ``. Averaged over the drafts
the committed tokens follow the target model (``P(τ ≥ i | x^i) = w_i`` and
``P(τ = i, Y = y | x^i) = [w_i p_i(y) − q_i(y)]_+`` by induction from ``i = γ`` down). With γ = 1 it
is token-level speculative sampling; for γ ≥ 2 the expected number of accepted tokens is never
smaller than token-level speculative sampling's ``Σ_i Π_{j ≤ i} min(1, p_{j−1}(x_j)/q_{j−1}(x_j))``
in expectation over the drafts (not for every single draft chain), at the same cost: the same drafts, one target forward
pass, γ + 1 uniforms.

Zero-mass residual: ``S_i = 0`` with ``w_i = 1`` makes ``h_i = 0/0``; such a state is reached with
probability zero in exact arithmetic and ``h_i`` is set to 1. A correction drawn from a residual
without mass (rounding) falls back to ``p_i``, as in :mod:`specot.verifiers.speculative`.

The chain layout is the engine's draft-tree layout (:class:`~specot.verifiers.base.SequenceVerifier`)
restricted to a chain: node 0 is the committed root, node i the i-th draft, ``parents = [−1, 0, 1,
..., γ−1]``; row i of p is ``p_i`` and row i of q is ``q_i`` (row γ of q is unused).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from .._validation import _TRUSTED, check_generator, sum_tolerance
from ..sampling import draw_uniforms
from .base import DraftLaw, SequenceVerifier, TreeVerifyOutput, register_verifier

__all__ = [
    "BlockVerifier",
    "block_weights",
    "block_output_law",
    "block_expected_accepted",
    "token_level_output_law",
]


# ---------------------------------------------------------------------------------------- shared
def _check_tree_shapes(p: Tensor, q: Tensor, tokens: Tensor, parents: Tensor | None, who: str,
                       generator: object = None) -> int:
    """Host-side (sync-free) type and shape checks of a draft tree; returns ``1 + N``.

    Raises:
        TypeError: non-tensor inputs, non-floating p/q, non-integer tokens/parents, a generator that
            is not a ``torch.Generator``.
        ValueError: shape mismatches.
    """
    for name, t in (("p (target probs)", p), ("q (draft probs)", q)):
        if not isinstance(t, Tensor) or not t.is_floating_point():
            raise TypeError(f"{who}: {name} must be a floating-point torch.Tensor [1 + N, V]")
        if t.ndim != 2 or t.shape[0] < 1 or t.shape[1] < 1:
            raise ValueError(f"{who}: {name} must have shape [1 + N, V] with N >= 0, V >= 1; got {tuple(t.shape)}")
    if p.shape != q.shape:
        raise ValueError(f"{who}: p has shape {tuple(p.shape)} but q has {tuple(q.shape)}; target and draft must "
                         "share one tokenizer and one row per tree node")
    check_generator(generator)
    pairs = [("tokens", tokens)] + ([("parents", parents)] if parents is not None else [])
    for name, t in pairs:
        if not isinstance(t, Tensor) or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            raise TypeError(f"{who}: {name} must be an integer torch.Tensor [1 + N]")
        if t.ndim != 1 or t.shape[0] != p.shape[0]:
            raise ValueError(f"{who}: {name} must have shape [{p.shape[0]}] (one entry per tree node), "
                             f"got {tuple(t.shape)}")
    return int(p.shape[0])


def _value_flags(p: Tensor, q: Tensor, q_rows: Tensor, tokens: Tensor, parent_of: Tensor) -> Tensor:
    """Device-side validity flags (no host sync), bool ``[4]``:
    ``[bad p, bad q (used rows), token id out of range, drafted token with q = 0]``. The two
    probability-value flags (passes over ``[1 + N, V]``) are skipped inside
    :func:`specot._validation.trusted_inputs`, like :func:`specot._validation.check_probs`.

    Args:
        p, q: ``[1 + N, V]`` (any floating dtype).
        q_rows: bool ``[1 + N]``, rows of q that are used (nodes with children).
        tokens: int64 ``[1 + N]``.
        parent_of: int64 ``[N]``, the parent of nodes ``1..N`` (clamped into range).
    """
    V = p.shape[1]
    tol = sum_tolerance(p.dtype if p.dtype == q.dtype else torch.float32, V)

    def bad_rows(t: Tensor) -> Tensor:
        sums = t.sum(-1, dtype=torch.float64)
        return ~torch.isfinite(sums) | ((sums - 1.0).abs() > tol) | (t < 0).any(-1)

    if _TRUSTED.get():  # inside specot._validation.trusted_inputs(): the decoding loop checked p and q
        bad_p = bad_q = torch.zeros((), dtype=torch.bool, device=p.device)
    else:
        bad_p = bad_rows(p).any()
        bad_q = (bad_rows(q) & q_rows).any()
    x = tokens[1:]
    bad_tok = ((x < 0) | (x >= V)).any()
    qx = q[parent_of, x.clamp(0, V - 1)]  # [N]
    bad_qx = (qx <= 0).any() if x.numel() else torch.zeros((), dtype=torch.bool, device=p.device)
    return torch.stack([bad_p, bad_q, bad_tok, bad_qx])


def _raise_flags(flags: list[int], who: str, p: Tensor, q: Tensor, tokens: Tensor, parent_of: Tensor) -> None:
    """Raise the ``ValueError`` named by the first set flag (error path: syncs are fine here)."""
    if flags[0]:
        raise ValueError(f"{who}: p (target probs) must hold finite, non-negative rows summing to 1 at every node")
    if flags[1]:
        raise ValueError(f"{who}: q (draft probs) must hold finite, non-negative rows summing to 1 at every node "
                         "with children")
    if flags[2]:
        raise ValueError(f"{who}: tokens has ids outside [0, {p.shape[1]})")
    if flags[3]:
        x = tokens[1:]
        bad = int((q[parent_of, x.clamp(0, p.shape[1] - 1)] <= 0).nonzero()[0]) + 1
        raise ValueError(f"{who}: draft node {bad} (token {int(tokens[bad])}) has draft probability q(x) = 0 under "
                         "its parent's draft distribution; drafts must be sampled from q")


def _sample_row(weights: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF draw from one non-negative row ``weights [V]`` with a uniform ``u`` (0-d), no
    host sync; same rule as :func:`specot.sampling.sample_categorical` (float64, scaled by the row's
    own mass, never a zero-weight index). Returns a 0-d int64 tensor."""
    cdf = weights.to(torch.float64).cumsum(-1)  # [V]
    target = (u * cdf[-1]).reshape(1)
    idx = torch.searchsorted(cdf, target, right=True)[0]
    last_nonzero = (weights.shape[-1] - 1) - (weights.flip(-1) > 0).to(torch.int64).argmax(-1)
    return torch.minimum(idx, last_nonzero)


def _stop_probability(S: Tensor, w: Tensor) -> Tensor:
    """``S / (S + 1 − w)`` elementwise, with the unreachable ``0/0`` case set to 1."""
    den = S + (1.0 - w)
    return torch.where(den > 0, S / den.clamp_min(torch.finfo(torch.float64).tiny), torch.ones_like(S))


# ---------------------------------------------------------------------------------------- block
def _chain_inputs(p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    if not isinstance(drafts, Tensor) or drafts.ndim != 1:
        raise ValueError("drafts must be an int64 tensor [γ] (the draft chain x_1..x_γ)")
    if p.ndim != 2 or p.shape != q.shape or p.shape[0] != drafts.shape[0] + 1:
        raise ValueError(f"p and q must have shape [γ + 1, V] = [{drafts.shape[0] + 1}, V]; got p {tuple(p.shape)}, "
                         f"q {tuple(q.shape)}")
    return p.to(torch.float64), q.to(torch.float64), drafts.to(torch.int64)


def block_weights(p: Tensor, q: Tensor, drafts: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The quantities of block verification (Sun et al. 2025, Algorithm 2) for one draft chain.

    Args:
        p: target distributions ``[γ + 1, V]``; row i is ``M_b(· | c, x^i)``.
        q: draft distributions ``[γ + 1, V]``; row i is ``M_s(· | c, x^i)`` (row γ unused).
        drafts: the draft chain ``x_1..x_γ``, int64 ``[γ]``, with ``q_{i−1}(x_i) > 0``.

    Returns:
        ``(w, h, res)``, float64 on p's device: the sequence-level weights ``w [γ + 1]`` (``w_0 = 1``),
        the stopping probabilities ``h [γ + 1]`` (``h_0 = 1``, ``h_γ = w_γ``) and the unnormalised
        output weights ``res [γ + 1, V]`` (``[w_i p_i − q_i]_+`` for ``i < γ``, ``p_γ`` for ``i = γ``;
        rows without mass fall back to ``p_i``).

    Raises:
        ValueError: shapes that are not ``[γ + 1, V]`` / ``[γ]``.
    """
    p, q, x = _chain_inputs(p, q, drafts)
    g = x.shape[0]
    dev = p.device
    if g:
        px = p[:-1].gather(-1, x.unsqueeze(-1)).squeeze(-1)  # p_{i-1}(x_i)  [γ]
        qx = q[:-1].gather(-1, x.unsqueeze(-1)).squeeze(-1)  # q_{i-1}(x_i)  [γ]
        logr = torch.log(px) - torch.log(qx.clamp_min(torch.finfo(torch.float64).tiny))
        s = torch.cat([torch.zeros(1, dtype=torch.float64, device=dev), logr.cumsum(0)])  # [γ+1], s_0 = 0
        # w_i = min(1, w_{i-1} r_i)  <=>  log w_i = s_i − max_{j ≤ i} s_j  (a Lindley recursion)
        w = torch.exp(s - torch.cummax(s, 0).values).nan_to_num(nan=0.0)
    else:
        w = torch.ones(1, dtype=torch.float64, device=dev)
    res = (w[:, None] * p - q).clamp_min(0.0)  # [γ+1, V]
    res[g] = p[g]
    S = res.sum(-1)  # [γ+1]
    h = _stop_probability(S, w)
    h[g] = w[g]
    h[0] = 1.0
    res = torch.where(S[:, None] > 0, res, p)
    return w, h, res


def block_output_law(p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
    """Exact law of block verification's output given the draft chain (Sun et al. 2025, Alg. 2).

    Args:
        p: target distributions ``[γ + 1, V]`` along the chain (row i after ``x^i``).
        q: draft distributions ``[γ + 1, V]`` along the chain (row γ unused).
        drafts: the draft chain, int64 ``[γ]``.

    Returns:
        float64 ``[γ + 1, V]``: entry ``(i, y)`` is ``P(τ = i, Y = y | drafts)``, the probability that
        the first ``i`` drafts are accepted and ``y`` is the extra (correction or bonus) token. Sums
        to 1.

    Raises:
        ValueError: bad shapes (see :func:`block_weights`).
    """
    _, h, res = block_weights(p, q, drafts)
    # P(τ = i) = h_i Π_{j > i} (1 − h_j)
    tail = torch.flip(torch.cumprod(torch.flip(1.0 - h, [0]), 0), [0])  # Π_{j ≥ i} (1 − h_j)
    later = torch.cat([tail[1:], torch.ones(1, dtype=torch.float64, device=h.device)])
    stop = h * later  # [γ+1]
    return stop[:, None] * (res / res.sum(-1, keepdim=True))


def token_level_output_law(p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
    """Exact output law of token-level speculative sampling on a draft chain (Leviathan et al. 2023,
    Algorithm 1), in the layout of :func:`block_output_law`: float64 ``[γ + 1, V]``, entry
    ``(i, y) = P(first i drafts accepted, extra token y | drafts)``. The reference block
    verification is compared against.

    Raises:
        ValueError: bad shapes.
    """
    p, q, x = _chain_inputs(p, q, drafts)
    g = x.shape[0]
    px = p[:-1].gather(-1, x.unsqueeze(-1)).squeeze(-1)
    qx = q[:-1].gather(-1, x.unsqueeze(-1)).squeeze(-1)
    a = (px / qx.clamp_min(torch.finfo(torch.float64).tiny)).clamp_max(1.0)  # [γ]
    reach = torch.cumprod(torch.cat([torch.ones(1, dtype=torch.float64, device=p.device), a]), 0)  # [γ+1]
    res = (p - q).clamp_min(0.0)
    res[g] = p[g]
    res = torch.where(res.sum(-1, keepdim=True) > 0, res, p)
    stop = reach * torch.cat([1.0 - a, torch.ones(1, dtype=torch.float64, device=p.device)])
    return stop[:, None] * (res / res.sum(-1, keepdim=True))


def block_expected_accepted(p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
    """``E[τ | drafts]``, the expected number of accepted draft tokens of block verification
    (0-d float64). The block efficiency is this plus one (the extra token)."""
    law = block_output_law(p, q, drafts).sum(-1)
    return (law * torch.arange(law.shape[0], dtype=torch.float64, device=law.device)).sum()


@register_verifier("block")
class BlockVerifier(SequenceVerifier):
    """Block verification of one draft chain (Sun et al., ICLR 2025, Algorithm 2) — lossless.

    :meth:`verify_tree` takes the engine's tree layout restricted to a chain
    (``parents = [−1, 0, 1, ..., γ−1]``): ``p, q: [γ + 1, V]``, ``tokens: int64 [γ + 1]``. It draws
    γ + 1 uniforms from ``generator`` (``η_1..η_γ``, then one for the extra token), runs entirely on
    p's device and makes exactly one host sync (validation flags, τ and the extra token travel in
    one ``.tolist()``).

    Raises:
        TypeError / ValueError: from :meth:`verify_tree` on bad inputs (non-chain parents,
            probabilities that are not distributions, a drafted token with ``q(x) = 0``).
    """

    name = "block"
    valid_laws = frozenset({DraftLaw.IID})
    chains_only = True
    max_drafts = 1

    def verify_tree(self, p: Tensor, q: Tensor, tokens: Tensor, parents: Tensor,
                    generator: torch.Generator | None = None, *,
                    drafts: Mapping[int, Sequence[int]] | None = None) -> TreeVerifyOutput:
        """Verify one draft chain jointly.

        Args:
            p: target probabilities ``[γ + 1, V]``, row i after the root-to-node-i path.
            q: draft probabilities ``[γ + 1, V]`` (row γ unused).
            tokens: int64 ``[γ + 1]``; ``tokens[0]`` is the committed root, ``tokens[1:]`` the drafts.
            parents: int64 ``[γ + 1]``, must be ``[−1, 0, 1, ..., γ−1]``.
            generator: source of all randomness, on p's device.
            drafts: optional node → draws (as :class:`~specot.verifiers.TraversalVerifier` takes);
                on a chain every node has exactly one draw, which is checked.

        Returns:
            :class:`TreeVerifyOutput` with ``path = (1, ..., τ)`` and ``tokens = (x_1, ..., x_τ, Y)``.

        Raises:
            TypeError: non-tensor or wrongly typed inputs.
            ValueError: shape mismatches, parents that are not a chain, invalid probabilities,
                token ids out of range, or a drafted token with ``q(x) = 0``.
        """
        who = f"verifier {self.name!r}"
        n1 = _check_tree_shapes(p, q, tokens, parents, who, generator)
        g = n1 - 1
        if drafts is not None and any(len(drafts.get(i, ())) != 1 for i in range(g)):
            raise ValueError(f"{who} verifies a single draft chain: every node must have exactly one draw, "
                             f"got drafts {dict(drafts)}")
        dev = p.device
        tokens = tokens.to(device=dev, dtype=torch.int64)
        parents = parents.to(device=dev, dtype=torch.int64)
        chain = torch.arange(-1, g, device=dev)
        bad_chain = (parents != chain).any()
        parent_of = chain[1:]
        q_rows = torch.arange(n1, device=dev) < g
        flags = _value_flags(p, q, q_rows, tokens, parent_of)
        x = tokens[1:].clamp(0, p.shape[1] - 1)
        _, h, res = block_weights(p, q, x)
        u = draw_uniforms((g + 1,), generator, dev)
        idx = torch.arange(1, g + 1, device=dev)
        tau = torch.where(u[:g] < h[1:], idx, torch.zeros_like(idx)).max() if g else torch.zeros((), dtype=torch.int64,
                                                                                                  device=dev)
        y = _sample_row(res.index_select(0, tau.reshape(1))[0], u[g])
        out = torch.cat([tau.reshape(1), y.reshape(1), bad_chain.reshape(1).to(torch.int64),
                         flags.to(torch.int64), tokens[1:]]).tolist()  # the one host sync
        if out[2]:
            raise ValueError(f"{who} verifies a single draft chain: parents must be [-1, 0, 1, ..., {g - 1}], "
                             f"got {parents.tolist()}; use 'traversal' or a token-level verifier for draft trees")
        if any(out[3:7]):
            _raise_flags(out[3:7], who, p, q, tokens, parent_of)
        t = int(out[0])
        return TreeVerifyOutput(path=tuple(range(1, t + 1)), tokens=(*out[7 : 7 + t], int(out[1])))
