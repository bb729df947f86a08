"""The full-vocabulary passes of the ``ot`` plan (:mod:`specot.verifiers.ot`): the ratio order, the
suffix sums, the w-masses, PAVA, and the work arrays they run in.

Sources. The order and the minorant are step 1 of :mod:`specot.verifiers.ot` (SpecTr's OTM-n, Sun et
al. 2023; α* of Hu et al., ICLR 2025); PAVA is scipy's (``scipy.optimize.isotonic_regression``).

Work arrays. A position makes ~20 arrays of V float64 (V = 49152: 384 KiB each). glibc hands
freed heap memory back to the kernel once a few MiB are free at its top, so arrays made afresh at
every position land on new pages, and each first touch of a page is a page fault (~750 per
position, 1–2 µs each on a shared 2-core CPU: as much as the sort). :func:`work_array` keeps one
array per named slot and thread and hands it out again once nothing else holds it (CPython's
reference count says so); a plan that is still alive keeps its arrays, and the next plan gets new
ones. Per thread this holds ~13 arrays of V entries (~5 MiB at V = 49152).

Floating point: the same operations in the same order as the plain expressions they replace
(``p / q``, ``x.astype(float32)``, a sequential scan, ``z2^n − z1^n`` as a sum of positive
terms), so the results are the same bit for bit.
"""

from __future__ import annotations

import functools
import sys
import threading

import numpy as np
import scipy.optimize
import torch

try:  # scipy's PAVA kernel itself: isotonic_regression's input copies and checks cost ~2 passes over V
    from scipy.optimize._pava_pybind import pava as _pava
except ImportError:  # pragma: no cover - another scipy layout: the public wrapper (same result)
    _pava = None

__all__ = ["work_array", "index_range", "ratio_words", "ratio_order_words", "ratio_order", "suffix_sums",
           "wmass_into", "isotonic"]

_POOL = threading.local()


def _free_refs() -> int:
    """The reference count :func:`work_array` sees for a buffer that only its dict holds (measured
    the same way, so an interpreter that counts differently is calibrated, not trusted)."""
    arrays = {"slot": np.empty(1)}
    buf = arrays.get("slot")
    return sys.getrefcount(buf)


#: CPython's reference counts tell whether a buffer is free; elsewhere every call gets a new array.
_FREE_REFS = _free_refs() if sys.implementation.name == "cpython" else -1


def work_array(slot: str, size: int, dtype: type | np.dtype) -> np.ndarray:
    """An uninitialised array ``[size]`` of ``dtype``: this thread's array of ``slot`` when nothing
    else holds it (and it is large enough; a view of its start), else a new one kept for the slot."""
    arrays: dict[str, np.ndarray] | None = getattr(_POOL, "arrays", None)
    if arrays is None:
        arrays = _POOL.arrays = {}
    buf = arrays.get(slot)
    if buf is None or buf.dtype != dtype or buf.size < size or sys.getrefcount(buf) != _FREE_REFS:
        buf = arrays[slot] = np.empty(size, dtype=dtype)
    return buf[:size]


@functools.lru_cache(maxsize=16)
def index_range(size: int, dtype: type = np.int64) -> np.ndarray:
    """``arange(size)`` (cached, read-only)."""
    out = np.arange(size, dtype=dtype)
    out.flags.writeable = False
    return out


def _ratio_keys(p: np.ndarray, q: np.ndarray, pooled: bool) -> np.ndarray:
    """The sort key ``p/q`` ``[V]`` (``inf`` where ``q = 0 < p``, 0 where ``p = 0``)."""
    if p.size and bool(p.min() > 0) and bool(q.min() > 0):  # full support: the plain ratio
        return np.divide(p, q, out=work_array("key", p.size, np.float64) if pooled else None)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(p > 0, p / q, 0.0)


def ratio_words(key: np.ndarray, pooled: bool = False) -> np.ndarray:
    """``[V]`` uint64 words: the complement of the float32-rounded key's bits (high half; non-negative
    floats order as their bits) and the token index (low half), so ascending words are the keys
    descending, ties by index. ``pooled``: in work arrays (:func:`work_array`)."""
    k32 = work_array("key32", key.size, np.float32) if pooled else np.empty(key.size, np.float32)
    with np.errstate(over="ignore"):
        np.copyto(k32, key, casting="same_kind")  # = key.astype(float32)
    words = work_array("words", key.size, np.uint64) if pooled else np.empty(key.size, np.uint64)
    np.copyto(words, k32.view(np.uint32))
    words ^= np.uint64(0xFFFFFFFF)
    words <<= np.uint64(32)
    words |= index_range(key.size, np.uint64)
    return words


