"""EAGLE-2 draft trees built on the device, over a static KV cache: the form CUDA graphs need.

:func:`~specot.drafting.eagle.reranked.draft_reranked` builds EAGLE-2's tree at temperature 0
(Li et al. 2024, EAGLE-2, Sec. 4.1 "expansion" and 4.2 "re-ranking") with host logic between the
draft passes: a host read per depth, Python lists and a KV cache that grows by concatenation. On a
GPU that is about 620 small operations per draft and costs more than a target pass replayed as a
CUDA graph (docs/results.md, "GPU runs": the EAGLE draft).
:class:`StaticTreeDraft` builds the same tree with a fixed shape at every step:

* the head's keys and values live in one static buffer ``[L, kv, S, d]``: slot ``p`` holds the
  committed entry of position ``p`` (token p, the target's feature at p − 1), and the last
  ``(depth − 1)·width`` slots hold the tree's temporary entries;
* a *catch-up* pass runs the newly committed positions (padded to a width of 1, 2, 4 or 8) and
  gives the root's draft logits and feature;
* every depth expands exactly ``width`` frontier nodes — the best by cumulative draft
  log-probability, as in EAGLE-2 — each with its ``children`` children; the ancestors a node attends to
  are a boolean row built on the device;
* the ``budget`` candidates of highest cumulative log-probability are kept (a ``topk``), and ONE
  host read returns them.

The kept set is a tree: a child's score is its parent's plus ``min(log q, −1e−9)`` (float64), so
strictly lower, and a top-k that keeps a node keeps every node that scores higher. Nodes that can
never make the cut are expanded all the same (the host version skips them); their descendants score
lower still, so the kept tree is the host version's (``tests/drafting/test_eagle_static.py``
compares them node for node). The tree is a deterministic function of the context, handed over as
a GREEDY-law tree, so every lossless verifier stays lossless, as for the host version.

On CUDA each catch-up width and the expansion are captured once as CUDA graphs and replayed; off
CUDA (and for a catch-up wider than 8, such as the first one after the prompt) the same functions
run eagerly, which is how the CPU tests check them. :class:`StaticTrees` is the drafter's side: the
builder for the current tree parameters and the committed positions its cache holds.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import torch
from torch import Tensor

from ...models.device import capture_cuda_graph
from ..base import DraftTree
from .passes import DynamicTree, Expansion
from .reranked import ranked_tree

__all__ = ["StaticTreeDraft", "StaticTrees", "CATCH_UP_WIDTHS", "tree_candidates"]

#: Widths a catch-up pass is padded to (the accepted drafts + the bonus token of one iteration).
CATCH_UP_WIDTHS = (1, 2, 4, 8)
#: How much lower than its parent a child's cumulative log-probability is at least (float64): the
#: kept top-``budget`` set is then closed under parents whatever ``topk`` does with ties.
_STRICT = 1e-9


def tree_candidates(gamma: int, children: int, width: int) -> int:
    """Nodes a tree of draft length ``gamma`` (γ levels) drafts before its re-ranking: the root's
    ``children`` children, then ``width`` nodes expanded with ``children`` children each at every further depth."""
    return children + (gamma - 1) * width * children


def _width(t: int) -> int | None:
    return next((w for w in CATCH_UP_WIDTHS if w >= t), None)


class StaticTreeDraft:
    """EAGLE-2's re-ranked draft tree at temperature 0, built on the head's device with static
    shapes (module docstring).

    Args:
        head: the :class:`~specot.drafting.eagle.Eagle3Head`.
        target_ids: int64 ``[V_d]``, the target id of every draft id.
        max_len: committed positions the cache holds (the context and the output, plus the widest catch-up).
        gamma: the draft length γ, the tree's depth D (levels of draft tokens).
        children: children per expanded node.
        width: nodes expanded per depth.
        budget: draft nodes kept (at most ``children + (D − 1)·width·children``).
        stop_tokens: token ids never expanded (EOS).
        min_confidence: τ or ``None``: a node expands only if its path's draft probability is ≥ τ.
        cuda_graphs: capture each catch-up width and the expansion as CUDA graphs (on CUDA only).

    Raises:
        ValueError: a budget larger than the candidates, or sizes below 1.
    """

    def __init__(self, head: Any, target_ids: Tensor, *, max_len: int, gamma: int, children: int, width: int,
                 budget: int, stop_tokens: frozenset[int] = frozenset(), min_confidence: float | None = None,
                 cuda_graphs: bool = False) -> None:
        if min(max_len, gamma, children, width, budget) < 1 or width > children:
            raise ValueError(f"need max_len, gamma, children, width, budget >= 1 and width <= children, got {max_len}, "
                             f"{gamma}, {children}, {width}, {budget}")
        if budget > tree_candidates(gamma, children, width):
            raise ValueError(f"a budget of {budget} nodes exceeds the {tree_candidates(gamma, children, width)} "
                             f"candidates of a depth-{gamma} tree with {children} children per node and width {width}")
        self.head, self.gamma, self.children, self.width, self.budget = head, gamma, children, width, budget
        att = head.midlayer.self_attn
        dev, dt = head.norm.weight.device, head.dtype
        self.device = dev
        self.tree_start = max_len  # slots [max_len, S): the tree's temporary entries
        S = max_len + (gamma - 1) * width
        self.K = torch.zeros(head.num_layers, att.num_kv, S, att.head_dim, dtype=dt, device=dev)
        self.V = torch.zeros_like(self.K)
        self.target_ids = target_ids.to(dev)
        stop = torch.zeros(head.vocab_size, dtype=torch.bool, device=dev)
        if stop_tokens:
            stop[torch.tensor(sorted(stop_tokens), dtype=torch.int64, device=dev)] = True
        self.stop = stop  # [V]: target ids never expanded
        self.log_tau = -math.inf if min_confidence is None else math.log(min_confidence)
        self.slots = torch.arange(S, device=dev)  # [S]
        # device scalars a pass reads (copied in before a replay): the committed range [base, end)
        # and, for a catch-up, its first position
        self.base = torch.ones(1, dtype=torch.int64, device=dev)
        self.end = torch.ones(1, dtype=torch.int64, device=dev)
        self.start = torch.ones(1, dtype=torch.int64, device=dev)
        self.graphs: dict[Any, tuple[Any, Any]] | None = {} if cuda_graphs and dev.type == "cuda" else None
        self._pool: Any = None
        self._bufs: dict[int, dict[str, Tensor]] = {}  # the static inputs of each catch-up width
        self.root_logits = torch.zeros(1, head.draft_vocab_size, dtype=dt, device=dev)
        self.root_feat = torch.zeros(1, head.hidden_size, dtype=dt, device=dev)

    # ------------------------------------------------------------------ passes (fixed shapes)
    def _catch_up(self, tokens: Tensor, feats: Tensor, last: Tensor) -> tuple[Tensor, Tensor]:
        """Committed positions ``start .. start + W − 1`` (rows past ``last`` are padding: their keys land
        in slots that the next catch-up overwrites, and no real row sees them); returns the draft
        logits ``[1, V_d]`` and the feature ``[1, H]`` of row ``last``."""
        W = tokens.shape[0]
        rows = torch.arange(W, device=self.device)
        pos = self.start + rows  # [W] absolute positions
        mask = (self.slots >= self.base) & (self.slots[None, :] <= pos[:, None])  # [W, S]: causal over the committed
        logits, h, _, _ = self.head.step(tokens, feats, pos - 1, self.K, self.V, mask, fused=True, slots=pos,
                                         logit_rows=last)
        return logits, h.index_select(0, last)

    def _expand(self, root_logits: Tensor, root_feat: Tensor, gamma: int) -> Tensor:
        """The tree after the committed context ``[base, end)``: every depth's ``width`` best nodes
        expanded with their ``children`` children; returns ``[budget + 3·C]`` float64 — the kept
        candidates' indices (best first), then every candidate's target token, parent candidate
        (−1: the root) and cumulative log-probability (C candidates)."""
        children, w, dev = self.children, self.width, self.device
        C = tree_candidates(gamma, children, w)
        lp = torch.log_softmax(root_logits.float(), dim=-1)[0].topk(children)  # best first
        toks, pars, scores = [self.target_ids[lp.indices]], [torch.full((children,), -1, device=dev)], \
            [lp.values.double().clamp_max(-_STRICT)]
        f_idx = torch.arange(children, device=dev)  # candidate index of every node that may expand
        f_feat = root_feat.expand(children, -1)  # [children, H]: the feature their pass reads (the parent's output)
        anc = torch.zeros(children, (self.gamma - 1) * w, dtype=torch.bool, device=dev)  # tree slots each attends to
        committed = (self.slots >= self.base) & (self.slots < self.end)  # [S]
        offset = children
        for d in range(1, gamma):
            score_all, tok_all = torch.cat(scores), torch.cat(toks)
            cand = score_all.index_select(0, f_idx)
            cand = torch.where(self.stop[tok_all.index_select(0, f_idx)] | (cand < self.log_tau), -math.inf, cand)
            top = cand.topk(w)  # the frontier, best first; a node that may not expand scores -inf, and so do its children
            best, f_score = top.indices, top.values
            node = f_idx.index_select(0, best)  # their candidate indices
            feat = f_feat.index_select(0, best)
            mine = torch.zeros(w, anc.shape[1], dtype=torch.bool, device=dev)
            mine[:, (d - 1) * w: d * w] = torch.eye(w, dtype=torch.bool, device=dev)
            anc = anc.index_select(0, best) | mine  # [w, (D−1)·w]: ancestors in the tree, and itself
            slot = self.tree_start + (d - 1) * w + torch.arange(w, device=dev)
            mask = committed.expand(w, -1).clone()
            mask[:, self.tree_start:self.tree_start + anc.shape[1]] = anc
            pos = (self.end - 2 + d).expand(w)  # rotary positions: the parent's + 1 (the draft's own, j − 1)
            logits, h, _, _ = self.head.step(tok_all.index_select(0, node), feat, pos, self.K, self.V, mask,
                                             fused=False, slots=slot)
            lp = torch.log_softmax(logits.float(), dim=-1).topk(children)  # [w, children] each
            toks.append(self.target_ids[lp.indices].reshape(-1))
            pars.append(node.repeat_interleave(children))
            scores.append((f_score[:, None] + lp.values.double().clamp_max(-_STRICT)).reshape(-1))
            f_idx = offset + torch.arange(w * children, device=dev)
            f_feat = h.repeat_interleave(children, dim=0)
            anc = anc.repeat_interleave(children, dim=0)
            offset += w * children
        score_all = torch.cat(scores)  # [C]
        keep = score_all.topk(min(self.budget, C)).indices
        return torch.cat([keep.double(), torch.cat(toks).double(), torch.cat(pars).double(), score_all])

    # ------------------------------------------------------------------ graphs
    def _capture(self, fn: Callable[[], Any]) -> tuple[Any, Any]:
        """A CUDA graph of ``fn()`` and its outputs, which every ``replay()`` overwrites in place;
        the builder's graphs share one memory pool."""
        graph, out, self._pool = capture_cuda_graph(fn, self.device, self._pool)
        return graph, out

    def _run(self, key: Any, fn: Callable[[], Any]) -> Any:
        """``fn()`` eagerly, or its CUDA graph captured under ``key`` (captured at the first call)
        replayed: the outputs are then the capture's, overwritten in place by every replay."""
        if self.graphs is None:
            return fn()
        if key not in self.graphs:
            try:
                self.graphs[key] = self._capture(fn)
            except Exception as exc:  # noqa: BLE001 - any capture failure: warn once, run eagerly from now on
                warnings.warn(f"capturing the EAGLE draft as a CUDA graph failed ({type(exc).__name__}: {exc}); "
                              "drafting without graphs", RuntimeWarning, stacklevel=3)
                self.graphs = None
                return fn()
        graph, out = self.graphs[key]
        graph.replay()
        return out

    # ------------------------------------------------------------------ the one call
    @torch.no_grad()
    def draft(self, new_tokens: list[int], new_feats: Tensor, start: int, base: int, gamma: int
              ) -> tuple[list[int], list[int], list[int], list[float]]:
        """Catch up on the committed positions ``start .. start + T − 1`` (``new_tokens [T]``, the
        target's features ``new_feats [T, F]`` of the positions before them; ``base``: the first
        valid entry), then build the tree after them. Returns, over the C candidates, the kept
        indices (best first; nodes scored −inf are the caller's to drop), the target tokens, the
        parent indices (−1: root) and the cumulative log-probabilities. One host read."""
        T = len(new_tokens)
        end = start + T
        if not 1 <= gamma <= self.gamma:
            raise ValueError(f"gamma {gamma} outside [1, {self.gamma}] (the draft length γ this builder was made for)")
        if end + CATCH_UP_WIDTHS[-1] > self.tree_start:
            raise ValueError(f"the static draft cache holds {self.tree_start - CATCH_UP_WIDTHS[-1]} positions; "
                             f"position {end} is past it")
        dev = self.device
        self.base.fill_(base)
        self.end.fill_(end)
        self.start.fill_(start)
        W = _width(T)
        if W is None:  # a long catch-up (the first one after the prompt): eager, unpadded
            toks = torch.tensor(new_tokens, dtype=torch.int64, device=dev)
            logits, feat = self._catch_up(toks, new_feats, torch.tensor([T - 1], device=dev))
        else:
            buf = self._buffers(W)
            buf["tokens"][:T].copy_(torch.tensor(new_tokens, dtype=torch.int64), non_blocking=True)
            buf["feats"][:T].copy_(new_feats)
            buf["last"].fill_(T - 1)
            logits, feat = self._run(("catch_up", W), lambda: self._catch_up(buf["tokens"], buf["feats"], buf["last"]))
        self.root_logits.copy_(logits)  # the expansion's fixed inputs
        self.root_feat.copy_(feat)
        flat = self._run(("expand", gamma), lambda: self._expand(self.root_logits, self.root_feat, gamma)) \
            if gamma == self.gamma else self._expand(self.root_logits, self.root_feat, gamma)
        out = flat.tolist()  # the one host read
        C = tree_candidates(gamma, self.children, self.width)
        n_keep = min(self.budget, C)
        keep = [int(x) for x in out[:n_keep]]
        toks_l = [int(x) for x in out[n_keep:n_keep + C]]
        pars_l = [int(x) for x in out[n_keep + C:n_keep + 2 * C]]
        return keep, toks_l, pars_l, out[n_keep + 2 * C:]

    def _buffers(self, W: int) -> dict[str, Tensor]:
        """The static inputs of a catch-up of width ``W`` (made once)."""
        if W not in self._bufs:
            dev = self.device
            self._bufs[W] = {"tokens": torch.zeros(W, dtype=torch.int64, device=dev),
                             "feats": torch.zeros(W, self.head.fc.in_features, dtype=self.head.dtype, device=dev),
                             "last": torch.zeros(1, dtype=torch.int64, device=dev)}
        return self._bufs[W]


