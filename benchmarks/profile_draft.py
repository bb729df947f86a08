"""Where an EAGLE draft's time goes on a device (docs/engine.md, "Measured on GPUs"):
cProfile of ``specot.generate`` with an EAGLE drafter, and PyTorch's profiler over the same call,
after a warm-up run that meets every pass shape once.

On a launch-bound GPU host the draft network's arithmetic is negligible; what costs is the host's
work per operation, host-to-device copies and ``.item()`` / ``.tolist()`` reads (each one waits for
the GPU). cProfile attributes that time to specot's own functions; the torch table to operators.

    python benchmarks/profile_draft.py --device cuda --out-dir profile
    python benchmarks/profile_draft.py --drafts auto --temperatures 1 --gamma 0 --max-new-tokens 96   # auto's own trees
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

import specot
from specot.api import load_target
from specot_lab.bench.script_io import device_sync

PROMPTS = ("Write a Python function that checks whether a string is a palindrome.",
           "def merge_sorted(a, b):\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
           "Explain in two sentences what a Python generator is.")  # the last: make demo's question


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--drafts", default="eagle,suffix+eagle")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--gamma", type=int, default=4, help="draft length γ; 0: the plan's own (auto's trees)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out-dir", default="profile")
    args = ap.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tgt = load_target(None, dtype="bfloat16", device=args.device)

    def run(draft: str, t: float) -> specot.GenerateReport:
        rep = None
        for p in PROMPTS:
            rep = specot.generate(p, target=tgt, draft=draft, gamma=args.gamma or None, temperature=t, device=args.device,
                                  max_new_tokens=args.max_new_tokens, seed=0)
        device_sync(args.device)
        return rep

    for draft in args.drafts.split(","):
        for t in map(float, args.temperatures.split(",")):
            tag = f"{draft.replace('+', '_')}_T{t:g}"
            run(draft, t)  # warm-up: every pass shape once
            t0 = time.perf_counter()
            prof = cProfile.Profile()
            prof.enable()
            rep = run(draft, t)
            prof.disable()
            wall = time.perf_counter() - t0
            s = io.StringIO()
            st = pstats.Stats(prof, stream=s)
            st.sort_stats("tottime").print_stats(45)
            st.sort_stats("cumulative").print_stats("specot", 60)
            stats = rep.result.stats
            head = (f"{tag}: {wall:.2f} s for {len(PROMPTS)} prompts; last prompt: {stats.target_calls} target "
                    f"passes, draft {stats.draft_time_s:.3f} s, target {stats.target_time_s:.3f} s\n")
            print(head, end="")
            (out / f"cprofile_{tag}.txt").write_text(head + s.getvalue())
            acts = [torch.profiler.ProfilerActivity.CPU]
            if args.device.startswith("cuda"):
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            with torch.profiler.profile(activities=acts) as tp:
                run(draft, t)
            (out / f"torch_{tag}.txt").write_text(
                tp.key_averages().table(sort_by="self_cpu_time_total", row_limit=40, max_name_column_width=50))
    return 0


if __name__ == "__main__":
    sys.exit(main())
