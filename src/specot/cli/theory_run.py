"""The handlers of ``specot theory`` (:mod:`specot.cli.theory`): they import the theory (torch)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ..outputs import check_output, write_json
from ..theory import improvement_lower_bound, operations_factor, optimal_acceptance, optimal_gamma, speedup_table
from ..theory.plots import PLOT_FILES, make_plots
from ..verifiers import DraftLaw, available_verifiers, get_verifier

__all__ = ["cmd_alpha", "cmd_speedup", "cmd_plots"]


def _load_vector(path: str, name: str) -> np.ndarray:
    """Load a probability vector from ``.npy`` or ``.pt`` (a tensor, or a dict with one tensor)."""
    f = Path(path)
    if not f.exists():
        raise FileNotFoundError(f"{name} file not found: {path}")
    if not f.is_file():
        raise ValueError(f"{name} {path} is a directory; name a .npy or .pt file holding one vector [V]")
    if f.suffix == ".npy":
        try:
            arr = np.load(f, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            why = "no NumPy header" if "pickled" in str(exc) else str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"{name} file {path} is not a readable .npy array ({why}); write one with "
                             "numpy.save(path, probabilities)") from None
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{name} file {path} holds an .npz archive, not one .npy array; use numpy.save")
    elif f.suffix in (".pt", ".pth"):
        import pickle

        import torch

        try:
            obj = torch.load(f, map_location="cpu", weights_only=True)
        except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, OSError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"{name} file {path} is not a readable torch file ({first[:120]}); write one with "
                             "torch.save(tensor, path)") from None
        if isinstance(obj, dict) and len(obj) == 1:
            obj = next(iter(obj.values()))
        if not isinstance(obj, torch.Tensor):
            raise ValueError(f"{name} file {path} must hold one tensor, got {type(obj).__name__}")
        arr = obj.detach().to(torch.float64).numpy()
    else:
        raise ValueError(f"{name} file {path}: unsupported extension {f.suffix!r}; use .npy or .pt")
    arr = np.asarray(arr)
    if arr.ndim == 2 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one vector [V], got shape {arr.shape} from {path}")
    if not np.issubdtype(arr.dtype, np.floating):
        raise ValueError(f"{name} must hold floating-point probabilities, got dtype {arr.dtype} in {path}")
    return arr.astype(np.float64)


def _verifier_rows(p: np.ndarray, q: np.ndarray, n: int, law: str) -> list[tuple[str, str]]:
    """(name, acceptance text) for every registered verifier valid for ``law`` with n drafts."""
    import torch


    rows: list[tuple[str, str]] = []
    if law not in {v.value for v in DraftLaw}:
        return rows  # cps: no specot drafter samples it, so no verifier is built for it
    pt, qt = torch.from_numpy(p)[None], torch.from_numpy(q)[None]
    for name in available_verifiers():
        try:
            v = get_verifier(name, law=law) if name == "otm" else get_verifier(name)
        except (ValueError, TypeError):
            continue
        try:
            v.check_construction(law, n)
        except ValueError:
            continue
        if not getattr(v, "lossless", True) or not callable(getattr(v, "acceptance", None)):
            continue  # lossy, or a sequence-level verifier with no per-position acceptance
        try:
            acc = v.acceptance(pt, qt, n)
        except (ValueError, NotImplementedError) as exc:
            rows.append((name, f"n/a ({str(exc).splitlines()[0][:60]})"))
            continue
        val = float(acc.value.reshape(-1)[0])
        txt = f"{val:.9f}" if acc.exact else f"{val:.6f} ± {float(acc.stderr.reshape(-1)[0]):.2g} (MC)"
        rows.append((name, txt))
    return rows


def cmd_alpha(args: argparse.Namespace) -> int:
    """``specot theory alpha`` (module docstring of :mod:`specot.cli.theory`).

    Raises:
        FileNotFoundError / ValueError: a missing or unreadable probability file, a bad vector.
    """
    check_output(args.json, "--json", force=args.force)
    p = _load_vector(args.target_probs, "--target-probs")
    q = _load_vector(args.draft_probs, "--draft-probs")
    laws = args.law or ["iid", "wor", "cps", "greedy"]
    results = {}
    lines = [f"V = {p.shape[0]}, n = {args.n}"]  # printed once every law is computed: an error prints nothing else
    for law in laws:
        try:
            r = optimal_acceptance(p, q, args.n, law)
        except ValueError as exc:
            if len(laws) > 1 and ("needs at least" in str(exc) or "SpecHub" in str(exc)):
                lines.append(f"  {law:8s} skipped: {exc}")
                continue
            raise
        assert not isinstance(r, list)
        results[law] = {"alpha": r.alpha, "H_size": int(r.H.size), "method": r.method, "law": r.law_description}
        lines.append(f"  alpha*[{law}] = {r.alpha:.12f}   |H*| = {r.H.size:<6d} {r.method:30s} ({r.law_description})")
        if args.verifiers:
            rows = _verifier_rows(p, q, args.n, law)
            results[law]["verifiers"] = dict(rows)
            if not rows:
                lines.append("      (no registered verifier is valid for this law)")
            for name, txt in rows:
                lines.append(f"      verifier {name:10s} acceptance {txt}")
    if args.json:
        write_json(args.json, results)
    for line in lines:
        print(line)
    return 0


def cmd_speedup(args: argparse.Namespace) -> int:
    """``specot theory speedup``: the speedup table over γ with the optimum marked."""
    rows = speedup_table(args.alpha, args.c, args.max_gamma)
    opt = optimal_gamma(args.alpha, args.c, max(256, args.max_gamma))
    head = f"{'gamma':>5} {'E[tokens]':>10} {'walltime x':>11}"
    if args.c_hat is not None:
        head += f" {'ops factor':>11}"
    print(f"alpha = {args.alpha}, c = {args.c}  (Leviathan et al. 2023, Sec. 3)")
    print(head)
    for r in rows:
        line = f"{r['gamma']:>5d} {r['expected_tokens']:>10.4f} {r['improvement']:>11.4f}"
        if args.c_hat is not None:
            line += f" {float(operations_factor(args.alpha, r['gamma'], args.c_hat)):>11.4f}"
        print(line + ("   <- optimal" if r["optimal"] else ""))
    print(f"optimal gamma = {opt.gamma} (improvement {opt.improvement:.4f}, E[tokens] {opt.expected_tokens:.4f})")
    if opt.gamma > args.max_gamma:
        print(f"  (the optimum lies beyond --max-gamma {args.max_gamma})")
    lb = float(improvement_lower_bound(args.alpha, args.c))
    if args.alpha > args.c:
        print(f"alpha > c: improvement at least (1+alpha)/(1+c) = {lb:.4f}")
    else:
        print(f"alpha <= c: speculation cannot be guaranteed to help ((1+alpha)/(1+c) = {lb:.4f})")
    return 0


def cmd_plots(args: argparse.Namespace) -> int:
    """``specot theory plots``: write the theory figures, one path a line.

    Raises:
        OSError: the output directory cannot be written.
        ValueError: a file of the figures' names there that matplotlib did not write (without ``--force``).
    """
    for name in PLOT_FILES:  # before any figure is drawn
        check_output(Path(args.out) / name, "--out", force=args.force, ours=_matplotlib_png)
    for path in make_plots(args.out):
        print(path)
    return 0


def _matplotlib_png(path: Path) -> bool:
    """Whether ``path`` is a PNG that matplotlib wrote (its ``Software`` text chunk): a figure of an
    earlier ``specot theory plots``, under one of its own names, may be drawn again."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(b"\x89PNG") and b"Software\x00Matplotlib" in head
