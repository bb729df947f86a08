"""Weight-only int8 linear layers for draft networks.

A draft head's pass over 2–8 tokens on a CPU is memory-bound: it reads every weight once and does
little arithmetic with it (matrix products are two thirds of an EAGLE head pass, profiled on a
2-core CPU). Storing the weights as int8 with one scale per output row halves the bytes
read against bfloat16. On the CPU the product runs in PyTorch's fused int8-weight kernel
(``aten._weight_int8pack_mm``, the kernel behind gpt-fast's and torchao's weight-only int8 on CPU);
elsewhere the weight is dequantized on the fly (gpt-fast's ``WeightOnlyInt8Linear``).

Only ever applied to a *draft*: verification stays lossless whatever the draft computes, because
the draft law q is the distribution the drafts are actually sampled from. The target is never
quantized (its logits define the output law).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

__all__ = ["Int8Linear", "quantize_linears_int8"]


class Int8Linear(nn.Module):
    """``y = x @ (scale · W_q)ᵀ``: a bias-free linear layer with int8 weights ``W_q [N, K]`` and one
    float scale per output row ``scale [N]`` (symmetric, ``max |W[n]| / 127``).

    Built by :meth:`from_linear`; ``forward`` takes ``x [..., K]`` in the scales' dtype and returns
    ``[..., N]``. The error per weight is at most ``scale / 2`` (round to nearest). The fused CPU
    kernel runs when ``K`` is a multiple of 64; other widths dequantize on the fly.
    """

    def __init__(self, weight_int8: Tensor, scale: Tensor) -> None:
        super().__init__()
        if weight_int8.dtype != torch.int8 or weight_int8.dim() != 2 or scale.shape != weight_int8.shape[:1]:
            raise ValueError(f"Int8Linear needs an int8 weight [N, K] and scales [N], got {weight_int8.dtype} "
                             f"{tuple(weight_int8.shape)} and {tuple(scale.shape)}")
        self.register_buffer("weight_int8", weight_int8.contiguous())
        self.register_buffer("scale", scale.contiguous())
        self.out_features, self.in_features = weight_int8.shape

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> "Int8Linear":
        """Quantize a bias-free ``nn.Linear`` per output row; the scales keep its dtype.

        Raises:
            ValueError: the layer has a bias (EAGLE-3 heads have none).
        """
        if linear.bias is not None:
            raise ValueError("Int8Linear quantizes bias-free layers only")
        w = linear.weight.detach().to(torch.float32, copy=True)  # [N, K], never the weight itself
        scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12)  # [N]
        # in place on the copy: the same values as round(w / scale) clamped, without three more [N, K]
        # float32 temporaries (loading the shipped head's nine layers: 24-55 ms -> 12-16 ms)
        q = w.div_(scale[:, None]).round_().clamp_(-127, 127).to(torch.int8)
        return cls(q, scale.to(linear.weight.dtype))

    @property
    def dtype(self) -> torch.dtype:
        """The activations' dtype (that of the scales)."""
        return self.scale.dtype

    def forward(self, x: Tensor) -> Tensor:  # x: [..., K] → [..., N]
        flat = x.reshape(-1, self.in_features)
        # the CPU kernel's bf16 path reads K in blocks (it crashed for K = 24, 33, 40 here): only
        # widths that are multiples of 64, as every EAGLE head's are
        if flat.device.type == "cpu" and flat.dtype == self.scale.dtype and self.in_features % 64 == 0:
            y = torch.ops.aten._weight_int8pack_mm(flat.contiguous(), self.weight_int8, self.scale)
        else:
            y = nn.functional.linear(flat, self.weight_int8.to(flat.dtype)) * self.scale.to(flat.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, scale dtype={self.scale.dtype}"


def quantize_linears_int8(module: nn.Module) -> nn.Module:
    """Replace every bias-free ``nn.Linear`` inside ``module`` by its :class:`Int8Linear`, in place;
    returns ``module``. Layers with a bias are left as they are."""
    for name, child in list(module.named_children()):
        if isinstance(child, nn.Linear) and child.bias is None:
            setattr(module, name, Int8Linear.from_linear(child))
        else:
            quantize_linears_int8(child)
    return module
