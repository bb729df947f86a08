"""The one decoding loop: propose a draft tree → score every node in ONE target pass → verify along
the tree → commit the accepted path and roll back both caches.

A chain is a tree with one child per node (Leviathan et al. 2023, Algorithm 1); autoregressive
decoding is the empty tree; n drafts, prefix trees and static topologies are SpecTr's
DraftSelection (Sun et al. 2023, Algorithm 3) and Hu et al. 2025's multi-step walk (App. D).

Each iteration:

1. **Draft**: ``drafter.propose(context, gamma, sampling, generator)`` → a
   :class:`~specot.drafting.DraftTree` (:mod:`specot.drafting.base`).
2. **Score**: the uncached context suffix and every tree node in one target forward pass — a
   chain causally (:meth:`CausalLM.logits_after`), a tree under a 4D tree mask
   (:meth:`CausalLM.tree_logits`, handed the tree itself); row i = the target's logits after the
   root-to-node-i path.
3. **Verify**: at temperature 0, with a verifier that there accepts exactly the target's argmax
   (``speculative``, ``greedy``), one argmax per node and one host read; otherwise a token-level verifier runs at every expanded node in one batched call per number
   of drafts (a chain: one call over all positions), bonus tokens are drawn at every leaf, and one
   host read walks the tree from the root: descend into the accepted child, stop at the correction
   token, or emit the leaf's bonus token. On the CPU, where host reads are free, a tree is instead
   verified node by node along that walk, so nodes off the accepted path cost nothing. A sequence-level verifier
   (:class:`~specot.verifiers.SequenceVerifier`, e.g. block verification) gets the whole tree.
4. **Commit**: the target's cache keeps the committed context + the accepted path (a tree is
   compacted in place, ``keep_tree_path`` handed the path's node indices as the verifier gave
   them; a chain is cut back lazily at the next pass); the drafter learns the
   :class:`~specot.drafting.DraftOutcome` (accepted path, committed tokens, the target's hidden
   states when it asked for them) and updates its cache and draft-length schedule.

**Exactness.** At every node the verifier sees drafts drawn from q at that node under the tree's
law, with fresh randomness; verifying all nodes at once and then following the accepted path uses,
at each visited node, randomness independent of every other node's, so each committed token follows
p at its prefix and the sequence follows the target's joint law (SpecTr Theorem 2). The contract,
everywhere in specot: lossless in distribution given the target's logits; greedy decoding equals
autoregressive decoding in float32; in bf16/fp16 they are equal up to near-ties (a multi-token pass
and a one-token pass are different kernels, whose rounding can flip an argmax between two logits
that are equal to within a few ulps).

**Devices.** Every tensor lives on the target's device; the generator must be on it too
(:func:`make_generator` puts it there). CPU and CUDA generators are different streams (MT19937 vs
Philox), so one seed gives different (equally exact) draws on the two devices.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import Tensor

from ..drafting.base import DraftOutcome, DraftSchedule, DraftTree, Drafter
from ..drafting.tree import DraftShape
from ..models.protocol import TargetModel
from .._validation import check_generator, check_prob_values, trusted_inputs
from ..sampling import sample_categorical, sample_logits_row, standardize
from ..verifiers.base import AnyVerifier, SequenceVerifier
from .types import GenerationConfig, GenerationResult, GenerationStats

__all__ = ["decode", "verify_draft_tree", "TreeStep", "make_generator", "check_prompt_fits", "generation_lock",
           "generation_locks"]

TokenCallback = Callable[[list[int]], None]


def make_generator(seed: int | None, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (a random seed when ``None``).

    CPU and CUDA generators are different streams: the same seed gives different draws.

    Raises:
        TypeError: ``seed`` is not an int or ``None``.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    g = torch.Generator(device=device)
    if seed is None:
        g.seed()
    else:
        g.manual_seed(int(seed))
    return g


_LOCK_ATTR = "generation_lock"
_ATTACH = threading.Lock()  # guards attaching a lock to an object that has none
_SHARED = threading.RLock()  # for objects that cannot carry an attribute (``__slots__``)


def generation_lock(obj: Any) -> Any:
    """The re-entrant lock (``threading.RLock``) that a generation holds on ``obj``, a target or a
    drafter, for its whole run (:func:`decode`): ``obj.generation_lock`` (a
    :class:`~specot.models.CausalLM` has one; any :class:`~specot.models.protocol.TargetModel` may),
    else one attached to ``obj`` on first use, else
    (an object without attributes) one lock shared by all such objects."""
    lock = getattr(obj, _LOCK_ATTR, None)
    if lock is not None:
        return lock
    with _ATTACH:
        lock = getattr(obj, _LOCK_ATTR, None)
        if lock is None:
            lock = threading.RLock()
            try:
                object.__setattr__(obj, _LOCK_ATTR, lock)
            except (AttributeError, TypeError):
                lock = _SHARED
    return lock


def _held_state(drafter: Any, depth: int = 0) -> Iterator[Any]:
    """The drafter and the models and drafters it holds as attributes (a model drafter's draft
    model, a hybrid's two drafters, EAGLE's target: any :class:`TargetModel`, whatever its backend),
    recursively."""
    yield drafter
    if depth > 3:
        return
    for value in getattr(drafter, "__dict__", {}).values():
        if isinstance(value, TargetModel):
            yield value
        elif isinstance(value, Drafter):
            yield from _held_state(value, depth + 1)


def _locks_for(target: Any, drafter: Any) -> list[Any]:
    """The generation locks of the target and of everything the drafter holds, each once, in the
    order of their ids (one global order: no two generations can deadlock)."""
    objs = [target] + (list(_held_state(drafter)) if drafter is not None else [])
    locks = {id(lock): lock for lock in map(generation_lock, objs)}
    return [locks[k] for k in sorted(locks)]


@contextlib.contextmanager
def generation_locks(target: Any, drafter: Any) -> Iterator[None]:
    """Hold the generation locks of ``target``, ``drafter`` and everything the drafter holds, in the
    one global order (:func:`decode` does for a whole generation; a caller that prepares a target's
    caches outside :func:`decode` does too)."""
    with contextlib.ExitStack() as held:
        for lock in _locks_for(target, drafter):
            held.enter_context(lock)
        yield


def check_prompt_fits(target: TargetModel, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    """Raise ``ValueError`` before decoding if the prompt (plus ``max_new_tokens``) exceeds the
    target's context, or if the prompt is empty or holds ids outside the vocabulary."""
    n = len(prompt_ids)
    if n == 0:
        raise ValueError("the prompt is empty: pass at least one token")
    bad = [t for t in prompt_ids if not 0 <= int(t) < target.vocab_size]
    if bad:
        raise ValueError(f"prompt has token ids outside [0, {target.vocab_size}): {bad[:5]}")
    if n > target.max_context:
        raise ValueError(f"the prompt has {n} tokens, longer than {target.name}'s context of {target.max_context}")
    if n + max_new_tokens > target.max_context:
        raise ValueError(
            f"prompt ({n} tokens) + max_new_tokens ({max_new_tokens}) = {n + max_new_tokens} exceeds "
            f"{target.name}'s context of {target.max_context}; lower max_new_tokens to at most {target.max_context - n}"
        )


