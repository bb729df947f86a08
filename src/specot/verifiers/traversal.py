"""Traversal verification: verify a draft tree leaf-to-root with sequence-level probabilities.

Source: Weng, Hu, Chen, Liu, Mei, Qiu, Tian, Shi, "Traversal Verification for Speculative Tree
Decoding", NeurIPS 2025 (arXiv 2505.12398); it reduces to block verification (Sun et al.,
ICLR 2025, Algorithm 2) on a chain and to recursive rejection sampling (SpecInfer / SpecTr) on a tree
of depth one.

Only the paper's abstract and secondary descriptions were available when this was written: the steps
below are a reconstruction (sequence-level weights, leaf-to-root post-order traversal, block-style
residual updates on rejection), made exact and checked lossless by exact enumeration; the step
numbers refer to this docstring, not to the paper.

Algorithm (as implemented). Every node ``u`` carries a state ``(w_u, P_u, Q_u)``: a sequence-level
acceptance weight ``w_u`` (the paper's ``p_α``), the target distribution ``P_u`` of the next token
(the paper's ``M_b(· | u)``, initially row u of p) and the draft distribution ``Q_u`` its children
were drawn from (``M_s(· | u)``, initially row u of q). The root has ``w = 1``. The tree is traversed
in post-order (children in index order), i.e. repeatedly the first leaf of the remaining tree:

1. when a child ``c`` of ``u`` is first entered, ``w_c = min(1, w_u · P_u(x_c) / Q_u(x_c))``
   (the sequence-level acceptance ``p_α``, evaluated with u's current state);
2. when a node ``v`` is visited (all its children were visited and rejected), draw ``η ~ U(0, 1)``
   and accept the root-to-``v`` path if ``η < w_v``; the extra token is then drawn from ``P_v``
   (a bonus token from the target when v kept its original row, otherwise a correction from its
   residual distribution). The root always accepts (``w = 1``);
3. on rejection of ``v`` (child of ``u``) delete ``v`` and update u's state:
   ``S = Σ_x [w_u P_u(x) − Q_u(x)]_+``,
   ``P_u ← norm([w_u P_u − Q_u]_+)``,
   ``w_u ← S / (S + 1 − w_u)`` (block verification's ``h``),
   ``Q_u ← Q_u`` for i.i.d. siblings (:data:`DraftLaw.IID`, verifier ``"traversal"``), or ``Q_u`` with
   ``x_v`` removed and renormalised for siblings drawn without replacement (:data:`DraftLaw.WOR`,
   :class:`TraversalWORVerifier`).

Because the first acceptance ends the traversal, every state the traversal can be in is a
deterministic function of the tree (all earlier visits were rejections): with ``a_k`` the acceptance
weight of the k-th node in post-order, the traversal stops at the k-th node with probability
``a_k Π_{j < k} (1 − a_j)``. :func:`traversal_weights` computes every ``a_k`` and every final ``P_v``
up front (on p's device, no host sync) and :meth:`TraversalVerifier.verify_tree` draws all uniforms at
once.

Losslessness (checked by exact enumeration in the test-suite): by induction over the subtree, the
sub-probability law of "the traversal accepts within u's subtree (u included)" with the committed
continuation after u is ``w_u · P_u`` followed by the target model — a child accepts
``min(Q_u, w_u P_u)(x)`` of it and, after rejection, the updated state accounts for exactly
``[w_u P_u − Q_u]_+``; at the root (``w = 1``, ``P = p_0``) that is the target model.

Merged repeated draws: a drafter that merges i.i.d. draws of one token into one node (keeping all
their children under it) must pass ``drafts`` (the draws with multiplicity, in draw order); each
repeated draw is then verified as a leaf carrying that token (:func:`expand_tree`). This is exact
because the acceptance measure of a node does not depend on its number of children; on the merged
tree alone the rule is NOT exact (errors of order 1e-2 in the joint law, see the test-suite).

Zero-mass residual: ``S + 1 − w_u = 0`` (then ``P_u = Q_u`` and ``w_u = 1``) happens with probability
zero; ``w_u`` is then set to 1 and ``P_u`` kept. Rows without residual mass fall back to ``P_u``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from ..geometry import TreeGeometry
from ..sampling import draw_uniforms
from .base import DraftLaw, SequenceVerifier, TreeVerifyOutput, register_verifier
from .block import _check_tree_shapes, _raise_flags, _sample_row, _stop_probability, _value_flags

__all__ = ["TraversalVerifier", "TraversalWORVerifier", "traversal_weights", "traversal_output_law",
           "tree_structure", "expand_tree"]


def tree_structure(parents: list[int]) -> tuple[list[list[int]], list[int]]:
    """Children lists and the post-order of a draft tree given ``parents`` (host list, ``[1 + N]``).

    Returns:
        ``(children, order)``: ``children[u]`` the children of node u in index order; ``order`` the
        nodes in post-order (children in index order, the root last).

    Raises:
        ValueError: ``parents[0] != −1`` or a ``parents[i]`` outside ``[0, i)`` for ``i ≥ 1``
            (:meth:`specot.geometry.TreeGeometry.of_rooted`).
    """
    children = TreeGeometry.of_rooted(parents).rooted_children()
    order: list[int] = []
    stack: list[tuple[int, int]] = [(0, 0)]
    while stack:  # iterative post-order
        u, k = stack.pop()
        if k < len(children[u]):
            stack.append((u, k + 1))
            stack.append((children[u][k], 0))
        else:
            order.append(u)
    return children, order


def expand_tree(children: list[list[int]], drafts: Mapping[int, Sequence[int]] | None
                ) -> tuple[list[list[int]], list[int], list[int], list[int]]:
    """The draw-order view of a draft tree whose repeated i.i.d. draws were merged into one node.

    A drafter that merges the draws of one token into one child (keeping their children under it)
    hands over ``drafts[u]``: node u's children's tokens WITH multiplicity, in draw order, whose first
    occurrences are u's children in index order. Every repeated draw becomes a *virtual* leaf with
    the token (and target row) of its node: traversal verification of this expanded tree is exact
    (a node's acceptance measure does not depend on how many children it has, only on their being
    i.i.d. draws; the siblings must be processed in draw order).

    Args:
        children: children lists of the (merged) tree, from :func:`tree_structure`.
        drafts: node → draw-order tokens with multiplicity, or ``None`` (no merged draws).

    Returns:
        ``(children_x, base, order, draw_tokens)``: children lists over the expanded ids (real nodes
        ``0..N`` keep their ids, virtual leaves follow), ``base[v]`` the real node of id v, the
        post-order of the expanded tree, and, per expanded id, the token its draw must carry
        (``-1`` when unchecked: the root and trees without ``drafts``).

    Raises:
        ValueError: ``drafts`` inconsistent with the tree (a node's distinct draws in first-occurrence
            order must be exactly its children).
    """
    n1 = len(children)
    base = list(range(n1))
    draw_tok = [-1] * n1
    kids = [list(c) for c in children]
    if drafts:
        for u, seq in drafts.items():
            u = int(u)
            if not 0 <= u < n1:
                raise ValueError(f"drafts names node {u}, outside the tree's {n1} nodes")
            seq = [int(t) for t in seq]
            firsts = list(dict.fromkeys(seq))
            if len(firsts) != len(children[u]):
                raise ValueError(f"drafts[{u}] has {len(firsts)} distinct tokens but node {u} has "
                                 f"{len(children[u])} children; drafts must list node {u}'s draws in draw order")
            node_of = dict(zip(firsts, children[u]))
            row: list[int] = []
            seen: set[int] = set()
            for t in seq:
                c = node_of[t]
                if c in seen:
                    c_virtual = len(base)
                    base.append(c)
                    draw_tok.append(t)
                    kids.append([])
                    row.append(c_virtual)
                else:
                    seen.add(c)
                    draw_tok[c] = t
                    row.append(c)
            kids[u] = row
    order: list[int] = []
    stack: list[tuple[int, int]] = [(0, 0)]
    while stack:
        u, k = stack.pop()
        if k < len(kids[u]):
            stack.append((u, k + 1))
            stack.append((kids[u][k], 0))
        else:
            order.append(u)
    return kids, base, order, draw_tok


def _traverse(p: Tensor, q: Tensor, tokens: Tensor, children: list[list[int]], wor: bool,
              base: list[int] | None = None) -> tuple[Tensor, Tensor]:
    """Deterministic traversal states: ``(a [M], F [M, V])`` float64 over the ``M`` (expanded) ids —
    the acceptance weight of each id at its visit and the (unnormalised, positive-mass) law of the
    extra token if the traversal stops there. ``base`` maps expanded ids to tree nodes (identity when
    ``None``). Pure device code, no host sync."""
    p = p.to(torch.float64)
    q = q.to(torch.float64)
    n1, V = p.shape
    base = list(range(n1)) if base is None else base
    M = len(base)
    dev = p.device
    tiny = torch.finfo(torch.float64).tiny
    x = tokens.to(device=dev, dtype=torch.int64).clamp(0, V - 1)
    a = torch.ones(M, dtype=torch.float64, device=dev)
    F = p.index_select(0, torch.tensor(base, dtype=torch.int64, device=dev)) if M > n1 else p.clone()
    one = torch.ones((), dtype=torch.float64, device=dev)
    # state of the ids on the current root-to-node path: id -> [w, P, Q]
    state: dict[int, list[Tensor]] = {0: [one, p[0], q[0]]}
    stack: list[tuple[int, int]] = [(0, 0)]
    while stack:
        u, k = stack.pop()
        w_u, P_u, Q_u = state[u]
        if k < len(children[u]):
            c = children[u][k]
            if k > 0:  # child k-1 was visited and rejected: update u's state (step 3)
                prev = base[children[u][k - 1]]
                w_u, P_u, Q_u = _reject(w_u, P_u, Q_u, x[prev : prev + 1], wor, tiny)
                state[u] = [w_u, P_u, Q_u]
            b = base[c]
            xc = x[b : b + 1]  # [1] (index tensors, not 0-d: no host sync on CUDA)
            w_c = torch.minimum(one, (w_u * P_u.index_select(0, xc) / Q_u.index_select(0, xc).clamp_min(tiny))[0])
            state[c] = [w_c, p[b], q[b]]
            stack.append((u, k + 1))
            stack.append((c, 0))
        else:
            if children[u]:  # the last child was rejected too
                last = base[children[u][-1]]
                w_u, P_u, Q_u = _reject(w_u, P_u, Q_u, x[last : last + 1], wor, tiny)
            a[u] = w_u if u != 0 else one
            F[u] = P_u
            del state[u]
    return a, F


def _reject(w: Tensor, P: Tensor, Q: Tensor, xv: Tensor, wor: bool, tiny: float) -> tuple[Tensor, Tensor, Tensor]:
    """Update of a node's state ``(w, P [V], Q [V])`` after its child with token ``xv [1]`` was rejected."""
    r = (w * P - Q).clamp_min(0.0)
    S = r.sum()
    w_new = _stop_probability(S, w)
    P_new = torch.where(S > 0, r / S.clamp_min(tiny), P)
    if wor:
        Qr = Q.index_fill(0, xv, 0.0)
        m = Qr.sum()
        Q = torch.where(m > 0, Qr / m.clamp_min(tiny), Q)
    return w_new, P_new, Q


