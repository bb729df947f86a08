"""Held-out evaluation of a draft against its target.

* **α (single draft)** at temperature T ∈ {1, 0}: the target samples a response at temperature T
  for each held-out prompt (:func:`specot_lab.corpus.heldout_prompts`, topics never used in
  training); both models are then run over prompt + response (teacher forcing) and
  ``β_t = Σ_x min(p_t(x), q_t(x))`` is averaged over the response positions, with p and q the
  standardized (temperature-T) distributions — at T = 0 this is P(argmax q = argmax p). This is
  Leviathan et al.'s α = E[β] over the target's own prefixes.
* **c** = draft step time / target step time, each the median wall time of a one-token forward
  pass after a cached context of ``context_tokens`` tokens, the two models interleaved, in float32
  and in bfloat16. ``c_step`` also counts the draft's sampling of the token (what a draft step
  costs inside the engine).
* The Leviathan model (:func:`specot.theory.speedup.optimal_gamma`) predicts the best γ and the
  speedup from α and c; the end-to-end run (:func:`specot_lab.bench.generate_speed.run_generate_bench`,
  same prompts, same process, autoregressive baseline) measures block efficiency, acceptance and
  speedup at each γ.
"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any, Sequence

import torch
from tqdm import tqdm
from specot.sampling import SamplingConfig, sample_categorical, standardize
from ..corpus import heldout_prompts
from .data import SampleConfig, sample_batch
from specot.api import load_drafter, load_target
from specot.theory.speedup import optimal_gamma, speedup_table
from ..bench.generate_speed import run_generate_bench

__all__ = ["held_out_alpha", "cost_coefficient", "evaluate_draft", "format_report"]


@torch.inference_mode()
def held_out_alpha(target: Any, draft: Any, prompts: Sequence[str], *, temperature: float, max_new_tokens: int = 96,
                   batch_size: int = 10, seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """α at ``temperature`` on ``prompts`` (see module docstring); both are :class:`CausalLM` s."""


    sc = SamplingConfig(temperature=temperature)
    cfg = SampleConfig(batch_size=batch_size, max_new_tokens=max_new_tokens, temperature=temperature, top_k=0, seed=seed)
    enc = [target.encode_prompt(p) for p in prompts]
    betas: list[float] = []
    per_prompt: list[float] = []
    for s in tqdm(range(0, len(enc), batch_size), desc=f"alpha T={temperature:g}", disable=not progress, file=sys.stderr):
        gen = torch.Generator().manual_seed(seed + s)
        seqs = sample_batch(target, enc[s:s + batch_size], cfg, eos_ids=target.eos_token_ids, generator=gen)
        for seq in seqs:
            ids = seq["ids"].tolist()
            n0 = seq["n_prompt"]
            if len(ids) <= n0:
                continue
            target.reset()
            draft.reset()
            lp = target.forward(ids[:-1])[n0 - 1:]  # [R, V] rows predicting the response tokens
            lq = draft.forward(ids[:-1])[n0 - 1:]
            p = standardize(lp, sc)
            q = standardize(lq, sc)
            b = torch.minimum(p, q).sum(-1)  # [R]
            betas.extend(b.tolist())
            per_prompt.append(float(b.mean()))
    target.reset()
    draft.reset()
    return {"temperature": temperature, "alpha": statistics.fmean(betas) if betas else 0.0, "positions": len(betas),
            "prompts": len(per_prompt), "alpha_per_prompt": per_prompt}


@torch.inference_mode()
def cost_coefficient(target: Any, draft: Any, *, context_tokens: int = 256, reps: int = 40, seed: int = 0) -> dict[str, float]:
    """Median one-token forward time of ``draft`` and ``target`` after ``context_tokens`` cached
    tokens (interleaved), and ``c`` = draft / target; ``c_step`` adds the draft's sampling step."""

    g = torch.Generator().manual_seed(seed)
    V = min(target.vocab_size, draft.vocab_size)
    lo, hi = (100, 20000) if V > 20000 else (0, V)
    ctx = torch.randint(lo, hi, (context_tokens,), generator=g).tolist()
    target.reset()
    draft.reset()
    target.forward(ctx)
    draft.forward(ctx)
    sc = SamplingConfig(1.0)
    td, tt, ts = [], [], []
    for i in range(reps + 3):
        tok = lo + i % (hi - lo)
        t0 = time.perf_counter()
        target.forward([tok])
        t1 = time.perf_counter()
        lq = draft.forward([tok])[-1]
        t2 = time.perf_counter()
        int(sample_categorical(standardize(lq, sc).unsqueeze(0), g)[0])
        t3 = time.perf_counter()
        target.rollback(context_tokens)
        draft.rollback(context_tokens)
        if i >= 3:
            tt.append(t1 - t0)
            td.append(t2 - t1)
            ts.append(t3 - t1)
    target.reset()
    draft.reset()
    mt, md, ms = statistics.median(tt), statistics.median(td), statistics.median(ts)
    return {"target_ms": mt * 1e3, "draft_ms": md * 1e3, "draft_step_ms": ms * 1e3, "c": md / mt, "c_step": ms / mt,
            "context_tokens": context_tokens, "reps": reps}


