"""Block efficiency of multi-path verification on real draft paths (``specot bench paths``).

Greedy multi-path block verification (``gbv``, Thomas & Pal, arXiv 2602.16961) against block
verification (``block``, Sun et al., ICLR 2025, Algorithm 2) and token-level speculative sampling
(Leviathan et al. 2023) **on the same draft paths**, with exact expectations — no verifier draws:

1. For each prompt and temperature T the target samples a continuation (seeded, plain decoding);
   ``--positions`` evenly spaced positions of it are the contexts.
2. At each context the draft model samples ``max(--paths)`` i.i.d. paths of ``max(--lengths)``
   tokens from its standardized distribution q at T; the target scores every path (p on each
   path's prefixes). A cell (K, L) uses the first K paths cut to their first L tokens — still K
   i.i.d. paths of length L, and every cell sees the same draws (the comparison is paired).
3. Per context: ``E[τ | paths]``, the expected number of accepted draft tokens given the draws,
   exactly: :func:`~specot.verifiers.gbv.gbv_expected_accepted` (K paths; its prefix tree is
   traversal verification's tree, where both rules are one algorithm, docs/theory.md),
   :func:`~specot.verifiers.block.block_expected_accepted` on the first path, and the token-level
   rule (:func:`~specot.verifiers.block.token_level_output_law`) on the first path. The block
   efficiency is ``1 + E[τ]``; reported as the mean over contexts with a 95 % interval (normal
   approximation; contexts of one continuation are not independent, so it is optimistic), and
   each rule's ratio to ``block`` as the ratio of the means with a paired interval (delta method).

Timing-free: what it measures does not depend on the machine. Prints a table and writes JSON
(``--out``)::

    {"benchmark": "paths", "command", "draft", "target", "prompt_sets", "n_prompts",
     "temperatures", "lengths", "paths", "positions_per_prompt", "max_new_tokens", "seed",
     "rows": [{"temperature", "L", "K", "verifier", "contexts", "block_efficiency",
               "block_efficiency_ci95", "vs_block", "vs_block_ci95"}],
     "elapsed_s", "environment"}

    specot bench paths --draft distilled --prompts code,chat --temperatures 0.6,1 --out paths.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Sequence

from specot.cli.command import seed_type
from specot.outputs import check_output, json_has, write_json

from ..lazy import LazyNames
from .lists import int_list, number_list

__all__ = ["draw_paths", "context_values", "run_paths_bench", "add_arguments", "run"]

#: The measuring code's names (torch, numpy, the core), bound when a measuring function runs:
#: ``specot bench paths --help`` and its usage errors import no torch.
_NAMES = LazyNames(__name__, {
    "numpy": "numpy", "torch": "torch", "tqdm": "tqdm.std", "load_target": "specot.api",
    "GenerationConfig": "specot.engine", "autoregressive_generate": "specot.engine",
    "SamplingConfig": "specot.sampling", "standardize": "specot.sampling",
    "block_expected_accepted": "specot.verifiers.block", "token_level_output_law": "specot.verifiers.block",
    "gbv_expected_accepted": "specot.verifiers.gbv", "load_prompts": "specot_lab.corpus",
    "BenchDraft": "specot_lab.bench.acceptance", "load_bench_draft": "specot_lab.bench.acceptance",
    "mean_ci": "specot_lab.bench.acceptance", "run_info": "specot_lab.bench.runinfo",
})
__getattr__ = _NAMES.getattr


def draw_paths(target: Any, draft: Any, context: Sequence[int], n: int, gamma: int, sc: SamplingConfig,
               generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` i.i.d. draft paths of ``gamma`` (γ) tokens after ``context`` and both models' rows along them.

    Returns:
        ``(p [n, γ + 1, V], q [n, γ + 1, V], paths [n, γ])``: float64 standardized distributions
        (row i after the path's first i tokens) and the int64 draws; each token is drawn from q at
        its prefix with ``generator``.
    """
    _NAMES.bind()
    ctx = list(context)
    p_rows, q_rows, paths = [], [], []
    for _ in range(n):
        path: list[int] = []
        qk = []
        for i in range(gamma + 1):
            q_i = standardize(draft.logits_after(ctx + path)[-1].double(), sc)  # [V]
            qk.append(q_i)
            if i < gamma:
                path.append(int(torch.multinomial(q_i, 1, generator=generator)))
        p_rows.append(standardize(target.logits_after(ctx, path).double(), sc))  # [γ + 1, V]
        q_rows.append(torch.stack(qk))
        paths.append(path)
    return torch.stack(p_rows), torch.stack(q_rows), torch.tensor(paths, dtype=torch.int64)


