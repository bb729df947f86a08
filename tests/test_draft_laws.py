"""Draft samplers agree with the exact enumeration of each law; size and support errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from specot.laws import enumerate_draft_law, sample_drafts
from specot.laws import MAX_ENUMERATED_TUPLES, top_tokens
from specot.verifiers import DraftLaw
from verifier_helpers import chi_square_pvalue

ALPHA = 1e-4  # chi-square significance = false-failure rate per test (fixed seed: deterministic)


@pytest.mark.parametrize("law,n", [("iid", 1), ("iid", 2), ("iid", 3), ("wor", 2), ("wor", 3),
                                   ("greedy", 2), ("greedy", 3), ("spechub", 2)])
def test_sampler_matches_enumeration(law, n):
    q = torch.tensor([0.35, 0.25, 0.2, 0.12, 0.08], dtype=torch.float64)
    tuples, probs = enumerate_draft_law(q, n, law)
    assert abs(float(probs.sum()) - 1) < 1e-12
    assert tuples.shape[1] == n and len({tuple(t) for t in tuples.tolist()}) == tuples.shape[0]
    N = 40_000
    d = sample_drafts(q.expand(N, -1).contiguous(), n, law, torch.Generator().manual_seed(3))
    assert d.shape == (N, n) and d.dtype == torch.int64
    code = {tuple(t): i for i, t in enumerate(tuples.tolist())}
    idx = np.array([code.get(tuple(t), -1) for t in d.tolist()])
    assert (idx >= 0).all(), "sampled a tuple outside the law's support"
    counts = np.bincount(idx, minlength=len(code))
    assert chi_square_pvalue(counts, probs.numpy()) > ALPHA


def test_wor_probabilities_closed_form():
    q = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    t, pr = enumerate_draft_law(q, 2, "wor")
    got = {tuple(a): float(b) for a, b in zip(t.tolist(), pr)}
    assert math.isclose(got[(0, 1)], 0.5 * 0.3 / 0.5)
    assert math.isclose(got[(2, 0)], 0.2 * 0.5 / 0.8)


def test_top_tokens_tie_rule():
    q = torch.tensor([[0.2, 0.3, 0.2, 0.3, 0.0], [0.5, 0.5, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert top_tokens(q, 3).tolist() == [[1, 3, 0], [0, 1, 2]]
    assert top_tokens(q, 1).tolist() == [[1], [0]]


def test_support_and_size_errors():
    q = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    for law in ("wor", "greedy"):
        with pytest.raises(ValueError, match="q > 0"):
            sample_drafts(q, 3, law)
        with pytest.raises(ValueError, match="q > 0"):
            enumerate_draft_law(q[0], 3, law)
    with pytest.raises(ValueError, match="q > 0"):
        sample_drafts(torch.tensor([[1.0, 0.0]]), 2, "spechub")
    with pytest.raises(ValueError, match="n <= 2"):
        sample_drafts(q, 3, "spechub")
    with pytest.raises(ValueError, match="unknown draft law"):
        sample_drafts(q, 2, "bogus")
    big = torch.full((60,), 1 / 60, dtype=torch.float64)
    with pytest.raises(ValueError, match="MAX_ENUMERATED_TUPLES"):
        enumerate_draft_law(big, 4, DraftLaw.IID)
    assert 60**4 > MAX_ENUMERATED_TUPLES
    # iid with replacement may exceed the support
    t, pr = enumerate_draft_law(torch.tensor([1.0, 0.0]), 3, "iid")
    assert t.tolist() == [[0, 0, 0]] and float(pr[0]) == 1.0


def test_one_draft_laws_coincide():
    q = torch.tensor([[0.6, 0.4]])
    for law in DraftLaw:
        d = sample_drafts(q, 1, law, torch.Generator().manual_seed(0))
        assert d.shape == (1, 1)
