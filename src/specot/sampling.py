"""Standardized sampling (Leviathan et al. 2023, Sec. 2.2) and exact categorical sampling.

Argmax, top-k, nucleus (top-p) and temperature are all cast as sampling from an *adjusted*
distribution; speculative decoding stays exact when the SAME adjustment is applied to the target
logits (giving p) and the draft logits (giving q) before verification. Temperature 0 means argmax:
a one-hot distribution on the first maximal logit.

Sampling is by inverse CDF in float64 over uniforms drawn from an explicit ``torch.Generator`` (or
passed in pre-drawn), so every random decision in specot is reproducible and pinnable in tests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ._validation import check_generator

__all__ = ["SamplingConfig", "standardize", "sample_categorical", "sample_logits_row", "draw_uniforms"]


@dataclass(frozen=True)
class SamplingConfig:
    """Parameters of the standardized sampling transform, applied identically to p and q.

    Attributes:
        temperature: ``0`` means argmax (one-hot); otherwise a finite value ``> 0``.
        top_k: keep the ``top_k`` largest logits (ties at the boundary are kept); ``None`` or ``0``
            disables it.
        top_p: nucleus mass in ``(0, 1]``; the smallest set of tokens whose probability reaches
            ``top_p`` is kept (at least one token). ``1.0`` disables it.

    Raises:
        ValueError / TypeError: on construction, for a negative, NaN or infinite temperature, a
            negative or non-integer ``top_k``, or ``top_p`` outside ``(0, 1]``.
    """

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)):
            raise TypeError(f"temperature must be a number, got {type(t).__name__}")
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 = argmax), got {t}")
        k = self.top_k
        if k is not None:
            if isinstance(k, bool) or not isinstance(k, int):
                raise TypeError(f"top_k must be an int or None, got {type(k).__name__}")
            if k < 0:
                raise ValueError(f"top_k must be >= 0 (0 or None disables it), got {k}")
        tp = self.top_p
        if isinstance(tp, bool) or not isinstance(tp, (int, float)):
            raise TypeError(f"top_p must be a number, got {type(tp).__name__}")
        if not math.isfinite(tp) or not 0 < tp <= 1:
            raise ValueError(f"top_p must lie in (0, 1] (1 disables it), got {tp}")

    @property
    def greedy(self) -> bool:
        """True when the transform is argmax (temperature 0)."""
        return self.temperature == 0


def standardize(logits: Tensor, config: SamplingConfig | None = None) -> Tensor:
    """Turn logits ``[..., V]`` into the adjusted probabilities ``[..., V]`` (float32 or float64).

    Order, as in Hugging Face's logits processors: temperature, then top-k, then top-p.
    Temperature 0 returns the one-hot argmax distribution (first maximal index on ties).

    Args:
        logits: ``[..., V]`` floating tensor; ``-inf`` entries are allowed (masked tokens), NaN
            and ``+inf`` are not.
        config: the transform; defaults to ``SamplingConfig()`` (plain softmax).

    Returns:
        Probabilities ``[..., V]``, rows summing to 1, in float64 if ``logits`` is float64 else
        float32.

    Raises:
        TypeError: ``logits`` is not a floating tensor.
        ValueError: NaN or ``+inf`` logits, or a row that is entirely ``-inf``.
    """
    cfg = config or SamplingConfig()
    if not isinstance(logits, Tensor) or not logits.is_floating_point():
        raise TypeError("logits must be a floating-point torch.Tensor [..., V]")
    x = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)
    # one reduction checks everything: a row's maximum is NaN if the row holds a NaN, +inf if it
    # holds +inf, and -inf if the row is entirely -inf
    if not bool(torch.isfinite(x.amax(-1)).all()):
        if bool(torch.isnan(x).any()) or bool((x == math.inf).any()):
            raise ValueError("logits contain NaN or +inf; check the model's output")
        raise ValueError("a row of logits is entirely -inf: no token can be sampled")
    if cfg.temperature == 0:
        idx = x.argmax(-1, keepdim=True)
        return torch.zeros_like(x).scatter_(-1, idx, 1.0)
    x = x / cfg.temperature
    vocab = x.shape[-1]
    if cfg.top_k and cfg.top_k < vocab:
        kth = torch.topk(x, cfg.top_k, dim=-1).values[..., -1:]  # [..., 1]
        x = x.masked_fill(x < kth, -math.inf)
    probs = torch.softmax(x, dim=-1)
    if cfg.top_p < 1.0:
        sorted_p, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = sorted_p.cumsum(-1) - sorted_p  # [..., V] mass strictly above each token
        drop_sorted = mass_before >= cfg.top_p
        drop_sorted[..., 0] = False  # keep at least one token
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def draw_uniforms(shape: tuple[int, ...] | torch.Size, generator: torch.Generator | None,
                  device: torch.device | str = "cpu") -> Tensor:
    """Uniforms in ``[0, 1)`` (float64) of ``shape`` from ``generator`` (global RNG if ``None``).

    Raises:
        TypeError: ``generator`` is neither ``None`` nor a ``torch.Generator`` (e.g. a seed int).
    """
    if generator is not None and not isinstance(generator, torch.Generator):
        check_generator(generator)
    return torch.rand(tuple(shape), generator=generator, dtype=torch.float64, device=device)


def sample_categorical(probs: Tensor, generator: torch.Generator | None = None, *,
                       uniforms: Tensor | None = None) -> Tensor:
    """Draw one index per row of ``probs [..., V]`` by inverse CDF in float64.

    Rows need not be normalised (they are scaled by their own sum) but must have positive mass.
    A zero-probability index is never returned.

    Args:
        probs: ``[..., V]`` non-negative weights.
        generator: source of the uniforms (ignored when ``uniforms`` is given).
        uniforms: optional pre-drawn uniforms ``[...]`` in ``[0, 1)``.

    Returns:
        int64 indices ``[...]``.

    Raises:
        ValueError: a row with zero total mass, or ``uniforms`` of the wrong shape.
    """
    lead = probs.shape[:-1]
    if uniforms is None:
        uniforms = draw_uniforms(lead, generator, probs.device)
    elif tuple(uniforms.shape) != tuple(lead):
        raise ValueError(f"uniforms must have shape {tuple(lead)}, got {tuple(uniforms.shape)}")
    cdf = probs.to(torch.float64).cumsum(-1)  # [..., V]
    total = cdf[..., -1:]  # [..., 1]
    if bool((total <= 0).any()):
        raise ValueError("cannot sample from a row with zero total probability mass")
    target = uniforms.to(torch.float64).unsqueeze(-1) * total  # [..., 1]
    cdf = cdf.contiguous()
    idx = torch.searchsorted(cdf, target.contiguous(), right=True).squeeze(-1)  # [...]
    # Rounding can put u·total at (or past) the last step: clamp to the first index where the cdf
    # reaches the total, which has mass (the cdf rises there) — O(log V), no pass over V.
    last = torch.searchsorted(cdf, total.contiguous(), right=False).squeeze(-1)  # [...]
    return torch.minimum(idx, last)


_BLOCK = 256  # tokens per block of the two-level inverse CDF in :func:`sample_logits_row`


def sample_logits_row(logits: Tensor, config: SamplingConfig, generator: torch.Generator | None = None) -> int:
    """One token from the adjusted distribution of ONE row of logits ``[V]``: the law of
    ``sample_categorical(standardize(logits[None], config), generator)``, with the same
    consumption of ``generator`` (one float64 uniform, also at temperature 0), for the decoding
    loop's one-row steps on the CPU.

    A float32 CPU row without top-k / top-p is sampled in numpy, a few array passes instead of about
    twenty torch operations (their dispatch, not the arithmetic, is what a one-token step pays):
    weights ``w = exp((x - max) / T)``, then a two-level inverse CDF (float64 sums of blocks of
    :data:`_BLOCK` tokens, then a cumulative sum inside the chosen block). Token i is drawn with
    probability ``w_i / sum(w)`` up to float rounding, as in :func:`standardize`, and a
    zero-probability token is never returned. The drawn token can differ from the torch path's for
    the same uniform only where the uniform falls within rounding of a boundary of the CDF.
    Temperature 0 returns the first maximal index. Anything else (another dtype or device, top-k,
    top-p, a row :func:`standardize` refuses) takes the torch path, with its errors.

    Raises:
        ValueError: NaN or ``+inf`` logits, or a row that is entirely ``-inf`` (from
            :func:`standardize`).
    """
    if (logits.dim() != 1 or logits.device.type != "cpu" or logits.dtype != torch.float32
            or (config.top_k and config.top_k < logits.shape[-1]) or config.top_p < 1.0):
        return int(sample_categorical(standardize(logits[None], config), generator)[0])
    a = logits.detach().numpy()
    top = int(a.argmax())  # numpy's argmax returns the first NaN if there is one
    m = float(a[top])
    if not math.isfinite(m):  # NaN, +inf or a row of -inf: the torch path raises its error
        return int(sample_categorical(standardize(logits[None], config), generator)[0])
    u = float(draw_uniforms((1,), generator)[0])  # drawn at temperature 0 too, as sample_categorical
    if config.temperature == 0:
        return top
    w = np.exp((a - np.float32(m)) * np.float32(1.0 / config.temperature))  # [V] float32, max 1
    block_mass = np.cumsum(np.add.reduceat(w, np.arange(0, w.shape[0], _BLOCK), dtype=np.float64))  # [V / _BLOCK]
    t = u * float(block_mass[-1])
    b = min(int(np.searchsorted(block_mass, t, side="right")), block_mass.shape[0] - 1)
    while block_mass[b] <= (block_mass[b - 1] if b else 0.0):  # rounding past the end: last block with mass
        b -= 1
    t -= float(block_mass[b - 1]) if b else 0.0
    cdf = np.cumsum(w[b * _BLOCK:(b + 1) * _BLOCK], dtype=np.float64)  # [_BLOCK]
    j = int(np.searchsorted(cdf, t, side="right"))
    if j >= cdf.shape[0]:  # rounding: the first index where the block's CDF reaches its total (it rises there)
        j = int(np.searchsorted(cdf, cdf[-1], side="left"))
    return b * _BLOCK + j