def _token_level_accepted(p: torch.Tensor, q: torch.Tensor, path: torch.Tensor) -> float:
    law = token_level_output_law(p, q, path).sum(-1)  # [L + 1]: P(τ = i)
    return float((law * torch.arange(law.shape[0], dtype=torch.float64)).sum())


def context_values(p: torch.Tensor, q: torch.Tensor, paths: torch.Tensor, lengths: Sequence[int],
                   ks: Sequence[int]) -> dict[tuple[int, int, str], float]:
    """``E[τ | paths]`` per ``(L, K, verifier)`` for one context (``speculative`` and ``block`` at
    K = 1 on the first path, ``gbv`` at every K in ``ks``). Shapes as :func:`draw_paths`."""
    _NAMES.bind()
    out: dict[tuple[int, int, str], float] = {}
    for L in lengths:
        pl, ql, dl = p[:, :L + 1], q[:, :L + 1], paths[:, :L]
        out[(L, 1, "speculative")] = _token_level_accepted(pl[0], ql[0], dl[0])
        out[(L, 1, "block")] = float(block_expected_accepted(pl[0], ql[0], dl[0]))
        for K in ks:
            out[(L, K, "gbv")] = float(gbv_expected_accepted(pl[:K], ql[:K], dl[:K]))
    return out


def _ratio_ci(x: numpy.ndarray, y: numpy.ndarray) -> tuple[float, float, float]:
    """``mean(x) / mean(y)`` with a paired 95 % interval (delta method)."""
    mx, my = float(x.mean()), float(y.mean())
    r = mx / my
    if x.size < 2:
        return r, math.nan, math.nan
    d = (x - r * y) / my
    half = 1.96 * float(d.std(ddof=1)) / math.sqrt(x.size)
    return r, r - half, r + half


def _rows(values: list[dict[tuple[int, int, str], float]], temp: float) -> list[dict[str, Any]]:
    rows = []
    for key in values[0]:
        L, K, name = key
        eff = 1.0 + numpy.array([v[key] for v in values])  # block efficiency per context
        ref = 1.0 + numpy.array([v[(L, 1, "block")] for v in values])
        m, m_lo, m_hi = mean_ci(eff)
        r, lo, hi = _ratio_ci(eff, ref)
        rows.append({"temperature": temp, "L": L, "K": K, "verifier": name, "contexts": int(eff.size),
                     "block_efficiency": round(m, 4), "block_efficiency_ci95": [round(m_lo, 4), round(m_hi, 4)],
                     "vs_block": round(r, 4), "vs_block_ci95": [round(lo, 4), round(hi, 4)]})
    return rows


