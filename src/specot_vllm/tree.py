"""Draft trees in vLLM 0.32 on the CPU: one target pass per step scores every node of every
request's tree, and specot's multi-draft verifiers decide what each request keeps.

vLLM's scheduler, paged KV cache and batching stay as they are; a request's tree travels through
them as a flattened chain of its N nodes (parents first), so the scheduler reserves ``1 + N``
slots and accounts ``1 + accepted`` tokens as for a chain. What changes, in the worker process
(patches of ``GPUModelRunner`` methods that ``CPUModelRunner`` inherits, active only in a tree
deployment, :func:`tree_mode`):

1. **Proposal** (``propose_draft_token_ids``): the tree proposer
   (:class:`specot_vllm.proposers.SuffixTreeProposer`) returns each row's node tokens and keeps its
   tree; the runner files the trees by request id. Requests whose sampling needs vLLM's own
   per-token processing (penalties, bad words, allowed tokens, logit bias, min-p, pending
   min-tokens, logprobs, structured output) get no draft: they decode one token per step through
   vLLM's own sampler, exactly as without speculation.
2. **Inputs** (``_prepare_inputs``): node k of a request whose root sits at position ``p`` gets
   position ``p + depth(k)`` (vLLM computed ``p + k``); its KV slot stays the flat one,
   ``slot(p + k)``. The trees' parents go to the attention backend
   (:func:`specot_vllm.tree_attn.set_step_trees`), whose mask lets node k see the context, the
   root and its ancestors only. The logits rows of a request are then exactly specot's
   ``[1 + N, V]``: row k is the target's distribution after the root-to-k path.
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

import functools
import importlib
from typing import Any, Sequence

import torch

__all__ = ["tree_mode", "cut_tree", "tree_eligible", "TreeRunner", "apply_tree_patches", "BREAK"]

#: Test hook: ``{"kv_move": False}`` skips the KV compaction (a deliberately broken engine).
BREAK: dict[str, bool] = {"kv_move": True}


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


def tree_eligible(params: Any, num_output: int) -> bool:
    """Whether a request's sampling is only temperature / top-k / top-p (and seed, stops, lengths),
    so that a tree's node rows can be verified as the target's law: no penalties, bad words,
    allowed tokens, logit bias, min-p, pending min-tokens, logprobs or structured output."""
    if params is None:
        return False
    g = lambda k, d=None: getattr(params, k, d)  # noqa: E731
    return (g("presence_penalty", 0.0) == 0.0 and g("frequency_penalty", 0.0) == 0.0
            and g("repetition_penalty", 1.0) == 1.0 and not g("min_p", 0.0) and g("logprobs") is None
            and not g("logit_bias") and not g("allowed_token_ids") and not g("bad_words")
            and not g("_bad_words_token_ids") and g("structured_outputs") is None
            and g("logprob_token_ids") is None and g("thinking_token_budget") is None
            and (g("min_tokens", 0) or 0) <= num_output)


def cut_tree(tree: Any, n: int):
    """The part of ``tree`` (a :class:`specot.drafting.DraftTree`, nodes numbered parents first,
    each node's children contiguous) that can be verified when only its first ``n`` nodes were
    scored: a node keeps its children iff it is kept and ALL its draws fit, i.e. its children's
    block ends by node ``n`` counting every draw (``len(tree.drafts[node])``, repeats included).

    Whether a node keeps its children then depends only on the draws of nodes numbered before it,
    never on its own or its descendants' (a distinct-children count would), so each kept node's
    drafts still follow its draft law and the verification stays exact.
    """
    from specot.drafting import DraftTree

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


def _chain(root: int, tokens: Sequence[int]):
    from specot.drafting import DraftTree

    return DraftTree.chain(root, [int(t) for t in tokens])


class TreeRunner:
    """The tree state of one vLLM model runner (module docstring).

    Attributes:
        verifier: the deployment's :class:`specot.verifiers` verifier.
        trees: request id → the tree its proposer drafted for the next step.
        step: this step's trees by input-batch row (as verified: after :func:`cut_tree`).
        roots: this step's query index of each tree row's root.
        paths: input-batch row → accepted path of the last verification (for the proposer).
    """

    def __init__(self, runner: Any, verifier: Any) -> None:
        self.runner, self.verifier = runner, verifier
        self.trees: dict[str, Any] = {}
        self.step: dict[int, Any] = {}
        self.roots: dict[int, int] = {}
        self.paths: dict[int, list[int]] = {}

    # -- 1. proposal -------------------------------------------------------------------------
    def filed(self, draft_token_ids: list[list[int]]) -> list[list[int]]:
        """File the proposer's trees by request id; drop the drafts of requests that need vLLM's
        own sampling (:func:`tree_eligible`)."""
        r = self.runner
        made = getattr(r.drafter, "last_trees", {})
        self.trees = {}
        out = []
        for row, drafts in enumerate(draft_token_ids):
            req_id = r.input_batch.req_ids[row] if row < len(r.input_batch.req_ids) else None
            state = r.requests.get(req_id) if req_id is not None else None
            if not drafts or state is None or not tree_eligible(state.sampling_params, len(state.output_token_ids)):
                out.append([])
                continue
            tree = made.get(row)
            if tree is not None and tree.tokens[1:] == list(drafts):
                self.trees[req_id] = tree
            out.append(list(drafts))
        return out

    # -- 2. inputs ---------------------------------------------------------------------------
    def prepare(self, scheduler_output: Any, spec_meta: Any) -> None:
        """Tree positions and the backend's step trees (module docstring, 2.)."""
        from .tree_attn import set_step_trees

        r = self.runner
        self.step, self.roots = {}, {}
        rows: dict[int, list[int]] = {}
        if spec_meta is not None:
            qsl = r.query_start_loc.cpu
            for b, n in enumerate(spec_meta.num_draft_tokens):
                if not n:
                    continue
                req_id = r.input_batch.req_ids[b]
                drafts = list(scheduler_output.scheduled_spec_decode_tokens.get(req_id, ()))
                q_end = int(qsl[b + 1])
                root_q = q_end - 1 - n
                tree = self.trees.get(req_id)
                if tree is None or tree.tokens[1:n + 1] != drafts[:n]:
                    tree = _chain(int(r.input_ids.cpu[root_q]), drafts[:n])  # exact for any tokens
                parents = tree.parents[: n + 1]
                depths = torch.tensor(tree.depths[1:n + 1], dtype=r.positions.dtype)
                r.positions[root_q + 1:q_end] = r.positions[root_q] + depths
                rows[b] = parents
                self.step[b] = cut_tree(tree, n)
                self.roots[b] = root_q
        set_step_trees(rows)

    # -- 3. verification ---------------------------------------------------------------------
    def sample(self, logits: torch.Tensor, spec_meta: Any):
        """Verify every request's tree (module docstring, 3. and 4.); vLLM's ``SamplerOutput``."""
        from specot.drafting import DraftTree
        from specot.engine.loop import verify_draft_tree
        from specot.sampling import SamplingConfig
        from vllm.v1.outputs import SamplerOutput

        from .patches import _trace
        from .tree_attn import move_slots, set_step_trees, step_slots

        r = self.runner
        sm = r.input_batch.sampling_metadata
        counts = [int(n) for n in spec_meta.num_draft_tokens]
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
        slots = step_slots()
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
        if src and BREAK["kv_move"]:
            move_slots(r.kv_caches, torch.tensor(src), torch.tensor(dst))
            _trace("kv_move")
        if self.step:
            _trace("tree_verify", verifier=type(self.verifier).__name__,
                   redrawn=any(not t.deterministic for t in self.step.values()))
        set_step_trees(None)
        return SamplerOutput(sampled_token_ids=out.to(torch.int32), logprobs_tensors=_spread(special_lp, width))

    def _transformed(self, logits: torch.Tensor, counts: list[int], sm: Any) -> tuple[torch.Tensor, list[bool]]:
        """vLLM's sampling transform of every node row (temperature, top-k, top-p, as its
        rejection sampler applies them), float32, and which requests are greedy."""
        from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p

        from .sampler import GREEDY_EPS

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
            x = apply_top_k_top_p(x, k, p)
        return x, greedy

    def _vllm_sampled(self, logits: torch.Tensor, starts: list[int], counts: list[int], sm: Any):
        """Tokens of the requests that need vLLM's own sampling (no draft: one row each), drawn by
        vLLM's ``Sampler`` over every request's first row, and its logprobs tensors (``[B, k + 1]``,
        the only requests that ask for logprobs are among these); ``({}, None)`` when there is none."""
        r = self.runner
        ids = r.input_batch.req_ids
        special = [b for b in range(len(counts)) if counts[b] == 0 and b < len(ids) and ids[b] in r.requests
                   and not tree_eligible(r.requests[ids[b]].sampling_params, len(r.requests[ids[b]].output_token_ids))]
        if not special:
            return {}, None
        first = logits[torch.tensor(starts)]
        res = r.rejection_sampler.sampler(logits=first, sampling_metadata=sm)
        sampled = res.sampled_token_ids.reshape(-1)
        return {b: int(sampled[b]) for b in special}, res.logprobs_tensors


def _spread(lp: Any, width: int) -> Any:
    """vLLM's logprobs tensors of one token per request ``[B, k + 1]`` laid out as a speculative
    step's ``[B · width, k + 1]`` (request b's token at row ``b · width``; other rows are never read:
    the requests that asked for logprobs emitted one token)."""
    if lp is None:
        return None
    from vllm.v1.outputs import LogprobsTensors

    B = lp.logprobs.shape[0]
    idx = torch.arange(B) * width

    def spread(t: torch.Tensor) -> torch.Tensor:
        out = t.new_zeros((B * width, *t.shape[1:]))
        out[idx] = t
        return out

    return LogprobsTensors(spread(lp.logprob_token_ids), spread(lp.logprobs), spread(lp.selected_token_ranks))


# -- the patches ------------------------------------------------------------------------------
_APPLIED: set[str] = set()


def apply_tree_patches() -> None:
    """Patch vLLM's model runner once per process (module docstring); a runner becomes a tree
    runner only in a tree deployment."""
    if "tree" in _APPLIED:
        return
    _APPLIED.add("tree")
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    from .patches import log

    orig_init = CPUModelRunner.__init__

    @functools.wraps(orig_init)
    def init(self, vllm_config, device):
        tree = tree_mode(vllm_config)
        if tree:
            from vllm.v1.attention.backends.registry import AttentionBackendEnum, register_backend

            from .tree_attn import BACKEND_PATH

            if getattr(vllm_config.model_config, "logits_processors", None):
                raise ValueError("specot trees cannot run with custom logits processors "
                                 f"({vllm_config.model_config.logits_processors}); remove them or use a chain proposer")
            if "SPECOT_TREE_ATTN" not in AttentionBackendEnum.__members__:
                register_backend("SPECOT_TREE_ATTN", BACKEND_PATH)  # its name, as vLLM looks it up
            register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_PATH)  # what the CPU platform selects
        orig_init(self, vllm_config, device)
        if tree:
            from .config import tree_config

            cfg = tree_config(getattr(vllm_config, "additional_config", None))
            self._specot_tree = TreeRunner(self, cfg.build_verifier())
            log.info("specot draft trees in this worker: verifier %s, tree attention backend", cfg.label())

    CPUModelRunner.__init__ = init

    orig_prepare = GPUModelRunner._prepare_inputs

    @functools.wraps(orig_prepare)
    def prepare_inputs(self, scheduler_output, num_scheduled_tokens):
        out = orig_prepare(self, scheduler_output, num_scheduled_tokens)
        st = getattr(self, "_specot_tree", None)
        if st is not None:
            st.prepare(scheduler_output, out[1])
        return out

    GPUModelRunner._prepare_inputs = prepare_inputs

    orig_sample = GPUModelRunner._sample

    @functools.wraps(orig_sample)
    def sample(self, logits, spec_decode_metadata):
        st = getattr(self, "_specot_tree", None)
        if st is None or spec_decode_metadata is None:
            return orig_sample(self, logits, spec_decode_metadata)
        return st.sample(logits, spec_decode_metadata)

    GPUModelRunner._sample = sample

    orig_propose = GPUModelRunner.propose_draft_token_ids

    @functools.wraps(orig_propose)
    def propose(self, *args, **kwargs):
        st = getattr(self, "_specot_tree", None)
        if st is not None:
            self.drafter.last_paths = st.paths
        out = orig_propose(self, *args, **kwargs)
        return st.filed(out) if st is not None and isinstance(out, list) else out

    GPUModelRunner.propose_draft_token_ids = propose
