"""CUDA checks of specot on the embedded target, for a machine with a GPU (docs/engine.md, "CUDA").

CI has no GPU, so this script is how the CUDA path is checked on a machine that has one. Every check
runs even if an earlier one fails; each prints one line and all go to ``--out`` as JSON.

1. **Verifiers on CUDA tensors with a CUDA generator**: each lossless verifier's emitted tokens
   over 200 000 positions (one p, q on 8 tokens, drafts drawn on the GPU) against p, Pearson
   chi-square, failing below p-value 1e-4 (so a correct verifier fails 1 time in 10 000 per check).
2. **Greedy ≡ autoregressive in float32 on CUDA** for every drafter and draft shape (chains, draft
   trees, the n-gram and suffix drafters, the EAGLE head, an early-exit model draft), eager and
   with CUDA graphs (``specot.generate(cuda_graphs=True)``, autoregressive decoding replayed from
   graphs too): the speculative tokens must equal the autoregressive tokens of the same run.
3. **bfloat16 on CUDA**: the same runs, which may part from autoregressive decoding only at
   near-ties; the first divergence is reported, not failed.
4. **Sampling (T = 1) on CUDA** with an explicit CUDA ``torch.Generator`` for each drafter: runs,
   emits valid tokens; a CPU generator with a CUDA target is refused with one line.
5. **No cuDNN attention**: the attention operators of a short ``suffix+eagle`` run (PyTorch's
   profiler) include none of cuDNN's, which re-plans at every new pass shape (docs/engine.md).

    python benchmarks/gpu/cuda_check.py --out cuda_check.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from typing import Any, Callable

import scipy.stats
import torch

from specot import generate, make_generator
from specot.api import load_target
from specot_lab.bench.runinfo import run_info
from specot.laws import sample_drafts
from specot.verifiers import DraftLaw, get_verifier
from specot_lab.bench.acceptance import early_exit_draft

PROMPTS = ["Write a Python function that returns the n-th Fibonacci number, with a docstring.",
           "Explain in three sentences why the sky is blue.",
           "def quicksort(xs):\n    \"\"\"Sort a list with quicksort.\"\"\"\n"]
# (name, drafts-and-shape kwargs of specot.generate)
PLANS: list[tuple[str, dict[str, Any]]] = [
    ("ngram chain γ=4", dict(draft="ngram", gamma=4)),
    ("suffix tree", dict(draft="suffix", gamma=4)),
    ("eagle chain γ=4", dict(draft="eagle", gamma=4)),
    ("eagle tree 2x3 greedy", dict(draft="eagle", n=2, gamma=3, tree="greedy", verifier="greedy")),
    ("suffix+eagle tree 2x3 (the CPU auto plan)", dict(draft="suffix+eagle", n=2, gamma=3)),
    ("suffix+eagle tree 3x6 (the CPU auto plan at T = 0; EAGLE's trees graphed with CUDA graphs)",
     dict(draft="suffix+eagle", n=3, gamma=6)),
    ("early-exit:6 chain γ=4", dict(draft="early-exit", gamma=4)),
    ("early-exit:6 tree 2x3 kseq", dict(draft="early-exit", n=2, gamma=3, tree="iid", verifier="kseq")),
]
VERIFIERS = [("speculative", DraftLaw.IID, 1), ("kseq", DraftLaw.IID, 3), ("rrs", DraftLaw.IID, 3),
             ("rrs_wor", DraftLaw.WOR, 3), ("greedy", DraftLaw.GREEDY, 3), ("spechub", DraftLaw.SPECHUB, 2)]


def run_check(name: str, fn: Callable[[], dict[str, Any]], results: list[dict[str, Any]]) -> None:
    t0 = time.perf_counter()
    try:
        row = {"check": name, "ok": True, **fn()}
    except Exception as exc:  # noqa: BLE001 - every check runs; the failure is the result
        row = {"check": name, "ok": False, "error": f"{type(exc).__name__}: {exc}",
               "trace": traceback.format_exc()[-2000:]}
    row["seconds"] = round(time.perf_counter() - t0, 2)
    results.append(row)
    extra = {k: v for k, v in row.items() if k not in ("check", "ok", "trace", "seconds")}
    print(f"{'PASS' if row['ok'] else 'FAIL'} {name} ({row['seconds']} s) {json.dumps(extra)[:300]}", flush=True)


def verifier_check(name: str, law: DraftLaw, n: int, device: str) -> dict[str, Any]:
    g = make_generator(123, device)
    V, B = 8, 200_000
    p = torch.softmax(torch.randn(V, device=device, generator=g) * 1.5, -1)
    q = torch.softmax(torch.randn(V, device=device, generator=g) * 1.5, -1)
    P, Q = p.expand(B, V).contiguous(), q.expand(B, V).contiguous()
    drafts = sample_drafts(Q, n, law, generator=g)
    out = get_verifier(name).verify(P, Q, drafts, generator=g)
    assert out.tokens.device == p.device, f"tokens on {out.tokens.device}"
    counts = torch.bincount(out.tokens, minlength=V).cpu().numpy().astype(float)
    expected = p.double().cpu().numpy()
    pval = float(scipy.stats.chisquare(counts, expected / expected.sum() * counts.sum()).pvalue)  # sums must match exactly
    return {"ok": pval > 1e-4, "p_value": pval, "acceptance": float(out.accepted.float().mean())}


_EARLY_EXIT: dict[int, Any] = {}


def plan_kwargs(plan: dict[str, Any], target: Any) -> dict[str, Any]:
    kw = dict(plan)
    if kw["draft"] == "early-exit":  # one early-exit copy per loaded target
        kw["draft"] = _EARLY_EXIT.setdefault(id(target), early_exit_draft(target, 6))
    return kw


def greedy_check(target: Any, plan: dict[str, Any], graphs: bool, exact: bool) -> dict[str, Any]:
    firsts, speedups, alphas, draft_ms = [], [], [], []
    for prompt in PROMPTS:
        rep = generate(prompt, target=target, temperature=0.0, max_new_tokens=48, device=str(target.device),
                       baseline=True, cuda_graphs=graphs, **plan_kwargs(plan, target))
        a, b = rep.result.tokens, rep.baseline.tokens
        first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
        firsts.append(first)
        speedups.append(rep.speedup)
        st = rep.result.stats
        alphas.append(st.accepted / st.drafted if st.drafted else None)
        draft_ms.append(round(1000 * st.draft_time_s / max(st.iterations, 1), 2))
    equal = all(f is None for f in firsts)
    return {"ok": equal or not exact, "equal": equal, "first_divergence": firsts,
            "speedup_vs_ar_same_run": [round(s, 3) if s else s for s in speedups],
            "acceptance": [round(x, 3) if x is not None else None for x in alphas], "draft_ms_per_iteration": draft_ms}


def sampling_check(target: Any, plan: dict[str, Any]) -> dict[str, Any]:
    g = make_generator(7, target.device)
    rep = generate(PROMPTS[1], target=target, temperature=1.0, max_new_tokens=48, device=str(target.device),
                   generator=g, cuda_graphs=False, **plan_kwargs(plan, target))
    toks = rep.result.tokens
    ok = len(toks) > 0 and all(0 <= t < target.vocab_size for t in toks)
    st = rep.result.stats
    return {"ok": ok, "tokens": len(toks), "acceptance": st.accepted / st.drafted if st.drafted else None}


def cpu_generator_refused(target: Any) -> dict[str, Any]:
    try:
        generate(PROMPTS[1], target=target, draft="ngram", max_new_tokens=4, device=str(target.device),
                 generator=torch.Generator().manual_seed(0), cuda_graphs=False)
    except (ValueError, TypeError) as exc:
        msg = str(exc)
        return {"ok": "\n" not in msg, "message": msg}
    return {"ok": False, "message": "a CPU generator with a CUDA target was accepted"}


def attention_kernels(target: Any) -> dict[str, Any]:
    """The attention operators a short ``suffix+eagle`` tree run dispatches (target passes and the
    EAGLE head): cuDNN's must not be among them (``specot.models.device.sdpa_without_cudnn``)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        generate(PROMPTS[0], target=target, draft="suffix+eagle", n=2, gamma=3, temperature=1.0,
                 max_new_tokens=24, device=str(target.device), seed=0, cuda_graphs=False)
    ops = sorted({e.key for e in prof.key_averages() if "attention" in e.key and e.key.startswith("aten::_")})
    return {"ok": bool(ops) and not any("cudnn" in o for o in ops), "attention_ops": ops}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="cuda_check.json")
    ap.add_argument("--skip-graphs", action="store_true", help="leave out the CUDA-graph runs")
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu only to dry-run this script")
    ap.add_argument("--only", default="", help="comma-separated parts of check names: run only the checks that "
                    "contain one (e.g. 'CUDA graphs,refused' when time is short)")
    args = ap.parse_args(argv)
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("no CUDA device: this script checks the CUDA path", file=sys.stderr)
        return 2
    results: list[dict[str, Any]] = []

    def write() -> list[str]:  # after every check, so a run cut short still leaves its results
        failed = [r["check"] for r in results if not r["ok"]]
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"environment": run_info(), "device": args.device,
                       "device_name": torch.cuda.get_device_name(0) if cuda else None,
                       "results": results, "failed": failed}, f, indent=2)
        return failed

    only = [w for w in args.only.split(",") if w]

    def check(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if only and not any(w in name for w in only):
            return
        run_check(name, fn, results)
        write()

    for name, law, n in VERIFIERS:
        check(f"verifier {name} n={n} on {args.device}", lambda: verifier_check(name, law, n, args.device))
    for dtype in ("float32", "bfloat16"):
        tgt = load_target(None, dtype=dtype, device=args.device)
        exact = dtype == "float32"
        for label, plan in PLANS:
            check(f"greedy {dtype} eager: {label}", lambda: greedy_check(tgt, plan, False, exact))
        if dtype == "bfloat16":
            for label, plan in PLANS:
                check(f"sampling T=1 bf16: {label}", lambda: sampling_check(tgt, plan))
            check("a CPU generator with a CUDA target is refused", lambda: cpu_generator_refused(tgt))
            check("bf16 attention kernels: no cuDNN", lambda: attention_kernels(tgt))
        if not args.skip_graphs and cuda:  # last: the static caches stay on the target afterwards
            for label, plan in (PLANS[0], PLANS[3], PLANS[4], PLANS[5], PLANS[6]):
                check(f"greedy {dtype} CUDA graphs: {label}", lambda: greedy_check(tgt, plan, True, exact))
        tgt = None  # free the GPU memory before the next dtype
        _EARLY_EXIT.clear()
        if cuda:
            torch.cuda.empty_cache()
    failed = write()
    print(f"{len(results) - len(failed)}/{len(results)} checks passed; failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
