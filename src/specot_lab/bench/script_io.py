"""The shared frame of the lab scripts in ``scripts/`` that decode prompt sets with the embedded
target (``eval_drafters.py``, ``suffix_cost_ab.py``, ``greedy_shortcut_ab.py``): their common
options, the target's seeded continuation of a prompt and the JSON record they write."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

import torch

from specot.api import load_target
from specot.envinfo import environment_info, load_average
from specot.models.hf import GRAPH_WIDTHS

from ..corpus import load_prompts


__all__ = ["add_run_options", "device_sync", "load_run", "target_continuation", "timed_run_fields", "write_record"]


def device_sync(device: Any) -> None:
    """Wait for queued kernels on a CUDA ``device`` (host clocks time nothing of asynchronous work);
    a no-op elsewhere."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def add_run_options(ap: argparse.ArgumentParser, *, sets: str, dtype: str = "auto", threads: int = 2) -> None:
    """``--sets`` (comma-separated prompt sets), ``--n-prompts``, ``--gamma`` (draft length γ),
    ``--max-new-tokens``, ``--dtype``, ``--threads`` (torch intra-op threads) and ``--out`` (JSON path)."""
    ap.add_argument("--sets", default=sets)
    ap.add_argument("--n-prompts", type=int, default=6)
    ap.add_argument("--gamma", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dtype", default=dtype)
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--out", default=None)


def load_run(args: argparse.Namespace, extra_slots: int) -> tuple[Any, dict[str, list[list[int]]], list[float], int]:
    """The start of a timed run with :func:`add_run_options` (and ``--device`` / ``--cuda-graphs``):
    torch's threads, the load average, the embedded target on the device, every prompt set encoded;
    with ``--cuda-graphs`` the target's static cache, sized for the longest prompt, the output,
    ``extra_slots`` (a draft) and the padding of a pass. Returns (target, sets, load at the start,
    that cache length)."""
    torch.set_num_threads(args.threads)
    load_start = load_average()
    tgt = load_target(None, dtype=args.dtype, device=getattr(args, "device", "cpu"))
    sets = {name: [tgt.encode_prompt(p) for p in load_prompts(name, args.n_prompts)]
            for name in args.sets.split(",") if name}
    longest = max(len(ids) for prompts in sets.values() for ids in prompts)
    span = min(longest + args.max_new_tokens + extra_slots + 2 * GRAPH_WIDTHS[-1], tgt.max_context)
    if getattr(args, "cuda_graphs", False):
        tgt.use_static_cache(span, cuda_graphs=True)
    return tgt, sets, load_start, span


def target_continuation(target: Any, ids: Sequence[int], temperature: float, max_new_tokens: int,
                        seed: int) -> list[int]:
    """``ids`` and the target's continuation of them: greedy at ``temperature`` 0, else sampled from
    the full distribution at that temperature (no top-k / top-p) after ``torch.manual_seed(seed)``."""
    torch.manual_seed(seed)
    kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else dict(do_sample=False)
    out = target.model.generate(torch.tensor([list(ids)]), max_new_tokens=max_new_tokens,
                                pad_token_id=target.tokenizer.eos_token_id, **kw)
    return out[0].tolist()


def write_record(path: str | None, benchmark: str, script: str, argv: Sequence[str] | None,
                 **fields: Any) -> dict[str, Any]:
    """``{"benchmark", "command", **fields}`` (the command that reproduces the run), written as
    indented JSON to ``path`` when given; returns the record."""
    out = {"benchmark": benchmark, "command": f"python scripts/{script} " + " ".join(argv or sys.argv[1:]), **fields}
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    return out


def timed_run_fields(args: argparse.Namespace, target: Any, load_start: list[float]) -> dict[str, Any]:
    """What a timed run records besides its rows: the lengths (γ, new tokens, prompts), the target's
    dtype, torch's threads, the load average at its start and end, and the machine
    (:func:`specot.envinfo.environment_info`: CPU flags, library versions)."""
    return {"gamma": args.gamma, "max_new_tokens": args.max_new_tokens, "n_prompts": args.n_prompts,
            "target_dtype": str(target.dtype).replace("torch.", ""), "torch_threads": torch.get_num_threads(),
            "load_avg_start": load_start, "load_avg_end": load_average(), "environment": environment_info()}
