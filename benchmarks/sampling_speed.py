"""How fast :func:`specot_lab.distill.data.sample_batch` samples the embedded target's answers, with
soft labels (``--top-k``, a distilled draft's data) and without (``top_k = 0``, an EAGLE head's data),
in one run on the same prompts and seed (docs/results.md, "Component costs").

The prompts are instructions over excerpts of the Python documentation (``pydoc_data.topics``),
about 300 tokens each with the chat template, as long as the EAGLE instruction prompts.

    python benchmarks/sampling_speed.py --batch-size 48 --max-new-tokens 128 --out docs/bench/sampling_speed.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from specot import make_generator
from specot.api import load_target
from specot.plan.corpus import pydoc_texts
from specot.envinfo import environment_info, load_average
from specot_lab.bench.script_io import device_sync, write_record
from specot_lab.distill.data import SampleConfig, sample_batch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch-size", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--top-k", type=int, default=1, help="soft labels of the labelled run (train_eagle.py used 1)")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu or cuda (the generator is made on the same device)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    start = load_average()
    target = load_target(None, dtype=args.dtype, device=args.device)
    texts = [f"Read this part of the Python documentation and explain it in your own words.\n\n{t[:1400]}"
             for t in pydoc_texts()[:args.batch_size]]
    prompts = [target.encode_prompt(t) for t in texts]
    rows, answers = [], {}
    for top_k in (args.top_k, 0):
        cfg = SampleConfig(batch_size=len(prompts), max_new_tokens=args.max_new_tokens, top_k=top_k)
        device_sync(args.device)
        t = time.perf_counter()
        seqs = sample_batch(target, prompts, cfg, eos_ids=target.eos_token_ids, generator=make_generator(0, args.device))
        device_sync(args.device)
        dt = time.perf_counter() - t
        answers[top_k] = [s["ids"].tolist() for s in seqs]
        n_ans = sum(len(s["ids"]) - s["n_prompt"] for s in seqs)
        n_all = sum(len(s["ids"]) for s in seqs)
        rows.append({"top_k": top_k, "seconds": dt, "answer_tokens": n_ans, "tokens": n_all,
                     "answer_tokens_per_s": n_ans / dt, "tokens_per_s": n_all / dt})
        print(f"top_k={top_k}: {dt:.1f} s, {n_ans} answer tokens ({n_ans / dt:.0f}/s), {n_all} in all ({n_all / dt:.0f}/s)")
    same = answers[args.top_k] == answers[0]
    print(f"the same answers in both runs: {same}")
    write_record(args.out, "sampling_speed", "sampling_speed.py", argv, rows=rows, same_answers=same,
                 prompts=len(prompts), mean_prompt_tokens=sum(map(len, prompts)) / len(prompts),
                 max_new_tokens=args.max_new_tokens, dtype=args.dtype, device=args.device, torch_threads=torch.get_num_threads(),
                 load_avg_start=start, load_avg_end=load_average(), environment=environment_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
