"""Exact first-position acceptance at T = 1 of the EAGLE head with and without the cache model
(``EagleDrafter(cache_weights=...)``, docs/distillation.md "Session 25"), per length of the
context's repeat.

As in ``eval_q_law.py``, the target samples a continuation of each prompt at T = 1; one
teacher-forced target pass gives p (over the whole vocabulary) and the fused features, one head
pass the draft logits z at every position. At each position the head's law q_head (the drafter's
own :meth:`~specot.drafting.EagleDrafter.draft_distribution`, at T = 1) is set against
``(1 − λ_m)·q_head + λ_m·q_cache`` (:func:`specot.drafting.eagle.cache_mixture`, q_cache from
:meth:`specot.drafting.SuffixIndex.followers` of the committed tokens, exactly as the drafter builds
it at a tree's root), for every weight λ on the grid and every bucket of match length m. Scores:
Σ min(p, q) for one draft and p(top) + Σ_{v ≠ top} min(p, q_rest) for two GREEDY-law children.

    python scripts/eval_cache_model.py --sets docs/bench/prompts_chat.jsonl,mixed --n-prompts 8 --out cache.json
"""

from __future__ import annotations

import argparse
import sys

import torch
from tqdm import tqdm

from specot.api import load_drafter, load_target
from specot.drafting import SuffixIndex
from specot.drafting.eagle import CACHE_MAX_N, cache_mixture
from specot.envinfo import environment_info
from specot.sampling import SamplingConfig
from specot_lab.bench.acceptance import one_and_two_greedy
from specot_lab.bench.script_io import add_run_options, target_continuation, write_record
from specot_lab.corpus import load_prompts
from specot_lab.distill.eagle import answer_positions

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7)
#: buckets of the repeat's length m: (name, lowest m, highest m)
BUCKETS = (("none", 0, 0), ("1", 1, 1), ("2", 2, 2), ("3-4", 3, 4), ("5+", 5, CACHE_MAX_N))


def bucket_of(m: int) -> str:
    """The name of the bucket of match length ``m``."""
    return next(name for name, lo, hi in BUCKETS if lo <= m <= hi)


def score_positions(p: torch.Tensor, q_head: torch.Tensor, matches: list[tuple[int, list[int]]],
                    out: dict | None = None) -> dict:
    """Summed acceptances per bucket and weight: ``{bucket: {λ: [one draft, two GREEDY, positions]}}``
    for rows ``p, q_head [N, V]`` and each row's ``(m, followers)``, added into ``out`` when given."""
    out = {} if out is None else out
    for lam in WEIGHTS:
        q = torch.stack([cache_mixture(q_head[j], f, lam) if m and lam > 0 else q_head[j]
                         for j, (m, f) in enumerate(matches)])
        one, two = one_and_two_greedy(p, q)
        for j, (m, _) in enumerate(matches):
            acc = out.setdefault(bucket_of(m), {}).setdefault(lam, [0.0, 0.0, 0])
            acc[0] += float(one[j])
            acc[1] += float(two[j])
            acc[2] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="eagle", help="an EAGLE draft: eagle or eagle:DIR")
    add_run_options(ap, sets="docs/bench/prompts_chat.jsonl,docs/bench/prompts_code.jsonl", dtype="bfloat16")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tgt = load_target(None, dtype=args.dtype)
    drafter = load_drafter(args.draft, tgt)
    sets = {}
    for set_name in [s for s in args.sets.split(",") if s]:
        total: dict[str, dict[float, list[float]]] = {}
        for i, prompt in enumerate(tqdm(load_prompts(set_name, args.n_prompts), desc=set_name[-24:], file=sys.stderr)):
            ids = tgt.encode_prompt(prompt)
            full = target_continuation(tgt, ids, 1.0, args.max_new_tokens, seed=i)
            z, p = answer_positions(tgt, drafter, len(ids), full)  # [N, V_d], [N, V]
            q_head = drafter.draft_distribution(z, SamplingConfig(1.0)).float()  # [N, V]
            index, matches = SuffixIndex(CACHE_MAX_N, full[: len(ids)]), []
            for j in range(p.shape[0]):  # row j: the committed tokens are full[: len(ids) + j]
                matches.append(index.followers(index.tokens[-CACHE_MAX_N:]))
                index.extend(full[len(ids) + j: len(ids) + j + 1])
            score_positions(p, q_head, matches, total)
        sets[set_name] = {b: {str(lam): {"one_draft": a[0] / a[2], "two_greedy": a[1] / a[2], "positions": a[2]}
                              for lam, a in per.items()} for b, per in total.items()}
        for b, per in sets[set_name].items():
            print(f"{set_name[-24:]:24s} m {b:4s} n={per['0.0']['positions']:4d} " + " ".join(
                f"{lam}:{v['one_draft']:.3f}/{v['two_greedy']:.3f}" for lam, v in per.items()), file=sys.stderr)
    write_record(args.out, "cache_model", "eval_cache_model.py", argv, dtype=args.dtype, n_prompts=args.n_prompts,
                 max_new_tokens=args.max_new_tokens, draft=args.draft, environment=environment_info(),
                 weights=list(WEIGHTS), buckets=[list(b) for b in BUCKETS], sets=sets)
    return 0


if __name__ == "__main__":
    sys.exit(main())
