"""Entry point of the ``specot`` command: ``specot generate | theory`` from the core, and any
command registered in the ``specot.commands`` entry-point group (the lab's ``bench`` and
``distill``: the core never imports the lab).

Each sub-command module exposes ``register(subparsers) -> None``; the parser sets ``func`` to the
handler, which returns an exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from importlib.metadata import entry_points

from . import generate, theory

#: Entry-point group through which other packages (the lab) add sub-commands.
COMMAND_GROUP = "specot.commands"


def build_parser() -> argparse.ArgumentParser:
    """The full ``specot`` argument parser: the core's commands, then the registered ones."""
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


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code: 0 success, 1 bad input (one line
    ``specot: error: ...`` on stderr), 2 usage errors (argparse), 130 interrupted (Ctrl-C).

    Set ``SPECOT_TRACEBACK=1`` to get the full traceback of a reported error."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warning
            return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\nspecot: interrupted", file=sys.stderr)
        return 130
    except KNOWN_ERRORS as exc:
        if os.environ.get("SPECOT_TRACEBACK"):
            raise
        print(f"specot: error: {error_message(exc)}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
