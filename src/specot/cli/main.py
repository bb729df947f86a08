"""Entry point of the ``specot`` command: ``specot generate | theory | bench | distill``.

Each sub-command lives in its own module of :mod:`specot.cli` exposing
``register(subparsers) -> None``; the parser sets ``func`` to the handler, which returns an exit code.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# sub-command modules, in the order shown by --help; a module that is missing is skipped.
_COMMANDS = ("generate", "theory", "bench", "distill")


def build_parser() -> argparse.ArgumentParser:
    """The full ``specot`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="specot",
        description="Exact speculative decoding: verifiers, theory and a decoding engine over Hugging Face models.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMANDS:
        try:
            mod = importlib.import_module(f"specot.cli.{name}")
        except ModuleNotFoundError as exc:  # pragma: no cover - only while a sub-command is unbuilt
            if exc.name != f"specot.cli.{name}":
                raise
            continue
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit code (2 for usage errors, 1 for bad input)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, FileNotFoundError) as exc:
        print(f"specot {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
