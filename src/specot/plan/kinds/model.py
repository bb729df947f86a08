"""A draft model sharing the target's vocabulary: ``distilled`` (the shipped draft of the embedded
target), a model directory or hub id, a GGUF file, or a loaded :class:`~specot.models.CausalLM`
(:class:`~specot.drafting.ModelDrafter`).

A GGUF file (``--draft PATH.gguf``) runs as it is, in its own context, on an installed backend that
loads GGUF files (llama.cpp) when the plan runs on the CPU (:func:`~specot.plan.kinds.xvocab.gguf_draft_backend`),
else in torch by transformers; its vocabulary must be the target's (identical token strings, logits
no wider than the target's: :func:`~specot.drafting.check_vocab_compatible`; another vocabulary is
refused in one line naming ``xvocab:PATH``). On such a backend it drafts chains (a tree is refused),
priced where the target's and the draft's pass costs are measured (the option ``draft_pricing``,
default on: :func:`specot.drafting.pricing.priced_chains`; γ is then the most); elsewhere chains and
trees of any draft law, chains of γ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...drafting.model import ModelDrafter, check_vocab_compatible
from ...drafting.pricing import priced_chains
from ...models.embedded import EMBEDDED_DRAFT, embedded_draft_dir, load_embedded_draft
from ...models.hf import CausalLM
from ...models.loading import check_model_source, load_model
from ..draft import DraftKind, DraftSpec, Option, TreeSupport, register_kind
from .xvocab import _source_file, gguf_draft_backend, load_draft_model


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"draft_pricing must be True or False, got {value!r}")
    return value


#: The draft model's options: whether a draft model on a backend with measured pass costs prices its
#: chains (:mod:`specot.drafting.pricing`) or drafts chains of γ.
MODEL_OPTIONS = {"draft_pricing": Option(True, _check_bool,
                                         help="price a GGUF draft model's chains by the measured pass costs")}


def _is_gguf(source: Any) -> bool:
    return isinstance(source, str) and Path(source).suffix.lower() == ".gguf"


class ModelKind(DraftKind):
    name = "model"
    syntax = "distilled | DIR | HUB_ID | PATH.gguf"
    summary = ("a draft model sharing the target's tokenizer: the shipped distilled draft, a directory, a hub id "
               "or a GGUF file")
    classes = (ModelDrafter, CausalLM)
    options = MODEL_OPTIONS
    order = 10  # any name may be a directory or a hub id: tried after the named kinds

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        if not text or text in ("auto", "ngram", "suffix") or text.startswith("suffix+"):
            return None
        return DraftSpec(self.name, text, source=text, options=self.fill(options))

    def check(self, spec: DraftSpec) -> None:
        if spec.obj is not None:
            return
        if spec.source == EMBEDDED_DRAFT:
            if not (embedded_draft_dir() / "config.json").exists():
                raise FileNotFoundError(f"no distilled draft checkpoint in {embedded_draft_dir()}; reinstall specot "
                                        "or use draft 'ngram'")
        elif _is_gguf(spec.source):
            directory, gguf = _source_file(str(spec.source))
            check_model_source(directory, gguf_file=gguf)
        else:
            check_model_source(spec.source)

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        """Any law; chains only for a GGUF file that a GGUF backend runs on the CPU (its drafter
        scores one token per draft pass)."""
        if spec.obj is None and _is_gguf(spec.source) and gguf_draft_backend("auto", str(spec.source), "cpu"):
            return TreeSupport(laws=frozenset())
        return TreeSupport()

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> ModelDrafter:
        if isinstance(spec.obj, ModelDrafter):
            check_vocab_compatible(target, spec.obj.model)
            return spec.obj
        if _is_gguf(spec.source) and spec.obj is None:
            return self._load_gguf(spec, target, dtype=dtype, device=device)
        if isinstance(spec.obj, CausalLM):
            draft = spec.obj
        elif spec.source == EMBEDDED_DRAFT:
            draft = load_embedded_draft(dtype=dtype, device=device)
        else:
            draft = load_model(spec.source, dtype=dtype, device=device)
        if draft is target:
            raise ValueError("the draft wrapper must not be the target's own CausalLM (they would share a KV cache)")
        check_vocab_compatible(target, draft)
        return ModelDrafter(draft, width=target.vocab_size)

    @staticmethod
    def _load_gguf(spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> ModelDrafter:
        """A GGUF draft: on a GGUF backend in its own context (priced), else de-quantized in torch."""
        source = str(spec.source)
        backend = gguf_draft_backend("auto", source, device)
        draft = load_draft_model(source, backend=backend, dtype=dtype, device=device)
        try:
            check_vocab_compatible(target, draft, source=source)
        except ValueError:
            close = getattr(draft, "close", None)
            if callable(close):
                close()
            raise
        pricing = priced_chains(target, draft) if backend is not None and spec.option("draft_pricing") else None
        return ModelDrafter(draft, pricing=pricing, width=target.vocab_size)


KIND = register_kind(ModelKind())
