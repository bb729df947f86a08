"""``suffix``: suffix decoding (:class:`~specot.drafting.SuffixDrafter`; Oliaro et al. 2024):
model-free draft trees from every earlier occurrence of the current suffix, GREEDY law."""

from __future__ import annotations

from typing import Any, Mapping

from ...drafting.suffix import SuffixDrafter
from ...laws import DraftLaw
from ..corpus import ngram_counts
from ..draft import DraftKind, DraftSpec, TreeSupport, register_kind
from .ngram import NGRAM_OPTIONS

#: Children per node of a suffix tree when none is given.
SUFFIX_CHILDREN = 4


class SuffixKind(DraftKind):
    name = "suffix"
    syntax = "suffix"
    options = NGRAM_OPTIONS
    classes = (SuffixDrafter,)

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        return DraftSpec(self.name, self.name, options=self.fill(options)) if text == "suffix" else None

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        # deterministic distinct children = the GREEDY law with q over the children
        width = spec.obj.children if spec.obj is not None else SUFFIX_CHILDREN
        return TreeSupport(laws=frozenset({DraftLaw.GREEDY}), own_shape=True, default_children=width, chains=False)

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> SuffixDrafter:
        corpus = ngram_counts(spec.option("ngram_corpus"), target.tokenizer, spec.option("ngram_n"))
        return SuffixDrafter(vocab_size=target.vocab_size, corpus=corpus)


KIND = register_kind(SuffixKind())
