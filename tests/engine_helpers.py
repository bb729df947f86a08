"""Exact enumeration of a model's autoregressive joint distribution, and a pooled chi-square test."""

from __future__ import annotations

from collections import Counter

import numpy as np
import torch
from scipy import stats as sstats

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
    count below ``min_expected`` are pooled into one cell. A sample outside the support gives 0."""
    n = len(samples)
    counts = Counter(samples)
    if any(k not in expected_probs for k in counts):
        return 0.0
    big = [k for k, v in expected_probs.items() if v * n >= min_expected]
    small = [k for k, v in expected_probs.items() if v * n < min_expected]
    obs = [counts.get(k, 0) for k in big]
    exp = [expected_probs[k] * n for k in big]
    if small:
        obs.append(sum(counts.get(k, 0) for k in small))
        exp.append(sum(expected_probs[k] for k in small) * n)
    obs_a, exp_a = np.array(obs, float), np.array(exp, float)
    exp_a *= obs_a.sum() / exp_a.sum()
    if len(obs_a) < 2:
        return 1.0
    return float(sstats.chisquare(obs_a, exp_a).pvalue)
