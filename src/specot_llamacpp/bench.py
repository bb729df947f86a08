"""Benchmarks of specot on llama.cpp: ``python -m specot_llamacpp.bench cost|run``.

``cost``: the target's cost curve t(B)/t(1) (:mod:`specot_llamacpp.cost`) and, from it, the
break-even acceptance of every chain length (:mod:`specot_llamacpp.plan`); JSON on stdout or ``--out``.

``run``: tokens/s on prompt sets (JSONL files of ``{"prompt": ...}`` lines), at each temperature, of

* ``plain``: llama-cpp-python's high-level ``Llama.generate`` on the same GGUF (llama.cpp's own
  decoding and sampling; the baseline);
* ``prompt-lookup``: the same with its ``LlamaPromptLookupDecoding`` draft (``num_pred_tokens``
  10, its default);
* ``specot-ar``: specot's loop on :class:`~specot_llamacpp.LlamaCppTarget` without a draft;
* ``specot-ngram``: n-gram chains of γ (``--gamma``; prompt lookup + the pydoc n-gram table);
* ``specot-suffix``: suffix-decoding trees, ``make_plan("suffix")`` (4 children per node, depth
  ``--suffix-depth``), priced by the target's ``pass_cost``;
* ``specot-suffix-llamacpp``: ``draft="auto"`` on this backend (:data:`specot_llamacpp.auto.AUTO_PLAN`):
  suffix chains whose adaptive budget prices a pass of 1 + N tokens at ``1 + f + c·N`` (the quiet
  curve's fit; with ``--price-by-run`` the fit of the curve this run measures), after matches of 4+;
* ``specot-draft``: chains of the distilled draft converted to GGUF (:mod:`specot_llamacpp.draft`);
* ``specot-hf-auto`` (only with ``--with-transformers``): specot's ``auto`` on the transformers backend.

Every method decodes every prompt of a set from a cold cache (prompt included in the time), at
most ``--max-new-tokens`` tokens, stopping at EOS, ``--repeats`` times (T > 0: seeds 0..r−1); the
methods alternate prompt by prompt so drifts of the machine hit them alike. A set's tokens/s is its
tokens over its seconds, end to end; ``decode_tokens_per_s`` leaves out the time to the first
emitted tokens (the prompt's pass) and those tokens — at T > 0 the methods' answers end at
different lengths, and a shorter answer spreads the same prompt pass over fewer tokens; each specot method also records its passes, tree sizes and acceptance, and
the speedup over ``specot-ar`` that the measured cost curve predicts for those passes
(:func:`specot_llamacpp.plan.run_speedup`). ``outside_decode_ms_per_token``: each method's time
outside ``llama_decode`` per token (its loop's own work; the passes' share of machine noise left
out), the measure of how close a loop is to llama-cpp-python's. JSON on stdout or ``--out``;
progress on stderr.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from specot.envinfo import environment_info

from .cost import DEFAULT_WIDTHS, CostCurve, measure_cost_curve
from .loading import load_target
from .plan import auto_drafter, best_chain, break_even_alpha, run_speedup
from .target import LlamaCppTarget, default_threads

__all__ = ["main", "METHODS", "fit_linear_cost"]

METHODS = ("plain", "prompt-lookup", "specot-ar", "specot-ngram", "specot-suffix", "specot-suffix-llamacpp",
           "specot-draft")
COST_CONTEXT = ("Explain in two sentences what a Python generator is, then give a short example that uses yield "
                "to produce the squares of the first ten numbers.")


def fit_linear_cost(curve: CostCurve) -> tuple[float, float]:
    """``(f, c)`` of ``r(1 + N) ≈ 1 + f + c·N`` (N >= 1), least squares over the curve's widths >= 2
    (logits on all rows): the cost model of :class:`specot.drafting.SuffixDrafter`'s adaptive budget."""
    pts = [(w - 1, r - 1.0) for w, r in zip(curve.widths, curve.ratio_all) if w >= 2]
    if len(pts) < 2:
        raise ValueError("fitting the cost model needs at least two widths >= 2")
    n, y = np.array([p[0] for p in pts], float), np.array([p[1] for p in pts], float)
    c, f = np.polyfit(n, y, 1)
    return max(0.0, float(f)), max(0.0, float(c))


