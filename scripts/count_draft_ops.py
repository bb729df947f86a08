"""Count the operations one target step and one EAGLE draft dispatch (docs/engine.md, "What the
H100 showed in session 15"): on a launch-bound GPU host each is a kernel launch, host-to-device
copies (``lift_fresh``) and ``.item()`` reads (``_local_scalar_dense``) are syncs.

    python scripts/count_draft_ops.py [--device cuda] [--max-new-tokens 48]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

import specot
from specot.api import load_target
from specot.drafting import eagle
from specot.engine import GenerationConfig, autoregressive_generate
from specot.sampling import SamplingConfig

PROMPT = "Write a Python function that checks whether a string is a palindrome."
WATCH = ("aten.lift_fresh.default", "aten._local_scalar_dense.default", "aten._to_copy.default", "aten.cat.default")


class OpCounter(TorchDispatchMode):
    """Counts dispatched operations by phase (``"draft"`` inside the EAGLE drafter, else ``"target"``)."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "target"
        self.counts: dict[str, int] = {}
        self.draft_ops: dict[str, int] = {}
        self.calls: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counts[self.phase] = self.counts.get(self.phase, 0) + 1
        if self.phase == "draft":
            self.draft_ops[str(func)] = self.draft_ops.get(str(func), 0) + 1
        return func(*args, **(kwargs or {}))


def _attribute_drafter_to(counter: OpCounter) -> None:
    for name in ("propose", "update"):
        method = getattr(eagle.EagleDrafter, name)

        def wrapped(self: Any, *a: Any, _m: Any = method, _n: str = name, **k: Any) -> Any:
            counter.calls[_n] = counter.calls.get(_n, 0) + 1
            before, counter.phase = counter.phase, "draft"
            try:
                return _m(self, *a, **k)
            finally:
                counter.phase = before

        setattr(eagle.EagleDrafter, name, wrapped)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args(argv)
    tgt = load_target(None, dtype="bfloat16", device=args.device)
    counter = OpCounter()
    _attribute_drafter_to(counter)
    ids = tgt.encode_prompt(PROMPT)
    for t in (0.0, 1.0):
        counter.counts.clear()
        with counter:
            ar = autoregressive_generate(tgt, ids, GenerationConfig(max_new_tokens=args.max_new_tokens,
                                                                    sampling=SamplingConfig(t)),
                                         generator=specot.make_generator(0, args.device))
        print(f"T={t}: autoregressive, {counter.counts['target'] / len(ar.tokens):.0f} operations per token")
        for tally in (counter.counts, counter.draft_ops, counter.calls):
            tally.clear()
        with counter:
            rep = specot.generate(PROMPT, target=tgt, draft="eagle", temperature=t, device=args.device,
                                  max_new_tokens=args.max_new_tokens, seed=0)
        n = max(counter.calls.get("propose", 0), 1)
        per = {k.split(".")[1]: round(v / n, 1) for k, v in counter.draft_ops.items() if k in WATCH}
        print(f"T={t}: eagle, {rep.result.stats.target_calls} target passes, "
              f"{counter.counts.get('target', 0) / max(rep.result.stats.target_calls, 1):.0f} operations per pass "
              f"outside the drafter, {counter.counts.get('draft', 0) / n:.0f} per propose+update; per propose: {per}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
