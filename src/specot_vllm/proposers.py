"""specot's model-free drafter as a vLLM proposer (vLLM's ``custom_class`` proposer interface).

``speculative_config={"method": "custom_class", "model": "specot_vllm.SuffixProposer",
"num_speculative_tokens": γ}`` drafts with :class:`specot.drafting.SuffixDrafter` (suffix decoding,
Oliaro et al. 2024, with specot's scoring and adaptive budget): each request gets its best chain of
at most γ tokens from the earlier occurrences of its current suffix in its prompt and output.

The drafts are deterministic given the context, so any lossless verifier (vLLM's, or specot's
``speculative`` with a one-hot q) keeps the output law exact at every temperature.

vLLM's interface hands the proposer the batch's token rows (``token_ids_cpu [max_reqs, max_len]``,
valid up to ``num_tokens_no_spec[i]``) and the tokens each request committed in the last step, but
no request ids. One drafter is kept per batch row; its suffix index extends incrementally when the
row continues the same sequence and is rebuilt when another request took the row
(:meth:`specot.drafting.SuffixIndex.sync`). The acceptance of the previous proposal (committed
tokens − 1) feeds the drafter's calibrated budget.

Batch-size gate: after a step of more than ``draft_max_batch`` requests
(:func:`specot_vllm.config.draft_max_batch`) a proposer proposes nothing, so the next step is a
plain decoding step for every request (vLLM then schedules one token per request and samples with
its own sampler, as without speculation). On a compute-bound CPU a batch already fills the cores,
and a scored draft token costs nearly a decoded one. The gate depends on the batch size only, so
any lossless verifier keeps the output law exact.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["SuffixProposer", "SuffixTreeProposer", "redraw_tree"]


class SuffixProposer:
    """vLLM custom-class proposer over :class:`specot.drafting.SuffixDrafter` (module docstring).

    Args:
        vllm_config: vLLM's ``VllmConfig``; ``num_speculative_tokens`` is γ, and
            ``additional_config["specot"]["suffix"]`` holds keyword arguments of the drafter
            (``max_n``, ``min_score``, ``adaptive``, ...).

    Raises:
        ValueError: bad drafter arguments (the drafter's own message).
    """

    def __init__(self, vllm_config: Any) -> None:
        from specot.drafting import SuffixDrafter

        spec = vllm_config.speculative_config
        self.num_speculative_tokens = int(spec.num_speculative_tokens)  # draft tokens per request per step
        self.depth = self.num_speculative_tokens  # chains: the draft length γ (trees: set by the subclass)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        self._cfg = self._parse_config(vllm_config)
        self._kwargs = dict(self._cfg.suffix) if self._cfg is not None else {}
        # validate now (one clear error at start-up); its cost per scored token as configured
        self._cost_per_token = SuffixDrafter(None, **self._kwargs).cost_per_token
        self._rows: dict[int, Any] = {}
        self._last: dict[int, tuple[int, Any]] = {}  # row -> (context length, the tree proposed there)
        eos = getattr(getattr(vllm_config.model_config, "hf_config", None), "eos_token_id", None)
        self._stop = frozenset([eos] if isinstance(eos, int) else (eos or []))
        self.draft_max_batch = self._gate(vllm_config)

    def _gate(self, vllm_config: Any) -> int | None:
        """The ``draft_max_batch`` in force (``None``: drafts at every batch size), logged once."""
        from .config import draft_max_batch
        from .observe import log, trace

        device = getattr(getattr(vllm_config, "device_config", None), "device_type", None)
        m, source = draft_max_batch(self._cfg, self.num_speculative_tokens, cpu=str(device) == "cpu")
        what = "every batch size" if m is None else f"steps of at most {m} requests (none after larger ones)"
        why = "set by additional_config['specot']['draft_max_batch']" if source == "set" else (
            f"default on {device or 'this device'} for num_speculative_tokens = {self.num_speculative_tokens}")
        log.info("specot %s drafts after %s: %s", type(self).__name__, what, why)
        trace("draft_max_batch", proposer=type(self).__name__, value=m, source=source)
        return m

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No model to load (vLLM calls this on every drafter)."""

    @staticmethod
    def _parse_config(vllm_config: Any) -> Any:
        """The deployment's settings (chains: ``None`` when there are none)."""
        from .config import parse_config

        return parse_config(getattr(vllm_config, "additional_config", None))

    def _drafter(self, row: int, context: list[int]):
        from specot.drafting import SuffixDrafter, TreeSpec

        d = self._rows.get(row)
        n = len(d.index) if d is not None else 0
        same = d is not None and n <= len(context) and d.index.tokens[max(0, n - 8):] == context[max(0, n - 8):n]
        if not same:  # a new request in this row
            d = self._new_drafter(SuffixDrafter, TreeSpec)
            d.start(context, self._spec, stop_tokens=self._stop)
            self._rows[row] = d
            self._last.pop(row, None)
        return d

    def _new_drafter(self, suffix_drafter: Any, tree_spec: Any) -> Any:
        """A fresh drafter for a new request (chains: the best chain, ``q = None``)."""
        self._spec = tree_spec.sequences(1, self.depth)
        return suffix_drafter(None, **self._kwargs)

    def _learn(self, d: Any, row: int, sampled: Sequence[int], context: list[int]) -> None:
        """Tell the drafter which of its last drafts were accepted: the committed tokens walked
        down its tree (the accepted drafts, then the correction or bonus token)."""
        from specot.drafting import DraftOutcome

        last = self._last.pop(row, None)
        if last is None or last[0] + len(sampled) != len(context):
            return
        tree, node, path = last[1], 0, []
        for t in sampled[:-1]:
            node = tree.child_of.get(node, {}).get(int(t), -1)
            if node < 0:
                break
            path.append(node)
        d.update(DraftOutcome(tree=tree, path=tuple(path), tokens=tuple(int(t) for t in sampled), context_len=last[0]))

    def _emit(self, row: int, tree: Any, room: int) -> list[int]:
        """The draft tokens handed to vLLM for ``tree`` (chains: its best chain, at most γ)."""
        drafts = tree.path_tokens(len(tree.tokens) - 1) if tree.size else []
        return drafts[: self.depth]

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings: Any = None) -> list[list[int]]:
        """Draft token ids per request (``[]``: no draft, a plain target step); none at all after a
        step of more than :attr:`draft_max_batch` requests (module docstring)."""
        from specot.sampling import SamplingConfig

        out: list[list[int]] = []
        if self.draft_max_batch is not None and len(sampled_token_ids) > self.draft_max_batch:
            self._last.clear()  # nothing proposed: nothing to learn from the next step
            return [[] for _ in sampled_token_ids]
        greedy = SamplingConfig(temperature=0.0)
        for i, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            if not sampled or n >= self.max_model_len:
                out.append([])
                continue
            context = token_ids_cpu[i, :n].tolist()
            d = self._drafter(i, context)
            self._learn(d, i, sampled, context)
            room = self.max_model_len - n - 1
            depth = min(self.depth, room)
            tree = d.propose(context, depth, greedy) if depth > 0 else None
            if tree is not None:
                self._last[i] = (n, tree)
            out.append(self._emit(i, tree, room) if tree is not None else [])
        for row in [r for r in self._rows if r >= len(sampled_token_ids)]:
            self._rows.pop(row, None)
            self._last.pop(row, None)
        return out


