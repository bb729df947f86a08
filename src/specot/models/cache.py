"""KV-cache surgery on Hugging Face ``DynamicCache`` objects: rollback and compaction.

Speculative decoding appends draft positions to the cache and then discards the rejected ones.
Rollback of a suffix uses the cache's own ``crop`` (transformers >= 5: a negative count of tokens
to remove), or moves a ``StaticCache``'s running length back. Keeping an arbitrary increasing subset of the positions (the committed prefix plus the
accepted path of a draft tree) moves the kept entries of each layer's key/value tensors
``[batch, heads, seq, head_dim]`` down IN PLACE and crops the rest: the committed prefix is never
copied. This is the one compaction routine of specot.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["cache_length", "crop_cache", "keep_cache_positions", "is_static"]


def is_static(cache: object) -> bool:
    """True for a transformers ``StaticCache`` (fixed-size per-layer buffers written at a running
    length; entries past the length are stale and masked out by the causal mask)."""
    layers = getattr(cache, "layers", None) or []
    return bool(layers) and all(hasattr(layer, "max_cache_len") and hasattr(layer, "cumulative_length")
                                for layer in layers)


def cache_length(cache: object) -> int:
    """Number of token positions held in ``cache`` (0 for ``None``)."""
    if cache is None:
        return 0
    return int(cache.get_seq_length())  # type: ignore[attr-defined]


def crop_cache(cache: object, length: int) -> None:
    """Drop every cached position at index ``>= length`` (in place). A static cache only moves its
    running length back (the stale entries are overwritten by the next pass, masked until then).

    Raises:
        ValueError: ``length`` is negative or longer than the cache.
    """
    have = cache_length(cache)
    if length < 0 or length > have:
        raise ValueError(f"cannot crop a cache of {have} positions to {length}")
    if length == have:
        return
    if is_static(cache):
        with torch.inference_mode():  # the cache's tensors were made under inference mode
            for layer in cache.layers:  # type: ignore[attr-defined]
                if getattr(layer, "is_initialized", False):
                    layer.cumulative_length.fill_(length)
        return
    cache.crop(-(have - length))  # type: ignore[attr-defined]


def keep_cache_positions(cache: object, keep: Tensor | list[int]) -> None:
    """Keep only the cached positions ``keep`` (int64 ``[K]``, strictly increasing), in place.

    Entry ``keep[j]`` moves to index ``j`` (entries already in place are not touched, so keeping the
    committed prefix plus a tree's accepted path moves only the path), then the cache is cropped to
    ``K`` positions. Works on caches whose layers expose ``keys``/``values`` tensors
    ``[batch, heads, seq, head_dim]`` (``DynamicCache`` and ``StaticCache`` in transformers >= 5).

    Raises:
        TypeError: the cache type does not expose per-layer key/value tensors.
        ValueError: ``keep`` is not strictly increasing within the cache.
    """
    layers = getattr(cache, "layers", None)
    if layers is None:
        raise TypeError(f"cannot compact a cache of type {type(cache).__name__}; use transformers.DynamicCache")
    idx = [int(i) for i in (keep.tolist() if isinstance(keep, Tensor) else keep)]
    have = cache_length(cache)
    if any(b <= a for a, b in zip(idx, idx[1:])) or (idx and (idx[0] < 0 or idx[-1] >= have)):
        raise ValueError(f"positions to keep must increase strictly within [0, {have}), got {idx[:8]}...")
    moved = [(j, s) for j, s in enumerate(idx) if j != s]
    if moved:
        dst_cpu = torch.tensor([d for d, _ in moved], dtype=torch.int64)
        src_cpu = torch.tensor([s for _, s in moved], dtype=torch.int64)
        with torch.inference_mode():  # the cache's tensors were made under inference mode
            _move_entries(layers, dst_cpu, src_cpu, {})
    crop_cache(cache, len(idx))


def _move_entries(layers: list, dst_cpu: Tensor, src_cpu: Tensor, on: dict[torch.device, tuple[Tensor, Tensor]]) -> None:
    """Move cache entries ``src`` → ``dst`` (int64 ``[M]``) in every layer's keys and values."""
    for layer in layers:
        k = getattr(layer, "keys", None)
        if k is None or k.numel() == 0:
            continue
        if k.device not in on:  # one host-to-device copy per device, not per layer
            on[k.device] = (dst_cpu.to(k.device), src_cpu.to(k.device))
        dst, src = on[k.device]
        layer.keys[..., dst, :] = layer.keys[..., src, :]  # the gather on the right is a copy
        layer.values[..., dst, :] = layer.values[..., src, :]
