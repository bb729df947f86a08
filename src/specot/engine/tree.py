"""Multi-draft decoding over draft trees scored in ONE target pass (SpecTr Alg. 3; Hu et al. App. D).

Each iteration:

1. **Draft** a tree after the committed context (:func:`specot.drafting.tree.build_draft_tree`):
   one draft forward per depth for all frontier nodes.
2. **Score** every node with the target in one forward pass: the uncached context suffix runs
   causally, the nodes under a 4D tree mask (each sees the context and its ancestors) at position
   ``len(context) − 1 + depth`` (:meth:`specot.models.CausalLM.tree_logits_after`).
3. **Walk** from the root: at each node apply the token-level verifier to its children's tokens
   (with multiplicity; their number n varies by node, so ρ* and friends are recomputed by the
   verifier for that n), descend into the accepted child, stop with the correction token, or emit
   a bonus token from the target at a leaf. This is SpecTr's DraftSelection (Algorithm 3) when the
   tree holds K i.i.d. sequences, and Hu et al.'s multi-step walk for any other topology.
4. **Compact** both KV caches in place to the committed context + the accepted path
   (:meth:`specot.models.CausalLM.keep_tree_path`): no re-run of the prompt.

Exactness: at every node the verifier sees drafts drawn from q at that node under the tree's law
(conditionally on the path, fresh draws), so each emitted token follows p at its prefix; chaining
gives the target's joint law (SpecTr Theorem 2). When the tree is a chain (K = 1) the positions are
verified in one batched call, which reproduces :func:`speculative_generate` draw for draw.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..drafting.model import ModelDrafter, check_vocab_compatible
from ..drafting.tree import DraftTree, TreeSpec, build_draft_tree
from ..models.hf import CausalLM
from ..sampling import sample_categorical, standardize
from ..verifiers.base import Verifier, get_verifier
from .speculative import _finish_tokens, check_prompt_fits, make_generator
from .types import GenerationConfig, GenerationResult, GenerationStats

__all__ = ["TreeGenerationStats", "TreeStep", "tree_generate", "verify_tree"]

TokenCallback = Callable[[list[int]], None]


@dataclass
class TreeStep:
    """Outcome of verifying one tree.

    Attributes:
        emitted: tokens emitted (accepted drafts, then the correction or bonus token).
        path: accepted node indices, root excluded.
        accepted_at_depth: per visited depth (0-based: the root's children are depth 0), whether
            a draft was accepted there.
    """

    emitted: list[int]
    path: list[int]
    accepted_at_depth: list[bool]


@dataclass
class TreeGenerationStats(GenerationStats):
    """:class:`GenerationStats` plus per-step tree statistics.

    Attributes:
        tree_sizes: draft nodes per iteration.
        accepted_lengths: accepted draft tokens per iteration.
        (``accepted_at`` / ``tried_at``, inherited, count acceptance per depth.)
    """

    tree_sizes: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)

    @property
    def mean_tree_size(self) -> float:
        return sum(self.tree_sizes) / len(self.tree_sizes) if self.tree_sizes else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return sum(self.accepted_lengths) / len(self.accepted_lengths) if self.accepted_lengths else 0.0

    @property
    def overhead_share(self) -> float:
        """Share of wall time outside the two models' forward passes."""
        return self.overhead_time_s / self.total_time_s if self.total_time_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d.update(mean_tree_size=self.mean_tree_size, mean_accepted_length=self.mean_accepted_length,
                 overhead_share=self.overhead_share)
        return d


def verify_tree(tree: DraftTree, logits: torch.Tensor, sampling: Any, verifier: Verifier,
                generator: torch.Generator | None) -> TreeStep:
    """The verification walk over one scored tree.

    Args:
        tree: the drafted tree (nodes 0..N, q at expanded nodes).
        logits: target logits ``[1 + N, V]`` (row i: after the root-to-node-i path).
        sampling: the standardized-sampling transform (applied to target rows on demand).
        verifier: token-level verifier valid for the tree's law at every node.
        generator: randomness.
    """
    emitted: list[int] = []
    path: list[int] = []
    acc: list[bool] = []
    if tree.drafts and tree.is_chain():
        # a chain: verify all positions at once (as Leviathan Alg. 1 / speculative_generate)
        chain = [0]
        while chain[-1] in tree.drafts:
            chain.append(tree.child_of[chain[-1]][tree.drafts[chain[-1]][0]])
        k = len(chain) - 1
        p = standardize(logits[chain], sampling)  # [k + 1, V]
        assert tree.q is not None
        q = tree.q[[tree.q_row[n] for n in chain[:-1]]]  # [k, V]
        drafts = torch.tensor([tree.tokens[n] for n in chain[1:]], dtype=torch.int64).unsqueeze(-1)  # [k, 1]
        res = verifier.verify(p[:k], q.to(p.dtype), drafts, generator)
        accepted = res.accepted.tolist()
        n_acc = accepted.index(False) if False in accepted else k
        acc = accepted[: min(n_acc + 1, k)]
        path = chain[1 : n_acc + 1]
        emitted = [tree.tokens[n] for n in path]
        if n_acc < k:
            emitted.append(int(res.tokens[n_acc]))
        else:
            emitted.append(int(sample_categorical(p[k : k + 1], generator)[0]))
        return TreeStep(emitted, path, acc)
    node = 0
    while True:
        p = standardize(logits[node : node + 1], sampling)  # [1, V]
        drafts = tree.drafts.get(node)
        if not drafts:  # a leaf: bonus token from the target
            emitted.append(int(sample_categorical(p, generator)[0]))
            break
        assert tree.q is not None
        q = tree.q[tree.q_row[node]].unsqueeze(0).to(p.dtype)  # [1, V]
        res = verifier.verify(p, q, torch.tensor([drafts], dtype=torch.int64), generator)  # drafts [1, n]
        tok = int(res.tokens[0])
        ok = int(res.accepted_index[0]) >= 0
        acc.append(ok)
        emitted.append(tok)
        if not ok:
            break
        node = tree.child_of[node][tok]
        path.append(node)
    return TreeStep(emitted, path, acc)


def tree_generate(
    target: CausalLM,
    draft: CausalLM | ModelDrafter,
    prompt_ids: Sequence[int],
    spec: TreeSpec,
    config: GenerationConfig | None = None,
    *,
    verifier: Verifier | str | None = None,
    generator: torch.Generator | None = None,
    on_tokens: TokenCallback | None = None,
) -> GenerationResult:
    """Multi-draft speculative decoding over draft trees (one target pass per iteration).

    Args:
        target: the target model.
        draft: the draft model (a :class:`CausalLM` — not the target's own wrapper — or a
            :class:`ModelDrafter`); it must share the target's vocabulary.
        prompt_ids: prompt token ids.
        spec: the tree construction (:class:`TreeSpec`; :func:`parse_tree_spec` for the CLI forms).
            Its depth is the draft length L (cut to ``remaining − 1`` near ``max_new_tokens``).
        config: ``max_new_tokens``, ``sampling``, ``seed``, ``stop_at_eos`` (``gamma`` is unused).
        verifier: a verifier or registry name (``"otm"`` gets the tree's law) valid for ``spec`` at
            every node (default:
            ``speculative`` for chains, else ``kseq`` / ``rrs_wor`` / ``greedy`` / ``spechub``
            by the tree's law).
        generator: overrides ``config.seed``.
        on_tokens: called with each batch of committed tokens.

    Returns:
        :class:`GenerationResult` with :class:`TreeGenerationStats` (``method="tree"``).

    Raises:
        ValueError: before decoding — a verifier not valid for the construction, vocabulary
            mismatch, the draft sharing the target's wrapper, or a prompt that does not fit.
    """
    cfg = config or GenerationConfig()
    dmodel = draft.model if isinstance(draft, ModelDrafter) else draft
    if not isinstance(dmodel, CausalLM):
        raise TypeError(f"tree decoding needs a draft model (CausalLM or ModelDrafter), got {type(draft).__name__}")
    if dmodel is target:
        raise ValueError("the draft wrapper must not be the target's own CausalLM (they would share a KV cache)")
    check_vocab_compatible(target, dmodel)
    if verifier is None:
        verifier = _default_verifier(spec)
    if isinstance(verifier, str):
        ver = get_verifier(verifier, law=spec.law) if verifier == "otm" else get_verifier(verifier)
    else:
        ver = verifier
    spec.check_verifier(ver)
    check_prompt_fits(target, prompt_ids, cfg.max_new_tokens)
    gen = generator if generator is not None else make_generator(cfg.seed)
    eos = target.eos_token_ids if cfg.stop_at_eos else set()

    for m in (target, dmodel):
        m.reset()
        m.reset_stats()
    stats = TreeGenerationStats()
    ctx = [int(t) for t in prompt_ids]
    out: list[int] = []
    t_start = time.perf_counter()
    while len(out) < cfg.max_new_tokens:
        remaining = cfg.max_new_tokens - len(out)
        depth = min(spec.depth, remaining - 1)
        tree = build_draft_tree(dmodel, ctx, spec, depth, cfg.sampling, gen, stop_tokens=frozenset(eos))
        logits = target.tree_logits_after(ctx, tree.tokens[1:], [par - 1 for par in tree.parents[1:]])  # [1+N, V]
        step = verify_tree(tree, logits, cfg.sampling, ver, gen)
        n = len(ctx)
        target.keep_tree_path(n, [n - 1 + i for i in step.path])
        if tree.draft_calls:  # else the draft cache is still a plain prefix of ctx
            dmodel.keep_tree_path(n, [tree.draft_pos[i] for i in step.path if i in tree.draft_pos])
        stats.iterations += 1
        stats.tree_sizes.append(tree.size)
        stats.accepted_lengths.append(len(step.path))
        stats.drafted += tree.size
        stats.accepted += len(step.path)
        for i, a in enumerate(step.accepted_at_depth):
            stats.record_position(i, a)
        emitted, stop = _finish_tokens(step.emitted, remaining, eos)
        out.extend(emitted)
        ctx.extend(emitted)
        if on_tokens is not None:
            on_tokens(emitted)
        if stop:
            break
    stats.total_time_s = time.perf_counter() - t_start
    stats.new_tokens = len(out)
    stats.target_calls = target.forward_calls
    stats.target_time_s = target.forward_time_s
    stats.draft_calls = dmodel.forward_calls
    stats.draft_time_s = dmodel.forward_time_s
    text = target.decode(out) if target.tokenizer is not None else ""
    return GenerationResult(tokens=out, text=text, stats=stats, method="tree")


def _default_verifier(spec: TreeSpec) -> str:
    from ..verifiers.base import DraftLaw

    if spec.max_drafts_per_node() == 1:
        return "speculative"
    return {DraftLaw.IID: "kseq", DraftLaw.WOR: "rrs_wor", DraftLaw.GREEDY: "greedy",
            DraftLaw.SPECHUB: "spechub"}[spec.law]
