"""Wall-clock A/B of EAGLE's temperature-0 draft trees: the host construction against the static one
built on the device (``EagleDrafter.use_static_cache``, ``specot.drafting.eagle_static``), against
autoregressive decoding, all on one target in one run.

The static builder exists for CUDA graphs: the host construction costs about 620 small operations
per draft, more than a target pass replayed as a CUDA graph on an H200 (session 28). On a CPU it is
slower (it expands every depth, and its attention spans the static cache), so ``specot`` turns it on
only with CUDA graphs. The plan is ``auto``'s at T = 0: ``suffix+eagle`` trees of 3 children x depth
6, pruned by the head's confidence. Every prompt is decoded by the three variants in a rotating
order. In float32 both outputs must equal autoregressive decoding's, so they agree (the record's
``outputs_equal``); in bf16 they agree up to near-ties (the exactness contract): the head's
attention spans the static buffer in one path and the cached entries alone in the other, so its
logits round differently, a draft top-k can flip at a near-tie, and a different tree makes the
target run a different pass. Run it on a quiet machine.

    python scripts/static_tree_ab.py --out static_tree_ab.json                        # CPU: both eager
    python scripts/static_tree_ab.py --device cuda --cuda-graphs --out static_tree_ab_gpu.json
"""

from __future__ import annotations

import argparse
import sys
import time

from tqdm import tqdm

from specot.api import AUTO_HYBRID, AUTO_MIN_CONFIDENCE_GREEDY, AUTO_TREE_GREEDY, decoding_plan, load_drafter
from specot.engine import GenerationConfig, autoregressive_generate, tree_generate
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier
from specot_lab.bench.script_io import add_run_options, device_sync, load_run, timed_run_fields, write_record

VARIANTS = ("ar", "host", "static")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_options(ap, sets="docs/bench/prompts_code.jsonl,docs/bench/prompts_chat.jsonl")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--cuda-graphs", action="store_true", help="replay the target's passes and the static "
                    "builder's as CUDA graphs, as specot.generate does on CUDA")
    args = ap.parse_args(argv)
    drafts, depth = AUTO_TREE_GREEDY
    tgt, sets, load_start, span = load_run(args, drafts * depth)
    host = load_drafter(AUTO_HYBRID, tgt, dtype=args.dtype, device=args.device, min_confidence=AUTO_MIN_CONFIDENCE_GREEDY)
    static = load_drafter(AUTO_HYBRID, tgt, dtype=args.dtype, device=args.device,
                          min_confidence=AUTO_MIN_CONFIDENCE_GREEDY).use_static_cache(span, cuda_graphs=args.cuda_graphs)
    spec, ver = decoding_plan(host, get_verifier("speculative"), drafts=drafts, gamma=depth)
    cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, gamma=depth, sampling=SamplingConfig(0.0))

    def run(key: str, ids: list[int]):
        device_sync(tgt.device)
        t0 = time.perf_counter()
        res = (autoregressive_generate(tgt, ids, cfg) if key == "ar"
               else tree_generate(tgt, host if key == "host" else static, ids, spec, cfg, verifier=ver))
        device_sync(tgt.device)
        return res, time.perf_counter() - t0

    warm = tgt.encode_prompt("def add(a, b):")
    for key in VARIANTS:  # warm-up: allocations and graph captures stay out of the timings
        run(key, warm)
    rows = []
    for set_name, prompts in sets.items():
        tot = {k: {"time_s": 0.0, "tokens": 0, "calls": 0, "draft_time_s": 0.0} for k in VARIANTS}
        agree = []
        for i, ids in enumerate(tqdm(prompts, desc=set_name[-16:], file=sys.stderr)):
            out = {}
            for key in VARIANTS[i % 3:] + VARIANTS[: i % 3]:
                res, dt = run(key, ids)
                a = tot[key]
                a["time_s"] += dt
                a["tokens"] += res.stats.new_tokens
                a["calls"] += res.stats.target_calls
                a["draft_time_s"] += res.stats.draft_time_s
                out[key] = res.tokens
            agree.append(out["host"] == out["static"])
        ar_rate = tot["ar"]["tokens"] / tot["ar"]["time_s"]
        for key, a in tot.items():
            row = {"prompt_set": set_name, "variant": key, **a, "block_efficiency": a["tokens"] / max(a["calls"], 1),
                   "draft_ms_per_iteration": 1000 * a["draft_time_s"] / max(a["calls"], 1),
                   "speedup": (a["tokens"] / a["time_s"]) / ar_rate, "outputs_equal": all(agree)}
            rows.append(row)
            print(f"{set_name[-16:]:16s} {key:6s} speedup={row['speedup']:.3f} BE={row['block_efficiency']:.2f} "
                  f"draft={row['draft_ms_per_iteration']:.2f} ms/iteration equal={all(agree)}", file=sys.stderr)
    write_record(args.out, "static_tree_ab", "static_tree_ab.py", argv, **timed_run_fields(args, tgt, load_start),
                 device=args.device, cuda_graphs=args.cuda_graphs, tree=f"{drafts}x{depth}", rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
