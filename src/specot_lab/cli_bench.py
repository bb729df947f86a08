"""``specot bench acceptance | speedup | results``: the papers' tables on the embedded target.

Each benchmark writes ``<out>/<name>.json`` (schema: the module docstrings of
:mod:`specot_lab.bench.acceptance` / :mod:`specot_lab.bench.speedup`), ``<out>/<name>.md`` (markdown
table) and PNG plots; ``--json`` prints the JSON to stdout instead of the table. ``--quick`` is a
smoke run (2 prompts, short continuations, a reduced grid) that finishes in about a minute.
Every finished cell is appended to ``<out>/<name>.jsonl`` as it is measured: Ctrl-C leaves the
finished cells in ``<out>/<name>.json`` (``"complete": false``) and the same command resumes the
run (``--fresh`` starts it over; other options are refused with one line).
``specot bench results`` (alias ``readme``) rebuilds the generated section of ``docs/results.md``
from the results (finished or not). ``specot bench suite`` (``make bench``) runs the named set of
speedup runs behind the README's results block and regenerates that block and ``docs/results.md``.

``specot bench theory-speed | verifier-speed | head-speed | generate-speed | tree-speed |
batch-invariance | paths | llamacpp`` are the
component timings (:mod:`specot_lab.bench.theory_speed` and its siblings; each module's
``add_arguments`` / ``run``), with their own options and JSON output.

Registering the command imports neither torch nor the benchmarks: the handlers' names are bound
when a handler runs (:class:`specot_lab.lazy.LazyNames`), and the options of ``suite`` and of the
component timings are added when that sub-command is used (:class:`specot.cli.main.CommandParser`),
so ``specot --help`` answers at once.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import shlex
import sys
from typing import Any, Callable

from specot.cli.command import seed_type
from specot.cli.main import CommandParser
from specot.outputs import check_output, dumps, json_has

from .lazy import LazyNames

__all__ = ["register"]

#: The handlers' names (torch, the benchmarks), bound when a handler runs.
_NAMES = LazyNames(__name__, {
    "torch": "torch", "check_count": "specot._validation", "load_prompts": "specot_lab.corpus",
    **{name: "specot_lab.bench.report" for name in ("acceptance_table", "results_markdown", "speedup_table",
                                                     "update_results", "write_outputs")},
    "load_acceptance_result": "specot_lab.bench.acceptance", "run_acceptance_bench": "specot_lab.bench.acceptance",
    "load_speedup_result": "specot_lab.bench.speedup", "run_speedup_bench": "specot_lab.bench.speedup",
    "suite": "specot_lab.bench.suite",
})
__getattr__ = _NAMES.getattr


def _floats(s: str, option: str) -> list[float]:
    """Comma-separated temperatures: finite numbers >= 0, at least one.

    Raises:
        ValueError: one line naming ``option`` and the value."""
    try:
        values = [float(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{option} takes comma-separated numbers like 0,1; got {s!r}") from None
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"{option} takes finite numbers >= 0 like 0,1; got {s!r}")
    return values


def _ints(s: str, option: str) -> list[int]:
    """Comma-separated counts: integers >= 1, at least one.

    Raises:
        ValueError: one line naming ``option`` and the value."""
    try:
        values = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{option} takes comma-separated integers like 2,4; got {s!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"{option} takes integers >= 1 like 2,4; got {s!r}")
    return values


def _check_result_files(args: argparse.Namespace, name: str) -> None:
    """``<out>/<name>.json`` and ``.md`` are absent, written by this benchmark (resumed or run
    again), or ``--force`` is given: checked before any measuring (:func:`specot.outputs.check_output`).

    Raises:
        ValueError: a file there that this benchmark did not write (one line naming it and --force)."""
    force = getattr(args, "force", False)
    check_output(os.path.join(args.out, f"{name}.json"), "--out", force=force, ours=json_has(benchmark=name))
    check_output(os.path.join(args.out, f"{name}.md"), "--out", force=force, ours=_our_table)


def _our_table(path: Any) -> bool:
    """Whether a markdown file is a benchmark's table (its first line names the ``specot`` command)."""
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.readline().startswith("<!-- specot ")
    except (OSError, ValueError):
        return False


