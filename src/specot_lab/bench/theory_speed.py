"""Speed of :func:`specot.theory.optimal_acceptance` at a real vocabulary size.

``specot bench theory-speed [--quick] [--out FILE.json]``

For V = 49152 and n ∈ {2, 3, 4, 8}, every law (iid, wor, cps, greedy), on softmax pairs of
correlated random logits (``l_p = z + 0.5·3·ε_p``, ``l_q = z + 0.5·3·ε_q``, ``z ~ 3·N(0, 1)``) at
temperatures 0.5, 0.7 and 1.0: one warm-up call per configuration (not timed), then ``reps``
timed calls; the table reports the median and the worst time per call. Requirement: ≤ 50 ms.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from tqdm import tqdm

from specot.theory import optimal_acceptance
from specot.outputs import check_output, json_has, write_json
from .runinfo import run_info

LAWS = ("iid", "wor", "cps", "greedy")
NS = (2, 3, 4, 8)


def _pair(rng: np.random.Generator, V: int, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    base = rng.standard_normal(V) * 3.0
    lp = base + 1.5 * rng.standard_normal(V)
    lq = base + 1.5 * rng.standard_normal(V)
    p = np.exp((lp - lp.max()) / temperature)
    q = np.exp((lq - lq.max()) / temperature)
    return p / p.sum(), q / q.sum()


def measure(V: int = 49152, temperatures: tuple[float, ...] = (0.5, 0.7, 1.0), reps: int = 7, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    pairs = {t: _pair(rng, V, t) for t in temperatures}
    rows = []
    jobs = [(law, n, t) for law in LAWS for n in NS for t in temperatures]
    for law, n, t in tqdm(jobs, desc="theory_speed", unit="cfg"):
        p, q = pairs[t]
        r = optimal_acceptance(p, q, n, law)  # warm-up (not timed)
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            optimal_acceptance(p, q, n, law)
            times.append(time.perf_counter() - t0)
        rows.append(
            {
                "law": law,
                "n": n,
                "temperature": t,
                "alpha": r.alpha,  # type: ignore[union-attr]
                "method": r.method,  # type: ignore[union-attr]
                "evaluations": r.evaluations,  # type: ignore[union-attr]
                "median_ms": 1e3 * float(np.median(times)),
                "max_ms": 1e3 * float(np.max(times)),
            }
        )
    return {
        "benchmark": "theory_speed",
        "V": V,
        "reps": reps,
        "requirement_ms": 50.0,
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "rows": rows,
    }


def _print_table(res: dict) -> None:
    print(f"alpha* speed, V = {res['V']}, median / max of {res['reps']} calls (ms), requirement <= 50 ms")
    print(f"{'law':7s} {'n':>2s} " + " ".join(f"{'T=' + str(t):>16s}" for t in sorted({r['temperature'] for r in res['rows']})))
    by = {}
    for r in res["rows"]:
        by.setdefault((r["law"], r["n"]), []).append(r)
    for (law, n), rs in by.items():
        cells = " ".join(f"{r['median_ms']:7.1f} /{r['max_ms']:6.1f}" for r in sorted(rs, key=lambda x: x["temperature"]))
        print(f"{law:7s} {n:>2d} {cells}")
    worst = max(r["median_ms"] for r in res["rows"])
    print(f"worst median: {worst:.1f} ms -> {'OK' if worst <= 50 else 'ABOVE'} the 50 ms requirement; load average {res['load_average']}")


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench theory-speed``."""
    ap.add_argument("--quick", action="store_true", help="V = 4096, one temperature, 3 reps (smoke test)")
    ap.add_argument("--out", help="write the results as JSON to this file")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file this benchmark did not write")


def run(args: argparse.Namespace) -> int:
    """``specot bench theory-speed``: time α* per law, n and temperature; print the table."""
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="theory-speed"))
    res = measure(V=4096, temperatures=(1.0,), reps=3) if args.quick else measure()
    _print_table(res)
    if args.out:

        body = res if isinstance(res, dict) else {"results": res}
        write_json(args.out, {"benchmark": "theory-speed", **body, "environment": run_info()})
    return 0
