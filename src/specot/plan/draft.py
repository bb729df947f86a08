"""The draft-name language, parsed once: :class:`DraftSpec` and the registry of drafter kinds.

A draft is named on the command line and in :func:`specot.generate` by a short string —
``"ngram"``, ``"suffix"``, ``"eagle"``, ``"eagle:PATH"``, ``"distilled"``, a model directory or hub
id, ``"suffix+MODEL"`` — or given as a ready :class:`~specot.drafting.Drafter` or draft
:class:`~specot.models.CausalLM`. :func:`parse_draft` turns either into a frozen :class:`DraftSpec`
once; everything after that (checks, tree shape, loading) asks the spec's :class:`DraftKind`.

Each kind declares, in one place (one module of :mod:`specot.plan.kinds`):

* its name syntax (:meth:`DraftKind.parse`) and the drafter classes it recognises;
* its options (e.g. ``ngram_n``) with defaults, and the checks made before any model is loaded;
* the draft trees it can draft (:class:`TreeSupport`: chains only, its own GREEDY-law trees, or any
  draft law);
* its loader (:meth:`DraftKind.load`).

Adding a drafter kind is one file in :mod:`specot.plan.kinds` (or an entry point of the group
``specot.drafters`` naming a :class:`DraftKind` instance, for another package).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ..drafting.base import Drafter
from ..laws import DraftLaw

__all__ = ["DraftSpec", "DraftKind", "TreeSupport", "Option", "register_kind", "draft_kinds", "parse_draft",
           "DRAFT_ENTRY_POINTS"]

#: Entry-point group through which another package adds a drafter kind (a :class:`DraftKind` instance).
DRAFT_ENTRY_POINTS = "specot.drafters"


@dataclass(frozen=True)
class Option:
    """A drafter option: its default and a check run before any model is loaded.

    Attributes:
        default: the value when none is given.
        check: ``check(value) -> value`` raising ``ValueError`` / ``FileNotFoundError`` with one line.
        flag: the CLI flag that sets it (named in error messages).
        inert: values that change nothing for a draft that does not take the option (``"none"`` for
            an n-gram corpus), so they are accepted there too.
        help: what it sets, for the CLI's help (an option with a ``flag``).
    """

    default: Any
    check: Callable[[Any], Any] = lambda v: v
    flag: str | None = None
    inert: tuple[Any, ...] = ()
    help: str = ""


@dataclass(frozen=True)
class TreeSupport:
    """The draft trees a kind can draft.

    Attributes:
        laws: the draft laws of the trees it drafts; empty: chains only (a deterministic drafter
            such as n-gram), ``None``: any law (a draft model samples under any law).
        own_shape: the drafter builds its own trees (suffix decoding): the plan hands it a
            :class:`~specot.drafting.TreeBudget` (``children`` per node × depth γ), not a
            ``tree=`` construction.
        default_children: children per node when trees are asked for without ``drafts``: the
            budget's ``children`` (``own_shape``), else n of the n-sequence tree of a kind with
            fixed laws (``suffix+MODEL``'s GREEDY trees, which its suffix drafter and EAGLE's
            dynamic trees read as children per node).
        chains: the drafter also drafts plain chains (a single draft per position).
    """

    laws: frozenset[DraftLaw] | None = None
    own_shape: bool = False
    default_children: int = 2
    chains: bool = True


@dataclass(frozen=True)
class DraftSpec:
    """A parsed draft: its kind, what it names, its options.

    Attributes:
        kind: the registry key of its :class:`DraftKind` (``"ngram"``, ``"suffix"``, ``"model"``,
            ``"eagle"``, ``"hybrid"``, ...).
        name: the canonical draft name (``"suffix+eagle"``; a ready object's class name).
        source: what the kind loads from: a path or hub id, a built-in name (``"distilled"``,
            ``"eagle"``), or ``None``.
        options: the kind's options as set (defaults filled in), as sorted ``(name, value)`` pairs.
        inner: the draft model of a composite kind (``suffix+MODEL``), else ``None``.
        obj: a ready :class:`Drafter` or draft :class:`CausalLM` given instead of a name.
    """

    kind: str
    name: str
    source: str | None = None
    options: tuple[tuple[str, Any], ...] = ()
    inner: "DraftSpec | None" = None
    obj: Any = field(default=None, compare=False, repr=False)

    def option(self, name: str) -> Any:
        """The value of option ``name`` (``KeyError`` if the kind has no such option)."""
        return dict(self.options)[name]

    @property
    def kind_obj(self) -> "DraftKind":
        """This spec's :class:`DraftKind`."""
        return _kinds()[self.kind]

    @property
    def needs_hidden_states(self) -> bool:
        """Whether the drafter (or a composite's draft model) reads the target's hidden states."""
        return self.kind_obj.hidden_states or (self.inner is not None and self.inner.kind_obj.hidden_states)

    @property
    def trees(self) -> TreeSupport:
        """The draft trees this draft can draft (its kind's :meth:`DraftKind.tree_support`)."""
        return self.kind_obj.tree_support(self)

    def check(self) -> None:
        """The kind's checks before any model is loaded (files exist, options valid)."""
        self.kind_obj.check(self)

    def load(self, target: Any, *, dtype: str | torch.dtype = "auto", device: str = "cpu") -> Drafter:
        """The drafter, for ``target`` (a :class:`~specot.models.protocol.TargetModel`)."""
        if isinstance(self.obj, Drafter):
            return self.obj
        return self.kind_obj.load(self, target, dtype=dtype, device=device)


class DraftKind(ABC):
    """One kind of drafter: its name syntax, options, checks, tree support and loader.

    Attributes:
        name: the registry key (``DraftSpec.kind``).
        syntax: how the kind is written, for help and error messages (``"eagle | eagle:PATH"``).
        summary: what it drafts, in a few words (``specot generate --help`` lists it beside the syntax).
        options: the options it takes (name → :class:`Option`).
        classes: the :class:`Drafter` classes whose ready instances are this kind.
        order: kinds are tried in increasing order (a model directory or hub id matches any name,
            and every drafter is a :class:`Drafter`: those kinds come last).
        hidden_states: the drafter reads the target's hidden states (a backend without them cannot
            run it).
    """

    name: str = ""
    syntax: str = ""
    summary: str = ""
    options: Mapping[str, Option] = {}
    classes: tuple[type, ...] = ()
    order: int = 0
    hidden_states: bool = False

    @abstractmethod
    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        """The spec for ``text`` if this kind's syntax matches it, else ``None``. ``options`` are
        the caller's drafter options that are set (:meth:`fill` keeps this kind's)."""

    def from_object(self, obj: Any, options: Mapping[str, Any]) -> DraftSpec:
        """The spec of a ready drafter (one of :attr:`classes`)."""
        return DraftSpec(self.name, type(obj).__name__, options=self.fill(options), obj=obj)

    def fill(self, options: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
        """This kind's options with defaults filled in, checked, as sorted pairs."""
        out = {}
        for key, opt in self.options.items():  # options this kind does not take are not its business
            out[key] = opt.check(options[key]) if options.get(key) is not None else opt.default
        return tuple(sorted(out.items()))

    def check(self, spec: DraftSpec) -> None:
        """Checks before any model is loaded (default: none beyond the options')."""

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        """The draft trees ``spec`` can draft (default: any law, as a draft model)."""
        return TreeSupport()

    @abstractmethod
    def load(self, spec: DraftSpec, target: Any, *, dtype: str | torch.dtype, device: str) -> Drafter:
        """Build the drafter for ``target``."""


_REGISTRY: dict[str, DraftKind] = {}
_ENTRY_POINTS_LOADED = [False]


def register_kind(kind: DraftKind) -> DraftKind:
    """Add ``kind`` to the registry (a kind module calls this at import).

    Raises:
        ValueError: a kind of that name is already registered.
    """
    if kind.name in _REGISTRY and type(_REGISTRY[kind.name]) is not type(kind):
        raise ValueError(f"a drafter kind named {kind.name!r} is already registered")
    _REGISTRY[kind.name] = kind
    return kind


def _kinds() -> dict[str, DraftKind]:
    if not _ENTRY_POINTS_LOADED[0]:
        _ENTRY_POINTS_LOADED[0] = True
        for ep in entry_points(group=DRAFT_ENTRY_POINTS):
            register_kind(ep.load())
    return _REGISTRY


def draft_kinds() -> dict[str, DraftKind]:
    """The registered drafter kinds by name (the built-in ones and those of entry points)."""
    return dict(_kinds())


def parse_draft(draft: Any, **options: Any) -> DraftSpec:
    """Parse a draft name (or a ready drafter / draft model) into a :class:`DraftSpec`, once.

    Args:
        draft: a name (``"ngram"``, ``"suffix"``, ``"eagle"``, ``"eagle:PATH"``, ``"distilled"``,
            ``"suffix+MODEL"``, a model directory or hub id), a :class:`Drafter`, a draft
            :class:`CausalLM`, or a :class:`DraftSpec` (returned as it is). ``"auto"`` is resolved
            by :func:`specot.plan.auto_draft` before this.
        options: drafter options (``ngram_n``, ``ngram_corpus``, ``min_confidence``, ...); ``None``
            means unset. An option that no kind of this draft takes is refused.

    Raises:
        TypeError: ``draft`` of another type.
        ValueError: a name no kind parses, or an option the draft does not take.
    """
    if isinstance(draft, DraftSpec):
        return draft
    ordered = sorted(_kinds().values(), key=lambda k: k.order)
    given = {k: v for k, v in options.items() if v is not None}
    owner = next((k for k in ordered if isinstance(draft, k.classes)), None)
    if owner is not None:  # a ready drafter, or a draft model a kind wraps (transformers' CausalLM)
        spec = owner.from_object(draft, given)
    elif isinstance(draft, (str, Path)):
        text = str(draft)
        if text == "auto":
            raise ValueError("draft 'auto' is resolved by specot.plan.make_plan (or auto_draft) before parsing")
        spec = next((s for k in ordered if (s := k.parse(text, given)) is not None), None)
        if spec is None:
            raise ValueError(f"unknown draft {text!r}; use one of: "
                             + " | ".join(k.syntax for k in ordered if k.syntax))
    else:
        raise TypeError(f"draft must be 'auto', 'distilled', 'ngram', a model directory / hub id, a CausalLM or a "
                        f"Drafter, got {type(draft).__name__}")
    _refuse_foreign_options(spec, options)
    return spec


def _refuse_foreign_options(spec: DraftSpec, options: Mapping[str, Any]) -> None:
    """Refuse an option set (to another value than its default) for a draft none of whose kinds
    takes it (e.g. ``min_confidence`` for ``ngram``): it would be silently ignored."""
    takes = {k for s in (spec, spec.inner) if s is not None for k in s.kind_obj.options}
    for key, value in options.items():
        owners = [k for k in _kinds().values() if key in k.options]
        if not owners:
            raise TypeError(f"unknown drafter option {key!r}; the drafter kinds take: "
                            + ", ".join(sorted({o for k in _kinds().values() for o in k.options})))
        if value is None or key in takes or all(value == k.options[key].default or value in k.options[key].inert
                                              for k in owners):
            continue
        flag = next((k.options[key].flag for k in owners if k.options[key].flag), None)
        where = " or ".join(sorted({k.syntax for k in owners})) or "no draft"
        raise ValueError(f"{key}{f' ({flag})' if flag else ''} is an option of {where} drafts: draft {spec.name!r} "
                         "has none of them; drop it or name such a draft")
