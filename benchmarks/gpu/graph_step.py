"""What would CUDA graphs buy a launch-bound target pass? (docs/engine.md, "Measured on GPUs".)

On an H200 a 1-token pass of the 135 M embedded target costs about 18 ms eagerly, almost all of it
the host launching some 1 700 kernels (its profile). A CUDA graph replays a captured pass
with one launch. This script times one pass of ``Q`` new tokens at a fixed cache length, four ways:

- ``eager_dynamic``: specot's own pass (``CausalLM.forward`` over a ``DynamicCache``), what the
  engine runs today;
- ``eager_static``: the model over a transformers ``StaticCache`` of ``--cache-len`` slots with
  static input buffers (ids ``[1, Q]``, position ids ``[1, Q]``, an additive mask ``[1, 1, Q, L]``);
- ``graph``: the same call captured once with ``torch.cuda.CUDAGraph`` (no ``torch.compile``: a
  capture costs a warm-up pass, not minutes of compilation) and replayed; CUDA only;
- and checks that the replay's logits equal the eager static pass's (same kernels, same inputs).

Before each pass the static cache's running length is set back, so every pass writes the same
slots: ``Q = 1`` is an autoregressive step, ``Q = 8`` a verification pass of a draft tree.

    python benchmarks/gpu/graph_step.py --device cuda --out graph_step.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from transformers import StaticCache

from specot.api import load_target
from specot.envinfo import environment_info
from specot.models.cache import crop_cache
from specot.models.device import sdpa_without_cudnn
from specot_lab.bench.script_io import device_sync, write_record


def _timed(fn, reps: int, device) -> list[float]:
    """Wall times (ms) of ``reps`` calls of ``fn``, each waited for."""
    out = []
    for _ in range(reps):
        device_sync(device)
        t0 = time.perf_counter()
        fn()
        device_sync(device)
        out.append(1000.0 * (time.perf_counter() - t0))
    return out


@torch.inference_mode()
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--context", type=int, default=200, help="cached positions before each timed pass")
    ap.add_argument("--cache-len", type=int, default=512, help="slots of the static cache")
    ap.add_argument("--widths", default="1,8", help="new tokens per pass")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    tgt = load_target(None, dtype=args.dtype, device=args.device)
    model = tgt.model
    gen = torch.Generator().manual_seed(0)
    ctx = torch.randint(0, tgt.vocab_size, (args.context,), generator=gen)
    C, L = args.context, args.cache_len
    rows = []
    with sdpa_without_cudnn(dev):
        cache = StaticCache(config=model.config, max_cache_len=L)
        model(input_ids=ctx[None].to(dev), past_key_values=cache, use_cache=True)  # prefill, eager
        for Q in (int(w) for w in args.widths.split(",")):
            new = torch.randint(0, tgt.vocab_size, (Q,), generator=gen)
            # the engine's pass today
            tgt.reset()
            tgt.forward(ctx)

            def dynamic() -> None:
                tgt.rollback(C)
                tgt.forward(new)

            dynamic()
            t_dyn = _timed(dynamic, args.reps, dev)
            # static buffers: what a captured graph reads
            ids = new[None].to(dev)  # [1, Q]
            pos = (C + torch.arange(Q))[None].to(dev)  # [1, Q]
            visible = torch.arange(L)[None, :] <= (C + torch.arange(Q))[:, None]  # [Q, L] causal
            mask = torch.zeros(Q, L, dtype=tgt.dtype).masked_fill(~visible, torch.finfo(tgt.dtype).min)
            mask = mask[None, None].to(dev)  # [1, 1, Q, L]

            def static_call():
                return model(input_ids=ids, position_ids=pos, attention_mask=mask, past_key_values=cache,
                             use_cache=True).logits

            def static() -> torch.Tensor:
                crop_cache(cache, C)
                return static_call()

            ref = static().float().clone()
            t_static = _timed(static, args.reps, dev)
            row = {"width": Q, "context": C, "cache_len": L, "reps": args.reps,
                   "eager_dynamic_ms": statistics.median(t_dyn), "eager_static_ms": statistics.median(t_static)}
            if dev.type == "cuda":
                try:
                    s = torch.cuda.Stream()
                    s.wait_stream(torch.cuda.current_stream())
                    with torch.cuda.stream(s):  # warm-up on a side stream, as torch.cuda.graphs asks
                        for _ in range(2):
                            static()
                    torch.cuda.current_stream().wait_stream(s)
                    graph = torch.cuda.CUDAGraph()
                    crop_cache(cache, C)
                    t0 = time.perf_counter()
                    with torch.cuda.graph(graph):
                        out = static_call()
                    row["capture_s"] = time.perf_counter() - t0

                    def replay() -> None:
                        crop_cache(cache, C)
                        graph.replay()

                    replay()
                    device_sync(dev)
                    row["graph_max_abs_diff"] = float((out.float() - ref).abs().max())
                    row["graph_equal"] = bool(torch.equal(out.float(), ref))
                    row["graph_ms"] = statistics.median(_timed(replay, args.reps, dev))
                except Exception as exc:  # noqa: BLE001 - the measurement records why capture failed
                    row["graph_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            print(row)
            rows.append(row)
    write_record(args.out, "graph_step", "gpu/graph_step.py", argv, rows=rows, device=args.device, dtype=args.dtype,
                 environment=environment_info())
    return 0


if __name__ == "__main__":
    sys.exit(main())
