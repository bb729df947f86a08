"""Per-call cost of every verifier at V = 49152 (``specot bench verifier-speed``).

For B ∈ {1, 64} and n ∈ {1, 2, 4, 8} (each verifier's valid n), times ``verify(p, q, drafts,
generator)`` on synthetic target/draft pairs (``p = softmax(3·z)``, ``q = softmax(3·z + ε)``,
``ε ~ N(0, 1)``; acceptance ≈ 0.6–0.8), drafts drawn from the verifier's draft law. Warm-up calls
are excluded; single-threaded by default (``--threads``); the median over repeats is reported in ms per call and ms per position. ``otm`` is
omitted (LP, small vocabularies only). Prints a table and writes JSON (``--out``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
from tqdm import tqdm

from specot.laws import sample_drafts
from specot.verifiers import DraftLaw, get_verifier
from .runinfo import run_info

V = 49152
CONFIGS = [  # name, params, law, valid n
    ("speculative", {}, DraftLaw.IID, (1,)),
    ("lenient", {"lenience": 0.5}, DraftLaw.IID, (1,)),
    ("kseq", {}, DraftLaw.IID, (1, 2, 4, 8)),
    ("rrs", {}, DraftLaw.IID, (1, 2, 4, 8)),
    ("rrs_wor", {}, DraftLaw.WOR, (1, 2, 4, 8)),
    ("greedy", {}, DraftLaw.GREEDY, (1, 2, 4, 8)),
    ("spechub", {}, DraftLaw.SPECHUB, (1, 2)),
    ("mentored", {"D": 0.1}, DraftLaw.IID, (1,)),
    ("importance", {}, DraftLaw.IID, (1, 2, 4, 8)),
]


def _inputs(B: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    z = 3 * torch.randn(B, V, generator=g)
    p = torch.softmax(z, -1)
    q = torch.softmax(z + torch.randn(B, V, generator=g), -1)
    return p, q


def measure(quick: bool = False) -> list[dict]:
    batches = (1, 64)
    repeats = 5 if quick else 30
    warmup = 2 if quick else 5
    jobs = [(c, B, n) for c in CONFIGS for B in batches for n in c[3]]
    rows = []
    for (name, params, law, _), B, n in tqdm(jobs, desc="verifier speed"):
        v = get_verifier(name, **params)
        p, q = _inputs(B)
        g = torch.Generator().manual_seed(1)
        drafts = [sample_drafts(q, n, law, g) for _ in range(warmup + repeats)]
        times = []
        for i, d in enumerate(drafts):
            t0 = time.perf_counter()
            v.verify(p, q, d, g)
            dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
        med = statistics.median(times) * 1e3
        rows.append({"verifier": name, "law": law.value, "B": B, "n": n, "ms_per_call": med,
                     "ms_per_position": med / B, "repeats": repeats})
    return rows


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench verifier-speed``."""
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--out", default=None, help="write results as JSON to this file")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op threads (default 1: per-position latency, stable on a shared CPU)")


def run(args: argparse.Namespace) -> int:
    """``specot bench verifier-speed``: time every verifier; print the table, write JSON with ``--out``."""
    torch.set_num_threads(args.threads)
    rows = measure(args.quick)
    print(f"{'verifier':<12}{'law':<9}{'B':>4}{'n':>3}{'ms/call':>10}{'ms/pos':>10}")
    for r in rows:
        print(f"{r['verifier']:<12}{r['law']:<9}{r['B']:>4}{r['n']:>3}{r['ms_per_call']:>10.3f}{r['ms_per_position']:>10.4f}")
    meta = {"V": V, "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
            "processor": platform.processor() or platform.platform()}

    meta["environment"] = run_info()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "results": rows}, f, indent=2)
    return 0
