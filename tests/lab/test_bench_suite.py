"""``specot bench suite`` (``make bench``): the named runs behind the README's results block. The
quick suite end to end on a tiny model (documents rewritten between their markers only, results
that name date, commit and machine, a rerun that measures nothing); the committed README block and
results page are what the command generates from the committed results; the prompt sets."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from specot.cli.main import main
from specot_lab.bench import suite
from specot_lab.corpus import FILE_SETS, PROMPT_DIR, load_prompts

ROOT = Path(__file__).resolve().parents[2]
DOC = "# Title\n\nbefore\n\n<!-- results:begin -->\nold numbers\n<!-- results:end -->\n\nafter\n"


def _block(text: str) -> str:
    return text.split(suite.BEGIN, 1)[1].split(suite.END, 1)[0]


def test_quick_suite_end_to_end_on_a_tiny_model(tiny_model_dir, tmp_path, capsys):
    readme, page, out = tmp_path / "README.md", tmp_path / "results.md", tmp_path / "suite"
    readme.write_text(DOC)
    page.write_text(DOC)
    argv = ["bench", "suite", "--quick", "--target", str(tiny_model_dir), "--dtype", "float32", "--threads", "1",
            "--out", str(out), "--readme", str(readme), "--results", str(page), "--no-progress"]
    assert main(argv) == 0
    text = readme.read_text()
    assert text.startswith("# Title\n\nbefore\n\n") and text.endswith("\n\nafter\n")  # only the block changed
    block = _block(text)
    assert "old numbers" not in block and "Quick smoke run" in block and "| method | code T=0 | code T=1 |" in block
    for label in ("HF `generate()`", "n-gram chain, γ=4", "HF prompt lookup, 4", "`auto` (ngram chain)"):
        assert f"| {label} |" in block, label
    assert "| code |" in _block(page.read_text()) and "| chat |" in _block(page.read_text())
    for name in ("code", "chat"):
        res = json.loads((out / f"{name}.json").read_text())
        assert res["complete"] and res["suite_set"] == name and res["max_new_tokens"] == 8 and res["prompts"] == 2
        env = res["environment"]
        assert {"date", "commit", "cpu_model", "cpu_flags", "versions", "load_average"} <= set(env)
        assert re.match(r"\d{4}-\d\d-\d\dT", env["date"]) and env["versions"]["torch"]
        assert {r["family"] for r in res["rows"]} == {"ar", "hf-ar", "ngram", "hf-prompt-lookup", "auto"}
        assert (out / f"{name}.jsonl").exists()
    journals = {p.name: p.read_text() for p in out.glob("*.jsonl")}
    capsys.readouterr()
    assert main(argv) == 0  # every cell is measured: nothing runs again, the documents come out the same
    assert {p.name: p.read_text() for p in out.glob("*.jsonl")} == journals
    assert "every cell of" in capsys.readouterr().err
    assert _block(readme.read_text()) == block


def test_the_committed_documents_are_what_the_suite_generates():
    """README.md's results block and docs/results.md's generated block are `specot bench suite
    --report-only` of the committed results in docs/bench/suite/."""
    results = suite.load_suite(ROOT / "docs" / "bench" / "suite", suite.SUITE)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _block(readme).strip() == suite.readme_block(results).strip()
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    command = results[0]["suite_command"]
    assert _block(page).strip() == suite.results_block(results, command).strip()


def test_documents_without_markers_are_refused_before_measuring(tmp_path, capsys):
    doc = tmp_path / "README.md"
    doc.write_text("# no block\n")
    assert main(["bench", "suite", "--readme", str(doc), "--results", str(doc), "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("specot: error:") and "has no <!-- results:begin -->" in err
    assert not (tmp_path / "o").exists()
    assert main(["bench", "suite", "--quick", "--sets", "code,nope", "--out", str(tmp_path / "o")]) == 1
    assert "--sets: unknown set 'nope'" in capsys.readouterr().err


def test_prompt_sets_are_one_folder_named_by_content():
    files = sorted(p.stem for p in PROMPT_DIR.glob("*.jsonl"))
    assert files == sorted(FILE_SETS)
    for name in FILE_SETS:
        assert load_prompts(name, 100), name
        assert not re.search(r"_s\d\d$", name)
    for s in suite.SUITE:
        assert len(load_prompts(s.prompts, s.n_prompts)) == s.n_prompts, s.name
    with pytest.raises(FileNotFoundError, match="named sets: mixed"):
        load_prompts("no_such_set")


def test_an_interrupted_set_leaves_its_cells_as_its_result(tiny_model_dir, tmp_path, monkeypatch):
    """Ctrl-C inside a set: that set's JSON holds its finished cells (complete: false), so the
    report-only documents never mix an older result with the new runs."""
    real = suite.run_speedup_bench
    out = tmp_path / "suite"
    out.mkdir()
    (out / "chat.json").write_text(json.dumps({"benchmark": "speedup", "stale": True}))

    def stopped(**kw):
        if kw["prompt_set"] == "chat":
            real(**kw)  # measures every cell, then the "Ctrl-C" arrives
            raise KeyboardInterrupt
        return real(**kw)

    monkeypatch.setattr(suite, "run_speedup_bench", stopped)
    with pytest.raises(KeyboardInterrupt):
        suite.run_suite(suite.QUICK, out=out, target=str(tiny_model_dir), dtype="float32", threads=1, quick=True,
                        progress=False)
    chat = json.loads((out / "chat.json").read_text())
    assert "stale" not in chat and chat["suite_set"] == "chat" and chat["cells_done"] == chat["cells_total"]
    assert [r["suite_set"] for r in suite.load_suite(out, suite.QUICK)] == ["code", "chat"]
