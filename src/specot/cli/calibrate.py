"""``specot calibrate``: measure (or show the cached) pass-cost curve of a target on this machine.

``specot calibrate [--backend auto|llamacpp|transformers] [--target T] [--draft DRAFT] [--refresh] [--json]
[--plot FILE.png]``
prints, for each pass width B, the median time of one pass t(B) in ms, its ratio to a one-token pass
r(B) = t(B)/t(1), and the break-even acceptance of a chain of γ = B − 1 drafts (the i.i.d. acceptance
α at which it pays for its wider pass, :func:`specot.calibration.break_even_alpha`; "never" when
even α = 1 does not). The curve is what the suffix drafter prices its drafts with on the llama.cpp
backend (:mod:`specot.calibration`); it is cached per model file, backend, threads, CPU and library
versions, so a second call only reads it (``--refresh`` measures again). Where the backend's ``auto``
prices a drafted step's own work by measurement (llama.cpp: the suffix drafter's proposal,
verification and update, :mod:`specot.plan.step_work`), that measurement is shown, cached and
refreshed with the curve. Timings on a busy machine are noisy: the output carries the load average
at the measurement.

``--draft DRAFT`` also measures whether a draft model pays for the target here
(:mod:`specot.plan.draft_verdict`): it decodes :data:`~specot.plan.draft_verdict.CALIBRATION_PROMPTS`
at temperature 0 and 1 plainly, with ``auto`` as its backend's table plans it and with that plan
plus the draft model, times each and prices the draft's iterations with the measured costs, and
caches the verdict, which ``auto`` reads (a second call only reads it; ``--refresh`` measures again).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from . import catalog
from .command import DeferredHandler, count

__all__ = ["register"]

#: The module of the handler (imported when the command runs: it imports torch).
_HANDLER = "specot.cli.calibrate_run"


def _widths(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"widths must be integers separated by commas, got {text!r}") from None


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``specot calibrate`` to the CLI."""
    p = sub.add_parser(
        "calibrate",
        help="measure the pass-cost curve r(B) = t(B)/t(1) of a target on this machine (cached)",
        description="Measure (or show the cached) cost of one target pass over B new tokens relative to a one-token "
                    "pass, and the acceptance a chain of B - 1 drafts needs to pay for it. The llama.cpp backend's "
                    "auto plan prices its drafts with this curve.",
    )
    p.add_argument("--backend", default="auto",
                   help=f"'auto' (default: llamacpp where installed, else transformers) or an installed backend: "
                        f"{', '.join(catalog.backend_names())}")
    p.add_argument("--target", default=None,
                   help="target model: 'smollm2' (embedded default), a .gguf file (llamacpp), a local directory or hub "
                        "id (transformers)")
    p.add_argument("--device", default="cpu", help="device (transformers; default cpu)")
    p.add_argument("--dtype", default="auto", help="dtype (transformers; default auto)")
    p.add_argument("--widths", type=_widths, default=None,
                   help="pass widths B, ascending from 1, e.g. 1,2,3,5 (default: those specot's plans run, "
                        "specot.calibration.DEFAULT_WIDTHS)")
    p.add_argument("--repeats", type=count(1), default=None,
                   help="timed passes per width, median taken (default: specot.calibration.DEFAULT_REPEATS)")
    p.add_argument("--draft", default=None, metavar="DRAFT",
                   help="also measure whether the draft model DRAFT (as --draft of specot generate, e.g. "
                        "xvocab-slem:SmolLM2.gguf or DRAFT.gguf) pays for the target on this machine: decodes four "
                        "built-in prompts at temperature 0 and 1 plainly, with auto, and with auto plus the draft "
                        "model; auto then adds it where it measured 1.10x over auto without it (cached)")
    p.add_argument("--refresh", action="store_true",
                   help="measure again even when a cached curve (and --draft verdict) exists")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", type=Path, default=None, metavar="FILE.png",
                   help="also plot r(B) against the ideal r = 1 and r = B (matplotlib); an existing file is replaced "
                        "only when specot calibrate wrote it, or with --force")
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")
    p.set_defaults(func=DeferredHandler(_HANDLER, "cmd_calibrate"))
