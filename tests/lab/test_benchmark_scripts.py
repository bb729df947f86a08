"""``benchmarks/``: every measurement script is documented in ``benchmarks/README.md`` and has a test;
every Python script loads and answers ``--help`` with its purpose; every shell script parses
(``bash -n``); the folder holds no one-off A/B script and no file named by who ran it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from model_helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
README = (BENCH / "README.md").read_text(encoding="utf-8")
PY_SCRIPTS = sorted(p.relative_to(BENCH).with_suffix("").as_posix() for p in BENCH.rglob("*.py"))
SH_SCRIPTS = sorted(p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*.sh"))


def test_every_script_is_documented_with_a_test():
    for name in [f"{s}.py" for s in PY_SCRIPTS] + SH_SCRIPTS:
        rows = [line for line in README.splitlines() if line.startswith(f"| `{name}` |")]
        assert len(rows) == 1, f"benchmarks/README.md has no row for {name}"
        tests = re.findall(r"`(tests/lab/[\w/]+\.py)`", rows[0])
        assert tests and all((ROOT / t).exists() for t in tests), rows[0]


def test_no_one_off_scripts_or_names_of_runs():
    names = [p.relative_to(ROOT).as_posix() for p in BENCH.rglob("*") if p.is_file()]
    assert not [n for n in names if n.endswith("_ab.py")]
    assert not [n for n in names if re.search(r"_s\d\d([._/]|$)", n)]
    assert not (ROOT / "scripts").exists() or not any((ROOT / "scripts").iterdir())


@pytest.mark.parametrize("name", PY_SCRIPTS)
def test_python_script_answers_help(name, capsys):
    mod = load_script(name)
    assert (mod.__doc__ or "").strip(), f"{name} has no docstring"
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("name", SH_SCRIPTS)
def test_shell_script_parses(name):
    run = subprocess.run(["bash", "-n", str(BENCH / name)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
