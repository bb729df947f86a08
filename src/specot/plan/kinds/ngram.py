"""``ngram``: prompt lookup plus an n-gram table (:class:`~specot.drafting.NGramDrafter`);
deterministic chains only."""

from __future__ import annotations

from typing import Any, Mapping

from ..._validation import check_count
from ...drafting.ngram import NGramDrafter
from ..corpus import check_corpus, ngram_table
from ..draft import DraftKind, DraftSpec, Option, TreeSupport, register_kind

#: The options of the model-free drafters: the longest n-gram matched and the table's text.
NGRAM_OPTIONS = {
    "ngram_n": Option(3, lambda v: check_count(v, "ngram_n", "--ngram-n"), "--ngram-n",
                      help="longest n-gram matched by the model-free drafters (ngram, suffix)"),
    "ngram_corpus": Option("pydoc", check_corpus, "--ngram-corpus", inert=("none",),
                           help="text of the model-free drafters' n-gram table: 'pydoc' (pydoc_data.topics), a file, "
                                "or 'none'"),
}


class NGramKind(DraftKind):
    name = "ngram"
    syntax = "ngram"
    summary = "prompt lookup plus an n-gram table; model-free chains"
    options = NGRAM_OPTIONS
    classes = (NGramDrafter,)

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        return DraftSpec(self.name, self.name, options=self.fill(options)) if text == "ngram" else None

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        return TreeSupport(laws=frozenset())  # one deterministic chain: trees need a draft model

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> NGramDrafter:
        n = spec.option("ngram_n")
        return NGramDrafter(n=n, table=ngram_table(spec.option("ngram_corpus"), target.tokenizer, n))


KIND = register_kind(NGramKind())
