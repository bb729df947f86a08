"""The drafter interface: propose up to γ draft tokens after a context, with their draft distributions."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from ..sampling import SamplingConfig

__all__ = ["DraftProposal", "Drafter"]


@dataclass
class DraftProposal:
    """Draft tokens proposed after a context.

    Attributes:
        tokens: the drafted token ids, ``γ' <= γ`` of them (possibly none).
        q: draft probabilities ``[γ', V]`` the tokens were sampled from (after the same
            standardized-sampling transform as the target), or ``None`` for a deterministic draft
            (verified as a one-hot q on each token).
    """

    tokens: list[int]
    q: Tensor | None = None

    def __len__(self) -> int:
        return len(self.tokens)

    def draft_probs(self, vocab_size: int, dtype: torch.dtype = torch.float32) -> Tensor:
        """``q [γ', V]``: the stored draft probabilities, or one-hot rows for a deterministic draft."""
        if self.q is not None:
            return self.q
        q = torch.zeros(len(self.tokens), vocab_size, dtype=dtype)
        if self.tokens:
            q[torch.arange(len(self.tokens)), torch.tensor(self.tokens)] = 1.0
        return q


class Drafter(ABC):
    """Proposes draft tokens. Subclasses: :class:`NGramDrafter`, :class:`ModelDrafter`.

    Attributes:
        name: label used in statistics.
        draft_time_s: wall time spent proposing since :meth:`reset_stats`, seconds.
        calls: draft forward passes (or lookups) since :meth:`reset_stats`.
    """

    name: str = "drafter"

    def __init__(self) -> None:
        self.draft_time_s = 0.0
        self.calls = 0

    @property
    def vocab_size(self) -> int | None:
        """Vocabulary size of the draft distribution, when the drafter has one."""
        return None

    @abstractmethod
    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftProposal:
        """Propose at most ``gamma`` tokens to follow ``context`` (token ids)."""

    def reset(self) -> None:
        """Forget per-sequence state (caches) before a new prompt."""

    def reset_stats(self) -> None:
        self.draft_time_s = 0.0
        self.calls = 0
