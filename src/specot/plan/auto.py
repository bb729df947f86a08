"""``draft="auto"``: the fastest decoding measured for a target, device and temperature.

The rule, one place (:func:`auto_choice`; :func:`specot.plan.make_plan` turns it into a
:class:`~specot.plan.DecodingPlan`):

* A backend with its own table (:attr:`specot.plan.Backend.auto`, an :class:`AutoTable`: what
  measured fastest on it, e.g. ``specot_llamacpp.auto.AUTO_TABLE``): the table's entry for the
  temperature, as measured — with a draft model added (:func:`with_draft_model`) where one was
  measured on this machine to pay for the target (``specot calibrate --draft``,
  :mod:`specot.plan.draft_verdict`); the choice says why in :attr:`AutoChoice.reason`.
* The embedded target on a CPU, in bfloat16, or in float32 where oneDNN prepacks the head's
  layers: :data:`AUTO_TABLE`, suffix decoding with the shipped EAGLE-3 head (``suffix+eagle``), as
  GREEDY-law draft trees of :data:`AUTO_TREE` (2 children per node, depth 3) at temperature > 0 and
  :data:`AUTO_TREE_GREEDY` (3 × 6) at temperature 0, pruned there by the head's confidence
  (:data:`AUTO_MIN_CONFIDENCE_GREEDY`). Why (docs/results.md, "Speedup per prompt set"): on
  held-out prompt sets the 3 × 6 tree gained over 2 × 3 at T = 0 and lost at T = 1, and so did the
  gate; in float32 the same plan beat n-gram drafting in every cell once the head ran prepacked.
* Anything else: ``ngram`` (prompt lookup + an n-gram table). On CUDA, where the target's passes
  replay as CUDA graphs, n-gram chains won every cell measured against the EAGLE trees, whose eager
  draft steps cost as much as the graphed target pass they save (docs/results.md, "GPU runs").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from ..models.device import prepacking_available, resolve_dtype
from ..models.protocol import TargetModel
from .backends import backend_of, capabilities_for, get_backend, is_embedded
from .draft import parse_draft
from .draft_verdict import best_verdict, draft_verdict_key, read_verdicts
from .kinds.hybrid import HYBRID_PREFIX

__all__ = ["AutoChoice", "AutoTable", "auto_choice", "with_draft_model", "AUTO_TABLE", "AUTO_HYBRID", "AUTO_TREE",
           "AUTO_TREE_GREEDY", "AUTO_MIN_CONFIDENCE_GREEDY"]

AUTO_HYBRID = HYBRID_PREFIX + "eagle"
#: (children per node, depth) of auto's GREEDY-law trees at temperature > 0.
AUTO_TREE = (2, 3)
#: (children per node, depth) at temperature 0 (EAGLE-2's re-ranked tree, pruned by the gate).
AUTO_TREE_GREEDY = (3, 6)
#: τ of the head's confidence gate at temperature 0: a node is expanded only while its path's
#: cumulative draft probability is at least τ (off above temperature 0).
AUTO_MIN_CONFIDENCE_GREEDY = 0.1


@dataclass(frozen=True)
class AutoChoice:
    """What ``draft="auto"`` resolves to, before the plan is built (:func:`specot.plan.make_plan`
    passes ``children`` as its ``n``)."""

    draft: str  # the draft name (specot.plan.parse_draft)
    # children per node of the draft tree (a budget's, or n of suffix+MODEL's GREEDY trees);
    # None: a chain, or the caller's tree options
    children: int | None
    gamma: int | None  # draft length γ (the depth of a tree); None: the default
    min_confidence: float | None = None  # τ of the EAGLE head's confidence gate; None: off
    options: tuple[tuple[str, Any], ...] = ()  # other drafter options (a backend's tuned suffix drafter)
    reason: str = ""  # why, with its numbers, where a measurement decided (a draft model's verdict)

    @property
    def draft_options(self) -> dict[str, Any]:
        """The drafter options this choice sets: :attr:`options`, and ``min_confidence`` where set."""
        return dict(self.options, **({"min_confidence": self.min_confidence} if self.min_confidence else {}))


@dataclass(frozen=True)
class AutoTable:
    """What ``draft="auto"`` decodes with, per temperature: ``greedy`` at temperature 0,
    ``sampled`` above it — a backend's measured plan (:attr:`specot.plan.Backend.auto`), or the
    core's for the embedded target (:data:`AUTO_TABLE`)."""

    greedy: AutoChoice  # temperature 0
    sampled: AutoChoice  # temperature > 0

    def at(self, temperature: float) -> AutoChoice:
        """The entry for ``temperature``."""
        return self.greedy if float(temperature) == 0 else self.sampled


