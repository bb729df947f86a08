"""``specot theory``: optimal acceptance α*, the speedup model and the theory figures.

* ``specot theory alpha --target-probs F --draft-probs F --n 3 [--law iid|wor|cps|greedy|spechub ...]
  [--verifiers]`` — α* for each law (default: iid, wor, cps, greedy); with ``--verifiers`` also the
  acceptance of every registered verifier that is valid for that law. Files: ``.npy`` or ``.pt``
  vectors ``[V]``.
* ``specot theory speedup --alpha A --c C [--max-gamma G] [--c-hat C]`` — the table over γ with the
  optimum marked (Leviathan et al. §3).
* ``specot theory plots --out DIR`` — writes the PNG figures of :mod:`specot.theory.plots`.
"""

from __future__ import annotations

import argparse

from .command import DeferredHandler, finite_float

__all__ = ["register", "MAX_GAMMA"]

#: The largest ``--max-gamma`` of ``theory speedup``: far beyond any useful draft length γ (the
#: expected tokens per block saturate at 1 / (1 - α) long before), and a table that still prints
#: at once.
MAX_GAMMA = 1024

_LAWS = ("iid", "wor", "cps", "greedy", "spechub")
#: The module of the handlers (imported when a theory command runs: it imports torch).
_HANDLERS = "specot.cli.theory_run"


def _unit(x: str) -> float:
    v = finite_float(x)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {x}")
    return v


def _nonneg(x: str) -> float:
    v = finite_float(x)
    if not v >= 0.0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {x}")
    return v


def _pos_int(x: str) -> int:
    try:
        v = int(x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {x!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {x}")
    return v


def _max_gamma(x: str) -> int:
    v = _pos_int(x)
    if v > MAX_GAMMA:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_GAMMA} (the table over every γ up to it; the "
                                         f"speedup saturates long before), got {x}")
    return v


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``specot theory {alpha, speedup, plots}``."""
    parser = sub.add_parser("theory", help="optimal acceptance, speedup model, theory figures")
    tsub = parser.add_subparsers(dest="theory_command", metavar="THEORY_COMMAND")
    tsub.required = True

    a = tsub.add_parser("alpha", help="optimal acceptance alpha* for each draft law (Hu et al. 2025)")
    a.add_argument("--target-probs", required=True, help="target distribution p: .npy or .pt vector [V]")
    a.add_argument("--draft-probs", required=True, help="draft distribution q: .npy or .pt vector [V]")
    a.add_argument("--n", type=_pos_int, required=True, help="number of drafts")
    a.add_argument("--law", choices=_LAWS, action="append", help="draft law (repeatable; default iid, wor, cps, greedy)")
    a.add_argument("--verifiers", action="store_true", help="also print each valid verifier's acceptance")
    a.add_argument("--json", help="also write the results to this JSON file (an existing file only with --force)")
    a.add_argument("--force", action="store_true", help="replace an existing --json file")
    a.set_defaults(func=DeferredHandler(_HANDLERS, "cmd_alpha"))

    s = tsub.add_parser("speedup", help="speedup table over gamma (Leviathan et al. Sec. 3)")
    s.add_argument("--alpha", type=_unit, required=True, help="acceptance rate in [0, 1]")
    s.add_argument("--c", type=_nonneg, required=True, help="cost coefficient: draft step time / target step time")
    s.add_argument("--max-gamma", type=_max_gamma, default=10,
                   help=f"largest gamma in the table (default 10, at most {MAX_GAMMA})")
    s.add_argument("--c-hat", type=_nonneg, default=None, help="ops ratio for the arithmetic-operations column")
    s.set_defaults(func=DeferredHandler(_HANDLERS, "cmd_speedup"))

    pl = tsub.add_parser("plots", help="write the theory figures (PNG)")
    pl.add_argument("--out", required=True, help="output directory (a file of a figure's name there is replaced only "
                    "when it is a figure, or with --force)")
    pl.add_argument("--force", action="store_true", help="replace files of the figures' names in --out")
    pl.set_defaults(func=DeferredHandler(_HANDLERS, "cmd_plots"))
