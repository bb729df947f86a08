"""``specot bench suite`` (``make bench``): the named runs behind the README's results block and
``docs/results.md``, and the two documents regenerated from them.

One :func:`~specot_lab.bench.speedup.run_speedup_bench` run per prompt set of :data:`SUITE`, on one
loaded target (the embedded SmolLM2-135M-Instruct, ``--dtype auto``: bfloat16 on a CPU with AMX or
AVX512-BF16), each at T = 0 (greedy) and T = 1, every method decoding the same prompts in the same
process: specot's autoregressive decoding (the baseline), Hugging Face ``generate()`` and its prompt
lookup (γ = 4) on the same model object, specot's n-gram chain (γ = 4) and ``auto`` (the plan
``specot generate`` uses by default). Each run journals its cells (``OUT/<set>.jsonl``, resumed by
the same command after an interruption) and writes ``OUT/<set>.json``; then the block between
``<!-- results:begin -->`` and ``<!-- results:end -->`` of ``README.md`` and of
``docs/results.md`` is rewritten from the JSON files (``--report-only``: from the files alone).

The full suite decodes 11 sets (80 prompts) × 2 temperatures × 5 methods × 64 new tokens: about
30 minutes on a 2-core CPU. ``--quick`` runs two sets of two prompts for 8 tokens (a smoke test;
its output goes to ``runs/bench-suite-quick`` and touches no document unless ``--readme`` /
``--results`` name one).
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from specot._validation import check_count
from specot.api import load_target
from specot.outputs import write_json, write_text

from ..corpus import load_prompts
from .runinfo import machine_label
from .speedup import load_speedup_result, run_speedup_bench

__all__ = ["SuiteSet", "SUITE", "BEGIN", "END", "run_suite", "readme_block", "results_block", "replace_block",
           "load_suite", "add_arguments", "run"]

BEGIN = "<!-- results:begin -->"
END = "<!-- results:end -->"


@dataclass(frozen=True)
class SuiteSet:
    """One run of the suite: ``name`` (its file ``OUT/<name>.json``), the prompt set given to
    :func:`~specot_lab.corpus.load_prompts`, how many prompts, and its role: ``"table"`` (a column
    pair of the README's table and in the mean), ``"mean"`` (in the mean) or ``"held_out"``
    (reported apart: sets no setting was tuned on)."""

    name: str
    prompts: str
    n_prompts: int
    role: str


#: The suite's runs, in order.
SUITE: tuple[SuiteSet, ...] = (
    SuiteSet("code", "code", 6, "table"),
    SuiteSet("prose", "mixed", 6, "table"),
    SuiteSet("chat", "chat", 6, "table"),
    SuiteSet("general", "general", 6, "table"),
    SuiteSet("code_more", "code_more", 6, "mean"),
    SuiteSet("docstrings", "docstrings", 6, "mean"),
    SuiteSet("assorted", "assorted", 6, "mean"),
    SuiteSet("tasks", "tasks", 12, "mean"),
    SuiteSet("held_out", "held_out", 12, "held_out"),
    SuiteSet("kinds", "kinds", 9, "held_out"),
    SuiteSet("languages", "languages", 4, "held_out"),
)
#: ``--quick``: two sets, two prompts, 8 new tokens.
QUICK = (SuiteSet("code", "code", 2, "table"), SuiteSet("chat", "chat", 2, "table"))

#: The methods of the tables, in order: (family in the result rows, label).
METHODS = (("hf-ar", "HF `generate()`"), ("ngram", "n-gram chain, γ=4"), ("hf-prompt-lookup", "HF prompt lookup, 4"),
           ("auto", "`auto`"))
#: Their short names in sentences.
SHORT = {"hf-ar": "HF `generate()`", "ngram": "n-gram", "hf-prompt-lookup": "HF prompt lookup", "auto": "`auto`"}


def _run_options(quick: bool) -> dict[str, Any]:
    return dict(temperatures=[0.0, 1.0], gammas=[4], trees=[(2, 3)], tree_verifiers=[], draft=None, peers=True,
                extra_drafts=["auto"], max_new_tokens=8 if quick else 64, cost_reps=1 if quick else 5)


def _speedup_command(s: SuiteSet, opts: dict[str, Any], dtype: str, threads: int, out: Path) -> str:
    """The ``specot bench speedup`` command that makes the same run alone."""
    return (f"specot bench speedup --prompts {s.prompts} --n-prompts {s.n_prompts} --gammas 4 --trees 2x3 --draft none "
            f"--extra-drafts auto --max-new-tokens {opts['max_new_tokens']} --dtype {dtype} --threads {threads} "
            f"--out {shlex.quote(str(out))}")


def run_suite(sets: Sequence[SuiteSet], *, out: str | Path, target: Any = None, dtype: str = "auto", threads: int = 2,
              quick: bool = False, fresh: bool = False, progress: bool = True, command: str = "specot bench suite",
              log: Any = None) -> list[dict[str, Any]]:
    """Run (or resume) each set of ``sets`` on one loaded target; writes ``out/<set>.jsonl`` as cells
    finish and ``out/<set>.json`` after each set; returns the results in order. ``log``: where the
    progress lines go (default: standard error)."""
    log = sys.stderr if log is None else log
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if threads > 0:
        torch.set_num_threads(threads)
    tgt = load_target(target, dtype=dtype)
    opts = _run_options(quick)
    results = []
    for i, s in enumerate(sets, 1):
        print(f"[bench suite] {i}/{len(sets)}: {s.name} ({s.n_prompts} prompts of {s.prompts!r})", file=log)
        journal = out / f"{s.name}.jsonl"
        fields = dict(suite_set=s.name, suite_role=s.role, quick=quick, suite_command=command,
                      command=_speedup_command(s, opts, dtype, threads, out / s.name))
        try:
            res = run_speedup_bench(target=tgt, prompts=load_prompts(s.prompts, s.n_prompts), prompt_set=s.prompts,
                                    dtype=dtype, progress=progress, log=log, journal=journal, fresh=fresh, **opts)
        except KeyboardInterrupt:  # the set's finished cells as its result (complete: false), then stop
            try:
                _write(out / f"{s.name}.json", {**load_speedup_result(journal), **fields})
            except (OSError, ValueError):
                pass  # no cell of this set yet: its previous result, if any, stays
            raise
        results.append(_write(out / f"{s.name}.json", {**res, **fields}))
    return results


def _write(path: Path, res: dict[str, Any]) -> dict[str, Any]:
    write_json(path, res)  # strict JSON, atomically
    return res


def load_suite(out: str | Path, sets: Sequence[SuiteSet]) -> list[dict[str, Any]]:
    """The results of ``sets`` in ``out``: ``<set>.json`` (written after each set, and with the finished
    cells when a set is interrupted), else the set's journal.

    Raises:
        FileNotFoundError: a set has neither file.
    """
    results = []
    for s in sets:
        json_path, journal = Path(out) / f"{s.name}.json", Path(out) / f"{s.name}.jsonl"
        if not json_path.exists() and not journal.exists():
            raise FileNotFoundError(f"no result of the set {s.name!r} in {out} (run `specot bench suite` first)")
        res = load_speedup_result(journal if journal.exists() and not json_path.exists() else json_path)
        res.setdefault("suite_set", s.name)
        res.setdefault("suite_role", s.role)
        results.append(res)
    return results


# ----------------------------------------------------------------------------- tables
def _cells(res: dict[str, Any]) -> dict[tuple[float, str], dict[str, Any]]:
    """Row per (temperature, family) of a result (the first row of a family: one γ in the suite)."""
    out: dict[tuple[float, str], dict[str, Any]] = {}
    for r in res["rows"]:
        out.setdefault((float(r["temperature"]), r["family"]), r)
    return out


def _cell_text(row: dict[str, Any] | None, best: bool) -> str:
    if row is None:
        return "–"
    x = f"{row['speedup']:.2f}×"
    x = f"**{x}**" if best else x
    be = row.get("block_efficiency")
    return x if row["family"] == "hf-ar" or be is None else f"{x} ({be:.2f})"


def _auto_label(results: Sequence[dict[str, Any]]) -> str:
    """``auto`` and what it decoded with, from the runs' ``auto_plans`` (the first run's), e.g.
    ``auto (suffix+eagle trees: 3 × 6 at T=0, 2 × 3 at T=1)``."""
    plans = next((r["auto_plans"] for r in results if r.get("auto_plans")), None)
    if not plans:
        return "`auto`"
    items = sorted(plans.items(), key=lambda kv: float(kv[0]))
    if len({p["draft"] for _, p in items}) > 1:
        return "`auto` (" + ", ".join(f"{p['draft']} at T={t}" for t, p in items) + ")"
    draft = items[0][1]["draft"]
    shapes = [(t, p) for t, p in items if p.get("drafts")]
    if not shapes:
        return f"`auto` ({draft} chain)"
    return f"`auto` ({draft} trees: " + ", ".join(f"{p['drafts']} × {p['gamma']} at T={t}" for t, p in shapes) + ")"


def _table(results: Sequence[dict[str, Any]], temps: Sequence[float]) -> list[str]:
    """Methods × (set, temperature): speedup over AR (block efficiency), the fastest in bold."""
    head = "| method | " + " | ".join(f"{r['suite_set']} T={t:g}" for r in results for t in temps) + " |"
    lines = [head, "|---|" + "---|" * (len(results) * len(temps))]
    cells = [_cells(r) for r in results]
    for fam, label in METHODS:
        label = _auto_label(results) if fam == "auto" else label
        row = []
        for c in cells:
            for t in temps:
                best = max((c[(t, f)]["speedup"] for f, _ in METHODS if (t, f) in c), default=None)
                cell = c.get((t, fam))
                row.append(_cell_text(cell, cell is not None and cell["speedup"] == best))
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    return lines


def _set_table(results: Sequence[dict[str, Any]]) -> list[str]:
    """Sets × methods, each cell "T=0 / T=1" (the temperatures of the runs), the fastest in bold."""
    temps = results[0]["temperatures"]
    lines = ["| set | " + " | ".join(_auto_label(results) if f == "auto" else label for f, label in METHODS) + " |",
             "|---|" + "---|" * len(METHODS)]
    for r in results:
        c = _cells(r)
        row = []
        for fam, _ in METHODS:
            parts = []
            for t in temps:
                best = max((c[(t, f)]["speedup"] for f, _ in METHODS if (t, f) in c), default=None)
                cell = c.get((t, fam))
                parts.append(_cell_text(cell, cell is not None and cell["speedup"] == best))
            row.append(" / ".join(parts))
        lines.append(f"| {r['suite_set']} | " + " | ".join(row) + " |")
    return lines


def _means(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean speedup per method over the cells of the ``table`` and ``mean`` sets, and ``auto`` over
    Hugging Face's faster method per cell (ratio of the means, and the range per cell)."""
    cells = [(c, t) for r in results if r.get("suite_role") in ("table", "mean") for c in [_cells(r)]
             for t in r["temperatures"]]
    means = {f: statistics.mean(c[(t, f)]["speedup"] for c, t in cells) for f, _ in METHODS
             if cells and all((t, f) in c for c, t in cells)}
    out: dict[str, Any] = {"cells": len(cells), "means": means}
    hf = [max(c[(t, "hf-ar")]["speedup"], c[(t, "hf-prompt-lookup")]["speedup"]) for c, t in cells
          if (t, "hf-ar") in c and (t, "hf-prompt-lookup") in c]
    if "auto" in means and len(hf) == len(cells) and hf:
        per = [c[(t, "auto")]["speedup"] / h for (c, t), h in zip(cells, hf)]
        out.update(over_hf=means["auto"] / statistics.mean(hf), over_hf_range=(min(per), max(per)))
    return out