#: The core's table: the embedded target on a CPU with a fast EAGLE head (module docstring).
AUTO_TABLE = AutoTable(
    greedy=AutoChoice(AUTO_HYBRID, AUTO_TREE_GREEDY[0], AUTO_TREE_GREEDY[1], AUTO_MIN_CONFIDENCE_GREEDY),
    sampled=AutoChoice(AUTO_HYBRID, AUTO_TREE[0], AUTO_TREE[1]))


def _names_greedy_tree(tree: Any) -> bool:
    return tree is None or str(tree).partition(":")[0].strip().lower() in ("", "greedy")


def _fast_head(target: Any, device: str, dtype: str | torch.dtype) -> bool:
    """Whether ``target`` is the embedded one on a CPU with its EAGLE head running fast (bf16, or
    float32 prepacked) and hidden states to feed it."""
    loaded = isinstance(target, TargetModel)
    on_cpu = str(target.device if loaded else device).startswith("cpu")
    dt = target.dtype if loaded else resolve_dtype(dtype, device)
    hidden = capabilities_for(target, backend_of(target)).hidden_states if loaded else True
    fast = dt == torch.bfloat16 or dt == torch.float32 and prepacking_available(dt)
    return is_embedded(target) and on_cpu and hidden and fast


def _usable(draft: str) -> bool:
    """Whether a verdict's draft can still be planned (its file is there)."""
    try:
        parse_draft(draft).check()
    except (ValueError, OSError):
        return False
    return True


def with_draft_model(own: AutoChoice, draft: str, reason: str = "") -> AutoChoice:
    """``own`` (a backend's table entry) with the draft model ``draft`` added: where ``own`` is suffix
    decoding, the hybrid ``suffix+DRAFT`` with ``own``'s suffix options and depth (suffix chains
    where the text repeats, the draft model's priced chains elsewhere,
    :class:`~specot.drafting.HybridDrafter`); else ``draft`` as ``--draft`` plans it."""
    if own.draft == "suffix" and not draft.startswith(HYBRID_PREFIX):
        return AutoChoice(HYBRID_PREFIX + draft, None, own.gamma, options=own.options, reason=reason)
    return AutoChoice(draft, None, None, reason=reason)


def _measured_draft(target: Any, backend: str, temperature: float, own: AutoChoice) -> AutoChoice:
    """``own`` (the backend's table) with the draft model measured fastest for ``target`` on this
    machine where its verdict pays (:mod:`specot.plan.draft_verdict`: ``specot calibrate --draft``,
    :func:`with_draft_model`); else ``own``, with the best verdict that did not pay as its reason."""
    verdicts = [v for v in read_verdicts(draft_verdict_key(target, backend), temperature) if _usable(v.draft)]
    best = best_verdict(verdicts)
    if best is None:
        return own
    if best.pays:
        return with_draft_model(own, best.draft, reason=f"a draft model pays here: {best.why()}")
    return dataclasses.replace(own, reason=f"no draft model pays here: {best.why()}")


def auto_choice(target: Any, device: str = "cpu", *, backend: str | None = None, dtype: str | torch.dtype = "auto",
                temperature: float = 1.0, n: int | None = None, gamma: int | None = None, tree: Any = None,
                verifier: str | None = None, verifier_params: Mapping[str, Any] | None = None) -> AutoChoice:
    """The draft and shape of ``draft="auto"`` (module docstring) for ``target`` (a name or a loaded
    target) on ``backend`` (its :class:`AutoTable` where it has one; ``None``: a loaded target's
    own, else the core's rule), ``device`` and ``dtype`` (the loaded target's own when loaded) and
    ``temperature``.

    With the caller's tree options (``n`` / ``tree``): GREEDY-law trees of ``suffix+eagle`` as
    given; for any other tree law or verifier ``eagle``, whose trees take every draft law. With a
    verifier named (``verifier`` not ``None``) and no tree options: chains of ``suffix+eagle``.

    Raises:
        ValueError: an unknown backend.
    """
    if backend is None and isinstance(target, TargetModel):
        backend = backend_of(target)
    table = get_backend(backend).auto if backend is not None else None
    if table is not None:  # the backend's measured plan, as measured, or a draft model measured to pay
        own = table.at(temperature)
        if n is None and tree is None and verifier is None and not verifier_params:
            return _measured_draft(target, backend, temperature, own)
        return own
    if not _fast_head(target, device, dtype):
        return AutoChoice("ngram", n, gamma)
    named = verifier is not None or bool(verifier_params)
    if n is None and tree is None:
        if not named:  # auto's own tree
            own = AUTO_TABLE.at(temperature)
            return AutoChoice(own.draft, own.children, own.gamma if gamma is None else gamma, own.min_confidence)
        return AutoChoice(AUTO_HYBRID, None, gamma)  # chains under the caller's verifier
    if _names_greedy_tree(tree) and (not named or verifier == "greedy"):
        return AutoChoice(AUTO_HYBRID, n, gamma)  # the hybrid's trees are GREEDY-law trees
    return AutoChoice("eagle", n, gamma)
