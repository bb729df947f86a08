"""Standardized sampling (Leviathan Sec. 2.2) and exact categorical sampling."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sstats

from specot.sampling import SamplingConfig, sample_categorical, standardize


def test_temperature_zero_is_one_hot_argmax_first_on_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, -2.0], [0.0, 0.0, 0.0, 0.0]])
    p = standardize(logits, SamplingConfig(0.0))
    assert torch.equal(p, torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]]))


def test_temperature_scales_logits():
    logits = torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64)
    p = standardize(logits, SamplingConfig(0.5))
    assert torch.allclose(p, torch.softmax(logits / 0.5, -1), atol=1e-15)
    assert p.dtype == torch.float64


def test_top_k_keeps_k_largest():
    logits = torch.tensor([0.1, 2.0, -1.0, 1.5, 0.3])
    p = standardize(logits, SamplingConfig(1.0, top_k=2))
    assert (p > 0).tolist() == [False, True, False, True, False]
    assert p.sum().item() == pytest.approx(1.0)


def test_top_p_keeps_smallest_nucleus():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    logits = probs.log()
    assert (standardize(logits, SamplingConfig(1.0, top_p=0.5)) > 0).tolist() == [True, False, False, False]
    assert (standardize(logits, SamplingConfig(1.0, top_p=0.79)) > 0).tolist() == [True, True, False, False]
    assert (standardize(logits, SamplingConfig(1.0, top_p=0.81)) > 0).tolist() == [True, True, True, False]
    p = standardize(logits, SamplingConfig(1.0, top_p=0.79))
    assert torch.allclose(p, torch.tensor([0.625, 0.375, 0, 0], dtype=torch.float64))


def test_masked_logits_allowed_but_all_masked_rejected():
    p = standardize(torch.tensor([-math.inf, 0.0, 0.0]))
    assert p.tolist() == [0.0, 0.5, 0.5]
    with pytest.raises(ValueError, match="entirely -inf"):
        standardize(torch.tensor([-math.inf, -math.inf]))
    with pytest.raises(ValueError, match="NaN"):
        standardize(torch.tensor([0.0, math.nan]))
    with pytest.raises(TypeError):
        standardize(torch.tensor([1, 2]))


@pytest.mark.parametrize(
    "kwargs,err",
    [
        ({"temperature": -1.0}, ValueError),
        ({"temperature": math.nan}, ValueError),
        ({"temperature": math.inf}, ValueError),
        ({"temperature": "hot"}, TypeError),
        ({"top_k": -3}, ValueError),
        ({"top_k": 2.5}, TypeError),
        ({"top_p": 0.0}, ValueError),
        ({"top_p": 1.5}, ValueError),
        ({"top_p": math.nan}, ValueError),
    ],
)
def test_invalid_sampling_parameters_raise(kwargs, err):
    with pytest.raises(err):
        SamplingConfig(**kwargs)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-20, 20), min_size=2, max_size=30), st.floats(0.05, 3.0),
       st.integers(0, 10), st.floats(0.05, 1.0))
def test_standardize_always_gives_a_distribution(logits, temperature, top_k, top_p):
    p = standardize(torch.tensor(logits, dtype=torch.float64), SamplingConfig(temperature, top_k=top_k, top_p=top_p))
    assert torch.isfinite(p).all() and (p >= 0).all()
    assert p.sum().item() == pytest.approx(1.0, abs=1e-12)
    assert (p > 0).sum() >= 1


def test_sample_categorical_never_returns_zero_probability():
    p = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0]] * 4, dtype=torch.float64)
    edge = torch.tensor([0.0, 0.4999999, 0.5, 1.0 - 1e-17], dtype=torch.float64)
    idx = sample_categorical(p, uniforms=edge)
    assert idx.tolist() == [1, 1, 3, 3]
    with pytest.raises(ValueError, match="zero total"):
        sample_categorical(torch.zeros(1, 3))


def test_sample_categorical_matches_distribution_chi_square():
    # false-failure rate 1e-4 (fixed seed: deterministic)
    p = torch.tensor([0.05, 0.1, 0.0, 0.35, 0.5], dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    draws = sample_categorical(p.expand(20000, 5), g)
    counts = np.bincount(draws.numpy(), minlength=5)
    assert counts[2] == 0
    keep = p.numpy() > 0
    assert sstats.chisquare(counts[keep], p.numpy()[keep] * 20000).pvalue > 1e-4


def test_sample_categorical_reproducible():
    p = torch.softmax(torch.randn(3, 100), -1)
    a = sample_categorical(p, torch.Generator().manual_seed(1))
    b = sample_categorical(p, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)


# ---------------------------------------------------------------- sample_logits_row (the one-row fast path)
def _torch_row_sample(x: torch.Tensor, cfg: SamplingConfig, g: torch.Generator) -> int:
    return int(sample_categorical(standardize(x[None], cfg), g)[0])


@pytest.mark.parametrize("V", [3, 256, 257, 49152])
@pytest.mark.parametrize("T", [0.0, 0.7, 1.0])
def test_sample_logits_row_draws_what_the_torch_path_draws(V, T):
    """Same uniforms, the same tokens but where rounding splits them (the two CDFs differ by float32
    rounding of each probability, so a uniform in the far tail can land on a neighbouring
    near-zero-mass token: at most 3 of 300 seeded draws here, 0 at temperature 0), and the generator
    ends in the same state (one uniform per draw, temperature 0 included)."""
    from specot.sampling import sample_logits_row
    rng = np.random.default_rng(V)
    x = torch.from_numpy((rng.standard_normal(V) * 3).astype(np.float32))
    x[rng.integers(0, V, size=max(1, V // 4))] = -math.inf  # masked tokens
    cfg = SamplingConfig(temperature=T)
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    fast = [sample_logits_row(x, cfg, g1) for _ in range(300)]
    slow = [_torch_row_sample(x, cfg, g2) for _ in range(300)]
    assert sum(a != b for a, b in zip(fast, slow)) <= (0 if T == 0 else 3)
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))
    assert all(math.isfinite(float(x[t])) for t in fast)  # never a zero-probability token


def test_sample_logits_row_law_chi_square():
    """Seeded chi-square of 20,000 draws against softmax(x / T) on 600 tokens (3 blocks of the
    two-level CDF, the last one ragged), with rare cells pooled; false-failure rate 1e-4."""
    from specot.sampling import sample_logits_row
    rng = np.random.default_rng(3)
    x = torch.from_numpy((rng.standard_normal(600) * 2).astype(np.float32))
    cfg = SamplingConfig(temperature=0.8)
    p = torch.softmax(x.double() / 0.8, -1).numpy()
    g = torch.Generator().manual_seed(11)
    n = 20_000
    counts = np.bincount([sample_logits_row(x, cfg, g) for _ in range(n)], minlength=600)
    big = p * n >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(p[big] * n, p[~big].sum() * n)
    assert sstats.chisquare(obs, exp).pvalue > 1e-4


def test_sample_logits_row_a_planted_wrong_law_fails_the_chi_square():
    """The chi-square above can fail: draws at temperature 1 tested against softmax(x / 0.8)."""
    from specot.sampling import sample_logits_row
    rng = np.random.default_rng(3)
    x = torch.from_numpy((rng.standard_normal(600) * 2).astype(np.float32))
    p = torch.softmax(x.double() / 0.8, -1).numpy()
    g = torch.Generator().manual_seed(11)
    counts = np.bincount([sample_logits_row(x, SamplingConfig(1.0), g) for _ in range(20_000)], minlength=600)
    big = p * 20_000 >= 5
    obs = np.append(counts[big], counts[~big].sum())
    exp = np.append(p[big] * 20_000, p[~big].sum() * 20_000)
    assert sstats.chisquare(obs, exp).pvalue < 1e-4


def test_sample_logits_row_edges():
    from specot.sampling import sample_logits_row
    g = torch.Generator().manual_seed(0)
    one = torch.full((1000,), -math.inf)
    one[777] = 0.0
    assert {sample_logits_row(one, SamplingConfig(1.0), g) for _ in range(20)} == {777}
    ties = torch.tensor([1.0, 5.0, 5.0, 2.0])
    assert sample_logits_row(ties, SamplingConfig(0.0), g) == 1  # first maximal index
    for bad, msg in ((torch.tensor([0.0, math.nan, 1.0]), "NaN"), (torch.tensor([0.0, math.inf]), "NaN or"),
                     (torch.full((5,), -math.inf), "entirely -inf")):
        with pytest.raises(ValueError, match=msg):
            sample_logits_row(bad, SamplingConfig(1.0), g)
    # top-k / top-p / float64 take the torch path: same tokens as it
    x = torch.randn(300, generator=torch.Generator().manual_seed(1))
    for cfg, row in ((SamplingConfig(1.0, top_k=5), x), (SamplingConfig(1.0, top_p=0.5), x),
                     (SamplingConfig(1.0), x.double())):
        g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
        assert [sample_logits_row(row, cfg, g1) for _ in range(50)] == [_torch_row_sample(row, cfg, g2) for _ in range(50)]