def evaluate_draft(draft_path: str, *, n_prompts: int = 20, max_new_tokens: int = 96, gammas: Sequence[int] = (1, 2, 3, 4, 5, 6),
                   temperatures: Sequence[float] = (1.0, 0.0), bench_prompts: int | None = None, seed: int = 0,
                   cost_dtypes: Sequence[str] = ("float32", "bfloat16"), run_bench: bool = True,
                   progress: bool = True) -> dict[str, Any]:
    """The full held-out evaluation of the draft at ``draft_path`` (or ``"distilled"`` for the shipped
    one) against the embedded target; returns a JSON-ready dict."""

    tgt32 = load_target(None, dtype="float32")

    def load_draft(dtype: str) -> Any:  # names resolved by the one draft registry, specot.api.load_drafter
        return load_drafter("distilled" if draft_path == "default" else draft_path, tgt32, dtype=dtype).model

    prompts = heldout_prompts(n_prompts)
    result: dict[str, Any] = {"draft": draft_path, "held_out_prompts": len(prompts), "max_new_tokens": max_new_tokens,
                              "threads": torch.get_num_threads()}
    d32 = load_draft("float32")
    result["draft_params"] = sum(p.numel() for p in d32.model.parameters())
    result["alpha"] = {f"{t:g}": held_out_alpha(tgt32, d32, prompts, temperature=t, max_new_tokens=max_new_tokens,
                                                 seed=seed, progress=progress) for t in temperatures}
    result["cost"] = {}
    for dt in cost_dtypes:
        if dt == "float32":
            tg, dr = tgt32, d32
        else:
            tg, dr = load_target(None, dtype=dt), load_draft(dt)
        result["cost"][dt] = cost_coefficient(tg, dr, seed=seed)
    c = result["cost"]["float32"]["c_step"] if "float32" in result["cost"] else next(iter(result["cost"].values()))["c_step"]
    result["theory"] = {}
    for key, a in result["alpha"].items():
        best = optimal_gamma(min(a["alpha"], 1 - 1e-9), c)
        result["theory"][key] = {"alpha": a["alpha"], "c": c, "best_gamma": best.gamma, "predicted_speedup": best.improvement,
                                 "predicted_tokens_per_call": best.expected_tokens,
                                 "table": speedup_table(min(a["alpha"], 1 - 1e-9), c, max_gamma=max(gammas))}
    if run_bench:

        bp = heldout_prompts(bench_prompts or n_prompts)
        result["bench"] = run_generate_bench(target=tgt32, draft=d32,  # type: ignore[arg-type]
                                             prompts=bp, gammas=list(gammas), temperatures=list(temperatures),
                                             max_new_tokens=max_new_tokens, seed=seed, dtype="float32", progress=progress)
        result["bench"]["draft"] = draft_path
    return result


def format_report(res: dict[str, Any]) -> str:
    """Markdown tables of an :func:`evaluate_draft` result."""
    lines = [f"draft: {res['draft']} ({res.get('draft_params', 0) / 1e6:.2f} M parameters), "
             f"{res['held_out_prompts']} held-out prompts, {res['max_new_tokens']} new tokens", "",
             "| T | α (held-out) | positions | best γ (theory) | predicted speedup |", "|---|---|---|---|---|"]
    for key, a in res["alpha"].items():
        th = res["theory"][key]
        lines.append(f"| {key} | {a['alpha']:.3f} | {a['positions']} | {th['best_gamma']} | {th['predicted_speedup']:.2f}x |")
    lines += ["", "| dtype | target ms/token | draft ms/token | c (forward) | draft step ms | c (step) |", "|---|---|---|---|---|---|"]
    for dt, cc in res["cost"].items():
        lines.append(f"| {dt} | {cc['target_ms']:.1f} | {cc['draft_ms']:.2f} | {cc['c']:.3f} | {cc['draft_step_ms']:.2f} | {cc['c_step']:.3f} |")
    if "bench" in res:
        lines += ["", "| T | γ | block eff. | accepted/drafted | spec tok/s | AR tok/s | speedup |",
                  "|---|---|---|---|---|---|---|"]
        for r in res["bench"]["rows"]:
            ratio = r.get("accepted_per_drafted", r.get("acceptance_rate"))  # docs/bench results name it so
            lines.append(f"| {r['temperature']:g} | {r['gamma']} | {r['block_efficiency']:.2f} | {ratio:.2f} | "
                         f"{r['spec_tokens_per_s']:.1f} | {r['ar_tokens_per_s']:.1f} | {r['speedup']:.2f}x |")
    return "\n".join(lines)
