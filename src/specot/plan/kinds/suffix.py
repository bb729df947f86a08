"""``suffix``: suffix decoding (:class:`~specot.drafting.SuffixDrafter`; Oliaro et al. 2024):
model-free draft trees from every earlier occurrence of the current suffix, GREEDY law."""

from __future__ import annotations

from typing import Any, Mapping

from ..._validation import check_count, check_positive_number
from ...drafting.suffix import SuffixDrafter, SuffixSettings
from ...laws import DraftLaw
from ..corpus import ngram_counts
from ..draft import DraftKind, DraftSpec, Option, TreeSupport, register_kind
from ..step_work import suffix_draft_overhead
from .ngram import NGRAM_OPTIONS

#: The suffix drafter's defaults (:class:`~specot.drafting.suffix.SuffixSettings`).
_DEFAULT = SuffixSettings()
#: Children per node of a suffix tree when none is given.
SUFFIX_CHILDREN = _DEFAULT.children


#: The suffix drafter's own options, beside the corpus': the shortest suffix match that drafts
#: (``SuffixDrafter(min_n=)``), the count discount κ of its scores, the copy model
#: (``SuffixDrafter(copy_model=)``: nodes scored by the copy rate of their match length), its copy
#: anchor (``SuffixDrafter(copy_anchor=)``: the source drafted again after an edit) and the
#: work a drafted step adds outside its pass (``SuffixDrafter(draft_overhead=)``, in one-token
#: passes; ``"measure"``: measured on this machine against the target's measured t(1), cached,
#: :func:`specot.plan.step_work.suffix_draft_overhead`). A backend whose wide passes cost much
#: (llama.cpp on a CPU) asks for long matches, the copy model and a measured overhead in its ``auto``.
SUFFIX_OPTIONS = {
    **NGRAM_OPTIONS,
    "suffix_min_match": Option(_DEFAULT.min_n, lambda v: check_count(v, "suffix_min_match")),
    "suffix_kappa": Option(_DEFAULT.kappa, lambda v: check_positive_number(v, "suffix_kappa", allow_zero=True)),
    "suffix_copy_model": Option(_DEFAULT.copy_model, lambda v: _check_bool(v, "suffix_copy_model")),
    "suffix_copy_anchor": Option(_DEFAULT.copy_anchor, lambda v: _check_bool(v, "suffix_copy_anchor")),
    "suffix_draft_overhead": Option(_DEFAULT.draft_overhead, lambda v: _check_overhead(v)),
}


def _check_overhead(v: Any) -> Any:
    if v == "measure":
        return v
    return check_positive_number(v, "suffix_draft_overhead (a number of one-token passes >= 0, or 'measure')",
                                 allow_zero=True)


def _check_bool(v: Any, name: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{name} must be True or False, got {v!r}")
    return v


def pass_cost(target: Any) -> dict[str, Any]:
    """The suffix drafter's cost model for ``target`` (its keyword arguments).

    * ``pass_cost``: the target's measured curve r(B) where it has one — ``target.pass_cost_curve()``
      (optional; the llama.cpp backend calibrates on first use, :func:`specot.calibration.calibrate`)
      returning a :class:`~specot.calibration.PassCostCurve`, or ``None`` when calibration is off
      or failed;
    * ``cost_fixed``, ``cost_per_token``: the linear model (a pass over 1 + N tokens costs
      ``1 + cost_fixed + cost_per_token·N`` one-token passes) from ``target.pass_cost`` (a
      ``(cost_fixed, cost_per_token)`` pair) where the backend has one, the fallback when no
      curve is given; else the drafter's defaults."""
    out: dict[str, Any] = {}
    cost = getattr(target, "pass_cost", None)
    if cost is not None:
        out.update(cost_fixed=float(cost[0]), cost_per_token=float(cost[1]))
    measured = getattr(target, "pass_cost_curve", None)
    curve = measured() if callable(measured) else None
    if curve is not None:
        out["pass_cost"] = curve
    return out


class SuffixKind(DraftKind):
    name = "suffix"
    syntax = "suffix"
    summary = ("suffix decoding: model-free draft trees from every earlier occurrence of the current suffix, "
               "verified by the greedy verifier")
    options = SUFFIX_OPTIONS
    classes = (SuffixDrafter,)

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        return DraftSpec(self.name, self.name, options=self.fill(options)) if text == "suffix" else None

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        # deterministic distinct children = the GREEDY law with q over the children
        width = spec.obj.children if spec.obj is not None else SUFFIX_CHILDREN
        return TreeSupport(laws=frozenset({DraftLaw.GREEDY}), own_shape=True, default_children=width, chains=False)

    @staticmethod
    def _settings(spec: DraftSpec) -> dict[str, Any]:
        opts = dict(spec.options)
        return {"min_n": int(opts.get("suffix_min_match", _DEFAULT.min_n)),
                "kappa": float(opts.get("suffix_kappa", _DEFAULT.kappa)),
                "copy_model": bool(opts.get("suffix_copy_model", _DEFAULT.copy_model)),
                "copy_anchor": bool(opts.get("suffix_copy_anchor", _DEFAULT.copy_anchor))}

    def step_work(self, spec: DraftSpec, target: Any, *, refresh: bool = False) -> tuple[float, dict[str, Any] | None]:
        """``(draft_overhead, measurement)`` of ``spec`` on ``target`` when its
        ``suffix_draft_overhead`` is ``"measure"`` (:func:`specot.plan.step_work.suffix_draft_overhead`;
        ``refresh``: measured again), else ``(the given number, None)``."""
        overhead = dict(spec.options).get("suffix_draft_overhead", _DEFAULT.draft_overhead)  # none in a hybrid's suffix part
        if overhead != "measure":
            return float(overhead), None
        cost, mine = pass_cost(target), self._settings(spec)
        return suffix_draft_overhead(lambda: SuffixDrafter(vocab_size=target.vocab_size, **mine, **cost),
                                     cost.get("pass_cost"), target.vocab_size, mine, refresh=refresh)

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> SuffixDrafter:
        corpus = ngram_counts(spec.option("ngram_corpus"), target.tokenizer, spec.option("ngram_n"))
        overhead, measurement = self.step_work(spec, target)
        drafter = SuffixDrafter(vocab_size=target.vocab_size, corpus=corpus, draft_overhead=overhead,
                                **self._settings(spec), **pass_cost(target))
        drafter.step_work = measurement
        return drafter


KIND = register_kind(SuffixKind())