@dataclass(frozen=True)
class TreeStep:
    """Outcome of verifying one tree.

    Attributes:
        emitted: committed tokens (accepted drafts, then the correction or bonus token).
        path: accepted node indices, root excluded.
        accepted_at_depth: per visited depth (0-based: the root's children are depth 0), whether a
            draft was accepted there.
    """

    emitted: list[int]
    path: list[int]
    accepted_at_depth: list[bool]


def _chain_nodes(tree: DraftTree) -> list[int]:
    chain = [0]
    while chain[-1] in tree.drafts:
        chain.append(tree.child_of[chain[-1]][tree.drafts[chain[-1]][0]])
    return chain


def _draft_q(tree: DraftTree, nodes: list[int], p: Tensor) -> Tensor:
    """q ``[len(nodes), V]`` at expanded ``nodes`` on p's device and dtype: the drafter's rows, or
    one-hot rows on the single child for a deterministic chain."""
    if tree.q is not None:
        rows = torch.tensor([tree.q_row[n] for n in nodes], dtype=torch.int64).to(tree.q.device, non_blocking=True)
        return tree.q.index_select(0, rows).to(device=p.device, dtype=p.dtype)
    if any(len(tree.drafts[n]) != 1 for n in nodes):
        raise ValueError("a deterministic draft tree (q = None) with several children per node needs a verifier "
                         "for deterministic drafts")
    tok = torch.tensor([tree.drafts[n][0] for n in nodes], dtype=torch.int64).to(p.device, non_blocking=True)
    return torch.zeros(len(nodes), p.shape[-1], dtype=p.dtype, device=p.device).scatter_(-1, tok[:, None], 1.0)


