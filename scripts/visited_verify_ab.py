"""Wall-clock A/B of verifying a draft tree at its visited nodes only (the CPU's path since session
24, ``engine.loop._verify_visited``) against verifying every expanded node at once (``_verify``,
the path on other devices).

Each prompt is decoded by the default plan (``draft="auto"``) with both variants, interleaved prompt
by prompt (the order alternating) so that a change of machine load hits both alike; the time spent
in ``verify_draft_tree`` and the whole decoding time are summed per iteration. Both variants follow
the same law; the seeds are the same, but the two paths consume the generator differently, so the
answers differ. Run it on a quiet machine; the JSON records the load, CPU flags and library versions.

    python scripts/visited_verify_ab.py --sets docs/bench/prompts_chat.jsonl,docs/bench/prompts_code.jsonl --out ab.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tqdm import tqdm

import specot
from specot.engine import loop
from specot.envinfo import load_average
from specot.sampling import standardize
from specot_lab.bench.script_io import add_run_options, timed_run_fields, write_record
from specot_lab.corpus import load_prompts

VARIANTS = ("visited", "batched")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (> 0: the verifier runs)")
    add_run_options(ap, sets="docs/bench/prompts_chat.jsonl,docs/bench/prompts_code.jsonl,"
                             "docs/bench/prompts_general.jsonl")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = load_average()
    tgt = specot.load_target(None, dtype=args.dtype)
    visited, verify = loop._verify_visited, loop.verify_draft_tree
    mode = {"variant": "visited"}
    spent = dict.fromkeys(VARIANTS, 0.0)

    def batched(tree, logits, sampling, verifier, generator):  # every expanded node at once
        return loop._verify(tree, standardize(logits, sampling), verifier, generator)

    def timed_verify(*a, **kw):
        loop._verify_visited = visited if mode["variant"] == "visited" else batched
        t0 = time.perf_counter()
        out = verify(*a, **kw)
        spent[mode["variant"]] += time.perf_counter() - t0
        return out

    loop.verify_draft_tree = timed_verify
    rows = []
    try:
        for set_name in [s for s in args.sets.split(",") if s]:
            tot = {v: {"time_s": 0.0, "iterations": 0, "tokens": 0} for v in VARIANTS}
            before = dict(spent)
            for i, prompt in enumerate(tqdm(load_prompts(set_name, args.n_prompts), desc=set_name[-16:],
                                            file=sys.stderr)):
                for v in VARIANTS if i % 2 == 0 else VARIANTS[::-1]:
                    mode["variant"] = v
                    st = specot.generate(prompt, target=tgt, draft="auto", temperature=args.temperature,
                                         max_new_tokens=args.max_new_tokens, seed=i).result.stats
                    tot[v]["time_s"] += st.total_time_s
                    tot[v]["iterations"] += st.iterations
                    tot[v]["tokens"] += st.new_tokens
            for v in VARIANTS:
                its = tot[v]["iterations"]
                rows.append({"prompt_set": set_name, "variant": v, **tot[v],
                             "verify_ms_per_iteration": 1e3 * (spent[v] - before[v]) / its,
                             "ms_per_iteration": 1e3 * tot[v]["time_s"] / its,
                             "tokens_per_s": tot[v]["tokens"] / tot[v]["time_s"]})
                print(f"{set_name[-28:]:28s} {v:8s} verify {rows[-1]['verify_ms_per_iteration']:.2f} ms/iteration, "
                      f"{rows[-1]['ms_per_iteration']:.2f} ms/iteration in all, {rows[-1]['tokens_per_s']:.1f} tokens/s",
                      file=sys.stderr)
    finally:
        loop.verify_draft_tree, loop._verify_visited = verify, visited
    write_record(args.out, "visited_verify_ab", "visited_verify_ab.py", argv, temperature=args.temperature,
                 rows=rows, **timed_run_fields(args, tgt, load_start))
    return 0


if __name__ == "__main__":
    sys.exit(main())
