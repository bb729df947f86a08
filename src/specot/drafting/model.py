"""A draft model: any Hugging Face causal LM sharing the target's tokenizer."""

from __future__ import annotations

import time
from typing import Sequence

import torch

from ..models.hf import CausalLM
from ..sampling import SamplingConfig, sample_categorical, standardize
from .base import DraftProposal, Drafter

__all__ = ["ModelDrafter", "check_vocab_compatible"]


def check_vocab_compatible(target: CausalLM, draft: CausalLM) -> None:
    """Raise ``ValueError`` unless target and draft share one vocabulary.

    With both tokenizers known, their token→id maps must be identical (so every id means the same
    string); otherwise the number of logits used must match.
    """
    tt, dt = target.tokenizer, draft.tokenizer
    if tt is not None and dt is not None:
        tv, dv = tt.get_vocab(), dt.get_vocab()
        if tv != dv:
            only_t = len(set(tv.items()) - set(dv.items()))
            raise ValueError(
                f"tokenizer mismatch: draft {draft.name!r} ({len(dv)} tokens) and target {target.name!r} "
                f"({len(tv)} tokens) differ in {only_t} token→id entries; the draft model must use the "
                "target's tokenizer"
            )
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"vocabulary mismatch: target {target.name!r} has {target.vocab_size} logits, draft "
            f"{draft.name!r} has {draft.vocab_size}; the draft model must share the target's vocabulary"
        )


class ModelDrafter(Drafter):
    """Drafts γ tokens autoregressively from a draft :class:`CausalLM` (Leviathan Algorithm 1).

    Each proposal is sampled from the standardized draft distribution (same temperature/top-k/top-p
    as the target) with the engine's generator, and returns those distributions ``q [γ, V]``.
    """

    def __init__(self, model: CausalLM) -> None:
        super().__init__()
        self.model = model
        self.name = model.name

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def reset(self) -> None:
        self.model.reset()

    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftProposal:
        if gamma <= 0:
            return DraftProposal(tokens=[], q=None)
        t0 = time.perf_counter()
        tokens: list[int] = []
        qs = []
        logits = self.model.logits_after(context)[-1]  # [V]
        for i in range(gamma):
            q = standardize(logits, sampling)  # [V]
            tok = int(sample_categorical(q.unsqueeze(0), generator)[0])
            tokens.append(tok)
            qs.append(q)
            if i + 1 < gamma:
                logits = self.model.forward([tok])[-1]
        self.calls += gamma
        self.draft_time_s += time.perf_counter() - t0
        return DraftProposal(tokens=tokens, q=torch.stack(qs))  # q: [γ, V]
