"""Start-up of the ``specot`` command: ``--help``, ``generate --help`` and usage errors answer without
importing torch or transformers (seconds on a slow CPU); the registered lab commands register
without them too. The subprocess runs the command with both made unimportable: any import of them
while the parser is built fails the command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: The console script's lines, after a meta-path finder that refuses torch and transformers.
_WITHOUT_TORCH = """
import sys

class _Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "transformers"):
            raise ImportError(f"{name} was imported during start-up")
        return None

sys.meta_path.insert(0, _Refuse())
from specot.cli.main import main
sys.exit(main())
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.pop("SPECOT_TRACEBACK", None)
    return subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.mark.parametrize("args,listed", [
    (["--help"], "generate"),
    (["generate", "--help"], "--prompt-file"),
    (["theory", "--help"], "speedup"),
    (["bench", "--help"], "acceptance"),
    (["distill", "--help"], "eagle"),
])
def test_help_answers_without_torch(args, listed):
    p = _run(*args)
    assert p.returncode == 0 and listed in p.stdout, p.stderr
    assert "was imported during start-up" not in p.stderr


@pytest.mark.parametrize("args,match", [
    (["generate"], "one of the arguments --prompt --prompt-file is required"),
    (["nope"], "invalid choice: 'nope'"),
    (["theory", "speedup", "--alpha", "2", "--c", "0.1"], "must lie in [0, 1]"),
    (["bench", "acceptance", "--n-prompts", "x"], "invalid int value"),
])
def test_usage_errors_answer_without_torch(args, match):
    p = _run(*args)
    assert p.returncode == 2 and match in p.stderr and p.stdout == "", p.stderr
    assert "was imported during start-up" not in p.stderr and "Traceback" not in p.stderr


def test_a_usage_error_with_json_prints_one_json_object_without_torch():
    import json

    p = _run("generate", "--json")
    assert p.returncode == 2 and "was imported during start-up" not in p.stderr
    assert json.loads(p.stdout) == {"error": "specot generate: error: one of the arguments --prompt --prompt-file "
                                             "is required", "exit": 2}


def test_the_parser_is_built_without_torch_in_process():
    """The same check without a subprocess: building the parser imports no module that is not
    already loaded from torch or transformers (run in a fresh interpreter, where none is)."""
    code = ("import sys; from specot.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m.partition('.')[0] in ('torch', 'transformers')))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout[-500:], p.stderr[-500:])
