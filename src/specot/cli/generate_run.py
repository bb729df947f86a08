"""The handler of ``specot generate`` (:mod:`specot.cli.generate`): decode, stream, report."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from ..api import GenerationInterrupted, generate
from ..calibration import PassCostCurve, break_even_alpha
from ..outputs import dumps
from ..report import EXACTNESS
from . import catalog
from .command import EXIT_INTERRUPTED, discard_stdout, ignore_interrupts, interrupt_status, scalar, stdout_error

__all__ = ["run", "MAX_PROMPT_BYTES"]

#: The most bytes ``--prompt-file`` reads: far more text than any target's context holds (about
#: 4 bytes a token: 16 MiB is some 4 million tokens), so a longer file cannot be a usable prompt.
MAX_PROMPT_BYTES = 16 << 20


def _fmt_stats(title: str, st: dict) -> str:
    acc = ", ".join(f"{a:.2f}" for a in st["acceptance_per_position"]) or "-"
    return (
        f"[{title}] {st['new_tokens']} tokens in {st['total_time_s']:.2f} s = {st['tokens_per_s']:.1f} tokens/s | "
        f"target calls {st['target_calls']} | block efficiency {st['block_efficiency']:.2f} | "
        f"accepted/drafted {st['accepted_per_drafted']:.2f} (acceptance per position: {acc}) | "
        f"draft {st['draft_time_s']:.2f} s, target {st['target_time_s']:.2f} s"
    )


def _read_prompt(path: Path) -> str:
    """The text of ``--prompt-file``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a directory, a file that cannot be read, is not UTF-8 text or holds more than
            :data:`MAX_PROMPT_BYTES` (one line naming it).
    """
    if not path.exists():
        raise FileNotFoundError(f"--prompt-file {str(path)!r} does not exist; name a text file holding the prompt")
    if path.is_dir():
        raise ValueError(f"--prompt-file {str(path)!r} is a directory; name a text file holding the prompt")
    too_long = ValueError(f"--prompt-file {str(path)!r} holds more than {MAX_PROMPT_BYTES >> 20} MiB: longer than "
                          "any target's context; pass a shorter prompt")
    try:
        if path.is_file():  # a regular file: its size says it
            if path.stat().st_size > MAX_PROMPT_BYTES:
                raise too_long
            return path.read_text(encoding="utf-8")
        with open(path, "rb") as fh:  # a device or a pipe (/dev/zero, <(...)): read at most the bound
            data = fh.read(MAX_PROMPT_BYTES + 1)
        if len(data) > MAX_PROMPT_BYTES:
            raise too_long
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--prompt-file {str(path)!r} is not UTF-8 text; save the prompt as UTF-8") from None
    except OSError as exc:
        why = (exc.strerror or type(exc).__name__).lower()
        raise ValueError(f"--prompt-file {str(path)!r} cannot be read ({why}); make it readable "
                         "(e.g. chmod u+r) or pass the text with --prompt") from None


def _write_stdout(text: str) -> None:
    """Stream decoded text to stdout; a write that fails (a full device) is one error naming stdout.

    Raises:
        BrokenPipeError: the reader closed stdout.
        OSError: any other failed write (:func:`specot.cli.command.stdout_error`)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        discard_stdout()
        raise stdout_error(exc) from None


def _verifier_params(args: argparse.Namespace) -> dict:
    """The verifier's parameters from --lenience / --verifier-param, refusing misplaced ones."""
    params: dict = {}
    if args.verifier == "lenient" and args.lenience is None:
        raise ValueError("--verifier lenient is lossy and needs its lenience explicitly: --lenience L with L in (0, 1] "
                         "(L = 1 is plain speculative sampling)")
    if args.lenience is not None:
        if args.verifier != "lenient":
            named = f"verifier {args.verifier!r}" if args.verifier is not None else "the default verifier"
            raise ValueError(f"--lenience applies only to --verifier lenient (a lossy verifier); {named} takes no "
                             "lenience. Drop --lenience, or add --verifier lenient for a lossy run")
        params["lenience"] = args.lenience
    for item in args.verifier_param:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--verifier-param expects NAME=VALUE, got {item!r}")
        if name.strip() == "lenience":
            raise ValueError("pass the lenience as --lenience L (with --verifier lenient)")
        params[name.strip()] = scalar(value.strip())
    return params


