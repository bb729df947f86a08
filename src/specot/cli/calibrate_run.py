"""The handler of ``specot calibrate`` (:mod:`specot.cli.calibrate`): it loads a target (torch)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..calibration import (DEFAULT_REPEATS, DEFAULT_WIDTHS, PassCostCurve, break_even_alpha, calibrate,
                           calibration_key, calibration_path)
from ..outputs import atomic_path, check_output, dumps
from ..plan import make_plan
from ..plan.backends import available_backends, get_backend

__all__ = ["cmd_calibrate"]


def _backend_name(asked: str) -> str:
    """``asked``, or for ``"auto"`` llamacpp where it is installed and available, else transformers."""
    if asked != "auto":
        return asked
    if "llamacpp" in available_backends() and get_backend("llamacpp").available():
        return "llamacpp"
    return "transformers"


def _rows(curve: PassCostCurve) -> list[dict[str, Any]]:
    return [{"B": b, "t_ms": t, "r": r, "gamma": b - 1, "break_even_alpha": break_even_alpha(b - 1, curve)}
            for b, t, r in zip(curve.widths, curve.t_ms, curve.ratios)]


def _plot(curve: PassCostCurve, path: Path, label: str) -> None:
    """r(B) against r = 1 (a free wide pass, Leviathan's model) and r = B (no batching gain)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.6))
    w = list(curve.widths)
    ax.plot(w, curve.ratios, "o-", label="measured r(B)")
    ax.plot(w, [1.0] * len(w), "--", color="grey", label="r = 1 (wide pass free)")
    ax.plot(w, w, ":", color="black", label="r = B (no gain from batching)")
    ax.set_xlabel("pass width B (tokens)")
    ax.set_ylabel("r(B) = t(B) / t(1)")
    ax.set_title(label, fontsize=8)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, metadata={"Software": PLOT_MARK})
    plt.close(fig)


#: The PNG text chunk ``Software`` of the plots ``specot calibrate`` writes: a later run may replace them.
PLOT_MARK = "specot calibrate"


def _our_plot(path: Path) -> bool:
    """Whether ``path`` is a PNG that ``specot calibrate`` wrote (its ``Software`` text chunk)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"Software\x00" + PLOT_MARK.encode() in head


def _step_work(target: Any, refresh: bool) -> dict[str, Any] | None:
    """The measured work of a drafted step that prices ``auto``'s drafts on ``target`` (with its
    ``draft_overhead``), when ``auto`` there measures it; else None."""
    plan = make_plan("auto", target=target, temperature=0.0)
    spec = plan.draft
    if spec is None or spec.kind != "suffix" or spec.option("suffix_draft_overhead") != "measure":
        return None
    overhead, rec = spec.kind_obj.step_work(spec, target, refresh=refresh)
    return None if rec is None else {**rec, "draft_overhead": overhead}


def cmd_calibrate(args: argparse.Namespace) -> int:
    """``specot calibrate``: measure or read the target's curve, print the table (or one JSON object),
    optionally plot it; returns 0.

    Raises:
        ValueError / OSError / ImportError: a target or backend that cannot load, bad widths.
    """
    check_output(args.plot, "--plot", force=getattr(args, "force", False), ours=_our_plot)  # before the load
    name = _backend_name(args.backend)
    target = get_backend(name).load(args.target, dtype=args.dtype, device=args.device)
    curve = calibrate(target, widths=DEFAULT_WIDTHS if args.widths is None else args.widths,
                      repeats=DEFAULT_REPEATS if args.repeats is None else args.repeats, refresh=args.refresh)
    path = calibration_path(calibration_key(target))
    rows = _rows(curve)
    work = _step_work(target, args.refresh)
    label = f"{getattr(target, 'name', 'target')}: {name}, {curve.key.get('threads')} threads"
    if args.plot is not None:
        _plot(curve, args.plot, label)
    if args.json:
        print(dumps({"target": getattr(target, "name", None), "backend": name, "source": curve.source,
                          "cache_file": str(path) if path is not None else None, "curve": curve.to_dict(),
                          "rows": rows, "step_work": work,
                          "plot": str(args.plot) if args.plot is not None else None}))
        return 0
    where = "measured now" if curve.source == "measured" else f"cached ({curve.measured_at})"
    print(f"pass-cost curve of {label}, {where}; load average then {curve.load_average}")
    print(f"{'B':>3} {'t(B) ms':>9} {'r(B)':>6}  break-even α of a chain of γ = B - 1")
    for r in rows:
        be = "-" if r["gamma"] == 0 else ("never" if r["break_even_alpha"] is None else f"{r['break_even_alpha']:.3f}")
        print(f"{r['B']:>3} {r['t_ms']:>9.2f} {r['r']:>6.2f}  {be}")
    if work is not None:
        v = work["values"]
        when = "measured now" if work["source"] == "measured" else f"cached ({work['measured_at']})"
        print(f"a drafted step's own work (suffix drafter, {when}): {v['chain_ms']:.3f} ms for a chain of "
              f"{v['chain_nodes']:g} against {v['plain_ms']:.3f} ms for a plain step: "
              f"{work['draft_overhead']:g} one-token passes more, priced into every chain")
    if path is not None:
        print(f"cache: {path}")
    if args.plot is not None:
        print(f"plot: {args.plot}")
    return 0