def traversal_weights(p: Tensor, q: Tensor, tokens: Tensor, parents: Tensor | list[int],
                      law: DraftLaw | str = DraftLaw.IID, drafts: Mapping[int, Sequence[int]] | None = None
                      ) -> tuple[Tensor, Tensor, list[int], list[int]]:
    """All the quantities of traversal verification (Weng et al., NeurIPS 2025) for one tree.

    Args:
        p: target distributions ``[1 + N, V]`` at every node.
        q: draft distributions ``[1 + N, V]`` at every node (leaf rows unused).
        tokens: int64 ``[1 + N]`` node tokens.
        parents: ``[1 + N]`` (tensor or list), ``parents[0] = −1``, ``parents[i] < i``.
        law: how the children of a node were drawn from its q row: ``"iid"`` or ``"wor"``.
        drafts: optional node → children's tokens with multiplicity in draw order, for trees whose
            repeated i.i.d. draws were merged into one node (see :func:`expand_tree`). Without it,
            every node's children are taken to be its draws, in index order.

    Returns:
        ``(a, F, order, base)`` over the ``M ≥ 1 + N`` ids of the expanded tree: ``a [M]`` float64,
        ``a[v]`` the probability of accepting id v when the traversal visits it (1 at the root);
        ``F [M, V]`` float64 unnormalised law of the extra token when the traversal stops at v;
        ``order`` the post-order visit sequence; ``base[v]`` the tree node of id v.

    Raises:
        ValueError: a malformed tree, inconsistent ``drafts`` or an unsupported law.
    """
    law = DraftLaw(law)
    if law not in (DraftLaw.IID, DraftLaw.WOR):
        raise ValueError(f"traversal verification supports sibling draft laws 'iid' and 'wor', got {law.value!r}")
    plist = parents.tolist() if isinstance(parents, Tensor) else list(parents)
    children, _ = tree_structure(plist)
    kids, base, order, _ = expand_tree(children, drafts)
    a, F = _traverse(p, q, tokens, kids, law == DraftLaw.WOR, base)
    return a, F, order, base


