"""The geometry of a draft tree, derived once from its parents: depths, children, leaves, the leaves
below every node, ancestors and positions, with one validation and one error message.

Two numberings are in use and both read this one record:

* the nodes only (:meth:`TreeGeometry.of`): ``parents [N]``, ``-1`` for a child of the root (the
  last committed token), else the index ``j < i`` of node i's parent — the record's own numbering;
* the root first (:meth:`TreeGeometry.of_rooted`): ``parents [1 + N]`` with ``parents[0] = -1`` and
  ``parents[i] < i`` — what a :class:`~specot.drafting.DraftTree`, a :class:`TokenTree`, the
  target protocol (:meth:`specot.models.TargetModel.tree_logits`, whose logits row ``j`` is node
  ``j``) and the verifiers speak. The record is the same; it describes the ``N`` nodes below the
  root (rooted node ``j`` is its node ``j - 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

__all__ = ["TreeGeometry", "TokenTree", "token_tree", "common_prefix_length"]


def _refuse(parents: Sequence[int], node: int, parent: object, root: int) -> ValueError:
    """The one error of a malformed tree: ``parent`` of ``node`` is neither ``root`` nor earlier."""
    shown = ", ".join(str(int(p)) for p in parents[:12]) + (", ..." if len(parents) > 12 else "")
    return ValueError(f"tree parents [{shown}]: parent {parent} of tree node {node} must be {root} (the root) or an "
                      "earlier node index (every parent must precede its children)")


@dataclass(frozen=True)
class TreeGeometry:
    """A draft tree's shape: ``N`` nodes below an implicit root, numbered parents first.

    Attributes:
        parents: ``[N]``: ``-1`` for a child of the root, else the index ``j < i`` of the parent.
        depths: ``[N]``: 1 for a child of the root, its parent's depth + 1 below.
        children: ``[N]`` the children of each node, in index order.
        root_children: the children of the root, in index order.
        leaves: the nodes without children, in index order (leaf number ``k`` is ``leaves[k]``).
        leaves_below: ``[N]`` the leaf numbers (``0..len(leaves) - 1``) in each node's subtree, the
            node's own if it is a leaf.
    """

    parents: tuple[int, ...]
    depths: tuple[int, ...]
    children: tuple[tuple[int, ...], ...]
    root_children: tuple[int, ...]
    leaves: tuple[int, ...]
    leaves_below: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, parents: Sequence[int]) -> "TreeGeometry":
        """The geometry of ``parents [N]`` (``-1``: a child of the root; else an earlier node).

        Raises:
            ValueError: a parent that is neither ``-1`` nor an earlier node (the one message).
        """
        par = tuple(int(p) for p in parents)
        depths: list[int] = []
        children: list[list[int]] = [[] for _ in par]
        root_children: list[int] = []
        for i, p in enumerate(par):
            if not -1 <= p < i:
                raise _refuse(par, i, p, -1)
            depths.append(1 if p < 0 else depths[p] + 1)
            (root_children if p < 0 else children[p]).append(i)
        leaves = tuple(i for i in range(len(par)) if not children[i])
        below: list[list[int]] = [[] for _ in par]
        for k, leaf in enumerate(leaves):
            node = leaf
            while node >= 0:
                below[node].append(k)
                node = par[node]
        return cls(par, tuple(depths), tuple(map(tuple, children)), tuple(root_children), leaves,
                   tuple(map(tuple, below)))

    @classmethod
    def of_rooted(cls, parents: Sequence[int]) -> "TreeGeometry":
        """The geometry of the nodes below the root of ``parents [1 + N]`` (``parents[0] = -1``,
        ``parents[i] < i``); node ``i`` of the record is node ``i + 1`` of ``parents``.

        Raises:
            ValueError: an empty ``parents``, ``parents[0] != -1`` or a parent outside ``[0, i)``
                (the one message).
        """
        par = [int(p) for p in parents]
        if not par or par[0] != -1:
            raise _refuse(par, 0, par[0] if par else "(none)", -1)
        for i in range(1, len(par)):
            if not 0 <= par[i] < i:
                raise _refuse(par, i, par[i], 0)
        return cls.of([p - 1 for p in par[1:]])

    @property
    def size(self) -> int:
        """The number of nodes ``N`` (the root excluded)."""
        return len(self.parents)

    @property
    def depth(self) -> int:
        """The largest depth (0 for an empty tree)."""
        return max(self.depths, default=0)

    @property
    def n_leaves(self) -> int:
        """The number of leaves (root-to-leaf paths)."""
        return len(self.leaves)

    def rooted_children(self) -> list[list[int]]:
        """Children lists ``[1 + N]`` in the root-first numbering (node 0 the root)."""
        return [[c + 1 for c in self.root_children]] + [[c + 1 for c in ch] for ch in self.children]

    def ancestors(self, node: int) -> list[int]:
        """The root-to-``node`` path: the child of the root first, ``node`` last."""
        path = []
        while node >= 0:
            path.append(node)
            node = self.parents[node]
        return path[::-1]

    def ancestor_mask(self) -> Tensor:
        """Ancestor-or-self mask, bool ``[N, N]``: ``m[i, j]`` iff node j is on the root-to-i path."""
        n = self.size
        m = torch.zeros(n, n, dtype=torch.bool)
        for i, p in enumerate(self.parents):
            if p >= 0:
                m[i] = m[p]
            m[i, i] = True
        return m

    def positions(self, base: int) -> list[int]:
        """``[N]`` position ids of the nodes when the root (the last committed token) sits at
        position ``base - 1``: ``base - 1 + depth``."""
        return [base - 1 + d for d in self.depths]

    def is_root_path(self, nodes: Sequence[int]) -> bool:
        """Whether ``nodes`` run from a child of the root down, parent to child."""
        prev = -1
        for n in nodes:
            if not 0 <= n < self.size or self.parents[n] != prev:
                return False
            prev = n
        return True

    def check_rooted_path(self, path: Sequence[int]) -> list[int]:
        """``path`` (rooted node indices ``1..N``, a child of the root first) as record nodes
        (``path[k] - 1``), checked to run from a child of the root down, parent to child.

        Raises:
            ValueError: a node outside ``1..N`` or one that is not the previous node's child.
        """
        nodes = [int(j) - 1 for j in path]
        if not self.is_root_path(nodes):
            raise ValueError(f"accepted path {[int(j) for j in path]} must run from a child of the root down the "
                             f"tree, parent to child, over nodes 1..{self.size}")
        return nodes


@runtime_checkable
class TokenTree(Protocol):
    """What a target scores in one pass (:meth:`specot.models.TargetModel.tree_logits`): tokens on
    a tree, root first. A :class:`~specot.drafting.DraftTree` is one; :func:`token_tree` makes one
    from lists.

    Attributes:
        tokens: ``[1 + N]`` node tokens; ``tokens[0]`` is the root (the last committed token, which
            the target takes from the context), node ``j`` is logits row ``j``.
        geometry: the :class:`TreeGeometry` of the ``N`` nodes below the root, computed once.
    """

    @property
    def tokens(self) -> Sequence[int]: ...

    @property
    def geometry(self) -> TreeGeometry: ...


@dataclass(frozen=True)
class _TokenTree:
    tokens: tuple[int, ...]
    geometry: TreeGeometry


def token_tree(tokens: Sequence[int], parents: Sequence[int]) -> TokenTree:
    """A :class:`TokenTree` of ``tokens [1 + N]`` under ``parents [1 + N]`` (root first:
    ``parents[0] = -1``, ``parents[j] < j``); ``tokens[0]`` is the root.

    Raises:
        ValueError: lists of different lengths, or a malformed ``parents``
            (:meth:`TreeGeometry.of_rooted`, the one message).
    """
    if len(tokens) != len(parents):
        raise ValueError(f"tokens and parents must have one length (the root first), got {len(tokens)} and "
                         f"{len(parents)}")
    return _TokenTree(tuple(int(t) for t in tokens), TreeGeometry.of_rooted(parents))


def common_prefix_length(cached: Sequence[int], context: Sequence[int], limit: int | None = None) -> int:
    """The length of the longest common prefix of ``cached`` and ``context[:-1]`` (at most ``limit``):
    what a backend's KV cache can keep before scoring after ``context`` (the last context token is
    always run, since its logits are asked for)."""
    bound = min(len(cached), len(context) - 1)
    if limit is not None:
        bound = min(bound, limit)
    if list(cached[:bound]) == list(context[:bound]):  # the usual case, one C-speed comparison
        return bound
    common = 0
    while common < bound and cached[common] == context[common]:
        common += 1
    return common
