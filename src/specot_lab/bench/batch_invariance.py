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

    {"backend": "llamacpp", "positions": 144,
     "max_abs_logit_diff": {"median": .., "p90": .., "max": ..},
     "top2_gap_change": {...}, "tv_T1": {"mean": .., "median": .., "max": ..},
     "argmax_differs": 0, "environment": {...}}

    specot bench batch-invariance [--backend llamacpp|transformers] [--tokens 48] [--out F]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
import torch

from .runinfo import run_info

__all__ = ["compare_passes", "add_arguments", "run"]

PROMPTS = ("Repeat this list three times: apple, banana, cherry, apple, banana, cherry.",
           "Write a Python function that returns the n-th Fibonacci number, then explain it.",
           "List three differences between TCP and UDP.")


def compare_passes(target: Any, prompt: list[int], tokens: int) -> list[dict[str, float]]:
    """Per position of the greedy continuation of ``prompt`` (``tokens`` positions): one-token
    pass vs batched pass (module docstring). ``target``: any specot target (``logits_after``,
    ``rollback``)."""
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
    v = np.asarray(values)
    return {"mean": round(float(v.mean()), 5), "median": round(float(np.median(v)), 5),
            "p90": round(float(np.quantile(v, 0.9)), 5), "max": round(float(v.max()), 5)}


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench batch-invariance``."""
    ap.add_argument("--backend", default="llamacpp", help="the target's backend (default llamacpp)")
    ap.add_argument("--tokens", type=int, default=48, help="greedy tokens per prompt (default 48)")
    ap.add_argument("--out", default=None, help="also write the JSON here")


def run(args: argparse.Namespace) -> int:
    """``specot bench batch-invariance``: measure; print the JSON, write it with ``--out``."""
    from specot.api import load_target

    kw: dict[str, Any] = {"dtype": "float32"} if args.backend == "transformers" else {}
    target = load_target(None, backend=args.backend, **kw)
    rows = [r for p in PROMPTS for r in compare_passes(target, target.encode_prompt(p), args.tokens)]
    res: dict[str, Any] = {"backend": args.backend, "model": getattr(target, "name", "?"), "positions": len(rows)}
    for key in ("max_abs_logit_diff", "top2_gap_change", "tv_T1"):
        res[key] = _summary([r[key] for r in rows])
    res["argmax_differs"] = int(sum(r["argmax_differs"] for r in rows))
    res["environment"] = run_info()
    text = json.dumps(res, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0
