"""The handler of ``specot calibrate`` (:mod:`specot.cli.calibrate`): it loads a target (torch)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

from ..calibration import (DEFAULT_REPEATS, DEFAULT_WIDTHS, PassCostCurve, break_even_alpha, calibrate,
                           calibration_key, calibration_path)
from ..drafting.hybrid import model_drafter
from ..engine.types import GenerationConfig
from ..outputs import atomic_path, check_output, dumps
from ..plan import make_plan, run_plan
from ..plan.auto import AutoChoice, with_draft_model
from ..plan.draft_verdict import (CALIBRATION_PROMPTS, CALIBRATION_TOKENS, PAYS_AT, VERDICT_TEMPERATURES, DraftVerdict,
                                  draft_verdict_key, predicted_speedup, read_verdicts, store_verdict)
from ..plan.backends import available_backends, get_backend
from ..sampling import SamplingConfig

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


def _timed(plan: Any, target: Any, drafter: Any, ids: list[int], cfg: GenerationConfig,
           ver: Any) -> tuple[float, float, Any]:
    """``(seconds, seconds to the first committed tokens, stats and tokens)`` of one run of ``plan``."""
    first: list[float] = []
    t0 = time.perf_counter()

    def on_tokens(batch: list[int]) -> None:
        if not first:
            first.append(time.perf_counter() - t0)

    result = run_plan(plan, target, drafter, ids, cfg, ver, on_tokens=on_tokens)
    total = time.perf_counter() - t0
    return total, first[0] if first else total, result


def _priced_model(drafter: Any, draft: str) -> float:
    """d, the draft model's measured pass in one-token target passes (a hybrid's model drafter's).

    Raises:
        ValueError: ``draft`` has no measured draft-model pass.
    """
    pricing = getattr(model_drafter(drafter), "pricing", None)
    if pricing is None:
        raise ValueError(f"--draft {draft!r}: not a draft model whose pass this backend measures (a GGUF draft "
                         "model, xvocab[-slem]:PATH.gguf, or suffix+ one of them), or SPECOT_CALIBRATE is 0")
    return float(pricing.pricer.draft_cost)


def _methods(target: Any, backend: str, draft: str, T: float) -> dict[str, tuple[Any, Any, Any]]:
    """``{method: (plan, drafter, verifier)}`` at temperature ``T``: ``plain`` decoding, ``auto``
    (its backend's table alone, where it has one) and ``draft``, what ``auto`` would run with the
    draft model (:func:`specot.plan.auto.with_draft_model`), each loaded once.

    Raises:
        ValueError: ``draft`` names no draft model.
    """
    table = get_backend(backend).auto
    choices = {"plain": AutoChoice("none", None, None)}
    if table is not None:
        choices["auto"] = table.at(T)
    choices["draft"] = with_draft_model(table.at(T), draft) if table is not None else AutoChoice(draft, None, None)
    out = {}
    for m, c in choices.items():
        plan = make_plan(c.draft, target=target, temperature=T, n=c.children, gamma=c.gamma, **c.draft_options)
        if m == "draft" and plan.draft is None:
            raise ValueError(f"--draft {draft!r}: name a draft model (e.g. xvocab-slem:PATH.gguf or PATH.gguf)")
        loaded = plan.draft.load(target, dtype=plan.dtype, device=plan.device) if plan.draft is not None else None
        out[m] = (plan, loaded, plan.verifier.build())
    return out


def _draft_verdicts(target: Any, backend: str, draft: str, curve: PassCostCurve) -> list[DraftVerdict]:
    """Measure and cache whether ``draft`` pays for ``target`` (:mod:`specot.plan.draft_verdict`), one
    verdict per temperature of :data:`~specot.plan.draft_verdict.VERDICT_TEMPERATURES`: each
    calibration prompt decoded by every method of :func:`_methods` in turn (after one short warm-up
    of each), each run's time less the shortest time to the first committed tokens among the
    prompt's runs (the target's pass over the prompt, common to all, left out; a draft model's own
    pass over it kept in).

    Raises:
        ValueError: ``draft`` is no draft model, or its pass cost is not measured.
    """
    key = draft_verdict_key(target, backend)
    prompts = [target.encode_prompt(p) for p in CALIBRATION_PROMPTS]  # a chat turn where there is a template
    out = []
    for T in VERDICT_TEMPERATURES:
        methods = _methods(target, backend, draft, T)
        drafter = methods["draft"][1]
        d = _priced_model(drafter, draft)
        warm = GenerationConfig(max_new_tokens=4, sampling=SamplingConfig(temperature=T), seed=0)
        for plan, loaded, ver in methods.values():
            run_plan(plan, target, loaded, prompts[0], warm, ver)
        seconds = dict.fromkeys(methods, 0.0)
        tokens = dict.fromkeys(methods, 0)
        sizes: list[int] = []
        emitted: list[int] = []
        passes = 0
        for seed, ids in enumerate(prompts):
            cfg = GenerationConfig(max_new_tokens=CALIBRATION_TOKENS, sampling=SamplingConfig(temperature=T), seed=seed)
            runs = {}
            for m, (plan, loaded, ver) in methods.items():
                suffix = getattr(loaded, "suffix", None)  # a hybrid's suffix lookups are no draft passes
                lookups = getattr(suffix, "calls", 0)
                runs[m] = _timed(plan, target, loaded, ids, cfg, ver)
                if m == "draft":
                    stats = runs[m][2].stats
                    sizes += stats.tree_sizes
                    emitted += [a + 1 for a in stats.accepted_lengths]
                    passes += stats.draft_calls - (getattr(suffix, "calls", 0) - lookups)
            prompt_pass = min(ttft for _, ttft, _ in runs.values())  # the target's, common to all
            for m, (total, _, result) in runs.items():
                seconds[m] += total - prompt_pass
                tokens[m] += len(result.tokens)
        rate = {m: tokens[m] / seconds[m] if seconds[m] > 0 else 0.0 for m in methods}
        if not sizes or not all(rate.values()):
            raise ValueError(f"--draft {draft!r}: the calibration prompts ended before a drafted step")
        print(f"measured {methods['draft'][0].describe()} at T = {T:g}", file=sys.stderr)
        base = rate.get("auto", rate["plain"])
        verdict = DraftVerdict(draft, T, round(rate["draft"] / base, 4), round(rate["draft"] / rate["plain"], 4),
                               round(predicted_speedup(sizes, emitted, curve.ratio, d * passes), 4),
                               round(sum(emitted) / len(emitted), 4), round(d, 4), sum(emitted))
        rec = store_verdict(key, verdict) if key is not None else {"measured_at": ""}
        out.append(dataclasses.replace(verdict, measured_at=rec["measured_at"]))
    return out


def _verdicts(target: Any, backend: str, draft: str, curve: PassCostCurve, refresh: bool) -> list[DraftVerdict]:
    """The cached verdicts of ``draft`` at every temperature class, else (or with ``refresh``) measured."""
    key = draft_verdict_key(target, backend)
    cached = [] if refresh else [v for T in VERDICT_TEMPERATURES for v in read_verdicts(key, T) if v.draft == draft]
    return cached if len(cached) == len(VERDICT_TEMPERATURES) else _draft_verdicts(target, backend, draft, curve)


def _print_verdicts(verdicts: list[DraftVerdict]) -> None:
    for v in verdicts:
        use = "auto uses it" if v.pays else "auto keeps its table"
        print(f"draft {v.draft} at T = {v.temperature:g} ({v.measured_at}): {v.measured:.3f}x over auto without it, "
              f"{v.vs_plain:.3f}x over plain decoding (predicted {v.predicted:.3f}x; block efficiency "
              f"{v.block_efficiency:.2f}, d = {v.draft_cost:.3f}, {v.tokens} tokens) -> {use} (from {PAYS_AT:g}x)")


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
    verdicts = _verdicts(target, name, args.draft, curve, args.refresh) if getattr(args, "draft", None) else []
    label = f"{getattr(target, 'name', 'target')}: {name}, {curve.key.get('threads')} threads"
    if args.plot is not None:
        _plot(curve, args.plot, label)
    if args.json:
        print(dumps({"target": getattr(target, "name", None), "backend": name, "source": curve.source,
                          "cache_file": str(path) if path is not None else None, "curve": curve.to_dict(),
                          "rows": rows, "step_work": work,
                          "draft_verdicts": [{**dataclasses.asdict(v), "pays": v.pays} for v in verdicts],
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
    _print_verdicts(verdicts)
    if path is not None:
        print(f"cache: {path}")
    if args.plot is not None:
        print(f"plot: {args.plot}")
    return 0
