"""KV-cache surgery on Hugging Face ``DynamicCache`` objects: rollback and compaction.

Speculative decoding appends draft positions to the cache and then discards the rejected ones.
Rollback of a suffix uses the cache's own ``crop`` (transformers >= 5: a negative count of tokens
to remove). Keeping an arbitrary subset of the new positions (the accepted path of a draft tree)
re-indexes each layer's key/value tensors ``[batch, heads, seq, head_dim]`` along ``seq``.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["cache_length", "crop_cache", "keep_cache_positions"]


def cache_length(cache: object) -> int:
    """Number of token positions held in ``cache`` (0 for ``None``)."""
    if cache is None:
        return 0
    return int(cache.get_seq_length())  # type: ignore[attr-defined]


def crop_cache(cache: object, length: int) -> None:
    """Drop every cached position at index ``>= length`` (in place).

    Raises:
        ValueError: ``length`` is negative or longer than the cache.
    """
    have = cache_length(cache)
    if length < 0 or length > have:
        raise ValueError(f"cannot crop a cache of {have} positions to {length}")
    if length < have:
        cache.crop(-(have - length))  # type: ignore[attr-defined]


def keep_cache_positions(cache: object, keep: Tensor) -> None:
    """Keep only the cached positions listed in ``keep`` (int64 ``[K]``, increasing), in place.

    Used after tree verification: ``keep`` is the committed prefix followed by the accepted path's
    node positions. Works on caches whose layers expose ``keys``/``values`` tensors
    ``[batch, heads, seq, head_dim]`` (``DynamicCache`` in transformers >= 5).

    Raises:
        TypeError: the cache type does not expose per-layer key/value tensors.
    """
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"cannot compact a cache of type {type(cache).__name__}; use transformers.DynamicCache")
    keep = keep.to(torch.int64)
    for layer in layers:
        if getattr(layer, "keys", None) is None or layer.keys.numel() == 0:
            continue
        idx = keep.to(layer.keys.device)
        layer.keys = layer.keys.index_select(-2, idx)
        layer.values = layer.values.index_select(-2, idx)