def _provenance(res: dict[str, Any]) -> tuple[str, str, str]:
    """(date, commit, machine) of a result: its first run's."""
    env = res.get("environment") or {}
    date = str(env.get("date") or "?")[:10]
    commit = str(env.get("commit") or "?")[:7] + (" (modified)" if env.get("commit_dirty") else "")
    return date, commit, machine_label(env, res.get("device", "cpu"))


def _common(values: Sequence[str]) -> str:
    return values[0] if len(set(values)) == 1 else ", ".join(sorted(set(values)))


def _common_commit(values: Sequence[str]) -> str:
    """One commit for runs of the same commit, some with uncommitted changes (the per-set table has each)."""
    bare = {v.removesuffix(" (modified)") for v in values}
    if len(bare) == 1 and len(set(values)) > 1:
        return f"{bare.pop()} (some runs with uncommitted changes)"
    return _common(values)


def readme_block(results: Sequence[dict[str, Any]]) -> str:
    """The README's results block (between :data:`BEGIN` and :data:`END`)."""
    table = [r for r in results if r.get("suite_role") == "table"]
    temps = table[0]["temperatures"] if table else [0.0, 1.0]
    dates, commits, machines = zip(*(_provenance(r) for r in results))
    date, commit, machine = _common(dates), _common_commit(commits), _common(machines)
    r0 = results[0]
    quick = " **Quick smoke run, not a measurement.**" if any(r.get("quick") for r in results) else ""
    n_prompts = _common([str(r["prompts"]) for r in table]) if table else "?"
    lines = [
        f"Speedup over autoregressive decoding (block efficiency in parentheses) of {r0['target']} in "
        f"{r0['target_dtype']} on the transformers backend, on a {machine}, measured {date} at commit {commit}: "
        f"per set, every method decodes the same {n_prompts} prompts × {r0['max_new_tokens']} new "
        f"tokens in one process, at T = 0 (greedy) and T = 1.{quick} `make bench` (`specot bench suite`) "
        f"regenerates this block and [docs/results.md](docs/results.md).",
        "",
        *_table(table, temps),
        "",
    ]
    m = _means(results)
    notes = []
    if m["means"]:
        names = ", ".join(r["suite_set"] for r in results if r.get("suite_role") in ("table", "mean"))
        notes.append(f"Mean over {m['cells']} cells ({names}; both temperatures): " + ", ".join(
            f"{SHORT[f]} {m['means'][f]:.2f}×" for f in ("auto", "ngram", "hf-prompt-lookup", "hf-ar") if f in m["means"]) + ".")
    if "over_hf" in m:
        lo, hi = m["over_hf_range"]
        notes.append(f"`auto` over Hugging Face's faster method in each cell: {m['over_hf']:.2f}× "
                     f"({lo:.2f}–{hi:.2f}× per cell).")
    held = [r for r in results if r.get("suite_role") == "held_out"]
    if held:
        parts = []
        for r in held:
            c = _cells(r)
            parts.append(f"{r['suite_set']} " + " / ".join(
                f"{c[(t, 'auto')]['speedup']:.2f}×" for t in r["temperatures"] if (t, "auto") in c))
        notes.append("`auto` on the held-out sets (T = 0 / T = 1): " + ", ".join(parts) + ".")
    notes.append("Hugging Face's rows run on the same model object as specot's (its attention kernels and "
                 "prepacked linear layers). Cells move by up to ±0.2 between runs. The sets, every row, the "
                 "commands, float32 and CUDA: [docs/results.md](docs/results.md).")
    return "\n".join(lines + [" ".join(notes)]) + "\n"