def _trees(s: str) -> list[tuple[int, int]]:
    out = []
    for part in s.split(","):
        if not part.strip():
            continue
        k, _, l = part.lower().partition("x")
        if not (k.strip().isdigit() and l.strip().isdigit() and int(k) >= 1 and int(l) >= 1):
            raise ValueError(f"--trees takes NxG pairs (n >= 1 drafts x draft length γ >= 1) like 2x4,4x4; "
                             f"got {part!r}")
        out.append((int(k), int(l)))
    return out


def _check_counts(args: argparse.Namespace) -> None:
    """One-line errors for counts that would otherwise crash later or be silently replaced by a default,
    and for an ``--out`` that cannot be the results' directory."""
    check_count(args.n_prompts, "n_prompts", "--n-prompts")
    if args.max_new_tokens is not None:  # None: the benchmark's default
        check_count(args.max_new_tokens, "max_new_tokens", "--max-new-tokens")
    check_count(args.threads, "threads", "--threads", minimum=0)  # 0: torch's default
    _check_out_dir(args.out)


def _check_out_dir(out: str | None) -> None:
    """``--out`` names a directory that exists or can be made (checked before any measuring; made
    by the command that writes into it, so a run refused later leaves nothing behind).

    Raises:
        ValueError: a file, or a directory that cannot be created (one line naming it).
    """
    if out is None:
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out!r} is a file; name a directory for the results (it is created when missing)")
    parent = os.path.abspath(out)
    while not os.path.exists(parent):  # the nearest existing ancestor is where it would be made
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        why = "not a directory" if not os.path.isdir(parent) else "permission denied"
        raise ValueError(f"--out {out!r} cannot be created ({why} at {parent!r}); name a directory you can write")


def _command(argv_tail: list[str] | None) -> str:
    tail = sys.argv[1:] if argv_tail is None else argv_tail
    return "specot " + " ".join(shlex.quote(a) for a in tail)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", default=None, help="target model (default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--prompts", default="mixed",
                   help="prompt set: mixed (default), pydoc, pydoc:OFFSET, heldout, docstrings, license, zen (built "
                        "from installed text), code, code_more, chat, general, assorted, tasks, held_out, kinds, "
                        "languages (benchmarks/prompts/), or FILE.jsonl with a 'prompt' field (see specot_lab.corpus)")
    p.add_argument("--n-prompts", type=int, default=10)
    p.add_argument("--max-new-tokens", type=int, default=None)
    p.add_argument("--seed", type=seed_type(), default=0)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", default="bench-results", help="directory for the JSON, markdown and PNG files")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--force", action="store_true", help="replace <out>/<benchmark>.json / .md files that this "
                   "benchmark did not write")
    p.add_argument("--json", action="store_true", help="print the JSON result to stdout (instead of the table)")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 prompts, short continuations, reduced grid (~1 min)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--threads", type=int, default=1,
                   help="torch intra-op threads (default 1: on a shared, loaded CPU two threads were 4-6x slower "
                        "than one from oversubscription; 0 keeps torch's default)")


def _finish(res: dict[str, Any], args: argparse.Namespace, table: str) -> int:
    paths = write_outputs(res, args.out, plots=not args.no_plots)
    if args.json:
        print(dumps(res, indent=2))
    else:
        print(table)
        print("\nwrote: " + ", ".join(str(p) for p in paths), file=sys.stderr)
    return 0


def _set_threads(args: argparse.Namespace) -> None:
    if args.threads and args.threads > 0:
        torch.set_num_threads(args.threads)


