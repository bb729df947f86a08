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

__all__ = ["NGramTable", "NGramCounts", "NGramDrafter"]


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


def _count_ngrams(seqs: list[torch.Tensor], n: int, top: int) -> dict[tuple[int, ...], list[tuple[int, float]]]:
    """:meth:`NGramCounts.from_token_sequences`'s table, counted in Python (any token ids)."""
    counts: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
    for seq in seqs:
        s = seq.tolist()
        for i in range(1, len(s)):
            for m in range(1, min(n, i) + 1):
                counts[tuple(s[i - m:i])][s[i]] += 1
    table = {}
    for ctx, c in counts.items():
        total = sum(c.values())
        best = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        table[ctx] = [(tok, k / total) for tok, k in best]
    return table


def _count_mgrams(seqs: list[torch.Tensor], m: int, top: int, vocab: int) -> dict[tuple[int, ...], list[tuple[int, float]]]:
    """The table's entries for the m-token contexts, counted with tensor ops: every (m + 1)-gram
    packed into one int64 (base ``vocab``), counted by ``torch.unique``, then the ``top`` most
    frequent next tokens of each context (ties: lower id), the same table as :func:`_count_ngrams`."""
    grams = [x.unfold(0, m + 1, 1) for x in seqs if x.numel() > m]  # [N_i, m + 1]
    if not grams:
        return {}
    g = torch.cat(grams)  # [N, m + 1]
    code = torch.zeros(g.shape[0], dtype=torch.int64)
    for j in range(m + 1):
        code = code * vocab + g[:, j]
    code, count = torch.unique(code, return_counts=True)  # ascending: by context, then next token
    ctx, nxt = code // vocab, code % vocab
    order = torch.sort(-count, stable=True).indices  # most frequent first, ties keep the lower id
    order = order[torch.sort(ctx[order], stable=True).indices]  # grouped by context again
    ctx, nxt, count = ctx[order], nxt[order], count[order]
    _, per_ctx = torch.unique_consecutive(ctx, return_counts=True)
    start = torch.cumsum(per_ctx, 0) - per_ctx  # first row of each context
    group = torch.repeat_interleave(torch.arange(per_ctx.numel()), per_ctx)
    rank = torch.arange(ctx.numel()) - start[group]
    total = torch.zeros(per_ctx.numel(), dtype=torch.int64).index_add_(0, group, count)[group]
    keep = rank < top
    digits = []  # the context's tokens, first to last
    c = ctx[keep]
    for _ in range(m):
        digits.append(c % vocab)
        c = c // vocab
    rows = zip(zip(*[d.tolist() for d in reversed(digits)]), nxt[keep].tolist(), count[keep].tolist(),
               total[keep].tolist())
    table: dict[tuple[int, ...], list[tuple[int, float]]] = {}
    for key, tok, k, tot in rows:
        table.setdefault(key, []).append((tok, k / tot))
    return table


class NGramCounts:
    """The ``top`` most frequent continuations of every token m-gram (``1 <= m <= n``) of a corpus,
    with their relative frequencies — a multi-candidate corpus for :class:`SuffixDrafter`.

    Attributes:
        n: the longest context stored.
        table: context tuple → ``[(token, frequency), ..]`` (decreasing frequency, ties: lower id).
    """

    def __init__(self, n: int, table: dict[tuple[int, ...], list[tuple[int, float]]]) -> None:
        self.n, self.table = n, table

    @classmethod
    def from_token_sequences(cls, sequences, n: int = 3, top: int = 4) -> "NGramCounts":
        """Count every (m-gram → next token) pair of ``sequences`` and keep the ``top`` most frequent.

        Raises:
            ValueError: ``n < 1`` or ``top < 1``.
        """
        if n < 1 or top < 1:
            raise ValueError(f"need n >= 1 and top >= 1, got n={n}, top={top}")
        seqs = [torch.as_tensor([int(t) for t in seq], dtype=torch.int64) for seq in sequences]
        seqs = [x for x in seqs if x.numel() >= 2]
        vocab = max((int(x.max()) for x in seqs), default=0) + 1
        if not seqs or min(int(x.min()) for x in seqs) < 0 or vocab ** (n + 1) >= 2 ** 63:
            return cls(n, _count_ngrams(seqs, n, top))  # ids that do not pack into one int64
        table: dict[tuple[int, ...], list[tuple[int, float]]] = {}
        for m in range(1, n + 1):
            table.update(_count_mgrams(seqs, m, top, vocab))
        return cls(n, table)

    @classmethod
    def from_text(cls, texts, tokenizer, n: int = 3, top: int = 4) -> "NGramCounts":
        """Build from raw texts tokenized with ``tokenizer`` (a Hugging Face tokenizer)."""
        seqs = (tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts)
        return cls.from_token_sequences(seqs, n=n, top=top)

    def continuations(self, context: Sequence[int], min_n: int = 1) -> list[tuple[int, float]]:
        """Continuations of the longest stored suffix of ``context`` (length >= ``min_n``), or ``[]``."""
        L = len(context)
        for m in range(min(self.n, L), min_n - 1, -1):
            got = self.table.get(tuple(context[L - m:]))
            if got is not None:
                return got
        return []

    def __len__(self) -> int:
        return len(self.table)
