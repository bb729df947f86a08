"""Measuring a speedup: a plan's runs against autoregressive decoding over the same number of
tokens, repeated, with the machine's load recorded. A measurement, not decoding: the decoding is
:func:`specot.plan.run_plan`'s."""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Sequence

import torch

from .drafting.base import Drafter
from .engine.generate import autoregressive_generate
from .engine.types import GenerationConfig, GenerationResult
from .plan import DecodingPlan, run_plan
from .report import GenerateReport, TokenStream

__all__ = ["measure_speedup", "machine_load"]


def machine_load() -> dict[str, Any]:
    """``{"load_average", "cpu_count", "busy"}``: the 1/5/15-minute load averages, the core count and
    whether the 1-minute load exceeded it (timings then are unreliable)."""
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        load = None
    cores = os.cpu_count()
    return {"load_average": load, "cpu_count": cores, "busy": bool(load and cores and load[0] > cores)}


def measure_speedup(report: GenerateReport, plan: DecodingPlan, target: Any, drafter: Drafter | None,
                    prompt_ids: Sequence[int], config: GenerationConfig, verifier: Any, *, repeats: int = 1,
                    generator: torch.Generator | None = None, stream: TokenStream | None = None) -> GenerateReport:
    """``report`` (its speculative run done) with ``repeats`` (speculative, autoregressive) pairs.

    Pair r runs with ``seed + r`` (a given ``generator`` runs on), so at a temperature > 0 every
    pair decodes a fresh sample and the median is over answers (one answer's speedup varies far
    more than its timing); at temperature 0 every pair decodes the same text. Pair 0's speculative
    run is ``report.result``. The autoregressive run of a pair decodes exactly as many tokens as
    its speculative run (``stop_at_eos=False``), so the two rates are over equal lengths.

    Raises:
        GenerationInterrupted: Ctrl-C; its ``report`` holds the pairs finished before it.
    """
    stream = (stream or TokenStream(target.decode)).restart()
    speedups: list[float] = []
    baseline: GenerationResult | None = None
    phase, t0 = "baseline", time.perf_counter()
    try:
        for r in range(repeats):
            cfg = config if r == 0 or config.seed is None else dataclasses.replace(config, seed=config.seed + r)
            spec_run = report.result
            if r:
                phase, t0 = "speculative", time.perf_counter()
                spec_run = run_plan(plan, target, drafter, prompt_ids, cfg, verifier, generator=generator,
                                    on_tokens=stream.restart())
            phase, t0 = "baseline", time.perf_counter()
            base_cfg = dataclasses.replace(cfg, max_new_tokens=max(1, len(spec_run.tokens)), stop_at_eos=False)
            base = autoregressive_generate(target, prompt_ids, base_cfg, generator=generator,
                                           on_tokens=stream.restart())
            baseline = baseline or base
            if base.stats.tokens_per_s > 0:
                speedups.append(spec_run.stats.tokens_per_s / base.stats.tokens_per_s)
    except KeyboardInterrupt:
        done = dataclasses.replace(report, baseline=baseline, speedups=tuple(speedups))
        raise stream.interrupted(time.perf_counter() - t0, phase, done) from None
    timing = {"tokens": baseline.stats.new_tokens if baseline else 0, "repeats": repeats, **machine_load()}
    return dataclasses.replace(report, baseline=baseline, speedups=tuple(speedups), timing=timing)
