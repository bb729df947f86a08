"""Greedy multi-path block verification (``gbv``): block verification generalised to K candidate paths.

Source: R. Thomas, A. Pal, "Greedy Multi-Path Block Verification for Faster Decoding in Speculative
Sampling", arXiv 2602.16961 (2026). Its abstract states the setting and the claim: the draft model
samples K candidate paths of length L; block verification (Sun et al., ICLR 2025, Algorithm 2,
:mod:`specot.verifiers.block`) is optimal for one path even against verifiers that see off-path
probabilities; for several paths the optimal member of the natural class of multi-path block
verifiers is intractable, and a *greedy* member (GBV) is efficient and raises block efficiency by
over 30 % over block verification. Only the abstract and secondary summaries were available to this
project, not the algorithm's text: the rule below is a reconstruction, derived here and checked
exact by enumeration (``tests/verifiers/test_verifiers_gbv.py``), and ``docs/theory.md`` records how
it relates to the paper and to traversal verification.

Draft law and tree shapes (checked by :meth:`GBVVerifier.check_construction`, which the plan calls
before any model loads): the K paths are i.i.d. draws of the draft model — :data:`DraftLaw.IID`
only; the constructions ``iid`` (K sequences of length L), ``prefix:k_1,..,k_L`` and any IID
topology are all trees of i.i.d. draws (every node's children are i.i.d. draws from its q row, one
draw per path through the node), so all of them are accepted. WOR / GREEDY / SPECHUB trees with
more than one draft per node are refused (their siblings are not i.i.d.; the greedy residual below
would not be exact).

The rule (greedy in both senses of the abstract). Merge the K paths into their prefix tree (a node
per distinct prefix; node u holds the ``m_u`` paths through it, so its children are ``m_u`` i.i.d.
draws from ``q_u``, listed with multiplicity in path order). Every node carries block
verification's state ``(w_u, P_u)``: the sequence-level acceptance weight (``w = 1`` at the root)
and the law of the next token if the committed prefix stops at u (``P_u = p_u`` initially).

1. *Greedy over paths*: the draws under a node are taken in path order; draw c with token x enters
   with ``w_c = min(1, w_u P_u(x) / q_u(x))`` — the largest weight block verification allows — and
   everything under it is settled before the next draw is looked at. The first draw of a token owns
   the node (the continuations of every path through it hang under it); a later draw of the same
   token under the same node is a leaf of its own (tried again with the residual weight).
2. *Greedy over depth*: within that, deeper prefixes are tried before shallower ones (leaf to root,
   as block verification's stopping rule ``τ = max{i : η_i < h_i}`` does on one chain): a node is
   tried only after all of its draws were rejected, and is accepted with its current weight.
3. A rejected draw leaves its parent the block residual: ``S = Σ [w_u P_u − q_u]_+``,
   ``P_u ← norm([w_u P_u − q_u]_+)``, ``w_u ← S / (S + 1 − w_u)`` (block verification's h).
4. When a node is accepted, the extra token is drawn from its ``P_u`` (the bonus token from the
   target when nothing under it was rejected, otherwise a correction from the block residual).

With K = 1 this is block verification; with L = 1 it is recursive rejection sampling with
replacement (SpecInfer / Hu et al.'s RRS); on the prefix tree of i.i.d. paths it is the visit rule of
traversal verification (Weng et al., NeurIPS 2025) with repeated draws kept as separate draws —
the greedy member of the class is the same algorithm, found from two directions. Exactness: the
traversal invariant (:mod:`specot.verifiers.traversal`: the sub-probability law of accepting within
u's remaining subtree is ``w_u P_u`` followed by the target) holds draw by draw because each draw is
an i.i.d. sample of ``q_u`` whose whole subtree is settled before the next. It fails if a repeated
draw is dropped (the prefix tree verified without its multiplicities) or if a rejection does not
leave the block residual — the test-suite enumerates both defects and finds errors above 1e-3.

Block efficiency (expected committed tokens per target pass) is never below block verification's
on the first path in expectation, since the first path is verified exactly as block verification
would and every later path only adds acceptance; the test-suite enumerates it.

Floating point: the weights and residuals are float64 (the same code as traversal verification);
rows without residual mass fall back to ``P_u``, a ``0/0`` stopping weight (reached with probability
zero) is set to 1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..geometry import TreeGeometry
from .base import DraftLaw, TreeVerifyOutput, register_verifier
from .traversal import TraversalVerifier, traversal_output_law

__all__ = ["GBVVerifier", "paths_to_tree", "gbv_output_law", "gbv_expected_accepted"]


def paths_to_tree(paths: Tensor) -> tuple[Tensor, Tensor, dict[int, list[int]], Tensor]:
    """The prefix tree of K candidate paths, in the engine's draft-tree layout.

    Args:
        paths: int64 ``[K, L]``, path k's draft tokens ``x^(k)_1..x^(k)_L`` (the root token is not
            included; it becomes node 0 with token ``-1`` replaced by 0 — callers only read
            ``tokens[1:]``).

    Returns:
        ``(tokens [1 + N], parents [1 + N], drafts, node_of [K, L + 1])``: nodes numbered depth by
        depth, within a depth in order of the first path through them (so parents precede children
        and a node's children in index order are its distinct draws in order of first occurrence);
        ``drafts[u]`` the tokens of the paths through u at the next depth, with multiplicity, in path
        order (:attr:`specot.drafting.DraftTree.drafts`); ``node_of[k, i]`` the node of path k's
        first i tokens (``node_of[:, 0] = 0``).

    Raises:
        ValueError: ``paths`` not a 2-d integer tensor with K >= 1.
    """
    if not isinstance(paths, Tensor) or paths.ndim != 2 or paths.shape[0] < 1 or paths.is_floating_point():
        raise ValueError("paths must be an integer tensor [K, L] with K >= 1 candidate paths")
    rows = paths.to(torch.int64).tolist()
    K, L = paths.shape
    tokens, parents = [0], [-1]
    node_of = [[0] * (L + 1) for _ in range(K)]
    drafts: dict[int, list[int]] = {}
    for i in range(1, L + 1):
        ids: dict[tuple[int, int], int] = {}
        for k in range(K):
            u, x = node_of[k][i - 1], rows[k][i - 1]
            drafts.setdefault(u, []).append(x)
            if (u, x) not in ids:
                ids[(u, x)] = len(tokens)
                tokens.append(x)
                parents.append(u)
            node_of[k][i] = ids[(u, x)]
    return (torch.tensor(tokens, dtype=torch.int64), torch.tensor(parents, dtype=torch.int64), drafts,
            torch.tensor(node_of, dtype=torch.int64))


def _tree_rows(p: Tensor, q: Tensor, node_of: Tensor, n_nodes: int) -> tuple[Tensor, Tensor]:
    """Per-node rows ``[1 + N, V]`` from per-path rows ``[K, L + 1, V]`` (row of a node: that of the
    first path through it; paths through one node share their prefix, hence their rows)."""
    K, L1 = node_of.shape
    flat = node_of.reshape(-1).tolist()
    first: dict[int, int] = {}
    for j, u in enumerate(flat):
        first.setdefault(u, j)
    pick = torch.tensor([first[u] for u in range(n_nodes)], dtype=torch.int64, device=p.device)
    V = p.shape[-1]
    return p.reshape(K * L1, V).index_select(0, pick), q.reshape(K * L1, V).index_select(0, pick)


def _path_inputs(p: Tensor, q: Tensor, paths: Tensor) -> None:
    if not isinstance(p, Tensor) or not isinstance(q, Tensor) or p.ndim != 3 or p.shape != q.shape:
        raise ValueError("p and q must be tensors [K, L + 1, V] (row i of path k: after its first i tokens)")
    if not isinstance(paths, Tensor) or paths.ndim != 2 or tuple(paths.shape) != (p.shape[0], p.shape[1] - 1):
        raise ValueError(f"paths must have shape [K, L] = [{p.shape[0]}, {p.shape[1] - 1}], "
                         f"got {tuple(paths.shape) if isinstance(paths, Tensor) else type(paths).__name__}")


def _law_on_tree(p: Tensor, q: Tensor, paths: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(law [1 + N, V], node_of [K, L + 1], parents [1 + N])`` of GBV on the paths' prefix tree."""
    _path_inputs(p, q, paths)
    tokens, parents, drafts, node_of = paths_to_tree(paths)
    P, Q = _tree_rows(p, q, node_of, tokens.shape[0])
    return traversal_output_law(P, Q, tokens, parents, DraftLaw.IID, drafts), node_of, parents


def gbv_output_law(p: Tensor, q: Tensor, paths: Tensor) -> tuple[Tensor, Tensor]:
    """Exact law of GBV's output given K candidate paths.

    Args:
        p: target distributions ``[K, L + 1, V]``; ``p[k, i]`` after path k's first i tokens.
        q: draft distributions ``[K, L + 1, V]`` (``q[k, L]`` unused).
        paths: int64 ``[K, L]``, drawn i.i.d. from the draft model.

    Returns:
        ``(law, node_of)``: float64 ``law [1 + N, V]`` over the prefix tree's nodes (entry ``(v, y)``:
        the accepted prefix is node v's and the extra token is y; sums to 1) and
        ``node_of [K, L + 1]`` (:func:`paths_to_tree`).

    Raises:
        ValueError: bad shapes.
    """
    law, node_of, _ = _law_on_tree(p, q, paths)
    return law, node_of


def gbv_expected_accepted(p: Tensor, q: Tensor, paths: Tensor) -> Tensor:
    """``E[τ | paths]``, GBV's expected number of accepted draft tokens (0-d float64); the block
    efficiency is this plus one. Shapes as :func:`gbv_output_law`."""
    law, _, parents = _law_on_tree(p, q, paths)
    depths = (0,) + TreeGeometry.of_rooted(parents.tolist()).depths  # the root, then nodes 1..N
    return (law.sum(-1) * torch.tensor(depths, dtype=torch.float64, device=law.device)).sum()


@register_verifier("gbv")
class GBVVerifier(TraversalVerifier):
    """Greedy multi-path block verification of K i.i.d. candidate paths (Thomas & Pal, arXiv
    2602.16961; reconstructed, see the module docstring) — lossless for :data:`DraftLaw.IID` draft
    trees of any shape (``iid`` K sequences, ``prefix:...``, IID topologies); other laws with more
    than one draft per node are refused by :meth:`check_construction`.

    :meth:`verify_tree` takes the engine's tree layout (as :class:`TraversalVerifier`: ``p, q
    [1 + N, V]``, ``tokens, parents [1 + N]`` and ``drafts``, the draws with multiplicity — required
    wherever draws of one token were merged into one node); :meth:`verify_paths` takes the K paths
    directly (``p, q [K, L + 1, V]``, ``paths [K, L]``) and builds the prefix tree itself.

    Raises:
        TypeError / ValueError: from :meth:`verify_tree` / :meth:`verify_paths` on bad inputs.
    """

    name = "gbv"
    valid_laws = frozenset({DraftLaw.IID})
    chains_only = False
    _law = DraftLaw.IID

    def verify_paths(self, p: Tensor, q: Tensor, paths: Tensor,
                     generator: torch.Generator | None = None) -> tuple[int, TreeVerifyOutput]:
        """Verify K candidate paths.

        Args:
            p: target probabilities ``[K, L + 1, V]``; ``p[k, i]`` after path k's first i tokens.
            q: draft probabilities ``[K, L + 1, V]``.
            paths: int64 ``[K, L]``, i.i.d. draws of the draft model.
            generator: source of all randomness, on p's device.

        Returns:
            ``(k, out)``: the index of a path whose prefix was accepted (the first such path) and
            the :class:`TreeVerifyOutput` on the prefix tree; ``out.tokens`` are the committed
            tokens (path k's first ``len(out.path)`` tokens, then the extra token).

        Raises:
            ValueError: bad shapes or values (see :meth:`verify_tree`).
        """
        _path_inputs(p, q, paths)
        tokens, parents, drafts, node_of = paths_to_tree(paths)
        P, Q = _tree_rows(p, q, node_of, tokens.shape[0])
        out = self.verify_tree(P, Q, tokens.to(p.device), parents, generator, drafts=drafts)
        depth = len(out.path)
        end = out.path[-1] if out.path else 0
        k = int((node_of[:, depth] == end).nonzero()[0, 0])
        return k, out
