"""Batch invariance of a backend's logits: a pass of one token against a pass of many.

Plain decoding scores one token per pass; speculative verification scores γ + 1 tokens in one
pass. Exactness is a statement given the logits a pass computes, so when a backend's kernels
compute other logits for the same token in a one-token pass than in a batched pass, plain and
speculative decoding on that backend follow (slightly) different laws — whatever the verifier.
This script measures it: the greedy continuation of each prompt (``--tokens`` tokens), then, at
each of its positions, the logits of a one-token pass (the context already cached) against the
same row of one batched pass over the whole continuation. Per position: the largest logit
difference, the change of the gap between the batched pass's two best tokens, the total variation
between the two softmax laws at T = 1, and whether the argmax differs. Prints JSON::

    {"benchmark": "batch-invariance", "backend": "llamacpp", "positions": 144,
     "max_abs_logit_diff": {"median": .., "p90": .., "max": ..},
     "top2_gap_change": {...}, "tv_T1": {"mean": .., "median": .., "max": ..},
     "argmax_differs": 0, "environment": {...}}

    specot bench batch-invariance [--backend llamacpp|transformers] [--tokens 48] [--out F]
"""

from __future__ import annotations

import argparse
from typing import Any

from specot.cli.command import count
from specot.outputs import check_output, dumps, json_has, write_json

from ..lazy import LazyNames

__all__ = ["compare_passes", "add_arguments", "run"]

#: The measuring code's names, bound when it runs: the sub-command's help imports no torch.
_NAMES = LazyNames(__name__, {"numpy": "numpy", "torch": "torch", "run_info": "specot_lab.bench.runinfo",
                              "load_target": "specot.api"})
__getattr__ = _NAMES.getattr

PROMPTS = ("Repeat this list three times: apple, banana, cherry, apple, banana, cherry.",
           "Write a Python function that returns the n-th Fibonacci number, then explain it.",
           "List three differences between TCP and UDP.")


def compare_passes(target: Any, prompt: list[int], tokens: int) -> list[dict[str, float]]:
    """Per position of the greedy continuation of ``prompt`` (``tokens`` positions): one-token
    pass vs batched pass (module docstring). ``target``: any specot target (``logits_after``,
    ``rollback``)."""
    _NAMES.bind()
    ids = list(prompt)
    for _ in range(tokens):
        ids.append(int(target.logits_after(ids)[0].argmax()))
    target.rollback(0)
    target.logits_after(ids[:len(prompt)])
    single = [target.logits_after(ids[:i + 1])[0] for i in range(len(prompt), len(ids) - 1)]  # [V] each
    target.rollback(0)
    batched = target.logits_after(ids[:len(prompt)], ids[len(prompt):-1])[1:]  # [tokens - 1, V]
    out = []
    for a, b in zip(single, batched):
        a, b = a.double(), b.double()
        top = torch.topk(b, 2).indices
        out.append(dict(max_abs_logit_diff=float((a - b).abs().max()),
                        top2_gap_change=float(abs((a[top[0]] - a[top[1]]) - (b[top[0]] - b[top[1]]))),
                        tv_T1=float(0.5 * (a.softmax(-1) - b.softmax(-1)).abs().sum()),
                        argmax_differs=float(int(a.argmax()) != int(b.argmax()))))
    return out


def _summary(values: list[float]) -> dict[str, float]:
    v = numpy.asarray(values)
    return {"mean": round(float(v.mean()), 5), "median": round(float(numpy.median(v)), 5),
            "p90": round(float(numpy.quantile(v, 0.9)), 5), "max": round(float(v.max()), 5)}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench batch-invariance``."""
    ap.add_argument("--backend", default="llamacpp", help="the target's backend (default llamacpp)")
    ap.add_argument("--tokens", type=count(2), default=48,
                    help="greedy tokens per prompt, at least 2: one-token passes after the first (default 48)")
    ap.add_argument("--out", default=None, help="also write the JSON here (an existing file only when this "
                    "benchmark wrote it, or with --force)")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file this benchmark did not write")


def run(args: argparse.Namespace) -> int:
    """``specot bench batch-invariance``: measure; print the JSON, write it with ``--out``. The
    options are checked before the target loads.

    Raises:
        ValueError: ``--tokens`` below 2, an ``--out`` file this benchmark did not write (without ``--force``)."""
    if args.tokens < 2:  # a caller's namespace, not the parser's
        raise ValueError(f"--tokens must be an integer >= 2 (the one-token passes follow the first), got {args.tokens}")
    check_output(args.out, "--out", force=getattr(args, "force", False), ours=json_has(benchmark="batch-invariance"))
    _NAMES.bind()
    kw: dict[str, Any] = {"dtype": "float32"} if args.backend == "transformers" else {}
    target = load_target(None, backend=args.backend, **kw)
    rows = [r for p in PROMPTS for r in compare_passes(target, target.encode_prompt(p), args.tokens)]
    res: dict[str, Any] = {"benchmark": "batch-invariance", "backend": args.backend, "model": getattr(target, "name", "?"), "positions": len(rows)}
    for key in ("max_abs_logit_diff", "top2_gap_change", "tv_T1"):
        res[key] = _summary([r[key] for r in rows])
    res["argmax_differs"] = int(sum(r["argmax_differs"] for r in rows))
    res["environment"] = run_info()
    text = dumps(res, indent=1)
    if args.out:
        write_json(args.out, res, indent=1)
    print(text)
    return 0
