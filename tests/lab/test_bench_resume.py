"""Benchmarks keep what they measured: ``specot bench speedup`` appends each finished cell to
``<out>/speedup.jsonl``; an interrupted run leaves a partial result that ``specot bench results``
reads, and the same command resumes it (skipping the finished cells, after checking the
configuration). Also the journal itself: a line cut short by a kill, another configuration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from model_helpers import tiny_lm
from specot.cli.main import main
from specot_lab.bench.journal import Journal, read_journal
from specot_lab.bench.speedup import load_speedup_result, run_speedup_bench

PROMPTS = [[1, 2, 3, 1, 2], [4, 5, 6, 4, 5], [7, 8, 9, 7, 8]]


def _run(journal: Path, **kw):
    tgt = tiny_lm(0, vocab=16, dtype=torch.float32)
    args = dict(target=tgt, draft=None, prompts=PROMPTS, temperatures=[0.0, 1.0], gammas=[2], trees=[],
                tree_verifiers=[], max_new_tokens=6, cost_reps=1, progress=False, peers=False, journal=journal)
    return run_speedup_bench(**{**args, **kw})


def _cells(path: Path) -> list[dict]:
    return [r for r in read_journal(path)[1] if r["kind"] == "cell"]


def test_a_cut_journal_is_resumed_without_measuring_its_cells_again(tmp_path):
    journal = tmp_path / "speedup.jsonl"
    full = _run(journal)
    assert full["complete"] and full["cells_done"] == full["cells_total"] == 2 * 3 * 2
    lines = journal.read_text().splitlines()
    first_cells = [i for i, line in enumerate(lines) if json.loads(line)["kind"] == "cell"]
    keep = lines[: first_cells[4]]  # header, setup and four cells: an interrupted run
    journal.write_text("\n".join(keep) + "\n" + lines[first_cells[4]][:25])  # and a line cut mid-write
    partial = load_speedup_result(journal)
    assert not partial["complete"] and partial["cells_done"] == 4
    assert {r["method"] for r in partial["rows"]} <= {"ar", "ngram γ=2"} and partial["rows"]

    resumed = _run(journal)
    cells = _cells(journal)
    assert resumed["complete"] and len(cells) == 12
    assert cells[:4] == [json.loads(line) for line in keep if json.loads(line)["kind"] == "cell"]  # kept, not re-run
    assert len({(c["temperature"], c["prompt"], c["method"]) for c in cells}) == 12
    assert len(resumed["runs"]) == 2  # the first process and the one that resumed it
    assert [r["kind"] for r in read_journal(journal)[1]].count("setup") == 1  # the cost curve is kept


def test_another_configuration_is_refused_and_fresh_starts_over(tmp_path):
    journal = tmp_path / "speedup.jsonl"
    _run(journal)
    with pytest.raises(ValueError, match=r"another configuration \(max_new_tokens: 6 in the journal, 7 now\)"):
        _run(journal, max_new_tokens=7)
    res = _run(journal, max_new_tokens=7, fresh=True)
    assert res["complete"] and res["max_new_tokens"] == 7 and len(res["runs"]) == 1


def test_a_journal_of_another_benchmark_is_refused(tmp_path):
    path = tmp_path / "speedup.jsonl"
    Journal.open(path, "acceptance", 1, {"a": 1}, {})
    with pytest.raises(ValueError, match="journal of 'acceptance'"):
        _run(path)
    path.write_text("not json\n{}\n")
    with pytest.raises(ValueError, match="damaged"):
        read_journal(path)


def _journal_cells(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.startswith('{"kind": "cell"'))


@pytest.mark.slow
def test_sigint_keeps_the_finished_cells_and_the_same_command_resumes(tiny_model_dir, tmp_path, capsys):
    """A real ``specot bench speedup`` process, SIGINT once its first cell is on disk: exit 130, a
    partial result that ``specot bench results`` reads, then the same command finishes the run."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": " ".join(["the cat sat on the mat and"] * (i + 1))}) + "\n"
                               for i in range(2)))
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "specot.cli.main", "bench", "speedup", "--target", str(tiny_model_dir),
           "--prompts", str(prompts), "--n-prompts", "2", "--draft", "none", "--gammas", "2", "--trees", "2x2",
           "--max-new-tokens", "12", "--dtype", "float32", "--no-plots", "--no-progress", "--out", str(out)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    journal = out / "speedup.jsonl"
    deadline = time.monotonic() + 300
    while _journal_cells(journal) < 1:  # wait for the first finished cell on disk
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no cell written in 300 s"
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert "specot: interrupted" in err and "the same command resumes" in err, err
    done = _journal_cells(journal)
    partial = json.loads((out / "speedup.json").read_text())
    total = 2 * 2 * 4  # temperatures x prompts x methods (ar, hf-ar, ngram, hf-prompt-lookup)
    assert partial["complete"] is False and partial["cells_total"] == total and 1 <= partial["cells_done"] < total
    first = [json.loads(line) for line in journal.read_text().splitlines()[:2 + done]]

    report = subprocess.run([sys.executable, "-m", "specot.cli.main", "bench", "results", "--speedup", str(out),
                             "--out", "-"], capture_output=True, text=True, env=env, timeout=300)
    assert report.returncode == 0, report.stderr
    assert f"Partial: {partial['cells_done']} of {total} cells measured" in report.stdout
    assert "| T | method |" in report.stdout

    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert lines[:2 + done] == first  # the finished cells were kept, not measured again
    cells = [r for r in lines if r["kind"] == "cell"]
    assert len(cells) == total and len({(c["temperature"], c["prompt"], c["method"]) for c in cells}) == total
    final = json.loads((out / "speedup.json").read_text())
    assert final["complete"] is True and len(final["runs"]) == 2 and len(final["rows"]) == 2 * 4

    capsys.readouterr()
    assert main(["bench", "speedup", *cmd[5:], "--max-new-tokens", "20"]) == 1  # another configuration: one line
    err = capsys.readouterr().err
    assert "specot: error:" in err and "max_new_tokens: 12 in the journal, 20 now" in err, err


