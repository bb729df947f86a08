"""Draft trees: construction specs (topologies of draft *slots*) and batched tree drafting.

A :class:`TreeSpec` is a static topology of *slots* — index paths in the EAGLE/Medusa convention
(``(0,)``, ``(1,)``, ``(0, 0)``, ...: path ``(i_1, .., i_d)`` is child ``i_d`` of slot
``(i_1, .., i_{d−1})``) — plus the draft law by which the children of a node are drawn. Every
construction of the papers is such a topology:

* ``iid`` — K i.i.d. draft sequences of length L (SpecTr Eq. 7): K slots at the root, then a chain
  of one slot each (factors ``(K, 1, .., 1)``), law IID.
* ``prefix:k_1,..,k_L`` — SpecTr Algorithm 4 (App. D): every slot at depth i−1 has ``k_i`` child
  slots drawn i.i.d.; ``K = Π k_i``.
* ``wor`` / ``greedy`` / ``spechub`` (optionally ``LAW:k_1,..,k_L``) — the same shapes with the
  children of a node drawn under that law (without replacement; top-(n−1) + 1 sampled; SpecHub).
* ``topology`` — any list of index paths (e.g. EAGLE's default tree, Hu et al. App. D,
  :data:`EAGLE_DEFAULT_TREE`), in code or a JSON file, with any law.

**Slots vs nodes.** Drafting walks the topology depth by depth. A tree *node* is a distinct token
prefix; it holds the slots that reached it. Its children slots (the union of its slots' children,
in slot order, ``n`` of them) receive ``n`` draws from the draft distribution q at the node under
the law: draw j goes to child slot j, and slots that drew the same token share one child node (only
possible under IID). So under IID a node with multiplicity m sees m·k conditionally i.i.d. draws —
exactly SpecTr's Algorithm 3, where the K' surviving sequences that agree with the selected token
all propose their next token. Under WOR / GREEDY / SPECHUB the siblings are distinct; when q has
fewer than n tokens with positive mass (top-k, top-p, temperature 0, or a tree wider than the
vocabulary) the node draws n' = support size tokens instead — the same law with fewer drafts —
and the last n − n' child slots (and their subtrees) are dropped.

:func:`specot.drafting.model.draft_tree_from_model` runs a draft model once per depth for ALL
frontier nodes (tree attention over the draft's KV cache).

**Fixed shapes vs budgets.** A :class:`TreeSpec` is a fixed shape: ``TreeSpec.sequences(2, 3)``
is always n = 2 sequences of draft length γ = 3 branching at the root, whoever drafts it. A drafter
that builds its own trees — suffix decoding (Oliaro et al. 2024), :class:`~specot.drafting.HybridDrafter`,
EAGLE-2's dynamic trees (Li et al. 2024) — takes a :class:`TreeBudget` instead: at most ``children``
children per node and ``depth`` levels, the tree within them its own. Such a drafter reads a
:class:`TreeSpec` it is handed as the budget :meth:`TreeBudget.of` gives (its widest node, its depth).
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence, Union

from .._validation import check_count
from ..geometry import TreeGeometry
from ..laws import DraftLaw
from ..verifiers.base import LAW_VERIFIERS, AnyVerifier

__all__ = [
    "TreeSpec",
    "TreeBudget",
    "DraftShape",
    "EAGLE_DEFAULT_TREE",
    "parse_tree_spec",
    "load_topology",
    "default_law_for",
]

Path_ = tuple[int, ...]

#: EAGLE's default sparse draft tree as listed by Hu et al. 2025, App. D (25 slots, depth 5, at most
#: 4 children per node).
EAGLE_DEFAULT_TREE: tuple[Path_, ...] = (
    (0,), (1,), (2,), (3,),
    (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (2, 1), (3, 0),
    (0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 2, 1), (1, 0, 0),
    (0, 0, 0, 0), (0, 0, 0, 1), (0, 0, 0, 2),
    (0, 0, 0, 0, 0), (0, 0, 0, 0, 1),
)


def _as_law(law: DraftLaw | str) -> DraftLaw:
    try:
        return law if isinstance(law, DraftLaw) else DraftLaw(law)
    except ValueError:
        raise ValueError(f"unknown draft law {law!r}; use one of {[v.value for v in DraftLaw]}") from None


def _factor_paths(factors: Sequence[int]) -> tuple[Path_, ...]:
    paths: list[Path_] = []
    level: list[Path_] = [()]
    for k in factors:
        level = [p + (j,) for p in level for j in range(k)]
        paths.extend(level)
    return tuple(paths)


@dataclass(frozen=True)
class TreeSpec:
    """A draft-tree construction: a slot topology and the law of each node's children.

    Attributes:
        law: how the children of one node are drawn from q (:class:`DraftLaw`).
        paths: slot index paths, every proper prefix present, children of a slot numbered
            ``0..c−1``; stored sorted by (depth, path).
        name: a label, e.g. ``"iid K=4 γ=3"``.
        geometry: the slots' :class:`~specot.geometry.TreeGeometry` (slot ``paths[i]`` is its node
            ``i``), computed once at construction: depth, leaves and chain-ness read it.

    Raises:
        ValueError: an empty topology, a missing prefix, non-contiguous child indices, negative
            indices, or more than 2 children per slot under SPECHUB.
    """

    law: DraftLaw
    paths: tuple[Path_, ...]
    name: str = field(default="", compare=False)
    _children: dict[Path_, tuple[Path_, ...]] = field(default_factory=dict, init=False, repr=False, compare=False)
    geometry: TreeGeometry = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "law", _as_law(self.law))
        paths = tuple(sorted({tuple(int(i) for i in p) for p in self.paths}, key=lambda p: (len(p), p)))
        if not paths:
            raise ValueError("a draft tree needs at least one slot (a non-empty list of index paths)")
        if len(paths) != len(self.paths):
            raise ValueError("the topology lists a path twice")
        have = set(paths)
        children: dict[Path_, list[Path_]] = {(): []}
        for p in paths:
            if len(p) == 0 or any(i < 0 for i in p):
                raise ValueError(f"tree path {list(p)} must be a non-empty list of indices >= 0")
            if p[:-1] and p[:-1] not in have:
                raise ValueError(f"tree path {list(p)} has no parent path {list(p[:-1])} in the topology")
            children.setdefault(p[:-1], []).append(p)
            children.setdefault(p, [])
        for parent, kids in children.items():
            idx = sorted(k[-1] for k in kids)
            if idx != list(range(len(idx))):
                raise ValueError(f"children of {list(parent)} are numbered {idx}; use 0..{len(idx) - 1} (no gaps)")
            if self.law == DraftLaw.SPECHUB and len(kids) > 2:
                raise ValueError(f"the SpecHub law draws at most 2 children per node; {list(parent)} has {len(kids)}")
        object.__setattr__(self, "paths", paths)
        object.__setattr__(self, "_children", {k: tuple(sorted(v)) for k, v in children.items()})
        index = {p: i for i, p in enumerate(paths)}
        object.__setattr__(self, "geometry", TreeGeometry.of([index.get(p[:-1], -1) for p in paths]))

    # ---------------------------------------------------------------- constructors
    @classmethod
    def sequences(cls, n: int, gamma: int, law: DraftLaw | str = DraftLaw.IID) -> "TreeSpec":
        """n drafts at the root, each continued to a sequence of draft length γ = ``gamma`` (factors
        (n, 1, .., 1)): SpecTr's i.i.d. draft set of K = n sequences (Eq. 7) under IID; distinct
        first tokens under WOR / GREEDY. A fixed shape, not a budget (:class:`TreeBudget`).

        Raises:
            ValueError / TypeError: ``n`` or ``gamma`` not an integer >= 1.
        """
        check_count(n, "n (number of drafts)")
        check_count(gamma, "gamma (draft length)")
        law = _as_law(law)
        return cls(law, _factor_paths([n] + [1] * (gamma - 1)), f"{law.value} K={n} γ={gamma}")

    @classmethod
    def prefix(cls, factors: Sequence[int], law: DraftLaw | str = DraftLaw.IID) -> "TreeSpec":
        """SpecTr Algorithm 4: each slot at depth i−1 gets ``factors[i−1]`` children (K = Π k_i)."""
        factors = [int(k) for k in factors]
        if not factors:
            raise ValueError("prefix tree needs at least one expansion factor")
        for k in factors:
            check_count(k, "expansion factor")
        law = _as_law(law)
        label = "prefix" if law == DraftLaw.IID else law.value
        return cls(law, _factor_paths(factors), f"{label}:{','.join(map(str, factors))}")

    @classmethod
    def topology(cls, paths: Iterable[Sequence[int]], law: DraftLaw | str, name: str = "topology") -> "TreeSpec":
        """A static topology given as index paths (EAGLE/Medusa convention)."""
        return cls(_as_law(law), tuple(tuple(p) for p in paths), name)

    # ---------------------------------------------------------------- derived
    @property
    def depth(self) -> int:
        """Draft length L (deepest slot)."""
        return self.geometry.depth

    @property
    def num_slots(self) -> int:
        return len(self.paths)

    @property
    def num_leaves(self) -> int:
        """Number of root-to-leaf slot paths (K for ``sequences`` and ``prefix``)."""
        return self.geometry.n_leaves

    def children(self, slot: Path_) -> tuple[Path_, ...]:
        """Child slots of ``slot`` (``()`` is the root), in index order."""
        return self._children.get(slot, ())

    def is_chain(self) -> bool:
        """True when every slot has at most one child slot (a single draft chain)."""
        return len(self.geometry.root_children) <= 1 and all(len(c) <= 1 for c in self.geometry.children)

    def max_drafts_per_node(self) -> int:
        """Largest number of drafts a node can be verified with: under IID all slots of one depth
        can merge into one node, otherwise the largest number of children of one slot."""
        if self.law == DraftLaw.IID:
            return max(Counter(self.geometry.depths).values())
        return max(len(v) for v in self._children.values())

    @property
    def default_verifier(self) -> str:
        """THE verifier this shape gets when none is named (the plan, :func:`specot.engine.tree_generate`
        and the vLLM integration all read it here): ``"speculative"`` (Leviathan et al. 2023) for a
        chain (one draft per node, whatever the law: one draw from q), else the optimal verifier of
        the tree's law (:data:`specot.verifiers.LAW_VERIFIERS`: k-Seq for IID, SpecTr; RRS without
        replacement for WOR; Hu et al. 2025's greedy verifier for GREEDY; SpecHub's)."""
        return "speculative" if self.max_drafts_per_node() <= 1 else LAW_VERIFIERS[self.law]

    def check_verifier(self, verifier: AnyVerifier) -> None:
        """Raise ``ValueError`` (before decoding) unless ``verifier`` is valid for every node of
        this construction: ``check_construction(law, n)`` for every n the tree can produce."""
        _check_verifier(f"tree {self.name or self.law.value!r}", self.law, self.max_drafts_per_node(), verifier)

    def label(self) -> str:
        """``"tree LAW n×γ"``: the law, the most drafts n of one node and the depth, e.g. ``"tree iid 2×3"``."""
        return f"tree {self.law.value} {self.max_drafts_per_node()}×{self.depth}"

    def to_json(self) -> str:
        return json.dumps({"law": self.law.value, "paths": [list(p) for p in self.paths]})


def _check_verifier(what: str, law: DraftLaw, most: int, verifier: AnyVerifier) -> None:
    for n in range(1, most + 1):
        try:
            verifier.check_construction(law, n)
        except ValueError as exc:
            raise ValueError(f"{what} (law {law.value!r}, up to {most} drafts per node) cannot be verified by "
                             f"{verifier.name!r}: {exc}") from None


@dataclass(frozen=True)
class TreeBudget:
    """The budget of a drafter that builds its own draft trees: at most ``children`` children per
    node and ``depth`` levels; which tree within them is the drafter's choice (suffix decoding,
    Oliaro et al. 2024, Sec. 4; EAGLE-2's dynamic trees, Li et al. 2024, Sec. 4.1). Not a shape:
    ``TreeBudget(2, 3)`` may give a chain, a star of 2 or a full binary tree of depth 3, where
    ``TreeSpec.sequences(2, 3)`` is always 2 sequences of 3 branching at the root.

    Attributes:
        children: children per node, at most — the most drafts n one node is verified with.
        gamma: the draft length γ — the deepest draft token, at most (a schedule may shorten it);
            :attr:`depth` as well, the name every draft shape answers to (:attr:`TreeSpec.depth`).
        law: the draft law of the drafter's trees, what the verifier is checked for (suffix
            decoding: GREEDY — deterministic, distinct children scored by q).

    Raises:
        ValueError / TypeError: ``children`` or ``gamma`` not an integer >= 1; an unknown law.
    """

    children: int  # children per node, at most (the budget's width; n of the verifier at a node)
    gamma: int  # draft length γ: levels of draft tokens, at most
    law: DraftLaw = DraftLaw.GREEDY  # how the children of a node are drawn (the verifier's law)

    def __post_init__(self) -> None:
        check_count(self.children, "children (per node)")
        check_count(self.gamma, "gamma (draft length γ)")
        object.__setattr__(self, "law", _as_law(self.law))

    @classmethod
    def of(cls, shape: "DraftShape") -> "TreeBudget":
        """The budget a drafter that builds its own trees reads from ``shape``: itself, or a
        :class:`TreeSpec`'s most drafts per node (:meth:`TreeSpec.max_drafts_per_node`), depth and law."""
        if isinstance(shape, TreeBudget):
            return shape
        return cls(shape.max_drafts_per_node(), shape.depth, shape.law)

    @property
    def depth(self) -> int:
        """The deepest level a tree within the budget may reach: γ (:attr:`TreeSpec.depth` of a shape)."""
        return self.gamma

    @property
    def name(self) -> str:
        return self.label()

    def max_drafts_per_node(self) -> int:
        """The most drafts n one node is verified with: ``children``."""
        return self.children

    def is_chain(self) -> bool:
        """True when the budget allows one child per node only."""
        return self.children == 1

    @property
    def default_verifier(self) -> str:
        """THE verifier a budget gets when none is named (as :attr:`TreeSpec.default_verifier`): the
        optimal verifier of its law (:data:`specot.verifiers.LAW_VERIFIERS`; GREEDY: Hu et al. 2025),
        even at one child per node — the drafter builds every tree within the budget under its law,
        so one verifier serves all of them."""
        return LAW_VERIFIERS[self.law]

    def check_verifier(self, verifier: AnyVerifier) -> None:
        """Raise ``ValueError`` (before decoding) unless ``verifier`` is valid for every node the
        budget allows: ``check_construction(law, n)`` for n = 1..``children``."""
        _check_verifier(f"a {self.label()}", self.law, self.children, verifier)

    def label(self) -> str:
        """``"budget c children × depth d"``, e.g. ``"budget 4 children × depth 4"``."""
        return f"budget {self.children} {'child' if self.children == 1 else 'children'} × depth {self.depth}"


