"""Does a target pass cost more the first time its shape is met? (docs/engine.md, "What the H200
showed in session 27".)

PyTorch's cuDNN attention builds an execution graph for every new (query length, key length) it
meets; flash and memory-efficient attention do not. Speculative decoding meets new shapes all the
time (each draft length at each cache length), autoregressive decoding only (1, length). This script
grows the embedded target's cache by passes of ``--width`` tokens, times each pass, rolls back and
replays the same passes: first visit against second visit, with PyTorch's default SDPA backends
(cuDNN allowed: specot's ``sdpa_without_cudnn`` patched out for that arm) and with specot's own
choice (cuDNN left out, ``specot.models.device.sdpa_without_cudnn``). Session 27's run left cuDNN
out with PyTorch's global flag instead, before specot did so itself.

    python scripts/sdpa_shapes.py --device cuda --out sdpa_shapes.json
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from typing import Iterator
from unittest import mock

import torch

import specot.models.hf as hf_mod
from specot.api import load_target
from specot.envinfo import environment_info
from specot_lab.bench.script_io import device_sync, write_record


@torch.inference_mode()
def _visits(target, context: list[int], width: int, passes: int, seed: int) -> tuple[list[float], list[float]]:
    """Pass times (ms) over ``passes`` passes of ``width`` tokens growing the cache from ``context``:
    the first visit, then the same passes again after a rollback. ``width = 0``: a 2 x 3 draft tree
    (two chains of three, one masked pass) at each length, the cache then grown by 3 plain tokens."""
    gen = torch.Generator().manual_seed(seed)
    chunks = [torch.randint(0, target.vocab_size, (width or 6,), generator=gen).tolist() for _ in range(passes)]
    out = []
    for _ in range(2):
        target.rollback(len(context))
        times = []
        for toks in chunks:
            b = len(target.cached_ids)
            device_sync(target.device)
            t0 = time.perf_counter()
            if width:
                target.forward(toks)
            else:
                target.forward_tree(toks, [b - 1, b, b + 1, b - 1, b + 3, b + 4])
            device_sync(target.device)
            times.append(1000.0 * (time.perf_counter() - t0))
            if not width:
                target.rollback(b)
                target.forward(toks[:3])
        out.append(times)
    return out[0], out[1]


@contextlib.contextmanager
def _cudnn_attention(allowed: bool) -> Iterator[None]:
    """PyTorch's own kernel choice (cuDNN allowed) or specot's: the target's passes leave cuDNN out
    (``sdpa_without_cudnn`` in ``CausalLM._run``), so the cuDNN arm switches that context off."""
    with mock.patch.object(hf_mod, "sdpa_without_cudnn",
                           (lambda device: contextlib.nullcontext()) if allowed else hf_mod.sdpa_without_cudnn):
        yield


def _measure(tgt, context: list[int], args: argparse.Namespace, cudnn: bool) -> list[dict]:
    rows = []
    for i, w in enumerate(int(x) for x in args.widths.split(",")):
        # a context of a length not met before, so every shape is new on the first visit
        ctx = context + [int(t) for t in torch.randint(0, tgt.vocab_size, (37 * (i + 1) + 101 * (not cudnn),))]
        tgt.rollback(len(context))
        tgt.forward(ctx[len(context):])
        first, second = _visits(tgt, ctx, w, args.passes, seed=i)
        row = {"cudnn_sdp": cudnn, "width": w, "passes": args.passes,
               "first_visit_ms_median": statistics.median(first), "second_visit_ms_median": statistics.median(second),
               "first_visit_ms": first, "second_visit_ms": second}
        rows.append(row)
        print(f"cudnn_sdp={cudnn} width={w}: first visit {row['first_visit_ms_median']:.1f} ms, "
              f"second {row['second_visit_ms_median']:.1f} ms (medians of {args.passes} passes)")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--passes", type=int, default=24)
    ap.add_argument("--widths", default="1,5,0", help="pass widths; 0 = a 2 x 3 draft tree")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    tgt = load_target(None, dtype="bfloat16", device=args.device)
    context = tgt.encode_prompt("Write a Python function that checks whether a string is a palindrome.")
    tgt.reset()
    tgt.logits_after(context)
    _visits(tgt, context, 1, 4, seed=99)  # warm-up of the kernels themselves
    rows = []
    for cudnn in (True, False):
        with _cudnn_attention(cudnn):
            rows += _measure(tgt, context, args, cudnn)
    write_record(args.out, "sdpa_shapes", "sdpa_shapes.py", argv, rows=rows, device=args.device,
                 environment=environment_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