def _meta(target: LlamaCppTarget) -> dict[str, Any]:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    return {"date": _dt.date.today().isoformat(), "commit": commit, "model": target.name, "gguf": target.path.name,
            "n_threads": target.n_threads, "llama_cpp_python": metadata.version("llama-cpp-python"),
            "environment": environment_info()}


def cmd_cost(args: argparse.Namespace) -> dict[str, Any]:
    target = load_target(n_threads=args.threads)
    curve = measure_cost_curve(target, target.encode_prompt(COST_CONTEXT), args.widths, args.repeats)
    f, c = fit_linear_cost(curve)
    return {**_meta(target), "kind": "llama.cpp cost curve", "cost_curve": curve.to_dict(),
            "linear_fit": {"f": round(f, 4), "c": round(c, 4)},
            "break_even_alpha": {g: break_even_alpha(g, curve) for g in range(1, 8)},
            "best_chain": {a: best_chain(a, curve).__dict__ for a in (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)}}


# ----------------------------------------------------------------------------- run
def _read_sets(paths: list[str], n: int) -> dict[str, list[dict]]:
    sets: dict[str, list[dict]] = {}
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise SystemExit(f"specot_llamacpp.bench: error: no prompt file {p!r} (JSONL, one {{\"prompt\": ...}} a line)")
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        if not rows or any("prompt" not in r for r in rows):
            raise SystemExit(f"specot_llamacpp.bench: error: {p!r} must hold JSON lines with a \"prompt\" key")
        sets[path.stem] = rows[:n]
    return sets