def _verifier_text(report: object) -> str:
    info = report.verifier  # type: ignore[attr-defined]
    params = ", ".join(f"{k}={v}" for k, v in info.get("params", {}).items())
    name = f"{info.get('name')}({params})" if params else str(info.get("name"))
    if info.get("lossless", True):
        if report.exactness != EXACTNESS:  # type: ignore[attr-defined]  # e.g. llama.cpp's quantized weights
            weights = report.dtype  # type: ignore[attr-defined]
            return f"verifier {name}: lossless (weights {weights}; greedy equal up to near-ties)"
        return f"verifier {name}: lossless (dtype {report.dtype})"  # type: ignore[attr-defined]
    return f"verifier {name}: LOSSY - the output does not follow the target's distribution"


def _speedup_line(report: object) -> str:
    sp, runs, t = report.speedup, report.speedups, report.timing  # type: ignore[attr-defined]
    if sp is None:
        return "speedup over autoregressive: n/a (no measurable time)"
    if len(runs) > 1:
        what = (f"median of {len(runs)} runs, range {min(runs):.2f}-{max(runs):.2f}x; the two runs of a pair "
                f"decode equally many tokens of the same prompt, a fresh answer per pair when sampling")
    else:
        what = f"one run, one answer; --repeats N for a median; both decode {t.get('tokens')} tokens of the same prompt"
    line = f"speedup over autoregressive: {sp:.2f}x (tokens/s ratio, {what}"
    load = t.get("load_average")
    if load:
        line += f"; load average {load[0]:.2f} on {t.get('cpu_count')} cores"
    line += ")"
    if t.get("busy"):
        line += " -- the machine was busy: timings are unreliable"
    return line


def run(args: argparse.Namespace) -> int:
    """``specot generate``: decode ``args``' prompt, streaming the text (or one JSON object with
    ``--json``), then the statistics; returns the exit code (130 / 143 when interrupted).

    Raises:
        ValueError / TypeError / OSError: bad input or an unloadable model (:func:`specot.generate`).
    """
    if args.cuda_graphs and not str(args.device).startswith("cuda"):
        raise ValueError(f"--cuda-graphs needs --device cuda (on {args.device} the padded passes would only run "
                         "slower); drop it or pass --device cuda")
    prompt = args.prompt if args.prompt is not None else _read_prompt(args.prompt_file)
    params = _verifier_params(args)
    draft_options = {name: getattr(args, name) for name in catalog.DRAFT_FLAGS if getattr(args, name) is not None}
    stream = None if args.json else _write_stdout
    kwargs = dict(
        target=args.target, draft=args.draft, gamma=args.gamma, gamma_schedule=args.gamma_schedule,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
        seed=args.seed, verifier=args.verifier, verifier_params=params, baseline=args.baseline,
        chat=False if args.raw else None, dtype=args.dtype, device=args.device, backend=args.backend, cuda_graphs=args.cuda_graphs, on_text=stream, n=args.drafts,
        tree=args.tree, tree_law=args.tree_law, repeats=args.repeats, **draft_options,
    )
    try:
        report = generate(prompt, **kwargs)
    except GenerationInterrupted as stop:
        return _interrupted(stop, args.json)
    except KeyboardInterrupt:  # before decoding: loading the models, encoding the prompt
        ignore_interrupts()
        status, word = interrupt_status()
        if args.json:
            obj = {"interrupted": True, "phase": "loading", "text": "", "tokens": [], "new_tokens": 0, "report": None}
            if status != EXIT_INTERRUPTED:
                obj["signal"] = signal.Signals(status - 128).name
            print(json.dumps(obj, indent=2), flush=True)
        print(f"\nspecot: {word} before decoding started (loading the models)", file=sys.stderr)
        return status
    if args.json:
        print(dumps(report.to_dict(), indent=2))
        return 0
    print("\n")
    _print_report(report)
    return 0