def verify_draft_tree(tree: DraftTree, logits: Tensor, sampling, verifier: AnyVerifier,
                      generator: torch.Generator | None) -> TreeStep:
    """Verify one scored draft tree (step 3 of the loop) with ONE host read of the outcome.

    Args:
        tree: the drafted tree (``N`` nodes).
        logits: target logits ``[1 + N, V]`` (row i: after the root-to-node-i path).
        sampling: the standardized-sampling transform (:class:`specot.sampling.SamplingConfig`).
        verifier: a token-level verifier valid for the tree's law at every node, or a
            :class:`~specot.verifiers.SequenceVerifier`.
        generator: all randomness, on ``logits``' device.

    Returns:
        :class:`TreeStep`.

    Two shortcuts give the same law with less work: at temperature 0 with a verifier whose rule is
    "accept iff the draft is the argmax" one argmax per node; for a deterministic tree
    (:attr:`DraftTree.deterministic`) and any lossless verifier one draw from p per node. Both then
    walk down the matching children. On the CPU the deterministic tree's draws are made lazily, one
    per VISITED node in visiting order (a host read costs nothing there): only those rows are
    normalised, and each emitted token takes the generator's next uniform exactly as an
    autoregressive step does, so with one seed the output equals autoregressive sampling's (up to
    the rounding of the target's logits). Elsewhere every row is drawn at once, with one host read.
    Likewise on the CPU a tree (not a chain) under a token-level verifier is verified at the
    visited nodes only, one node at a time (:func:`_verify_visited`); on other devices every
    expanded node is verified in one batched call per number of drafts, with one host read.
    """
    if sampling.greedy and getattr(verifier, "argmax_at_temperature_0", False) and verifier.lossless:
        step = _verify_argmax(tree, logits)
        if step is not None:
            return step
    # deterministic drafts: a lossless verifier emits y ~ p at every node (the autoregressive step
    # is the empty tree), so one draw from p per node and a walk down the matching children
    draws_from_p = tree.size == 0 or (tree.deterministic and getattr(verifier, "lossless", False))
    if draws_from_p and logits.device.type == "cpu":  # node by node along the walk
        return _walk(tree, lambda n: sample_logits_row(logits[n], sampling, generator))
    if draws_from_p:  # all rows at once, the one host read
        return _walk(tree, sample_categorical(standardize(logits, sampling), generator).tolist().__getitem__)
    if tree.q is not None and not tree.q_standardized:  # a drafter's own q: checked once, here
        check_prob_values(tree.q, f"q (draft probabilities of the drafter's tree, shape {tuple(tree.q.shape)})")
    with trusted_inputs():  # p from standardize, q checked: the verifiers skip their value checks
        if logits.device.type == "cpu" and not tree.is_chain() and not isinstance(verifier, SequenceVerifier):
            return _verify_visited(tree, logits, sampling, verifier, generator)
        return _verify(tree, standardize(logits, sampling), verifier, generator)  # p [1 + N, V]


def _verify_argmax(tree: DraftTree, logits: Tensor) -> TreeStep | None:
    """Temperature 0 with a verifier whose rule there is "accept the draft iff it is the target's
    argmax t, else emit t" (:attr:`~specot.verifiers.Verifier.argmax_at_temperature_0`): one
    argmax per node and one host read, the same tokens, path and acceptances as the verifier's own
    run on the one-hot p (first maximal index on ties, as :func:`~specot.sampling.standardize`).
    ``None`` when a row's maximum is not finite (NaN, +inf, all −inf): the caller's
    :func:`standardize` then raises its error."""
    # exact for bf16/fp16; a float32 argmax is also the faster one on a CPU (no call when already float32)
    x = logits if logits.dtype == torch.float32 else logits.to(torch.float32)
    if x.device.type == "cpu":  # numpy's argmax: a few microseconds a row where torch's dispatch costs tens
        a = x.detach().numpy()  # [1 + N, V]
        if a.shape[0] == 1:  # a plain step: one row, no fancy indexing
            top = int(a[0].argmax())  # first maximal index; the first NaN where the row holds one
            return _walk(tree, [top].__getitem__) if math.isfinite(a[0, top]) else None
        top_np = a.argmax(-1)  # first maximal index; the first NaN where a row holds one
        if not np.isfinite(a[np.arange(a.shape[0]), top_np]).all():
            return None
        return _walk(tree, top_np.tolist().__getitem__)
    top = x.argmax(-1)  # [1 + N]
    best = x.gather(-1, top[:, None])[:, 0]
    flat = torch.where(torch.isfinite(best), top, -1).tolist()  # the one host read
    if min(flat) < 0:
        return None
    return _walk(tree, flat.__getitem__)