def traversal_output_law(p: Tensor, q: Tensor, tokens: Tensor, parents: Tensor | list[int],
                         law: DraftLaw | str = DraftLaw.IID, drafts: Mapping[int, Sequence[int]] | None = None
                         ) -> Tensor:
    """Exact law of traversal verification's output given the draft tree.

    Args: as :func:`traversal_weights`.

    Returns:
        float64 ``[1 + N, V]``: entry ``(v, y)`` is the probability that the accepted path is the
        root-to-``v`` path and ``y`` is the extra (correction or bonus) token. Sums to 1.
        On a chain it equals :func:`specot.verifiers.block.block_output_law`.

    Raises:
        ValueError: see :func:`traversal_weights`.
    """
    a, F, order, base = traversal_weights(p, q, tokens, parents, law, drafts)
    idx = torch.tensor(order, dtype=torch.int64, device=a.device)
    a_ord = a[idx]
    before = torch.cumprod(torch.cat([torch.ones(1, dtype=torch.float64, device=a.device), 1.0 - a_ord[:-1]]), 0)
    stop = torch.zeros_like(a)
    stop[idx] = a_ord * before
    per_id = stop[:, None] * (F / F.sum(-1, keepdim=True))  # [M, V]
    out = torch.zeros(p.shape[0], p.shape[1], dtype=torch.float64, device=a.device)
    return out.index_add_(0, torch.tensor(base, dtype=torch.int64, device=a.device), per_id)