def results_block(results: Sequence[dict[str, Any]], command: str) -> str:
    """The generated block of ``docs/results.md``: the command, the machine and load of each run,
    the table of every set, the means."""
    temps = results[0]["temperatures"]
    lines = [
        "## Speedup per prompt set (`specot bench suite`)",
        "",
        "Generated by the command below from its JSON results in [`bench/suite/`](bench/suite/) (one "
        "`specot bench speedup` run per set; each JSON records the date, commit, machine, CPU flags, library "
        "versions, threads and load of its run). Speedup = tokens/s ÷ specot's autoregressive tokens/s in the "
        "same run; block efficiency (tokens per target pass) in parentheses; the fastest method in bold; each cell "
        + " / ".join(f"T = {t:g}" for t in temps) + ".",
        "",
        "```bash",
        command,
        "```",
        "",
        *_set_table(results),
        "",
        "| set | prompts | date | commit | machine | threads | load average start → end | minutes | AR tokens/s (T=0 / T=1) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        date, commit, machine = _provenance(r)
        c = _cells(r)
        ar = " / ".join(f"{c[(t, 'ar')]['tokens_per_s']:.1f}" for t in r["temperatures"] if (t, "ar") in c)
        sec = r.get("elapsed_s") if r.get("elapsed_s") is not None else r.get("measured_s")
        part = "" if r.get("complete", True) else f" (partial: {r['cells_done']} of {r['cells_total']} cells)"
        minutes = f"{sec / 60:.1f}" if sec is not None else "?"
        lines.append(f"| {r['suite_set']}{part} | {r['prompts']} | {date} | {commit} | {machine} | "
                     f"{r.get('torch_threads', '?')} | {r.get('load_avg_start')} → {r.get('load_avg_end')} | {minutes} | "
                     f"{ar} |")
    lines += ["", "The prompt sets (`specot_lab.corpus`; the hand-written ones in `benchmarks/prompts/`), the first "
              "*prompts* of each:", ""]
    lines += [f"- `{r['suite_set']}` (`--prompts {r['prompt_set']}`): {r['prompt_set_description']}" for r in results]
    lines.append("")
    m = _means(results)
    if m["means"]:
        lines.append(f"Mean speedup over the {m['cells']} cells of the sets before `held_out`: " + ", ".join(
            f"{SHORT[f]} {m['means'][f]:.2f}×" for f in ("auto", "ngram", "hf-prompt-lookup", "hf-ar") if f in m["means"]) + "."
            + (f" `auto` over Hugging Face's faster method per cell: {m['over_hf']:.2f}× "
               f"({m['over_hf_range'][0]:.2f}–{m['over_hf_range'][1]:.2f}×)." if "over_hf" in m else ""))
        lines.append("")
    notes = sorted({r["provenance_note"] for r in results if r.get("provenance_note")})
    if notes:
        lines += ["Provenance: " + "; ".join(notes) + ". The command above measures them again.", ""]
    if any(r.get("quick") for r in results):
        lines += ["**Quick smoke run (`--quick`): not a measurement.**", ""]
    return "\n".join(lines)


def replace_block(path: str | Path, text: str) -> None:
    """Replace what lies between :data:`BEGIN` and :data:`END` in the file ``path`` with ``text``.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file lacks the markers (or has them out of order).
    """
    path = Path(path)
    doc = path.read_text(encoding="utf-8")
    a, b = doc.find(BEGIN), doc.find(END)
    if a < 0 or b < a:
        raise ValueError(f"{path} has no {BEGIN} ... {END} block to regenerate (give another file with "
                         f"--readme / --results, or add the two marker lines)")
    write_text(path, doc[:a + len(BEGIN)] + "\n" + text.rstrip() + "\n" + doc[b:])  # atomically


# ----------------------------------------------------------------------------- CLI
def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``specot bench suite``."""
    p.add_argument("--out", default=None, help="directory of the runs' journals and JSON results (default "
                   "docs/bench/suite; with --quick runs/bench-suite-quick)")
    p.add_argument("--readme", default=None, help="file whose results block is rewritten (default README.md; "
                   "with --quick, or 'none': no file, the block is printed)")
    p.add_argument("--results", default=None, help="results page whose generated block is rewritten (default "
                   "docs/results.md; with --quick, or 'none': none)")
    p.add_argument("--sets", default=None, help="comma-separated subset of the suite's sets: "
                   + ",".join(s.name for s in SUITE) + " (default all)")
    p.add_argument("--target", default=None, help="target model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="auto", help="target dtype (default auto: bf16 on a CPU with AMX / AVX512-BF16)")
    p.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2; 0 keeps torch's default)")
    p.add_argument("--quick", action="store_true", help="smoke run: code and chat, 2 prompts, 8 new tokens")
    p.add_argument("--fresh", action="store_true", help="measure every set again (default: resume, and keep the "
                   "sets already measured with the same options)")
    p.add_argument("--report-only", action="store_true", help="measure nothing: regenerate the documents from OUT")
    p.add_argument("--no-progress", action="store_true")


def _sets(spec: str | None, quick: bool) -> tuple[SuiteSet, ...]:
    pool = QUICK if quick else SUITE
    if not spec:
        return pool
    by = {s.name: s for s in pool}
    bad = [n for n in spec.split(",") if n and n not in by]
    if bad:
        raise ValueError(f"--sets: unknown set {bad[0]!r}; the {'quick ' if quick else ''}suite has "
                         f"{', '.join(by)}")
    return tuple(by[n] for n in spec.split(",") if n)


def run(args: argparse.Namespace) -> int:
    """``specot bench suite``: run (or resume) the sets, then rewrite the two documents' blocks."""
    check_count(args.threads, "threads", "--threads", minimum=0)
    sets = _sets(args.sets, args.quick)
    out = Path(args.out or ("runs/bench-suite-quick" if args.quick else "docs/bench/suite"))
    readme = args.readme or (None if args.quick else "README.md")
    page = args.results or (None if args.quick else "docs/results.md")
    readme, page = (None if doc == "none" else doc for doc in (readme, page))
    for doc in (readme, page):  # refuse a document without the markers before an hour of measuring
        if doc is not None and BEGIN not in Path(doc).read_text(encoding="utf-8"):
            raise ValueError(f"{doc} has no {BEGIN} ... {END} block to regenerate")
    command = "specot " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["bench"] else \
        "specot bench suite"
    t0 = time.perf_counter()
    if args.report_only:
        results = load_suite(out, sets)
    else:
        results = run_suite(sets, out=out, target=args.target, dtype=args.dtype, threads=args.threads,
                            quick=args.quick, fresh=args.fresh, progress=not args.no_progress, command=command)
    block = readme_block(results)
    measured_by = _common([str(r.get("suite_command") or command) for r in results])
    for doc, text in ((readme, block), (page, results_block(results, measured_by))):
        if doc is not None:
            replace_block(doc, text)
            print(f"[bench suite] rewrote the results block of {doc}", file=sys.stderr)
    if readme is None:
        print(block)
    print(f"[bench suite] {len(results)} sets in {(time.perf_counter() - t0) / 60:.1f} min; results in {out}",
          file=sys.stderr)
    return 0
