"""Weight-only int8 linear layers (draft heads only)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from specot.models.int8 import Int8Linear, quantize_linears_int8


def _linear(n: int = 24, k: int = 40, dtype=torch.float32, seed: int = 0) -> nn.Linear:
    torch.manual_seed(seed)
    lin = nn.Linear(k, n, bias=False)
    with torch.no_grad():
        lin.weight.mul_(torch.linspace(0.1, 10.0, n)[:, None])  # rows of very different scales
    return lin.to(dtype)


def test_per_row_quantization_error_is_at_most_half_a_step():
    lin = _linear()
    q = Int8Linear.from_linear(lin)
    assert q.weight_int8.dtype == torch.int8 and q.scale.shape == (24,)
    deq = q.weight_int8.float() * q.scale[:, None]
    err = (deq - lin.weight).abs()
    assert bool((err <= q.scale[:, None] / 2 + 1e-6).all())
    assert int(q.weight_int8.abs().amax(dim=1).min()) == 127  # every row uses the full range


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_quantization_leaves_the_layer_alone_and_rounds_to_nearest(dtype):
    """from_linear works on a float32 copy in place: the source weight must stay as it was (a float32
    weight's .float() is the weight itself), and the ids must be round(w / scale) clamped to ±127."""
    lin = _linear(dtype=dtype, seed=3)
    before = lin.weight.detach().clone()
    q = Int8Linear.from_linear(lin)
    assert torch.equal(lin.weight.detach(), before)
    w = before.float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)
    assert torch.equal(q.weight_int8, torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8))
    assert torch.equal(q.scale, scale.to(dtype))


@pytest.mark.parametrize("k", [64, 40])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_is_the_dequantized_product_on_every_path(dtype, k):
    """The CPU kernel (input in the scales' dtype, K a multiple of 64) and the dequantize-on-the-fly
    path (other K — the kernel's bf16 path crashed on K = 40 — or another input dtype) compute
    x @ (scale · W_q)ᵀ; shapes [..., K] → [..., N]."""
    lin = _linear(k=k, dtype=dtype)
    q = Int8Linear.from_linear(lin)
    x = torch.randn(2, 3, k).to(dtype)
    want = x.float() @ (q.weight_int8.float() * q.scale.float()[:, None]).T  # [2, 3, 24]
    got = q(x)
    assert got.shape == (2, 3, 24) and got.dtype == dtype
    tol = 1e-4 if dtype == torch.float32 else 5e-2 * float(want.abs().max())
    torch.testing.assert_close(got.float(), want, atol=tol, rtol=1e-2)
    other = q(x.double())  # not the scales' dtype: the fallback path
    torch.testing.assert_close(other.float(), want, atol=tol, rtol=1e-2)


def test_quantize_linears_replaces_bias_free_layers_only():
    model = nn.Sequential(nn.Linear(8, 8, bias=False), nn.ReLU(), nn.Sequential(nn.Linear(8, 4, bias=True),
                                                                                nn.Linear(4, 4, bias=False)))
    quantize_linears_int8(model)
    assert isinstance(model[0], Int8Linear) and isinstance(model[2][1], Int8Linear)
    assert type(model[2][0]) is nn.Linear  # a bias: left as it is
    with pytest.raises(ValueError, match="bias-free"):
        Int8Linear.from_linear(nn.Linear(3, 3, bias=True))
    with pytest.raises(ValueError, match="int8 weight"):
        Int8Linear(torch.zeros(3, 3), torch.ones(3))
