"""Exact first-position acceptance of other draft laws for the SAME EAGLE head: temperature ratio r
with the tail of q cut by top-p or min-p, and r chosen per bin of the head's confidence
(docs/distillation.md, "Head variants").

Any q keeps verification lossless (the drafts are drawn from exactly the q the verifier gets), so a
better law for the same head would raise acceptance at no training cost. As in
``eval_q_temperature.py``, the target samples a continuation of each prompt at T = 1; one
teacher-forced target pass gives p and the fused features, and one head pass gives the draft
logits z at every position. Each law is then scored exactly, per position: Σ min(p, q) for one draft
(Leviathan et al. 2023, Sec. 3) and p(top) + Σ_{v ≠ top} min(p(v), q_rest(v)) for two GREEDY-law
children (Hu et al. 2025, Theorem 7), q on the draft vocabulary.

The confidence-binned ratio is fitted on the even-numbered sets and scored on the odd-numbered
ones, against the single shipped ratio on the same positions.

    python benchmarks/eval_q_law.py --sets chat,mixed --n-prompts 8 --out law.json
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch import Tensor
from tqdm import tqdm

from specot.api import load_drafter, load_target
from specot.envinfo import environment_info
from specot.sampling import SamplingConfig, standardize
from specot_lab.bench.acceptance import one_and_two_greedy as acceptances
from specot_lab.bench.script_io import add_run_options, target_continuation, write_record
from specot_lab.corpus import load_prompts
from specot_lab.distill.eagle import answer_positions

RATIOS = (0.6, 0.7, 0.75, 0.8, 0.9, 1.0)
TOP_PS = (1.0, 0.98, 0.95, 0.9, 0.8)
MIN_PS = (0.0, 0.02, 0.05)
CONFIDENCE_EDGES = (0.2, 0.4, 0.6, 0.8)  # bins of the head's top probability at r = 1


def truncated_law(z: Tensor, r: float, top_p: float, min_p: float) -> Tensor:
    """q ``[N, V_d]``: softmax(z / r) with the tail beyond cumulative mass ``top_p`` cut
    (:func:`specot.sampling.standardize`, the transform the engine applies), then without the
    tokens below ``min_p`` times the top probability, renormalised."""
    q = standardize(z, SamplingConfig(temperature=r, top_p=top_p))
    if min_p > 0:
        q = torch.where(q >= min_p * q.amax(-1, keepdim=True), q, torch.zeros_like(q))
        q = q / q.sum(-1, keepdim=True)
    return q


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draft", default="eagle", help="an EAGLE draft: eagle or eagle:DIR")
    ap.add_argument("--shipped-ratio", type=float, default=0.75, help="the ratio the binned one is compared with")
    add_run_options(ap, sets="chat,code", dtype="bfloat16")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tgt = load_target(None, dtype=args.dtype)
    drafter = load_drafter(args.draft, tgt)
    tids = drafter.head.target_ids()
    data: dict[str, tuple[Tensor, Tensor]] = {}  # set -> (z [N, V_d], p on the draft vocabulary [N, V_d])
    for set_name in [s for s in args.sets.split(",") if s]:
        zs, ps = [], []
        for i, prompt in enumerate(tqdm(load_prompts(set_name, args.n_prompts), desc=set_name[-24:], file=sys.stderr)):
            ids = tgt.encode_prompt(prompt)
            full = target_continuation(tgt, ids, 1.0, args.max_new_tokens, seed=i)
            z, p = answer_positions(tgt, drafter, len(ids), full)
            zs.append(z)
            ps.append(p[:, tids])
        data[set_name] = (torch.cat(zs), torch.cat(ps))
    laws = [(r, tp, mp) for r in RATIOS for tp in TOP_PS for mp in MIN_PS]
    rows = []
    for r, tp, mp in tqdm(laws, desc="laws", file=sys.stderr):
        per_set = {}
        for name, (z, p) in data.items():
            one, two = acceptances(p, truncated_law(z, r, tp, mp))
            per_set[name] = {"one_draft": float(one.mean()), "two_greedy": float(two.mean()), "positions": len(one)}
        rows.append({"ratio": r, "top_p": tp, "min_p": mp, "sets": per_set,
                     "one_draft_mean": sum(s["one_draft"] for s in per_set.values()) / len(per_set),
                     "two_greedy_mean": sum(s["two_greedy"] for s in per_set.values()) / len(per_set)})
    binned = confidence_binned(data, args.shipped_ratio)
    for row in sorted(rows, key=lambda x: -x["one_draft_mean"])[:8]:
        print(f"r={row['ratio']} top_p={row['top_p']} min_p={row['min_p']}: one draft {row['one_draft_mean']:.4f}, "
              f"two GREEDY children {row['two_greedy_mean']:.4f}", file=sys.stderr)
    print(f"ratio by confidence bin {binned['ratios']}: {binned['binned']:.4f} against r={args.shipped_ratio} "
          f"{binned['single']:.4f} on the held-out sets", file=sys.stderr)
    write_record(args.out, "q_law", "eval_q_law.py", argv, dtype=args.dtype, n_prompts=args.n_prompts,
                 max_new_tokens=args.max_new_tokens, draft=args.draft, environment=environment_info(), rows=rows,
                 confidence_binned=binned)
    return 0


def confidence_binned(data: dict[str, tuple[Tensor, Tensor]], shipped: float) -> dict:
    """The best ratio per bin of the head's top probability, fitted on the even-numbered sets, and
    the one-draft acceptance it and the single ``shipped`` ratio give on the odd-numbered sets."""
    names = list(data)
    edges = torch.tensor(CONFIDENCE_EDGES)
    ratios = sorted(set(RATIOS) | {shipped})

    def table(sets: list[str]) -> Tensor:  # [bins, ratios]: summed acceptance
        tab = torch.zeros(len(CONFIDENCE_EDGES) + 1, len(ratios))
        for s in sets:
            z, p = data[s]
            b = torch.bucketize(torch.softmax(z, -1).amax(-1), edges)
            for j, r in enumerate(ratios):
                tab[:, j].index_add_(0, b, acceptances(p, truncated_law(z, r, 1.0, 0.0))[0])
        return tab

    fit, held = table(names[0::2]), table(names[1::2])
    best = fit.argmax(-1)
    n = sum(data[s][0].shape[0] for s in names[1::2])
    return {"fit_sets": names[0::2], "held_out_sets": names[1::2], "edges": list(CONFIDENCE_EDGES),
            "ratios": [ratios[i] for i in best.tolist()],
            "binned": float(held.gather(1, best[:, None]).sum() / n),
            "single": float(held[:, ratios.index(shipped)].sum() / n)}


if __name__ == "__main__":
    sys.exit(main())