def redraw_tree(tree: Any, law: Any, generator: Any) -> Any:
    """The suffix drafter's deterministic tree with every expanded node's children REDRAWN from
    its q under ``law`` (:func:`specot.laws.sample_drafts`, as many draws as the node had
    children), parents first, each node's children contiguous; a drawn child is expanded again
    from its own q. q is supported on the node's children, so the result is a subtree; its
    drafts follow ``law`` exactly, as the multi-draft verifiers require (``kseq``, ``rrs``: i.i.d.;
    ``rrs_wor``: without replacement).

    Args:
        tree: a :class:`specot.drafting.DraftTree` with q rows (``SuffixDrafter(vocab_size=V)``), or
            a deterministic chain (q = None: one-hot rows), returned as it is.
        law: a :class:`specot.laws.DraftLaw`.
        generator: the draws' randomness (a CPU ``torch.Generator``) or ``None``.
    """
    from specot.drafting import DraftTree
    from specot.laws import sample_drafts

    if tree.q is None:  # a chain whose q rows are one-hot (left implicit): every redraw is the chain itself
        return tree
    out = DraftTree.root(tree.tokens[0])
    out.law = law
    rows: list[int] = []
    frontier = [(0, 0)]  # (node of out, node of tree)
    while frontier:
        nxt = []
        for new, old in frontier:
            if old not in tree.drafts:
                continue
            q = tree.q[tree.q_row[old]].unsqueeze(0)
            draws = sample_drafts(q, len(tree.drafts[old]), law, generator)[0].tolist()
            before = len(out.tokens)
            kids = out.add_children(new, draws)
            out.q_row[new] = len(rows)
            rows.append(tree.q_row[old])
            for tok, kid in zip(draws, kids):
                if kid >= before and kid not in {k for k, _ in nxt}:
                    nxt.append((kid, tree.child_of[old][tok]))
        frontier = nxt
    out.q = tree.q[rows] if rows else None
    out.deterministic = False
    return out


