"""EAGLE-2's dynamic draft tree with its final re-ranking (Li et al. 2024, "EAGLE-2: Faster
Inference of Language Models with Dynamic Draft Trees", Sec. 4.1 "expansion" and 4.2
"re-ranking"), built on the host: the tree an EAGLE head drafts at temperature 0 under the GREEDY
law. :mod:`specot.drafting.eagle.static_tree` builds the same tree on the device."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import Tensor

from ...laws import DraftLaw
from ..base import DraftTree, greedy_q
from .passes import DraftPasses, DynamicTree, Expansion

__all__ = ["rerank", "ranked_tree", "draft_reranked"]


def rerank(score: Sequence[float], budget: int) -> list[int]:
    """EAGLE-2's re-ranking (Li et al. 2024, Sec. 4.2): the ``budget`` draft nodes of highest
    cumulative draft log-probability, in increasing node order.

    ``score[0]`` is the root (never returned); nodes are numbered so that parents precede children.
    As a child never scores above its parent (a log-probability is ≤ 0) and ties go to the earlier
    node, the kept set is closed under parents: it is a tree.
    """
    return sorted(sorted(range(1, len(score)), key=lambda nd: (-score[nd], nd))[:max(budget, 0)])


def ranked_tree(root: int, tokens: list[int], parents: list[int], score: list[float], keep: list[int],
                draft_calls: int, vocab_size: int, q_device: Any) -> DraftTree:
    """The deterministic GREEDY-law tree of the kept ``keep`` nodes (increasing; closed under
    parents; siblings stored best first) of a candidate tree (node 0 the root, holding ``root``):
    q at a node is supported on its children, ∝ ``exp(score[child] − score[node])``
    (:func:`~specot.drafting.base.greedy_q`, ``[M, vocab_size]`` on ``q_device``)."""
    tree = DraftTree.root(root)
    tree.law = DraftLaw.GREEDY
    kids: dict[int, list[int]] = {}
    for nd in keep:  # node ids grow depth by depth and siblings are stored best first
        kids.setdefault(parents[nd], []).append(nd)
    new_id = {0: 0}
    rows: list[tuple[int, list[float]]] = []
    for nd in [0] + keep:
        ch = kids.get(nd)
        if not ch:
            continue
        for old, nid in zip(ch, tree.add_children(new_id[nd], [tokens[x] for x in ch])):
            new_id[old] = nid
        tree.q_row[new_id[nd]] = len(rows)
        rows.append((new_id[nd], [math.exp(score[x] - score[nd]) for x in ch]))
    if rows:
        tree.q = greedy_q(tree, rows, vocab_size, device=q_device)
        tree.q_standardized = True  # rows of strict_weights: distributions by construction
    tree.deterministic = True
    tree.draft_calls = draft_calls
    return tree


@torch.no_grad()
def draft_reranked(passes: DraftPasses, root_token: int, gamma: int, shape: DynamicTree, expansion: Expansion,
                   target_ids: Tensor, vocab_size: int) -> DraftTree:
    """EAGLE-2's dynamic draft tree after ``root_token``, ``gamma`` (the draft length γ) deep at most,
    re-ranked, as a deterministic tree.

    Expansion: every expanded node gets the ``shape.children`` tokens of highest draft probability
    as children; of each depth's new nodes, the ``shape.width`` with the highest cumulative draft
    log-probability (the path's confidence) and allowed by ``expansion`` are expanded next, in ONE
    draft pass under a tree mask — except nodes that can no longer make the final cut
    (``shape.budget`` nodes already score higher: a descendant never scores above its ancestor).
    Re-ranking: the ``shape.budget`` nodes of highest confidence are kept (ties to the earlier
    node, so a kept node's parent is kept). ``target_ids [V_d]`` maps draft ids to target ids.

    Nothing is sampled: the tree is a deterministic function of the context, handed over as a
    GREEDY-law tree with q supported on each node's children (:func:`ranked_tree`); the ``greedy``
    verifier then accepts child x with probability p(x) — lossless at every temperature (unlike
    pruning *sampled* children, which would change the law at a node).
    """
    tokens, parents, score = [root_token], [-1], [0.0]
    frontier = [0]
    children = min(shape.children, target_ids.shape[0])
    for d in range(gamma):
        lg = passes.frontier_logits(frontier)  # [F, V_d]
        top = torch.log_softmax(lg.to(torch.float32), dim=-1).topk(children, dim=-1)  # sorted, best first
        lps, ids = top.values.tolist(), target_ids[top.indices].tolist()  # one host read each
        new: list[int] = []
        for i, nd in enumerate(frontier):
            for lp, t in zip(lps[i], ids[i]):
                new.append(len(tokens))
                tokens.append(int(t))
                parents.append(nd)
                score.append(score[nd] + lp)
        if d + 1 >= gamma:
            break
        # a node expands only if fewer than `budget` nodes score strictly higher (else no
        # descendant of it survives the re-ranking)
        cut = sorted(score[1:], reverse=True)[shape.budget - 1] if len(score) - 1 >= shape.budget else -math.inf
        cands = [nd for nd in new if score[nd] >= cut and expansion.allows(tokens[nd], score[nd])]
        cands.sort(key=lambda nd: (-score[nd], nd))
        nxt = cands[:shape.width]
        if not nxt:
            break
        passes.run(nxt, tokens, parents)
        frontier = nxt
    # + the catch-up pass that gave the root
    return ranked_tree(root_token, tokens, parents, score, rerank(score, shape.budget), passes.count + 1,
                       vocab_size, passes.device)
