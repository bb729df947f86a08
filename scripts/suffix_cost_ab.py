"""Wall-clock A/B of the suffix drafter's cost model (fixed cost f, per-token cost c) against autoregressive decoding.

For each prompt set and temperature, every prompt is decoded by autoregressive decoding and by the
suffix drafter with each ``f:c`` pair of ``--costs``, interleaved prompt by
prompt so that a change of machine load hits every variant alike. Reports, per variant, the
speedup (sum of autoregressive times / sum of its times), block efficiency and the share of
steps that drafted. Run it on a quiet machine (nothing else running); the JSON records the load.

    python scripts/suffix_cost_ab.py --costs 0:0.01,0.05:0.03,0:0 --out docs/bench/suffix_cost_ab.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tqdm import tqdm

from specot.api import decoding_plan, load_drafter, load_target
from specot.engine import GenerationConfig, autoregressive_generate, tree_generate
from specot.envinfo import load_average
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier
from specot_lab.corpus import load_prompts
from specot_lab.bench.script_io import add_run_options, timed_run_fields, write_record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--costs", default="0:0.01,0.05:0.03,0:0", help="f:c pairs (0:0 = no cost model)")
    add_run_options(ap, sets="docs/bench/prompts_code.jsonl,mixed")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = load_average()
    tgt = load_target(None, dtype=args.dtype)
    fs = [tuple(float(v) for v in x.split(":")) for x in args.costs.split(",") if x]
    rows = []
    warm = tgt.encode_prompt("def add(a, b):")
    wcfg = GenerationConfig(max_new_tokens=8, gamma=args.gamma, seed=0)
    autoregressive_generate(tgt, warm, wcfg)  # warm-up: first-call allocations stay out of the timings
    wd = load_drafter("suffix", tgt)
    tree_generate(tgt, wd, warm, decoding_plan(wd, get_verifier("speculative"), gamma=args.gamma)[0], wcfg,
                  verifier=get_verifier("greedy"))
    for set_name in [s for s in args.sets.split(",") if s]:
        prompts = [tgt.encode_prompt(p) for p in load_prompts(set_name, args.n_prompts)]
        for temp in (0.0, 1.0):
            tot = {k: {"time_s": 0.0, "tokens": 0, "calls": 0, "drafted_steps": 0, "steps": 0} for k in ["ar", *fs]}
            for i, ids in enumerate(tqdm(prompts, desc=f"{set_name[-16:]} T={temp:g}", file=sys.stderr)):
                cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, gamma=args.gamma, seed=i,
                                       sampling=SamplingConfig(temp))
                for key in ["ar", *fs]:
                    if key == "ar":
                        t0 = time.perf_counter()
                        res = autoregressive_generate(tgt, ids, cfg)
                        dt, budgets = time.perf_counter() - t0, []
                    else:
                        d = load_drafter("suffix", tgt)
                        d.cost_fixed, d.cost_per_token = key
                        spec, ver = decoding_plan(d, get_verifier("speculative"), gamma=args.gamma)
                        t0 = time.perf_counter()
                        res = tree_generate(tgt, d, ids, spec, cfg, verifier=ver)
                        dt, budgets = time.perf_counter() - t0, d.budgets
                    a = tot[key]
                    a["time_s"] += dt
                    a["tokens"] += res.stats.new_tokens
                    a["calls"] += res.stats.target_calls
                    a["drafted_steps"] += sum(b > 0 for b in budgets)
                    a["steps"] += len(budgets)
            ar_rate = tot["ar"]["tokens"] / tot["ar"]["time_s"]
            for key, a in tot.items():
                row = {"prompt_set": set_name, "temperature": temp, "variant": "ar" if key == "ar" else f"suffix f={key[0]:g} c={key[1]:g}",
                       "cost_fixed": None if key == "ar" else key[0], "cost_per_token": None if key == "ar" else key[1], **a,
                       "block_efficiency": a["tokens"] / max(a["calls"], 1),
                       "speedup": (a["tokens"] / a["time_s"]) / ar_rate,
                       "drafted_share": a["drafted_steps"] / a["steps"] if a["steps"] else 0.0}
                rows.append(row)
                print(f"{set_name[-16:]:16s} T={temp:g} {row['variant']:14s} speedup={row['speedup']:.3f} "
                      f"BE={row['block_efficiency']:.2f} drafted={row['drafted_share']:.2f}", file=sys.stderr)
    write_record(args.out, "suffix_cost_ab", "suffix_cost_ab.py", argv, **timed_run_fields(args, tgt, load_start), rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
