"""A/B of the target's attention implementation in one process (docs/results.md, "Session 18 runs"):
per prompt, autoregressive decoding, then ``auto`` with transformers' SDPA attention and with
specot's GQA-aware SDPA (:func:`specot.models.device.gqa_sdpa_attention`), in alternating order,
on the same target model — so the two speedups share one baseline and one machine state.

    python scripts/attention_ab.py --prompts docs/bench/prompts_chat.jsonl --temperatures 0,1 --out runs/attn_chat.json
"""

from __future__ import annotations

import argparse
import time

import torch
from tqdm import tqdm

from specot.api import generate, load_target
from specot.engine import GenerationConfig, autoregressive_generate
from specot.envinfo import load_average
from specot.envinfo import environment_info
from specot.models.device import GQA_SDPA
from specot.sampling import SamplingConfig
from specot_lab.bench.script_io import write_record
from specot_lab.corpus import load_prompts

IMPLEMENTATIONS = {"sdpa": "sdpa", "gqa": GQA_SDPA}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", required=True, help="a prompt set as `specot bench` takes it (name or FILE.jsonl)")
    ap.add_argument("--n-prompts", type=int, default=6)
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", required=True, help="JSON file")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    tgt = load_target(None)
    prompts = load_prompts(args.prompts, args.n_prompts)
    load0 = load_average()
    rows = []
    temps = [float(t) for t in args.temperatures.split(",")]
    for temp in temps:
        tot = {k: {"time_s": 0.0, "tokens": 0, "iterations": 0} for k in ("ar", *IMPLEMENTATIONS)}
        for i, prompt in enumerate(tqdm(prompts, desc=f"T={temp:g}")):
            ids = tgt.encode_prompt(prompt)
            order = list(IMPLEMENTATIONS) if i % 2 == 0 else list(IMPLEMENTATIONS)[::-1]
            runs = {}
            for name in order:
                tgt.model.set_attn_implementation(IMPLEMENTATIONS[name])
                rep = generate(ids, target=tgt, temperature=temp, max_new_tokens=args.max_new_tokens, seed=i)
                runs[name] = rep.result.stats
            n = min(s.new_tokens for s in runs.values())
            cfg = GenerationConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=temp), seed=i,
                                   stop_at_eos=False)
            tgt.model.set_attn_implementation("sdpa")
            base = autoregressive_generate(tgt, ids, cfg).stats
            tot["ar"]["time_s"] += base.total_time_s / base.new_tokens
            tot["ar"]["tokens"] += base.new_tokens
            for name, s in runs.items():  # seconds per token, summed over prompts (each prompt weighs the same)
                tot[name]["time_s"] += s.total_time_s / s.new_tokens
                tot[name]["tokens"] += s.new_tokens
                tot[name]["iterations"] += s.iterations
        for name in IMPLEMENTATIONS:
            t = tot[name]
            rows.append({"temperature": temp, "attention": IMPLEMENTATIONS[name],
                         "speedup": tot["ar"]["time_s"] / t["time_s"],
                         "block_efficiency": t["tokens"] / t["iterations"], "tokens": t["tokens"]})
            print(f"T={temp:g} {name:5s} {rows[-1]['speedup']:.3f}x  block efficiency {rows[-1]['block_efficiency']:.2f}")
    write_record(args.out, "attention_ab", "attention_ab.py", argv, prompt_set=args.prompts, prompts=len(prompts),
                 max_new_tokens=args.max_new_tokens, rows=rows, load_avg_start=load0, load_avg_end=load_average(),
                 environment=environment_info(), time=time.strftime("%Y-%m-%d %H:%M:%S"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
