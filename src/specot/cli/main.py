"""Entry point of the ``specot`` command: ``specot generate | theory`` from the core, and any
command registered in the ``specot.commands`` entry-point group (the lab's ``bench`` and
``distill``: the core never imports the lab).

Each sub-command module exposes ``register(subparsers) -> None``; the parser sets ``func`` to the
handler, which returns an exit code.

Start-up: building the parser imports neither torch nor transformers (about 6 s), so ``--help``
and usage errors answer at once. A command's handler is named by its module
(:class:`DeferredHandler`) and a sub-command's arguments may be added on first use
(:class:`CommandParser`); those modules, and with them torch, are imported inside :func:`main`,
after its Ctrl-C and error handling is in place, so that an interrupt during the import is
reported like any other.

Exit status: 0 success; 1 bad input or an unusable environment (one line ``specot: error: ...``,
a closed stdout included), or a bug in specot (one line ``specot: internal error: ...``); 2 usage
errors (argparse); 130 interrupted (Ctrl-C: one line ``specot: interrupted``, and with ``--json``
one JSON object ``{"interrupted": true, ...}`` on stdout); 143 terminated (SIGTERM: the same as Ctrl-C, what was generated kept); 141 when stdout is
a closed pipe (``specot generate ... | head``): no message, the status a shell reports for a
command that SIGPIPE ended (128 + 13), as ``yes | head`` gives, which ``set -o pipefail`` scripts
expect. With ``--json`` every exit prints exactly one JSON object on stdout: the result, the
interrupt's, or ``{"error": "...", "exit": 1 | 2}``.
"""

from __future__ import annotations

import argparse
import errno
import json
import linecache
import os
import signal
import sys
import threading
import warnings
from typing import Any

from .command import (EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_TERMINATED, CommandParser, DeferredHandler,
                      UsageError, _INTERRUPTS, _last_interrupt, flush_stdout, ignore_interrupts, interrupt_status)

__all__ = ["main", "build_parser", "COMMAND_GROUP", "KNOWN_ERRORS", "EXIT_INTERRUPTED", "EXIT_TERMINATED",
           "EXIT_BROKEN_PIPE", "error_message", "internal_error", "ignore_interrupts", "interrupt_status",
           "CommandParser", "DeferredHandler", "UsageError", "stdout_closed"]

#: Entry-point group through which other packages (the lab) add sub-commands.
COMMAND_GROUP = "specot.commands"


