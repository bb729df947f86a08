"""The cost curve of a llama.cpp target: the wall time t(B) of one ``llama_decode`` pass over B new
tokens after a fixed context, relative to a one-token pass, r(B) = t(B) / t(1).

A speculative iteration that scores a draft of N nodes runs B = 1 + N tokens (the last committed
token, then the nodes) and needs logits for all B rows; the curve decides which drafts pay
(:mod:`specot_llamacpp.plan`). Three ways of running a pass are timed for every B:

* ``all``: logits on all B rows (a chain verified: what the engine asks for);
* ``last``: logits on the last row only (the pass without the output head on the other rows; what
  llama.cpp's plain generation asks for a prompt);
* ``tree``: logits on all B rows, the B − 1 nodes as a tree of two branches under sequence ids
  (what :meth:`~specot_llamacpp.LlamaCppTarget.tree_logits_after` runs), to show that the tree mask
  costs what a chain costs.

Each timing is the median of ``repeats`` passes after one warm-up; the context is cut back after
every pass (``llama_memory_seq_rm``). Timings on a shared machine are noisy: the JSON records the
load average.

The ``all`` way alone is the target's calibration (:meth:`~specot_llamacpp.LlamaCppTarget.measure_pass_times`,
:func:`specot.calibration.calibrate`): what the auto plan prices its drafts with on this machine.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Sequence

import llama_cpp as lc

from specot.calibration import PassCostCurve, interpolate

if TYPE_CHECKING:  # the target imports this module for its own measurement
    from .target import LlamaCppTarget

__all__ = ["CostCurve", "measure_cost_curve", "time_passes", "DEFAULT_WIDTHS", "WAYS"]

#: The ways of running a pass that :func:`time_passes` knows (module docstring).
WAYS = ("all", "last", "tree")

#: The pass widths B timed by default: every one up to 11 (an even width can cost what the odd one
#: below it costs, which interpolation would miss; :data:`specot.calibration.DEFAULT_WIDTHS`).
DEFAULT_WIDTHS = tuple(range(1, 12))


@dataclass(frozen=True)
class CostCurve:
    """Measured pass times of one target (milliseconds, medians) and their ratios to B = 1.

    Attributes:
        widths: the pass widths B.
        t_all_ms, t_last_ms, t_tree_ms: median ms per pass, one per width (module docstring).
        ratio_all, ratio_last, ratio_tree: r(B) = t(B) / t(1) of each (t(1) of the same way).
        context_len: committed positions before every pass.
        repeats: timed passes per median.
        n_threads: llama.cpp threads.
    """

    widths: tuple[int, ...]
    t_all_ms: tuple[float, ...]
    t_last_ms: tuple[float, ...]
    t_tree_ms: tuple[float, ...]
    context_len: int
    repeats: int
    n_threads: int
    ratio_all: tuple[float, ...] = field(default=())
    ratio_last: tuple[float, ...] = field(default=())
    ratio_tree: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("all", "last", "tree"):
            t = getattr(self, f"t_{name}_ms")
            base = t[self.widths.index(1)] if 1 in self.widths else t[0]
            object.__setattr__(self, f"ratio_{name}", tuple(round(x / base, 4) for x in t))

    def ratio(self, width: int, way: str = "all") -> float:
        """r(B) for ``width`` B, linearly interpolated between measured widths (extrapolated past the
        widest from its last two points).

        Raises:
            ValueError: ``width < 1`` or an unknown ``way``.
        """
        if way not in WAYS:
            raise ValueError(f"way must be 'all', 'last' or 'tree', got {way!r}")
        return interpolate(self.widths, getattr(self, f"ratio_{way}"), width)

    def to_dict(self) -> dict:
        return asdict(self)

    def pass_cost_curve(self, source: str, way: str = "all") -> PassCostCurve:
        """This curve's ``way`` as the core's :class:`~specot.calibration.PassCostCurve` (what the
        suffix drafter prices with), labelled ``source`` (where it was measured).

        Raises:
            ValueError: an unknown ``way``, or widths that do not start at 1.
        """
        if way not in WAYS:
            raise ValueError(f"way must be 'all', 'last' or 'tree', got {way!r}")
        return PassCostCurve(self.widths, getattr(self, f"t_{way}_ms"), repeats=self.repeats, source=source)


def _timed_pass(target: "LlamaCppTarget", context_len: int, tokens: Sequence[int], seqs, want: Sequence[bool]) -> float:
    """One pass of ``tokens`` after the first ``context_len`` cached positions; seconds. The cache is
    cut back to the context afterwards (every sequence id the pass used)."""
    pos = [context_len + d for d in _positions(seqs, len(tokens))]
    t0 = time.perf_counter()
    target._decode(tokens, pos, seqs, want)  # noqa: SLF001 - the raw pass is what is timed
    dt = time.perf_counter() - t0
    used = {target.main_seq} | ({s for ss in seqs for s in ss} if seqs is not None else set())
    for s in used:
        if s != target.main_seq:
            lc.llama_memory_seq_rm(target._mem, s, -1, -1)  # noqa: SLF001
    lc.llama_memory_seq_rm(target._mem, target.main_seq, context_len, -1)  # noqa: SLF001
    return dt


def _positions(seqs, n: int) -> list[int]:
    """Offsets of the pass's tokens: a chain 0..n-1; the two-branch tree (see :func:`_tree_seqs`):
    the root at 0, each branch's nodes at 1, 2, ..."""
    if seqs is None:
        return list(range(n))
    a = (n - 1 + 1) // 2  # nodes of the first branch
    return [0] + list(range(1, a + 1)) + list(range(1, n - a))


