"""The one drafter protocol: propose a draft tree, then learn the verification outcome.

Every drafter — a draft model, the n-gram drafter, feature-level (EAGLE-style) drafters — speaks
this protocol with the decoding loop (:func:`specot.engine.decode`):

1. :meth:`Drafter.start` once per generation: the prompt, the draft-tree shape and the
   draft-length schedule. The shape is a fixed :class:`~specot.drafting.tree.TreeSpec` (a chain of
   γ tokens is ``TreeSpec.sequences(1, γ)``) or a :class:`~specot.drafting.tree.TreeBudget`
   (children per node and depth) for a drafter that builds its own trees.
2. :meth:`Drafter.propose` each iteration: a :class:`DraftTree` after the committed context, at
   most ``gamma`` deep (the draft length γ the caller allows). An empty tree (the root only) asks
   for a plain target step.
3. :meth:`Drafter.update` after verification: a :class:`DraftOutcome` with the accepted path, the
   committed tokens and — when the drafter sets :attr:`Drafter.hidden_layers` — the target's
   hidden states of the committed positions (EAGLE-style drafters read these). The drafter updates
   its caches and its draft-length schedule (the schedule belongs to the drafter, as in Hugging
   Face's candidate generators).

A chain is a tree with one child per node; autoregressive decoding is the empty tree.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch
from torch import Tensor

from .._validation import check_count
from ..geometry import TreeGeometry
from ..laws import DraftLaw
from ..sampling import SamplingConfig

if TYPE_CHECKING:  # annotations only: tree.py imports this module
    from .tree import DraftShape

__all__ = ["DraftTree", "DraftOutcome", "DraftSchedule", "Drafter", "greedy_q", "strict_weights"]


@dataclass
class DraftTree:
    """One drafted tree. Node 0 is the root (the last committed token); nodes ``1..N`` are draft
    tokens, numbered so that every parent precedes its children (by depth).

    Attributes:
        tokens: ``[1 + N]`` token per node (``tokens[0]``: the last context token).
        parents: ``[1 + N]`` parent node (``parents[0] = -1``).
        drafts: expanded node → its children's tokens WITH multiplicity, in draw order: the
            ``drafts [1, n]`` a token-level verifier sees at that node.
        child_of: expanded node → token → child node.
        q: ``[M, V]`` draft probabilities of the expanded nodes (``q_row[node]`` indexes it), on the
            drafter's device; ``None`` for a deterministic draft (verified as a one-hot q on each
            child when every node has one child).
        q_row: expanded node → row of ``q``.
        law: the draft law by which the children of every node were drawn from q.
        draft_calls: draft forward passes (or lookups) spent on this tree.
        q_standardized: ``q``'s rows come from :func:`specot.sampling.standardize` (which rejects
            NaN and infinite logits), so the engine skips their value checks; otherwise ``q`` is
            checked once per tree before verification.
        deterministic: the children of every node are a deterministic function of the context (no
            random draw; q, if any, is only the law's bookkeeping, as :func:`greedy_q` makes it).
            Given such drafts every lossless verifier emits a token distributed as p at each node,
            so the loop verifies by drawing one token from p per node and walking down the children
            that match (:func:`specot.engine.loop.verify_draft_tree`).

    Derived once (after the last :meth:`add_children`) and kept: :attr:`geometry` (depths,
    ancestors, leaves: the one :class:`~specot.geometry.TreeGeometry`) and :meth:`is_chain`. The
    tree is a :class:`~specot.geometry.TokenTree`: a target scores it as it is
    (:meth:`specot.models.TargetModel.tree_logits`).
    """

    tokens: list[int]
    parents: list[int]
    drafts: dict[int, list[int]] = field(default_factory=dict)
    child_of: dict[int, dict[int, int]] = field(default_factory=dict)
    q: Tensor | None = None
    q_row: dict[int, int] = field(default_factory=dict)
    law: DraftLaw = DraftLaw.IID
    draft_calls: int = 0
    q_standardized: bool = False
    deterministic: bool = False
    _derived: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def root(cls, token: int) -> "DraftTree":
        """The empty tree (root only): a plain target step."""
        return cls(tokens=[int(token)], parents=[-1])

    @classmethod
    def chain(cls, root: int, tokens: Sequence[int], q: Tensor | None = None) -> "DraftTree":
        """A chain of draft ``tokens`` after ``root``; ``q [len(tokens), V]``, or ``None`` for a
        deterministic draft (then :attr:`deterministic`)."""
        tree = cls.root(root)
        for i, t in enumerate(tokens):
            tree.add_children(i, [int(t)])
        if q is not None:
            tree.q = q
            tree.q_row = {i: i for i in range(len(tokens))}
        tree.deterministic = q is None
        return tree

    def add_children(self, node: int, drafts: Sequence[int]) -> list[int]:
        """Attach ``drafts`` (with multiplicity, draw order) as the children of ``node``; drafts of
        one token share one child. Returns the child node of each draft."""
        self._derived.clear()  # the shape changes: geometry and is_chain are derived again on use
        self.drafts[node] = [int(t) for t in drafts]
        kids = self.child_of.setdefault(node, {})
        out = []
        for tok in self.drafts[node]:
            child = kids.get(tok)
            if child is None:
                child = len(self.tokens)
                kids[tok] = child
                self.tokens.append(tok)
                self.parents.append(node)
            out.append(child)
        return out

    @property
    def geometry(self) -> TreeGeometry:
        """The :class:`~specot.geometry.TreeGeometry` of the ``N`` draft nodes (rooted node ``j`` is
        its node ``j - 1``), computed once and kept until the next :meth:`add_children`."""
        g = self._derived.get("geometry")
        if g is None:
            g = self._derived["geometry"] = TreeGeometry.of_rooted(self.parents)
        return g  # type: ignore[return-value]

    @property
    def depths(self) -> tuple[int, ...]:
        """``[1 + N]`` depth of every node (root 0), from :attr:`geometry`."""
        return (0,) + self.geometry.depths

    @property
    def size(self) -> int:
        """Number of draft nodes N (the root excluded)."""
        return len(self.tokens) - 1

    @property
    def depth(self) -> int:
        """Deepest draft node's depth (0 for the empty tree)."""
        return self.geometry.depth

    def is_chain(self) -> bool:
        """True when every expanded node has exactly one draft (the single-draft case); computed
        once and kept until the next :meth:`add_children`."""
        chain = self._derived.get("is_chain")
        if chain is None:
            chain = self._derived["is_chain"] = all(len(d) == 1 for d in self.drafts.values())
        return chain  # type: ignore[return-value]

    def path_tokens(self, node: int) -> list[int]:
        """Tokens on the root-to-``node`` path (root excluded)."""
        out: list[int] = []
        while node > 0:
            out.append(self.tokens[node])
            node = self.parents[node]
        return out[::-1]

    def max_drafts_per_node(self) -> int:
        """The largest number of drafts verified at one node (0 for the empty tree)."""
        return max((len(d) for d in self.drafts.values()), default=0)


@dataclass(frozen=True)
class DraftOutcome:
    """What the decoding loop tells the drafter after verifying its tree.

    Attributes:
        tree: the tree that was verified.
        path: accepted nodes (root excluded), root-to-leaf.
        tokens: the tokens committed this iteration (the accepted drafts, then the correction or
            bonus token; cut at EOS / ``max_new_tokens``).
        context_len: committed length before this iteration.
        hidden_states: the target's hidden states ``[M, F]`` of committed positions
            ``hidden_start .. hidden_start + M − 1`` (the context positions run in this pass and the
            accepted drafts; the last committed token has not been through the target yet), when
            the drafter asked for them (:attr:`Drafter.hidden_layers`), else ``None``.
        hidden_start: absolute position of the first row of ``hidden_states``.
    """

    tree: DraftTree
    path: tuple[int, ...]
    tokens: tuple[int, ...]
    context_len: int
    hidden_states: Tensor | None = None
    hidden_start: int = 0

    @property
    def accepted(self) -> int:
        """Accepted draft tokens this iteration."""
        return len(self.path)


class DraftSchedule:
    """The draft length γ of the next iteration, adapted from past outcomes.

    ``"constant"``: γ every iteration. ``"heuristic"``: Hugging Face's assisted-generation schedule
    — start at γ, +2 after an iteration whose drafts were all accepted, −1 otherwise, within
    ``[1, 2γ]``. The length depends only on past outcomes, so the output law is unchanged (still
    exact).

    Raises:
        ValueError: ``gamma < 1`` or an unknown ``kind``.
    """

    #: The schedules, the one list (the engine's config and the CLI's choices read it).
    KINDS = ("constant", "heuristic")

    def __init__(self, gamma: int, kind: str = "constant") -> None:
        check_count(gamma, "draft length gamma")
        self.check_kind(kind)
        self.gamma, self.kind, self.current = gamma, kind, gamma

    @classmethod
    def check_kind(cls, kind: str, what: str = "draft-length schedule") -> None:
        """Raise ``ValueError`` (one line, naming ``what``) unless ``kind`` is one of :attr:`KINDS`."""
        if kind not in cls.KINDS:
            raise ValueError(f"{what} must be one of {', '.join(map(repr, cls.KINDS))}, got {kind!r}")

    def update(self, drafted_depth: int, accepted: int) -> None:
        """Record an iteration whose tree was ``drafted_depth`` deep and had ``accepted`` drafts accepted."""
        if self.kind == "constant" or drafted_depth == 0:
            return
        if accepted >= drafted_depth:
            self.current = min(self.current + 2, 2 * self.gamma)
        else:
            self.current = max(self.current - 1, 1)


class Drafter(ABC):
    """Proposes draft trees through the one protocol (see the module docstring).

    Subclasses implement :meth:`propose` (and :meth:`update` / :meth:`start` when they keep state).

    Attributes:
        name: label used in statistics.
        hidden_layers: the target's hidden-state layers this drafter reads (``None``: none); the
            engine then hands them over in :class:`DraftOutcome`.
        spec: the draft-tree shape of the current generation (set by :meth:`start`): a
            :class:`~specot.drafting.TreeSpec` or a :class:`~specot.drafting.TreeBudget`.
        schedule: the draft-length schedule of the current generation.
        stop_tokens: token ids after which nothing is drafted (EOS), set by :meth:`start`.
        draft_time_s: wall time spent in :meth:`propose` since :meth:`reset_stats` (the draft's
            forward passes and its sampling), seconds.
        calls: draft forward passes (or lookups) since :meth:`reset_stats`.
    """

    name: str = "drafter"
    hidden_layers: tuple[int, ...] | None = None

    def __init__(self) -> None:
        self.draft_time_s = 0.0
        self.calls = 0
        self.spec: DraftShape | None = None
        self.schedule = DraftSchedule(1)
        self.stop_tokens: frozenset[int] = frozenset()

    @property
    def vocab_size(self) -> int | None:
        """Vocabulary size of the draft distribution, when the drafter has one."""
        return None

    @property
    def device(self) -> torch.device | None:
        """Device of the drafter's tensors (``None`` for a host-only drafter such as n-gram)."""
        return None

    def start(self, prompt_ids: Sequence[int], spec: "DraftShape", schedule: DraftSchedule | None = None,
              stop_tokens: frozenset[int] = frozenset()) -> None:
        """Begin a generation: forget per-sequence state, set the tree shape, the draft-length
        schedule and the stop tokens (EOS: a draft node holding one is never expanded).

        ``spec`` is either kind of :data:`~specot.drafting.tree.DraftShape`:

        * a :class:`~specot.drafting.TreeSpec` — a fixed topology whose children are drawn under
          its law (draft models: :class:`~specot.drafting.ModelDrafter`; EAGLE with
          ``dynamic=False``). A drafter that builds its own trees reads it as the budget
          :meth:`TreeBudget.of <specot.drafting.TreeBudget.of>` gives (its widest node, its depth);
        * a :class:`~specot.drafting.TreeBudget` — at most ``children`` per node and ``depth``
          levels, the tree the drafter's own (:class:`~specot.drafting.SuffixDrafter`,
          :class:`~specot.drafting.HybridDrafter`, EAGLE's dynamic trees). A drafter of fixed
          topologies only refuses it (``TypeError``).

        Either way ``spec.depth`` is the draft length γ the default schedule starts from."""
        self.reset()
        self.spec = spec
        self.schedule = schedule if schedule is not None else DraftSchedule(spec.depth)
        self.stop_tokens = frozenset(stop_tokens)

    def use_static_cache(self, max_len: int, *, cuda_graphs: bool = False) -> "Drafter":
        """Draft over static buffers of ``max_len`` committed positions, replayed as CUDA graphs with
        ``cuda_graphs`` on CUDA, where the drafter can (:class:`~specot.drafting.EagleDrafter`'s
        temperature-0 trees); otherwise nothing changes. Returns ``self``."""
        return self

    def depth_limit(self, gamma: int) -> int:
        """Depth of the next tree: the schedule's γ, cut at the caller's draft length ``gamma``
        (tokens still allowed − 1); ``gamma`` itself before :meth:`start` (a drafter used on its own)."""
        if self.spec is None:
            return max(0, gamma)
        return max(0, min(self.schedule.current, gamma))

    @abstractmethod
    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """A draft tree after ``context`` (token ids), at most ``min(schedule γ, gamma)`` deep: ``gamma``
        is the draft length γ the caller allows (the tokens still allowed − 1).

        Drafts sampled from a draft distribution use ``sampling`` (the same standardized-sampling
        transform as the target) and draw all randomness from ``generator``.
        """

    def update(self, outcome: DraftOutcome) -> None:
        """Learn the verification outcome (default: advance the draft-length schedule)."""
        self.schedule.update(outcome.tree.depth, outcome.accepted)

    def reset(self) -> None:
        """Forget per-sequence state (caches) before a new prompt."""

    def reset_stats(self) -> None:
        self.draft_time_s = 0.0
        self.calls = 0


def strict_weights(scores: Sequence[float], ratio: float = 0.97) -> list[float]:
    """Normalised weights ∝ ``scores`` (given in decreasing order), made strictly decreasing: each is
    at most ``ratio`` times the previous one (a gap that survives bf16 rounding)."""
    w = [max(float(s), 1e-12) for s in scores]
    for j in range(1, len(w)):
        w[j] = min(w[j], w[j - 1] * ratio)
    z = sum(w)
    return [x / z for x in w]


def greedy_q(tree: DraftTree, rows: list[tuple[int, list[float]]], vocab_size: int,
             device: torch.device | str | None = None) -> Tensor:
    """q ``[M, V]`` of a DETERMINISTIC draft tree, so that it is a GREEDY-law draw.

    Row r belongs to the expanded node ``rows[r][0]``: it is supported on that node's children only,
    ∝ their scores ``rows[r][1]`` (given in draft order, best first) and strictly decreasing in draft
    order. So drafts 1..n−1 are the top-(n−1) of q and the last child is the only token left: the
    drawn draft is deterministic too, and the children ARE a draw of :data:`DraftLaw.GREEDY` from q.
    Hu et al. (2025, App. D)'s greedy verifier then accepts child x with probability p(x) in total —
    the optimum for a deterministic draft. Float64 so that rows sum to 1 within every dtype's
    tolerance; on ``device`` (default CPU)."""
    q = torch.zeros(len(rows), vocab_size, dtype=torch.float64, device=device)
    for r, (node, scores) in enumerate(rows):
        toks = torch.tensor(tree.drafts[node], dtype=torch.int64, device=q.device)
        q[r].index_put_((toks,), torch.tensor(strict_weights(scores), dtype=torch.float64, device=q.device))
    return q
