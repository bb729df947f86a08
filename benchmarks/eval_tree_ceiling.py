"""The block efficiency that ANY deterministic draft tree of N nodes could reach on the embedded
target, at the target's own sampling temperature: a ceiling for top-k draft trees (the goal
"block efficiency >= 2.5 with a tree at T = 1").

A deterministic draft tree (every node's children a function of the context: the top-k trees of
EAGLE-2 and of suffix decoding; :attr:`specot.drafting.DraftTree.deterministic`) verified by any
lossless verifier accepts a node exactly when the target's own sample passes through it, so its
expected number of accepted tokens is the sum over its nodes v of the path probability
P(v) = Π p(token | prefix) along the root-to-v path (the target distribution p after temperature).
Over all trees of N nodes the best is the N nodes of highest path probability — they form a tree,
since a node's path probability never exceeds its parent's — which is also the tree EAGLE-2's
expansion and re-ranking build when q = p (Li et al. 2024, EAGLE-2, Sec. 4). So, at every position,

    BE*(N) = 1 + (sum of the N largest path probabilities),

the most that a perfect draft (q = p) drafting top-k trees of N nodes can give; a real head gives
less. (Sampled drafts are not bounded by it: with q = p a sampled chain is accepted in full. Their
ceiling is the head's own acceptance rate α.)

The script samples the target's continuation of each prompt at temperature T and, at every
``--stride``-th position, finds the N-node optimum by best-first search: each round runs one target
pass over the tree found so far (:meth:`CausalLM.tree_logits`) and expands the nodes of the
current top N, until all of them are expanded (depth at most ``--max-depth``; EOS nodes are leaves).
For comparison it decodes each prompt once more with the shipped default (``specot.generate``,
``draft="auto"``: 2 × 3 GREEDY-law trees of suffix decoding and the EAGLE head at T > 0) and reports
that run's block efficiency over its decoding iterations (the prefill's pass and token left out; its roots follow its own acceptances, so it is a comparison of sets,
not of positions). It then times target passes over trees of N nodes against a one-token step,
which bounds the speedup of such trees on this machine: BE*(N) × t(1) / t(N), with a draft that
costs nothing.

    python benchmarks/eval_tree_ceiling.py --sets chat,code \
        --n-prompts 6 --temperature 1 --out tree_ceiling.json
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time

import torch
from tqdm import tqdm

from specot.api import generate, load_target
from specot.envinfo import environment_info, load_average
from specot.geometry import token_tree
from specot.models import CausalLM
from specot.sampling import SamplingConfig, standardize
from specot_lab.bench.script_io import add_run_options, target_continuation, write_record
from specot_lab.corpus import load_prompts


def best_tree_path_probs(target: CausalLM, context: list[int], sampling: SamplingConfig, n_max: int,
                         max_depth: int, stop: set[int]) -> list[float]:
    """The path probabilities of the ``n_max`` best nodes of a deterministic draft tree after
    ``context`` (at most ``max_depth`` deep), largest first (module docstring)."""
    p0 = standardize(target.logits_after(context)[:1], sampling)[0]  # [V]
    tok: list[int] = []
    par: list[int] = []  # parent node index, -1 for the root
    prob: list[float] = []
    depth: list[int] = []
    done: list[bool] = []

    def expand(node: int, p_row: torch.Tensor) -> None:
        vals, ids = torch.topk(p_row, min(n_max, p_row.numel()))
        base = prob[node] if node >= 0 else 1.0
        d = depth[node] + 1 if node >= 0 else 1
        for v, i in zip(vals.tolist(), ids.tolist()):
            if v > 0:
                tok.append(int(i)); par.append(node); prob.append(base * v); depth.append(d); done.append(False)

    expand(-1, p0)
    while True:
        top = sorted(range(len(tok)), key=lambda i: (-prob[i], i))[:n_max]
        for i in top:  # leaves: the depth limit, or EOS (the answer ends there)
            if depth[i] >= max_depth or tok[i] in stop:
                done[i] = True
        todo = [i for i in top if not done[i]]
        if not todo:
            return sorted((prob[i] for i in top), reverse=True)
        keep = set()
        for i in top + todo:  # the nodes run in this pass: the top N and their ancestors
            while i >= 0 and i not in keep:
                keep.add(i)
                i = par[i]
        run = sorted(keep)  # parents were created before their children
        row = {node: j for j, node in enumerate(run)}
        tree = token_tree([context[-1]] + [tok[i] for i in run], [-1] + [row[par[i]] + 1 if par[i] >= 0 else 0 for i in run])
        logits = target.tree_logits(context, tree)
        p = standardize(logits[1:], sampling)  # [len(run), V]
        for i in todo:
            expand(i, p[row[i]])
            done[i] = True


def pass_times(target: CausalLM, context: list[int], sizes: list[int], repeats: int) -> dict[int, float]:
    """Median seconds of one target pass over the last context token plus a tree of N nodes (a
    binary tree below the root's one child, breadth first; N = 0 is the one-token autoregressive
    step), the sizes interleaved."""
    times: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(repeats):
        for n in sizes:
            target.logits_after(context)  # the cache holds the context; the pass below runs its last token + n nodes
            t0 = time.perf_counter()
            if n == 0:
                target.logits_after(context)
            else:
                target.tree_logits(context, token_tree([context[-1]] + [100 + j for j in range(n)],
                                                       [-1] + [(j - 1) // 2 + 1 if j else 0 for j in range(n)]))
            times[n].append(time.perf_counter() - t0)
    return {n: statistics.median(v) for n, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--temperature", type=float, default=1.0, help="the target's sampling temperature T > 0")
    ap.add_argument("--nodes", default="2,4,6,10,16,24,32", help="tree sizes N to report (the largest is searched)")
    ap.add_argument("--max-depth", type=int, default=8)
    ap.add_argument("--stride", type=int, default=4, help="every stride-th position of a continuation")
    ap.add_argument("--time-repeats", type=int, default=30, help="passes per tree size in the timing (0: no timing)")
    add_run_options(ap, sets="chat,code", dtype="auto", threads=2)
    args = ap.parse_args(argv)
    sizes = sorted({int(x) for x in args.nodes.split(",")})
    if args.temperature <= 0 or sizes[0] < 1 or args.max_depth < 1 or args.stride < 1:
        ap.error("--temperature must be > 0, every --nodes entry, --max-depth and --stride >= 1")
    torch.set_num_threads(args.threads)
    load_start = load_average()
    tgt = load_target(None, dtype=args.dtype)
    sampling = SamplingConfig(temperature=args.temperature)
    stop = set(tgt.eos_token_ids)
    rows = []
    for set_name in [s for s in args.sets.split(",") if s]:
        sums: list[list[float]] = []  # per position: the cumulative path mass of the best 1..N nodes
        top1: list[float] = []
        shipped: list[tuple[int, int]] = []  # (new tokens, target calls) of the default plan
        prompts = load_prompts(set_name, args.n_prompts)
        for k, prompt in enumerate(tqdm(prompts, desc=f"{set_name[-28:]}", file=sys.stderr)):
            ids = tgt.encode_prompt(prompt)
            seq = target_continuation(tgt, ids, args.temperature, args.max_new_tokens, seed=k)
            for pos in range(len(ids), len(seq), args.stride):
                probs = best_tree_path_probs(tgt, seq[:pos], sampling, sizes[-1], args.max_depth, stop)
                sums.append(list(itertools.accumulate(probs)))
                top1.append(probs[0])
            st = generate(ids, target=tgt, temperature=args.temperature, max_new_tokens=args.max_new_tokens,
                          seed=k).result.stats
            shipped.append((st.new_tokens - 1, st.target_calls - 1))  # the prefill's token and pass left out
            tgt.reset()
        be = {n: 1.0 + statistics.fmean(c[min(n, len(c)) - 1] for c in sums) for n in sizes}
        be_auto = sum(n for n, _ in shipped) / max(1, sum(c for _, c in shipped))
        rows.append({"set": set_name, "positions": len(sums), "top1_mass": statistics.fmean(top1),
                     "be_ceiling": {str(n): round(v, 4) for n, v in be.items()}, "be_auto": round(be_auto, 4)})
        print(f"{set_name}: {len(sums)} positions; BE* " + ", ".join(f"N={n}: {v:.2f}" for n, v in be.items())
              + f"; auto's block efficiency {be_auto:.2f}", file=sys.stderr)
    timing = None
    if args.time_repeats > 0:
        ctx = tgt.encode_prompt(load_prompts(args.sets.split(",")[0], 1)[0]) + list(range(1000, 1064))
        t = pass_times(tgt, ctx, [0] + sizes, args.time_repeats)
        timing = {"pass_ms": {str(n): round(1000 * v, 2) for n, v in t.items()},
                  "pass_over_step": {str(n): round(v / t[0], 3) for n, v in t.items() if n}}
        mean_be = {n: statistics.fmean(r["be_ceiling"][str(n)] for r in rows) for n in sizes}
        timing["speedup_ceiling"] = {str(n): round(mean_be[n] * t[0] / t[n], 3) for n in sizes}
        print("pass / step: " + ", ".join(f"N={n}: {v}" for n, v in timing["pass_over_step"].items()), file=sys.stderr)
        print("speedup ceiling (mean BE*, free draft): " + ", ".join(f"N={n}: {v}x" for n, v in timing["speedup_ceiling"].items()),
              file=sys.stderr)
    write_record(args.out, "tree_ceiling", "eval_tree_ceiling.py", argv, temperature=args.temperature,
                 max_depth=args.max_depth, stride=args.stride, n_prompts=args.n_prompts,
                 max_new_tokens=args.max_new_tokens, target_dtype=str(tgt.dtype).replace("torch.", ""),
                 rows=rows, timing=timing, load_avg_start=load_start, load_avg_end=load_average(),
                 environment=environment_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