def _llama_runner(target: LlamaCppTarget, lookup: bool) -> Callable[[list[int], float, int, int], int]:
    """``run(ids, T, max_new, seed) -> tokens`` with llama-cpp-python's high-level ``Llama``."""
    import llama_cpp

    kw: dict[str, Any] = {}
    if lookup:
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
        kw["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=10)
    llm = llama_cpp.Llama(str(target.path), n_ctx=target.max_context, n_threads=target.n_threads,
                          n_threads_batch=target.n_threads, verbose=False, **kw)
    eos = target.eos_token_ids

    def run(ids: list[int], T: float, max_new: int, seed: int) -> dict:
        t0 = time.perf_counter()
        llm.reset()  # a cold cache, as specot's runs
        llm.set_seed(seed)
        n, first = 0, 0.0
        for tok in llm.generate(ids, temp=T, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0):
            n += 1
            if n == 1:
                first = time.perf_counter() - t0
            if tok in eos or n >= max_new:
                break
        return {"tokens": n, "ttft_s": first, "firsts": 1}  # llama-cpp-python yields one token at a time
    return run


def _specot_runner(target: LlamaCppTarget, method: str, args: argparse.Namespace, curve: CostCurve):
    from specot.api import load_drafter
    from specot.engine import speculative_generate, tree_generate
    from specot.plan import make_plan
    from specot.engine.types import GenerationConfig
    from specot.sampling import SamplingConfig

    from .draft import load_draft

    drafter, spec = None, None
    if method == "specot-ngram":
        drafter = load_drafter("ngram", target)
    elif method == "specot-suffix":  # specot's default suffix trees (4 children per node), priced by the target
        plan = make_plan("suffix", target=target, gamma=args.suffix_depth)
        drafter, spec = plan.draft.load(target), plan.shape
    elif method == "specot-suffix-llamacpp":
        drafter, spec = auto_drafter(target, 0.0, curve=curve if args.price_by_run else None)
    elif method == "specot-draft":
        drafter = load_draft(target, n_threads=target.n_threads)

    def run(ids: list[int], T: float, max_new: int, seed: int) -> dict:
        cfg = GenerationConfig(max_new_tokens=max_new, gamma=args.gamma, sampling=SamplingConfig(temperature=T),
                               seed=seed)
        t0, first = time.perf_counter(), []

        def on_tokens(batch: list[int]) -> None:
            if not first:  # the first tokens committed: after the prompt's pass
                first.append((time.perf_counter() - t0, len(batch)))
        if spec is not None:
            res = tree_generate(target, drafter, ids, spec, cfg, on_tokens=on_tokens)
        else:
            res = speculative_generate(target, drafter, ids, cfg, on_tokens=on_tokens)
        s = res.stats
        ttft, firsts = first[0] if first else (0.0, 0)
        return {"tokens": len(res.tokens), "ttft_s": ttft, "firsts": firsts,
                "passes": s.target_calls, "drafted": s.drafted, "accepted": s.accepted,
                "tree_sizes": list(s.tree_sizes), "emitted": [a + 1 for a in s.accepted_lengths],
                "draft_time_s": s.draft_time_s}
    return run


def _hf_runner(args: argparse.Namespace):
    """specot's ``auto`` on the transformers backend, with torch's default threads while it runs."""
    import torch

    from specot import api

    threads = default_threads()
    hf = api.load_target(None)

    def run(ids: list[int], T: float, max_new: int, seed: int) -> int:
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            rep = api.generate(list(ids), target=hf, draft="auto", max_new_tokens=max_new, temperature=T, seed=seed)
        finally:
            torch.set_num_threads(before)
        return len(rep.result.tokens)
    return run


class _DecodeClock:
    """Seconds spent inside ``llama_decode`` — llama-cpp-python's calls and specot's alike, both made
    through the ``llama_cpp`` module's attribute — while entered: the rest of a run's time is each
    loop's own work (sampling, logits copies, bookkeeping), which machine noise moves far less than
    the passes."""

    def __init__(self) -> None:
        self.s = 0.0

    def __enter__(self) -> "_DecodeClock":
        import llama_cpp
        import llama_cpp.llama_cpp as low

        self._mods, self._orig = (llama_cpp, low), low.llama_decode
        orig = self._orig

        def timed(ctx, batch):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return orig(ctx, batch)
            finally:
                self.s += time.perf_counter() - t0
        for m in self._mods:
            m.llama_decode = timed
        return self

    def __exit__(self, *exc: object) -> None:
        for m in self._mods:
            m.llama_decode = self._orig


def cmd_run(args: argparse.Namespace) -> dict[str, Any]:
    from tqdm import tqdm

    sets = _read_sets(args.prompts, args.n_prompts)
    target = load_target(n_threads=args.threads)
    curve = measure_cost_curve(target, target.encode_prompt(COST_CONTEXT), DEFAULT_WIDTHS, args.cost_repeats)
    methods = list(args.methods) + (["specot-hf-auto"] if args.with_transformers else [])
    runners: dict[str, Callable] = {}
    for m in methods:
        if m in ("plain", "prompt-lookup"):
            runners[m] = _llama_runner(target, lookup=(m == "prompt-lookup"))
        elif m == "specot-hf-auto":
            runners[m] = _hf_runner(args)
        else:
            runners[m] = _specot_runner(target, m, args, curve)
    encoded = {name: [target.encode_prompt(r["prompt"], system=r.get("system")) for r in rows]
               for name, rows in sets.items()}
    acc: dict = {}
    total = sum(len(v) for v in encoded.values()) * len(args.temperatures) * args.repeats * len(methods)
    bar = tqdm(total=total, desc="llama.cpp bench", file=sys.stderr, disable=args.no_progress)
    with _DecodeClock() as clock:
        _run_cells(encoded, args, methods, runners, acc, bar, clock)
    bar.close()
    return {**_meta(target), "kind": "llama.cpp decoding benchmark", "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats, "gamma": args.gamma, "suffix_depth": args.suffix_depth,
            "prompt_sets": {n: str(p) for n, p in zip(sets, args.prompts)}, "cost_curve": curve.to_dict(),
            "results": _summarise(acc, curve)}


def _run_cells(encoded: dict[str, list[list[int]]], args: argparse.Namespace, methods: list[str],
               runners: dict[str, Callable], acc: dict, bar: Any, clock: _DecodeClock) -> None:
    """Every (set, T, repeat, prompt) with every method in turn, accumulated into ``acc``."""
    for name, prompts in encoded.items():
        for T in args.temperatures:
            for rep in range(args.repeats):
                for ids in prompts:
                    for m in methods:
                        t0, c0 = time.perf_counter(), clock.s
                        out = runners[m](ids, T, args.max_new_tokens, rep)
                        dt = time.perf_counter() - t0
                        cell = acc.setdefault(name, {}).setdefault(m, {}).setdefault(str(T), {
                            "tokens": 0, "time_s": 0.0, "passes": 0, "drafted": 0, "accepted": 0, "decode_s": 0.0,
                            "tree_sizes": [], "emitted": [], "draft_time_s": 0.0, "ttft_s": 0.0, "firsts": 0})
                        cell["decode_s"] += clock.s - c0
                        rec = out if isinstance(out, dict) else {"tokens": out}
                        cell["tokens"] += rec["tokens"]
                        cell["time_s"] += dt
                        for k in ("passes", "drafted", "accepted", "draft_time_s", "ttft_s", "firsts"):
                            cell[k] += rec.get(k, 0)
                        cell["tree_sizes"] += rec.get("tree_sizes", [])
                        cell["emitted"] += rec.get("emitted", [])
                        bar.update()


def _summarise(acc: dict, curve: CostCurve) -> dict:
    out: dict = {}
    for name, methods in acc.items():
        for m, temps in methods.items():
            for T, c in temps.items():
                row = {"tokens_per_s": round(c["tokens"] / c["time_s"], 2), "tokens": c["tokens"],
                       "time_s": round(c["time_s"], 3), "llama_decode_s": round(c["decode_s"], 3),
                       # the loop's own work: the run's time outside llama_decode, per token
                       "outside_decode_ms_per_token": round(1e3 * (c["time_s"] - c["decode_s"]) / max(c["tokens"], 1), 4)}
                if c["firsts"]:  # after the first tokens: the prompt's pass left out
                    row["ttft_s"] = round(c["ttft_s"], 3)
                    row["decode_tokens_per_s"] = round((c["tokens"] - c["firsts"]) / (c["time_s"] - c["ttft_s"]), 2)
                if c["emitted"]:
                    row.update(passes=c["passes"], drafted=c["drafted"], accepted=c["accepted"],
                               tokens_per_pass=round(sum(c["emitted"]) / len(c["emitted"]), 3),
                               mean_tree_size=round(float(np.mean(c["tree_sizes"])), 3),
                               predicted_speedup_vs_ar=round(run_speedup(c["tree_sizes"], c["emitted"], curve), 3))
                out.setdefault(name, {}).setdefault(T, {})[m] = row
    for name, temps in out.items():
        for T, rows in temps.items():
            base = rows.get("plain", {}).get("tokens_per_s")
            dbase = rows.get("plain", {}).get("decode_tokens_per_s")
            for r in rows.values():
                if base:
                    r["vs_plain"] = round(r["tokens_per_s"] / base, 3)
                if dbase and "decode_tokens_per_s" in r:
                    r["decode_vs_plain"] = round(r["decode_tokens_per_s"] / dbase, 3)
    means: dict = {}
    for temps in out.values():
        for T, rows in temps.items():
            for m, r in rows.items():
                means.setdefault(T, {}).setdefault(m, []).append(r.get("vs_plain"))
    out["mean_vs_plain"] = {T: {m: (round(float(np.mean(v)), 3) if None not in v else None) for m, v in rows.items()}
                            for T, rows in means.items()}
    return out


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specot_llamacpp.bench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cost", help="the cost curve t(B)/t(1) and the chains it lets pay")
    c.add_argument("--widths", type=int, nargs="+", default=list(DEFAULT_WIDTHS))
    c.add_argument("--repeats", type=int, default=25)
    r = sub.add_parser("run", help="tokens/s of llama.cpp and specot on llama.cpp over prompt sets")
    r.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files (one set each)")
    r.add_argument("--n-prompts", type=int, default=6)
    r.add_argument("--max-new-tokens", type=int, default=96)
    r.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    r.add_argument("--repeats", type=int, default=1)
    r.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    r.add_argument("--gamma", type=int, default=2, help="draft length of the chains (n-gram, draft model)")
    r.add_argument("--suffix-depth", type=int, default=4)
    r.add_argument("--cost-repeats", type=int, default=15)
    r.add_argument("--price-by-run", action="store_true",
                   help="price specot-suffix-llamacpp's budget by this run's cost curve, not the plan's constants")
    r.add_argument("--with-transformers", action="store_true", help="also specot auto on the transformers backend")
    r.add_argument("--no-progress", action="store_true")
    for q in (c, r):
        q.add_argument("--threads", type=int, default=None, help=f"llama.cpp threads (default {default_threads()})")
        q.add_argument("--out", default=None, help="write the JSON here (default: stdout)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    for name in ("repeats", "n_prompts", "max_new_tokens", "gamma", "suffix_depth", "cost_repeats", "threads"):
        v = getattr(args, name, None)
        if v is not None and v < 1:
            print(f"specot_llamacpp.bench: error: --{name.replace('_', '-')} must be >= 1, got {v}", file=sys.stderr)
            return 1
    result = cmd_cost(args) if args.cmd == "cost" else cmd_run(args)
    text = json.dumps(result, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
