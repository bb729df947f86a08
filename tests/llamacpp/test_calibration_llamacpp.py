"""The llama.cpp target measures its own passes (:meth:`LlamaCppTarget.measure_pass_times`) and the
auto plan prices its drafts with the calibrated curve. Sanity only: no timing is asserted beyond a
pass over nine tokens costing more than a pass over one."""

from __future__ import annotations

import pytest

from specot.calibration import PassCostCurve, calibrate
from specot_llamacpp.auto import PASS_COST
from specot_lab.bench.llamacpp import auto_drafter

WIDTHS = (1, 2, 3, 5, 9)


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("calibration_cache")


@pytest.mark.real_model
def test_the_real_calibration_is_a_curve_from_one(target, cache_root):
    target.reset_stats()
    curve = calibrate(target, widths=WIDTHS, repeats=3, cache_dir=cache_root)
    assert curve.source == "measured" and curve.widths == WIDTHS and curve.repeats == 3
    assert curve.ratio(1) == 1.0 and curve.ratio(9) > 1.0 and curve.t_ms[-1] > curve.t_ms[0]
    assert curve.key["backend"] == "llamacpp" and curve.key["threads"] == 1
    assert curve.key["model"]["path"].endswith(".gguf") and curve.key["model"]["size"] > 0
    assert curve.key["versions"]["llama_cpp"]
    assert curve.key["build"].startswith("CPU :") and "AVX" in curve.key["build"]  # the wheel's kernels
    assert target.forward_calls == 0 and target.cached_ids == []  # statistics and cache left clean
    assert calibrate(target, widths=WIDTHS, repeats=3, cache_dir=cache_root).source == "cache"


@pytest.mark.real_model
def test_auto_prices_with_the_calibrated_curve_and_falls_back_without(target, cache_root, monkeypatch):
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(cache_root))
    calibrate(target, cache_dir=cache_root, repeats=2)  # the default widths, cached: auto reads them
    monkeypatch.setattr(target, "auto_calibrate", True)
    monkeypatch.setattr(target, "_pass_cost_curve", None)
    drafter, _ = auto_drafter(target, 0.0)
    assert isinstance(drafter.pass_cost, PassCostCurve) and drafter.pass_cost.source == "cache"
    assert drafter.pass_cost is target.pass_cost_curve()
    monkeypatch.setattr(target, "_pass_cost_curve", None)
    monkeypatch.setenv("SPECOT_CALIBRATE", "0")
    drafter, _ = auto_drafter(target, 0.0)
    assert drafter.pass_cost is None and (drafter.cost_fixed, drafter.cost_per_token) == PASS_COST


@pytest.mark.real_model
def test_calibrate_draft_measures_a_verdict_that_auto_reads(tmp_path, monkeypatch, capsys):
    """``specot calibrate --draft``: the embedded GGUF drafting for itself (a plain draft model), a few
    tokens per calibration prompt; one verdict per temperature class, which ``auto`` then reads (the
    hybrid where it pays, the table with the reason where it does not). No timing is asserted."""
    import json

    from specot.cli.main import main
    from specot.models.embedded import embedded_gguf
    from specot.plan.auto import auto_choice

    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("specot.cli.calibrate_run.CALIBRATION_TOKENS", 6)
    directory, name = embedded_gguf()
    gguf = str(directory / name)
    argv = ["calibrate", "--backend", "llamacpp", "--draft", gguf, "--widths", "1,2,3", "--repeats", "1", "--json"]
    assert main(argv) == 0
    verdicts = json.loads(capsys.readouterr().out)["draft_verdicts"]
    assert [v["temperature"] for v in verdicts] == [0.0, 1.0]
    for v in verdicts:
        assert v["draft"] == gguf and v["measured"] > 0 and v["vs_plain"] > 0 and v["predicted"] > 0
        assert v["measured_at"]
        assert v["block_efficiency"] >= 1 and v["draft_cost"] > 0 and v["tokens"] >= 3
    for T, v in zip((0.0, 1.0), verdicts):
        choice = auto_choice(None, backend="llamacpp", temperature=T)
        assert (choice.draft == f"suffix+{gguf}") == v["pays"] and choice.reason