class SuffixTreeProposer(SuffixProposer):
    """vLLM custom-class proposer of draft TREES over :class:`specot.drafting.SuffixDrafter`
    (suffix decoding's trees, Oliaro et al. 2024): ``speculative_config={"method": "custom_class",
    "model": "specot_vllm.SuffixTreeProposer", "num_speculative_tokens": N}`` drafts a tree of at
    most N nodes per request, handed to vLLM as its N node tokens, parents first; the worker's tree
    runner (:mod:`specot_vllm.tree`) reads the trees back (:attr:`last_trees`, by batch row) and
    verifies them with the deployment's multi-draft verifier.

    The draft law follows the verifier: ``greedy`` (default) takes the drafter's own trees (its
    distinct children, the GREEDY law, deterministic); a verifier of i.i.d. or without-replacement
    drafts gets the children redrawn from the drafter's q (:func:`redraw_tree`).

    Batch-aware budget: the drafter keeps the N nodes maximising ``(1 + Σ ŝ_i) / (1 + f + c·N)``
    with c the cost of one scored token relative to a plain step of its request. In a batch of B
    decoding requests a step costs about ``t0 + c_tok·(B + Σ N_b)`` (the weights are read once, the
    tokens are computed each), so relative to a request's share of a plain step one more token
    costs ``c·B / (1 + c·B)`` (c = ``c_tok / t0``, the drafter's ``cost_per_token``, measured at
    batch 1): about 0.03 at batch 1, 0.2 at batch 8, 0.5 at batch 32. Each step sets that on the
    drafters (with ``adaptive``), so trees shrink to their likeliest nodes as the batch grows. The
    budget depends only on the context and past outcomes: the output law is unchanged.

    Args:
        vllm_config: vLLM's ``VllmConfig``; ``additional_config["specot"]``: ``verifier``,
            ``suffix`` (drafter keyword arguments; ``max_nodes`` defaults to N and may not exceed
            it), ``depth`` (deepest node, default N).

    Raises:
        ValueError: bad settings (one line naming the value).
    """

    specot_tree = True

    def __init__(self, vllm_config: Any) -> None:
        import torch

        from specot.drafting.tree import default_law_for

        super().__init__(vllm_config)
        cfg = self._cfg
        self.max_nodes = self.num_speculative_tokens  # trees: num_speculative_tokens is the node budget N
        self._kwargs.setdefault("max_nodes", self.max_nodes)
        if self._kwargs["max_nodes"] > self.max_nodes:
            raise ValueError(f"additional_config['specot']['suffix']['max_nodes'] = {self._kwargs['max_nodes']} "
                             f"exceeds num_speculative_tokens = {self.max_nodes}; raise num_speculative_tokens")
        self.depth = cfg.depth or self.max_nodes  # the deepest node
        self.law = default_law_for(cfg.build_verifier())
        self.vocab = int(vllm_config.model_config.get_vocab_size())
        seed = getattr(vllm_config.model_config, "seed", None)
        self._gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
        self.last_trees: dict[int, Any] = {}

    @staticmethod
    def _parse_config(vllm_config: Any) -> Any:
        from .config import tree_config

        return tree_config(getattr(vllm_config, "additional_config", None),
                           vocab=int(vllm_config.model_config.get_vocab_size()))

    def _new_drafter(self, suffix_drafter: Any, tree_spec: Any) -> Any:
        from specot.drafting import TreeBudget

        d = suffix_drafter(self.vocab, **self._kwargs)
        self._spec = TreeBudget(d.children, self.depth)  # the drafter builds its own GREEDY trees within it
        return d

    def _drafter(self, row: int, context: list[int]):
        d = super()._drafter(row, context)
        c = self._cost_per_token
        d.cost_per_token = c * self._batch / (1.0 + c * self._batch)  # the batch-aware cost (class docstring)
        return d

    def _emit(self, row: int, tree: Any, room: int) -> list[int]:
        from specot.laws import DraftLaw

        from .tree import cut_tree

        tree = cut_tree(tree, min(room, self.max_nodes))  # deterministic: the cut is a function of the context
        if tree.size and self.law != DraftLaw.GREEDY:
            tree = redraw_tree(tree, self.law, self._gen)
        if tree.size:
            self.last_trees[row] = tree
        else:
            self.last_trees.pop(row, None)
        return tree.tokens[1:]

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings: Any = None) -> list[list[int]]:
        """Node tokens per request, parents first (``[]``: no draft); the trees in :attr:`last_trees`."""
        self.last_trees = {}
        self._batch = max(1, sum(1 for s in sampled_token_ids if s))
        return super().propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings)