def _path_to(v: int, parents: list[int]) -> tuple[int, ...]:
    path = []
    while v > 0:
        path.append(v)
        v = parents[v]
    return tuple(reversed(path))


@register_verifier("traversal")
class TraversalVerifier(SequenceVerifier):
    """Traversal verification of a draft tree whose siblings are i.i.d. draws from their parent's
    draft distribution (Weng et al., NeurIPS 2025) — lossless.

    Repeated i.i.d. draws of one token: either keep them as separate sibling nodes, or merge them
    into one node and pass ``drafts`` (the draws with multiplicity, in draw order) to
    :meth:`verify_tree`, which then verifies each repeated draw as a leaf (:func:`expand_tree`).
    On a chain it is block verification; on a depth-one tree it is recursive rejection sampling.

    :meth:`verify_tree` draws ``M + 1`` uniforms (one per draw in post-order plus the root — ``M`` is
    ``N + 1`` plus the number of repeated draws — and one for the extra token),
    computes every traversal state on p's device, and makes two host syncs: ``parents.tolist()``
    (free when parents is on the CPU) and one ``.tolist()`` of the result and validation flags.

    Raises:
        TypeError / ValueError: from :meth:`verify_tree` on bad inputs.
    """

    name = "traversal"
    valid_laws = frozenset({DraftLaw.IID})
    chains_only = False
    _law = DraftLaw.IID

    def verify_tree(self, p: Tensor, q: Tensor, tokens: Tensor, parents: Tensor,
                    generator: torch.Generator | None = None, *,
                    drafts: Mapping[int, Sequence[int]] | None = None) -> TreeVerifyOutput:
        """Verify one draft tree leaf-to-root.

        Args:
            p: target probabilities ``[1 + N, V]`` at every node.
            q: draft probabilities ``[1 + N, V]`` at every node (leaf rows unused).
            tokens: int64 ``[1 + N]`` node tokens (``tokens[0]``, the root, is already committed).
            parents: int64 ``[1 + N]``, ``parents[0] = −1``, ``parents[i] < i``.
            generator: source of all randomness, on p's device.
            drafts: REQUIRED when repeated draws of one token were merged into one node (as
                :class:`specot.drafting.DraftTree` does): node → its children's tokens with
                multiplicity, in draw order (``DraftTree.drafts``). Without it the traversal is exact
                only if every node's children are its draws, in index order; on merged trees it is
                not (the test-suite shows errors of order 1e-2 in the joint law).

        Returns:
            :class:`TreeVerifyOutput`: the accepted root-to-v path and its tokens plus the extra token.

        Raises:
            TypeError: wrongly typed inputs.
            ValueError: shape mismatches, a malformed tree, ``drafts`` inconsistent with the tree or
                its tokens, invalid probabilities, token ids out of range, or a drafted token with
                ``q(x) = 0``.
        """
        who = f"verifier {self.name!r}"
        _check_tree_shapes(p, q, tokens, parents, who, generator)
        plist = parents.tolist()
        children, _ = tree_structure(plist)
        kids, base, order, draw_tok = expand_tree(children, drafts)
        M = len(base)
        dev = p.device
        tokens = tokens.to(device=dev, dtype=torch.int64)
        parent_of = torch.tensor(plist[1:], dtype=torch.int64, device=dev)
        q_rows = torch.tensor([bool(c) for c in children], dtype=torch.bool, device=dev)
        flags = _value_flags(p, q, q_rows, tokens, parent_of)
        base_t = torch.tensor(base, dtype=torch.int64, device=dev)
        want = torch.tensor(draw_tok, dtype=torch.int64, device=dev)
        bad_drafts = ((want >= 0) & (tokens.index_select(0, base_t) != want)).any()
        a, F = _traverse(p, q, tokens, kids, self._law == DraftLaw.WOR, base)
        idx = torch.tensor(order, dtype=torch.int64, device=dev)
        u = draw_uniforms((M + 1,), generator, dev)
        accept = u[:M] < a[idx]
        accept[-1] = True  # the root (last in post-order) always accepts
        first = accept.to(torch.int64).argmax().reshape(1)
        vid = idx.index_select(0, first)  # [1] expanded id
        y = _sample_row(F.index_select(0, vid)[0], u[M])
        node = base_t.index_select(0, vid)
        out = torch.cat([node, y.reshape(1), flags.to(torch.int64), bad_drafts.reshape(1).to(torch.int64),
                         tokens]).tolist()  # one host sync
        if any(out[2:6]):
            _raise_flags(out[2:6], who, p, q, tokens, parent_of)
        if out[6]:
            raise ValueError(f"{who}: drafts does not match the tree's tokens (a node's distinct draws, in order "
                             "of first occurrence, must be its children in index order)")
        path = _path_to(int(out[0]), plist)
        toks = out[7:]
        return TreeVerifyOutput(path=path, tokens=(*(toks[v] for v in path), int(out[1])))


class TraversalWORVerifier(TraversalVerifier):
    """Traversal verification for draft trees whose siblings were drawn WITHOUT replacement from
    their parent's draft distribution (:data:`DraftLaw.WOR`): on rejection of a child its token is
    removed from the parent's draft distribution. Lossless for that law;
    siblings must be distinct. Not in the name registry yet (build it directly): registering it
    changes the set of verifiers valid for WOR draft trees that the engine's tests pin."""

    name = "traversal_wor"
    valid_laws = frozenset({DraftLaw.WOR})
    _law = DraftLaw.WOR
