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

from .command import DeferredHandler

__all__ = ["register"]

_LAWS = ("iid", "wor", "cps", "greedy", "spechub")
#: The module of the handlers (imported when a theory command runs: it imports torch).
_HANDLERS = "specot.cli.theory_run"


def _unit(x: str) -> float:
    v = float(x)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [0, 1], got {x}")
    return v


def _nonneg(x: str) -> float:
    v = float(x)
    if not v >= 0.0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {x}")
    return v


def _pos_int(x: str) -> int:
    v = int(x)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {x}")
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
    a.add_argument("--json", help="also write the results to this JSON file")
    a.set_defaults(func=DeferredHandler(_HANDLERS, "cmd_alpha"))

    s = tsub.add_parser("speedup", help="speedup table over gamma (Leviathan et al. Sec. 3)")
    s.add_argument("--alpha", type=_unit, required=True, help="acceptance rate in [0, 1]")
    s.add_argument("--c", type=_nonneg, required=True, help="cost coefficient: draft step time / target step time")
    s.add_argument("--max-gamma", type=_pos_int, default=10, help="largest gamma in the table (default 10)")
    s.add_argument("--c-hat", type=_nonneg, default=None, help="ops ratio for the arithmetic-operations column")
    s.set_defaults(func=DeferredHandler(_HANDLERS, "cmd_speedup"))

    pl = tsub.add_parser("plots", help="write the theory figures (PNG)")
    pl.add_argument("--out", required=True, help="output directory")
    pl.set_defaults(func=DeferredHandler(_HANDLERS, "cmd_plots"))
