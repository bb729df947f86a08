"""EAGLE draft trees whose children are drawn from q under the tree's law: a chain, the spec's
static topology, or EAGLE-2's dynamic tree with its budget spent during expansion.

In all three, the children of an expanded node are ``n`` drafts drawn from q at that node under
the law (:func:`specot.laws.sample_drafts`): ``GREEDY`` — EAGLE's top-k children, made exact: the
top-(n−1) tokens of q and one sampled from q without them (verify with ``greedy``); ``WOR`` — n
distinct samples (``rrs_wor``); ``IID`` — n i.i.d. samples, equal draws merging into one child
(``kseq`` / ``rrs``); a chain is γ tokens drawn one by one (IID, n = 1; verify with
``speculative``). Which nodes are expanded, and with how many children (the :class:`TreeShape`),
is decided before that node's children are drawn, from the draft's confidence and the budget only
— never by pruning drawn children afterwards (EAGLE-2's final re-ranking would change the law at a
node, so the budget is spent during expansion instead). So the law declared in ``tree.law`` is
exactly how every node's children were drawn, and verification is lossless by construction.

At temperature 0 the standardized q is one-hot, which allows one child per node; nodes with
several children then draw them from the draft's own softmax (top-(n−1) + one sampled under
GREEDY) — exact, since every lossless verifier is exact for any q. (At temperature 0 under
GREEDY an EAGLE drafter re-ranks instead: :mod:`specot.drafting.eagle.reranked`.)
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from ...laws import DraftLaw, sample_drafts
from ...sampling import SamplingConfig
from ..base import DraftTree
from ..tree import Path_, TreeSpec
from .passes import DraftPasses, DynamicTree, Expansion

__all__ = ["TreeShape", "ChainShape", "TopologyShape", "DynamicShape", "draft_sampled"]


class TreeShape:
    """How a sampled tree grows: the children each frontier node gets (decided before they are
    drawn) and which of the new nodes run through the head next."""

    #: whether the next frontier is chosen by cumulative draft log-probability
    scored = False

    def depth(self, gamma: int) -> int:
        """The tree's depth for a draft length ``gamma``."""
        return gamma

    def plan(self, frontier: list[int], size: int) -> list[int]:
        """Children per frontier node (a tree of ``size`` draft nodes so far)."""
        return [1 for _ in frontier]

    def attach(self, node: int, kids: list[int]) -> None:
        """Record that ``node``'s draws became the child nodes ``kids`` (draw order, with repeats)."""

    def next(self, cands: list[int], size: int, score: dict[int, float]) -> list[int]:
        """The next frontier among the new nodes ``cands`` that may expand."""
        return cands


class ChainShape(TreeShape):
    """A chain: one child per node, every node expanded down to the draft length."""


class TopologyShape(TreeShape):
    """The spec's static topology: a node holds the slots that reached it and gets one child per
    child slot of those (:mod:`specot.drafting.tree`, "Slots vs nodes")."""

    def __init__(self, spec: TreeSpec) -> None:
        self.spec = spec
        self.slots: dict[int, list[Path_]] = {0: [()]}

    def _child_slots(self, node: int) -> list[Path_]:
        return [cs for s in self.slots.get(node, []) for cs in self.spec.children(s)]

    def depth(self, gamma: int) -> int:
        return min(gamma, self.spec.depth)

    def plan(self, frontier: list[int], size: int) -> list[int]:
        return [len(self._child_slots(nd)) for nd in frontier]

    def attach(self, node: int, kids: list[int]) -> None:
        kid_slots = self._child_slots(node)
        for j, child in enumerate(kids):  # draw j went to child slot j (equal IID draws share a node)
            self.slots.setdefault(child, []).append(kid_slots[j])

    def next(self, cands: list[int], size: int, score: dict[int, float]) -> list[int]:
        return [nd for nd in cands if self._child_slots(nd)]


class DynamicShape(TreeShape):
    """EAGLE-2's dynamic tree with its budget spent during expansion: every frontier node gets
    ``children`` children while the budget lasts; the ``width`` most confident new nodes (highest
    cumulative draft log-probability) are expanded next, best first, within the budget."""

    scored = True

    def __init__(self, shape: DynamicTree) -> None:
        self.shape = shape

    def plan(self, frontier: list[int], size: int) -> list[int]:
        left, plan = self.shape.budget - size, []
        for _ in frontier:
            m = min(self.shape.children, max(left, 0))
            plan.append(m)
            left -= m
        return plan

    def next(self, cands: list[int], size: int, score: dict[int, float]) -> list[int]:
        left = self.shape.budget - size
        cands = sorted(cands, key=lambda nd: (-score[nd], nd))
        return cands[: min(self.shape.width, max(left, 0))]  # best first: the budget goes to them first


