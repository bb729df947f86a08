"""The tree state of one vLLM model runner: proposal filing, tree positions, verification by
specot's multi-draft verifiers and the KV compaction (steps 1-4 of :mod:`specot_vllm.tree`).

:class:`TreeRunner` reads vLLM's model runner only through the view the adapter gives it
(:class:`specot_vllm.adapter.RunnerView`), and is called from the model-runner methods the adapter
replaces.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from specot.drafting import DraftTree
from specot.engine.loop import verify_draft_tree
from specot.sampling import SamplingConfig

from specot.geometry import TreeGeometry

from .observe import trace
from .sampler import GREEDY_EPS
from .tree import cut_tree
from .tree_attn import TreeStep, move_slots

__all__ = ["TreeRunner"]


class TreeRunner:
    """The tree state of one vLLM model runner (module docstring).

    Args:
        view: the adapter's view of the model runner (:class:`specot_vllm.adapter.RunnerView`):
            the batch's request ids, requests, query layout, input ids, positions, KV caches,
            drafter, sampling metadata and vLLM's own sampler.
        verifier: the deployment's :class:`specot.verifiers` verifier.

    Attributes:
        trees: request id → the tree its proposer drafted for the next step.
        step: this step's trees by input-batch row (as verified: after :func:`cut_tree`).
        roots: this step's query index of each tree row's root.
        paths: input-batch row → accepted path of the last verification (for the proposer).
        attention: the trees and slots of the coming pass, shared with the attention backend.
    """

    def __init__(self, view: Any, verifier: Any) -> None:
        self.view, self.verifier = view, verifier
        self.trees: dict[str, Any] = {}
        self.step: dict[int, Any] = {}
        self.roots: dict[int, int] = {}
        self.paths: dict[int, list[int]] = {}
        self.attention = TreeStep()

    # -- 1. proposal -------------------------------------------------------------------------
    def filed(self, draft_token_ids: list[list[int]]) -> list[list[int]]:
        """File the proposer's trees by request id; drop the drafts of requests that need vLLM's
        own sampling (:func:`specot_vllm.adapter.tree_eligible`)."""
        v = self.view
        made = getattr(v.drafter, "last_trees", {})
        ids = v.req_ids()
        self.trees = {}
        out = []
        for row, drafts in enumerate(draft_token_ids):
            if not drafts or row >= len(ids) or not v.tree_eligible(ids[row]):
                out.append([])
                continue
            tree = made.get(row)
            if tree is not None and tree.tokens[1:] == list(drafts):
                self.trees[ids[row]] = tree
            out.append(list(drafts))
        return out

    # -- 2. inputs ---------------------------------------------------------------------------
    def prepare(self, scheduled_drafts: Any, num_draft_tokens: Sequence[int] | None) -> None:
        """Tree positions and the backend's step trees (module docstring, 2.).

        Args:
            scheduled_drafts: request id → the draft tokens the scheduler scheduled for it.
            num_draft_tokens: ``[B]`` scheduled drafts per input-batch row (``None``: none).
        """
        v = self.view
        self.step, self.roots = {}, {}
        rows: dict[int, TreeGeometry] = {}
        if num_draft_tokens is not None:
            qsl = v.query_start_loc()
            positions = v.positions()
            ids = v.req_ids()
            for b, n in enumerate(num_draft_tokens):
                if not n:
                    continue
                drafts = list(scheduled_drafts.get(ids[b], ()))
                q_end = int(qsl[b + 1])
                root_q = q_end - 1 - n
                tree = self.trees.get(ids[b])
                if tree is None or tree.tokens[1:n + 1] != drafts[:n]:
                    tree = DraftTree.chain(v.input_id(root_q), [int(t) for t in drafts[:n]])  # exact for any tokens
                # the scheduled nodes: the whole tree, or its first n (parents first: a tree too)
                shape = tree.geometry if n == tree.size else TreeGeometry.of(tree.geometry.parents[:n])
                positions[root_q + 1:q_end] = positions[root_q] + torch.tensor(shape.depths, dtype=positions.dtype)
                rows[b] = shape
                self.step[b] = cut_tree(tree, n)
                self.roots[b] = root_q
        v.bind_attention(self.attention)
        self.attention.set_trees(rows)

    # -- 3. verification ---------------------------------------------------------------------
    def sample(self, logits: torch.Tensor, num_draft_tokens: Sequence[int]) -> tuple[torch.Tensor, Any]:
        """Verify every request's tree (module docstring, 3. and 4.).

        Args:
            logits: ``[Σ (1 + n_b), V]`` the target's logits at every root and node, request after request.
            num_draft_tokens: ``[B]`` scored nodes per request.

        Returns:
            (int32 ``[B, max n_b + 1]`` emitted tokens, ``-1`` after them; vLLM's logprobs tensors
            of the requests vLLM's own sampler served, or ``None``).
        """
        sm = self.view.sampling()
        counts = [int(n) for n in num_draft_tokens]
        B = len(counts)
        starts = [0] * B
        for b in range(1, B):
            starts[b] = starts[b - 1] + counts[b - 1] + 1
        x, greedy = self._transformed(logits, counts, sm)
        special, special_lp = self._vllm_sampled(logits, starts, counts, sm)
        width = max(counts) + 1
        out = torch.full((B, width), -1, dtype=torch.int64)
        src: list[int] = []
        dst: list[int] = []
        slots = self.attention.slots
        self.paths = {}
        t0 = SamplingConfig(temperature=0.0)
        t1 = SamplingConfig(temperature=1.0)
        for b in range(B):
            if b in special:
                out[b, 0] = special[b]
                continue
            tree = self.step.get(b) or DraftTree.root(0)
            rows = x[starts[b]:starts[b] + counts[b] + 1]
            res = verify_draft_tree(tree, rows, t0 if greedy[b] else t1, self.verifier, sm.generators.get(b))
            out[b, :len(res.emitted)] = torch.tensor(res.emitted)
            self.paths[b] = list(res.path)
            if res.path and slots is not None:
                root_q = self.roots[b]
                for j, node in enumerate(res.path, start=1):
                    if node != j:
                        src.append(int(slots[root_q + node]))
                        dst.append(int(slots[root_q + j]))
        if src:
            move_slots(self.view.kv_caches(), torch.tensor(src), torch.tensor(dst))
            trace("kv_move")
        if self.step:
            trace("tree_verify", verifier=type(self.verifier).__name__,
                  redrawn=any(not t.deterministic for t in self.step.values()))
        self.attention.set_trees(None)
        return out.to(torch.int32), self.view.spread_logprobs(special_lp, width)

    def _transformed(self, logits: torch.Tensor, counts: list[int], sm: Any) -> tuple[torch.Tensor, list[bool]]:
        """vLLM's sampling transform of every node row (temperature, top-k, top-p, as its
        rejection sampler applies them), float32, and which requests are greedy."""
        B = len(counts)
        if sm.all_greedy or sm.temperature is None:
            return logits.to(torch.float32), [True] * B
        temp = sm.temperature[:B].to(torch.float32)
        greedy = (temp < GREEDY_EPS).tolist()
        reps = torch.tensor([c + 1 for c in counts])
        t_rows = torch.repeat_interleave(torch.where(temp < GREEDY_EPS, torch.ones_like(temp), temp), reps)
        x = logits.to(torch.float32) / t_rows.unsqueeze(-1)
        k = None if sm.top_k is None else torch.repeat_interleave(sm.top_k[:B], reps)
        p = None if sm.top_p is None else torch.repeat_interleave(sm.top_p[:B], reps)
        if k is not None or p is not None:
            x = self.view.top_k_top_p(x, k, p)
        return x, greedy

    def _vllm_sampled(self, logits: torch.Tensor, starts: list[int], counts: list[int], sm: Any):
        """Tokens of the requests that need vLLM's own sampling (no draft: one row each), drawn by
        vLLM's ``Sampler`` over every request's first row, and its logprobs tensors (``[B, k + 1]``,
        the only requests that ask for logprobs are among these); ``({}, None)`` when there is none."""
        v = self.view
        ids = v.req_ids()
        special = []
        for b in range(len(counts)):
            if counts[b] == 0 and b < len(ids) and v.tree_eligible(ids[b]) is False:
                special.append(b)
        if not special:
            return {}, None
        sampled, logprobs = v.vllm_sample(logits[torch.tensor(starts)], sm)
        return {b: int(sampled[b]) for b in special}, logprobs
