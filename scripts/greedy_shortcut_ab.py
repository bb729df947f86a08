"""Wall-clock A/B of the temperature-0 verification shortcut (one argmax per node) against running the verifier.

At T = 0 the decoding loop verifies a tree by one argmax per node when the verifier's rule there is
"accept iff the draft is the target's argmax" (``Verifier.argmax_at_temperature_0``: ``speculative``,
``greedy``). This script decodes every prompt with each drafter twice — shortcut on, and off (the
flag cleared on both verifier classes, so the verifier runs on one-hot rows as before) — plus
autoregressive decoding, interleaved prompt by prompt so that a change of machine load hits every
variant alike, and checks that both variants commit the same tokens. Run it on a quiet machine;
the JSON records the load, CPU flags and library versions.

    python scripts/greedy_shortcut_ab.py --drafts ngram,suffix+eagle --out docs/bench/greedy_shortcut_ab.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from tqdm import tqdm

from specot.api import decoding_plan, load_drafter, load_target
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate
from specot.envinfo import load_average
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier
from specot.verifiers.greedy import GreedyVerifier
from specot.verifiers.speculative import SpeculativeVerifier
from specot_lab.bench.script_io import add_run_options, timed_run_fields, write_record
from specot_lab.corpus import load_prompts

SHORTCUT_CLASSES = (SpeculativeVerifier, GreedyVerifier)


def _set_shortcut(on: bool) -> None:
    for cls in SHORTCUT_CLASSES:
        cls.argmax_at_temperature_0 = on


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafts", default="ngram,suffix+eagle", help="drafters as specot generate names them")
    add_run_options(ap, sets="docs/bench/prompts_code.jsonl,mixed,docs/bench/prompts_chat.jsonl")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = load_average()
    tgt = load_target(None, dtype=args.dtype)
    names = [d for d in args.drafts.split(",") if d]
    plans = {}
    for name in names:
        d = load_drafter(name, tgt)
        plans[name] = (d, *decoding_plan(d, get_verifier("speculative"), gamma=args.gamma))
    greedy = SamplingConfig(0.0)

    def run(key: str, ids: list[int], cfg: GenerationConfig):
        if key == "ar":
            return autoregressive_generate(tgt, ids, cfg)
        d, spec, ver = plans[key]
        if spec is None:
            return speculative_generate(tgt, d, ids, cfg, verifier=ver)
        return tree_generate(tgt, d, ids, spec, cfg, verifier=ver)

    warm = tgt.encode_prompt("def add(a, b):")
    for key in ["ar", *names]:  # warm-up: first-call allocations stay out of the timings
        run(key, warm, GenerationConfig(max_new_tokens=8, gamma=args.gamma, seed=0, sampling=greedy))
    variants = ["ar"] + [f"{n}|{s}" for n in names for s in ("shortcut", "verifier")]
    rows = []
    for set_name in [s for s in args.sets.split(",") if s]:
        prompts = [tgt.encode_prompt(p) for p in load_prompts(set_name, args.n_prompts)]
        tot = {k: {"time_s": 0.0, "tokens": 0, "calls": 0} for k in variants}
        for i, ids in enumerate(tqdm(prompts, desc=set_name[-16:], file=sys.stderr)):
            cfg = GenerationConfig(max_new_tokens=args.max_new_tokens, gamma=args.gamma, seed=i, sampling=greedy)
            order = variants[i % len(variants):] + variants[:i % len(variants)]
            outs = {}
            for v in order:
                name, _, mode = v.partition("|")
                _set_shortcut(mode != "verifier")
                t0 = time.perf_counter()
                res = run(name, list(ids), cfg)
                dt = time.perf_counter() - t0
                _set_shortcut(True)
                outs[v] = res.tokens
                a = tot[v]
                a["time_s"] += dt
                a["tokens"] += res.stats.new_tokens
                a["calls"] += res.stats.target_calls
            for n in names:
                if outs[f"{n}|shortcut"] != outs[f"{n}|verifier"]:
                    raise SystemExit(f"{set_name} prompt {i}: {n} committed different tokens with and without the shortcut")
        ar_rate = tot["ar"]["tokens"] / tot["ar"]["time_s"]
        for v, a in tot.items():
            row = {"prompt_set": set_name, "temperature": 0.0, "variant": v, **a,
                   "block_efficiency": a["tokens"] / max(a["calls"], 1), "speedup": (a["tokens"] / a["time_s"]) / ar_rate}
            rows.append(row)
            print(f"{set_name[-16:]:16s} {v:26s} speedup={row['speedup']:.3f} BE={row['block_efficiency']:.2f}",
                  file=sys.stderr)
    write_record(args.out, "greedy_shortcut_ab", "greedy_shortcut_ab.py", argv, **timed_run_fields(args, tgt, load_start), rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