def _walk(tree: DraftTree, token_at: Callable[[int], int]) -> TreeStep:
    """Walk down from the root, emitting ``token_at(node)`` (the token the target emits at each
    visited node, asked once per node in visiting order) and descending while it is one of the
    node's children: the emitted tokens, the accepted path and the per-depth acceptances. Exact
    whenever ``token_at(node)`` follows the verified law at every node (the argmax at temperature 0;
    an independent draw from p for a deterministic tree, where nodes off the path need no draw)."""
    def outcome_at(node: int) -> tuple[int, bool]:
        t = token_at(node)
        return t, t in tree.child_of.get(node, {})
    return _walk_outcomes(tree, outcome_at)


def _walk_outcomes(tree: DraftTree, outcome_at: Callable[[int], tuple[int, bool]]) -> TreeStep:
    """The one walk of a verified tree: from the root, ``outcome_at(node)`` gives the token the
    target emits there and whether it is an accepted draft (asked once per visited node, in
    visiting order; a leaf's flag is ignored, its token is the bonus token); descend into the
    accepted child, stop at the correction token or after a leaf's bonus token."""
    emitted: list[int] = []
    path: list[int] = []
    acc: list[bool] = []
    node = 0
    while True:
        t, ok = outcome_at(node)
        emitted.append(t)
        if node not in tree.drafts:  # a leaf: the bonus token
            break
        acc.append(ok)
        if not ok:  # the correction token
            break
        node = tree.child_of[node][t]
        path.append(node)
    return TreeStep(emitted, path, acc)


def _verify_visited(tree: DraftTree, logits: Tensor, sampling, verifier: AnyVerifier,
                    generator: torch.Generator | None) -> TreeStep:
    """A token-level verifier run at the VISITED nodes only, in visiting order (the CPU, where a
    host read costs nothing): standardize the node's row, verify its drafts (``[1, n]``), descend
    into the accepted child, stop at the correction token, or draw the leaf's bonus token.

    The same law as :func:`_verify`, which verifies every expanded node at once: each node's
    outcome uses randomness independent of every other node's, so nodes off the accepted path,
    which the walk never reads, need no work. A tree pass visits about 1 + (accepted length) of
    its ``1 + N`` rows, so this normalises and verifies a fraction of them."""
    def outcome_at(node: int) -> tuple[int, bool]:
        p = standardize(logits[node:node + 1], sampling)  # [1, V]
        if node not in tree.drafts:  # a leaf: its bonus token
            return int(sample_categorical(p, generator)[0]), False
        drafts = torch.tensor([tree.drafts[node]], dtype=torch.int64)  # [1, n]
        res = verifier.verify(p, _draft_q(tree, [node], p), drafts, generator)
        return int(res.tokens[0]), int(res.accepted_index[0]) >= 0
    return _walk_outcomes(tree, outcome_at)


