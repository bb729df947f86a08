"""A ready :class:`~specot.drafting.Drafter` of the caller's own: decoded as it drafts, as chains
(tree options need a draft model or a kind that declares its trees)."""

from __future__ import annotations

from typing import Any, Mapping

from ...drafting.base import Drafter
from ..draft import DraftKind, DraftSpec, TreeSupport, register_kind


class CustomKind(DraftKind):
    name = "drafter"
    classes = (Drafter,)
    order = 20  # every drafter is a Drafter: tried last

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        return None  # never named, only given

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        return TreeSupport(laws=frozenset())

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> Drafter:
        return spec.obj


KIND = register_kind(CustomKind())
