"""What every ``specot`` sub-command shares with the entry point (:mod:`specot.cli.main`): the
parser class, the deferred handler, the exit statuses and the interrupt being reported. The
sub-command modules import these from here, and :mod:`specot.cli.main` imports the sub-commands,
so no module imports one that imports it back."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from typing import Any, Callable

__all__ = ["CommandParser", "DeferredHandler", "UsageError", "EXIT_INTERRUPTED", "EXIT_TERMINATED",
           "EXIT_BROKEN_PIPE", "ignore_interrupts", "interrupt_status"]

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

    A usage error prints argparse's usage and message and raises :class:`UsageError` (a
    ``SystemExit`` with status 2) carrying the message, which :func:`main` repeats as JSON when
    ``--json`` was given.
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

    def error(self, message: str) -> Any:  # noqa: D102
        self.print_usage(sys.stderr)
        text = f"{self.prog}: error: {message}"
        print(text, file=sys.stderr)
        raise UsageError(text)


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