def _verify(tree: DraftTree, p: Tensor, verifier: AnyVerifier, generator: torch.Generator | None) -> TreeStep:
    dev = p.device
    if isinstance(verifier, SequenceVerifier):
        expanded = sorted(tree.drafts)
        q = torch.zeros_like(p)  # [1 + N, V], leaf rows unused
        q[torch.tensor(expanded, dtype=torch.int64).to(dev)] = _draft_q(tree, expanded, p)
        toks = torch.tensor(tree.tokens, dtype=torch.int64).to(dev, non_blocking=True)
        pars = torch.tensor(tree.parents, dtype=torch.int64).to(dev, non_blocking=True)
        out = verifier.verify_tree(p, q, toks, pars, generator, drafts=tree.drafts)
        path = list(out.path)
        last = path[-1] if path else 0
        acc = [True] * len(path) + ([False] if last in tree.drafts else [])
        return TreeStep(list(out.tokens), path, acc)
    if tree.is_chain():  # all positions in one call (Leviathan Alg. 1)
        chain = _chain_nodes(tree)
        k = len(chain) - 1
        q = _draft_q(tree, chain[:-1], p)  # [k, V]
        drafts = torch.tensor([tree.tokens[n] for n in chain[1:]], dtype=torch.int64).to(dev, non_blocking=True)
        res = verifier.verify(p[chain[:-1]], q, drafts[:, None], generator)  # drafts [k, 1]
        bonus = sample_categorical(p[chain[-1]:chain[-1] + 1], generator)  # [1], used if all accepted
        flat = torch.cat([res.accepted_index, res.tokens, bonus]).tolist()  # the one host read
        accepted = [a >= 0 for a in flat[:k]]
        n_acc = accepted.index(False) if False in accepted else k
        emitted = [tree.tokens[n] for n in chain[1:n_acc + 1]] + [flat[k + n_acc] if n_acc < k else flat[-1]]
        return TreeStep(emitted, chain[1:n_acc + 1], accepted[:min(n_acc + 1, k)])
    # a tree: every expanded node verified in one call per number of drafts, bonus tokens at leaves
    expanded = sorted(tree.drafts)
    leaves = [n for n in range(len(tree.tokens)) if n not in tree.drafts]
    groups: dict[int, list[int]] = {}  # number of drafts → expanded nodes with that many, in node order
    for n in expanded:
        groups.setdefault(len(tree.drafts[n]), []).append(n)
    parts: list[Tensor] = []
    for nodes in groups.values():
        drafts = torch.tensor([tree.drafts[n] for n in nodes], dtype=torch.int64).to(dev, non_blocking=True)
        res = verifier.verify(p[nodes], _draft_q(tree, nodes, p), drafts, generator)  # drafts [G, n]
        parts += [res.tokens, res.accepted_index]
    bonus = sample_categorical(p[leaves], generator)  # [L]
    flat = torch.cat(parts + [bonus]).tolist()  # the one host read
    out_tok: dict[int, int] = {}
    out_ok: dict[int, bool] = {}
    pos = 0
    for nodes in groups.values():
        g = len(nodes)
        for j, node in enumerate(nodes):
            out_tok[node] = flat[pos + j]
            out_ok[node] = flat[pos + g + j] >= 0
        pos += 2 * g
    for j, leaf in enumerate(leaves):
        out_tok[leaf] = flat[pos + j]
    return _walk_outcomes(tree, lambda n: (out_tok[n], out_ok.get(n, False)))


def _finish_tokens(emitted: list[int], remaining: int, eos: set[int]) -> tuple[list[int], bool]:
    """Cut ``emitted`` at the first EOS (kept) and at ``remaining`` tokens; returns (tokens, stop)."""
    for i, t in enumerate(emitted[:remaining]):
        if t in eos:
            return emitted[: i + 1], True
    cut = emitted[:remaining]
    return cut, len(cut) == remaining


def _score(target: TargetModel, ctx: list[int], tree: DraftTree, chain: bool,
           hidden_layers: Sequence[int] | None) -> Tensor:
    """Step 2: target logits ``[1 + N, V]`` for every node, in one forward pass: a ``chain`` (the
    empty tree included) causally, any other tree handed over as it is."""
    if chain:  # no tree mask needed
        return target.logits_after(ctx, [tree.tokens[n] for n in _chain_nodes(tree)[1:]], hidden_layers=hidden_layers)
    return target.tree_logits(ctx, tree, hidden_layers=hidden_layers)


def _committed_hidden(target: TargetModel, ctx_len: int, chain: bool, path: list[int]) -> Tensor | None:
    """The target's hidden states of the committed positions run in the last pass: the context
    suffix from ``target.last_start``, then the accepted path's nodes."""
    h = target.last_hidden
    if h is None:
        return None
    n_ctx = ctx_len - target.last_start
    if chain:  # chain node i sits at row n_ctx + i - 1
        return h[: n_ctx + len(path)]
    rows = list(range(n_ctx)) + [n_ctx + i - 1 for i in path]
    return h.index_select(0, torch.tensor(rows, dtype=torch.int64).to(h.device))


