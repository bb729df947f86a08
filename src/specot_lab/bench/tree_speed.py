"""Speed of multi-draft tree decoding.

Three measurements (warm-up excluded, JSON output):

1. ``tree_cost`` — on the embedded SmolLM2-135M target: wall time of ONE target pass over a draft
   tree of 1, 8, 16, 32, 64 nodes (plus the one uncached correction token, as in decoding) on top
   of a cached prompt, relative to a plain 1-token step; in float32 and bfloat16.
2. ``overhead`` — on SmolLM2 with a second wrapper of the SAME model as the draft (the only draft
   available; it accepts nearly everything, so this is a cost measurement, not a speedup): the
   share of decoding wall time spent outside the two models' forward passes (drafting
   bookkeeping, sampling, verification walk, cache compaction), per construction.
3. ``grid`` — block efficiency and tokens/s over K ∈ {1, 2, 4, 8} × L ∈ {2, 4, 8} for k-Seq (iid),
   RRS-wor (wor) and greedy, on a tiny random target (vocabulary 64) and a draft made from it by
   perturbing its output head (no trained SmolLM2 draft exists yet; a random small draft against
   SmolLM2 would accept nothing and measure nothing).

    specot bench tree-speed [--quick] [--out tree.json]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from typing import Any

import torch
from tqdm import tqdm
from specot.geometry import TokenTree, token_tree
from specot.models.hf import CausalLM
from specot.drafting.tree import TreeSpec, parse_tree_spec
from specot.engine import GenerationConfig, autoregressive_generate, tree_generate
from specot.sampling import SamplingConfig
from transformers import LlamaConfig, LlamaForCausalLM
from specot.models.embedded import load_embedded_target
from specot.cli.command import MAX_THREADS, count
from specot.outputs import check_output, dumps, json_has, write_json
from .runinfo import run_info

__all__ = ["measure_tree_cost", "measure_overhead", "measure_grid", "add_arguments", "run"]

PROMPT = ("Explain what a Python generator is, how the yield statement works, and when a generator is a "
          "better choice than building a list. Give a short example.")


def _chain_tree(root: int, n: int, branches: int = 8) -> TokenTree:
    """A tree of ``n`` nodes after ``root``: ``branches`` chains from the root, filled round-robin
    (depth ≈ n / 8)."""
    parents: list[int] = [-1]
    last = [0] * branches
    for i in range(1, n + 1):
        b = (i - 1) % branches
        parents.append(last[b])
        last[b] = i
    tokens = [root] + [100 + (i * 7919) % 40000 for i in range(n)]
    return token_tree(tokens, parents)


def measure_tree_cost(target: Any, ctx: list[int], sizes: list[int], reps: int) -> list[dict[str, Any]]:
    """Median wall time of one target pass over trees of each size, and of a 1-token step."""

    assert isinstance(target, CausalLM)
    target.reset()
    target.logits_after(ctx[:-1])  # the prompt minus one token is cached, as after a decoding step

    def one_token() -> float:
        t0 = time.perf_counter()
        target.logits_after(ctx)
        dt = time.perf_counter() - t0
        target.rollback(len(ctx) - 1)
        return dt

    def tree(n: int) -> float:
        shape = _chain_tree(ctx[-1], n)
        t0 = time.perf_counter()
        target.tree_logits(ctx, shape)
        dt = time.perf_counter() - t0
        target.keep_tree_path([])
        return dt

    one_token(), tree(max(sizes))  # warm-up
    base = statistics.median(one_token() for _ in range(reps))
    rows = [{"nodes": 0, "tokens_in_pass": 1, "ms": 1e3 * base, "relative": 1.0}]
    for n in sizes:
        ms = statistics.median(tree(n) for _ in range(reps))
        rows.append({"nodes": n, "tokens_in_pass": n + 1, "ms": 1e3 * ms, "relative": ms / base})
    return rows


def measure_overhead(target: Any, ids: list[int], constructions: list[tuple[str, str]], max_new_tokens: int,
                     seed: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """Decode with a same-model draft; report the share of time outside the forward passes."""

    draft = CausalLM(target.model, tokenizer=target.tokenizer, name="same-model draft")
    rows = []
    warm = GenerationConfig(max_new_tokens=4, sampling=SamplingConfig(1.0), seed=seed)
    tree_generate(target, draft, ids, parse_tree_spec("iid", n=2, gamma=2), warm, verifier="kseq")
    for text, ver in tqdm(constructions, desc="overhead", disable=not progress, file=sys.stderr):
        spec = parse_tree_spec(text.split()[0], n=int(text.split("K=")[1].split()[0]),
                               gamma=int(text.split("L=")[1])) if "K=" in text else parse_tree_spec(text)
        cfg = GenerationConfig(max_new_tokens=max_new_tokens, sampling=SamplingConfig(1.0), seed=seed)
        st = tree_generate(target, draft, ids, spec, cfg, verifier=ver).stats
        rows.append({"construction": text, "verifier": ver, "new_tokens": st.new_tokens,
                     "iterations": st.iterations, "mean_tree_size": st.mean_tree_size,
                     "block_efficiency": st.block_efficiency, "total_s": st.total_time_s,
                     "target_s": st.target_time_s, "draft_s": st.draft_time_s,
                     "overhead_s": st.overhead_time_s, "overhead_share": st.overhead_share,
                     "tokens_per_s": st.tokens_per_s})
    return rows


def tiny_pair(vocab: int = 64, seed: int = 0, noise: float = 0.5) -> tuple[Any, Any]:
    """A tiny random Llama target (float32, 2 layers, hidden 64) and a draft = the target with its
    output head perturbed by ``noise`` × its standard deviation."""


    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                      bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    t = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        t.lm_head.weight.mul_(12.0)
    d = copy.deepcopy(t)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        w = d.lm_head.weight
        w.add_(noise * t.lm_head.weight.std() * torch.randn(w.shape, generator=g))
    return CausalLM(t, name="tiny-target"), CausalLM(d, name="tiny-draft")


def measure_grid(Ks: list[int], Ls: list[int], laws: list[tuple[str, str]], n_prompts: int, max_new_tokens: int,
                 seed: int = 0, progress: bool = True) -> list[dict[str, Any]]:
    """Block efficiency and tokens/s of each (law/verifier, K, L) on the tiny pair."""

    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models: extra threads only spin (20x slower on a loaded 2-core CPU)
    try:
        return _grid(Ks, Ls, laws, n_prompts, max_new_tokens, seed, progress)
    finally:
        torch.set_num_threads(n_threads)


def _grid(Ks: list[int], Ls: list[int], laws: list[tuple[str, str]], n_prompts: int, max_new_tokens: int,
          seed: int, progress: bool) -> list[dict[str, Any]]:

    target, draft = tiny_pair()
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(0, target.vocab_size, (8,), generator=g).tolist() for _ in range(n_prompts)]
    cfg0 = GenerationConfig(max_new_tokens=max_new_tokens, sampling=SamplingConfig(1.0), seed=seed)
    autoregressive_generate(target, prompts[0], cfg0)  # warm-up
    ar = [autoregressive_generate(target, p, cfg0).stats for p in prompts]
    ar_tps = sum(s.new_tokens for s in ar) / sum(s.total_time_s for s in ar)
    rows = []
    total = len(laws) * len(Ks) * len(Ls)
    bar = tqdm(total=total, desc="grid", disable=not progress, file=sys.stderr)
    for law, ver in laws:
        for K in Ks:
            for L in Ls:
                spec = TreeSpec.sequences(K, L, law)
                runs = []
                for i, p in enumerate(prompts):
                    cfg = GenerationConfig(max_new_tokens=max_new_tokens, sampling=SamplingConfig(1.0), seed=seed + i)
                    runs.append(tree_generate(target, draft, p, spec, cfg,
                                              verifier="speculative" if K == 1 else ver).stats)
                tok = sum(s.new_tokens for s in runs)
                calls = sum(s.target_calls for s in runs)
                secs = sum(s.total_time_s for s in runs)
                rows.append({"law": law, "verifier": "speculative" if K == 1 else ver, "K": K, "L": L,
                             "block_efficiency": tok / calls, "tokens_per_s": tok / secs,
                             "speedup_vs_autoregressive": (tok / secs) / ar_tps,
                             "mean_tree_size": statistics.mean(s.mean_tree_size for s in runs),
                             "overhead_share": sum(s.overhead_time_s for s in runs) / secs})
                bar.update()
    bar.close()
    return rows


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench tree-speed``."""
    ap.add_argument("--quick", action="store_true", help="fewer repetitions and tokens (a smoke run)")
    ap.add_argument("--out", default=None, help="write the JSON result here (default: stdout)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file this benchmark did not write")
    ap.add_argument("--threads", type=count(1, MAX_THREADS), default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--skip-bf16", action="store_true", help="skip the bfloat16 tree-cost table")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--sections", default="cost,overhead,grid",
                    help="comma list of cost, overhead, grid (default: all)")