def ratio_order_words(p: np.ndarray, q: np.ndarray, pooled: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(order [V], sorted words [V], key [V])``: the token indices by ``p/q`` descending (``q = 0 <
    p`` first, ``p = 0`` last; ties by index), exactly the float64 order.

    One sort of 64-bit words (:func:`ratio_words`: a radix-friendly key, several times faster than an
    argsort of float64), then the runs whose float32 keys tie but whose float64 ratios differ are
    sorted again by the float64 ratio (rounding is monotone, so no token leaves its run)."""
    key = _ratio_keys(p, q, pooled)
    packed = ratio_words(key, pooled)
    packed.sort()
    halves = packed.view(np.uint32).reshape(-1, 2)  # [low, high] per word on a little-endian machine
    low, hi = (halves[:, 0], halves[:, 1]) if sys.byteorder == "little" else (halves[:, 1], halves[:, 0])
    order = work_array("order", p.size, np.int64) if pooled else np.empty(p.size, np.int64)
    np.copyto(order, low)
    tie = work_array("tie", max(p.size - 1, 0), np.bool_) if pooled else None
    t = np.flatnonzero(np.equal(hi[1:], hi[:-1], out=tie))  # sorted positions t, t + 1 tie in float32
    if t.size and bool(np.any(key[order[t]] != key[order[t + 1]])):
        first = np.concatenate(([True], t[1:] != t[:-1] + 1))  # t starts a run of ties
        label = np.cumsum(first) - 1
        bad = np.zeros(int(label[-1]) + 1, dtype=bool)
        bad[label[key[order[t]] != key[order[t + 1]]]] = True
        pos = np.unique(np.concatenate((t[bad[label]], t[bad[label]] + 1)))
        sub = order[pos]
        order[pos] = sub[np.lexsort((sub, -key[sub]))]
    return order, packed, key


def ratio_order(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Token indices ``[V]`` by ``p/q`` descending (``q = 0 < p`` first, ``p = 0`` last; ties by
    index), exactly the float64 order (:func:`ratio_order_words`)."""
    return ratio_order_words(p, q)[0]


def suffix_sums(x: np.ndarray, pooled: bool = False) -> np.ndarray:
    """``Z [V + 1]``: ``Z[k] = Σ_{i ≥ k} x_i`` (``Z[V] = 0``), summed sequentially from the end (the
    tail keeps full relative precision); torch's CPU scan of one float64 row is that sequential sum,
    several times faster than numpy's."""
    size = x.size
    rev = work_array("rev", size, np.float64) if pooled else np.empty(size)
    cum = work_array("cum", size, np.float64) if pooled else np.empty(size)
    np.copyto(rev, x[::-1])
    torch.cumsum(torch.from_numpy(rev), 0, out=torch.from_numpy(cum))
    out = work_array("Z", size + 1, np.float64) if pooled else np.empty(size + 1)
    out[-1] = 0.0
    out[-2::-1] = cum
    return out


def wmass_into(z1: np.ndarray, z2: np.ndarray, length: np.ndarray, n: int, out: np.ndarray) -> np.ndarray:
    """``z2^n − z1^n`` ``[m]`` into ``out`` for ``z1 ≤ z2`` with ``z2 − z1 = length``, as
    ``length·Σ_k z1^k z2^{n−1−k}`` (no cancellation; the sums of ``ot._zmass``, in the same order)."""
    if n < 2:
        return np.multiply(length, 1.0, out=out)
    s = np.add(z2, z1, out=out)  # Σ_{k ≤ m} z1^k z2^{m−k} for m = 1
    zk = z1
    for i in range(n - 2):  # the sum for m is z2·(the sum for m − 1) + z1^m
        zk = np.multiply(zk, z1, out=work_array("zk", z1.size, np.float64) if i == 0 else zk)
        s *= z2
        s += zk
    return np.multiply(length, s, out=s)


def isotonic(y: np.ndarray, w: np.ndarray, increasing: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """``(fit [m], block starts and end [L + 1] int64)`` of the weighted isotonic regression of ``y [m]``
    with weights ``w [m] > 0`` (scipy's PAVA kernel, as ``scipy.optimize.isotonic_regression`` runs it,
    without the wrapper's copies and checks; ``y`` and ``w`` are consumed when increasing)."""
    if _pava is None:  # pragma: no cover - the public wrapper
        fit = scipy.optimize.isotonic_regression(y, weights=w, increasing=increasing)
        return fit.x, np.asarray(fit.blocks, dtype=np.int64)
    if not increasing:
        y, w = y[::-1].copy(), w[::-1].copy()
    r = work_array("pava_r", y.size + 1, np.intp)
    r.fill(-1)
    x, _, r, b = _pava(y, w, r)
    blocks = r[:b + 1].astype(np.int64)
    if not increasing:
        x, blocks = x[::-1], blocks[-1] - blocks[::-1]
    return x, blocks
