"""``suffix+MODEL``: suffix decoding where the text repeats, the draft model MODEL elsewhere, the
better one chosen at every iteration (:class:`~specot.drafting.HybridDrafter`; Oliaro et al. 2024,
Sec. 4.4): chains, or GREEDY-law trees from both (one verifier for both)."""

from __future__ import annotations

from typing import Any, Mapping

from ...drafting.hybrid import HybridDrafter
from ...laws import DraftLaw
from ..draft import DraftKind, DraftSpec, TreeSupport, draft_kinds, register_kind
from .suffix import SUFFIX_OPTIONS

HYBRID_PREFIX = "suffix+"
#: The kinds that may follow ``suffix+``: draft models (a model-free drafter would be pointless),
#: of the target's vocabulary or of another (``xvocab:`` / ``xvocab-slem:``, chains).
MODEL_KINDS = ("model", "eagle", "xvocab")


def _model_kinds() -> list[DraftKind]:
    kinds = draft_kinds()
    return sorted((kinds[n] for n in MODEL_KINDS), key=lambda k: k.order)


class HybridKind(DraftKind):
    name = "hybrid"
    syntax = "suffix+MODEL"
    summary = "suffix trees where the text repeats, the draft model MODEL elsewhere, e.g. 'suffix+eagle'"
    options = SUFFIX_OPTIONS  # the suffix drafter's (a backend's auto tunes them); the model's go to the model
    classes = (HybridDrafter,)

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        if not text.startswith(HYBRID_PREFIX):
            return None
        model = text[len(HYBRID_PREFIX):]
        inner = next((s for k in _model_kinds() if (s := k.parse(model, options)) is not None), None)
        if inner is None or model in ("", "auto", "ngram", "suffix"):
            what = f", not the model-free drafter {model!r}" if model in ("ngram", "suffix") else ""
            raise ValueError(f"draft {text!r}: after 'suffix+' name a draft MODEL ('eagle', 'eagle:PATH', 'distilled', "
                             f"a directory, PATH.gguf or xvocab[-slem]:PATH){what}")
        return DraftSpec(self.name, text, options=self.fill(options), inner=inner)

    def from_object(self, obj: Any, options: Mapping[str, Any]) -> DraftSpec:
        inner = next((k for k in _model_kinds() if isinstance(obj.model, k.classes)), draft_kinds()["drafter"])
        return DraftSpec(self.name, type(obj).__name__, options=self.fill(options),
                         inner=inner.from_object(obj.model, {}), obj=obj)

    def check(self, spec: DraftSpec) -> None:
        assert spec.inner is not None
        spec.inner.check()

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        # suffix trees are GREEDY-law trees, so the model drafter's must be too (one verifier for both)
        return TreeSupport(laws=frozenset({DraftLaw.GREEDY}), default_children=2)

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> HybridDrafter:
        assert spec.inner is not None
        suffix = DraftSpec("suffix", "suffix", options=spec.options)
        model = spec.inner.load(target, dtype=dtype, device=device)
        # a priced draft model's measured pass (in one-token target passes) is the choice's c_d too
        pricing = getattr(model, "pricing", None)
        if pricing is not None:
            return HybridDrafter(suffix.load(target), model, draft_cost=pricing.pricer.draft_cost)
        return HybridDrafter(suffix.load(target), model)


KIND = register_kind(HybridKind())
