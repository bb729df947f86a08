"""The pass timer every backend's calibration runs (:meth:`specot.models.CausalLM.measure_pass_times`,
the llama.cpp target's ``time_passes``): median seconds of each kind of pass, the kinds interleaved
in every round so that slow drifts of a shared machine hit all alike, round 0 a warm-up."""

from __future__ import annotations

import statistics
from typing import Callable, Hashable, Sequence, TypeVar

__all__ = ["median_pass_times"]

K = TypeVar("K", bound=Hashable)


def median_pass_times(run_pass: Callable[[K], float], kinds: Sequence[K], repeats: int) -> dict[K, float]:
    """Median milliseconds of ``run_pass(kind)`` for each of ``kinds``: ``repeats`` timed rounds
    after one warm-up round, each round running every kind once, in order.

    Args:
        run_pass: runs one pass of ``kind`` and returns its wall time in seconds (measured as the
            backend measures it: ``time.perf_counter`` deltas, CUDA events on CUDA).
        kinds: what to time (e.g. pass widths B, or ``(way, B)`` pairs), each once per round.
        repeats: timed rounds (>= 1).

    Returns:
        ``{kind: median ms}``.

    Raises:
        ValueError: ``repeats`` not an integer >= 1, or no kinds.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    if not kinds:
        raise ValueError("nothing to time: give at least one kind of pass")
    times: dict[K, list[float]] = {k: [] for k in kinds}
    for rnd in range(repeats + 1):
        for k in kinds:
            dt = run_pass(k)
            if rnd > 0:  # round 0 warms up
                times[k].append(dt)
    return {k: 1000.0 * statistics.median(v) for k, v in times.items()}
