"""The common interface of every token-level verifier, and the registry by name.

A verifier sees, at each of ``B`` independent positions, the target distribution ``p [B, V]``,
the draft distribution ``q [B, V]`` and ``n`` drafted tokens ``drafts [B, n]`` drawn from q under a
known *draft law* (:class:`DraftLaw`). It emits one token per position ``[B]`` and the index of the
accepted draft (``-1`` when the emitted token is a correction drawn from a residual).

Every verifier also exposes:

* :meth:`Verifier.output_distribution` — the exact conditional law ``π(y | drafts) [B, V]`` of the
  emitted token given the drafts. Averaging it over the draft law gives the emitted distribution;
  for a lossless verifier that average is exactly p (the test-suite checks it by enumeration).
* :meth:`Verifier.acceptance` — the acceptance rate α = P(emitted token is one of the drafts),
  exact where a closed form exists, otherwise a Monte-Carlo estimate with its standard error.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, ClassVar, Mapping, Sequence, TypeVar

import torch
from torch import Tensor

from .._validation import check_probs, check_same_vocab, check_tokens, working_dtype
from ..laws import DraftLaw

__all__ = [
    "DraftLaw",
    "VerifyOutput",
    "Acceptance",
    "Verifier",
    "SequenceVerifier",
    "TreeVerifyOutput",
    "AnyVerifier",
    "register_verifier",
    "get_verifier",
    "available_verifiers",
    "prepare_inputs",
    "LAW_VERIFIERS",
]


@dataclass(frozen=True)
class VerifyOutput:
    """Result of :meth:`Verifier.verify`.

    Attributes:
        tokens: emitted token per position, int64 ``[B]``.
        accepted_index: index into ``drafts[b]`` of the accepted draft, or ``-1`` when the token
            was drawn from a residual (a correction), int64 ``[B]``.
    """

    tokens: Tensor
    accepted_index: Tensor

    @property
    def accepted(self) -> Tensor:
        """Bool ``[B]``: whether a draft was accepted at each position."""
        return self.accepted_index >= 0


@dataclass(frozen=True)
class Acceptance:
    """An acceptance rate α ``[B]`` (or scalar), with its Monte-Carlo standard error if estimated.

    Attributes:
        value: α per position (float64 tensor ``[B]``).
        stderr: standard error per position; zeros when ``exact``.
        exact: True for a closed form, False for a Monte-Carlo estimate.
        samples: number of Monte-Carlo samples behind ``value`` (0 when exact).
    """

    value: Tensor
    stderr: Tensor
    exact: bool
    samples: int = 0


def prepare_inputs(p: Tensor, q: Tensor, drafts: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor | None]:
    """Validate ``p [B, V]``, ``q [B, V]`` and ``drafts [B, n]``; upcast to the working dtype.

    Returns ``(p, q, drafts)`` with p and q in float32 (float64 if either input is float64) and
    drafts as int64.

    Raises:
        TypeError / ValueError: see :func:`specot._validation.check_probs` and friends; also a
            batch-size mismatch between the probabilities and the drafts.
    """
    check_probs(p, "p (target probs)", ndim=2)
    check_probs(q, "q (draft probs)", ndim=2)
    check_same_vocab(p, q, "p (target probs)", "q (draft probs)")
    dt = working_dtype(p, q)
    p, q = p.to(dt), q.to(dt)
    if drafts is not None:
        check_tokens(drafts, "drafts", p.shape[-1], ndim=2)
        if drafts.shape[0] != p.shape[0]:
            raise ValueError(f"drafts has batch size {drafts.shape[0]} but p has {p.shape[0]}")
        if drafts.shape[1] < 1:
            raise ValueError("drafts must hold at least one draft per position (shape [B, n], n >= 1)")
        drafts = drafts.to(torch.int64)
    return p, q, drafts


class Verifier(ABC):
    """Base class of a token-level verifier (see module docstring for the contract).

    Subclasses set ``name``, ``valid_laws``, ``lossless`` and, when limited, ``max_drafts`` /
    ``min_drafts``; then implement :meth:`verify`, :meth:`output_distribution` and
    :meth:`acceptance`.
    """

    name: ClassVar[str] = ""
    valid_laws: ClassVar[frozenset[DraftLaw]] = frozenset()
    lossless: ClassVar[bool] = True
    min_drafts: ClassVar[int] = 1
    max_drafts: ClassVar[int | None] = None
    #: At temperature 0 (p one-hot on the target's argmax t) this verifier accepts a draft iff it is
    #: t, with probability 1, and otherwise emits t — true of speculative sampling (min(1, p/q) = 1
    #: at t, 0 elsewhere) and of the greedy verifier (acceptance p(drafts) = 1 when t is a draft),
    #: not of every lossless verifier (k-Seq may reject t when ρ·q(t) > 1 and emit it as a
    #: correction). The decoding loop then verifies a whole tree with one argmax per node.
    argmax_at_temperature_0: ClassVar[bool] = False

    # ------------------------------------------------------------------ validity
    def check_construction(self, law: DraftLaw | str, n: int) -> None:
        """Raise ``ValueError`` unless this verifier is valid for ``n`` drafts drawn under ``law``.

        With one draft every law is a single draw from q, so a verifier valid for one of
        ``IID``/``WOR``/``SPECHUB``/``GREEDY`` at ``n = 1`` is valid for all of them.
        """
        law = DraftLaw(law) if not isinstance(law, DraftLaw) else law
        if n < self.min_drafts or (self.max_drafts is not None and n > self.max_drafts):
            hi = "∞" if self.max_drafts is None else str(self.max_drafts)
            raise ValueError(
                f"verifier {self.name!r} takes between {self.min_drafts} and {hi} drafts per position, got n={n}"
            )
        single_draw = {DraftLaw.IID, DraftLaw.WOR, DraftLaw.SPECHUB, DraftLaw.GREEDY}
        ok = law in self.valid_laws or (n == 1 and law in single_draw and bool(self.valid_laws & single_draw))
        if not ok:
            valid = ", ".join(sorted(v.value for v in self.valid_laws))
            raise ValueError(
                f"verifier {self.name!r} is not valid for drafts drawn {law.value!r} (n={n}); it is exact only for "
                f"draft laws: {valid}. Pick a matching draft construction or another verifier "
                f"(see specot.available_verifiers())."
            )

    # ------------------------------------------------------------------ algorithm
    @abstractmethod
    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None) -> VerifyOutput:
        """Run the verification algorithm at ``B`` positions.

        Args:
            p: target probabilities ``[B, V]``.
            q: draft probabilities ``[B, V]``.
            drafts: drafted tokens ``[B, n]``, drawn from q under one of ``valid_laws``.
            generator: source of all randomness (global RNG if ``None``).

        Returns:
            :class:`VerifyOutput` with ``tokens [B]`` and ``accepted_index [B]``.
        """

    @abstractmethod
    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """Exact conditional law ``π(y | drafts)`` of the emitted token, ``[B, V]``."""

    @abstractmethod
    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Acceptance rate α ``[B]`` with ``n`` drafts per position under this verifier's draft law."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True)
class TreeVerifyOutput:
    """Result of :meth:`SequenceVerifier.verify_tree`.

    Attributes:
        path: accepted draft-tree nodes, root excluded, in root-to-leaf order (node indices into
            the tree's ``tokens``); empty when the first draft position was rejected.
        tokens: the committed tokens: the tokens of ``path``, then one more token (the correction
            drawn from a residual distribution, or the bonus token drawn from p at the path's end).
    """

    path: tuple[int, ...]
    tokens: tuple[int, ...]


class SequenceVerifier(ABC):
    """Base class of a sequence-level verifier: it verifies a whole draft tree (a chain is a tree
    with one child per node) jointly, not token by token — e.g. block verification (Sun et al.,
    ICLR 2025) and traversal verification (NeurIPS 2025).

    Tree layout (the engine's): node 0 is the root (the last committed token), nodes ``1..N`` are
    drafts numbered so that every parent precedes its children. Row ``i`` of ``p`` is the target
    distribution after the root-to-node-``i`` path; row ``i`` of ``q`` the draft distribution the
    children of node ``i`` were drawn from (rows of leaves are unused).

    Subclasses set ``name``, ``valid_laws``, ``lossless``, ``chains_only`` and implement
    :meth:`verify_tree`.
    """

    name: ClassVar[str] = ""
    valid_laws: ClassVar[frozenset[DraftLaw]] = frozenset({DraftLaw.IID})
    lossless: ClassVar[bool] = True
    chains_only: ClassVar[bool] = False
    max_drafts: ClassVar[int | None] = None

    def check_construction(self, law: DraftLaw | str, n: int) -> None:
        """Raise ``ValueError`` unless this verifier is valid for trees whose nodes have up to ``n``
        children drawn under ``law`` (``chains_only`` verifiers need ``n == 1``)."""
        law = DraftLaw(law) if not isinstance(law, DraftLaw) else law
        limit = 1 if self.chains_only else self.max_drafts
        if n < 1 or (limit is not None and n > limit):
            what = "a single draft chain (n = 1)" if self.chains_only else f"at most {limit} drafts per node"
            raise ValueError(f"verifier {self.name!r} verifies {what}, got n={n}; use a token-level verifier "
                             "(kseq, rrs_wor, ...) for this draft tree")
        ok = law in self.valid_laws or n == 1
        if not ok:
            valid = ", ".join(sorted(v.value for v in self.valid_laws))
            raise ValueError(f"verifier {self.name!r} is not valid for drafts drawn {law.value!r} (n={n}); "
                             f"it is exact only for draft laws: {valid}")

    @abstractmethod
    def verify_tree(self, p: Tensor, q: Tensor, tokens: Tensor, parents: Tensor,
                    generator: torch.Generator | None = None, *,
                    drafts: Mapping[int, Sequence[int]] | None = None) -> TreeVerifyOutput:
        """Verify one draft tree.

        Args:
            p: target probabilities ``[1 + N, V]`` at every node.
            q: draft probabilities ``[1 + N, V]`` at every node (leaf rows unused).
            tokens: int64 ``[1 + N]`` node tokens (``tokens[0]``, the root, is already committed).
            parents: int64 ``[1 + N]``, ``parents[0] = -1``, ``parents[i] < i``.
            generator: source of all randomness, on ``p``'s device.
            drafts: node → its children's draws WITH multiplicity, in draw order
                (:attr:`specot.drafting.DraftTree.drafts`); the engine always passes it, since
                i.i.d. draws of one token share one node.

        Returns:
            :class:`TreeVerifyOutput`.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


AnyVerifier = Verifier | SequenceVerifier


_REGISTRY: dict[str, Callable[..., AnyVerifier]] = {}
_V = TypeVar("_V", bound=type[AnyVerifier])


def register_verifier(name: str) -> Callable[[_V], _V]:
    """Class decorator: register a verifier class under ``name`` for :func:`get_verifier`."""

    def deco(cls: _V) -> _V:
        if name in _REGISTRY:
            raise ValueError(f"verifier name {name!r} is already registered")
        _REGISTRY[name] = cls
        return cls

    return deco


def available_verifiers() -> list[str]:
    """Names accepted by :func:`get_verifier`, sorted."""
    return sorted(_REGISTRY)


def get_verifier(name: str, **params: object) -> AnyVerifier:
    """Build the verifier registered as ``name`` with its parameters (e.g. ``lenience=0.5``).

    Raises:
        ValueError: unknown name (the message lists the available ones) or invalid parameters.
    """
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(f"unknown verifier {name!r}; available: {', '.join(available_verifiers())}")
    return _REGISTRY[name](**params)


#: THE table of the draft laws' optimal verifiers, which a draft tree with several drafts per node
#: gets when none is named (:attr:`specot.drafting.TreeSpec.default_verifier`): the optimal one for
#: the GREEDY law (Hu et al. 2025, Theorem 7) and for SpecHub's (Sun et al., SpecHub, 2024), RRS
#: without replacement for WOR (Jeon et al. 2024), k-Seq for IID (SpecTr, Sun et al. 2023).
LAW_VERIFIERS: Mapping[DraftLaw, str] = {DraftLaw.IID: "kseq", DraftLaw.WOR: "rrs_wor", DraftLaw.GREEDY: "greedy",
                                         DraftLaw.SPECHUB: "spechub"}
