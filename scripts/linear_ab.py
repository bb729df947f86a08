"""A/B of linear-layer kernels in one process (docs/results.md, "Session 23 runs").

``--compare target``: per prompt, each decoding plan and autoregressive decoding with the target's
linear layers on ``F.linear`` (MKL) and on :class:`specot.models.device.PrepackedLinear` (oneDNN
over weights reordered once), in alternating order, on the same loaded target.
``--compare head``: the target prepacked both ways; the shipped EAGLE head's linear layers as int8
weights (``aten._weight_int8pack_mm``) or prepacked, each in its own suffix+eagle drafter.

    python scripts/linear_ab.py --prompts docs/bench/prompts_chat.jsonl --dtype float32 \
        --plans ngram,bf16-plan --out runs/linear_chat_f32.json
    python scripts/linear_ab.py --compare head --prompts code --dtype float32 --plans bf16-plan --out runs/head.json

Plans: ``auto`` (what ``specot generate`` decodes with for this target and dtype), ``ngram`` (a
γ = 4 chain), ``bf16-plan`` (``auto``'s plan for the embedded target in bf16 — suffix+eagle
GREEDY-law trees, 3 x 6 gated at τ = 0.1 at T = 0, 2 x 3 above — whatever the dtype). Every run
decodes ``--max-new-tokens`` tokens at most and stops at EOS; speeds are seconds per token summed
over prompts (each prompt weighs the same), and autoregressive decoding runs for as many tokens as
the shortest speculative run of the prompt.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from tqdm import tqdm

from specot.api import AUTO_MIN_CONFIDENCE_GREEDY, AUTO_TREE, AUTO_TREE_GREEDY, generate, load_drafter, load_target
from specot.drafting import EagleDrafter, HybridDrafter
from specot.engine import GenerationConfig, autoregressive_generate
from specot.envinfo import environment_info, load_average
from specot.models.device import install_prepacked_linears, remove_prepacked_linears
from specot.models.embedded import embedded_eagle_dir
from specot.sampling import SamplingConfig
from specot_lab.bench.script_io import write_record
from specot_lab.corpus import load_prompts

VARIANTS = {"target": ("f_linear", "prepacked"), "head": ("int8", "prepacked")}
PLANS = ("auto", "ngram", "bf16-plan")


def _set_target_linears(model: Any, name: str) -> None:
    remove_prepacked_linears(model)
    if name == "prepacked" and not install_prepacked_linears(model):
        raise SystemExit("oneDNN cannot prepack this model's linear layers here (no oneDNN, or the dtype)")


def _hybrid(tgt: Any, temp: float, int8: bool) -> HybridDrafter:
    """``auto``'s bf16 drafter: suffix decoding with the shipped head (gated at T = 0)."""
    gate = AUTO_MIN_CONFIDENCE_GREEDY if temp == 0 else None
    return HybridDrafter(load_drafter("suffix", tgt),
                         EagleDrafter.from_pretrained(embedded_eagle_dir(), tgt, int8=int8, min_confidence=gate))


