"""Suffix decoding: model-free draft TREES from every earlier occurrence of the current suffix.

SuffixDecoding (Oliaro et al. 2024, arXiv:2411.04975; served in vLLM / ArcticInference as "suffix
decoding") generalises prompt lookup (one most recent match → one chain) to a tree: every earlier
occurrence of the context's current suffix — in the prompt and in the text generated so far —
proposes the tokens that followed it; continuations that share a prefix merge into one tree; each
node is scored by the frequency of its continuation; the tree is grown best-first by score under a
node budget.

**Data structure** (:class:`SuffixIndex`). A depth-bounded suffix trie of the *reversed* sequence:
walking from its root along ``x_i, x_{i−1}, .., x_{i−m+1}`` reaches the node of the m-gram that
ends at position i, and every node stores the end positions of its m-gram (ascending). Appending
one token walks ``max_n`` nodes and appends one position to each: **O(max_n) per new token**
(:meth:`SuffixIndex.extend`, called from :meth:`SuffixDrafter.update` with the committed tokens).
Matching the current suffix walks the same path from the last token backwards: O(max_n) to find
the longest match, then the most recent occurrences of each match length are read off the nodes.

**Trees.** Occurrences are taken longest match first (``max_n`` down to ``min_n``; each end position
once, at its longest match length m, weighted ``match_weight ** m`` — times ``recency ** r`` for the
r-th most recent of that length, off by default), at most ``max_occurrences``.
Their continuations (up to the depth γ, stopped after an EOS) are merged into a weighted trie. A
child's conditional frequency is ``W(child)/W(node) · n(child)/(n(child) + κ)`` (weights W, raw
counts n; κ discounts continuations seen only a few times), a node's score the product of the
conditional frequencies on its path (≤ its parent's, so best-first expansion is a top-N by score
and always a connected tree). The tree keeps at most ``max_nodes`` nodes with score ≥
``min_score``, at most ``children`` children per node.

**Adaptive budget.** With calibrated scores ŝ_i = min(1, a·s_i) (s in best-first order) the
expected number of accepted drafts of the first N nodes is Σ_{i≤N} ŝ_i (a node is accepted iff its
whole path is; the expected accepted length is the sum over nodes of that probability). The cost of
a pass with N ≥ 1 draft tokens is modelled as ``t(N)/t(0) = 1 + f + c·N`` — f the fixed cost of
verifying any draft at all (the tree walk, the residual and bonus draws), c the cost per scored
token — and the drafter keeps the N ≤ ``max_nodes`` maximising ``(1 + Σ_{i≤N} ŝ_i) / (1 + f + c·N)``
(tokens per unit of target time), or N = 0 (no draft: a plain target step) when no N beats 1. The
calibration ``a = (accepted + 2) / (predicted + 2)`` (exponentially decayed sums over past
iterations) grows when drafts are accepted more often than predicted — the budget grows — and
shrinks when less — the budget shrinks, down to no draft (at T = 1 on prose most steps draft
little). Defaults f = 0.05 and c = 0.03: SmolLM2-135M in bf16 on a 2-core CPU with native bf16,
``specot bench speedup`` cost curve t(5)/t(1) = 1.12, t(7)/t(1) = 1.25, and the time outside the
forward passes of a drafted step about 4 points above an autoregressive step's
(``docs/bench/suite/code.json``); ``adaptive=False`` (or f = c = 0) keeps every node
scored ≥ ``min_score`` up to ``max_nodes`` — the largest block efficiency, at a larger pass.
A measured curve (``pass_cost``: B ↦ r(B) = t(B)/t(1), e.g. a
:class:`specot.calibration.PassCostCurve` measured on this machine) replaces the linear model: the
first N nodes then cost ``r(1 + N)`` one-token passes, so on a target whose wide passes cost their
width no draft pays and every step is a plain one.

**Copy model** (``copy_model=True``). Instead of the count-discounted frequencies and the one
calibration, a child's conditional acceptance is ``h(L) · W(child)/W(node)``: L is the match
length behind it — the longest earlier occurrence's match with the context's suffix (read past
``max_n`` by comparing tokens, up to :data:`COPY_MATCH_CAP`) plus the node's depth − 1, since each
accepted draft lengthens the match — and h(L) the rate at which the token that followed such a
match is the target's next token, per bucket of L (:data:`COPY_EDGES`): a Beta-style mean of the
nodes verified in this generation (weight W(child)/W(node) each) around the prior
:data:`COPY_PRIOR` (measured: SmolLM2-135M-Instruct on seven prompt sets, greedy at T = 0, the
target's probability of the copied token at T = 1, interpolated between; ``copy_weight`` pseudo
nodes). Long copies then draft long chains and short matches, where text rarely repeats, none.
With ``copy_anchor=True`` the source is drafted again right after an edit breaks a verified copy
(:class:`~specot.drafting.copy.CopyAnchor`: resync, insertion and replacement continuations, each
its own learned bucket), where the suffix match alone would wait for several new tokens.

**Corpus** (optional :class:`NGramCounts` — the top continuations of every corpus m-gram, m ≤ 3,
with their frequencies; ``specot.api.load_drafter("suffix")`` builds it from ``pydoc_data.topics``
— or an :class:`~specot.drafting.ngram.NGramTable`). At every node the corpus continuations of the
node's path (through a corpus match of ≥ ``corpus_min_n`` tokens: the match-length gate) join the
context's, each scored ``g · frequency`` given its parent, where the gate g = (accepted + 0.3) /
(frequency + 1) is measured over the corpus nodes verified so far (decayed): when corpus drafts are
rarely accepted (as at T = 1) g falls, their scores fall below ``min_score`` or out of the budget,
and the corpus is no longer drafted (the score gate).

**Verification (lossless at any temperature).** The children of a node are distinct tokens chosen
deterministically from the past. They are handed to the engine as the GREEDY draft law
(:data:`DraftLaw.GREEDY`: drafts 1..n−1 = top-(n−1) of q, draft n drawn from q without them) with a
q supported on the children only, ∝ their scores and strictly decreasing in draft order — so the
top-(n−1) of q are drafts 1..n−1 in order and the last child is the only token left: the drawn
draft is deterministic too, and the drafts ARE a draw of the GREEDY law from q. Hu et al.'s greedy
verifier (``greedy``) then accepts the last child with probability p(x_n) (q without the top is
δ_{x_n}) and otherwise draws y from p without x_n, accepting y if it is another child: acceptance
p(children) — the most any rule can accept with these drafts, since the emitted token follows p
and is a draft only when it is in the children — and the emitted token follows p exactly (tests:
exact enumeration). A single child is a one-hot q (speculative sampling). q (float64, so its rows
sum to 1 within every dtype's tolerance) lives on the CPU — the drafter has no device; the engine
moves the rows it needs to p's device and dtype (``.to``).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch

from .._validation import check_count
from ..laws import DraftLaw
from ..sampling import SamplingConfig
from .copy import (ALIGN_KINDS, ALIGN_MATCH, ALIGN_PRIOR, COPY_EDGES, COPY_MATCH_CAP, COPY_PRIOR, CopyAnchor,
                   copy_bucket)
from .base import DraftOutcome, DraftSchedule, DraftTree, Drafter, greedy_q
from .ngram import NGramCounts, NGramTable
from .pricing import best_size, block_values, pass_cost
from .tree import DraftShape, TreeBudget

__all__ = ["SuffixIndex", "SuffixDrafter", "SuffixSettings"]


class _RNode:
    __slots__ = ("pos", "kids")

    def __init__(self) -> None:
        self.pos: list[int] = []
        self.kids: dict[int, _RNode] = {}


class SuffixIndex:
    """End positions of every m-gram (``1 <= m <= max_n``) of a growing token sequence.

    A suffix trie of the reversed sequence, cut at depth ``max_n``: the node reached from the root
    along ``x_i, x_{i−1}, .., x_{i−m+1}`` lists (ascending) every end position j with
    ``x_{j−m+1..j} == x_{i−m+1..i}``. :meth:`extend` costs O(``max_n``) per appended token.

    Raises:
        ValueError: ``max_n < 1``.
    """

    def __init__(self, max_n: int = 8, tokens: Sequence[int] = ()) -> None:
        check_count(max_n, "max_n")
        self.max_n = max_n
        self.tokens: list[int] = []
        self._root = _RNode()
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append ``tokens``; every new end position is filed under its ``max_n`` m-grams."""
        seq = self.tokens
        for t in tokens:
            seq.append(int(t))
            i = len(seq) - 1
            node = self._root
            for j in range(i, max(-1, i - self.max_n), -1):
                nxt = node.kids.get(seq[j])
                if nxt is None:
                    nxt = node.kids[seq[j]] = _RNode()
                nxt.pos.append(i)
                node = nxt

    def sync(self, tokens: Sequence[int]) -> "SuffixIndex":
        """This index extended to ``tokens`` when they continue its sequence (its last ≤ 8 tokens
        are ``tokens``' at the same positions), else a new index of ``tokens`` (a new generation)."""
        n = len(self.tokens)
        tail = min(n, 8)
        if n <= len(tokens) and [int(t) for t in tokens[n - tail:n]] == self.tokens[n - tail:]:
            self.extend(tokens[n:])
            return self
        return SuffixIndex(self.max_n, tokens)

    def followers(self, query: Sequence[int], min_n: int = 1, max_occurrences: int = 64) -> tuple[int, list[int]]:
        """What followed the longest suffix of ``query`` that occurs in the sequence with a successor.

        ``query`` need not be in the index (a draft path after the committed tokens): its last m
        tokens are matched, m from ``min_n`` up to ``max_n``. Returns ``(m, next_tokens)``: the
        token after each of the most recent ``max_occurrences`` occurrences of that m-gram, oldest
        first; ``(0, [])`` when no suffix of ``min_n`` or more tokens occurs with a successor.
        O(``max_n`` + occurrences).
        """
        seq, node = self.tokens, self._root
        last = len(seq) - 1
        best_m, best = 0, []
        for m, tok in enumerate(reversed(query[-self.max_n:]), start=1):
            node = node.kids.get(int(tok))  # type: ignore[assignment]
            if node is None:
                break
            pos = node.pos
            n_valid = len(pos) - (1 if pos and pos[-1] == last else 0)  # the last token has no successor yet
            if n_valid > 0 and m >= min_n:
                best_m, best = m, pos[max(0, n_valid - max_occurrences):n_valid]
        return best_m, [seq[j + 1] for j in best]

    def match_nodes(self, end: int | None = None) -> list[list[int]]:
        """Position lists of the suffixes of ``tokens[: end + 1]`` (default: the whole sequence):
        entry ``m − 1`` lists the end positions of the m-gram ending at ``end``, for m = 1 up to the
        longest m-gram stored (at most ``max_n``)."""
        seq = self.tokens
        end = len(seq) - 1 if end is None else end
        out: list[list[int]] = []
        node = self._root
        for j in range(end, max(-1, end - self.max_n), -1):
            node = node.kids.get(seq[j])  # type: ignore[assignment]
            if node is None:
                break
            out.append(node.pos)
        return out

    def occurrences(self, m: int, end: int | None = None) -> list[int]:
        """End positions of the m-gram ending at ``end`` (default: the last token), ascending;
        ``[]`` when ``m > max_n`` or the sequence is shorter than m."""
        nodes = self.match_nodes(end)
        return list(nodes[m - 1]) if 1 <= m <= len(nodes) else []

    def longest_match(self, min_count: int = 2) -> int:
        """Length of the longest suffix of the sequence (≤ ``max_n``) occurring at least ``min_count``
        times (itself included); 0 when none."""
        best = 0
        for m, pos in enumerate(self.match_nodes(), start=1):
            if len(pos) >= min_count:
                best = m
        return best


