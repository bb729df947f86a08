"""``benchmarks/build_repeat_prompts.py``: the copy-heavy prompt set is deterministic for a seed, holds
every kind, and every prompt carries real text: the function is in the stdlib file it names, the
paragraph and the header lines are in the named package's METADATA (so an invented prompt fails)."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from model_helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "build_repeat_prompts.py"
COMMITTED = ROOT / "benchmarks" / "prompts" / "repeat.jsonl"
mod = load_script("build_repeat_prompts")
# what a prompt may add to the real text it carries: the instruction, names, a chat's framing
MAX_INSTRUCTION_CHARS = 330


def _read(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _build(tmp_path: Path, name: str, *args: str) -> Path:
    out = tmp_path / name
    assert mod.main(["--out", str(out), *args]) == 0
    return out


def _check_stdlib_row(row: dict) -> None:
    rel, name = row["source"].rsplit(":", 1)
    text = (mod.stdlib_root() / rel).read_text(encoding="utf-8")
    quote = row["quote"]
    assert quote in text, f"{row['source']}: the function is not in the stdlib file"
    assert re.match(rf"(@.*\n)*def {re.escape(name)}\(", quote), row["source"]
    assert mod.MIN_LINES <= len(quote.splitlines()) <= mod.MAX_LINES
    assert f"```python\n{quote}\n```" in row["prompt"]
    if row["kind"] == "edit-rename":
        old, new = re.search(r"rename `(\w+)` to `(\w+)`", row["prompt"]).groups()
        assert re.search(rf"\b{old}\b", quote) and not re.search(rf"\b{new}\b", quote)


def _check_dist_row(row: dict) -> None:
    name = row["source"].removeprefix("dist:")
    assert name in mod.DISTS
    dist = importlib.metadata.distribution(name)
    text = dist.read_text("METADATA")
    quote = row["quote"]
    if row["kind"] == "quote-summary":
        assert quote in text, f"{name}: the paragraph is not in its METADATA"
        assert f"\n\n{quote}\n\n" in row["prompt"]
        return
    header, _ = mod.split_metadata(text)
    lines = quote.split("\n")
    it = iter(header)
    assert all(line in it for line in lines), f"{name}: the header excerpt is not lines of its METADATA header"
    fields = dict(line.split(": ", 1) for line in lines)
    assert fields["Name"] == dist.metadata["Name"] and fields["Version"] == dist.version
    assert fields["Summary"] == dist.metadata["Summary"]
    assert fields["Requires-Python"] == dist.metadata["Requires-Python"]
    assert f"\n\n{quote}\n\n" in row["prompt"]


def check_rows(rows: list[dict], per_kind: int) -> None:
    """Fields, kinds, sizes, and that each prompt's text is real (see the module docstring)."""
    assert [r["kind"] for r in rows[:len(mod.KINDS)]] == list(mod.KINDS)
    for kind in mod.KINDS:
        assert sum(r["kind"] == kind for r in rows) == per_kind, kind
    assert len({r["source"] for r in rows if r["kind"] in mod.CODE_KINDS}) == 3 * per_kind
    for row in rows:
        assert {"prompt", "kind", "source", "version", "quote"} <= set(row)
        assert isinstance(row["prompt"], str) and len(row["prompt"]) <= mod.MAX_CHARS
        assert row["quote"] in row["prompt"]
        assert len(row["prompt"]) - len(row["quote"]) <= MAX_INSTRUCTION_CHARS, row["source"]
        if row["source"].startswith("dist:"):
            _check_dist_row(row)
        else:
            _check_stdlib_row(row)


def test_deterministic_for_a_seed_and_real(tmp_path):
    a = _build(tmp_path, "a.jsonl", "--seed", "7")
    b = _build(tmp_path, "b.jsonl", "--seed", "7")
    assert a.read_bytes() == b.read_bytes()
    check_rows(_read(a), per_kind=4)
    c = _build(tmp_path, "c.jsonl", "--seed", "8", "--per-kind", "2")
    check_rows(_read(c), per_kind=2)
    assert _read(c) != _read(a)[:10]


def test_runs_as_a_script(tmp_path):
    out = tmp_path / "repeat.jsonl"
    run = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "wrote 20 prompts" in run.stderr
    assert len(_read(out)) == 20


def test_committed_set_is_real_and_rebuilds():
    rows = _read(COMMITTED)
    assert len(rows) == 20
    versions = {r["source"]: r["version"] for r in rows}
    here = {}
    for src in versions:
        if src.startswith("dist:"):
            try:
                here[src] = importlib.metadata.version(src.removeprefix("dist:"))
            except importlib.metadata.PackageNotFoundError:
                here[src] = None
        else:
            here[src] = platform.python_version()
    if here != versions:
        pytest.skip("benchmarks/prompts/repeat.jsonl was built with other Python or package versions")
    check_rows(rows, per_kind=4)
    assert mod.build(seed=0, per_kind=4) == rows