def _tree_seqs(target: "LlamaCppTarget", n: int) -> list[list[int]]:
    """Sequence ids of a pass of ``n`` tokens: the root (both paths), then two branches."""
    main = target.main_seq
    other = 1 if main != 1 else 2
    if n == 1:
        return [[main]]
    a = (n - 1 + 1) // 2
    return [[main, other]] + [[main]] * a + [[other]] * (n - 1 - a)


def time_passes(target: "LlamaCppTarget", context: Sequence[int], widths: Sequence[int] = DEFAULT_WIDTHS,
                repeats: int = 15, ways: Sequence[str] = WAYS) -> dict[tuple[str, int], float]:
    """Median milliseconds of one pass of each width B after ``context``, for each of ``ways``
    (module docstring): ``{(way, B): ms}``. The widths and ways are interleaved in every round (each
    round times every one once, in turn), so slow drifts of a shared machine hit all alike; round 0
    warms up. Leaves the target's cache holding ``context[:-1]``.

    Raises:
        ValueError: an empty context, a width below 1 or above ``n_batch``, ``repeats < 1``, an
            unknown way.
    """
    if not context:
        raise ValueError("the cost curve needs a context of at least one token")
    if repeats < 1 or any(w < 1 or w > target.n_batch for w in widths):
        raise ValueError(f"widths must lie in [1, {target.n_batch}] and repeats >= 1")
    if any(k not in WAYS for k in ways):
        raise ValueError(f"ways must be among {WAYS}, got {list(ways)}")
    target.reset()
    target.logits_after(list(context))  # the context in the cache; its last token is re-fed by every pass
    C = len(context) - 1
    target.rollback(C)
    last = int(context[-1])
    toks = {w: [last] + [int(context[(i * 7) % len(context)]) for i in range(w - 1)] for w in widths}
    make = {
        "all": lambda w: (None, [True] * w),
        "last": lambda w: (None, [False] * (w - 1) + [True]),
        "tree": lambda w: (_tree_seqs(target, w), [True] * w),
    }
    times: dict[tuple[str, int], list[float]] = {(k, w): [] for k in ways for w in widths}
    for rnd in range(repeats + 1):
        for w in widths:
            for k in ways:
                seqs, want = make[k](w)
                if seqs is not None:
                    for s in {s for ss in seqs for s in ss} - {target.main_seq}:
                        lc.llama_memory_seq_cp(target._mem, target.main_seq, s, -1, -1)  # noqa: SLF001
                dt = _timed_pass(target, C, toks[w], seqs, want)
                if rnd > 0:  # round 0 warms up
                    times[(k, w)].append(dt)
    return {key: 1000.0 * statistics.median(v) for key, v in times.items()}


def measure_cost_curve(target: "LlamaCppTarget", context: Sequence[int], widths: Sequence[int] = DEFAULT_WIDTHS,
                       repeats: int = 15) -> CostCurve:
    """Time one pass of each width B after ``context`` in each of the three ways (module docstring,
    :func:`time_passes`); returns a :class:`CostCurve`.

    Raises:
        ValueError: an empty context, a width below 1 or above ``n_batch``, ``repeats < 1``.
    """
    med = time_passes(target, context, widths, repeats)
    return CostCurve(
        widths=tuple(int(w) for w in widths),
        t_all_ms=tuple(round(med[("all", w)], 3) for w in widths),
        t_last_ms=tuple(round(med[("last", w)], 3) for w in widths),
        t_tree_ms=tuple(round(med[("tree", w)], 3) for w in widths),
        context_len=len(context), repeats=int(repeats), n_threads=target.n_threads,
    )