def _acceptance(args: argparse.Namespace) -> int:
    _NAMES.bind()
    _check_counts(args)
    check_count(args.mc_samples, "mc_samples", "--mc-samples")
    if not (math.isfinite(args.vocab_eps) and 0 <= args.vocab_eps < 1):
        raise ValueError(f"--vocab-eps must be a number in [0, 1), the draft's tail mass dropped; got {args.vocab_eps}")
    quick = args.quick
    temps = _floats(args.temperatures, "--temperatures") if args.temperatures else ([0.7] if quick else [0.1, 0.3, 0.5, 0.7, 1.0])
    ns = _ints(args.ns, "--ns") if args.ns else ([1, 2, 4] if quick else [1, 2, 3, 4, 8])
    _check_result_files(args, "acceptance")
    _set_threads(args)
    drafts = [d for d in args.drafts.split(",") if d] if args.drafts else (["ngram-lm", "ngram"] if quick else ["distilled", "ngram-lm", "ngram"])
    journal = os.path.join(args.out, "acceptance.jsonl")
    try:
        res = run_acceptance_bench(
            target=args.target, drafts=drafts, prompts=load_prompts(args.prompts, 2 if quick else args.n_prompts),
            prompt_set=args.prompts, temperatures=temps, ns=ns,
            max_new_tokens=args.max_new_tokens or (12 if quick else 48), seed=args.seed, dtype=args.dtype,
            mc_samples=args.mc_samples, vocab_eps=args.vocab_eps, progress=not args.no_progress, journal=journal,
            fresh=args.fresh)
    except KeyboardInterrupt:
        _keep_partial(args, journal, load_acceptance_result)
        raise
    res["command"] = _command(None)
    res["quick"] = quick
    return _finish(res, args, acceptance_table(res))


def _speedup(args: argparse.Namespace) -> int:
    _NAMES.bind()
    _check_counts(args)
    quick = args.quick
    temps = _floats(args.temperatures, "--temperatures") if args.temperatures else [0.0, 1.0]
    gammas = _ints(args.gammas, "--gammas") if args.gammas else ([3] if quick else [2, 4])
    trees = _trees(args.trees) if args.trees else ([(2, 3)] if quick else [(2, 4), (4, 4)])
    _check_result_files(args, "speedup")
    _set_threads(args)
    vers = [v for v in args.tree_verifiers.split(",") if v] if args.tree_verifiers else (["kseq"] if quick else ["kseq", "rrs_wor", "greedy"])
    draft = None if args.draft == "none" else args.draft
    journal = os.path.join(args.out, "speedup.jsonl")
    try:
        res = run_speedup_bench(
            target=args.target, draft=draft, prompts=load_prompts(args.prompts, 2 if quick else args.n_prompts),
            prompt_set=args.prompts, temperatures=temps, gammas=gammas, trees=trees, tree_verifiers=vers,
            peers=not args.no_peers, max_new_tokens=args.max_new_tokens or (12 if quick else 64), seed=args.seed,
            dtype=args.dtype, cost_reps=2 if quick else 5, progress=not args.no_progress,
            extra_drafts=[d for d in args.extra_drafts.split(",") if d], device=args.device,
            cuda_graphs=args.cuda_graphs, journal=journal, fresh=args.fresh)
    except KeyboardInterrupt:
        _keep_partial(args, journal, load_speedup_result)
        raise
    res["command"] = _command(None)
    res["quick"] = quick
    return _finish(res, args, speedup_table(res))


def _keep_partial(args: argparse.Namespace, journal: str, load: Callable[[str], dict[str, Any]]) -> None:
    """After Ctrl-C: the finished cells of ``journal`` as ``<benchmark>.json`` / ``.md`` (``complete:
    false``) and one line saying how to resume."""
    name = os.path.basename(journal).rsplit(".", 1)[0]
    try:
        res = load(journal)
    except (OSError, ValueError):
        print(f"\nspecot bench {name}: interrupted before a cell was measured; nothing kept", file=sys.stderr)
        return
    res["command"] = _command(None)
    res["quick"] = args.quick
    write_outputs(res, args.out, plots=False)
    print(f"\nspecot bench {name}: interrupted after {res['cells_done']} of {res['cells_total']} cells; "
          f"{args.out}/{name}.json holds them; the same command resumes", file=sys.stderr)


