"""A/B of the suffix+eagle hybrid's settings in one `specot bench speedup` run (docs/results.md,
"Session 16 runs"): each variant is a HybridDrafter over the shipped suffix drafter and EAGLE head,
run with every tree shape, beside autoregressive decoding and n-gram drafting.

    python scripts/hybrid_ab.py --prompts docs/bench/prompts_code.jsonl --trees 2x3,3x6 \
        --variants default,p1-d0.03 --out runs/ab_code.json

A variant is ``default`` (the settings shipped until session 15: probe_every=8, draft_cost=0.08 —
not HybridDrafter's defaults since) or dash-separated options, each replacing one of those:
``pK`` (probe_every=K), ``dX`` (draft_cost=X), ``sN`` (the suffix drafter's trees N deep instead of
the spec's depth), ``cX`` (the EAGLE head's ``min_confidence`` τ = X: expand only paths whose
cumulative draft probability is at least X), ``hK`` (the K-th head of ``--heads`` instead of the
shipped one; ``h0`` is the shipped head), so that two heads meet in one run, ``wN`` (the head's dynamic
tree expands the N best nodes per depth instead of one per child of a node, EAGLE-2's width) and
``bN`` (the head's dynamic tree holds N nodes instead of the shape's children x depth), ``kX/Y/..``
(the head's cache model with weights λ_1 = X, λ_2 = Y, ..., per length of the context's repeat;
``EagleDrafter.cache_weights``; ``k`` alone: off, whatever the head's config says):

    python scripts/hybrid_ab.py --prompts code --trees 2x3 --temperatures 1 \
        --heads runs/e17/ship --variants p1-d0.03,p1-d0.03-h1 --out runs/ab_heads_code.json
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from specot.api import load_drafter
from specot.envinfo import environment_info
from specot.drafting import DraftSchedule, HybridDrafter
from specot_lab.bench import speedup
from specot_lab.corpus import load_prompts


def _variant(name: str, target: Any, heads: list[str]) -> HybridDrafter:
    opts = {} if name == "default" else {x[0]: x[1:] for x in name.split("-")}
    unknown = set(opts) - {"p", "d", "s", "c", "h", "w", "b", "k"}
    if unknown:
        raise SystemExit(f"variant {name!r}: unknown option(s) {sorted(unknown)}; use pK, dX, sN, cX, hK, wN, bN, kX/Y/..")
    k = int(opts.get("h", 0))
    if not 0 <= k <= len(heads):
        raise SystemExit(f"variant {name!r}: head h{k} not given; pass --heads DIR[,DIR...] (h0 is the shipped head)")
    suffix = load_drafter("suffix", target)
    eagle = load_drafter("eagle" if k == 0 else f"eagle:{heads[k - 1]}", target,
                         min_confidence=float(opts["c"]) if "c" in opts else None)
    if "w" in opts:
        eagle.width = int(opts["w"])
    if "b" in opts:
        eagle.total_tokens = int(opts["b"])
    if "k" in opts:
        eagle.cache_weights = tuple(float(x) for x in opts["k"].split("/")) if opts["k"] else None
    hd = HybridDrafter(suffix, eagle, probe_every=int(opts.get("p", 8)),
                       draft_cost=float(opts.get("d", 0.08)))
    if "s" in opts:  # the suffix drafter's own depth, after start() gave it the spec's
        depth, start = int(opts["s"]), hd.start

        def start_deeper(prompt_ids: Any, spec: Any, schedule: Any = None, stop_tokens: Any = frozenset()) -> None:
            start(prompt_ids, spec, schedule, stop_tokens)
            hd.suffix.schedule = DraftSchedule(depth)

        hd.start = start_deeper  # type: ignore[method-assign]
    return hd


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", required=True, help="a prompt set as `specot bench` takes it (name or FILE.jsonl)")
    ap.add_argument("--n-prompts", type=int, default=6)
    ap.add_argument("--trees", default="2x3", help="tree shapes NxD, comma-separated")
    ap.add_argument("--variants", default="default,p1-d0.03")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--heads", default="", help="EAGLE head directories, comma-separated: variant option hK uses "
                    "the K-th (h0, the default, is the shipped head)")
    ap.add_argument("--dtype", default="auto", help="the target's dtype: auto (bf16 where matmuls are native bf16, "
                    "else float32), float32 or bfloat16; the shipped head is int8 in bf16 and prepacked in float32 on a CPU")
    ap.add_argument("--out", required=True, help="JSON file")
    args = ap.parse_args(argv)
    heads = [h for h in args.heads.split(",") if h]
    variants = args.variants.split(",")
    bench_load = speedup.load_drafter
    # the bench resolves extra drafts by name: the variants' names resolve to their hybrids
    speedup.load_drafter = lambda name, tgt, **kw: (  # type: ignore[assignment]
        _variant(name, tgt, heads) if name in variants else bench_load(name, tgt, **kw))
    res = speedup.run_speedup_bench(
        target=None, draft=None, prompts=load_prompts(args.prompts, args.n_prompts), prompt_set=args.prompts,
        temperatures=tuple(float(t) for t in args.temperatures.split(",")), gammas=(4,),
        trees=[tuple(int(x) for x in t.split("x")) for t in args.trees.split(",")], peers=False,
        max_new_tokens=args.max_new_tokens, dtype=args.dtype, progress=False, extra_drafts=variants)
    res["command"] = "python scripts/hybrid_ab.py " + " ".join(argv if argv is not None else sys.argv[1:])
    res["environment"] = environment_info()  # CPU flags, library versions
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    for r in res["rows"]:
        if "tree" in r["method"] or r["family"] in ("ar", "ngram"):
            print(f"T={r['temperature']:g} {r['method']:40s} {r['speedup']:.3f}x  block efficiency "
                  f"{r['block_efficiency']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
