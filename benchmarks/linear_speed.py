"""Time one pass of SmolLM2-135M's linear layers over 1-19 rows: ``nn.Linear`` (``F.linear``)
against :class:`specot.models.device.PrepackedLinear`, and :class:`specot.models.int8.Int8Linear`
on the EAGLE head's shapes (docs/results.md, "Component costs"). Random weights of the real
shapes, each called as the module a model calls; median of many calls.

    python benchmarks/linear_speed.py --out docs/bench/linear_speed.json

Per-pass totals weight each shape by its count in the model: 30 decoder layers (q, k, v, o,
gate, up, down) and the 49152-row output head. ``installed`` is what ``install_prepacked_linears``
picks: prepacked from ``PREPACK_MIN_WEIGHTS`` weights up, ``F.linear`` below.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
from tqdm import tqdm

from specot.envinfo import environment_info, load_average
from specot.models.device import PREPACK_MIN_WEIGHTS, PrepackedLinear
from specot.models.int8 import Int8Linear
from specot_lab.bench.head_speed import median_ms
from specot_lab.bench.script_io import write_record

# (out, in, count per pass) of SmolLM2-135M-Instruct's linear layers
TARGET_SHAPES = [(576, 576, 60), (192, 576, 60), (1536, 576, 60), (576, 1536, 30), (49152, 576, 1)]
# the shipped EAGLE-3 head: fc over three fused layers, one decoder layer, an 8192-token output layer
HEAD_SHAPES = [(576, 1728, 1), (576, 576, 2), (192, 576, 2), (1536, 576, 2), (576, 1536, 1), (8192, 576, 1)]
ROWS = (1, 2, 4, 7, 13, 19)


def _kernels(w: torch.Tensor, int8: bool) -> dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """The modules a model calls (so each timing includes its module's Python overhead)."""
    lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
    lin.weight.data = w
    out = {"F.linear": lin, "prepacked": PrepackedLinear.wrap(lin)}
    if int8:
        out["int8"] = Int8Linear.from_linear(lin)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=200, help="timed calls per cell (the output head: a tenth)")
    ap.add_argument("--out", required=True, help="JSON file")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load0 = load_average()
    totals: dict[str, dict[str, dict[str, float]]] = {}
    cells = []
    jobs = [(model, dt, shape) for model, shapes in (("target", TARGET_SHAPES), ("eagle_head", HEAD_SHAPES))
            for dt in (torch.float32, torch.bfloat16) for shape in shapes]
    with torch.no_grad():
        for model, dt, (o, i, count) in tqdm(jobs, desc="shapes"):
            w = torch.randn(o, i).mul(0.02).to(dt)
            n = max(10, args.calls // 10) if o * i > 10_000_000 else args.calls
            for name, fn in _kernels(w, int8=model == "eagle_head").items():
                for m in ROWS:
                    x = torch.randn(m, i).to(dt)
                    us = median_ms(lambda: fn(x), n) * 1e3
                    cells.append({"model": model, "dtype": str(dt), "out": o, "in": i, "rows": m, "kernel": name,
                                  "us": us})
                    key = f"{model} {str(dt).removeprefix('torch.')}"
                    totals.setdefault(key, {}).setdefault(name, {})
                    totals[key][name][str(m)] = totals[key][name].get(str(m), 0.0) + us * count / 1e3
                    if name == ("prepacked" if o * i >= PREPACK_MIN_WEIGHTS else "F.linear"):  # what CausalLM installs
                        per = totals[key].setdefault("installed", {})
                        per[str(m)] = per.get(str(m), 0.0) + us * count / 1e3
    for key, kernels in totals.items():
        for name, per_rows in kernels.items():
            print(f"{key:20s} {name:9s} ms per pass: " + " ".join(f"{m} rows {v:6.2f}" for m, v in per_rows.items()))
    write_record(args.out, "linear_speed", "linear_speed.py", argv, threads=args.threads, totals_ms=totals, cells=cells,
                 load_avg_start=load0, load_avg_end=load_average(), environment=environment_info(),
                 time=time.strftime("%Y-%m-%d %H:%M:%S"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
