"""A draft model: ``distilled`` (the shipped draft of the embedded target), a model directory or
hub id sharing the target's tokenizer, or a loaded :class:`~specot.models.CausalLM`
(:class:`~specot.drafting.ModelDrafter`); trees of any draft law."""

from __future__ import annotations

from typing import Any, Mapping

from ...drafting.model import ModelDrafter, check_vocab_compatible
from ...models.embedded import EMBEDDED_DRAFT, embedded_draft_dir, load_embedded_draft
from ...models.hf import CausalLM
from ...models.loading import check_model_source, load_model
from ..draft import DraftKind, DraftSpec, register_kind


class ModelKind(DraftKind):
    name = "model"
    syntax = "distilled | DIR | HUB_ID"
    summary = "a draft model sharing the target's tokenizer: the shipped distilled draft, a directory or a hub id"
    classes = (ModelDrafter, CausalLM)
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
        else:
            check_model_source(spec.source)

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> ModelDrafter:
        if isinstance(spec.obj, ModelDrafter):
            check_vocab_compatible(target, spec.obj.model)
            return spec.obj
        if isinstance(spec.obj, CausalLM):
            draft = spec.obj
        elif spec.source == EMBEDDED_DRAFT:
            draft = load_embedded_draft(dtype=dtype, device=device)
        else:
            draft = load_model(spec.source, dtype=dtype, device=device)
        if draft is target:
            raise ValueError("the draft wrapper must not be the target's own CausalLM (they would share a KV cache)")
        check_vocab_compatible(target, draft)
        return ModelDrafter(draft)


KIND = register_kind(ModelKind())
