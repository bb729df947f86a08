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