def run(args: argparse.Namespace) -> int:
    """``specot bench tree-speed``: the selected sections; JSON to ``--out`` (after each section) or stdout."""
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="tree-speed"))
    if args.threads:
        torch.set_num_threads(args.threads)

    progress = not args.no_progress
    reps = 3 if args.quick else 7
    sizes = [1, 8, 16, 32, 64]
    sections = {s.strip() for s in args.sections.split(",")}

    out: dict[str, Any] = {"benchmark": "tree-speed", "threads": torch.get_num_threads(), "quick": args.quick, "environment": run_info()}
    t0 = time.perf_counter()

    def save() -> None:  # after every section, so a long run keeps what it measured
        out["wall_s"] = time.perf_counter() - t0
        if args.out:
            write_json(args.out, out)

    if sections & {"cost", "overhead"}:
        tgt = load_embedded_target(dtype="float32")
        ids = tgt.encode_prompt(PROMPT)
        out["prompt_tokens"] = len(ids)
        if "cost" in sections:
            out["tree_cost"] = {"float32": measure_tree_cost(tgt, ids, sizes, reps)}
            save()
        if "overhead" in sections:
            constructions = [("iid K=4 L=4", "kseq"), ("wor K=4 L=4", "rrs_wor"), ("greedy K=4 L=4", "greedy"),
                             ("iid K=8 L=8", "kseq"), ("eagle", "rrs")]
            if args.quick:
                constructions = constructions[:2]
            out["overhead"] = measure_overhead(tgt, ids, constructions, 16 if args.quick else 32, progress=progress)
            save()
        del tgt
        if "cost" in sections and not args.skip_bf16:
            tgt16 = load_embedded_target(dtype="bfloat16")
            out["tree_cost"]["bfloat16"] = measure_tree_cost(tgt16, ids, sizes, max(2, reps // 2))
            del tgt16
            save()
    if "grid" in sections:
        laws = [("iid", "kseq"), ("wor", "rrs_wor"), ("greedy", "greedy")]
        out["grid"] = measure_grid([1, 2, 4, 8], [2, 4, 8], laws, n_prompts=2 if args.quick else 4,
                                   max_new_tokens=32 if args.quick else 64, progress=progress)
    save()
    if not args.out:
        print(dumps(out, indent=2))
    return 0
