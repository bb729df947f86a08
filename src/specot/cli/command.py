"""What every ``specot`` sub-command shares with the entry point (:mod:`specot.cli.main`): the
parser class, the deferred handler, the exit statuses and the interrupt being reported. The
sub-command modules import these from here, and :mod:`specot.cli.main` imports the sub-commands,
so no module imports one that imports it back."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import signal
import sys
import threading
from typing import Any, Callable

__all__ = ["CommandParser", "DeferredHandler", "UsageError", "EXIT_INTERRUPTED", "EXIT_TERMINATED",
           "EXIT_BROKEN_PIPE", "ignore_interrupts", "interrupt_status", "count", "number", "seed_type", "MAX_THREADS", "finite_float",
           "discard_stdout", "flush_stdout", "stdout_error", "scalar"]

#: Exit status after Ctrl-C (128 + SIGINT, the shell's convention).
EXIT_INTERRUPTED = 130
#: Exit status after SIGTERM (128 + SIGTERM), handled like Ctrl-C.
EXIT_TERMINATED = 143
#: Exit status when stdout is a closed pipe (128 + SIGPIPE, what a shell reports for a command
#: that SIGPIPE ended).
EXIT_BROKEN_PIPE = 141

#: The signals handled as an interrupt while :func:`main` runs, and the word each is reported with.
_INTERRUPTS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}
#: The signal of the interrupt being handled (main's handlers set it; SIGINT for a bare KeyboardInterrupt).
_last_interrupt: list[int] = [signal.SIGINT]


class CommandParser(argparse.ArgumentParser):
    """The parser of ``specot`` and of its sub-commands (sub-parsers inherit the class).

    Args:
        add_arguments: ``add_arguments(parser)``, called on first use (parsing, help or usage)
            instead of at registration: a sub-command whose options come from a module that
            imports torch registers without importing it.

    A usage error prints one line, argparse's message and where the usage is (``PROG --help``),
    and raises :class:`UsageError` (a ``SystemExit`` with status 2) carrying the message, which
    :func:`main` repeats as JSON when ``--json`` was given. A ``type=float`` option takes finite
    numbers only (:func:`finite_float`): NaN and infinities are usage errors for every command.
    Help and usage that cannot be written (``specot --help > /dev/full``) raise the ``OSError``
    (argparse itself drops it), so that the command fails with one line instead of exiting 0.
    """

    def __init__(self, *args: Any, add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deferred = add_arguments

    def _populate(self) -> None:
        if self._deferred is not None:
            add, self._deferred = self._deferred, None
            add(self)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:  # noqa: D102
        self._populate()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:  # noqa: D102
        self._populate()
        return super().format_help()

    def format_usage(self) -> str:  # noqa: D102
        self._populate()
        return super().format_usage()

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D102
        if kwargs.get("type") is float:
            kwargs["type"] = finite_float
        return super().add_argument(*args, **kwargs)

    def error(self, message: str) -> Any:  # noqa: D102
        text = f"{self.prog}: error: {message}"
        print(f"{text} (usage: {self.prog} --help)", file=sys.stderr)
        raise UsageError(text)

    def _print_message(self, message: str, file: Any = None) -> None:
        if not message:
            return
        file = sys.stdout if file is None else file
        if file is None:  # stdout closed at start-up: main reports it
            raise OSError("stdout is closed")
        try:
            file.write(message)
            file.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            if file is sys.stdout:
                discard_stdout()
                raise stdout_error(exc) from None
            raise


def stdout_error(exc: OSError) -> OSError:
    """The one-line error for output that could not be written to stdout (``exc``'s errno kept)."""
    why = exc.strerror or type(exc).__name__
    err = OSError(f"cannot write to stdout ({why}); free space on its device or redirect the output elsewhere")
    err.errno = exc.errno
    return err


def flush_stdout() -> None:
    """Flush stdout at the end of a command, so that a failed write (a full device) is reported as
    :func:`stdout_error`, with a non-zero exit, instead of passing unseen when the interpreter exits.

    Raises:
        BrokenPipeError: its reader closed it (:func:`specot.cli.main.main` reports that).
        OSError: any other failed write (stdout is discarded first: :func:`discard_stdout`).
    """
    out = sys.stdout
    if out is None:
        return
    try:
        out.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:
        if isinstance(exc, ValueError):  # closed by the command: nothing buffered
            return
        discard_stdout()
        raise stdout_error(exc) from None


def discard_stdout() -> None:
    """Point stdout's descriptor at ``os.devnull`` after a failed write (a full device, ``> /dev/full``),
    so that what is still buffered does not fail again, with a second message, when the interpreter
    flushes it on exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # no real file behind sys.stdout (a test's capture)
        pass


def scalar(text: str) -> object:
    """The value of a ``NAME=VALUE`` option: an int, else a float, else the text itself."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def finite_float(text: str) -> float:
    """A float option's value: a finite number (argparse's ``type``).

    Raises:
        argparse.ArgumentTypeError: not a number, NaN or infinite (a usage error naming the value).
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def _bounded(kind: Callable[[str], Any], low: float | None, high: float | None, *, low_open: bool) -> Callable[[str], Any]:
    name = "an integer" if kind is int else "a number"

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except (ValueError, argparse.ArgumentTypeError):
            raise argparse.ArgumentTypeError(f"must be {name}, got {text!r}") from None
        too_low = low is not None and (value <= low if low_open else value < low)
        if too_low or (high is not None and value > high):
            lo = "" if low is None else f"{'>' if low_open else '>='} {low:g}"
            hi = "" if high is None else f"<= {high:g}"
            raise argparse.ArgumentTypeError(f"must be {name} {' and '.join(x for x in (lo, hi) if x)}, got {text}")
        return value

    convert.__name__ = kind.__name__  # argparse names the type in its own messages
    return convert


#: The most threads a ``--threads`` option takes (far more cores than any machine has; a larger
#: number overflows torch's setting).
MAX_THREADS = 4096


def count(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """An integer option's ``type``: an int in ``[minimum, maximum]`` (a usage error otherwise)."""
    return _bounded(int, minimum, maximum, low_open=False)


def seed_type() -> Callable[[str], int]:
    """A ``--seed`` option's ``type``: an int a ``torch.Generator`` takes (``[-2**63, 2**64 - 1]``)."""
    return _bounded(int, -(1 << 63), (1 << 64) - 1, low_open=False)


def number(*, above: float | None = None, minimum: float | None = None, maximum: float | None = None) -> Callable[[str], float]:
    """A float option's ``type``: finite, ``> above`` (or ``>= minimum``) and ``<= maximum``."""
    return _bounded(finite_float, above if above is not None else minimum, maximum, low_open=above is not None)


class UsageError(SystemExit):
    """A usage error (exit status 2); ``message`` is argparse's line ``PROG: error: ...``."""

    def __init__(self, message: str) -> None:
        super().__init__(2)
        self.message = message


class DeferredHandler:
    """A command's handler named by module and function, imported when the command runs (inside
    :func:`main`'s interrupt handling), so that building the parser imports no torch.

    Raises (when called or loaded):
        ImportError / AttributeError: no such module or function (a packaging bug).
    """

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def load(self) -> Callable[[argparse.Namespace], int]:
        """The handler itself (imports its module)."""
        return getattr(importlib.import_module(self.module), self.name)

    def __call__(self, args: argparse.Namespace) -> int:
        return self.load()(args)

    def __repr__(self) -> str:
        return f"DeferredHandler({self.module}:{self.name})"


def ignore_interrupts() -> None:
    """Ignore further Ctrl-C and SIGTERM while the command reports an interrupt (a second signal
    must not cut its one line or its JSON object short); :func:`main` restores the handlers when
    it returns. A no-op outside the main thread."""
    if threading.current_thread() is threading.main_thread():
        for signum in _INTERRUPTS:
            signal.signal(signum, signal.SIG_IGN)


def interrupt_status() -> tuple[int, str]:
    """``(exit status, word)`` of the interrupt being reported: ``(130, "interrupted")`` after
    Ctrl-C, ``(143, "terminated (SIGTERM)")`` after SIGTERM."""
    signum = _last_interrupt[0]
    return 128 + int(signum), _INTERRUPTS.get(signum, "interrupted")
