"""What a drafted step costs outside its target pass, measured on this machine (the suffix drafter).

A speculative step does more than its pass: the drafter proposes (for suffix decoding, a search of
the suffix index and a chain built from the match), the loop verifies the rows the pass returned
and the drafter learns the outcome. A plain step does part of that too (a proposal that finds
nothing). The suffix drafter prices a chain at ``r(1 + N) + draft_overhead`` one-token passes
(:class:`~specot.drafting.SuffixDrafter`), so ``draft_overhead`` must be what a drafted step's work
costs beyond a plain step's, *relative to a pass on this machine*: ~0.3 ms is 0.05 of a 6–7 ms
llama.cpp pass on a 2-core CPU, 0.02 of a 17 ms one on a slower CPU and far more of a GPU's pass.

:func:`measure_suffix_step_work` times that work with the drafter itself, no target: a context
that repeats a random 97-token sequence (every step finds a long match and drafts a chain, which
synthetic logits then accept whole) against a context of fresh random tokens (no match: a plain
step), each step = propose, verify (:func:`specot.engine.loop.verify_draft_tree`, temperature 0),
update. The median of each, after a warm-up, in milliseconds. What it leaves out is the target's
side, which the pass-cost curve already holds (the logits copied out with the pass) or which costs
little (the cache cut back after a rejection).

:func:`suffix_draft_overhead` caches that measurement per machine and drafter configuration
(:func:`specot.calibration.cached_measurement`; :func:`check_step_work` is what a measurement, new
or cached, must satisfy: a cached entry it refuses is measured again with one warning) and divides
by the target's measured t(1); with no
measured curve, or where no chain pays (nothing drafts, so nothing is priced), it is the labelled
:data:`FALLBACK_DRAFT_OVERHEAD`.
"""

from __future__ import annotations

import random
import statistics
import time
from typing import Any, Callable, Mapping

import numpy as np
import torch

from ..calibration import PassCostCurve, cached_measurement
from ..drafting.base import DraftOutcome, DraftSchedule
from ..drafting.suffix import SuffixDrafter
from ..drafting.tree import TreeBudget
from ..engine.loop import verify_draft_tree
from ..envinfo import cpu_flags, cpu_model, environment_info
from ..sampling import SamplingConfig
from ..verifiers import get_verifier

__all__ = ["FALLBACK_DRAFT_OVERHEAD", "measure_suffix_step_work", "suffix_draft_overhead", "check_step_work",
           "STEP_WORK_NAME", "MAX_STEP_MS"]

#: FALLBACK: a drafted step's work beyond a plain step's, in one-token passes, measured on a 2-core
#: Zen 4 EPYC with llama.cpp (0.31 ms against a 6.9 ms pass); used where no curve was measured.
FALLBACK_DRAFT_OVERHEAD = 0.05
#: The cached measurement's name (:func:`specot.calibration.cached_measurement`).
STEP_WORK_NAME = "suffix-step-work"
#: Period of the repeated random text the drafted steps copy.
_PERIOD = 97
#: The longest a step's own work may take in a plausible measurement, milliseconds (the suffix
#: drafter's takes well under one; a minute is no measurement of it).
MAX_STEP_MS = 60_000.0
#: The most steps one measurement times.
_MAX_STEPS = 1_000_000


