"""Exact enumeration of a model's autoregressive joint distribution, and a pooled chi-square test."""

from __future__ import annotations

from collections import Counter

import torch

from specot.audit.stats import pooled_chisquare
from specot.sampling import SamplingConfig, standardize


@torch.no_grad()
def exact_joint(model, prompt: list[int], length: int, sampling: SamplingConfig) -> dict[tuple[int, ...], float]:
    """P(x_1..x_length | prompt) for every continuation, by full forward passes (no cache)."""
    V = model.config.vocab_size
    probs: dict[tuple[int, ...], float] = {(): 1.0}
    for _ in range(length):
        prefixes = [k for k, v in probs.items() if v > 0]
        ids = torch.tensor([prompt + list(k) for k in prefixes])
        logits = model(input_ids=ids).logits[:, -1, :].double()
        p = standardize(logits, sampling)  # [M, V]
        nxt = {}
        for row, k in enumerate(prefixes):
            for t in range(V):
                if p[row, t] > 0:
                    nxt[k + (t,)] = probs[k] * float(p[row, t])
        probs = nxt
    return probs


def chi_square_pvalue(samples: list[tuple[int, ...]], expected_probs: dict[tuple[int, ...], float],
                      min_expected: float = 5.0) -> float:
    """Pearson chi-square p-value of ``samples`` against ``expected_probs``; cells with expected
    count below ``min_expected`` are pooled into one cell (:func:`specot.audit.stats.pooled_chisquare`,
    the audit's implementation). A sample outside the support gives 0."""
    counts = Counter(samples)
    if any(k not in expected_probs for k in counts):
        return 0.0
    keys = list(expected_probs)
    return pooled_chisquare([counts.get(k, 0) for k in keys], [expected_probs[k] for k in keys], min_expected,
                            merge_rest=False)[2]


def chain_path(tree) -> list[int]:
    """Node ids of a draft tree's first chain, root excluded: from the root, each node's first draft."""
    node, path = 0, []
    while node in tree.drafts:
        node = tree.child_of[node][tree.drafts[node][0]]
        path.append(node)
    return path