@dataclass
class _TNode:
    token: int
    weight: float = 0.0
    count: int = 0
    kids: dict[int, "_TNode"] = field(default_factory=dict)
    score: float = 1.0
    cond: float = 1.0  # conditional frequency given the parent
    origin: str = "context"  # "context" or "corpus"
    freq: float = 0.0  # corpus frequency (before the gate), for a corpus node
    tail: tuple[int, ...] = ()  # the last corpus.n tokens of the path (corpus lookups)
    match: int = 0  # copy model: the longest match length behind this node (its occurrence's + depth - 1);
    # -(k + 1) for the first node of a copy anchor's continuation of kind k
    src: int = -1  # the position of this token in the sequence, in its heaviest occurrence
    src_w: float = 0.0  # that occurrence's weight
    parent: "_TNode | None" = field(default=None, repr=False)


@dataclass(frozen=True)
class SuffixSettings:
    """The suffix drafter's settings and their defaults, one place: :class:`SuffixDrafter`'s keyword
    arguments default to these, and the plan's ``suffix`` draft kind
    (:mod:`specot.plan.kinds.suffix`) and the vLLM integration read them from here. Each field is
    the :class:`SuffixDrafter` argument of that name (its docstring)."""

    max_n: int = 8  # longest suffix matched (the index depth)
    min_n: int = 1  # shortest suffix match that drafts
    max_nodes: int = 24  # node budget, a hard cap on the tree size
    children: int = 4  # children per node, at most
    max_occurrences: int = 32  # occurrences read per proposal
    match_weight: float = 2.0  # an occurrence matching m tokens weighs match_weight ** m
    recency: float = 1.0  # the r-th most recent occurrence weighs recency ** r more (1: frequency only)
    kappa: float = 0.5  # count discount κ of the conditional frequencies
    min_score: float = 0.01  # nodes scored below this are never drafted
    cost_per_token: float = 0.03  # c of the linear cost model t(N)/t(0) = 1 + f + c·N
    cost_fixed: float = 0.05  # f of that model
    adaptive: bool = True  # adapt the budget through the calibrated cost model
    corpus_min_n: int = 1  # shortest corpus context accepted for a corpus draft
    copy_model: bool = False  # score context nodes by the copy model
    copy_weight: float = 4.0  # pseudo nodes of the copy prior in each bucket's rate
    copy_anchor: bool = False  # copy model: draft the source again where a verified copy stopped
    draft_overhead: float = 0.0  # a drafted step's work beyond its pass, in one-token passes