def _readme(args: argparse.Namespace) -> int:
    _NAMES.bind()
    acc = load_acceptance_result(args.acceptance) if args.acceptance else None
    spd = []
    # --plots-dir is relative to the results page; the speedup plots are linked relative to it
    plots_abs = args.plots_dir if args.out == "-" or not args.plots_dir else \
        os.path.join(os.path.dirname(args.out) or ".", args.plots_dir)
    for f in (args.speedup.split(",") if args.speedup else []):
        d = load_speedup_result(f)
        if args.plots_dir:  # link the run's speedup.png, copied next to its JSON
            run_dir = f if os.path.isdir(f) else os.path.dirname(f)
            d["plot"] = os.path.relpath(os.path.join(run_dir, "speedup.png"), plots_abs)
        spd.append(d)
    if acc is None and not spd:
        raise ValueError("give --acceptance and/or --speedup JSON files")
    section = results_markdown(acc, spd, plots_dir=args.plots_dir)
    if args.notes:
        section = section.rstrip() + "\n\n" + open(args.notes, encoding="utf-8").read().strip() + "\n"
    if args.out == "-":
        print(section)
    else:
        update_results(args.out, section)
        print(f"updated the generated results section of {args.out}", file=sys.stderr)
    return 0


def register(subparsers: Any) -> None:
    """Add ``specot bench`` to the CLI."""
    p = subparsers.add_parser("bench", help="benchmarks: the papers' tables (acceptance, speedup) and component timings",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="bench_command", metavar="BENCH", parser_class=CommandParser)
    sub.required = True

    a = sub.add_parser("acceptance", help="Hu et al. Table 1 / Figures 1-2: acceptance vs alpha* per draft law and verifier")
    _common(a)
    a.add_argument("--drafts", default=None,
                   help="comma list: distilled, ngram-lm, ngram, early-exit:K, or a model directory "
                        "(default distilled,ngram-lm,ngram; a missing distilled draft is skipped)")
    a.add_argument("--temperatures", default=None, help="default 0.1,0.3,0.5,0.7,1.0 (quick: 0.7)")
    a.add_argument("--ns", default=None, help="numbers of drafts, default 1,2,3,4,8 (quick: 1,2,4)")
    a.add_argument("--mc-samples", type=int, default=4, help="Monte-Carlo draft tuples per position for rrs_wor and importance")
    a.add_argument("--vocab-eps", type=float, default=1e-4, help="q tail mass dropped before the exact computations")
    a.add_argument("--fresh", action="store_true", help="measure every cell again, discarding OUT/acceptance.jsonl "
                   "(default: a run interrupted with the same options is resumed)")
    a.set_defaults(func=_acceptance)

    s = sub.add_parser("speedup", help="SpecTr Tables 1/4: block efficiency and wall-clock speedup, with HF peers")
    _common(s)
    s.add_argument("--draft", default="distilled",
                   help="draft model: distilled (default; skipped when missing), early-exit:K, a directory, or none")
    s.add_argument("--temperatures", default=None, help="default 0,1")
    s.add_argument("--gammas", default=None, help="draft lengths γ for single-draft and peers, default 2,4 (quick: 3)")
    s.add_argument("--trees", default=None, help="multi-draft grid of NxG (n drafts x draft length γ), default 2x4,4x4 (quick: 2x3)")
    s.add_argument("--tree-verifiers", default=None, help="default kseq,rrs_wor,greedy (quick: kseq)")
    s.add_argument("--no-peers", action="store_true", help="skip the Hugging Face generate() peers")
    s.add_argument("--extra-drafts", default="", help="more drafters, comma-separated, as specot generate names them: "
                   "suffix, eagle:PATH (rows per --gammas; EAGLE also per --trees with greedy children), and "
                   "auto (one row: the default plan of specot generate at each temperature)")
    s.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N: where the target and drafts run "
                   "(eager passes; the HF peers run there too)")
    s.add_argument("--cuda-graphs", action="store_true", help="specot's rows (autoregressive included) replay the "
                   "target's passes as CUDA graphs over a static KV cache; the HF peers stay eager")
    s.add_argument("--fresh", action="store_true", help="measure every cell again, discarding OUT/speedup.jsonl "
                   "(default: a run interrupted with the same options is resumed)")
    s.set_defaults(func=_speedup)

    r = sub.add_parser("results", aliases=["readme"],
                       help="rebuild the generated section of docs/results.md from bench JSON files")
    r.add_argument("--acceptance", default=None, help="an acceptance result (specot bench acceptance): acceptance.json, "
                   "the journal acceptance.jsonl (finished or interrupted) or the run's --out directory")
    r.add_argument("--speedup", default=None, help="one or more speedup results, comma-separated: speedup.json, the "
                   "journal speedup.jsonl of a run (finished or interrupted) or the run's --out directory")
    r.add_argument("--out", "--readme", dest="out", default="docs/results.md",
                   help="results page to update in place, between its bench:results markers (default "
                        "docs/results.md; '-' prints the section)")
    r.add_argument("--plots-dir", default=None,
                   help="directory of the PNGs, relative to the results page (e.g. bench for docs/results.md)")
    r.add_argument("--notes", default=None, help="markdown file appended to the section (e.g. findings)")
    r.set_defaults(func=_readme)

    sub.add_parser("suite", help="the named runs behind the README's results block; regenerates it and "
                   "docs/results.md (make bench)", formatter_class=argparse.RawDescriptionHelpFormatter,
                   add_arguments=_module_arguments("suite"))

    for name, module, help_ in _SPEED_BENCHES:
        sub.add_parser(name, help=help_, formatter_class=argparse.RawDescriptionHelpFormatter,
                       add_arguments=_module_arguments(module))