def check_step_work(values: Mapping[str, float]) -> None:
    """Whether ``values`` are what :func:`measure_suffix_step_work` returns: ``plain_ms`` and
    ``chain_ms`` finite in ``[0, MAX_STEP_MS]``, ``chain_nodes`` in ``[0, 4096]`` and ``chains`` a
    whole number of steps (0: no chain drafted, and then no nodes either). The cache's reader and
    writer both apply it (:func:`specot.calibration.cached_measurement`).

    Raises:
        ValueError: a value missing, not finite or out of its range.
    """
    for name, hi in (("plain_ms", MAX_STEP_MS), ("chain_ms", MAX_STEP_MS), ("chain_nodes", 4096.0),
                     ("chains", float(_MAX_STEPS))):
        v = values.get(name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= hi:
            raise ValueError(f"step work {name} = {v!r} is not a number in [0, {hi:g}]")
    if values["chains"] != int(values["chains"]):
        raise ValueError(f"step work chains = {values['chains']!r} is not a whole number of steps")
    if values["chains"] == 0 and values["chain_nodes"] != 0:
        raise ValueError("step work records drafted nodes but no drafted step")


def _logits(rows: list[int], vocab_size: int) -> torch.Tensor:
    """Float32 logits ``[len(rows), V]`` whose row i has its maximum at ``rows[i]``."""
    out = torch.zeros(len(rows), vocab_size)
    out[torch.arange(len(rows)), torch.tensor(rows)] = 1.0
    return out


def _timed_steps(drafter: SuffixDrafter, ctx: list[int], next_tokens: Callable[[int], list[int]], steps: int,
                 vocab_size: int, gamma: int) -> tuple[list[float], list[int]]:
    """Run ``steps`` loop steps (propose, verify at T = 0, update); ``next_tokens(n)``: the target's
    greedy tokens after a context of length n (one per row of the largest pass). Returns the
    seconds of each step and the size of each proposed tree."""
    sampling, verifier = SamplingConfig(temperature=0.0), get_verifier("greedy")
    gen = torch.Generator().manual_seed(0)
    times, sizes = [], []
    for _ in range(steps):
        n = len(ctx)
        logits = _logits(next_tokens(n), vocab_size)  # [1 + γ, V], built outside the timed work
        t0 = time.perf_counter()
        tree = drafter.propose(ctx, gamma + 1, sampling, gen)
        step = verify_draft_tree(tree, logits[:1 + tree.size], sampling, verifier, gen)
        drafter.update(DraftOutcome(tree=tree, path=tuple(step.path), tokens=tuple(step.emitted), context_len=n))
        ctx.extend(step.emitted)
        times.append(time.perf_counter() - t0)
        sizes.append(tree.size)
    return times, sizes


def measure_suffix_step_work(make_drafter: Callable[[], SuffixDrafter], vocab_size: int, *, gamma: int = 8,
                             steps: int = 48, warmup: int = 8) -> dict[str, float]:
    """The work of a plain step and of a drafted (chain) step outside the target's pass (module
    docstring), for drafters made by ``make_drafter`` (each priced as it will be: the curve, the
    copy model, ``min_n``), chains of at most ``gamma`` tokens (the draft length γ).

    Returns:
        ``{"plain_ms", "chain_ms", "chain_nodes", "chains"}``: median milliseconds per step of each
        kind, the mean drafted nodes of the chain steps and how many steps drafted (0: no chain
        pays for this drafter; ``chain_ms`` is then ``plain_ms``).

    Raises:
        ValueError: ``vocab_size < 2 * _PERIOD`` (too small to make a context without repeats),
            ``steps < 1``.
    """
    if vocab_size < 2 * _PERIOD or steps < 1:
        raise ValueError(f"need vocab_size >= {2 * _PERIOD} and steps >= 1, got {vocab_size} and {steps}")
    rng = random.Random(0)
    budget = TreeBudget(1, gamma)
    period = rng.sample(range(vocab_size), _PERIOD)  # [97] distinct tokens, repeated

    chain = make_drafter()
    ctx = period * 3
    chain.start(ctx, budget, DraftSchedule(gamma))
    t_chain, sizes = _timed_steps(chain, ctx, lambda n: [period[(n + i) % _PERIOD] for i in range(gamma + 1)],
                                  warmup + steps, vocab_size, gamma)

    plain = make_drafter()
    fresh = np.random.default_rng(0)
    ctx = [int(t) for t in fresh.integers(0, vocab_size, 3 * _PERIOD)]
    plain.start(ctx, budget, DraftSchedule(gamma))
    t_plain, _ = _timed_steps(plain, ctx, lambda n: [int(fresh.integers(0, vocab_size))] * (gamma + 1),
                              warmup + steps, vocab_size, gamma)

    drafted = [t for t, s in zip(t_chain[warmup:], sizes[warmup:]) if s > 0]
    plain_ms = 1e3 * statistics.median(t_plain[warmup:])
    nodes = [s for s in sizes[warmup:] if s > 0]
    return {"plain_ms": round(plain_ms, 4),
            "chain_ms": round(1e3 * statistics.median(drafted), 4) if drafted else round(plain_ms, 4),
            "chain_nodes": round(statistics.fmean(nodes), 3) if nodes else 0.0, "chains": float(len(drafted))}


def _key(curve: PassCostCurve, vocab_size: int, options: Mapping[str, Any], gamma: int) -> dict[str, Any]:
    env = environment_info()
    return {"cpu_model": cpu_model(), "cpu_flags": cpu_flags(), "python": env["python"],
            "versions": {k: env["versions"].get(k) for k in ("specot", "numpy", "torch")},
            "vocab_size": int(vocab_size), "depth": int(gamma), "options": dict(sorted(options.items())),
            "ratios": list(curve.ratios)}  # the curve decides which chains are drafted, hence measured


def suffix_draft_overhead(make_drafter: Callable[[], SuffixDrafter], curve: PassCostCurve | None, vocab_size: int,
                          options: Mapping[str, Any], *, gamma: int = 8, refresh: bool = False,
                          cache_dir: str | None = None) -> tuple[float, dict[str, Any] | None]:
    """``(draft_overhead, measurement)``: a drafted step's work beyond a plain step's in one-token
    passes of ``curve`` (its t(1)), from the cached :func:`measure_suffix_step_work` of drafters
    made by ``make_drafter`` (``options``: their configuration, part of the cache key); the
    :data:`FALLBACK_DRAFT_OVERHEAD` and ``None`` when ``curve`` is ``None`` or was not measured
    here (a synthetic or fallback curve, ``repeats == 0``), or when no chain paid in the measurement.
    ``refresh``: measure even when a cached entry exists.
    """
    if curve is None or curve.repeats == 0:
        return FALLBACK_DRAFT_OVERHEAD, None
    rec = cached_measurement(STEP_WORK_NAME, _key(curve, vocab_size, options, gamma),
                             lambda: measure_suffix_step_work(make_drafter, vocab_size, gamma=gamma),
                             check=check_step_work, refresh=refresh, cache_dir=cache_dir)
    v = rec["values"]
    if v.get("chains", 0) < 1:
        return FALLBACK_DRAFT_OVERHEAD, rec
    return round(max(0.0, v["chain_ms"] - v["plain_ms"]) / curve.t_ms[0], 4), rec
