"""Timing-free comparison of drafters on held-out prompt sets: first-position acceptance α,
acceptance rate, block efficiency (tokens per target pass), mean tree size.

    python benchmarks/eval_drafters.py --drafts distilled,suffix,eagle:DIR --out runs/drafters.json
"""

from __future__ import annotations

import argparse
import sys

import torch
from tqdm import tqdm

from specot.api import load_drafter, load_target
from specot.plan import make_plan
from specot.engine import GenerationConfig, speculative_generate, tree_generate
from specot.envinfo import environment_info
from specot.sampling import SamplingConfig
from specot_lab.bench.script_io import add_run_options, write_record
from specot_lab.corpus import load_prompts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafts", default="distilled,ngram,suffix")
    ap.add_argument("--tree", default=None, help="KxL: also a greedy-children tree for model/EAGLE drafts")
    ap.add_argument("--temperatures", default="0,1", help="comma-separated sampling temperatures")
    add_run_options(ap, sets="code,mixed", dtype="float32", threads=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tgt = load_target(None, dtype=args.dtype)
    rows = []
    sets = [s for s in args.sets.split(",") if s]
    drafts = [d for d in args.drafts.split(",") if d]
    temps = [float(t) for t in args.temperatures.split(",") if t]
    jobs = [(s, d, t, tree) for s in sets for d in drafts for t in temps
            for tree in ([None] + ([args.tree] if args.tree and d not in ("ngram", "suffix") else []))]
    for set_name, dname, temp, tree in tqdm(jobs, desc="drafters", file=sys.stderr):
        prompts = load_prompts(set_name, args.n_prompts)
        drafter = load_drafter(dname, tgt)
        if tree:
            K, L = (int(x) for x in tree.lower().split("x"))
            plan = make_plan(drafter, verifier="greedy", n=K, gamma=L, tree="greedy")
        else:
            plan = make_plan(drafter, gamma=args.gamma)
        spec, ver = plan.tree, plan.verifier.build()
        tot = {"tokens": 0, "calls": 0, "drafted": 0, "accepted": 0, "tried0": 0, "acc0": 0}
        for i, p in enumerate(prompts):
            ids = tgt.encode_prompt(p)
            cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, gamma=args.gamma, seed=i,
                                   sampling=SamplingConfig(temp))
            res = (speculative_generate(tgt, drafter, ids, cfg, verifier=ver) if spec is None
                   else tree_generate(tgt, drafter, ids, spec, cfg, verifier=ver))
            st = res.stats
            tot["tokens"] += st.new_tokens
            tot["calls"] += st.target_calls
            tot["drafted"] += st.drafted
            tot["accepted"] += st.accepted
            if st.tried_at:
                tot["tried0"] += st.tried_at[0]
                tot["acc0"] += st.accepted_at[0]
        row = {"prompt_set": set_name, "draft": dname, "temperature": temp, "tree": tree or f"chain γ={args.gamma}",
               "verifier": ver.name, "alpha_first_position": tot["acc0"] / max(tot["tried0"], 1),
               "acceptance_rate": tot["accepted"] / max(tot["drafted"], 1),
               "block_efficiency": tot["tokens"] / max(tot["calls"], 1),
               "mean_draft_tokens": tot["drafted"] / max(tot["calls"], 1), **tot}
        rows.append(row)
        print(f"{set_name[:24]:24s} {dname[:28]:28s} T={temp} {row['tree']:10s} α0={row['alpha_first_position']:.3f} "
              f"BE={row['block_efficiency']:.2f} N̄={row['mean_draft_tokens']:.1f}", file=sys.stderr)
    write_record(args.out, "drafters", "eval_drafters.py", argv, dtype=args.dtype, max_new_tokens=args.max_new_tokens,
                 gamma=args.gamma, n_prompts=args.n_prompts, environment=environment_info(), rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