def _module_arguments(module: str) -> Callable[[argparse.ArgumentParser], None]:
    """The deferred options of a sub-command from ``specot_lab.bench.<module>`` (its docstring,
    ``add_arguments(parser)`` and ``run(args)``), imported when the sub-command is used."""
    def add(parser: argparse.ArgumentParser) -> None:
        mod = importlib.import_module(f"{__package__}.bench.{module}")
        parser.description = mod.__doc__
        mod.add_arguments(parser)
        parser.set_defaults(func=_suite_run if module == "suite" else mod.run)
    return add


def _suite_run(args: argparse.Namespace) -> int:
    """``specot bench suite`` (:func:`specot_lab.bench.suite.run`) after the ``--out`` check."""
    _NAMES.bind()
    _check_out_dir(args.out)
    return suite.run(args)


#: ``specot bench`` sub-commands from modules (``specot_lab.bench.<module>``) that expose
#: ``add_arguments(parser)`` and ``run(args)``.
_SPEED_BENCHES: list[tuple[str, str, str]] = [
    ("theory-speed", "theory_speed", "time alpha* (specot.theory.optimal_acceptance) per law and n at V = 49152"),
    ("verifier-speed", "verifier_speed", "per-call cost of every verifier at V = 49152"),
    ("head-speed", "head_speed", "output-head cost by GEMM layout: F.linear vs W @ x^T, for 1-33 rows"),
    ("generate-speed", "generate_speed", "end-to-end speculative vs autoregressive decoding on the embedded target"),
    ("tree-speed", "tree_speed", "multi-draft tree decoding: tree-pass cost, overhead share, K x L grid"),
    ("batch-invariance", "batch_invariance", "a backend's logits in a one-token pass vs a batched pass"),
    ("paths", "paths", "gbv vs block verification on the same real draft paths (exact block efficiency)"),
    ("pair", "pair", "the seeds' verifiers on a target + draft pair: exact block efficiency, alpha*, match rule"),
    ("llamacpp", "llamacpp", "specot on llama.cpp: the pass-cost curve (cost) and tokens/s against llama.cpp (run)"),
]

