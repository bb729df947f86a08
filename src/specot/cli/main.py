"""Entry point of the ``specot`` command: ``specot generate | theory`` from the core, and any
command registered in the ``specot.commands`` entry-point group (the lab's ``bench`` and
``distill``: the core never imports the lab).

Each sub-command module exposes ``register(subparsers) -> None``; the parser sets ``func`` to the
handler, which returns an exit code.

Start-up: this module imports only the standard library. The sub-commands, and with them torch
and transformers (about 6 s), are imported inside :func:`main`, after its Ctrl-C and error
handling is in place, so that an interrupt during the import is reported like any other.

Exit status: 0 success; 1 bad input or an unusable environment (one line ``specot: error: ...``);
2 usage errors (argparse); 130 interrupted (Ctrl-C: one line ``specot: interrupted``, and with
``--json`` one JSON object ``{"interrupted": true, ...}`` on stdout); 141 when stdout is a closed
pipe (``specot generate ... | head``): no message, the status a shell reports for a command that
SIGPIPE ended (128 + 13), as ``yes | head`` gives, which ``set -o pipefail`` scripts expect.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import warnings
from typing import Any

__all__ = ["main", "build_parser", "COMMAND_GROUP", "KNOWN_ERRORS", "EXIT_INTERRUPTED", "EXIT_BROKEN_PIPE",
           "error_message", "ignore_interrupts"]

#: Entry-point group through which other packages (the lab) add sub-commands.
COMMAND_GROUP = "specot.commands"

#: Exit status after Ctrl-C (128 + SIGINT, the shell's convention).
EXIT_INTERRUPTED = 130
#: Exit status when stdout is a closed pipe (128 + SIGPIPE, what a shell reports for a command
#: that SIGPIPE ended).
EXIT_BROKEN_PIPE = 141


def build_parser() -> argparse.ArgumentParser:
    """The full ``specot`` argument parser: the core's commands, then the registered ones.

    Imports the sub-command modules (torch, transformers): :func:`main` calls it inside its
    Ctrl-C handling."""
    from importlib.metadata import entry_points  # 70 ms of imports: after the Ctrl-C handling too

    from . import generate, theory  # here, not at the top: see the module docstring

    parser = argparse.ArgumentParser(
        prog="specot",
        description="Exact speculative decoding: verifiers, theory and a decoding engine over Hugging Face models.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in (generate, theory):
        mod.register(sub)
    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        ep.load()(sub)
    return parser


#: Exceptions that mean bad input or an unusable environment (a model that cannot be loaded, a
#: missing file, a device that is not there): reported as one line, exit status 1. Anything else
#: is a bug in specot and keeps its traceback.
KNOWN_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError, ImportError, MemoryError)


def error_message(exc: BaseException) -> str:
    """``exc`` as one line: its message with line breaks folded (the type name when it has none)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, KeyError) or not text:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """A warning as one line, ``specot: warning: ...``, without the source line (the CLI's form)."""
    print("specot: warning: " + " ".join(str(message).split()), file=sys.stderr)


def ignore_interrupts() -> None:
    """Ignore further Ctrl-C while the command reports an interrupt (a second Ctrl-C must not cut
    its one line or its JSON object short); :func:`main` restores the handler when it returns.
    A no-op outside the main thread."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class _Run:
    """What :func:`main` knows about the run when it is interrupted."""

    def __init__(self, argv: list[str]) -> None:
        self.json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
        self.command: str | None = None  # set once the command runs
        self.sigint = False  # a Ctrl-C arrived (whatever a library made of its KeyboardInterrupt)

    def on_sigint(self, signum: int, frame: Any) -> None:
        """The SIGINT handler while :func:`main` runs: Python's own (raise ``KeyboardInterrupt``),
        remembering that it came. A library may turn the interrupt into another error: an
        import interrupted half-way has ended in numpy's ``RecursionError``, re-raised by
        transformers as ``ModuleNotFoundError``; :func:`main` reports those as the interrupt."""
        self.sigint = True
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (module docstring: 0, 1, 2, 130, 141).

    Ctrl-C is handled from the first instruction, the import of the sub-commands included: one
    line ``specot: interrupted`` on stderr, exit 130; with ``--json``, stdout then holds one JSON
    object ``{"interrupted": true, "command": ..., "phase": "start-up" | "running"}`` unless the
    command printed its own (``specot generate`` prints what was generated).

    Set ``SPECOT_TRACEBACK=1`` to get the full traceback of a reported error."""
    main_thread = threading.current_thread() is threading.main_thread()
    args = list(sys.argv[1:] if argv is None else argv)
    run = _Run(args)
    handler = signal.signal(signal.SIGINT, run.on_sigint) if main_thread else None
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            return _run(args, run)
    except KeyboardInterrupt:
        return _interrupted(run)
    except BrokenPipeError:
        return _broken_pipe()
    except Exception as exc:
        if run.sigint:  # an interrupt that a library turned into another error
            return _interrupted(run)
        if not isinstance(exc, KNOWN_ERRORS) or os.environ.get("SPECOT_TRACEBACK"):
            raise
        print(f"specot: error: {error_message(exc)}", file=sys.stderr)
        return 1
    finally:
        if main_thread:
            signal.signal(signal.SIGINT, handler if handler is not None else signal.default_int_handler)


def _run(argv: list[str], run: _Run) -> int:
    parser = build_parser()
    if run.sigint:  # the import swallowed it
        raise KeyboardInterrupt
    args = parser.parse_args(argv)
    run.command = args.command
    return int(args.func(args) or 0)


def _interrupted(run: _Run) -> int:
    """Ctrl-C outside a command's own handling: one line, and with ``--json`` one JSON object."""
    ignore_interrupts()
    if run.json:
        obj: dict[str, Any] = {"interrupted": True, "command": run.command,
                               "phase": "running" if run.command else "start-up"}
        try:
            print(json.dumps(obj), flush=True)
        except OSError:  # stdout is gone: the line below still says it
            pass
    print("\nspecot: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _broken_pipe() -> int:
    """stdout was closed by its reader: no message. stdout is pointed at ``/dev/null`` so that the
    interpreter's final flush does not fail again (the recipe of Python's ``signal`` docs, "Note
    on SIGPIPE"), and the status is 141 (module docstring)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind sys.stdout (a test's capture)
        pass
    return EXIT_BROKEN_PIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