#: What a drafter is handed (:meth:`specot.drafting.Drafter.start`): a fixed shape or a budget.
DraftShape = Union[TreeSpec, TreeBudget]


def load_topology(path: str | os.PathLike[str]) -> tuple[list[list[int]], str | None]:
    """Read a topology JSON file: a list of index paths, or ``{"paths": [...], "law": "..."}``.

    Returns ``(paths, law or None)``.

    Raises:
        FileNotFoundError / ValueError: missing file, bad JSON or a bad shape.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"tree topology file {str(p)!r} does not exist")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"tree topology file {str(p)!r} is not valid JSON: {exc}") from None
    law = None
    if isinstance(data, dict):
        law = data.get("law")
        data = data.get("paths")
    if not isinstance(data, list) or not all(isinstance(q, list) and all(isinstance(i, int) for i in q) for q in data):
        raise ValueError(f"tree topology file {str(p)!r} must hold a list of index paths, e.g. [[0], [1], [0, 0]]")
    return data, law


def default_law_for(verifier: AnyVerifier) -> DraftLaw:
    """The draft law a tree should use for ``verifier`` when none is named: the verifier's own law
    (OTM), else the first valid one of IID, WOR, GREEDY, SPECHUB."""
    law = getattr(verifier, "law", None)
    if isinstance(law, DraftLaw):
        return law
    for cand in (DraftLaw.IID, DraftLaw.WOR, DraftLaw.GREEDY, DraftLaw.SPECHUB):
        if cand in verifier.valid_laws:
            return cand
    return DraftLaw.IID


def parse_tree_spec(text: str | None, *, n: int | None = None, gamma: int | None = None,
                    law: DraftLaw | str | None = None) -> TreeSpec:
    """Parse a construction as written on the command line (``--tree``, with ``--drafts n``).

    Forms: ``iid`` | ``wor`` | ``greedy`` | ``spechub`` (:meth:`TreeSpec.sequences`: n drafts at
    the root, each a sequence of length γ = ``gamma``; also ``LAW:k_1,..,k_L`` for expansion
    factors), ``prefix:k_1,..,k_L`` (IID, SpecTr Alg. 4), ``topology:FILE`` (JSON index paths; law
    from the file, else ``law``, else IID), ``eagle`` (EAGLE's default tree, Hu et al. App. D; law
    ``law`` or IID). ``None`` means ``law`` (default IID) with n × ``gamma``.

    Raises:
        ValueError: unknown form, bad factors, or ``n`` / ``gamma`` that contradict the
            factors (n must equal Π k_i, γ the number of factors).
    """
    K = 1 if n is None else n
    L = 4 if gamma is None else gamma
    if text is None or text == "":
        return TreeSpec.sequences(K, L, law or DraftLaw.IID)
    kind, _, arg = text.partition(":")
    kind = kind.strip().lower()
    if kind in ("topology", "eagle"):
        if kind == "eagle":
            paths, file_law = [list(p) for p in EAGLE_DEFAULT_TREE], None
        else:
            if not arg:
                raise ValueError("topology needs a file: --tree topology:FILE.json")
            paths, file_law = load_topology(arg)
        return TreeSpec.topology(paths, file_law or law or DraftLaw.IID, name=text)
    if kind == "prefix" or kind in {v.value for v in DraftLaw}:
        tree_law = DraftLaw.IID if kind == "prefix" else DraftLaw(kind)
        if law is not None and _as_law(law) != tree_law:
            raise ValueError(f"--tree {text!r} draws {tree_law.value!r} children but the law {_as_law(law).value!r} was asked for")
        if not arg:
            if kind == "prefix":
                raise ValueError("prefix needs expansion factors, e.g. --tree prefix:2,2,1")
            return TreeSpec.sequences(K, L, tree_law)
        try:
            factors = [int(x) for x in arg.split(",")]
        except ValueError:
            raise ValueError(f"expansion factors must be integers, e.g. prefix:2,2,1; got {arg!r}") from None
        spec = TreeSpec.prefix(factors, tree_law)
        if n is not None and n != math.prod(factors):
            raise ValueError(f"--drafts {n} contradicts the expansion factors {factors} (K = product = {math.prod(factors)})")
        if gamma is not None and gamma != len(factors):
            raise ValueError(f"--gamma {gamma} contradicts the expansion factors {factors} (draft length = {len(factors)})")
        return spec
    raise ValueError(f"unknown tree construction {text!r}; use iid, wor, greedy, spechub, prefix:k1,..,kL, "
                     "topology:FILE or eagle")