_DEFAULT = SuffixSettings()


class SuffixDrafter(Drafter):
    """Suffix-decoding drafter: draft trees from earlier occurrences of the current suffix.

    See the module docstring for the data structure, scoring, budget and verification. The
    defaults below are :class:`SuffixSettings`'.

    Args:
        vocab_size: the target's vocabulary size (q rows are ``[V]``); ``None`` proposes only the
            best chain with ``q = None`` (verified as one-hot q by any single-draft verifier).
        max_n: longest suffix matched (the index depth), default 8.
        min_n: shortest suffix matched, default 1.
        max_nodes: node budget (hard cap on the tree size), default 24.
        children: children per node, at most (also cut to the budget's ``children``: the
            :class:`~specot.drafting.TreeBudget` handed to :meth:`start`, or the one a
            :class:`~specot.drafting.TreeSpec` gives, :meth:`TreeBudget.of <specot.drafting.TreeBudget.of>`).
        max_occurrences: occurrences read per proposal (most recent first, longest match first).
        match_weight: an occurrence matching m tokens weighs ``match_weight ** m`` (default 2).
        recency: the r-th most recent occurrence of one match length weighs ``recency ** r`` more
            (default 1: frequency only).
        kappa: count discount κ of the conditional frequencies (default 0.5).
        min_score: nodes scored below this are never drafted (default 0.01).
        cost_per_token: c of the cost model ``t(N)/t(0) = 1 + f + c·N`` (default 0.03).
        cost_fixed: f of that model, the cost of verifying any draft at all (default 0.05);
            ``cost_per_token = cost_fixed = 0`` keeps every node up to ``max_nodes``.
        pass_cost: a measured cost curve B ↦ r(B), the cost of a pass over B tokens in one-token
            passes (``r(1) = 1``; e.g. a :class:`specot.calibration.PassCostCurve`), used instead of
            the linear model when given (default ``None``: the linear model).
        adaptive: adapt the budget through the calibrated cost model (default True); ``False``
            keeps every node scored ≥ ``min_score`` up to ``max_nodes``.
        corpus: optional corpus — :class:`NGramCounts` (several continuations with frequencies)
            or :class:`NGramTable` (the most frequent one) — whose continuations of every path
            join the tree, scored ``corpus_gate × frequency``.
        corpus_min_n: shortest corpus context (match length) accepted for a corpus draft (default 1).
        copy_model: score context nodes by the copy model (module docstring): the copy rate h(L)
            of their match length, learned in each generation around :data:`COPY_PRIOR`, instead
            of κ and the one calibration (default False).
        copy_weight: pseudo nodes of the prior in each bucket's rate (default 4).
        copy_anchor: with the copy model, draft the source again right after the target leaves a
            verified copy (an edit), from where it stopped (:class:`~specot.drafting.copy.CopyAnchor`:
            resync, insertion and replacement continuations, each its own copy-rate bucket;
            default False).
        draft_overhead: what a drafted step costs beyond its pass and a plain step's work, in
            one-token passes (verifying the chain, keeping its path in the cache, copying its
            logits rows), added to ``cost(N)`` for N ≥ 1 (default 0).

    Raises:
        ValueError: invalid parameters.
    """

    name = "suffix"

    def __init__(self, vocab_size: int | None = None, *, max_n: int = _DEFAULT.max_n, min_n: int = _DEFAULT.min_n,
                 max_nodes: int = _DEFAULT.max_nodes, children: int = _DEFAULT.children,
                 max_occurrences: int = _DEFAULT.max_occurrences, match_weight: float = _DEFAULT.match_weight,
                 recency: float = _DEFAULT.recency, kappa: float = _DEFAULT.kappa, min_score: float = _DEFAULT.min_score,
                 cost_per_token: float = _DEFAULT.cost_per_token, cost_fixed: float = _DEFAULT.cost_fixed,
                 adaptive: bool = _DEFAULT.adaptive, corpus: "NGramCounts | NGramTable | None" = None,
                 corpus_min_n: int = _DEFAULT.corpus_min_n, pass_cost: Callable[[int], float] | None = None,
                 copy_model: bool = _DEFAULT.copy_model, copy_weight: float = _DEFAULT.copy_weight,
                 copy_anchor: bool = _DEFAULT.copy_anchor, draft_overhead: float = _DEFAULT.draft_overhead) -> None:
        super().__init__()
        for what, v, lo in (("max_n", max_n, 1), ("min_n", min_n, 1), ("max_nodes", max_nodes, 1),
                            ("children", children, 1), ("max_occurrences", max_occurrences, 1),
                            ("corpus_min_n", corpus_min_n, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{what} must be an integer >= {lo}, got {v!r}")
        if min_n > max_n:
            raise ValueError(f"need min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        if vocab_size is not None and (isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 1):
            raise ValueError(f"vocab_size must be a positive integer or None, got {vocab_size!r}")
        if not 0.0 < recency <= 1.0:
            raise ValueError(f"recency must be in (0, 1], got {recency!r}")
        if not match_weight >= 1.0 or not kappa >= 0.0 or not 0.0 <= min_score < 1.0 or not cost_per_token >= 0.0 \
                or not cost_fixed >= 0.0:
            raise ValueError("need match_weight >= 1, kappa >= 0, 0 <= min_score < 1, cost_per_token >= 0 and "
                             "cost_fixed >= 0")
        if not copy_weight > 0.0:
            raise ValueError(f"copy_weight must be > 0, got {copy_weight!r}")
        if not draft_overhead >= 0.0:
            raise ValueError(f"draft_overhead must be >= 0, got {draft_overhead!r}")
        if pass_cost is not None and not callable(pass_cost):
            raise ValueError(f"pass_cost must be a callable B -> r(B) or None, got {type(pass_cost).__name__}")
        self._vocab = vocab_size
        self.max_n, self.min_n, self.max_nodes, self.children = max_n, min_n, max_nodes, children
        self.max_occurrences, self.match_weight, self.kappa = max_occurrences, float(match_weight), float(kappa)
        self.recency = float(recency)
        self.min_score, self.cost_per_token, self.adaptive = float(min_score), float(cost_per_token), adaptive
        self.cost_fixed = float(cost_fixed)
        self.pass_cost = pass_cost
        self.corpus, self.corpus_min_n = corpus, corpus_min_n
        self.copy_model, self.copy_weight = bool(copy_model), float(copy_weight)
        self.anchor = CopyAnchor() if copy_model and copy_anchor else None
        self.draft_overhead = float(draft_overhead)
        #: the measurement that priced ``draft_overhead`` when the plan measured it
        #: (:func:`specot.plan.step_work.suffix_draft_overhead`), else None
        self.step_work: dict | None = None
        self.index = SuffixIndex(max_n)
        self.reset()

    # ------------------------------------------------------------------ protocol
    @property
    def vocab_size(self) -> int | None:
        return self._vocab

    def reset(self) -> None:
        self.index = SuffixIndex(self.max_n)
        # calibration of context scores (decayed sums of predicted / observed accepted drafts)
        self._pred, self._obs = 0.0, 0.0
        # acceptance of corpus nodes vs their corpus frequency (decayed sums over tested nodes)
        self._corpus_acc, self._corpus_freq = 0.0, 0.0
        self._last_pred = 0.0
        self._last_value = 1.0  # expected tokens per unit of target time of the last proposal
        self._last_tree: DraftTree | None = None
        self._last_corpus: list[tuple[int, int, float]] = []  # (node, parent, frequency) of corpus nodes
        self.budgets: list[int] = []  # tree size chosen at each proposal (for reports)
        # copy model: per match-length bucket, verified nodes (weighted by their share) and accepted ones
        buckets = len(COPY_EDGES) + len(ALIGN_KINDS)  # match lengths, then the anchor's kinds
        self._copy_n, self._copy_acc = [0.0] * buckets, [0.0] * buckets
        self._set_copy_prior(0.0)
        self._last_src: dict[int, tuple[int, int]] = {}  # node id -> (source position, match): copy anchor
        self._starts: list[tuple[int, int]] = []  # the anchor's continuations for this proposal
        if self.anchor is not None:
            self.anchor.reset()
        self._last_copy: list[tuple[int, int, int, float]] = []  # (node, parent, bucket, share) of context nodes

    @property
    def calibration(self) -> float:
        """a = (observed + 2)/(predicted + 2): how much more often drafts are accepted than scored."""
        return (self._obs + 2.0) / (self._pred + 2.0)

    @property
    def corpus_gate(self) -> float:
        """g = (accepted + 0.3)/(frequency + 1) over the corpus nodes verified so far (decayed): a
        corpus continuation of frequency f is scored g·f given its parent (prior g = 0.3)."""
        return (self._corpus_acc + 0.3) / (self._corpus_freq + 1.0)

    def start(self, prompt_ids: Sequence[int], spec: DraftShape, schedule: DraftSchedule | None = None,
              stop_tokens: frozenset[int] = frozenset()) -> None:
        """:meth:`Drafter.start`: ``spec`` is the budget (a :class:`~specot.drafting.TreeBudget`, or a
        :class:`~specot.drafting.TreeSpec` read as :meth:`TreeBudget.of <specot.drafting.TreeBudget.of>`
        gives); the prompt is indexed."""
        super().start(prompt_ids, spec, schedule, stop_tokens)
        self.index.extend(prompt_ids)

    def expected_value(self) -> float:
        """Expected tokens per unit of target time of the last proposal under the cost model:
        ``(1 + Σ_i min(1, a·s_i)) / cost(N)`` for a tree of N ≥ 1 nodes (``r(1 + N)`` of a measured
        curve, else ``1 + f + c·N``), 1 for the empty tree
        (a plain target step)."""
        return self._last_value

    def update(self, outcome: DraftOutcome) -> None:
        """Advance the schedule, learn the acceptance of its own tree (not of a tree another drafter
        proposed, as in :class:`~specot.drafting.hybrid.HybridDrafter`), and index the committed
        tokens (O(max_n) each)."""
        own = outcome.tree is self._last_tree
        if own:
            super().update(outcome)
        decay = 0.9
        if own and outcome.tree.size:
            self._pred = decay * self._pred + self._last_pred
            self._obs = decay * self._obs + outcome.accepted
        if own and self._last_corpus:
            reached = {0, *outcome.path}
            tested = [(node, f) for node, parent, f in self._last_corpus if parent in reached]
            if tested:
                self._corpus_acc = decay * self._corpus_acc + sum(1 for node, _ in tested if node in reached)
                self._corpus_freq = decay * self._corpus_freq + sum(f for _, f in tested)
        if own and self._last_copy:
            reached = {0, *outcome.path}
            for node, parent, b, share in self._last_copy:
                if parent in reached:  # the node was put to the test
                    self._copy_n[b] += share
                    self._copy_acc[b] += 1.0 if node in reached else 0.0
        if len(self.index) == outcome.context_len:
            self.index.extend(outcome.tokens)
            if own and outcome.tree.size and self.anchor is not None:
                self._observe_anchor(outcome)
        self._last_pred, self._last_corpus, self._last_tree, self._last_copy = 0.0, [], None, []
        self._last_src = {}

    def _observe_anchor(self, outcome: DraftOutcome) -> None:
        """Tell the copy anchor where the verified draft's source would have gone on: the source
        position after the last accepted node's, or the first drafted node's when none was accepted."""
        if outcome.path:  # the token after the last accepted node's
            node, step = outcome.path[-1], 1
        else:  # the first drafted node's own
            first = outcome.tree.child_of[0].values() if outcome.tree.child_of else ()
            node, step = (min(first) if first else -1), 0
        src, match = self._last_src.get(node, (None, 0))
        assert self.anchor is not None
        self.anchor.observe(self.index.tokens, None if src is None else src + step,
                            outcome.context_len + len(outcome.path), len(outcome.path), match)

    # ------------------------------------------------------------------ drafting
    def copy_rate(self, match: int) -> float:
        """The copy model's h(L) for a match of ``match`` tokens: the bucket's verified nodes of this
        generation around the prior, ``(accepted + w·h0) / (verified + w)``."""
        b = _bucket(match)
        return (self._copy_acc[b] + self.copy_weight * self._copy_prior[b]) / (self._copy_n[b] + self.copy_weight)

    def _may_pay(self, depth: int) -> bool:
        """Whether any chain can pay, asked before the trie is built (the copy model's shortcut): the
        best value of a chain whose every node holds its parent's whole weight (share 1) at the
        longest match length, read as :data:`COPY_MATCH_CAP` where the index stops at ``max_n``;
        always True without the copy model, its priced budget, or with a corpus."""
        if not self.copy_model or not self.adaptive or self.corpus is not None or self._starts:
            return True
        m = sum(1 for pos in self.index.match_nodes() if len(pos) > 1)  # an occurrence besides the suffix itself
        if m < self.min_n:
            return False
        L = COPY_MATCH_CAP if m >= self.max_n else m
        gain, path = 1.0, 1.0
        for i in range(1, depth + 1):
            path *= self.copy_rate(L + i - 1)
            gain += path
            if gain / self._pass_cost(i) > 1.0:
                return True
        return False

    def _set_copy_prior(self, temperature: float) -> None:
        """:data:`COPY_PRIOR` at ``temperature``: linear between its T = 0 and T = 1 rows."""
        w = min(1.0, max(0.0, float(temperature)))
        rows = (COPY_PRIOR[0.0] + ALIGN_PRIOR[0.0], COPY_PRIOR[1.0] + ALIGN_PRIOR[1.0])
        self._copy_prior = tuple((1.0 - w) * a + w * b for a, b in zip(*rows))

    def _children(self) -> int:
        """Children per node of this generation's trees, at most: ``children``, cut to the budget's."""
        if self.spec is None:
            return self.children
        return max(1, min(self.children, TreeBudget.of(self.spec).children))

    def _context_trie(self, depth: int) -> _TNode:
        """The weighted trie of the continuations of the current suffix's earlier occurrences."""
        seq = self.index.tokens
        L = len(seq)
        root = _TNode(seq[-1])
        nodes = self.index.match_nodes()
        seen: set[int] = set()
        taken = 0
        for m in range(len(nodes), self.min_n - 1, -1):
            pos = nodes[m - 1]
            rank = 0
            for k in range(len(pos) - 1, -1, -1):  # most recent first
                e = pos[k]
                if e >= L - 1 or e in seen:  # the current suffix itself has no continuation
                    continue
                seen.add(e)
                w = self.match_weight ** m * self.recency ** rank
                rank += 1
                match = m
                if self.copy_model and m == self.max_n and rank <= 4:  # the index stops at max_n: read on
                    while match < COPY_MATCH_CAP and e - match >= 0 and seq[e - match] == seq[L - 1 - match]:
                        match += 1
                self._add_continuation(root, e + 1, depth, w, lambda i, m0=match: m0 + i, max)
                taken += 1
                if taken >= self.max_occurrences:
                    break
            if taken >= self.max_occurrences:
                break
        self._add_anchored(root, depth)  # also where max_occurrences ended the scan
        return root

    def _add_anchored(self, root: _TNode, depth: int) -> None:
        """The copy anchor's continuations (:class:`~specot.drafting.copy.CopyAnchor`) joined to the
        trie, each weighing as a match of :data:`~specot.drafting.copy.ALIGN_MATCH` tokens; a first
        node keeps the match (length or anchor kind) of higher copy rate."""
        def keep(old: int, new: int) -> int:
            return new if old == 0 or self.copy_rate(new) > self.copy_rate(old) else old

        for start, kind in self._starts:
            self._add_continuation(root, start, depth, self.match_weight ** ALIGN_MATCH,
                                   lambda i, first=-(kind + 1): first if i == 0 else ALIGN_MATCH + i - 1, keep)

    def _add_continuation(self, root: _TNode, start: int, depth: int, w: float, match_at: Callable[[int], int],
                          keep: Callable[[int, int], int]) -> None:
        """``tokens[start:start + depth]`` (cut after a stop token) added below ``root`` at weight ``w``: its
        i-th token's node takes the match ``keep(node's, match_at(i))`` and, where ``w`` is the heaviest
        yet, this occurrence's source position."""
        root.weight += w
        root.count += 1
        node = root
        for i, t in enumerate(self.index.tokens[start:start + depth]):
            nxt = node.kids.get(t)
            if nxt is None:
                nxt = node.kids[t] = _TNode(t)
            if w > nxt.src_w:
                nxt.src, nxt.src_w = start + i, w
            nxt.weight += w
            nxt.count += 1
            nxt.match = keep(nxt.match, match_at(i))
            node = nxt
            if t in self.stop_tokens:
                break

    def _corpus_children(self, tail: tuple[int, ...]) -> list[tuple[int, float]]:
        """(token, frequency) continuations of ``tail`` in the corpus, through a match of at least
        ``corpus_min_n`` tokens (the match-length gate); ``[]`` without a corpus."""
        if self.corpus is None:
            return []
        n = self.corpus.n
        min_n = min(self.corpus_min_n, n)
        if isinstance(self.corpus, NGramTable):
            tok = self.corpus.lookup(tail, min_n=min_n)
            return [] if tok is None else [(tok, 1.0)]
        return self.corpus.continuations(tail, min_n=min_n)

    def _select(self, root: _TNode) -> list[_TNode]:
        """Best-first top-N nodes by score (parents first), within ``children`` per node, the score
        floor and the node budget. Children of a node: its context continuations and — when a corpus is given — the
        corpus continuations of its path, at ``corpus_gate × frequency`` (the score gate)."""
        children = self._children()
        gate = self.corpus_gate if self.corpus is not None else 0.0
        n_tail = self.corpus.n if self.corpus is not None else 0
        out: list[_TNode] = []
        heap: list[tuple[float, int, _TNode]] = []
        tick = 0

        def push_children(node: _TNode) -> None:
            nonlocal tick
            cand: dict[int, _TNode] = {}
            for c in node.kids.values():
                if self.copy_model:
                    c.cond = self.copy_rate(c.match) * _share(c, node)
                else:
                    c.cond = (c.weight / node.weight) * (c.count / (c.count + self.kappa))
                c.origin, c.freq = "context", 0.0
                cand[c.token] = c
            if gate > 0.0:
                for tok, f in self._corpus_children(node.tail):
                    cond = min(1.0, gate * f)
                    c = cand.get(tok)
                    if c is None:
                        c = cand[tok] = _TNode(tok, origin="corpus", cond=cond, freq=f)
                    elif cond > c.cond:
                        c.cond = cond
            for c in sorted(cand.values(), key=lambda c: (-c.cond, c.token))[:children]:
                c.score = node.score * c.cond
                c.parent = node
                if c.score >= self.min_score:
                    if n_tail:
                        c.tail = (node.tail + (c.token,))[-n_tail:]
                    tick += 1
                    heapq.heappush(heap, (-c.score, tick, c))

        root.score = 1.0
        push_children(root)
        while heap and len(out) < self.max_nodes:
            _, _, node = heapq.heappop(heap)
            out.append(node)
            if node.token not in self.stop_tokens:
                push_children(node)
        return out

    def _pass_cost(self, n: int) -> float:
        """The cost of a pass scoring ``n >= 1`` draft nodes, in one-token passes: ``r(1 + n)`` of the
        measured curve when given, else the linear model ``1 + f + c·n``."""
        return pass_cost(n, self.pass_cost, cost_fixed=self.cost_fixed, cost_per_token=self.cost_per_token,
                         overhead=self.draft_overhead)

    def _budget(self, scores: list[float], calibration: float) -> tuple[int, float]:
        """N maximising the value (1 + Σ_{i≤N} min(1, a·s_i)) / cost(N) for N ≥ 1 — cost(N) =
        ``r(1 + N)`` of the measured curve, else 1 + f + c·N with f the fixed cost of verifying any
        draft at all — against 1 for N = 0 (no draft: a plain target step).
        Returns (N, its value); without the cost model N is every scored node."""
        # values[N]: expected tokens per unit of target time of the first N nodes (specot.drafting.pricing)
        values = block_values([min(1.0, calibration * s) for s in scores], self._pass_cost)
        if not self.adaptive or (self.pass_cost is None and self.cost_per_token == 0.0 and self.cost_fixed == 0.0):
            n = len(scores)
        else:
            n = best_size(values)  # the first maximum: the smallest such N
        return n, values[n]

    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """A draft tree after ``context`` (see the module docstring); the empty tree when nothing
        matches (a plain target step). Deterministic given the context and past outcomes."""
        t0 = time.perf_counter()
        self.index = self.index.sync(context)  # rebuilt only when used out of protocol
        depth = self.depth_limit(gamma)
        root_tok = int(context[-1])
        self._last_pred, self._last_corpus, self._last_value, self._last_copy = 0.0, [], 1.0, []
        if self.copy_model:
            self._set_copy_prior(sampling.temperature)
        self._starts = self.anchor.starts(self.index.tokens) if self.anchor is not None else []
        selected: list[_TNode] = []
        root = None
        if depth > 0 and int(context[-1]) not in self.stop_tokens and self._may_pay(depth):
            root = self._context_trie(depth)
            if self.corpus is not None:
                root.tail = tuple(self.index.tokens[-self.corpus.n:])
            selected = self._select(root)
            a = 1.0 if self.copy_model else self.calibration  # the copy model's rates are calibrated
            n, self._last_value = self._budget([c.score for c in selected], a)
            selected = selected[:n]
            self._last_pred = sum(c.score for c in selected)  # uncalibrated: a = observed / this
        tree = self._build(root_tok, root if selected else None, selected)
        self._last_tree = tree
        tree.draft_calls = 1
        self.budgets.append(tree.size)
        self.calls += 1
        self.draft_time_s += time.perf_counter() - t0
        return tree

    def _build(self, root_tok: int, root: _TNode | None, selected: list[_TNode]) -> DraftTree:
        tree = DraftTree.root(root_tok)
        if root is None or not selected:
            return tree
        kids_of: dict[int, list[_TNode]] = {}
        for c in selected:
            kids_of.setdefault(id(c.parent), []).append(c)
        # no q possible, or a budget of chains (one child per node, so q would be one-hot rows): the
        # best chain as a deterministic tree, q = None — the same law under any lossless verifier
        # (accept the child iff p's draw is it) without [N, V] one-hot rows to build and move. A wider
        # budget keeps q rows even for a chain: a caller may redraw its children from them.
        if self._vocab is None or self._children() == 1:
            node, chain, picked = root, [], []
            while True:
                kids = kids_of.get(id(node), [])
                if not kids:
                    break
                node = max(kids, key=lambda c: (c.score, -c.token))
                chain.append(node.token)
                picked.append(node)
            tree = DraftTree.chain(root_tok, chain)
            if self._vocab is not None:
                tree.law = DraftLaw.GREEDY  # one child per node: the GREEDY law's draw, q one-hot
            parent = 0
            for c in picked:
                nid = tree.child_of[parent][c.token]
                if c.origin == "corpus":
                    self._last_corpus.append((nid, parent, c.freq))
                self._note_copy(c, nid, parent)
                parent = nid
            return tree
        rows: list[tuple[int, list[float]]] = []
        frontier = [(root, 0)]
        tree.law = DraftLaw.GREEDY
        while frontier:  # breadth-first: parents precede children, depth by depth
            nxt = []
            for node, tnode in frontier:
                kids = sorted(kids_of.get(id(node), []), key=lambda c: (-c.score, c.token))
                if not kids:
                    continue
                ids = tree.add_children(tnode, [c.token for c in kids])
                tree.q_row[tnode] = len(rows)
                rows.append((tnode, [c.score for c in kids]))
                nxt += list(zip(kids, ids))
                self._last_corpus += [(cid, tnode, c.freq) for c, cid in zip(kids, ids) if c.origin == "corpus"]
                for c, cid in zip(kids, ids):
                    self._note_copy(c, cid, tnode)
            frontier = nxt
        tree.q = greedy_q(tree, rows, self._vocab)
        tree.deterministic = True
        return tree

    def _note_copy(self, c: _TNode, node_id: int, parent_id: int) -> None:
        """Remember a context node of the copy model (its bucket and share of its parent's weight) so
        that :meth:`update` counts it where its parent was reached."""
        if self.copy_model and c.origin == "context" and c.parent is not None and c.parent.weight > 0:
            self._last_copy.append((node_id, parent_id, _bucket(c.match), _share(c, c.parent)))
        if c.src >= 0:
            self._last_src[node_id] = (c.src, c.match)


def _share(c: _TNode, parent: _TNode) -> float:
    """The share of its parent's weight a context node's copy rate is scaled by: its occurrences'
    weight over its parent's, or 1 for the first node of a copy anchor's continuation (its kind's
    rate is already the chance that the text resumes there)."""
    return 1.0 if c.match < 0 else c.weight / parent.weight


def _bucket(match: int) -> int:
    """The copy model's bucket of a node's ``match``: its length's (:func:`~specot.drafting.copy.copy_bucket`),
    or, for the first node of a copy anchor's continuation (``match = -(kind + 1)``), the kind's."""
    return len(COPY_EDGES) - match - 1 if match < 0 else copy_bucket(match)

