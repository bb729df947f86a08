"""What the host tree constructions of an EAGLE head share: the head's draft passes over one
proposal's drafted nodes (:class:`DraftPasses`), the rule for which drafted nodes may be expanded
(:class:`Expansion`) and the shape of EAGLE-2's dynamic tree (:class:`DynamicTree`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..tree import DraftShape, TreeBudget

__all__ = ["DraftPasses", "Expansion", "DynamicTree"]


class DraftPasses:
    """The head's passes over the drafted nodes of one proposal (EAGLE's feature extrapolation).

    A drafted node reads its parent's draft output feature and its own token; it attends to the
    committed KV entries, to its ancestors' temporary entries and to itself. The temporary entries
    ``[L, kv, T, d]`` are discarded with this object after the proposal.

    Args:
        head: the :class:`~specot.drafting.eagle.head.Eagle3Head`.
        past_k, past_v: the committed KV entries ``[L, kv, P, d]`` (read, never written).
        context_len: c, the committed context's length; a node at depth δ sits at rotary position
            ``c − 2 + δ`` (the draft's own positions, j − 1).
        root: (draft logits ``[V_d]``, output feature ``[H]``) of the last committed token (node 0).

    Attributes:
        logits, feat: node → its draft logits ``[V_d]`` / output feature ``[H]`` (the root and
            every node run so far).
        count: draft passes run.
    """

    def __init__(self, head: Any, past_k: Tensor, past_v: Tensor, context_len: int, root: tuple[Tensor, Tensor]) -> None:
        self.head, self.past_k, self.past_v, self.context_len = head, past_k, past_v, context_len
        self.device = head.norm.weight.device
        self.logits: dict[int, Tensor] = {0: root[0]}
        self.feat: dict[int, Tensor] = {0: root[1]}
        self._anc: dict[int, list[int]] = {0: []}  # node -> temporary entries it attends to (ancestors + itself)
        self._tk, self._tv = head.empty_kv()
        self.count = 0

    def frontier_logits(self, nodes: list[int]) -> Tensor:
        """The draft logits ``[F, V_d]`` of ``nodes`` (each already run)."""
        return torch.stack([self.logits[nd] for nd in nodes])

    def run(self, nodes: list[int], tokens: list[int], parents: list[int]) -> None:
        """ONE draft pass over ``nodes`` (a frontier; ``tokens`` / ``parents`` indexed by node)
        under the tree mask; their logits and features are stored. A node's depth is the number of
        temporary entries it attends to (its ancestors and itself)."""
        P, Tp, T = self.past_k.shape[2], self._tk.shape[2], len(nodes)
        tmask = torch.zeros(T, Tp + T, dtype=torch.bool)  # built on the host, moved once
        for j, nd in enumerate(nodes):
            par = parents[nd]
            tmask[j, self._anc[par]] = True
            tmask[j, Tp + j] = True
            self._anc[nd] = self._anc[par] + [Tp + j]
        mask = torch.cat([torch.ones(T, P, dtype=torch.bool, device=self.device), tmask.to(self.device)], dim=1)
        toks = torch.tensor([tokens[nd] for nd in nodes], dtype=torch.int64, device=self.device)
        fin = torch.stack([self.feat[parents[nd]] for nd in nodes])
        pos = torch.tensor([self.context_len - 2 + len(self._anc[nd]) for nd in nodes], device=self.device)
        pk, pv = torch.cat([self.past_k, self._tk], 2), torch.cat([self.past_v, self._tv], 2)
        lg, h, k, v = self.head.step(toks, fin, pos, pk, pv, mask, fused=False)
        self._tk, self._tv = torch.cat([self._tk, k], 2), torch.cat([self._tv, v], 2)
        self.count += 1
        for j, nd in enumerate(nodes):
            self.logits[nd], self.feat[nd] = lg[j], h[j]


@dataclass(frozen=True)
class Expansion:
    """Which drafted nodes may be expanded further: never one holding a stop token (EOS); with a
    confidence gate τ (``min_confidence``), only while the path's cumulative draft probability —
    the draft's own softmax at temperature 1, EAGLE-2's confidence — is at least τ."""

    stop_tokens: frozenset[int] = frozenset()
    min_confidence: float | None = None

    @property
    def gated(self) -> bool:
        """Whether the confidence gate is on (the expansion then reads the draft's confidence)."""
        return self.min_confidence is not None

    @property
    def log_tau(self) -> float:
        """log τ (0 without the gate)."""
        return math.log(self.min_confidence) if self.min_confidence is not None else 0.0

    def allows(self, token: int, score: float) -> bool:
        """Whether a node of ``token`` whose path has cumulative draft log-probability ``score`` may expand."""
        return token not in self.stop_tokens and (self.min_confidence is None or score >= self.log_tau)


@dataclass(frozen=True)
class DynamicTree:
    """The shape of EAGLE-2's dynamic tree (Li et al. 2024, EAGLE-2, Sec. 4.1; their ``top-k``,
    ``total_tokens`` and per-depth expansion).

    Attributes:
        children: children per expanded node, at most.
        budget: draft nodes of the tree, at most.
        width: nodes expanded per depth, at most.
    """

    children: int
    budget: int
    width: int

    @classmethod
    def for_spec(cls, spec: DraftShape, children: int | None = None, budget: int | None = None,
                 width: int | None = None) -> "DynamicTree":
        """The dynamic tree of a shape: ``children`` per node (default: a
        :class:`~specot.drafting.TreeSpec`'s widest node, a :class:`~specot.drafting.TreeBudget`'s
        ``children``), capped at ``max_drafts_per_node()`` (what the verifier was checked for);
        ``budget`` nodes (default: the spec's slots; a budget's children × depth, the slots of
        ``TreeSpec.sequences(children, depth)``); ``width`` nodes expanded per depth (default:
        ``children``, as in EAGLE-2)."""
        if isinstance(spec, TreeBudget):
            widest, slots = spec.children, spec.children * spec.depth
        else:
            widest, slots = max(len(spec.children(p)) for p in ((),) + spec.paths), spec.num_slots
        c = min(children or widest, spec.max_drafts_per_node())
        return cls(c, budget or slots, width or c)
