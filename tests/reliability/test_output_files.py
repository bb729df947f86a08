"""One rule for the files a command writes (specot.outputs): an existing file the command did not
write is replaced only with --force, refused in one line before any model loads; temporary files
have unique names (a user's ``report.tmp`` survives); the replace is atomic, and a failure leaves
no partial file; the JSON is strict (no NaN or Infinity: null with the reason beside it)."""

from __future__ import annotations

import json
import math

import pytest

import specot.api as api
from specot import outputs
from specot.cli.main import main as cli_main

pytestmark = pytest.mark.filterwarnings("ignore")


def _strict_loads(text: str):
    """``json.loads`` that refuses NaN and Infinity, as a strict JSON reader does."""
    def refuse(name):
        raise ValueError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test when a model loads: the refusal must come first."""
    def boom(*a, **k):
        raise AssertionError("a model was loaded before the output file was checked")
    monkeypatch.setattr(api, "load_target", boom)
    monkeypatch.setattr(api, "load_drafter", boom)
    from specot.cli import calibrate_run
    monkeypatch.setattr(calibrate_run, "get_backend", boom)


@pytest.fixture(autouse=True)
def _fresh_process(monkeypatch):
    """Each test starts as a new process: no file written by this one yet."""
    monkeypatch.setattr(outputs, "_WRITTEN", set())


# ------------------------------------------------------------------------------- the module
def test_an_existing_file_is_refused_unless_forced_or_ours(tmp_path):
    f = tmp_path / "photo.png"
    f.write_bytes(b"the user's photo")
    with pytest.raises(ValueError, match=r"--plot .*photo.png' exists and this command did not write it; pass --force"):
        outputs.check_output(f, "--plot")
    outputs.check_output(f, "--plot", force=True)
    outputs.check_output(f, "--plot", ours=lambda p: True)
    outputs.check_output(tmp_path / "new.png", "--plot")
    with pytest.raises(ValueError, match="is a directory"):
        outputs.check_output(tmp_path, "--out")


def test_a_file_this_process_wrote_may_be_written_again(tmp_path):
    f = tmp_path / "audit.json"
    outputs.write_text(f, "first")
    outputs.check_output(f, "--out")  # a partial result rewritten by the same run
    outputs.write_text(f, "second")
    assert f.read_text() == "second"


def test_json_has_recognises_the_benchmarks_own_file(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(json.dumps({"benchmark": "paths", "rows": []}))
    assert outputs.json_has(benchmark="paths")(f)
    assert not outputs.json_has(benchmark="speedup")(f)
    f.write_text("not json")
    assert not outputs.json_has(benchmark="paths")(f)


def test_temporary_names_are_unique_and_a_failure_leaves_nothing(tmp_path):
    user_tmp = tmp_path / "report.tmp"
    user_tmp.write_text("the user's own file")
    target = tmp_path / "report.json"
    target.write_text("old")
    with pytest.raises(RuntimeError):
        with outputs.atomic_path(target) as tmp:
            assert tmp.parent == tmp_path and tmp.name != "report.tmp" and tmp.suffix == ".json"
            tmp.write_text("half a fi")
            raise RuntimeError("disk full")
    assert target.read_text() == "old"  # untouched: no partial file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.tmp"]
    assert user_tmp.read_text() == "the user's own file"


def test_strict_json_nulls_non_finite_numbers_with_the_reason():
    text = outputs.dumps({"draft_overhead": math.inf, "ci": [1.0, math.nan], "nested": {"x": -math.inf}, "ok": 1.5})
    obj = _strict_loads(text)
    assert obj["draft_overhead"] is None and "inf" in obj["draft_overhead_note"]
    assert obj["ci"] == [1.0, None] and "positions [1]" in obj["ci_note"]
    assert obj["nested"] == {"x": None, "x_note": "not a finite number (-inf)"}
    assert obj["ok"] == 1.5


# ------------------------------------------------------------------------------- the commands
def test_bench_paths_refuses_a_users_file_before_loading(tmp_path, no_loading, capsys):
    out = tmp_path / "paths.json"
    out.write_text("my notes")
    rc = cli_main(["bench", "paths", "--out", str(out)])
    line = _one_line(capsys.readouterr().err)
    assert rc == 1 and "--force" in line and "paths.json" in line
    assert out.read_text() == "my notes"


def test_bench_paths_writes_strict_json_and_rewrites_its_own_file(tmp_path, monkeypatch, capsys):
    from specot_lab.bench import paths

    row = {"temperature": 1.0, "L": 4, "K": 1, "verifier": "block", "contexts": 1, "block_efficiency": 2.0,
           "block_efficiency_ci95": [math.nan, math.nan], "vs_block": 1.0, "vs_block_ci95": [math.nan, math.nan]}
    monkeypatch.setattr(paths, "run_paths_bench", lambda **kw: {"benchmark": "paths", "rows": [row]})
    monkeypatch.setattr(paths, "load_prompts", lambda s, n: ["p"] * n)
    out = tmp_path / "paths.json"
    for _ in range(2):  # the second run replaces the file the first one wrote: it is the benchmark's own
        assert cli_main(["bench", "paths", "--out", str(out)]) == 0
        obj = _strict_loads(out.read_text())
        assert obj["rows"][0]["vs_block_ci95"] == [None, None] and "nan" in obj["rows"][0]["vs_block_ci95_note"]
    outputs._WRITTEN.clear()  # a later process: only the file's schema says whose it is
    out.write_text(json.dumps({"benchmark": "speedup"}))  # another benchmark's: refused
    assert cli_main(["bench", "paths", "--out", str(out)]) == 1
    assert cli_main(["bench", "paths", "--out", str(out), "--force"]) == 0


def test_batch_invariance_refuses_a_users_file_before_loading(tmp_path, no_loading, capsys):
    out = tmp_path / "bi.json"
    out.write_text("{}")
    assert cli_main(["bench", "batch-invariance", "--out", str(out)]) == 1
    assert "--force" in _one_line(capsys.readouterr().err) and out.read_text() == "{}"


def test_distill_prompts_refuses_a_users_file(tmp_path, capsys):
    out = tmp_path / "prompts.jsonl"
    out.write_text("mine\n")
    assert cli_main(["distill", "prompts", "--split", "heldout", "--n", "2", "--out", str(out)]) == 1
    assert "--force" in _one_line(capsys.readouterr().err) and out.read_text() == "mine\n"
    assert cli_main(["distill", "prompts", "--split", "heldout", "--n", "2", "--out", str(out), "--force"]) == 0
    assert len(out.read_text().splitlines()) == 2


def test_calibrate_refuses_a_users_photo_before_loading(tmp_path, no_loading, capsys):
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n the user's photo")
    assert cli_main(["calibrate", "--backend", "transformers", "--plot", str(photo)]) == 1
    assert "--force" in _one_line(capsys.readouterr().err)
    assert photo.read_bytes().endswith(b"the user's photo")


def test_calibrate_recognises_its_own_plot(tmp_path):
    from specot.calibration import PassCostCurve
    from specot.cli import calibrate_run

    curve = PassCostCurve(widths=(1, 2, 3), t_ms=(1.0, 1.5, 2.0), key={})
    png = tmp_path / "curve.png"
    calibrate_run._plot(curve, png, "test")
    assert calibrate_run._our_plot(png)
    outputs.check_output(png, "--plot", ours=calibrate_run._our_plot)
    assert not [p for p in tmp_path.iterdir() if p.name != "curve.png"]  # no temporary file left


def test_audit_out_keeps_a_users_report_tmp_and_refuses_a_users_file(tmp_path, monkeypatch, capsys):
    from specot.cli import audit_run

    monkeypatch.chdir(tmp_path)
    (tmp_path / "report.tmp").write_text("the user's own temporary file")
    (tmp_path / "report.json").write_text("the user's report")
    monkeypatch.setattr(audit_run, "_run_jobs", lambda *a, **k: pytest.fail("the audit started"))
    assert cli_main(["audit", "--out", "report.json"]) == 1
    assert "--force" in _one_line(capsys.readouterr().err)
    monkeypatch.setattr(audit_run, "_run_jobs", lambda *a, **k: [])
    monkeypatch.setattr(audit_run, "_jobs", lambda *a, **k: [])
    assert cli_main(["audit", "--out", "report.json", "--force"]) == 0
    assert (tmp_path / "report.tmp").read_text() == "the user's own temporary file"
    assert json.loads((tmp_path / "report.json").read_text())["rows"] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.tmp"]
    outputs._WRITTEN.clear()  # a later process: the file holds an audit, so it is the command's own
    assert cli_main(["audit", "--out", "report.json"]) == 0


def test_theory_alpha_json_refuses_a_users_file(tmp_path, capsys):
    import numpy as np

    np.save(tmp_path / "p.npy", np.array([0.5, 0.5]))
    np.save(tmp_path / "q.npy", np.array([0.25, 0.75]))
    out = tmp_path / "mine.json"
    out.write_text("keep")
    argv = ["theory", "alpha", "--target-probs", str(tmp_path / "p.npy"), "--draft-probs", str(tmp_path / "q.npy"),
            "--n", "2", "--law", "iid", "--json", str(out)]
    assert cli_main(argv) == 1
    captured = capsys.readouterr()
    assert "--force" in _one_line(captured.err) and captured.out == "" and out.read_text() == "keep"
    assert cli_main(argv + ["--force"]) == 0
    assert "iid" in _strict_loads(out.read_text())


def test_distill_eval_refuses_a_users_file_and_bad_lists_before_loading(tmp_path, monkeypatch, capsys):
    from specot_lab import cli_distill

    monkeypatch.setattr(cli_distill, "evaluate_draft", lambda *a, **k: pytest.fail("the evaluation started"),
                        raising=False)
    out = tmp_path / "eval.json"
    out.write_text("mine")
    assert cli_main(["distill", "eval", "--out", str(out)]) == 1
    assert "--force" in _one_line(capsys.readouterr().err) and out.read_text() == "mine"
    for flag, value in (("--gammas", "0,2"), ("--temperatures", "nan")):
        assert cli_main(["distill", "eval", flag, value]) == 1
        assert flag in _one_line(capsys.readouterr().err)


def test_theory_plots_refuse_a_users_file_of_a_figures_name(tmp_path, monkeypatch, capsys):
    from specot.cli import theory_run

    monkeypatch.setattr(theory_run, "make_plots", lambda out: pytest.fail("the figures were drawn"))
    (tmp_path / "alpha_by_law.png").write_bytes(b"the user's own picture")
    assert cli_main(["theory", "plots", "--out", str(tmp_path)]) == 1
    assert "alpha_by_law.png" in _one_line(capsys.readouterr().err)
    assert (tmp_path / "alpha_by_law.png").read_bytes() == b"the user's own picture"