def _print_report(report: object, *, baseline: bool = True) -> None:
    """The statistics lines of a finished run (text mode): the speculative run, the tree line, and
    (with ``baseline``) the autoregressive run and the speedup when there was one."""
    result = report.result  # type: ignore[attr-defined]
    st = result.stats.to_dict()
    print(_fmt_stats(result.method if result.method == "tree" else "speculative", st)
          + f" | draft {report.draft}{', CUDA graphs' if report.cuda_graphs else ''} | "  # type: ignore[attr-defined]
          + f"backend {report.backend} | "  # type: ignore[attr-defined]
          + _verifier_text(report))
    if result.method == "tree":
        print(f"[tree] mean tree size {st['mean_tree_size']:.1f} nodes | mean accepted length "
              f"{st['mean_accepted_length']:.2f} | time outside forward passes {100 * st['overhead_share']:.1f}%")
    why = pricing_line(report.pass_cost, result.stats.tree_sizes)  # type: ignore[attr-defined]
    if why:
        print(why)
    if baseline and report.baseline is not None:  # type: ignore[attr-defined]
        print(_fmt_stats("autoregressive", report.baseline.stats.to_dict()))  # type: ignore[attr-defined]
        print(_speedup_line(report))


def pricing_line(pass_cost: dict | None, tree_sizes: list[int]) -> str:
    """One line saying what a wide pass costs on this machine and how often the run drafted, when a
    measured pass-cost curve priced the drafts (``GenerateReport.pass_cost``); ``""`` otherwise.
    E.g. ``[pass cost] here a 2-token pass costs 1.56 one-token passes and a 5-token pass 3.28, plus
    0.01 for a drafted step's own work, measured (cache; specot calibrate): a draft token pays only if accepted >= 56% of the time (chains of 1),
    so drafts go where the text repeats: drafted at 12 of 80 steps`` — the chain length γ whose
    break-even acceptance is lowest."""
    if not pass_cost or not pass_cost.get("ratios"):
        return ""
    curve = PassCostCurve.from_dict(pass_cost, source=str(pass_cost.get("source", "cache")))
    r2, r5 = curve.ratio(2), curve.ratio(5)
    steps, drafted = len(tree_sizes), sum(1 for n in tree_sizes if n > 0)
    # the chain of γ drafts that pays at the lowest per-token acceptance (an even-width pass can cost
    # what the odd one below it does, so it need not be γ = 1)
    over = float(pass_cost.get("draft_overhead") or 0.0)  # a drafted step's own work, in one-token passes
    needs = [(a, g) for g in range(1, min(8, max(curve.widths) - 1) + 1)
             if (a := break_even_alpha(g, curve, over / g)) is not None]
    work = (f", plus {over:.2f} for a drafted step's own work, {'measured' if pass_cost.get('step_work') else 'given'}"
            if over > 0 else "")
    head = (f"[pass cost] here a 2-token pass costs {r2:.2f} one-token passes and a 5-token pass {r5:.2f}{work} "
            f"({curve.source}; specot calibrate): ")
    if not needs:
        return head + f"no draft can pay for a wider pass, so every step is plain: drafted at {drafted} of {steps} steps"
    need, gamma = min(needs)
    where = "where the text repeats" if need >= 0.4 else "wherever a draft is likely"
    return head + (f"a draft token pays only if accepted >= {need:.0%} of the time (chains of {gamma}), so drafts "
                   f"go {where}: drafted at {drafted} of {steps} steps")


def _interrupted(stop: GenerationInterrupted, as_json: bool) -> int:
    """Ctrl-C or SIGTERM during decoding: with ``--json`` the one object (what was generated, and the finished
    speculative report when the baseline was interrupted); in text mode the streamed text stays on
    screen, followed by the finished speculative run's statistics when the baseline was the run
    interrupted. Then one line on stderr."""
    ignore_interrupts()
    status, word = interrupt_status()
    if as_json:
        obj = stop.to_dict()
        if status != EXIT_INTERRUPTED:
            obj["signal"] = "SIGTERM"
        print(dumps(obj, indent=2), flush=True)
    elif stop.report is not None:  # the speculative run finished: its statistics still count
        print("\n")
        _print_report(stop.report, baseline=False)
        sys.stdout.flush()
    what = ("" if as_json else "; the statistics above are the finished speculative run's" if stop.report is not None
            else "; the text above is all that was generated")
    print(f"\nspecot: {word} during the {stop.phase} run after {len(stop.tokens)} tokens in "
          f"{stop.elapsed_s:.2f} s ({stop.tokens_per_s:.1f} tokens/s){what}", file=sys.stderr)
    return status
