"""What a ``specot.generate`` call costs besides decoding, with the target already loaded: building
the default plan's drafters (the EAGLE head is read, built and quantized at every call that names
it) and a whole call of one new token (docs/results.md, "Component costs").

    python benchmarks/call_overhead.py --out docs/bench/call_overhead.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import specot
from specot.api import load_drafter, load_target
from specot.envinfo import environment_info, load_average
from specot_lab.bench.script_io import write_record


def _median_ms(fn, reps: int) -> tuple[float, float]:
    fn()  # warm-up (the suffix corpus is built once per process)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(1000.0 * (time.perf_counter() - t0))
    return statistics.median(ts), min(ts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = load_average()
    tgt = load_target(None, dtype=args.dtype)
    rows = {}
    for name, fn in (("load_drafter_eagle", lambda: load_drafter("eagle", tgt)),
                     ("load_drafter_auto", lambda: load_drafter("auto", tgt)),
                     ("generate_1_token", lambda: specot.generate("Name a prime number.", target=tgt, max_new_tokens=1))):
        med, lo = _median_ms(fn, args.reps)
        rows[name] = {"median_ms": med, "min_ms": lo}
        print(f"{name}: median {med:.1f} ms (min {lo:.1f}) over {args.reps}")
    write_record(args.out, "call_overhead", "call_overhead.py", argv, rows=rows, reps=args.reps, dtype=args.dtype,
                 torch_threads=torch.get_num_threads(), load_avg_start=start, load_avg_end=load_average(),
                 environment=environment_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
