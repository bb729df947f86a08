"""Cost of an output head ``[V, d] x [M, d]ᵀ`` for M rows, by GEMM layout (CPU).

A speculative verification pass computes logits for γ + 1 rows. On x86 CPUs float32 ``F.linear``
(the layout ``nn.Linear`` uses) is much slower for 2–8 rows than ``W @ xᵀ``, while in bfloat16 it is
faster; :mod:`specot.models.device` patches large float32 heads accordingly. This script measures
both layouts per dtype (median of ``--reps`` calls, milliseconds, warm-up excluded; ``W @ xᵀ``
including the copy to contiguous logits, as used) and prints JSON::

    {"threads": 2, "V": 49152, "d": 576,
     "rows": [{"dtype": "float32", "M": 1, "f_linear_ms": .., "w_xt_ms": .., "ratio": ..}, ...]}

    specot bench head-speed [--vocab 49152] [--hidden 576] [--dtypes float32,bfloat16] [--threads 2] [--out head.json]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from specot.cli.command import MAX_THREADS, count
from specot.outputs import check_output, dumps, json_has, write_json
from .runinfo import run_info

__all__ = ["measure_head", "median_ms", "add_arguments", "run"]


def median_ms(fn: Any, reps: int) -> float:
    """Median wall time of ``fn()`` in milliseconds over ``reps`` calls, after 3 warm-up calls."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def measure_head(vocab: int, hidden: int, rows: list[int], reps: int, dtype: torch.dtype = torch.float32) -> list[dict[str, float]]:
    """Median ms of ``F.linear(x, W)`` and ``(W @ xᵀ)ᵀ`` for x ``[M, d]``, W ``[V, d]``, each M in ``rows``."""
    g = torch.Generator().manual_seed(0)
    W = torch.randn(vocab, hidden, generator=g).to(dtype)  # [V, d]
    out = []
    for M in rows:
        x = torch.randn(M, hidden, generator=g).to(dtype)  # [M, d]
        a = median_ms(lambda: F.linear(x, W), reps)
        b = median_ms(lambda: (W @ x.t()).t().contiguous(), reps)
        out.append({"dtype": str(dtype).removeprefix("torch."), "M": M, "f_linear_ms": round(a, 3), "w_xt_ms": round(b, 3), "ratio": round(a / b, 3)})
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench head-speed``."""
    ap.add_argument("--vocab", type=count(1), default=49152)
    ap.add_argument("--hidden", type=count(1), default=576)
    ap.add_argument("--rows", default="1,2,3,5,9,17,33")
    ap.add_argument("--reps", type=count(1), default=30)
    ap.add_argument("--dtypes", default="float32,bfloat16", help="comma list of float32, bfloat16")
    ap.add_argument("--threads", type=count(1, MAX_THREADS), default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--force", action="store_true", help="replace an existing --out file this benchmark did not write")


def run(args: argparse.Namespace) -> int:
    """``specot bench head-speed``: time both head layouts; print the JSON, write it with ``--out``."""
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="head-speed"))
    if args.threads:
        torch.set_num_threads(args.threads)
    res = {"benchmark": "head-speed", "threads": torch.get_num_threads(), "V": args.vocab, "d": args.hidden,
           "rows": [r for name in args.dtypes.split(",")
                    for r in measure_head(args.vocab, args.hidden, [int(r) for r in args.rows.split(",")], args.reps,
                                          getattr(torch, name.strip()))]}

    res["environment"] = run_info()
    text = dumps(res, indent=1)
    if args.out:
        write_json(args.out, res, indent=1)
    print(text)
    return 0
