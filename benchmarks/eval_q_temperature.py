"""First-position acceptance of an EAGLE head as a function of the draft's temperature, without
sampling noise (docs/distillation.md, "Head variants").

For each prompt the target samples a continuation at temperature T; one teacher-forced target
pass gives p at every continuation position and the fused features, and one head pass
(:meth:`Eagle3Head.forward_sequence`, exactly the first draft position of the engine) gives the
draft logits z. For every ratio r the script reports the exact expected first-position acceptance
of single-draft speculative sampling, α0(r) = mean over positions of Σ_v min(p(v), q_r(v)) with
q_r = softmax(z / (r·T)) on the draft vocabulary (0 elsewhere) — Leviathan et al. 2023, Sec. 3.
r = 1 is the head's own law; any r keeps verification lossless (q is whatever the draft samples from).
It also reports α0 of two children under the GREEDY law (the top token of q and one sampled from q
without it), verified by the optimal ``greedy`` verifier: p(top) + Σ_{v ≠ top} min(p(v), q_rest(v))
(:func:`specot.theory.optimal_acceptance`, law ``"greedy"``, n = 2, in closed form).
For every draft after the first it also reports how much of α0(r) comes from tokens outside the
first draft's vocabulary, Σ_{v ∉ V_first} min(p(v), q_r(v)): what a grown draft vocabulary adds
(docs/distillation.md, "Head variants": the 16 384-token vocabulary).

    python benchmarks/eval_q_temperature.py --sets general,mixed --ratios 1,0.8,0.6
"""

from __future__ import annotations

import argparse
import math
import sys

import torch
from tqdm import tqdm

from specot.api import load_drafter, load_target
from specot.envinfo import environment_info
from specot.sampling import SamplingConfig
from specot.theory import optimal_acceptance
from specot_lab.bench.script_io import add_run_options, target_continuation, write_record
from specot_lab.corpus import load_prompts
from specot_lab.distill.eagle import answer_positions


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafts", default="eagle", help="comma-separated EAGLE drafts (eagle or eagle:DIR)")
    ap.add_argument("--ratios", default="1,0.9,0.8,0.7,0.6,0.5,0.4")
    ap.add_argument("--temperature", type=float, default=1.0, help="the target's sampling temperature T > 0")
    add_run_options(ap, sets="code,mixed", dtype="bfloat16", threads=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tgt = load_target(None, dtype=args.dtype)
    ratios = [float(r) for r in args.ratios.split(",")]
    T = args.temperature
    if T <= 0 or any(not (math.isfinite(r) and r > 0) for r in ratios):
        ap.error(f"--temperature must be > 0 and every ratio a finite number > 0, got {T} and {ratios}")
    rows = []
    for set_name in [s for s in args.sets.split(",") if s]:
        prompts = load_prompts(set_name, args.n_prompts)
        seqs = []
        for i, p in enumerate(tqdm(prompts, desc=f"sampling {set_name[-24:]}", file=sys.stderr)):
            ids = tgt.encode_prompt(p)
            seqs.append((ids, target_continuation(tgt, ids, T, args.max_new_tokens, seed=i)))
        first_vocab = None  # [V] bool: the first draft's vocabulary
        for dname in [d for d in args.drafts.split(",") if d]:
            drafter = load_drafter(dname, tgt)
            head, tids = drafter.head, drafter.head.target_ids()  # tids: draft id -> target id
            acc = torch.zeros(len(ratios))
            acc2 = torch.zeros(len(ratios))
            acc_out = torch.zeros(len(ratios))  # the part of acc from tokens outside the first vocabulary
            if first_vocab is None:
                first_vocab = head.t2d.cpu().clone()
            agree = 0.0
            n = 0
            for ids, full in seqs:
                with torch.no_grad():
                    z, probs = answer_positions(tgt, drafter, len(ids), full)  # [N, V_d], [N, V]
                    logits_p = torch.log(probs.clamp_min(1e-30))
                    p = torch.softmax(logits_p / T, dim=-1)  # [N, V]
                    agree += float((p.argmax(-1) == tids[z.argmax(-1)]).sum())
                    for k, r in enumerate(ratios):
                        drafter.q_temperature_ratio = r  # the engine's own draft law at this ratio
                        q = drafter.draft_distribution(z, SamplingConfig(T))  # [N, V]
                        both = torch.minimum(p, q)  # [N, V]
                        acc[k] += both.sum()
                        acc_out[k] += both[:, ~first_vocab].sum()
                        acc2[k] += sum(a.alpha for a in optimal_acceptance(p, q, 2, "greedy"))
                    n += p.shape[0]
            row = {"prompt_set": set_name, "draft": dname, "temperature": T, "positions": n,
                   "argmax_agreement": agree / n,
                   "alpha_first_position": {str(r): float(a / n) for r, a in zip(ratios, acc)},
                   "alpha_first_position_greedy_2": {str(r): float(a / n) for r, a in zip(ratios, acc2)},
                   "alpha_first_position_outside_first_vocab": {str(r): float(a / n) for r, a in zip(ratios, acc_out)}}
            rows.append(row)
            print(f"{set_name[-28:]:28s} {dname[-20:]:20s} " + " ".join(
                f"r={r}:{a / n:.3f}/{b / n:.3f}/{c / n:.3f}" for r, a, b, c in zip(ratios, acc.tolist(), acc2.tolist(),
                                                                     acc_out.tolist()))
                + f" argmax={agree / n:.3f}",
                file=sys.stderr)
    write_record(args.out, "q_temperature", "eval_q_temperature.py", argv, dtype=args.dtype,
                 max_new_tokens=args.max_new_tokens, n_prompts=args.n_prompts, environment=environment_info(),
                 rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