def run_paths_bench(*, target: Any = None, draft: str | BenchDraft = "distilled", prompts: list[Any], temperatures: Sequence[float] = (0.6, 1.0),
                    lengths: Sequence[int] = (4, 8), ks: Sequence[int] = (1, 2, 4, 8), positions: int = 8,
                    max_new_tokens: int = 48, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Run the benchmark (module docstring); returns the JSON-ready dict. ``target``: a
    :class:`~specot.models.hf.CausalLM` or a name for :func:`specot.load_target` (None: the embedded
    target); ``draft``: a name for :func:`~specot_lab.bench.acceptance.load_bench_draft` or a ready
    :class:`~specot_lab.bench.acceptance.BenchDraft`; ``prompts``: strings or token-id lists.

    Raises:
        ValueError: an unavailable draft, a temperature ≤ 0 (i.i.d. paths are then one path), or
            empty ``lengths`` / ``ks``.
    """
    _NAMES.bind()
    if not lengths or not ks or min(lengths) < 1 or min(ks) < 1:
        raise ValueError("--lengths and --paths need at least one value >= 1 each")
    if any(t <= 0 for t in temperatures):
        raise ValueError("every temperature must be > 0: at T = 0 the i.i.d. paths are one path")
    t0 = time.perf_counter()
    tgt = load_target(target)
    bd = draft if isinstance(draft, BenchDraft) else load_bench_draft(draft, tgt)
    if not bd.available or bd.kind != "model":
        raise ValueError(f"draft {bd.name!r} cannot draw paths here: {bd.reason or 'it has no draft distribution q'}; "
                         "name a draft model (distilled, early-exit:K or a model directory)")
    encoded = [tgt.encode_prompt(p) if isinstance(p, str) else list(p) for p in prompts]
    Lmax, Kmax = max(lengths), max(ks)
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=len(temperatures) * len(encoded) * positions, desc="bench paths", disable=not progress,
               file=sys.stderr)
    for temp in temperatures:
        sc = SamplingConfig(temperature=float(temp))
        values: list[dict[tuple[int, int, str], float]] = []
        for i, ids in enumerate(encoded):
            cell_seed = seed + 1000 * i + int(round(temp * 100))
            cfg = GenerationConfig(max_new_tokens=max_new_tokens, seed=cell_seed, sampling=sc)
            cont = autoregressive_generate(tgt, ids, cfg).tokens
            gen = torch.Generator().manual_seed(10_007 * seed + cell_seed)
            for j in numpy.linspace(0, max(len(cont) - 1, 0), positions).round().astype(int).tolist():
                p, q, paths = draw_paths(tgt, bd.obj, list(ids) + list(cont[:j]), Kmax, Lmax, sc, gen)
                values.append(context_values(p, q, paths, lengths, ks))
                bar.update()
        rows += _rows(values, float(temp))
    bar.close()
    return {"benchmark": "paths", "draft": bd.name, "target": tgt.name, "temperatures": [float(t) for t in temperatures],
            "lengths": list(lengths), "paths": list(ks), "positions_per_prompt": positions,
            "max_new_tokens": max_new_tokens, "seed": seed, "rows": rows, "elapsed_s": round(time.perf_counter() - t0, 1)}


def _table(res: dict[str, Any]) -> str:
    lines = ["| T | L | verifier | K | block efficiency [95%] | × block [95%] |", "|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lo, hi = r["block_efficiency_ci95"]
        rlo, rhi = r["vs_block_ci95"]
        lines.append(f"| {r['temperature']:g} | {r['L']} | {r['verifier']} | {r['K']} | {r['block_efficiency']:.3f} "
                     f"[{lo:.3f}, {hi:.3f}] | {r['vs_block']:.3f} [{rlo:.3f}, {rhi:.3f}] |")
    return "\n".join(lines)


def _positive(value: int, flag: str) -> int:
    if value < 1:
        raise ValueError(f"{flag} must be an integer >= 1, got {value}")
    return value


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench paths``."""
    ap.add_argument("--draft", default="distilled", help="draft model: distilled (default), early-exit:K or a directory")
    ap.add_argument("--prompts", default="code,chat",
                    help="comma list of prompt sets (named sets or JSONL files with a 'prompt' field)")
    ap.add_argument("--n-prompts", type=int, default=4, help="prompts per set")
    ap.add_argument("--temperatures", default="0.6,1", help="comma list, each > 0")
    ap.add_argument("--lengths", default="4,8", help="path lengths L (draft tokens per path)")
    ap.add_argument("--paths", default="1,2,4,8", help="numbers of i.i.d. paths K for gbv")
    ap.add_argument("--positions", type=int, default=8, help="contexts per prompt, evenly spaced in its continuation")
    ap.add_argument("--max-new-tokens", type=int, default=48, help="length of the target's continuation")
    ap.add_argument("--seed", type=seed_type(), default=0)
    ap.add_argument("--out", default=None, help="JSON path (an existing file is replaced only when this benchmark "
                    "wrote it, or with --force)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file")


def run(args: argparse.Namespace) -> int:
    """``specot bench paths``: print the table, write the JSON with ``--out``. Every option is
    checked before a model loads.

    Raises:
        ValueError: a bad option, or an ``--out`` file this benchmark did not write (without ``--force``).
    """
    sets = [s.strip() for s in args.prompts.split(",") if s.strip()]
    if not sets:
        raise ValueError(f"--prompts names no prompt set: {args.prompts!r}; e.g. code,chat")
    temperatures = number_list(args.temperatures, "--temperatures", positive=True,
                               why=" (at T = 0 the i.i.d. paths are one path)")
    lengths, ks = int_list(args.lengths, "--lengths"), int_list(args.paths, "--paths")
    for value, flag in ((args.n_prompts, "--n-prompts"), (args.positions, "--positions"),
                        (args.max_new_tokens, "--max-new-tokens")):
        _positive(value, flag)
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="paths"))
    _NAMES.bind()
    prompts = [p for s in sets for p in load_prompts(s, args.n_prompts)]
    res = run_paths_bench(draft=args.draft, prompts=prompts, temperatures=temperatures, lengths=lengths, ks=ks,
                          positions=args.positions, max_new_tokens=args.max_new_tokens, seed=args.seed)
    res = {"benchmark": "paths", "command": "specot bench paths " + " ".join(sys.argv[3:]),
           "prompt_sets": sets, "n_prompts": args.n_prompts, **res, "environment": run_info()}
    print(_table(res))
    if args.out:
        write_json(args.out, res, indent=1)
    return 0
