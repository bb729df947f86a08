"""A draft model: any Hugging Face causal LM sharing the target's tokenizer.

Chains are drafted token by token over the draft's KV cache (Leviathan et al. 2023, Algorithm 1);
trees one draft forward per depth for all frontier nodes, under tree attention
(:meth:`specot.models.CausalLM.forward_tree`). After verification the draft cache keeps the
committed context plus the accepted path, compacted in place.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch
from torch import Tensor

from .._validation import trusted_inputs
from ..laws import DraftLaw, sample_drafts
from ..models.hf import CausalLM
from ..sampling import SamplingConfig, standardize
from .base import DraftOutcome, DraftSchedule, DraftTree, Drafter
from .tree import DraftShape, Path_, TreeBudget, TreeSpec

__all__ = ["ModelDrafter", "as_drafter", "check_vocab_compatible", "draft_tree_from_model"]


def check_vocab_compatible(target: CausalLM, draft: CausalLM) -> None:
    """Raise ``ValueError`` unless target and draft share one vocabulary.

    With both tokenizers known, their token→id maps must be identical (so every id means the same
    string); otherwise the number of logits used must match.
    """
    tt, dt = target.tokenizer, draft.tokenizer
    if tt is not None and dt is not None:
        tv, dv = tt.get_vocab(), dt.get_vocab()
        if tv != dv:
            only_t = len(set(tv.items()) - set(dv.items()))
            raise ValueError(
                f"tokenizer mismatch: draft {draft.name!r} ({len(dv)} tokens) and target {target.name!r} "
                f"({len(tv)} tokens) differ in {only_t} token→id entries; the draft model must use the "
                "target's tokenizer"
            )
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"vocabulary mismatch: target {target.name!r} has {target.vocab_size} logits, draft "
            f"{draft.name!r} has {draft.vocab_size}; the draft model must share the target's vocabulary"
        )


def as_drafter(target: Any, draft: Any) -> Drafter:
    """``draft`` as a drafter for ``target``: a :class:`Drafter` as it is, a draft :class:`CausalLM`
    wrapped in a :class:`ModelDrafter`; a model drafter's vocabulary checked against the target's
    (:func:`check_vocab_compatible`).

    Raises:
        TypeError: ``draft`` is neither a drafter nor a draft model.
        ValueError: target and draft vocabularies differ.
    """
    if isinstance(draft, CausalLM):
        check_vocab_compatible(target, draft)
        return ModelDrafter(draft)
    if not isinstance(draft, Drafter):
        raise TypeError(f"tree decoding needs a drafter or a draft model (CausalLM), got {type(draft).__name__}")
    if isinstance(draft, ModelDrafter):
        check_vocab_compatible(target, draft.model)
    return draft


def _draft_chain(draft: CausalLM, context: Sequence[int], depth: int, sampling: SamplingConfig,
                 generator: torch.Generator | None) -> DraftTree:
    """γ = ``depth`` tokens, one draft forward per token (no tree mask); q ``[γ, V]``."""
    logits = draft.logits_after(context)  # [1, V]
    tokens: list[int] = []
    qs: list[Tensor] = []
    for i in range(depth):
        q = standardize(logits, sampling)  # [1, V]
        tok = sample_drafts(q, 1, DraftLaw.IID, generator)  # [1, 1], stays on the device
        qs.append(q)
        tokens.append(tok)
        if i + 1 < depth:
            logits = draft.forward(tok.reshape(-1))  # [1, V]
    ids = torch.cat(tokens).reshape(-1).tolist() if tokens else []  # one host read per chain
    tree = DraftTree.chain(int(context[-1]), ids, torch.cat(qs) if qs else None)  # q: [γ, V]
    tree.draft_calls = depth
    tree.q_standardized = True
    return tree


def draft_tree_from_model(draft: CausalLM, context: Sequence[int], spec: TreeSpec, depth: int,
                          sampling: SamplingConfig, generator: torch.Generator | None,
                          stop_tokens: frozenset[int] = frozenset()) -> tuple[DraftTree, dict[int, int]]:
    """Draft a tree after ``context`` with ``spec`` cut at ``depth``, one draft pass per depth.

    **Slots vs nodes** (see :mod:`specot.drafting.tree`): a node is a distinct token prefix holding
    the slots that reached it; its child slots receive ``n`` draws from q at the node under the
    spec's law (draw j → child slot j; equal draws share a child node, only possible under IID).
    Under WOR / GREEDY / SPECHUB a node whose q has fewer than n tokens with mass draws that many
    instead (the same law with fewer drafts). The draft cache first catches up with ``context``
    (giving q at the root); then all frontier nodes of one depth (with child slots, not at
    ``depth``, not a stop token) run in ONE :meth:`CausalLM.forward_tree` call. Leaves are never
    run through the draft.

    Returns:
        ``(tree, draft_pos)``: the :class:`DraftTree` and, for each node fed to the draft model, its
        index in the draft's KV cache (to keep the accepted path afterwards).
    """
    law = spec.law
    tree = DraftTree.root(int(context[-1]))
    tree.law = law
    draft_pos: dict[int, int] = {}
    slots: dict[int, list[Path_]] = {0: [()]}
    if depth <= 0 or not spec.children(()):
        return tree, draft_pos
    logits = draft.logits_after(context)  # [1, V]
    tree.draft_calls = 1
    draft_pos[0] = len(context) - 1
    frontier = [0]
    q_rows: list[Tensor] = []
    for d in range(depth):
        q = standardize(logits, sampling)  # [F, V]
        kid_slots = [[c for s in slots[node] for c in spec.children(s)] for node in frontier]
        children = [len(k) for k in kid_slots]  # children per frontier node
        if law != DraftLaw.IID:
            support = (q > 0).sum(-1).tolist()
            children = [min(m, int(s)) for m, s in zip(children, support)]
        draws: dict[int, list[int]] = {}
        for m in dict.fromkeys(children):  # one sampler call per distinct number of children, frontier order
            rows = [i for i, x in enumerate(children) if x == m]
            got = sample_drafts(q[rows], m, law, generator).tolist()  # [len(rows), m]
            for i, toks in zip(rows, got):
                draws[i] = toks
        for i, node in enumerate(frontier):
            tree.q_row[node] = len(q_rows)
            q_rows.append(q[i])
            for child, slot in zip(tree.add_children(node, draws[i]), kid_slots[i]):
                slots.setdefault(child, []).append(slot)
        if d + 1 >= depth:
            break
        nxt = [nd for nd in range(len(tree.tokens)) if tree.depths[nd] == d + 1 and tree.tokens[nd] not in stop_tokens
               and any(spec.children(s) for s in slots[nd])]
        if not nxt:
            break
        start = len(draft.cached_ids)
        logits = draft.forward_tree([tree.tokens[nd] for nd in nxt], [draft_pos[tree.parents[nd]] for nd in nxt])  # [F, V]
        tree.draft_calls += 1
        for j, node in enumerate(nxt):
            draft_pos[node] = start + j
        frontier = nxt
    tree.q = torch.stack(q_rows) if q_rows else None  # [M, V]
    tree.q_standardized = True
    return tree, draft_pos


class ModelDrafter(Drafter):
    """Drafts chains or trees from a draft :class:`CausalLM` (any Hugging Face causal LM sharing the
    target's tokenizer).

    Chains (``TreeSpec.sequences(1, γ)``): γ tokens sampled one by one from the standardized draft
    distribution (Leviathan et al. 2023, Algorithm 1). Trees: :func:`draft_tree_from_model`. Every
    draft is sampled with the engine's generator and the tree carries the distributions ``q`` it
    was drawn from.

    Raises:
        TypeError: ``model`` is not a :class:`CausalLM`.
    """

    def __init__(self, model: CausalLM) -> None:
        super().__init__()
        if not isinstance(model, CausalLM):
            raise TypeError(f"ModelDrafter needs a specot CausalLM, got {type(model).__name__}")
        self.model = model
        self.name = model.name
        self._draft_pos: dict[int, int] = {}

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def device(self) -> torch.device:
        return self.model.device

    def reset(self) -> None:
        self.model.reset()
        self._draft_pos = {}

    def start(self, prompt_ids: Sequence[int], spec: DraftShape, schedule: DraftSchedule | None = None,
              stop_tokens: frozenset[int] = frozenset()) -> None:
        """:meth:`Drafter.start`. A draft model draws fixed shapes: a :class:`TreeSpec`, or a
        :class:`TreeBudget` of one child per node (a chain of its depth).

        Raises:
            TypeError: a :class:`TreeBudget` of more than one child per node.
        """
        if isinstance(spec, TreeBudget):
            if not spec.is_chain():
                raise TypeError(f"a ModelDrafter draws fixed tree shapes: give it a TreeSpec, not a {spec.label()}")
            spec = TreeSpec.sequences(1, spec.depth)
        super().start(prompt_ids, spec, schedule, stop_tokens)

    def propose(self, context: Sequence[int], max_depth: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        spec = self.spec if self.spec is not None else TreeSpec.sequences(1, max(max_depth, 1))
        depth = self.depth_limit(max_depth)
        t0 = time.perf_counter()
        self._draft_pos = {}
        with trusted_inputs():  # q from standardize: the samplers skip their value checks
            if depth <= 0:
                tree = DraftTree.root(int(context[-1]))
            elif spec.is_chain():  # a chain grows with the schedule (up to 2γ under "heuristic")
                tree = _draft_chain(self.model, context, depth, sampling, generator)
            else:
                tree, self._draft_pos = draft_tree_from_model(self.model, context, spec, min(depth, spec.depth),
                                                              sampling, generator, self.stop_tokens)
        self.calls += tree.draft_calls
        self.draft_time_s += time.perf_counter() - t0  # ends with the host read of the drafted tokens
        return tree

    def update(self, outcome: DraftOutcome) -> None:
        super().update(outcome)
        if self._draft_pos:  # a tree: keep the committed context + the accepted path's fed nodes
            n = outcome.context_len
            self.model.keep_tree_path(n, [self._draft_pos[i] for i in outcome.path if i in self._draft_pos])
            self._draft_pos = {}
