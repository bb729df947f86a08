"""Wall-clock A/B of the n-gram drafter's draft-length schedule: constant γ against the heuristic
schedule (Hugging Face assisted generation's: +2 after a fully accepted draft, −1 otherwise, within
[1, 2γ]), and against prompt lookup alone (``lookup``: no corpus n-gram table, constant γ), against
autoregressive decoding.

The n-gram drafter is ``draft="auto"`` for every target but the embedded one on a CPU, and on CUDA
(docs/engine.md). There, with CUDA graphs, a target pass of 5 tokens costs 1.07 one-token passes
and a drafted iteration about 0.5 ms more of host work (an H200, session 28), so drafts that are
rarely accepted (chat at T = 1: α ≈ 0.1) made it 0.92× autoregressive decoding. A schedule that
drafts fewer tokens after rejections pays less for them, and so may a drafter that drafts only
from the context: in session 29's CPU counts (which do not depend on the device), the corpus table
drafted in most iterations where prompt lookup found nothing, and at T = 1 the n-gram drafter's
tokens were accepted 4.5-9 % of the time with the table against 7-11.5 % without it. For each prompt set and temperature, every
prompt is decoded by autoregressive decoding and by each variant, interleaved prompt by prompt
(the order rotating), so a change of load hits every variant alike. Run it on a quiet machine.

    python scripts/ngram_schedule_ab.py --out docs/bench/ngram_schedule_ab.json
    python scripts/ngram_schedule_ab.py --device cuda --cuda-graphs --out ngram_schedule_ab_gpu.json
"""

from __future__ import annotations

import argparse
import sys
import time

from tqdm import tqdm

from specot.api import load_drafter
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
from specot.sampling import SamplingConfig
from specot_lab.bench.script_io import add_run_options, load_run, timed_run_fields, write_record

SCHEDULES = ("constant", "heuristic")
VARIANTS = (*SCHEDULES, "lookup")  # lookup: prompt lookup alone (no corpus table), constant γ


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(ap, sets="docs/bench/prompts_code.jsonl,docs/bench/prompts_chat.jsonl,"
                             "docs/bench/prompts_general.jsonl,mixed")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cuda-graphs", action="store_true", help="replay the target's passes as CUDA graphs "
                    "(CausalLM.use_static_cache), as specot.generate does on CUDA")
    args = ap.parse_args(argv)
    tgt, sets, load_start, _ = load_run(args, 2 * args.gamma)  # room for a 2γ draft (the heuristic schedule)
    drafter = load_drafter("ngram", tgt)
    lookup = load_drafter("ngram", tgt, ngram_corpus=None)
    warm = tgt.encode_prompt("def add(a, b):")
    for sched in SCHEDULES:  # warm-up: first-call allocations stay out of the timings
        speculative_generate(tgt, drafter, warm, GenerationConfig(max_new_tokens=8, gamma=args.gamma,
                                                                  gamma_schedule=sched, seed=0))
    rows = []
    keys = ["ar", *VARIANTS]
    for set_name, prompts in sets.items():
        for temp in (0.0, 1.0):
            tot = {k: {"time_s": 0.0, "tokens": 0, "calls": 0, "drafted": 0, "accepted": 0} for k in keys}
            for i, ids in enumerate(tqdm(prompts, desc=f"{set_name[-16:]} T={temp:g}", file=sys.stderr)):
                for key in keys[i % len(keys):] + keys[: i % len(keys)]:
                    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, gamma=args.gamma, seed=i,
                                           sampling=SamplingConfig(temp),
                                           gamma_schedule=key if key in SCHEDULES else "constant")
                    t0 = time.perf_counter()
                    res = (autoregressive_generate(tgt, ids, cfg) if key == "ar"
                           else speculative_generate(tgt, lookup if key == "lookup" else drafter, ids, cfg))
                    a = tot[key]
                    a["time_s"] += time.perf_counter() - t0
                    a["tokens"] += res.stats.new_tokens
                    a["calls"] += res.stats.target_calls
                    a["drafted"] += res.stats.drafted
                    a["accepted"] += res.stats.accepted
            ar_rate = tot["ar"]["tokens"] / tot["ar"]["time_s"]
            for key, a in tot.items():
                row = {"prompt_set": set_name, "temperature": temp, "variant": key, **a,
                       "block_efficiency": a["tokens"] / max(a["calls"], 1),
                       "drafted_per_pass": a["drafted"] / max(a["calls"], 1),
                       "acceptance": a["accepted"] / a["drafted"] if a["drafted"] else None,
                       "speedup": (a["tokens"] / a["time_s"]) / ar_rate}
                rows.append(row)
                print(f"{set_name[-16:]:16s} T={temp:g} {key:9s} speedup={row['speedup']:.3f} "
                      f"BE={row['block_efficiency']:.2f} drafted/pass={row['drafted_per_pass']:.2f}", file=sys.stderr)
    write_record(args.out, "ngram_schedule_ab", "ngram_schedule_ab.py", argv, **timed_run_fields(args, tgt, load_start),
                 device=args.device, cuda_graphs=args.cuda_graphs, rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