def _draw(qd: Tensor, plan: list[int], law: DraftLaw, generator: torch.Generator | None) -> dict[int, list[int]]:
    """Frontier index → the draft ids of its children: ONE :func:`sample_drafts` call per distinct
    number of children, from the rows ``qd [F, V_d]``; nodes with none are left out."""
    draws: dict[int, list[int]] = {}
    for m in dict.fromkeys(plan):
        if m == 0:
            continue
        rows = [i for i, x in enumerate(plan) if x == m]
        got = sample_drafts(qd[rows], m, law, generator).tolist()
        for i, ids in zip(rows, got):
            draws[i] = ids
    return draws


def _attach(tree: DraftTree, shape: TreeShape, frontier: list[int], draws: dict[int, list[int]], q: Tensor,
            q_rows: list[Tensor], target_ids: list[int], draft_vocab: int) -> list[tuple[int, int, int]]:
    """Add every frontier node's drawn children to ``tree`` (draft ids mapped to target ids) and
    its q row to ``q_rows`` (``draft_vocab``: V_d). Returns (parent, new child node, flat index ``i·V_d + draft id``
    into the frontier's logits) per new child; equal IID draws share one child."""
    pending: list[tuple[int, int, int]] = []
    for i, nd in enumerate(frontier):
        if i not in draws:
            continue
        tree.q_row[nd] = len(q_rows)
        q_rows.append(q[i])
        kids = tree.add_children(nd, [target_ids[j] for j in draws[i]])
        for j, child in enumerate(kids):
            if child not in kids[:j]:
                pending.append((nd, child, i * draft_vocab + draws[i][j]))
        shape.attach(nd, kids)
    return pending


@torch.no_grad()
def draft_sampled(passes: DraftPasses, root_token: int, shape: TreeShape, law: DraftLaw, gamma: int,
                  sampling: SamplingConfig, generator: torch.Generator | None, *,
                  probs: Callable[[Tensor, SamplingConfig], Tensor], to_target: Callable[[Tensor], Tensor],
                  target_ids: list[int], expansion: Expansion) -> DraftTree:
    """Grow a tree after ``root_token`` depth by depth (module docstring), ``gamma`` (the draft
    length γ) deep at most.

    Per depth: every frontier node (fed to the head, with its logits) gets its number of children
    n from ``shape``, capped at q's support for WOR / GREEDY; then ONE :func:`sample_drafts` call
    per distinct n draws the children from the nodes' q rows under ``law``. The next frontier (the
    new nodes ``expansion`` allows and ``shape`` picks) runs through the head in ONE pass under a
    tree mask; leaves are never run.

    ``probs(logits [F, V_d], sampling)`` is the draft law over the draft vocabulary,
    ``to_target(qd [F, V_d])`` scatters it to the target's ``[F, V]`` (the rows the verifier
    reads), ``target_ids`` maps draft ids to target ids.
    """
    tree = DraftTree.root(root_token)
    tree.law = law
    score = {0: 0.0}
    frontier = [0]
    q_rows: list[Tensor] = []
    depth = shape.depth(gamma)
    for d in range(depth):
        plan = shape.plan(frontier, tree.size)
        lg = passes.frontier_logits(frontier)  # [F, V_d]
        # the law over the draft vocabulary: drawing there and mapping the ids through d2t is
        # drawing from q [F, V] (zero off the draft vocabulary) — at a fraction of the width
        qd = probs(lg, sampling)  # [F, V_d]
        if sampling.greedy and any(m > 1 for m in plan):
            # temperature 0: a one-hot q allows one child only; nodes with several children draw
            # them from the draft's own softmax (any q is exact for a lossless verifier)
            multi = torch.tensor([m > 1 for m in plan], device=qd.device)[:, None]
            qd = torch.where(multi, probs(lg, SamplingConfig(1.0)), qd)
        if law != DraftLaw.IID:
            plan = [min(m, int(s)) for m, s in zip(plan, (qd > 0).sum(-1).tolist())]
        draws = _draw(qd, plan, law, generator)
        pending = _attach(tree, shape, frontier, draws, to_target(qd), q_rows, target_ids, qd.shape[-1])
        if (shape.scored or expansion.gated) and pending:  # the draft's confidence, one host read
            logp = torch.log_softmax(lg.to(torch.float32), dim=-1).reshape(-1)
            lps = logp.index_select(0, torch.tensor([x[2] for x in pending], device=logp.device)).tolist()
        else:
            lps = [0.0] * len(pending)
        for (nd, child, _), lp in zip(pending, lps):
            score[child] = score[nd] + lp
        if d + 1 >= depth or not pending:
            break
        cands = [child for _, child, _ in pending if expansion.allows(tree.tokens[child], score[child])]
        nxt = shape.next(cands, tree.size, score)
        if not nxt:
            break
        passes.run(nxt, tree.tokens, tree.parents)  # one pass for the whole next frontier
        tree.draft_calls += 1
        frontier = nxt
    tree.draft_calls += 1  # the catch-up pass that gave the root
    tree.q = torch.stack(q_rows) if q_rows else None
    tree.q_standardized = True  # rows of standardize() scattered into zeros: valid
    return tree
