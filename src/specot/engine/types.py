"""Configuration, statistics and result dataclasses of the decoding engine."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .._validation import check_count, check_seed
from ..drafting.base import DraftSchedule
from ..sampling import SamplingConfig

__all__ = ["GenerationConfig", "GenerationStats", "GenerationResult"]


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate.

    Attributes:
        max_new_tokens: exact cap on generated tokens (>= 1).
        gamma: draft length γ (>= 1): tokens proposed per iteration along one draft.
        sampling: the standardized-sampling transform applied to target and draft alike.
        seed: seed of the ``torch.Generator`` behind every random decision (``None``: random).
        stop_at_eos: stop after the first end-of-sequence token (it is emitted, nothing after it).
        gamma_schedule: ``"constant"`` (γ every iteration) or ``"heuristic"`` (Hugging Face's
            assisted-generation schedule, :class:`specot.drafting.DraftSchedule`, owned by the
            drafter). The draft length depends only on past outcomes, so the output law is
            unchanged (still exact).

    Raises:
        ValueError: ``max_new_tokens < 1``, ``gamma < 1``, a seed outside what a ``torch.Generator``
            takes, or an unknown ``gamma_schedule``.
        TypeError: a seed that is not an int or ``None``.
    """

    max_new_tokens: int = 128
    gamma: int = 4
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    seed: int | None = 0
    stop_at_eos: bool = True
    gamma_schedule: str = "constant"

    def __post_init__(self) -> None:
        for name in ("max_new_tokens", "gamma"):
            check_count(getattr(self, name), name)
        check_seed(self.seed)
        DraftSchedule.check_kind(self.gamma_schedule, "gamma_schedule")


@dataclass
class GenerationStats:
    """Statistics of one generation.

    Attributes:
        new_tokens: tokens generated (EOS included when emitted).
        target_calls: serial forward passes of the target (prefill included).
        draft_calls: draft forward passes (or n-gram lookups).
        iterations: draft-verify iterations (equals ``target_calls`` for speculative decoding).
        drafted: draft tokens proposed in total (every node of every draft tree).
        accepted: draft tokens accepted in total (their ratio: :attr:`accepted_per_drafted`).
        accepted_at: per draft position i (0-based), how many times position i was accepted.
        tried_at: per draft position i, how many times a draft token stood at position i and was
            verified (positions after the first rejection are not counted).
        draft_time_s / target_time_s / total_time_s: wall time, seconds (device-synchronised).
        tree_sizes: draft tokens (tree nodes) per iteration.
        accepted_lengths: accepted draft tokens per iteration.
    """

    new_tokens: int = 0
    target_calls: int = 0
    draft_calls: int = 0
    iterations: int = 0
    drafted: int = 0
    accepted: int = 0
    accepted_at: list[int] = field(default_factory=list)
    tried_at: list[int] = field(default_factory=list)
    draft_time_s: float = 0.0
    target_time_s: float = 0.0
    total_time_s: float = 0.0
    tree_sizes: list[int] = field(default_factory=list)
    accepted_lengths: list[int] = field(default_factory=list)

    @property
    def block_efficiency(self) -> float:
        """Decoded tokens per serial target call (SpecTr's block efficiency)."""
        return self.new_tokens / self.target_calls if self.target_calls else 0.0

    @property
    def accepted_per_drafted(self) -> float:
        """Accepted draft tokens ÷ drafted tokens (0 when nothing was drafted): the share of the draft
        tree's nodes that were committed. Not the acceptance rate α of the verifiers
        (``Verifier.acceptance``: the probability that the emitted token is a draft): a tree drafts
        many nodes per position and commits at most one, so for trees the two differ widely."""
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def acceptance_per_position(self) -> list[float]:
        """P(accept draft position i | positions < i accepted), per position."""
        return [a / t if t else 0.0 for a, t in zip(self.accepted_at, self.tried_at)]

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of total wall time."""
        return self.new_tokens / self.total_time_s if self.total_time_s > 0 else 0.0

    @property
    def overhead_time_s(self) -> float:
        """Wall time outside the two models' forward passes (verification, sampling, bookkeeping)."""
        return max(self.total_time_s - self.draft_time_s - self.target_time_s, 0.0)

    @property
    def overhead_share(self) -> float:
        """Share of wall time outside the two models' forward passes (verification, sampling,
        bookkeeping, host syncs)."""
        return self.overhead_time_s / self.total_time_s if self.total_time_s > 0 else 0.0

    @property
    def mean_tree_size(self) -> float:
        """Mean draft tokens per iteration."""
        return sum(self.tree_sizes) / len(self.tree_sizes) if self.tree_sizes else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Mean accepted draft tokens per iteration."""
        return sum(self.accepted_lengths) / len(self.accepted_lengths) if self.accepted_lengths else 0.0

    def record_position(self, i: int, accepted: bool) -> None:
        while len(self.tried_at) <= i:
            self.tried_at.append(0)
            self.accepted_at.append(0)
        self.tried_at[i] += 1
        self.accepted_at[i] += int(accepted)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            block_efficiency=self.block_efficiency,
            accepted_per_drafted=self.accepted_per_drafted,
            acceptance_per_position=self.acceptance_per_position,
            tokens_per_s=self.tokens_per_s,
            overhead_time_s=self.overhead_time_s,
            overhead_share=self.overhead_share,
            mean_tree_size=self.mean_tree_size,
            mean_accepted_length=self.mean_accepted_length,
        )
        return d


@dataclass
class GenerationResult:
    """Output of a generation: the new token ids, the decoded text (when a tokenizer is known)
    and the statistics."""

    tokens: list[int]
    text: str
    stats: GenerationStats
    method: str = "speculative"

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "text": self.text, "tokens": self.tokens, "stats": self.stats.to_dict()}
