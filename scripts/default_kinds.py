"""Speedup of `specot generate`'s default plan (`auto`) over autoregressive decoding on kinds of
prompt that no benchmark set holds (docs/results.md, "Session 21 runs").

`docs/bench/prompts_kinds_s21.jsonl`: one JSON object per line, ``name``, ``prompt`` and an
optional ``chat`` (``false``: raw continuation, no chat template): a long document to summarise,
raw continuations of prose, Python and JavaScript, French, arithmetic, SQL, C++ and a list. Each
prompt is decoded exactly as ``specot generate --prompt P --baseline --repeats R`` does
(:func:`specot.generate` with ``baseline=True``: pair r is a speculative run and an autoregressive
run of as many tokens, seed + r), on one loaded target; the speedup is the median over the pairs.

    python scripts/default_kinds.py --temperatures 0,1 --repeats 3 --out docs/bench/default_kinds_s21.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from tqdm import tqdm

import specot
from specot.envinfo import environment_info, load_average
from specot_lab.bench.script_io import write_record


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="docs/bench/prompts_kinds_s21.jsonl")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--repeats", type=int, default=3, help="speculative/autoregressive pairs per prompt")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    with open(args.prompts, encoding="utf-8") as fh:
        prompts = [json.loads(line) for line in fh if line.strip()]
    temps = [float(t) for t in args.temperatures.split(",")]
    load_start = load_average()
    target = specot.load_target()
    rows = []
    bar = tqdm(total=len(temps) * len(prompts), desc="default plan vs autoregressive", file=sys.stderr)
    for T in temps:
        for item in prompts:
            rep = specot.generate(item["prompt"], target=target, temperature=T, max_new_tokens=args.max_new_tokens,
                                  baseline=True, repeats=args.repeats, seed=0, chat=item.get("chat"))
            st = rep.result.stats  # the first pair's speculative run
            rows.append({"name": item["name"], "temperature": T, "speedup": rep.speedup, "speedups": rep.speedups,
                         "block_efficiency_first_pair": st.block_efficiency, "tokens_first_pair": st.new_tokens,
                         "draft": rep.draft, "load_average": load_average()})
            bar.set_postfix_str(f"{item['name']} T={T:g}: {rep.speedup:.2f}x")
            bar.update()
    bar.close()
    for r in rows:
        print(f"{r['name']:16s} T={r['temperature']:g}  {r['speedup']:.2f}x  (range {min(r['speedups']):.2f}-"
              f"{max(r['speedups']):.2f}, block efficiency {r['block_efficiency_first_pair']:.2f})")
    write_record(args.out, "default_kinds", "default_kinds.py", argv, repeats=args.repeats,
                 max_new_tokens=args.max_new_tokens, torch_threads=torch.get_num_threads(),
                 target_dtype=str(target.dtype).replace("torch.", ""), load_avg_start=load_start,
                 load_avg_end=load_average(), environment=environment_info(), rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
