"""Shared checks of the llama.cpp backend tests: greedy references with their logits, the near-tie
rule, a census of the KV cache, and crafted drafters.

**The near-tie bound.** llama.cpp's kernels for a pass over several tokens differ from a one-token
pass's (other GEMM paths, other grouping of rows), so a row's logits differ between the two by up to
about 1.1 anywhere in the vocabulary; the gap between the two largest logits moves much less: at most
0.30 (median 0.07) over 90 positions of three prompts (chains of four against one-token passes,
SmolLM2 Q4_1, docs/llamacpp.md). A token the backend emits greedily that is not the one-token argmax
is a near-tie when the one-token logits put it within :data:`NEAR_TIE` of the maximum. A token further
off is a bug (a misplaced row, a rejected token left in the KV cache).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import llama_cpp as lc
import torch

from specot.drafting.base import DraftTree, Drafter, greedy_q
from specot.laws import DraftLaw, sample_drafts

#: Largest gap (logits) between the one-token argmax and the emitted token that counts as a near-tie.
NEAR_TIE = 0.5


@dataclass
class Reference:
    """Greedy autoregressive decoding on the backend: one one-token pass per token."""

    tokens: list[int]
    logits: list[torch.Tensor]  # [V] per position: the one-token logits before token i


def one_token_logits(target, prompt: Sequence[int], tokens: Sequence[int]) -> list[torch.Tensor]:
    """The backend's one-token logits before each of ``tokens`` after ``prompt`` (teacher forcing):
    the prompt once, then one pass per token, exactly as autoregressive decoding runs them."""
    target.reset()
    ctx = list(prompt)
    out = [target.logits_after(ctx)[0]]
    for t in tokens[:-1]:
        ctx.append(int(t))
        out.append(target.logits_after(ctx)[0])
    return out


def greedy_reference(target, prompt: Sequence[int], n: int) -> Reference:
    target.reset()
    ctx, toks, logits = list(prompt), [], []
    for _ in range(n):
        row = target.logits_after(ctx)[0]
        logits.append(row)
        toks.append(int(row.argmax()))
        ctx.append(toks[-1])
    return Reference(toks, logits)


def gap_to_max(row: torch.Tensor, token: int) -> float:
    """How far below the row's maximum the token's logit lies (0 for the argmax)."""
    return float(row.max() - row[token])


def check_greedy(target, prompt: Sequence[int], emitted: Sequence[int], ref: Reference) -> int:
    """Assert that ``emitted`` is greedy decoding on the backend up to near-ties; returns the number
    of positions where it took a near-tied token instead of the one-token argmax.

    Up to the first divergence from ``ref`` the one-token logits are ``ref``'s; after it they are
    recomputed along ``emitted`` (teacher forcing), so every emitted token is checked against the
    one-token logits of its own prefix.
    """
    emitted = list(emitted)
    same = next((i for i, (a, b) in enumerate(zip(emitted, ref.tokens)) if a != b), min(len(emitted), len(ref.tokens)))
    rows = ref.logits[:same]
    if same < len(emitted):
        rows = rows + one_token_logits(target, list(prompt) + emitted[:same], emitted[same:])
    ties = 0
    for i, (tok, row) in enumerate(zip(emitted, rows)):
        gap = gap_to_max(row, tok)
        assert gap <= NEAR_TIE, (f"position {i}: emitted token {tok} lies {gap:.3f} below the one-token maximum "
                                 f"(token {int(row.argmax())}); a near-tie is at most {NEAR_TIE}")
        ties += gap > 0
    return ties


def cache_census(target) -> dict:
    """What the KV cache holds: the bytes of the whole state (grows with every occupied cell), the
    committed sequence's positions, and every other sequence id that still holds a cell."""
    mem = target._mem  # noqa: SLF001 - a test inspects the cache
    others = {s: (lc.llama_memory_seq_pos_min(mem, s), lc.llama_memory_seq_pos_max(mem, s))
              for s in range(target.max_leaves + 1) if s != target.main_seq}
    return {
        "state_bytes": int(lc.llama_state_get_size(target._ctx)),  # noqa: SLF001
        "main": (lc.llama_memory_seq_pos_min(mem, target.main_seq), lc.llama_memory_seq_pos_max(mem, target.main_seq)),
        "others": {s: r for s, r in others.items() if r[1] >= 0},
    }


def fresh_census(target, ids: Sequence[int]) -> dict:
    """The census of a cache that holds exactly ``ids`` (run as one chain after a reset)."""
    target.reset()
    target.logits_after(list(ids) + [0])  # ids and one more; the extra position is cut below
    target.rollback(len(ids))
    return cache_census(target)


class FixedTreeDrafter(Drafter):
    """A deterministic draft tree of given children per node (GREEDY law, as the suffix drafter's):
    ``children(context, path) -> tokens`` gives a node's children best first."""

    name = "fixed-tree"

    def __init__(self, vocab_size: int, children, gamma: int) -> None:
        super().__init__()
        self._vocab, self._children, self._gamma = vocab_size, children, gamma

    @property
    def vocab_size(self) -> int:
        return self._vocab

    def propose(self, context, gamma, sampling, generator=None) -> DraftTree:
        tree = DraftTree.root(int(context[-1]))
        tree.law = DraftLaw.GREEDY
        depth = min(self._gamma, self.depth_limit(gamma))
        rows, frontier = [], [0]
        for _ in range(depth):
            nxt = []
            for node in frontier:
                kids = [int(t) for t in dict.fromkeys(self._children(list(context), tree.path_tokens(node)))]
                if not kids:
                    continue
                rows.append((node, [1.0 / (j + 1) for j in range(len(kids))]))
                tree.q_row[node] = len(rows) - 1
                nxt += tree.add_children(node, kids)
            frontier = nxt
        if rows:
            tree.q = greedy_q(tree, rows, self._vocab)
            tree.deterministic = True
        return tree


class SampledChainDrafter(Drafter):
    """Chains of γ drafts sampled from a fixed q (``q_of(context) -> probabilities [V]``): the
    speculative verifier's accept / residual path with a q that is not the target's."""

    name = "sampled-chain"

    def __init__(self, vocab_size: int, q_of, gamma: int) -> None:
        super().__init__()
        self._vocab, self._q_of, self._gamma = vocab_size, q_of, gamma

    @property
    def vocab_size(self) -> int:
        return self._vocab

    def propose(self, context, gamma, sampling, generator=None) -> DraftTree:
        depth = min(self._gamma, self.depth_limit(gamma))
        ctx, toks, qs = list(context), [], []
        for _ in range(depth):
            q = self._q_of(ctx).to(torch.float64)[None]  # [1, V]
            t = int(sample_drafts(q, 1, DraftLaw.IID, generator)[0, 0])
            toks.append(t)
            qs.append(q)
            ctx.append(t)
        if not toks:
            return DraftTree.root(int(context[-1]))
        return DraftTree.chain(int(context[-1]), toks, torch.cat(qs))
