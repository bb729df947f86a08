"""The shared frame of the measurement scripts in ``benchmarks/`` (``eval_drafters.py``,
``eval_q_temperature.py``, ``gpu/graph_step.py``, ...): their common options, the target's seeded
continuation of a prompt, the device synchronisation of a timing and the JSON record they write
(with the date, commit, machine, CPU flags, library versions and load of the run)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence

import torch

from specot.outputs import write_json

from .runinfo import run_info

__all__ = ["add_run_options", "device_sync", "target_continuation", "write_record"]


def device_sync(device: Any) -> None:
    """Wait for queued kernels on a CUDA ``device`` (host clocks time nothing of asynchronous work);
    a no-op elsewhere."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def add_run_options(ap: argparse.ArgumentParser, *, sets: str, dtype: str = "auto", threads: int = 2) -> None:
    """``--sets`` (comma-separated prompt sets), ``--n-prompts``, ``--gamma`` (draft length γ),
    ``--max-new-tokens``, ``--dtype``, ``--threads`` (torch intra-op threads) and ``--out`` (JSON path)."""
    ap.add_argument("--sets", default=sets)
    ap.add_argument("--n-prompts", type=int, default=6)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default=dtype)
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--out", default=None)


def target_continuation(target: Any, ids: Sequence[int], temperature: float, max_new_tokens: int,
                        seed: int) -> list[int]:
    """``ids`` and the target's continuation of them: greedy at ``temperature`` 0, else sampled from
    the full distribution at that temperature (no top-k / top-p) after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
    out = target.model.generate(torch.tensor([list(ids)]), max_new_tokens=max_new_tokens,
                                pad_token_id=target.tokenizer.eos_token_id, **kw)
    return out[0].tolist()


def write_record(path: str | None, benchmark: str, script: str, argv: Sequence[str] | None,
                 **fields: Any) -> dict[str, Any]:
    """``{"benchmark", "command", **fields, "environment"}``, written as indented JSON to ``path``
    when given; returns the record. ``script`` is the script's path under ``benchmarks/`` (the
    command that reproduces the run is ``python benchmarks/<script> <argv>``); ``environment`` is
    :func:`~specot_lab.bench.runinfo.run_info` (date, commit, machine, versions, load) updated
    with the caller's ``environment`` field, if any."""
    env = {**run_info(), **(fields.pop("environment", None) or {})}
    out = {"benchmark": benchmark, "command": f"python benchmarks/{script} " + " ".join(argv or sys.argv[1:]),
           **fields, "environment": env}
    if path:
        write_json(path, out)  # strict JSON, atomically
    return out
