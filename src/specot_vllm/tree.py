"""Draft trees in vLLM 0.32 on the CPU: one target pass per step scores every node of every
request's tree, and specot's multi-draft verifiers decide what each request keeps.

vLLM's scheduler, paged KV cache and batching stay as they are; a request's tree travels through
them as a flattened chain of its N nodes (parents first), so the scheduler reserves ``1 + N``
slots and accounts ``1 + accepted`` tokens as for a chain. What changes, in the worker process
(:class:`specot_vllm.tree_runner.TreeRunner`, one per model runner, called from the model-runner methods that
:mod:`specot_vllm.adapter` replaces, active only in a tree deployment, :func:`tree_mode`; every
read of the runner's internals goes through the adapter's view of it):

1. **Proposal** (``propose_draft_token_ids``): the tree proposer
   (:class:`specot_vllm.proposers.SuffixTreeProposer`) returns each row's node tokens and keeps its
   tree; the runner files the trees by request id. Requests whose sampling needs vLLM's own
   per-token processing (penalties, bad words, allowed tokens, logit bias, min-p, pending
   min-tokens, logprobs, structured output; :func:`specot_vllm.adapter.tree_eligible` reads their
   sampling parameters) get no draft: they decode one token per step through vLLM's own sampler,
   exactly as without speculation.
2. **Inputs** (``_prepare_inputs``): node k of a request whose root sits at position ``p`` gets
   position ``p + depth(k)`` (vLLM computed ``p + k``); its KV slot stays the flat one,
   ``slot(p + k)``. The trees' geometries (:attr:`specot.drafting.DraftTree.geometry`, computed
   once per tree) go to the attention backend (the runner's
   :class:`specot_vllm.tree_attn.TreeStep`), whose mask lets node k see the context, the root and
   its ancestors only. The logits rows of a request are then exactly specot's ``[1 + N, V]``: row
   k is the target's distribution after the root-to-k path.
3. **Verification** (``_sample``, in place of vLLM's rejection sampler): vLLM's temperature / top-k
   / top-p transform, then :func:`specot.engine.loop.verify_draft_tree` per request with the
   deployment's verifier and the request's own generator (vLLM's per-request seed). Emitted tokens
   are the accepted path's tokens and the correction or bonus token, in vLLM's ``[B, S + 1]``
   format (``-1`` after them).
4. **KV compaction**: the accepted path ``a_1 < .. < a_m`` lives in slots ``slot(p + a_j)``,
   vLLM's bookkeeping (``num_computed_tokens += m + 1``) expects ``slot(p + j)``: every layer's K/V
   is copied there right after verification (:func:`specot_vllm.tree_attn.move_slots`), before any
   later pass can read it.

Exactness: given the target's logits at every node (2.), each verifier is lossless for the law its
tree was drawn under (``greedy``: the suffix drafter's deterministic GREEDY-law trees; ``kseq``,
``rrs``, ``importance``, ``traversal``: i.i.d. redraws; ``rrs_wor``: without replacement), so every
emitted token follows the target's law (Leviathan et al. 2023; SpecTr, Sun et al. 2023; Hu et al.
2025). When vLLM's scheduler schedules fewer nodes than proposed (token budget, model length), the
tree is cut where the cut does not depend on a node's own draws (:func:`cut_tree`).
"""

from __future__ import annotations

import importlib
from typing import Any

from specot.drafting import DraftTree

__all__ = ["tree_mode", "cut_tree"]


def tree_mode(vllm_config: Any) -> bool:
    """Whether a deployment drafts trees: its ``custom_class`` proposer declares ``specot_tree``."""
    spec = getattr(vllm_config, "speculative_config", None)
    if spec is None or getattr(spec, "method", None) != "custom_class" or not isinstance(spec.model, str):
        return False
    path = spec.model
    if "." not in path:
        return False
    mod, name = path.rsplit(".", 1)
    try:
        cls = getattr(importlib.import_module(mod), name, None)
    except ImportError:
        return False
    return bool(getattr(cls, "specot_tree", False))


def cut_tree(tree: Any, n: int):
    """The part of ``tree`` (a :class:`specot.drafting.DraftTree`, nodes numbered parents first,
    each node's children contiguous) that can be verified when only its first ``n`` nodes were
    scored: a node keeps its children iff it is kept and ALL its draws fit, i.e. its children's
    block ends by node ``n`` counting every draw (``len(tree.drafts[node])``, repeats included).

    Whether a node keeps its children then depends only on the draws of nodes numbered before it,
    never on its own or its descendants' (a distinct-children count would), so each kept node's
    drafts still follow its draft law and the verification stays exact.
    """
    if n >= tree.size:
        return tree
    out = DraftTree.root(tree.tokens[0])
    out.law, out.q, out.q_standardized, out.deterministic = tree.law, tree.q, tree.q_standardized, tree.deterministic
    new_of = {0: 0}
    for node in range(len(tree.tokens)):  # parents first
        if node not in new_of or node not in tree.drafts:
            continue
        kids = sorted(set(tree.child_of[node].values()))
        if not kids or kids[0] + len(tree.drafts[node]) - 1 > n:
            continue
        created = out.add_children(new_of[node], tree.drafts[node])
        for tok, c in zip(tree.drafts[node], created):
            new_of[tree.child_of[node][tok]] = c
        if node in tree.q_row:
            out.q_row[new_of[node]] = tree.q_row[node]
    return out
