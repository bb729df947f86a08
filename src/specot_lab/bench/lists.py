"""Comma-separated option values of the lab's commands (``--gammas 2,4``, ``--temperatures 0.6,1``),
checked in one line before anything loads. Imports nothing heavy (the commands' ``--help`` stays fast)."""

from __future__ import annotations

import math

__all__ = ["int_list", "number_list"]


def int_list(text: str, flag: str, *, minimum: int = 1, unique: bool = False) -> list[int]:
    """``"2,4"`` → ``[2, 4]``: integers ≥ ``minimum`` (sorted and deduplicated when ``unique``).

    Raises:
        ValueError: one line naming ``flag`` and the value (not integers, none, or one below ``minimum``).
    """
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} takes comma-separated integers like 2,4; got {text!r}") from None
    if not values or min(values) < minimum:
        raise ValueError(f"{flag} takes integers >= {minimum} like 2,4; got {text!r}")
    return sorted(set(values)) if unique else values


def number_list(text: str, flag: str, *, positive: bool = False, why: str = "") -> list[float]:
    """``"0.6,1"`` → ``[0.6, 1.0]``: finite numbers ≥ 0 (> 0 when ``positive``; ``why`` says why, in
    the message).

    Raises:
        ValueError: one line naming ``flag`` and the value.
    """
    try:
        values = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) and (v > 0 if positive else v >= 0) for v in values):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{flag} takes comma-separated finite numbers {bound}{why} like 0.6,1; got {text!r}")
    return values