def decode(
    target: TargetModel,
    drafter: Drafter | None,
    prompt_ids: Sequence[int],
    config: GenerationConfig,
    *,
    shape: DraftShape | None,
    verifier: AnyVerifier,
    generator: torch.Generator | None = None,
    on_tokens: TokenCallback | None = None,
    method: str = "speculative",
) -> GenerationResult:
    """The decoding loop (see the module docstring); the entry points
    :func:`~specot.engine.speculative_generate`, :func:`~specot.engine.tree_generate` and
    :func:`~specot.engine.autoregressive_generate` call it.

    Args:
        target: the target model.
        drafter: any :class:`~specot.drafting.Drafter`, or ``None`` for autoregressive decoding.
        prompt_ids: prompt token ids ``[L]``.
        config: lengths, draft length γ and its schedule, sampling transform, seed, EOS handling.
        shape: the draft-tree shape handed to the drafter: a fixed :class:`~specot.drafting.TreeSpec`
            (a chain of γ: ``TreeSpec.sequences(1, γ)``) or a :class:`~specot.drafting.TreeBudget`
            (children per node and depth) for a drafter that builds its own trees.
        verifier: valid for the shape (checked by the entry points).
        generator: overrides ``config.seed``; must be on the target's device.
        on_tokens: called with each batch of newly committed token ids (for streaming).
        method: the label of the result.

    Returns:
        :class:`GenerationResult`; ``stats.target_calls`` counts serial target passes.

    Raises:
        ValueError: a prompt that does not fit, or a generator on another device than the target.

    **Threads.** A target and a drafter hold one sequence's state (KV caches, the drafter's context
    and schedule), so a generation holds them for its whole run: it takes the re-entrant
    :func:`generation_lock` of the target, the drafter and every model or drafter the drafter holds
    (a :class:`~specot.drafting.ModelDrafter`'s draft model, a hybrid's parts), always in one global
    order (by ``id``), so two generations that share any of them, in any roles, never deadlock.
    Threads that share a loaded target therefore run their generations one after the other, each
    with exactly the result it would get alone; for parallel decoding load one target per thread.
    ``on_tokens`` runs holding the locks: it must not wait for another thread's generation on the
    same target or drafter.
    """
    with generation_locks(target, drafter):
        return _decode(target, drafter, prompt_ids, config, shape=shape, verifier=verifier, generator=generator,
                       on_tokens=on_tokens, method=method)


def _decode(target: TargetModel, drafter: Drafter | None, prompt_ids: Sequence[int], config: GenerationConfig, *,
            shape: DraftShape | None, verifier: AnyVerifier, generator: torch.Generator | None,
            on_tokens: TokenCallback | None, method: str) -> GenerationResult:
    """:func:`decode`'s body, run holding the generation locks."""
    cfg = config
    check_prompt_fits(target, prompt_ids, cfg.max_new_tokens)
    dev = target.device
    gen = generator if generator is not None else make_generator(cfg.seed, dev)
    check_generator(gen)
    if gen.device.type != dev.type:
        raise ValueError(f"the generator is on {gen.device} but the target model is on {dev}; build it with "
                         f"specot.make_generator(seed, device={str(dev)!r}) or pass seed= instead")
    eos = target.eos_token_ids if cfg.stop_at_eos else set()
    hidden_layers = drafter.hidden_layers if drafter is not None else None

    target.reset()
    target.reset_stats()
    if drafter is not None:
        assert shape is not None
        schedule = DraftSchedule(shape.depth, cfg.gamma_schedule)
        drafter.start(list(prompt_ids), shape, schedule, frozenset(eos))
        drafter.reset_stats()
    stats = GenerationStats()
    ctx = [int(t) for t in prompt_ids]
    out: list[int] = []
    t_start = time.perf_counter()
    while len(out) < cfg.max_new_tokens:
        remaining = cfg.max_new_tokens - len(out)
        if drafter is not None and remaining > 1:
            tree = drafter.propose(ctx, remaining - 1, cfg.sampling, gen)
        else:
            tree = DraftTree.root(ctx[-1])
        chain = tree.is_chain()  # derived once per tree (the verifier reads the same value)
        logits = _score(target, ctx, tree, chain, hidden_layers)  # [1 + N, V]
        step = verify_draft_tree(tree, logits, cfg.sampling, verifier, gen)
        n = len(ctx)
        if not chain:  # compact the target's cache to context + accepted path, in place
            target.keep_tree_path(step.path)
        emitted, stop = _finish_tokens(step.emitted, remaining, eos)
        if drafter is not None:
            hidden = _committed_hidden(target, n, chain, step.path) if hidden_layers is not None else None
            drafter.update(DraftOutcome(tree=tree, path=tuple(step.path), tokens=tuple(emitted), context_len=n,
                                        hidden_states=hidden, hidden_start=target.last_start))
        stats.iterations += 1
        stats.tree_sizes.append(tree.size)
        stats.accepted_lengths.append(len(step.path))
        stats.drafted += tree.size
        stats.accepted += len(step.path)
        for i, a in enumerate(step.accepted_at_depth):
            stats.record_position(i, a)
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
    if drafter is not None:
        stats.draft_calls = drafter.calls
        stats.draft_time_s = drafter.draft_time_s
    text = target.decode(out) if target.tokenizer is not None else ""
    return GenerationResult(tokens=out, text=text, stats=stats, method=method)
