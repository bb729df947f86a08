"""Markdown tables, PNG plots and the results page (``docs/results.md``) for the bench results.

* :func:`acceptance_table` / :func:`speedup_table` — markdown tables of the JSON results of
  :mod:`specot_lab.bench.acceptance` and :mod:`specot_lab.bench.speedup`.
* :func:`acceptance_plots` — acceptance vs temperature (at one n) and vs n (at one temperature),
  per draft, each verifier next to its law's α* (dashed), like Hu et al.'s Figures 1–2.
* :func:`speedup_plots` — speedup per method at each temperature, and measured vs predicted block
  efficiency.
* :func:`update_results` — replaces the generated section of the results page,
  ``docs/results.md`` (:data:`RESULTS_FILE`; between the markers ``<!-- bench:results:start -->`` /
  ``<!-- bench:results:end -->``, or the line ``RESULTS_PLACEHOLDER`` the first time; a missing file
  is created) with tables built from the JSON files and the exact command lines that produced them.

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence
import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from specot.outputs import write_json, write_text

from .runinfo import run_info

__all__ = ["acceptance_table", "speedup_table", "acceptance_plots", "speedup_plots", "results_markdown",
           "update_results", "write_outputs", "START", "END", "RESULTS_FILE"]

START = "<!-- bench:results:start -->"
END = "<!-- bench:results:end -->"
#: The page whose generated section :func:`update_results` rewrites (the README links to it).
RESULTS_FILE = "docs/results.md"


def _f(x: Any, nd: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def _ci(lo_hi: Any, nd: int = 3) -> str:
    if not lo_hi or lo_hi[0] is None:
        return "–"
    return f"[{lo_hi[0]:.{nd}f}, {lo_hi[1]:.{nd}f}]"


def acceptance_table(res: dict[str, Any], *, temperatures: Sequence[float] | None = None,
                     ns: Sequence[int] | None = None, drafts: Sequence[str] | None = None) -> str:
    """One row per (draft, T, n, law, verifier): the acceptance α with its 95% CI (``(MC)``: a
    Rao–Blackwellised Monte-Carlo estimate), the sampled check, α* for the law, the gap α* − α
    (with CI) and the relative gap (α* − α) / α*."""
    lines = ["| draft | T | n | law | verifier | positions | α [95% CI] | sampled | α* | gap α*−α [95% CI] | gap/α* |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        if temperatures is not None and not any(abs(r["temperature"] - t) < 1e-9 for t in temperatures):
            continue
        if ns is not None and r["n"] not in ns:
            continue
        if drafts is not None and r["draft"] not in drafts:
            continue
        mc = "" if r["acceptance_method"] == "exact" else " (MC)"
        lines.append(
            f"| {r['draft']} | {r['temperature']:g} | {r['n']} | {r['law']} | {r['verifier']} | {r['positions']} | "
            f"{r['acceptance']:.3f} {_ci(r['acceptance_ci95'])}{mc} | {r['sampled_acceptance']:.3f} | {_f(r['alpha_star'])} | "
            f"{_f(r['gap'], 4)} {_ci(r['gap_ci95'], 4)} | {_rel(r.get('gap'), r.get('alpha_star'))} |")
    return "\n".join(lines)


def _rel(gap: Any, star: Any) -> str:
    """``gap / α*`` as a percentage (``–`` without α* or when α* is 0)."""
    if gap is None or not star:
        return "–"
    return f"{100.0 * gap / star:.2f}%"


def speedup_table(res: dict[str, Any]) -> str:
    """One row per (T, method): block efficiency (measured / predicted), tokens/s, the speedup
    over specot's AR (aggregate and per-prompt mean with 95% CI), over HF's AR, and the two
    predicted speedups (Leviathan's cost model; the measured target cost curve)."""
    lines = ["| T | method | block eff. | pred. (iid α̂) | acceptance α̂ | tok/s | speedup vs AR | per-prompt [95% CI] | vs HF AR | pred. Leviathan | pred. cost curve |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(
            f"| {r['temperature']:g} | {r['method']} | {_f(r['block_efficiency'], 2)} | {_f(r['predicted_block_efficiency_iid'], 2)} | "
            f"{_f(r['acceptance'], 2)} | {r['tokens_per_s']:.1f} | {r['speedup']:.2f}x | {r['speedup_per_prompt_mean']:.2f} "
            f"{_ci(r['speedup_per_prompt_ci95'], 2)} | {_f(r['speedup_vs_hf_ar'], 2)} | {_f(r['predicted_speedup_leviathan'], 2)} | "
            f"{_f(r['predicted_speedup_cost_curve'], 2)} |")
    return "\n".join(lines)


def cost_curve_table(res: dict[str, Any]) -> str:
    cc = res["cost_curve"]
    ks = sorted(cc["target_ms"], key=int)
    head = "| tokens per target pass T | " + " | ".join(ks) + " |"
    sep = "|---|" + "---|" * len(ks)
    ms = "| t(T) ms | " + " | ".join(f"{cc['target_ms'][k]:.0f}" for k in ks) + " |"
    ratio = "| t(T)/t(1) | " + " | ".join(f"{cc['target_ratio'][k]:.2f}" for k in ks) + " |"
    out = "\n".join([head, sep, ms, ratio])
    if cc.get("draft_ms"):
        out += "\n\nDraft pass (ms) by width: " + ", ".join(f"w={w}: {v:.1f}" for w, v in sorted(cc["draft_ms"].items(), key=lambda kv: int(kv[0])))
    return out


def _plt():  # noqa: ANN202

    matplotlib.use("Agg")

    return plt


def _save_figure(plt: Any, fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close ``fig``; returns ``path``."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _finish_acceptance_axes(ax: Any, xlabel: str, title: str, legend_fontsize: int) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel("acceptance rate")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=legend_fontsize)


def acceptance_plots(res: dict[str, Any], out_dir: str | os.PathLike[str], *, plot_n: int = 3,
                     plot_temperature: float = 0.7) -> list[Path]:
    """Per draft: ``acceptance_vs_temperature_<draft>.png`` (at n = ``plot_n``, or the largest n
    measured below it) and ``acceptance_vs_n_<draft>.png`` (at T = ``plot_temperature``)."""
    plt = _plt()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    rows = res["rows"]
    for draft in sorted({r["draft"] for r in rows}):
        dr = [r for r in rows if r["draft"] == draft]
        slug = draft.replace("/", "_").replace(":", "")
        ns = sorted({r["n"] for r in dr})
        n_plot = max([n for n in ns if n <= plot_n] or ns)
        temps = sorted({r["temperature"] for r in dr})
        t_plot = min(temps, key=lambda t: abs(t - plot_temperature))
        # vs temperature
        fig, ax = plt.subplots(figsize=(6, 4))
        combos = sorted({(r["law"], r["verifier"]) for r in dr if r["n"] == n_plot})
        for i, (law, ver) in enumerate(combos):
            sel = sorted((r for r in dr if r["n"] == n_plot and r["law"] == law and r["verifier"] == ver), key=lambda r: r["temperature"])
            x = [r["temperature"] for r in sel]
            y = [r["acceptance"] for r in sel]
            err = [[r["acceptance"] - r["acceptance_ci95"][0] for r in sel], [r["acceptance_ci95"][1] - r["acceptance"] for r in sel]]
            line = ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=f"{ver} ({law})")
            if sel and sel[0]["alpha_star"] is not None and (law, ver) == next(c for c in combos if c[0] == law):
                ax.plot(x, [r["alpha_star"] for r in sel], "--", color=line[0].get_color(), alpha=0.7, label=f"α* {law}")
        _finish_acceptance_axes(ax, "temperature", f"{draft}: acceptance vs temperature (n = {n_plot})", 8)
        paths.append(_save_figure(plt, fig, out / f"acceptance_vs_temperature_{slug}.png"))
        # vs n
        fig, ax = plt.subplots(figsize=(6, 4))
        combos = sorted({(r["law"], r["verifier"]) for r in dr if abs(r["temperature"] - t_plot) < 1e-9 and r["n"] > 1})
        single = [r for r in dr if abs(r["temperature"] - t_plot) < 1e-9 and r["n"] == 1]
        starred: set[str] = set()
        for law, ver in combos:
            sel = single + sorted((r for r in dr if abs(r["temperature"] - t_plot) < 1e-9 and r["law"] == law and r["verifier"] == ver),
                                  key=lambda r: r["n"])
            x = [r["n"] for r in sel]
            line = ax.plot(x, [r["acceptance"] for r in sel], marker="o", label=f"{ver} ({law})")
            if sel and sel[-1]["alpha_star"] is not None and law not in starred:
                starred.add(law)
                ax.plot(x, [r["alpha_star"] for r in sel], "--", color=line[0].get_color(), alpha=0.6, label=f"α* {law}")
        if not combos and single:
            ax.plot([1], [single[0]["acceptance"]], "o", label="speculative (n = 1)")
        _finish_acceptance_axes(ax, "number of drafts n", f"{draft}: acceptance vs n (T = {t_plot:g})", 7)
        paths.append(_save_figure(plt, fig, out / f"acceptance_vs_n_{slug}.png"))
    return paths


def speedup_plots(res: dict[str, Any], out_dir: str | os.PathLike[str]) -> list[Path]:
    """``speedup.png`` (bars: speedup over AR per method, one group per temperature) and
    ``block_efficiency_predicted.png`` (measured vs predicted block efficiency)."""
    plt = _plt()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = res["rows"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    temps = sorted({r["temperature"] for r in rows})
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(methods) + 2), 4.5))
    w = 0.8 / max(len(temps), 1)
    x = np.arange(len(methods))
    for j, t in enumerate(temps):
        by = {r["method"]: r for r in rows if r["temperature"] == t}
        ys = [by[m]["speedup"] if m in by else 0 for m in methods]
        ax.bar(x + j * w, ys, w, label=f"T = {t:g}")
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(x + w * (len(temps) - 1) / 2)
    ax.set_xticklabels(methods, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("tokens/s ÷ specot AR tokens/s")
    ax.set_title("wall-clock speedup over autoregressive (same run, same prompts)")
    ax.legend()
    p1 = _save_figure(plt, fig, out / "speedup.png")

    fig, ax = plt.subplots(figsize=(5, 5))
    pts = [r for r in rows if r["predicted_block_efficiency_iid"] is not None]
    for fam, mk in (("ngram", "s"), ("spec", "o"), ("tree", "^")):
        sel = [r for r in pts if r["family"] == fam]
        if sel:
            ax.scatter([r["predicted_block_efficiency_iid"] for r in sel], [r["block_efficiency"] for r in sel], marker=mk, label=fam)
    if pts:
        m = max(max(r["block_efficiency"], r["predicted_block_efficiency_iid"]) for r in pts) * 1.05
        ax.plot([1, m], [1, m], "k--", lw=0.8)
    ax.set_xlabel("predicted block efficiency (1−α̂^(L+1))/(1−α̂)")
    ax.set_ylabel("measured block efficiency")
    ax.set_title("block efficiency: measured vs Leviathan model")
    ax.grid(alpha=0.3)
    if pts:
        ax.legend()
    p2 = _save_figure(plt, fig, out / "block_efficiency_predicted.png")
    return [p1, p2]


def _duration(res: dict[str, Any]) -> str:
    """``", 12.4 min"`` from ``elapsed_s`` (or ``measured_s`` for a result read back from a journal)."""
    sec = res.get("elapsed_s") if res.get("elapsed_s") is not None else res.get("measured_s")
    return f", {sec / 60:.1f} min" if sec is not None else ""


def _partial(res: dict[str, Any]) -> str:
    """A warning sentence for an interrupted run (``complete`` false), else ``""``."""
    if res.get("complete", True):
        return ""
    return (f" **Partial: {res['cells_done']} of {res['cells_total']} cells measured** (the run was interrupted; "
            f"rows cover the prompts measured).")


def _acc_summary(res: dict[str, Any]) -> str:
    """The Hu et al. Table 1 view: T = 0.7 (or the closest), n = 3, every draft, law and verifier."""
    temps = res["temperatures"]
    t = min(temps, key=lambda x: abs(x - 0.7))
    n = 3 if 3 in res["ns"] else max(res["ns"])
    return acceptance_table(res, temperatures=[t], ns=[1, n])


def results_markdown(acceptance: dict[str, Any] | None, speedup: dict[str, Any] | Sequence[dict[str, Any]] | None, *,
                     plots_dir: str | None = None) -> str:
    """The generated results section (of :data:`RESULTS_FILE`) built from the JSON results (one
    acceptance run, one or more speedup runs). ``plots_dir``: the PNGs' directory relative to the
    results page (``bench`` for ``docs/results.md``)."""
    speedups = [] if speedup is None else ([speedup] if isinstance(speedup, dict) else list(speedup))
    parts: list[str] = [
        "Regenerated from `specot bench` runs (JSON schema: the docstrings of `specot_lab.bench.acceptance` and "
        "`specot_lab.bench.speedup`; `--json` prints it, `--quick` is the CI smoke run). Prompt sets are built from "
        "text installed with Python (`specot_lab.corpus`: held-out pydoc topics, stdlib docstrings outside the "
        "distilled draft's training modules, CPython's LICENSE.txt, the Zen of Python); `--prompts FILE.jsonl` "
        "takes your own (one `{\"prompt\": ...}` per line). This section is rewritten by "
        "`specot bench results --acceptance A.json --speedup S.json --plots-dir DIR`.",
        "",
    ]
    missing = [d["name"] for d in (acceptance or {}).get("drafts", []) if not d["available"]]
    if speedups and not any(sp.get("draft_available") for sp in speedups):
        missing.append("draft model (speedup)")
    if missing:
        parts += [
            "The distilled draft was not available when these runs were made, so its rows (and the multi-draft "
            "and assisted-generation rows, which need a draft model) are missing; regenerate with:",
            "",
            "```bash",
            "specot bench acceptance --drafts distilled,ngram-lm,ngram --out docs/bench",
            "specot bench speedup --draft distilled --out docs/bench",
            "specot bench results --acceptance docs/bench/acceptance.json --speedup docs/bench/speedup.json --plots-dir bench",
            "```",
            "",
        ]
    if acceptance is not None:
        a = acceptance
        parts += [
            "### Acceptance on real distributions (Hu et al. Table 1, Figures 1–2)",
            "",
            f"Target {a['target']} ({a['target_dtype']}); {a['prompts']} prompts ({a['prompt_set_description']}), "
            f"continuations of up to {a['max_new_tokens']} tokens sampled from the target at each temperature; "
            f"drafts: " + ", ".join(f"{d['name']}" + ("" if d["available"] else f" (skipped: {d['reason']})") for d in a["drafts"]) + ". "
            f"Acceptance is exact per position (k-Seq, RRS, greedy, speculative) or a Rao–Blackwellised Monte-Carlo "
            f"average (RRS without replacement, importance-weighted selection; marked MC), averaged over positions "
            f"with a 95% CI; "
            f"α* is the optimal acceptance for the law at the same positions. Load average {a['load_avg_start']} → {a['load_avg_end']}"
            f"{_duration(a)}.{_partial(a)}",
            "",
            "```bash",
            a.get("command", "specot bench acceptance"),
            "```",
            "",
            _acc_summary(a),
            "",
        ]
        if plots_dir:
            for d in a["drafts"]:
                if d["available"] and d["kind"] != "ngram":
                    tag = d["name"].replace("/", "_").replace(":", "")
                    parts += [f"![acceptance vs temperature, {d['name']}]({plots_dir}/acceptance_vs_temperature_{tag}.png)",
                              f"![acceptance vs n, {d['name']}]({plots_dir}/acceptance_vs_n_{tag}.png)", ""]
        where = f"`{plots_dir}/acceptance.md` / `.json`" if plots_dir else "the run's `acceptance.md` / `.json`"
        parts += [f"The full grid (every temperature and n) is in {where}.", ""]
    for s in speedups:
        parts += [
            "### Block efficiency and wall-clock speedup (SpecTr Tables 1 and 4), against the peers",
            "",
            f"Target {s['target']} ({s['target_dtype']}); draft model: "
            + (s["draft"] if s["draft_available"] else f"none ({s['draft_reason']})")
            + f"; {s['prompts']} prompts ({s['prompt_set_description']}), up to {s['max_new_tokens']} new tokens, "
            f"methods interleaved per prompt in one process. Speedup = tokens/s ÷ specot AR tokens/s. "
            f"Load average {s['load_avg_start']} → {s['load_avg_end']}{_duration(s)}.{_partial(s)}",
            "",
            "```bash",
            s.get("command", "specot bench speedup"),
            "```",
            "",
            speedup_table(s),
            "",
            "Measured target cost curve (one pass over T new tokens after a cached prompt):",
            "",
            cost_curve_table(s),
            "",
        ]
        if plots_dir and s.get("plot"):
            parts += [f"![speedup]({plots_dir}/{s['plot']})", ""]
    return "\n".join(parts).rstrip() + "\n"


def update_results(path: str | os.PathLike[str], section: str) -> None:
    """Replace the generated block of the results page ``path`` (normally :data:`RESULTS_FILE`) with
    ``section``: between :data:`START` and :data:`END`, or, the first time, the line
    ``RESULTS_PLACEHOLDER``. A missing file is created with a title and the block.

    Raises:
        ValueError: the file exists but has neither the markers nor the placeholder.
    """
    path = Path(path)
    block = f"{START}\n{section.rstrip()}\n{END}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Measured results\n\n{block}\n", encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    if START in text and END in text:
        a = text.index(START)
        b = text.index(END) + len(END)
        text = text[:a] + block + text[b:]
    elif "RESULTS_PLACEHOLDER" in text:
        text = text.replace("RESULTS_PLACEHOLDER", block, 1)
    else:
        raise ValueError(f"{path} has no {START} ... {END} block and no RESULTS_PLACEHOLDER line")
    write_text(path, text)  # atomically: an interrupted update leaves the page as it was


def write_outputs(res: dict[str, Any], out_dir: str | os.PathLike[str], *, plots: bool = True) -> list[Path]:
    """Write ``<benchmark>.json``, ``<benchmark>.md`` and the plots into ``out_dir``."""

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = res["benchmark"]
    paths = [out / f"{name}.json", out / f"{name}.md"]
    if "environment" not in res:
        res["environment"] = run_info()  # also seen by the caller (specot bench --json)
    write_json(paths[0], res)  # strict JSON, atomically: a non-finite number is null with its note
    if name == "acceptance":
        md = acceptance_table(res)
    else:
        md = speedup_table(res) + "\n\n" + cost_curve_table(res)
    write_text(paths[1], f"<!-- {res.get('command', '')} -->\n\n" + md + "\n")
    if plots:
        paths += acceptance_plots(res, out) if name == "acceptance" else speedup_plots(res, out)
    return paths
