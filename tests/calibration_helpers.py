"""Test doubles of the calibration tests: a target whose 'measured' pass costs are known, and the
warnings a call raises."""

from __future__ import annotations

import warnings


class FakeTarget:
    """A target that 'measures' r(B) = 1 + (B - 1)/2 and counts its measurements."""

    backend = "fake"
    device = "cpu"
    dtype = "float32"
    n_threads = 1

    def __init__(self, name: str = "fake-model") -> None:
        self.name = name
        self.calls = 0

    def measure_pass_times(self, widths, repeats):
        self.calls += 1
        return [10.0 * (1 + (b - 1) / 2) for b in widths]


def caught(fn):
    """``(fn(), [the messages of the warnings it raised])``."""
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in got]
