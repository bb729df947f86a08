"""scripts/eval_cache_model.py: the buckets of match length and the scores per weight, on crafted rows."""

from __future__ import annotations

import pytest
import torch

from conftest import load_script

ev = load_script("eval_cache_model")


def test_every_match_length_has_one_bucket():
    assert [ev.bucket_of(m) for m in range(9)] == ["none", "1", "2", "3-4", "3-4", "5+", "5+", "5+", "5+"]


def test_scores_mix_only_rows_with_a_repeat():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    q = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])
    out = ev.score_positions(p, q, [(2, [1, 1]), (0, [])])  # row 0 repeats a 2-gram followed by token 1
    for lam in ev.WEIGHTS:
        one, two, n = out["2"][lam]
        assert n == 1 and one == pytest.approx(lam)  # Σ min(p, (1 − λ)·δ_0 + λ·δ_1) = λ
        # two GREEDY children: the top is token 0 up to λ = 1/2 (the rest, δ_1, is accepted), then
        # token 1 itself; without the cache (λ = 0) nothing is left beside the top
        assert two == pytest.approx(1.0 if lam > 0 else 0.0)
        assert out["none"][lam] == [0.0, 0.0, 1]  # no repeat: the head's law, which misses token 2