class StaticTrees:
    """An EAGLE drafter's static on-device trees (``EagleDrafter.use_static_cache``): the
    :class:`StaticTreeDraft` of the current tree parameters and the committed positions its cache
    holds, ``[base, end)``.

    Args:
        max_len: committed positions the static cache holds.
        cuda_graphs: replay the builder's passes as CUDA graphs (on CUDA).
    """

    def __init__(self, max_len: int, cuda_graphs: bool) -> None:
        self.max_len, self.cuda_graphs = max_len, cuda_graphs
        self.builder: StaticTreeDraft | None = None
        self._key: tuple[Any, ...] | None = None  # the tree parameters the builder was made for
        self.base = self.end = 1

    def forget(self) -> None:
        """A new generation: the cache holds nothing (the builder and its graphs are kept)."""
        self.base = self.end = 1

    def truncate(self, n: int) -> None:
        """Forget the entries at positions ``>= n``."""
        self.end = min(self.end, max(n, 1))

    def fits(self, context_len: int) -> bool:
        """Whether a context of ``context_len`` tokens, plus the widest catch-up, fits the cache."""
        return context_len + CATCH_UP_WIDTHS[-1] <= self.max_len

    def builder_for(self, head: Any, target_ids: Tensor, gamma: int, shape: DynamicTree,
                    expansion: Expansion) -> StaticTreeDraft:
        """The builder of ``shape``'s trees of draft length ``gamma`` (its sizes cut to what the head's
        draft vocabulary and the candidates allow) under ``expansion``; a new one (and an empty
        cache) when the parameters changed."""
        children = min(shape.children, head.draft_vocab_size)
        width = min(shape.width, children)
        budget = min(shape.budget, tree_candidates(gamma, children, width))
        key = (gamma, children, width, budget, expansion.stop_tokens, expansion.min_confidence)
        if self.builder is None or self._key != key:
            self.builder = StaticTreeDraft(head, target_ids, max_len=self.max_len, gamma=gamma, children=children,
                                           width=width, budget=budget, stop_tokens=expansion.stop_tokens,
                                           min_confidence=expansion.min_confidence, cuda_graphs=self.cuda_graphs)
            self._key, self.base, self.end = key, 1, 1
        return self.builder

    def draft(self, context: list[int], feats: Tensor, feats_base: int, gamma: int, vocab_size: int) -> DraftTree:
        """EAGLE-2's re-ranked tree after ``context`` from the builder (made by :meth:`builder_for`):
        the committed positions the cache lacks are caught up (at least the last one, whose logits
        are the root's), then ONE call. ``feats [N, k·H_t]`` are the target's fused features of
        positions ``feats_base ..``; the empty tree where those of positions up to ``c − 2`` are
        missing. The tree's ``draft_calls`` are the catch-up and ``gamma − 1`` expansion passes."""
        st, c = self.builder, len(context)
        if st is None:
            raise RuntimeError("StaticTrees.draft needs a builder: call builder_for() first")
        if c - 1 < max(feats_base + 1, 1) or feats_base + feats.shape[0] < c - 1:
            return DraftTree.root(context[-1])
        if self.base < feats_base + 1:  # the features restart later (a gap): so does the cache
            self.base = self.end = feats_base + 1
        start = max(min(self.end, c - 1), self.base)
        gamma = min(gamma, st.gamma)
        keep, toks, pars, score = st.draft(context[start:c], feats[start - 1 - feats_base: c - 1 - feats_base],
                                           start, self.base, gamma)
        self.end = c
        nodes = sorted(i + 1 for i in keep if score[i] > -math.inf)  # root = node 0
        return ranked_tree(context[-1], [context[-1]] + toks, [-1] + [p + 1 for p in pars], [0.0] + score, nodes,
                           gamma, vocab_size, q_device="cpu")