def test_acceptance_resumes_to_the_result_of_an_uninterrupted_run(tmp_path):
    """``specot bench acceptance`` journals each (prompt, temperature) cell; a cut journal resumed
    gives the rows an uninterrupted run gives (each cell draws from its own seeded generator)."""
    from specot_lab.bench.acceptance import BenchDraft, load_acceptance_result, run_acceptance_bench

    def run(journal):
        return run_acceptance_bench(target=tiny_lm(0, vocab=16), drafts=[BenchDraft("tiny-draft", "model", tiny_lm(1, vocab=16)),
                                                                         "ngram"],
                                    prompts=[[1, 2, 3, 4], [5, 6, 7], [2, 9, 4, 4, 1]], temperatures=[0.5, 1.0], ns=[1, 2],
                                    max_new_tokens=6, mc_samples=4, progress=False, journal=journal)

    whole = run(tmp_path / "a" / "acceptance.jsonl")
    journal = tmp_path / "b" / "acceptance.jsonl"
    run(journal)
    lines = journal.read_text().splitlines()
    journal.write_text("\n".join(lines[:4]) + "\n")  # header, setup, two of six cells
    partial = load_acceptance_result(journal.parent)
    assert not partial["complete"] and (partial["cells_done"], partial["cells_total"]) == (2, 6)
    resumed = run(journal)
    assert resumed["complete"] and len(resumed["runs"]) == 2
    key = lambda r: (r["draft"], r["temperature"], r["n"], r["law"], r["verifier"])  # noqa: E731
    assert [key(r) for r in resumed["rows"]] == [key(r) for r in whole["rows"]]
    for a, b in zip(resumed["rows"], whole["rows"]):
        assert a["acceptance"] == pytest.approx(b["acceptance"], abs=1e-12) and a["positions"] == b["positions"]


def test_a_finished_journal_is_reported_without_measuring_or_loading(tmp_path, monkeypatch):
    journal = tmp_path / "speedup.jsonl"
    first = _run(journal)
    before = journal.read_text()
    import specot_lab.bench.speedup as sp

    monkeypatch.setattr(sp, "load_target", lambda *a, **k: pytest.fail("a finished run loaded the target"))
    again = _run(journal)
    assert journal.read_text() == before  # no resume line, no cell
    assert [r["speedup"] for r in again["rows"]] == pytest.approx([r["speedup"] for r in first["rows"]])
