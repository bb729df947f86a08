"""How often the target's next token lies outside an EAGLE head's reduced draft vocabulary
(docs/distillation.md, "Head variants").

A draft over a reduced vocabulary gives q = 0 to every other token (FR-Spec, Zhao et al. 2025;
EAGLE-3's ``d2t`` map): verification stays lossless, but a target token outside the vocabulary is
never drafted, so at T = 0 each such token ends the accepted run, and at T = 1 the target's mass
outside the vocabulary is lost from α. For each prompt set the target decodes greedily (T = 0) and
samples (T = 1, seed = prompt index); the script reports, per draft, the fraction of those tokens
outside its draft vocabulary, and at T = 1 the target's mean probability mass outside it. With
``--grow``, it also reports vocabularies grown from the first draft's by the most frequent tokens
of the target's sampled answers in ``--data`` (:func:`specot_lab.distill.eagle.frequent_vocab`
with ``keep``), the rule ``benchmarks/training/train_eagle.py --init-head ... --draft-vocab N`` applies.
With ``--cost``, it first times one head pass over 2 tokens (a 2-child tree level) at each of those
vocabulary sizes (random heads of the shipped shape; the pass is memory-bound, so the weights
decide) against a one-token target step, both after 300 tokens of context.

    python benchmarks/eval_draft_vocab.py --drafts eagle --grow 12288,16384,24576,32768 --data runs/eagle_samples8
    python benchmarks/eval_draft_vocab.py --cost 8192,16384,32768 --sets ""
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import torch
from tqdm import tqdm

from specot.api import load_drafter, load_target
from specot.drafting import EagleDrafter
from specot.envinfo import environment_info, load_average
from specot_lab.bench.head_speed import median_ms
from specot_lab.bench.script_io import add_run_options, target_continuation, write_record
from specot_lab.corpus import load_prompts
from specot_lab.distill.data import iter_shards
from specot_lab.distill.eagle import frequent_vocab, target_features


@torch.no_grad()
def pass_costs(tgt, sizes: list[int], context: int = 300, num_layers: Sequence[int] = (1,),
               int8: Sequence[bool] = (False,)) -> list[dict]:
    """Milliseconds of one target step and of one head pass over 2 tokens per draft vocabulary
    size, head depth (decoder layers) and weight format (the target's dtype, or int8)."""
    ids = torch.randint(0, tgt.vocab_size, (1, context))
    cache = tgt.model(ids, use_cache=True).past_key_values

    def target_step():
        tgt.model(torch.randint(0, tgt.vocab_size, (1, 1)), past_key_values=cache, use_cache=True)
        cache.crop(-1)  # back to the context

    target_ms = median_ms(target_step, 40)
    rows = []
    for size in sizes:
        for n_layers in num_layers:
            for q8 in int8:
                head = EagleDrafter.random(tgt, draft_vocab=size, num_layers=n_layers, int8=q8).head
                att = head.midlayer.self_attn
                dt = head.dtype
                pk = torch.randn(n_layers, att.num_kv, context, att.head_dim, dtype=dt)
                args = (torch.tensor([5, 6]), torch.randn(2, head.hidden_size, dtype=dt),
                        torch.tensor([context, context]), pk, pk.clone(), torch.ones(2, context + 2, dtype=torch.bool))
                head_ms = median_ms(lambda: head.step(*args, fused=False), 300)
                rows.append({"draft_vocab_size": size, "num_layers": n_layers, "int8": q8, "head_pass_ms": head_ms,
                             "target_step_ms": target_ms, "ratio": head_ms / target_ms})
                print(f"draft vocabulary {size}, {n_layers} layer(s), {'int8' if q8 else dt}: head pass "
                      f"{head_ms:.2f} ms, target step {target_ms:.2f} ms, ratio {head_ms / target_ms:.3f}",
                      file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafts", default="eagle", help="comma-separated EAGLE drafts (eagle or eagle:DIR)")
    ap.add_argument("--grow", default="", help="comma-separated sizes to grow the first draft's vocabulary to")
    ap.add_argument("--data", action="append", default=[], help="sampled-answer shards counted for --grow (repeatable)")
    ap.add_argument("--cost", default="", help="comma-separated draft vocabulary sizes to time a head pass at")
    ap.add_argument("--cost-layers", default="1", help="comma-separated head depths (decoder layers) to time (default 1)")
    ap.add_argument("--cost-int8", action="store_true", help="also time int8-weight heads (EagleDrafter(int8=True))")
    add_run_options(ap, sets="code,mixed", dtype="bfloat16", threads=2)
    args = ap.parse_args(argv)

    def ints(text: str, flag: str, what: str) -> list[int]:
        try:
            return [int(s) for s in text.split(",") if s]
        except ValueError:
            ap.error(f"{flag} takes comma-separated {what}, got {text!r}")

    grow = ints(args.grow, "--grow", "vocabulary sizes")
    cost_sizes = ints(args.cost, "--cost", "vocabulary sizes")
    cost_layers = ints(args.cost_layers, "--cost-layers", "integers >= 1")
    if not cost_layers or min(cost_layers) < 1:
        ap.error(f"--cost-layers takes comma-separated integers >= 1, got {args.cost_layers!r}")
    names = [d for d in args.drafts.split(",") if d]
    if grow and not args.data:
        ap.error("--grow needs --data: the shards whose answer tokens rank the added tokens")
    if not names:
        ap.error("--drafts is empty: name at least one EAGLE draft (eagle or eagle:DIR)")
    torch.set_num_threads(args.threads)
    load_start = load_average()
    tgt = load_target(None, dtype=args.dtype)
    V = tgt.vocab_size
    if any(not 0 < s <= V for s in grow + cost_sizes):
        ap.error(f"--grow / --cost: every size must lie in [1, {V}] (the target's vocabulary), got {grow + cost_sizes}")
    costs = pass_costs(tgt, cost_sizes, num_layers=cost_layers, int8=(False, True) if args.cost_int8 else (False,))
    masks: dict[str, torch.Tensor] = {}  # [V] bool per vocabulary: in it or not
    for name in names:
        drafter = load_drafter(name, tgt)
        if not isinstance(drafter, EagleDrafter):
            ap.error(f"--drafts {name!r} is not an EAGLE draft; use eagle or eagle:DIR")
        masks[name] = drafter.head.t2d.cpu().clone()
        layers = drafter.hidden_layers
        if name == names[0]:
            first_ids = drafter.head.target_ids().tolist()
    if grow:
        answers = [s["ids"][int(s["n_prompt"]):].tolist() for s in iter_shards(*args.data)]
        for size in grow:
            m = torch.zeros(V, dtype=torch.bool)
            m[frequent_vocab(answers, size, V, keep=first_ids)] = True
            masks[f"{names[0]} grown to {size}"] = m
    rows = []
    for set_name in [s for s in args.sets.split(",") if s]:
        prompts = load_prompts(set_name, args.n_prompts)
        outside = {(name, T): 0 for name in masks for T in (0, 1)}
        mass = dict.fromkeys(masks, 0.0)
        n = {0: 0, 1: 0}
        for i, p in enumerate(tqdm(prompts, desc=f"decoding {set_name[-24:]}", file=sys.stderr)):
            ids = tgt.encode_prompt(p)
            for T in (0, 1):
                full = target_continuation(tgt, ids, float(T), args.max_new_tokens, seed=i)
                new = torch.tensor(full[len(ids):])  # [N]
                n[T] += new.numel()
                for name, m in masks.items():
                    outside[name, T] += int((~m[new]).sum())
                if T:
                    probs = target_features(tgt.model, full, layers)["probs"][len(ids) - 1:-1]  # [N, V]
                    for name, m in masks.items():
                        mass[name] += float(probs[:, ~m].sum())
        for name in masks:
            row = {"prompt_set": set_name, "vocabulary": name, "size": int(masks[name].sum()),
                   "outside_T0": outside[name, 0] / n[0], "outside_T1": outside[name, 1] / n[1],
                   "mass_outside_T1": mass[name] / n[1], "tokens": n}
            rows.append(row)
            print(f"{set_name[-28:]:28s} {name[-28:]:28s} outside T=0 {row['outside_T0']:.3f}  "
                  f"T=1 {row['outside_T1']:.3f}  mass T=1 {row['mass_outside_T1']:.3f}", file=sys.stderr)
    write_record(args.out, "draft_vocab", "eval_draft_vocab.py", argv, dtype=args.dtype,
                 max_new_tokens=args.max_new_tokens, n_prompts=args.n_prompts, data=args.data,
                 load_avg_start=load_start, load_avg_end=load_average(), environment=environment_info(), costs=costs,
                 rows=rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
