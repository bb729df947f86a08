"""A draft model: any Hugging Face causal LM sharing the target's tokenizer.

Chains are drafted token by token over the draft's KV cache (Leviathan et al. 2023, Algorithm 1);
trees one draft forward per depth for all frontier nodes, under tree attention
(:meth:`specot.models.CausalLM.forward_tree`). After verification the draft cache keeps the
committed context plus the accepted path, compacted in place.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import torch
from torch import Tensor

from .._validation import trusted_inputs
from ..laws import DraftLaw, sample_drafts
from ..models.hf import CausalLM
from ..sampling import SamplingConfig, standardize
from .base import DraftOutcome, DraftSchedule, DraftTree, Drafter
from .pricing import ChainPricer, PricedChains
from .tree import DraftShape, Path_, TreeBudget, TreeSpec

__all__ = ["ModelDrafter", "as_drafter", "check_vocab_compatible", "draft_tree_from_model", "draft_chain", "Chain",
           "confidence"]


def check_vocab_compatible(target: Any, draft: Any, source: str | None = None) -> None:
    """Raise ``ValueError`` unless the draft model shares the target's vocabulary: with both
    tokenizers known, identical token strings (the same token→id map) and a draft whose logits are
    no wider than the target's (a target's vocabulary may be padded past its tokenizer: the draft's
    q rows are then zero there); without tokenizers, the same number of logits.

    Args:
        target, draft: models with ``tokenizer`` (or ``None``), ``vocab_size`` and ``name``.
        source: how the user named the draft (a path), for the message's ``xvocab:`` hint.

    Raises:
        ValueError: one line naming both vocabularies and the fix (a draft of another tokenizer
            drafts through ``xvocab:``).
    """
    tt, dt = getattr(target, "tokenizer", None), getattr(draft, "tokenizer", None)
    other = (f"; a draft model with another tokenizer drafts through token-level intersection: "
             f"--draft xvocab:{source or 'PATH'}")
    if tt is not None and dt is not None:
        tv, dv = tt.get_vocab(), dt.get_vocab()
        if tv != dv:
            only_t = len(set(tv.items()) - set(dv.items()))
            raise ValueError(
                f"tokenizer mismatch: draft {draft.name!r} ({len(dv)} tokens) and target {target.name!r} "
                f"({len(tv)} tokens) differ in {only_t} token→id entries; the draft model must use the "
                "target's tokenizer" + other
            )
        if draft.vocab_size <= target.vocab_size:
            return
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"vocabulary mismatch: target {target.name!r} has {target.vocab_size} logits, draft "
            f"{draft.name!r} has {draft.vocab_size}; the draft model must share the target's vocabulary" + other
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
        return ModelDrafter(draft, width=target.vocab_size)
    if not isinstance(draft, Drafter):
        raise TypeError(f"tree decoding needs a drafter or a draft model (CausalLM), got {type(draft).__name__}")
    if isinstance(draft, ModelDrafter):
        check_vocab_compatible(target, draft.model)
    return draft


def _host(row: Tensor) -> np.ndarray:
    """A CPU row ``[V]`` as a numpy array (float32 for a half-precision row, which numpy lacks)."""
    x = row.detach()
    return (x if x.dtype in (torch.float32, torch.float64) else x.float()).numpy()


def confidence(logits_row: Tensor, q_row: Tensor | None) -> float:
    """The draft's confidence in its next token (:mod:`specot.drafting.pricing`): at T = 0 (``q_row``
    ``None``) the top-1 probability of ``softmax(logits_row)``, else ``Σ_x q(x)²``.

    Args:
        logits_row: ``[V]`` the draft's logits (−inf allowed).
        q_row: ``[V]`` the standardized q the next draft is drawn from, or ``None`` at T = 0.
    """
    if q_row is not None:
        return float((q_row * q_row).sum())
    if logits_row.device.type == "cpu":  # numpy: a few microseconds where torch's dispatch costs tens
        a = _host(logits_row)
        return float(1.0 / np.exp(a - a.max()).sum())
    x = logits_row.detach().float()
    return float(1.0 / torch.exp(x - x.max()).sum())


@dataclass
class Chain:
    """One drafted chain (:func:`draft_chain`).

    Attributes:
        tokens: ``[K]`` the drafts, in the output ids (the target's, or the draft's own when no
            ``shared`` map is given).
        fed: ``[K]`` the same drafts as the draft model's ids.
        q: ``[K, W]`` the standardized rows the drafts were drawn from (zero outside ``shared``'s ids
            and past the draft's vocabulary), or ``None`` at T = 0 (a deterministic chain).
        confidences: ``[K]`` the draft's confidence in each node (priced chains; else empty).
        passes: draft passes run for it (the first, catching up with the context, included).
    """

    tokens: list[int]
    fed: list[int]
    q: Tensor | None
    confidences: list[float]
    passes: int


def draft_chain(first: Callable[[], Tensor], advance: Callable[[Any], Tensor], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None, *, stop_tokens: frozenset[int] = frozenset(),
                pricer: ChainPricer | None = None, shared: tuple[Tensor, Tensor] | None = None,
                width: int | None = None, keep_q: bool = True, tail: int = 0) -> Chain:
    """Draft a chain of at most ``gamma`` tokens, one draft pass per token (Leviathan et al. 2023,
    Algorithm 1): every draft model of specot drafts its chains here (a draft :class:`CausalLM`, a
    GGUF model on llama.cpp, a draft of another vocabulary through TLI or SLEM).

    Each node's q is the standardized draft logits (the engine's transform); at T = 0 the draft is
    the argmax (first maximal index, as :func:`~specot.sampling.standardize`) and no q is built
    (the chain is deterministic: verified by the target's argmax or one draw from p per node). With
    a ``pricer`` the chain ends where the next node no longer pays (:class:`ChainPricer`: decided
    from q before the node's token is drawn, so exact); without, it runs to ``gamma`` or a stop token.

    Args:
        first: the draft's logits ``[1, V]`` after the context (its first pass).
        advance: feeds one draft token (the draft's id: an int, or a ``[1]`` tensor on the draft's
            device when nothing needs it on the host) and returns the logits ``[1, V]`` after it.
        gamma: the draft length γ, the most nodes (cut to the tokens still allowed).
        sampling, generator: the standardized-sampling transform and the source of the draws.
        stop_tokens: output ids after which nothing is drafted (EOS).
        pricer: prices the chain node by node, or ``None``.
        shared: TLI's restriction ``(draft_ids [S], target_ids [S])``: drafts are drawn from the
            logits of the draft's ids ``draft_ids`` and named by ``target_ids``.
        width: the width W of the q rows: the target's vocabulary (default: the draft's logits'
            width; with ``shared`` it must be given). Rows are zero outside the draft's tokens.
        keep_q: return the q rows (``False``: a point-mass proposal such as SLEM's needs none).
        tail: drafts past the ``gamma`` nodes, unpriced: SLEM's ``drop_last`` draft tokens after the
            kept ones (their text settles the last kept token's boundary). A priced chain of no node
            gets none.

    Returns:
        :class:`Chain`.
    """
    logits = first()  # [1, V_draft]
    passes = 1
    if pricer is not None:
        pricer.begin(passes + tail)  # the tail's passes come with the first node
    cpu = logits.device.type == "cpu"
    host = pricer is not None or cpu
    src = shared[0].to(logits.device) if shared is not None else None
    out_ids = shared[1].tolist() if shared is not None else None
    tokens: list[Any] = []
    q_rows: list[Tensor] = []
    confs: list[float] = []
    tail_left = -1  # drafts of the tail still to come, once the priced nodes are done (-1: not yet)
    for i in range(gamma + tail):
        row = logits[0] if src is None else logits[0].index_select(0, src)  # [V] or [S]
        q = None if sampling.greedy else standardize(row[None], sampling)  # [1, V] / [1, S]
        if pricer is not None and tail_left < 0:
            c = confidence(row, None if q is None else q[0])
            if pricer.take(c, gamma - i):
                confs.append(c)
            elif i == 0 or tail == 0:
                break
            else:  # refused: this pass's draft opens the tail
                tail_left = tail
        tok = _draw(row, q, cpu, host, generator)
        if q is not None and keep_q:
            q_rows.append(q)
        tokens.append(tok)
        tail_left -= 1 if tail_left > 0 else 0
        stop = host and (out_ids[tok] if out_ids is not None else tok) in stop_tokens
        if i + 1 == gamma + tail or stop or tail_left == 0:
            break
        if pricer is not None and tail_left < 0 and (i + 1 == gamma or not pricer.go_on(gamma - i - 1)):
            if tail == 0:
                break
            tail_left = tail  # the priced nodes are done: the tail follows
        logits = advance(tok if src is None else int(src[tok]) if host else src[tok])
        passes += 1
    ids = [int(t) for t in (torch.cat(tokens).tolist() if tokens and not host else tokens)]  # one host read
    fed = [int(src[t]) for t in ids] if src is not None else ids
    outs = [out_ids[t] for t in ids] if out_ids is not None else ids
    q_all = None
    if q_rows:
        q_all = torch.cat(q_rows)  # [K, V] or [K, S]
        w = width if width is not None else q_all.shape[-1]
        if shared is not None:
            full = q_all.new_zeros(len(q_rows), w)
            full[:, shared[1].to(q_all.device)] = q_all
            q_all = full
        elif w > q_all.shape[-1]:
            q_all = torch.nn.functional.pad(q_all, (0, w - q_all.shape[-1]))
    return Chain(outs, fed, q_all, confs, passes)


def _draw(row: Tensor, q: Tensor | None, cpu: bool, host: bool, generator: torch.Generator | None) -> Any:
    """One draft from ``row`` ``[V]``: its first maximal index at T = 0 (``q`` None; numpy's on the
    host, refusing NaN as :func:`~specot.sampling.standardize` does), else a draw from ``q`` ``[1, V]``;
    an int on the host, else a ``[1]`` tensor on the row's device."""
    if q is not None:
        draw = sample_drafts(q, 1, DraftLaw.IID, generator)  # [1, 1]
        return int(draw[0, 0]) if host else draw.reshape(1)
    if not cpu:
        return int(row.argmax()) if host else row.argmax().reshape(1)
    a = _host(row)
    tok = int(a.argmax())
    if not math.isfinite(float(a[tok])):  # NaN, +inf or a row of -inf
        raise ValueError("the draft's logits contain NaN or +inf, or are all -inf; check the draft model")
    return tok


def _draft_chain(draft: CausalLM, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                 generator: torch.Generator | None, *, pricer: ChainPricer | None = None,
                 stop_tokens: frozenset[int] = frozenset(), width: int | None = None) -> tuple[DraftTree, Chain]:
    """A chain from a draft model with ``logits_after`` and ``forward`` (:func:`draft_chain`) as a
    :class:`DraftTree` (q ``[γ, W]``, or none at T = 0), and the chain itself."""
    chain = draft_chain(lambda: draft.logits_after(context), lambda tok: draft.forward(
        tok if isinstance(tok, Tensor) else [tok]), gamma, sampling, generator, stop_tokens=stop_tokens,
        pricer=pricer, width=width)
    tree = DraftTree.chain(int(context[-1]), chain.tokens, chain.q)  # q: [γ, W]
    tree.draft_calls = chain.passes
    tree.q_standardized = True
    return tree, chain


def draft_tree_from_model(draft: CausalLM, context: Sequence[int], spec: TreeSpec, gamma: int,
                          sampling: SamplingConfig, generator: torch.Generator | None,
                          stop_tokens: frozenset[int] = frozenset(), width: int | None = None,
                          ) -> tuple[DraftTree, dict[int, int]]:
    """Draft a tree after ``context`` with ``spec`` cut at the draft length ``gamma`` (γ), one draft
    pass per depth.

    **Slots vs nodes** (see :mod:`specot.drafting.tree`): a node is a distinct token prefix holding
    the slots that reached it; its child slots receive ``n`` draws from q at the node under the
    spec's law (draw j → child slot j; equal draws share a child node, only possible under IID).
    Under WOR / GREEDY / SPECHUB a node whose q has fewer than n tokens with mass draws that many
    instead (the same law with fewer drafts). The draft cache first catches up with ``context``
    (giving q at the root); then all frontier nodes of one depth (with child slots, not at
    depth ``gamma``, not a stop token) run in ONE :meth:`CausalLM.forward_tree` call. Leaves are never
    run through the draft.

    ``width``: the q rows' width W (the target's vocabulary, default the draft's), zero past the
    draft's vocabulary.

    Returns:
        ``(tree, draft_pos)``: the :class:`DraftTree` and, for each node fed to the draft model, its
        index in the draft's KV cache (to keep the accepted path afterwards).
    """
    law = spec.law
    tree = DraftTree.root(int(context[-1]))
    tree.law = law
    draft_pos: dict[int, int] = {}
    slots: dict[int, list[Path_]] = {0: [()]}
    if gamma <= 0 or not spec.children(()):
        return tree, draft_pos
    logits = draft.logits_after(context)  # [1, V]
    tree.draft_calls = 1
    draft_pos[0] = len(context) - 1
    frontier = [0]
    q_rows: list[Tensor] = []
    for d in range(gamma):
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
        first = len(tree.tokens)  # the nodes made at this depth follow: depth d + 1
        for i, node in enumerate(frontier):
            tree.q_row[node] = len(q_rows)
            q_rows.append(q[i])
            for child, slot in zip(tree.add_children(node, draws[i]), kid_slots[i]):
                slots.setdefault(child, []).append(slot)
        if d + 1 >= gamma:
            break
        nxt = [nd for nd in range(first, len(tree.tokens)) if tree.tokens[nd] not in stop_tokens
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
    if tree.q is not None and width is not None and width > tree.q.shape[-1]:  # zero past the draft's vocabulary
        tree.q = torch.nn.functional.pad(tree.q, (0, width - tree.q.shape[-1]))  # [M, W]
    tree.q_standardized = True
    return tree, draft_pos


#: What a draft model needs for chains: a :class:`CausalLM`, or a backend's target model (llama.cpp's).
_DRAFT_METHODS = ("logits_after", "forward", "reset", "vocab_size", "cached_ids")


class ModelDrafter(Drafter):
    """Drafts chains or trees from a draft model sharing the target's tokenizer: a :class:`CausalLM`
    (any Hugging Face causal LM), or a backend's model (a GGUF file on llama.cpp, in its own context:
    chains only, a tree shape drafted as the chain of its depth).

    Chains (``TreeSpec.sequences(1, γ)``): :func:`draft_chain` — γ tokens sampled one by one from
    the standardized draft distribution (Leviathan et al. 2023, Algorithm 1), or fewer where a
    ``pricing`` prices them (:mod:`specot.drafting.pricing`; γ is then the most). Trees:
    :func:`draft_tree_from_model`. Every draft is sampled with the engine's generator and the tree
    carries the distributions ``q`` it was drawn from (none at T = 0 for a chain: its drafts are the
    draft's argmax).

    Args:
        model: the draft model.
        pricing: prices its chains (:class:`PricedChains`), or ``None``: chains of γ.
        width: the width of its q rows, the target's vocabulary (default: the draft's); a draft
            whose vocabulary is a prefix of the target's padded one gets zero rows past its own.

    Raises:
        TypeError: ``model`` is neither a :class:`CausalLM` nor a backend's model with its methods.
        ValueError: ``width`` below the draft's vocabulary.
    """

    def __init__(self, model: Any, *, pricing: PricedChains | None = None, width: int | None = None) -> None:
        super().__init__()
        if not isinstance(model, CausalLM) and not all(hasattr(model, a) for a in _DRAFT_METHODS):
            raise TypeError(f"ModelDrafter needs a specot CausalLM or a backend's model with {', '.join(_DRAFT_METHODS)}, "
                            f"got {type(model).__name__}")
        self._init_chains(model, pricing, width)
        self._draft_pos: dict[int, int] = {}

    def _init_chains(self, model: Any, pricing: PricedChains | None, width: int | None) -> None:
        if width is not None and width < model.vocab_size:
            raise ValueError(f"width {width} is below the draft's vocabulary of {model.vocab_size} tokens")
        self.model = model
        self.name = model.name
        self.pricing = pricing
        self.width = int(width) if width is not None else int(model.vocab_size)
        self._last_tree: DraftTree | None = None

    @property
    def vocab_size(self) -> int:
        return self.width

    @property
    def device(self) -> torch.device:
        return self.model.device

    def reset(self) -> None:
        self.model.reset()
        self._draft_pos = {}
        if self.pricing is not None:
            self.pricing.reset()

    def start(self, prompt_ids: Sequence[int], spec: DraftShape, schedule: DraftSchedule | None = None,
              stop_tokens: frozenset[int] = frozenset()) -> None:
        """:meth:`Drafter.start`. A draft model draws fixed shapes: a :class:`TreeSpec`, or a
        :class:`TreeBudget` of one child per node (a chain of its depth).

        Raises:
            TypeError: a :class:`TreeBudget` of more than one child per node.
        """
        if isinstance(spec, TreeBudget):
            if not spec.is_chain():
                raise TypeError(f"a {type(self).__name__} draws fixed tree shapes: give it a TreeSpec, not a "
                                f"{spec.label()}")
            spec = TreeSpec.sequences(1, spec.depth)
        super().start(prompt_ids, spec, schedule, stop_tokens)

    def _chain(self, context: Sequence[int], depth: int, sampling: SamplingConfig,
               generator: torch.Generator | None) -> DraftTree:
        """A (priced) chain after ``context``."""
        pricer = self.pricing.pricer if self.pricing is not None else None
        tree, chain = _draft_chain(self.model, context, depth, sampling, generator, pricer=pricer,
                                   stop_tokens=self.stop_tokens, width=self.width)
        if self.pricing is not None:
            self.pricing.note(chain.confidences)
        return tree

    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        spec = self.spec if self.spec is not None else TreeSpec.sequences(1, max(gamma, 1))
        depth = self.depth_limit(gamma)
        t0 = time.perf_counter()
        self._draft_pos = {}
        with trusted_inputs():  # q from standardize: the samplers skip their value checks
            if depth <= 0:
                tree = DraftTree.root(int(context[-1]))
            elif spec.is_chain() or not hasattr(self.model, "forward_tree"):  # grows with the schedule (2γ: heuristic)
                tree = self._chain(context, depth, sampling, generator)
            else:
                tree, self._draft_pos = draft_tree_from_model(self.model, context, spec, min(depth, spec.depth),
                                                              sampling, generator, self.stop_tokens, width=self.width)
        self._last_tree = tree
        self.calls += tree.draft_calls
        self.draft_time_s += time.perf_counter() - t0  # ends with the host read of the drafted tokens
        return tree

    def update(self, outcome: DraftOutcome) -> None:
        super().update(outcome)
        if self.pricing is not None and outcome.tree is self._last_tree and self.pricing.last:
            self.pricing.learn(outcome.accepted)
        if self._draft_pos:  # a tree: keep the committed context + the accepted path's nodes fed to the draft
            n = outcome.context_len
            self.model.keep_positions(list(range(n)) + [self._draft_pos[i] for i in outcome.path if i in self._draft_pos])
            self._draft_pos = {}