def _run(tgt: Any, ids: list[int], plan: str, temp: float, seed: int, n: int, hybrid: Any) -> Any:
    if plan == "auto":
        return generate(ids, target=tgt, temperature=temp, max_new_tokens=n, seed=seed).result.stats
    if plan == "ngram":
        return generate(ids, target=tgt, draft="ngram", temperature=temp, max_new_tokens=n, seed=seed).result.stats
    drafts, depth = AUTO_TREE_GREEDY if temp == 0 else AUTO_TREE
    return generate(ids, target=tgt, draft=hybrid, drafts=drafts, gamma=depth, temperature=temp,
                    max_new_tokens=n, seed=seed).result.stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", choices=tuple(VARIANTS), default="target",
                    help="target: F.linear against prepacked target layers; head: int8 against prepacked EAGLE head")
    ap.add_argument("--prompts", required=True, help="a prompt set as `specot bench` takes it (name or FILE.jsonl)")
    ap.add_argument("--n-prompts", type=int, default=6)
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--plans", default="auto,ngram", help=f"comma-separated, of {', '.join(PLANS)}")
    ap.add_argument("--dtype", default="auto", help="the target's dtype: auto, float32 or bfloat16")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", required=True, help="JSON file")
    args = ap.parse_args(argv)
    plans = args.plans.split(",")
    if set(plans) - set(PLANS):
        raise SystemExit(f"unknown plan(s) {sorted(set(plans) - set(PLANS))}; use {', '.join(PLANS)}")
    torch.set_num_threads(args.threads)
    tgt = load_target(None, dtype=args.dtype)
    temps = [float(t) for t in args.temperatures.split(",")]
    variants = VARIANTS[args.compare]
    head = args.compare == "head"
    # (variant, T) -> the bf16 plan's drafter; comparing target layers, both variants share one head
    hybrid = {(v, t): _hybrid(tgt, t, int8=head and v == "int8") for v in variants for t in temps} \
        if "bf16-plan" in plans else {}
    prompts = load_prompts(args.prompts, args.n_prompts)
    load0 = load_average()
    rows = []
    for temp in temps:
        # seconds per token summed over prompts, tokens and iterations, per (variant, plan or "ar")
        tot = {(v, p): [0.0, 0, 0] for v in variants for p in ("ar", *plans)}
        for i, prompt in enumerate(tqdm(prompts, desc=f"T={temp:g}")):
            ids = tgt.encode_prompt(prompt)
            order = list(variants) if i % 2 == 0 else list(variants)[::-1]
            runs: dict[tuple[str, str], Any] = {}
            for v in order:
                _set_target_linears(tgt.model, "prepacked" if head else v)
                for p in plans:
                    runs[(v, p)] = _run(tgt, ids, p, temp, i, args.max_new_tokens, hybrid.get((v, temp)))
            n = min(s.new_tokens for s in runs.values())
            cfg = GenerationConfig(max_new_tokens=n, sampling=SamplingConfig(temperature=temp), seed=i,
                                   stop_at_eos=False)
            for v in order:
                _set_target_linears(tgt.model, "prepacked" if head else v)
                runs[(v, "ar")] = autoregressive_generate(tgt, ids, cfg).stats
            for key, s in runs.items():
                tot[key][0] += s.total_time_s / s.new_tokens
                tot[key][1] += s.new_tokens
                tot[key][2] += s.iterations
        ar_ref = tot[(variants[0], "ar")][0]
        for v in variants:
            ar = tot[(v, "ar")][0]
            rows.append({"temperature": temp, "variant": v, "plan": "ar", "tokens_per_s": len(prompts) / ar,
                         "speedup": 1.0, "speedup_over_first_ar": ar_ref / ar})
            for p in plans:
                t, tok, it = tot[(v, p)]
                rows.append({"temperature": temp, "variant": v, "plan": p, "tokens_per_s": len(prompts) / t,
                             "speedup": ar / t, "speedup_over_first_ar": ar_ref / t,
                             "block_efficiency": tok / it, "tokens": tok})
        for r in rows[-2 * (len(plans) + 1):]:
            print(f"T={temp:g} {r['variant']:9s} {r['plan']:9s} {r['tokens_per_s']:6.1f} tokens/s  "
                  f"{r['speedup']:.3f}x over its own AR  {r['speedup_over_first_ar']:.3f}x over {variants[0]}'s AR"
                  + (f"  block efficiency {r['block_efficiency']:.2f}" if "block_efficiency" in r else ""), flush=True)
    write_record(args.out, "linear_ab", "linear_ab.py", argv, compare=args.compare, variants=variants,
                 prompt_set=args.prompts, prompts=len(prompts), dtype=str(tgt.dtype), max_new_tokens=args.max_new_tokens,
                 plans=plans, rows=rows, load_avg_start=load0, load_avg_end=load_average(),
                 environment=environment_info(), time=time.strftime("%Y-%m-%d %H:%M:%S"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
