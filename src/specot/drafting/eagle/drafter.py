"""The EAGLE drafter (:class:`EagleDrafter`): an EAGLE-3 head speaking the one drafter protocol —
start / propose / update, the target's features of the committed positions, the head's committed
KV cache, and the choice of tree construction.

**The draft distribution over the full vocabulary.** The head's softmax over its ``V_d`` draft
tokens (after the engine's standardized-sampling transform, at temperature
``q_temperature_ratio · T``, a per-head calibration) is scattered to the target ids ``d2t`` maps to;
every other target token has q = 0. Drafts are sampled from exactly this ``q [·, V]`` (drawn over
the ``V_d`` draft ids and mapped by ``d2t``, which is the same law), so every lossless verifier
stays lossless (a token outside the draft vocabulary can still be emitted: as a correction or bonus
token, from the residual / the target).

**State and caches.** :meth:`EagleDrafter.update` stores the target's fused features of the
committed positions (the engine hands them over because the drafter sets ``hidden_layers``). The
draft keeps its own KV cache of *committed* entries: entry ``j`` reads token ``j`` and the target's
feature at ``j − 1`` — exactly as in training (keys and values ``[L, kv, P, d]`` for the head's ``L``
decoder layers). Drafted nodes read their parent's draft output feature (EAGLE's feature
extrapolation) and live in temporary KV entries discarded after :meth:`~EagleDrafter.propose`
(:class:`~specot.drafting.eagle.passes.DraftPasses`); accepted drafts are re-run next time with the
target's true features (as EAGLE does). Until the target has produced the features of the context
(the first iteration after the prompt) the drafter proposes the empty tree (a plain target step).

**Trees** (:meth:`EagleDrafter.propose`): a chain spec (``TreeSpec.sequences(1, γ)``) gives γ
tokens sampled from q one by one; a tree spec gives EAGLE-2's dynamic tree (``dynamic=True``, the
default) or the spec's static topology (``dynamic=False``), their children drawn under the spec's
law (:mod:`specot.drafting.eagle.sampled`). At temperature 0 under the GREEDY law a dynamic tree
follows EAGLE-2 to the letter instead: top-k expansion and final re-ranking, a deterministic tree
(:mod:`specot.drafting.eagle.reranked`), built on the device over a static cache after
:meth:`~EagleDrafter.use_static_cache` (:mod:`specot.drafting.eagle.static_tree`).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any, Sequence

import torch
from torch import Tensor

from ..._validation import check_count, trusted_inputs
from ...laws import DraftLaw
from ...models.device import install_prepacked_linears, prepacking_available
from ...sampling import SamplingConfig, standardize
from ..base import DraftOutcome, DraftTree, Drafter
from ..tree import DraftShape, TreeBudget, TreeSpec
from .checkpoint import load_head, random_head
from .config import config_layers, default_eagle_layers
from .head import Eagle3Head
from .passes import DraftPasses, DynamicTree, Expansion
from .reranked import draft_reranked
from .sampled import ChainShape, DynamicShape, TopologyShape, draft_sampled
from .static_tree import StaticTreeDraft, StaticTrees

__all__ = ["EagleDrafter"]


def _check_head_fits(head: Eagle3Head, target: Any, layers: tuple[int, ...]) -> None:
    """Raise ``ValueError`` unless ``head`` reads ``layers`` of ``target`` and maps to its vocabulary."""
    tcfg = target.model.config
    n_layers = int(tcfg.num_hidden_layers)
    if len(layers) != head.num_features:
        raise ValueError(f"the head's fc fuses {head.num_features} target layers, got layers {list(layers)}")
    if any(not 0 <= i <= n_layers for i in layers):
        raise ValueError(f"feature layers {list(layers)} must lie in [0, {n_layers}] (the target's hidden_states)")
    if head.fc.in_features != len(layers) * int(tcfg.hidden_size):
        raise ValueError(f"the head's fc reads {head.fc.in_features} features, the target gives "
                         f"{len(layers)} x {tcfg.hidden_size}")
    if head.vocab_size != target.vocab_size:
        raise ValueError(f"vocabulary mismatch: the EAGLE head maps to {head.vocab_size} target tokens, the target "
                         f"{target.name!r} has {target.vocab_size}")
    head.check_vocab_map()


def _check_options(children: Any, total_tokens: Any, width: Any, min_confidence: Any, q_temperature_ratio: Any) -> float:
    """Raise ``ValueError`` on a bad tree size, gate or ratio (:class:`EagleDrafter`); returns the ratio."""
    for x in (children, total_tokens, width):
        if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 1):
            raise ValueError(f"children, total_tokens and width must be integers >= 1, got {x!r}")
    if min_confidence is not None and not 0.0 < float(min_confidence) < 1.0:
        raise ValueError(f"min_confidence must lie in (0, 1) or be None, got {min_confidence!r}")
    ratio = float(q_temperature_ratio)
    if not (math.isfinite(ratio) and ratio > 0):
        raise ValueError(f"q_temperature_ratio must be a finite number > 0 (1 = the head's own law), "
                         f"got {q_temperature_ratio!r}")
    return ratio


class EagleDrafter(Drafter):
    """An EAGLE-3 drafter speaking the one drafter protocol (module docstring).

    Args:
        head: the draft network.
        target: the target :class:`~specot.models.CausalLM` (its embedding is shared with the head
            unless the head owns one; its width, vocabulary and depth are checked).
        layers: the target's feature layers (indices into transformers' ``hidden_states``); default:
            the config's ``eagle_aux_hidden_state_layer_ids``, else :func:`default_eagle_layers`.
        dynamic: trees use EAGLE-2's dynamic expansion (``True``) or the spec's static topology.
        children: children per expanded node of a dynamic tree, at most (default: the spec's widest
            node; EAGLE-2's top-k); capped at the spec's :meth:`~TreeSpec.max_drafts_per_node` (what
            the verifier was checked for).
        total_tokens: node budget of a dynamic tree (default: the spec's number of slots).
        width: nodes expanded per depth of a dynamic tree (default ``children``, as in EAGLE-2).
            ``children``, ``total_tokens`` and ``width`` are EAGLE-2's three tree parameters; the
            defaults read them off the tree spec, which is how the CLI and :func:`specot.generate`
            set them (``--drafts`` × ``--gamma``).
        min_confidence: τ in (0, 1) or ``None`` (off, the default): a drafted node is expanded
            further only while its path's cumulative draft probability (the draft's own softmax at
            temperature 1, EAGLE-2's confidence) is at least τ — for a chain, a draft length that
            stops where the draft becomes unsure (Hugging Face's ``assistant_confidence_threshold``
            applies the same idea per token). It saves draft passes and verified tokens that would
            likely be rejected; the decision reads only drafted tokens, so the output law is unchanged.
        rerank: at temperature 0, GREEDY-law dynamic trees follow EAGLE-2 to the letter (``True``,
            the default): top-k children everywhere, ``width`` best nodes expanded per depth, then
            the ``total_tokens`` nodes of highest cumulative draft probability kept — a deterministic
            tree (:mod:`~specot.drafting.eagle.reranked`; at T = 0 it raised block efficiency over
            spending the budget during expansion, docs/results.md). ``False`` spends the budget during expansion with the last child of
            every node sampled — the construction every temperature > 0 uses (a sampled draft is
            accepted with probability Σ min(p, q), which beats the top-k's p(top-k) when p is
            spread: deterministic trees at T = 1 lost 0.1–0.2 block efficiency).
        q_temperature_ratio: r > 0, a calibration of the head: at a sampling temperature T > 0 the
            draft law is ``q = softmax(z / (r·T))`` over the draft vocabulary (z: the head's logits);
            r = 1 (the default) is the head's own law. A head trained by forward KL is
            under-confident, and a single draft is accepted with probability Σ min(p, q), which a
            sharper q raises where the head's top token is right: for the shipped head r = 0.75
            raised the exact first-position acceptance at T = 1 by 0.03–0.06 on six prompt sets
            (docs/distillation.md, "Head variants"). Any r keeps verification lossless: q is exactly the law the
            drafts are drawn from. :meth:`from_pretrained` reads ``specot_q_temperature_ratio``
            from the checkpoint's ``config.json`` (absent in published heads: r = 1).
        int8: store the head's linear layers as int8 weights with a scale per output row
            (:meth:`Eagle3Head.quantize_int8`): half the bytes of a bfloat16 pass. Lossless all the
            same (q is what the quantized head computes). Without it, a head on a CPU runs its
            linear layers prepacked for oneDNN (:class:`~specot.models.device.PrepackedLinear`).
            In bf16 the two were level end to end (int8 3 % ahead on eight cells, within noise);
            in float32 PyTorch's int8 kernel is 8-40x slower than the prepacked layers
            (docs/results.md, "Component costs"). :meth:`from_pretrained` reads
            ``specot_int8_weights`` from ``config.json`` (absent: off) and applies it on a CPU,
            except to a float32 head that oneDNN can prepack.
        name: the label in statistics.

    Raises:
        ValueError: a head that does not fit the target (vocabulary, feature width, layers),
            ``children`` / ``total_tokens`` / ``width`` not integers >= 1, ``min_confidence``
            outside (0, 1), or ``q_temperature_ratio`` not a finite number > 0.
    """

    def __init__(self, head: Eagle3Head, target: Any, *, layers: Sequence[int] | None = None, dynamic: bool = True,
                 children: int | None = None, total_tokens: int | None = None, width: int | None = None,
                 min_confidence: float | None = None, rerank: bool = True, q_temperature_ratio: float = 1.0,
                 int8: bool = False, name: str = "eagle3") -> None:
        super().__init__()
        layers = tuple(int(i) for i in layers) if layers is not None else (
            config_layers(head.config) or default_eagle_layers(int(target.model.config.num_hidden_layers)))
        _check_head_fits(head, target, layers)
        if head.embed_tokens is None:
            head.attach_embedding(target.model.get_input_embeddings())
        self.q_temperature_ratio = _check_options(children, total_tokens, width, min_confidence, q_temperature_ratio)
        self.head = head.to(target.device).eval()
        self.head.requires_grad_(False)
        if int8:
            self.head.quantize_int8()
        else:  # on a CPU, the large layers on oneDNN over weights reordered once (models.device.PrepackedLinear)
            install_prepacked_linears(self.head)
        self.target = target
        self.hidden_layers = layers
        self.dynamic, self.children, self.total_tokens, self.width = dynamic, children, total_tokens, width
        self.min_confidence = None if min_confidence is None else float(min_confidence)
        self.rerank = bool(rerank)
        self.name = name
        self._target_ids = self.head.target_ids()  # [V_d]: target id of each draft id
        self._target_id_list: list[int] = self._target_ids.tolist()
        self._statics: StaticTrees | None = None  # use_static_cache: the on-device trees
        self.reset()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], target: Any, **kw: Any) -> "EagleDrafter":
        """Load an EAGLE-3 head (the published layout or the ``speculators`` one:
        :func:`~specot.drafting.eagle.checkpoint.load_head`) for ``target``, in the target's dtype
        and device. The keywords are :class:`EagleDrafter`'s; ``q_temperature_ratio`` and ``int8``
        default to the checkpoint's ``specot_q_temperature_ratio`` / ``specot_int8_weights``.

        Raises:
            FileNotFoundError: no checkpoint there.
            ValueError: missing weights, wrong shapes, a head that does not fit the target, or a
                ``speculators`` checkpoint of another algorithm than EAGLE-3 or with another layer type.
        """
        head, obj, d = load_head(path, target.dtype)
        kw.setdefault("q_temperature_ratio", float(obj.get("specot_q_temperature_ratio", 1.0)))
        # a CPU setting for bf16 heads: there int8 weights halve the bytes a pass reads. A float32 head
        # runs prepacked instead wherever oneDNN can: PyTorch's int8 kernel is 8-40x slower with
        # float32 activations (docs/results.md, "Component costs")
        kw.setdefault("int8", bool(obj.get("specot_int8_weights", False)) and torch.device(target.device).type == "cpu"
                      and not (target.dtype == torch.float32 and prepacking_available(torch.float32)))
        return cls(head, target, name=kw.pop("name", d.name or "eagle3"), **kw)

    @classmethod
    def random(cls, target: Any, *, draft_vocab: Sequence[int] | int | None = None, seed: int = 0,
               layers: Sequence[int] | None = None, scale: float = 1.0, num_layers: int = 1,
               **kw: Any) -> "EagleDrafter":
        """An untrained head for ``target`` (tests, training from scratch): ``draft_vocab`` is the
        list of target ids of the draft vocabulary, or its size (the first ``V_d`` ids), or ``None``
        (the full vocabulary); ``scale`` multiplies ``lm_head`` (sharper draft distributions);
        ``num_layers`` decoder layers (EAGLE-3: 1). The other keywords are :class:`EagleDrafter`'s."""
        head = random_head(target.model.config, target.vocab_size, target.dtype, draft_vocab=draft_vocab, seed=seed,
                           layers=layers, scale=scale, num_layers=num_layers)
        return cls(head, target, **kw)

    def use_static_cache(self, max_len: int, *, cuda_graphs: bool = False) -> "EagleDrafter":
        """Build EAGLE-2's re-ranked trees (temperature 0, GREEDY law, ``dynamic`` and ``rerank``) on
        the head's device over a static KV cache of ``max_len`` committed positions, and on CUDA with
        ``cuda_graphs`` replay them as CUDA graphs (:class:`~specot.drafting.eagle.static_tree.StaticTreeDraft`):
        the same trees, one host read per draft. Other trees are drafted as before. Returns ``self``.

        Raises:
            ValueError: ``max_len`` < 1.
        """
        check_count(max_len, "max_len")
        st = self._statics
        if st is not None and st.max_len >= max_len and st.cuda_graphs == bool(cuda_graphs):
            return self  # the cache (and its captured graphs) already fit
        self._statics = StaticTrees(int(max_len), bool(cuda_graphs))
        return self

    # ------------------------------------------------------------------ protocol
    @property
    def vocab_size(self) -> int:
        return self.head.vocab_size

    @property
    def device(self) -> torch.device:
        return self.head.norm.weight.device

    def reset(self) -> None:
        self._ids: list[int] = []
        self._feats = torch.zeros(0, self.head.fc.in_features, dtype=self.head.dtype, device=self.device)
        self._fbase = 0  # absolute position of _feats[0]
        self._k, self._v = self.head.empty_kv()
        self._kbase = 1  # absolute position of KV entry 0 (entry j reads token j and feature j − 1)
        self._last: tuple[Tensor, Tensor] | None = None  # (logits [V_d], feature [H]) of the last entry
        if self._statics is not None:
            self._statics.forget()

    def start(self, prompt_ids: Sequence[int], spec: DraftShape, schedule=None, stop_tokens=frozenset()) -> None:
        """:meth:`Drafter.start`; a :class:`TreeBudget` bounds the dynamic trees (``children``,
        depth), which a static topology (``dynamic=False``) cannot take (``TypeError``)."""
        if isinstance(spec, TreeBudget) and not self.dynamic and not spec.is_chain():
            raise TypeError("an EagleDrafter with dynamic=False drafts a fixed topology: give it a TreeSpec, "
                            f"not a {spec.label()}")
        super().start(prompt_ids, spec, schedule, stop_tokens)
        self._ids = [int(t) for t in prompt_ids]

    def update(self, outcome: DraftOutcome) -> None:
        """Store the target's features of the committed positions (truncating stale ones)."""
        super().update(outcome)
        n = outcome.context_len
        self._truncate(n)
        self._ids = self._ids[:n] + [int(t) for t in outcome.tokens]
        h = outcome.hidden_states
        if h is None or h.shape[0] == 0:
            return
        start = int(outcome.hidden_start)
        last_valid = len(self._ids) - 2  # the last committed token has not been through the target
        h = h[: max(0, last_valid - start + 1)]
        if h.shape[0] == 0:
            return
        h = h.to(device=self.device, dtype=self._feats.dtype)
        if start > self._fend or start < self._fbase:  # a gap (or earlier start): restart from here
            self._feats, self._fbase = h, start
            self._k, self._v = self.head.empty_kv()
            self._kbase, self._last = start + 1, None
            return
        self._truncate(start + 1)  # entries reading a replaced feature (none in the engine's order)
        self._feats = torch.cat([self._feats[: start - self._fbase], h])

    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """A chain (a chain spec) or a tree (EAGLE-2 dynamic or the spec's static topology) after
        ``context``; the empty tree until the target has produced the context's features."""
        t0 = time.perf_counter()
        context = [int(t) for t in context]
        common = 0
        for a, b in zip(self._ids, context):
            if a != b:
                break
            common += 1
        if common < len(self._ids):
            self._truncate(common)
        self._ids = list(context)
        spec = self.spec if self.spec is not None else TreeSpec.sequences(1, max(gamma, 1))
        depth = self.depth_limit(gamma)
        static = self._static_tree(spec, sampling, len(context)) if depth > 0 else None
        if static is not None and self._statics is not None:
            tree = self._statics.draft(context, self._feats, self._fbase, depth, self.vocab_size)
            self.calls += tree.draft_calls
            self.draft_time_s += time.perf_counter() - t0
            return tree
        root = self._catch_up(context) if depth > 0 else None
        if root is None:
            tree = DraftTree.root(context[-1])
        else:
            with trusted_inputs():  # q from standardize: no value checks, no syncs for them
                tree = self._draft(context, root, spec, depth, sampling, generator)
        if tree.q is not None and tree.q.device.type == "cuda":
            torch.cuda.synchronize(tree.q.device)
        self.draft_time_s += time.perf_counter() - t0
        return tree

    # ------------------------------------------------------------------ the draft law
    def draft_distribution(self, logits_d: Tensor, sampling: SamplingConfig) -> Tensor:
        """The draft law q ``[B, V]`` of head logits ``logits_d [B, V_d]``: the standardized
        distribution over the draft vocabulary (``sampling``'s transform at temperature
        ``q_temperature_ratio · T``; one-hot at T = 0) scattered to the target ids ``d2t`` maps to,
        0 on every other target token. Drafts are sampled from exactly this law, so verifying them
        against it is lossless (module docstring)."""
        return self._to_target_vocab(self._draft_probs(logits_d, sampling))

    def _draft_probs(self, logits_d: Tensor, sampling: SamplingConfig) -> Tensor:
        """The draft law over the draft vocabulary ``[B, V_d]`` (:meth:`draft_distribution` before the scatter)."""
        if sampling.temperature > 0 and self.q_temperature_ratio != 1.0:
            sampling = dataclasses.replace(sampling, temperature=sampling.temperature * self.q_temperature_ratio)
        return standardize(logits_d, sampling)  # [B, V_d]

    def _to_target_vocab(self, qd: Tensor) -> Tensor:
        """Scatter draft-vocabulary probabilities ``qd [B, V_d]`` to the target ids: ``[B, V]``, 0 elsewhere."""
        q = torch.zeros(qd.shape[0], self.vocab_size, dtype=qd.dtype, device=qd.device)
        return q.index_copy_(1, self._target_ids, qd)

    # ------------------------------------------------------------------ committed state
    @property
    def _fend(self) -> int:
        return self._fbase + self._feats.shape[0]

    @property
    def _kend(self) -> int:
        return self._kbase + self._k.shape[2]

    def _truncate(self, n: int) -> None:
        """Forget everything that depends on tokens at positions ``>= n``."""
        if self._fend > n:
            self._feats = self._feats[: max(0, n - self._fbase)]
        self._truncate_kv(n)

    def _truncate_kv(self, n: int) -> None:
        """Drop the KV entries at positions ``>= n``."""
        if self._statics is not None:
            self._statics.truncate(n)
        if self._kend > n:
            keep = max(0, n - self._kbase)
            self._k, self._v = self._k[:, :, :keep], self._v[:, :, :keep]
            self._last = None

    @torch.no_grad()
    def _catch_up(self, context: Sequence[int]) -> tuple[Tensor, Tensor] | None:
        """Run the committed entries up to the last context token; returns its (draft logits
        ``[V_d]``, output feature ``[H]``), or ``None`` when the target's features are missing."""
        c = len(context)
        if c - 1 < self._kbase or self._fend < c - 1:  # need features up to position c − 2
            return None
        if self._kend > c:
            self._truncate(c)
        if self._kend == c and self._last is not None:
            return self._last
        if self._kend == c:  # the last entry's outputs were dropped: recompute it
            self._truncate_kv(c - 1)
        lo = self._kend
        toks = torch.tensor([int(t) for t in context[lo:c]], dtype=torch.int64, device=self.device)
        feats = self._feats[lo - 1 - self._fbase: c - 1 - self._fbase]
        T, P = c - lo, self._k.shape[2]
        mask = torch.ones(T, P + T, dtype=torch.bool, device=self.device)
        mask[:, P:] = torch.ones(T, T, dtype=torch.bool, device=self.device).tril()
        pos = torch.arange(lo - 1, c - 1, device=self.device)  # the draft's own positions (EAGLE: j − 1)
        logits, h, k, v = self.head.step(toks, feats, pos, self._k, self._v, mask, fused=True, last_logits=True)
        self._k, self._v = torch.cat([self._k, k], 2), torch.cat([self._v, v], 2)
        self._last = (logits[-1], h[-1])
        self.calls += 1
        return self._last

    # ------------------------------------------------------------------ tree construction
    def _dynamic_tree(self, spec: DraftShape) -> DynamicTree:
        """The shape of a dynamic tree for ``spec`` under this drafter's options."""
        return DynamicTree.for_spec(spec, self.children, self.total_tokens, self.width)

    def _expansion(self) -> Expansion:
        return Expansion(self.stop_tokens, self.min_confidence)

    def _draft(self, context: list[int], root: tuple[Tensor, Tensor], spec: DraftShape, depth: int,
               sampling: SamplingConfig, generator: torch.Generator | None) -> DraftTree:
        """The tree after ``context`` from the catch-up's ``root`` (module docstring): EAGLE-2's
        re-ranked tree at temperature 0 under GREEDY (``dynamic`` and ``rerank``), else a chain, the
        dynamic tree or the spec's topology with children drawn under the law."""
        chain = spec.is_chain()
        law = DraftLaw.IID if chain else spec.law
        dynamic = self.dynamic and not chain
        passes = DraftPasses(self.head, self._k, self._v, len(context), root)
        if dynamic and self.rerank and law == DraftLaw.GREEDY and sampling.greedy:
            tree = draft_reranked(passes, context[-1], depth, self._dynamic_tree(spec), self._expansion(),
                                  self._target_ids, self.vocab_size)
        else:
            shape = ChainShape() if chain else DynamicShape(self._dynamic_tree(spec)) if dynamic else TopologyShape(spec)
            tree = draft_sampled(passes, context[-1], shape, law, depth, sampling, generator,
                                 probs=self._draft_probs, to_target=self._to_target_vocab,
                                 target_ids=self._target_id_list, expansion=self._expansion())
        self.calls += passes.count
        return tree

    def _static_tree(self, spec: DraftShape, sampling: SamplingConfig, context_len: int) -> StaticTreeDraft | None:
        """The static-cache tree builder for this proposal, or ``None`` when the tree is not one it
        builds (use_static_cache not asked for, temperature > 0, a chain, another law or construction,
        a context longer than the static cache)."""
        st = self._statics
        if (st is None or not sampling.greedy or spec.is_chain() or not self.dynamic or not self.rerank
                or spec.law != DraftLaw.GREEDY or not st.fits(context_len)):
            return None
        return st.builder_for(self.head, self._target_ids, spec.depth, self._dynamic_tree(spec), self._expansion())

    @property
    def _static_len(self) -> int | None:
        """Committed positions the static cache holds (``None``: no static cache asked for)."""
        return None if self._statics is None else self._statics.max_len

    @property
    def _static(self) -> StaticTreeDraft | None:
        """The static tree builder in use, if any."""
        return None if self._statics is None else self._statics.builder
