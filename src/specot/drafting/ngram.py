"""An n-gram drafter: prompt lookup in the context, then a token n-gram table, with back-off.

Prompt lookup (Saxena 2023; transformers' ``prompt_lookup_num_tokens``): find the most recent
earlier occurrence of the context's last ``m`` tokens (``m`` from ``n`` down to ``min_n``) and
propose the tokens that followed it. When the context has no match, the optional
:class:`NGramTable` (built from token sequences or text) proposes the most frequent continuation,
chained greedily. When nothing matches, the drafter proposes no token and the engine makes a plain
target step. Drafts are deterministic: they are verified as one-hot q (exact: Leviathan et al.'s rule with
q = δ_x accepts x with probability p(x) and otherwise draws from p without x, renormalised).
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch

from ..sampling import SamplingConfig
from .base import DraftTree, Drafter

__all__ = ["NGramTable", "NGramDrafter"]


@dataclass
class NGramTable:
    """Most frequent next token after each token m-gram, ``1 <= m <= n``.

    Attributes:
        n: the longest context length stored.
        next_token: maps a context tuple (length 1..n) to its most frequent next token id.
    """

    n: int = 3
    next_token: dict[tuple[int, ...], int] = field(default_factory=dict)

    @classmethod
    def from_token_sequences(cls, sequences: Iterable[Sequence[int]], n: int = 3) -> "NGramTable":
        """Count every (m-gram → next token) pair in ``sequences`` and keep the most frequent.

        Raises:
            ValueError: ``n < 1``.
        """
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        counts: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
        for seq in sequences:
            s = list(seq)
            for i in range(1, len(s)):
                for m in range(1, min(n, i) + 1):
                    counts[tuple(s[i - m:i])][s[i]] += 1
        table = {ctx: c.most_common(1)[0][0] for ctx, c in counts.items()}
        return cls(n=n, next_token=table)

    @classmethod
    def from_text(cls, texts: Iterable[str], tokenizer: Any, n: int = 3) -> "NGramTable":
        """Build from raw texts tokenized with ``tokenizer`` (a Hugging Face tokenizer)."""
        seqs = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts)
        return cls.from_token_sequences(seqs, n=n)

    def lookup(self, context: Sequence[int], min_n: int = 1) -> int | None:
        """Next token after the longest stored suffix of ``context`` (length >= ``min_n``), or None."""
        for m in range(min(self.n, len(context)), min_n - 1, -1):
            tok = self.next_token.get(tuple(context[len(context) - m:]))
            if tok is not None:
                return tok
        return None

    def __len__(self) -> int:
        return len(self.next_token)


class NGramDrafter(Drafter):
    """Prompt-lookup + n-gram-table drafter (deterministic drafts, verified as one-hot q).

    Args:
        n: longest suffix matched (default 3).
        min_n: shortest suffix matched before giving up (default 1).
        table: optional :class:`NGramTable` consulted when the context has no match.
        use_context: search the context itself (prompt lookup); default True.

    Raises:
        ValueError: ``n < 1`` or ``min_n`` outside ``[1, n]``.
    """

    name = "ngram"

    def __init__(self, n: int = 3, min_n: int = 1, table: NGramTable | None = None, use_context: bool = True) -> None:
        super().__init__()
        if n < 1 or not 1 <= min_n <= n:
            raise ValueError(f"need n >= 1 and 1 <= min_n <= n, got n={n}, min_n={min_n}")
        self.n, self.min_n, self.table, self.use_context = n, min_n, table, use_context

    def _context_match(self, ctx: Sequence[int], gamma: int) -> list[int]:
        L = len(ctx)
        for m in range(min(self.n, L - 1), self.min_n - 1, -1):
            suffix = list(ctx[L - m:])
            # most recent earlier occurrence whose continuation exists
            for start in range(L - m - 1, -1, -1):
                if list(ctx[start:start + m]) == suffix:
                    return list(ctx[start + m:start + m + gamma])
        return []

    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """A deterministic chain of up to ``min(schedule γ, gamma)`` tokens (``q = None``: the
        engine verifies it as a one-hot q on each token); the empty tree when nothing matches."""
        gamma = self.depth_limit(gamma)
        t0 = time.perf_counter()
        out: list[int] = []
        ctx = list(context)
        if self.use_context and gamma > 0:
            out = self._context_match(ctx, gamma)
        if self.table is not None:
            while len(out) < gamma:
                tok = self.table.lookup(ctx + out, self.min_n)
                if tok is None:
                    break
                out.append(tok)
        self.calls += 1
        self.draft_time_s += time.perf_counter() - t0
        return DraftTree.chain(int(ctx[-1]), out[:gamma])
