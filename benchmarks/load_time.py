"""How long loading the embedded target takes: from its GGUF file (``SPECOT_NO_CACHE=1``) against
specot's cached float32 copy (:mod:`specot.models.embedded`), each in a fresh Python process, as a
user's ``specot generate`` call would load it (docs/results.md, "Component costs").

Each repeat times ``specot.load_embedded_target(dtype=...)`` alone (imports excluded) and, with
``--cli``, the wall time of a whole ``specot generate`` call of 8 new tokens. The runs alternate
between the two sources so that load on the machine falls on both alike. The first cached load
converts the GGUF file if the cache is empty; it is reported apart (``first_cached_s``).

    python benchmarks/load_time.py --repeats 3 --cli --out docs/bench/load_time.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from tqdm import tqdm

from specot.envinfo import environment_info, load_average
from specot_lab.bench.script_io import write_record

LOAD = ("import time, specot; t = time.perf_counter(); specot.load_embedded_target(dtype={dtype!r}); "
        "print(time.perf_counter() - t)")
CLI = [sys.executable, "-m", "specot.cli.main", "generate", "--prompt", "Name a prime number.", "--max-new-tokens", "8"]


def _env(cached: bool, cache_dir: str) -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", SPECOT_CACHE_DIR=cache_dir)
    env.pop("SPECOT_NO_CACHE", None)
    if not cached:
        env["SPECOT_NO_CACHE"] = "1"
    return env


def load_seconds(dtype: str, cached: bool, cache_dir: str) -> float:
    """Seconds to load the embedded target in a fresh process (imports excluded)."""
    out = subprocess.run([sys.executable, "-c", LOAD.format(dtype=dtype)], env=_env(cached, cache_dir),
                         check=True, capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def cli_seconds(cached: bool, cache_dir: str) -> float:
    """Wall seconds of one whole ``specot generate`` call (start-up, load, 8 tokens)."""
    t = time.perf_counter()
    subprocess.run(CLI, env=_env(cached, cache_dir), check=True, capture_output=True)
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--cli", action="store_true", help="also time whole `specot generate` calls")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    start = load_average()
    with tempfile.TemporaryDirectory(prefix="specot-cache-") as cache_dir:  # an empty cache: the first load converts
        first = load_seconds(args.dtype, True, cache_dir)
        rows: dict[str, list[float]] = {"gguf_load_s": [], "cached_load_s": []}
        if args.cli:
            rows.update(gguf_cli_s=[], cached_cli_s=[])
        for _ in tqdm(range(args.repeats), desc="load time"):
            for cached, key in ((False, "gguf"), (True, "cached")):
                rows[f"{key}_load_s"].append(load_seconds(args.dtype, cached, cache_dir))
                if args.cli:
                    rows[f"{key}_cli_s"].append(cli_seconds(cached, cache_dir))
    medians = {k: statistics.median(v) for k, v in rows.items()}
    for k, v in medians.items():
        print(f"{k}: median {v:.2f} s of {rows[k]}")
    print(f"first cached load (converts the GGUF file): {first:.2f} s")
    write_record(args.out, "load_time", "load_time.py", argv, dtype=args.dtype, repeats=args.repeats,
                 first_cached_s=first, runs=rows, medians=medians, load_avg_start=start,
                 load_avg_end=load_average(), environment=environment_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