def build_parser() -> argparse.ArgumentParser:
    """The full ``specot`` argument parser: the core's commands, then the registered ones.

    Imports neither torch nor transformers: the handlers and the heavier options load on use."""
    from importlib.metadata import entry_points  # 70 ms of imports: after the Ctrl-C handling too

    from . import audit, calibrate, generate, theory  # here, not at the top: see the module docstring

    parser = CommandParser(
        prog="specot",
        description="Exact speculative decoding: verifiers, theory and a decoding engine over Hugging Face models.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for mod in (generate, theory, calibrate, audit):
        mod.register(sub)
    for ep in sorted(entry_points(group=COMMAND_GROUP), key=lambda e: e.name):
        ep.load()(sub)
    return parser


#: Exceptions that mean bad input or an unusable environment (a model that cannot be loaded, a
#: missing file, a device that is not there): reported as one line, exit status 1. Anything else
#: (and a ``TypeError`` the interpreter raised, :func:`internal_error`) is a bug in specot: one line
#: ``specot: internal error: ...``, exit status 1, the traceback with ``SPECOT_TRACEBACK=1``.
KNOWN_ERRORS: tuple[type[BaseException], ...] = (ValueError, TypeError, OSError, ImportError, MemoryError)

#: The one line for a stdout that cannot be written.
_STDOUT_CLOSED = ("stdout is closed; specot writes its results there: give it a file or a pipe (e.g. > out.txt, "
                  "or > /dev/null to discard them)")


#: What follows an internal error's line.
_BUG = " (a bug in specot, not in your input: SPECOT_TRACEBACK=1 shows where; please report it)"


def internal_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a bug rather than bad input: any exception outside :data:`KNOWN_ERRORS`,
    and a ``TypeError`` that no ``raise`` statement raised (the interpreter's own: a call of a
    module, a wrong argument count, an operand of the wrong type), which a check of the input
    never gives."""
    if not isinstance(exc, KNOWN_ERRORS):
        return True
    if not isinstance(exc, TypeError):
        return False
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    line = linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).strip()
    return bool(line) and not line.startswith("raise")  # no source to read: taken as a check's


def error_message(exc: BaseException) -> str:
    """``exc`` as one line: its message with line breaks folded (the type name when it has none)."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    if isinstance(exc, KeyError) or not text:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text


def _one_line_warning(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
    """A warning as one line, ``specot: warning: ...``, without the source line (the CLI's form)."""
    print("specot: warning: " + " ".join(str(message).split()), file=sys.stderr)


def stdout_closed() -> bool:
    """Whether stdout cannot take output: closed when the process started (``specot ... >&-``:
    ``sys.stdout`` is ``None``), or a descriptor that is closed or open only for reading."""
    out = sys.stdout
    if out is None:
        return True
    try:
        fd = out.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test's capture): it takes output
        return False
    try:
        import fcntl  # POSIX only

        return fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    except ImportError:
        return False
    except OSError:
        return True


class _Run:
    """What :func:`main` knows about the run when it is interrupted or fails."""

    def __init__(self, argv: list[str]) -> None:
        self.json = "--json" in argv[: argv.index("--")] if "--" in argv else "--json" in argv
        self.command: str | None = None  # set once the command runs
        self.signum: int | None = None  # the interrupt that came (whatever a library made of its KeyboardInterrupt)

    def on_signal(self, signum: int, frame: Any) -> None:
        """The SIGINT and SIGTERM handler while :func:`main` runs: Python's own for SIGINT (raise
        ``KeyboardInterrupt``), remembering which signal came. A library may turn the interrupt
        into another error: an import interrupted half-way has ended in numpy's
        ``RecursionError``, re-raised by transformers as ``ModuleNotFoundError``; :func:`main`
        reports those as the interrupt."""
        self.signum = _last_interrupt[0] = signum
        raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (module docstring: 0, 1, 2, 130, 141, 143).

    Ctrl-C and SIGTERM are handled from the first instruction, the import of the sub-commands
    included: one line ``specot: interrupted`` (``terminated (SIGTERM)``) on stderr, exit 130
    (143); with ``--json``, stdout then holds one JSON object ``{"interrupted": true, "command":
    ..., "phase": "start-up" | "running"}`` unless the command printed its own (``specot
    generate`` prints what was generated). An error prints one line ``specot: error: ...`` (and
    with ``--json`` the object ``{"error": ..., "exit": 1}``); a usage error raises argparse's
    ``SystemExit(2)`` after the same JSON object.

    Set ``SPECOT_TRACEBACK=1`` to get the full traceback of a reported error."""
    main_thread = threading.current_thread() is threading.main_thread()
    args = list(sys.argv[1:] if argv is None else argv)
    run = _Run(args)
    _last_interrupt[0] = signal.SIGINT
    handlers = {s: signal.signal(s, run.on_signal) for s in _INTERRUPTS} if main_thread else {}
    try:
        if stdout_closed():
            print(f"specot: error: {_STDOUT_CLOSED}", file=sys.stderr)
            return 1
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            return _run(args, run)
    except KeyboardInterrupt:
        return _interrupted(run)
    except BrokenPipeError:
        return _broken_pipe()
    except UsageError as exc:
        _json_error(run, exc.message, 2)
        raise
    except Exception as exc:
        if run.signum is not None:  # an interrupt that a library turned into another error
            return _interrupted(run)
        if isinstance(exc, OSError) and exc.errno == errno.EBADF and stdout_closed():
            print(f"specot: error: {_STDOUT_CLOSED}", file=sys.stderr)
            return 1
        known = isinstance(exc, KNOWN_ERRORS) and not internal_error(exc)
        text = error_message(exc)
        if not known:
            text = "internal error: " + (text if text.startswith(type(exc).__name__) else f"{type(exc).__name__}: {text}")
        _json_error(run, text, 1)
        if os.environ.get("SPECOT_TRACEBACK"):
            raise
        print(f"specot: {'error: ' if known else ''}{text}" + ("" if known else _BUG), file=sys.stderr)
        return 1
    finally:
        for signum, handler in handlers.items():
            default = signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
            signal.signal(signum, handler if handler is not None else default)


def _run(argv: list[str], run: _Run) -> int:
    parser = build_parser()
    if run.signum is not None:  # the import swallowed it
        raise KeyboardInterrupt
    args = parser.parse_args(argv)
    run.json = getattr(args, "json", None) is True  # theory alpha's --json names a file
    func = args.func.load() if isinstance(args.func, DeferredHandler) else args.func  # start-up still
    run.command = args.command
    status = int(func(args) or 0)
    flush_stdout()  # a full device fails here, reported with a non-zero exit, not at the interpreter's exit
    return status


def _json_error(run: _Run, message: str, status: int) -> None:
    """With ``--json``: the error as the run's one JSON object on stdout."""
    if not run.json:
        return
    try:
        print(json.dumps({"error": message, "exit": status}), flush=True)
    except (OSError, ValueError, AttributeError):  # stdout is gone: the line on stderr still says it
        pass


def _interrupted(run: _Run) -> int:
    """Ctrl-C or SIGTERM outside a command's own handling: one line, and with ``--json`` one JSON
    object."""
    ignore_interrupts()
    status, word = interrupt_status()
    if run.json:
        obj: dict[str, Any] = {"interrupted": True, "command": run.command,
                               "phase": "running" if run.command else "start-up"}
        if status != EXIT_INTERRUPTED:
            obj["signal"] = signal.Signals(status - 128).name
        try:
            print(json.dumps(obj), flush=True)
        except (OSError, AttributeError):  # stdout is gone: the line below still says it
            pass
    print(f"\nspecot: {word}", file=sys.stderr)
    return status


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
