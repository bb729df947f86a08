"""Pass-cost calibration (:mod:`specot.calibration`): the cache (damaged, stale, concurrent writers,
``SPECOT_NO_CACHE``), the suffix drafter priced with a measured curve, the transformers target's
measurement. No test asserts on a timing."""

from __future__ import annotations

import json
import multiprocessing
import threading

import pytest

import specot.plan as P
from model_helpers import tiny_lm
from calibration_helpers import FakeTarget, caught
from specot.calibration import (DEFAULT_WIDTHS, FORMAT_VERSION, PassCostCurve, break_even_alpha, calibrate,
                                calibration_key, calibration_path, pricing_curve)
from specot.drafting import TreeSpec
from specot.laws import DraftLaw
from specot.sampling import SamplingConfig
from specot_llamacpp.auto import AUTO_TABLE


def test_a_curve_interpolates_and_calls_as_its_ratio():
    c = PassCostCurve((1, 2, 5), (10.0, 15.0, 30.0))
    assert c.ratios == (1.0, 1.5, 3.0) and c(1) == 1.0 and c.ratio(3) == pytest.approx(2.0)
    assert c(7) == pytest.approx(4.0)  # past the widest: the last two points' line
    assert PassCostCurve.from_dict(c.to_dict()) == c
    for bad in (((2, 3), (1.0, 2.0)), ((1, 1), (1.0, 2.0)), ((1, 2), (1.0,)), ((1, 2), (1.0, 0.0))):
        with pytest.raises(ValueError):
            PassCostCurve(*bad)
    with pytest.raises(ValueError):
        c(0)


def test_calibrate_measures_once_then_reads_the_cache(tmp_path):
    t = FakeTarget()
    first = calibrate(t, cache_dir=tmp_path)
    second = calibrate(t, cache_dir=tmp_path)
    assert (first.source, second.source, t.calls) == ("measured", "cache", 1)
    assert second.widths == DEFAULT_WIDTHS and second.ratios == first.ratios and second.ratio(1) == 1.0
    assert calibrate(t, cache_dir=tmp_path, refresh=True).source == "measured" and t.calls == 2
    key = calibration_key(t)
    for k in ("format", "backend", "model", "device", "dtype", "threads", "cpu_model", "cpu_flags", "versions"):
        assert k in key
    assert key["format"] == FORMAT_VERSION and key["backend"] == "fake" and key["threads"] == 1
    assert calibration_path(key, tmp_path).is_file()
    assert calibration_path(calibration_key(FakeTarget("other"))) != calibration_path(key)


def test_the_key_names_the_kernels_build_where_the_target_gives_it(tmp_path):
    """Two builds of one engine (AVX2, AVX-512) time a pass differently: a curve of one is never
    read for the other; a target that names no build keeps the key it had."""
    plain = FakeTarget()
    assert "build" not in calibration_key(plain)
    avx2, avx512 = FakeTarget(), FakeTarget()
    avx2.build_info, avx512.build_info = "CPU : AVX2 = 1 |", "CPU : AVX2 = 1 | AVX512 = 1 |"
    assert calibration_key(avx512)["build"] == "CPU : AVX2 = 1 | AVX512 = 1 |"
    paths = {calibration_path(calibration_key(t), tmp_path) for t in (plain, avx2, avx512)}
    assert len(paths) == 3


def test_the_key_names_a_model_file_by_path_size_and_mtime(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(20))
    t = FakeTarget()
    t.path = f
    model = calibration_key(t)["model"]
    assert model["path"] == str(f.resolve()) and model["size"] == 24 and model["mtime_ns"] > 0
    d = tmp_path / "model_dir"
    d.mkdir()
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(bytes(10))
    t.path = d
    before = calibration_key(t)["model"]
    (d / "specot_converted.json").write_text("a marker a cache may rewrite")
    assert calibration_key(t)["model"] == before and before["files"] == 2 and before["size"] == 12


@pytest.mark.parametrize("body, why", [
    ("{not json", "damaged"),
    (json.dumps({"format": FORMAT_VERSION, "curve": {"widths": [1, 2]}}), "damaged"),  # wrong schema
    (json.dumps(["a", "list"]), "damaged"),
    (json.dumps({"format": FORMAT_VERSION - 1, "curve": {"widths": [1], "t_ms": [1.0]}}), "stale"),
])
def test_a_damaged_or_stale_entry_is_measured_again_with_one_warning(tmp_path, body, why):
    t = FakeTarget()
    path = calibration_path(calibration_key(t), tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(body)
    curve, msgs = caught(lambda: calibrate(t, cache_dir=tmp_path))
    assert curve.source == "measured" and t.calls == 1
    assert len(msgs) == 1 and why in msgs[0] and str(path) in msgs[0]
    again, msgs = caught(lambda: calibrate(t, cache_dir=tmp_path))  # the entry was replaced
    assert again.source == "cache" and msgs == [] and t.calls == 1


def test_no_cache_measures_every_time_and_stores_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SPECOT_NO_CACHE", "1")
    t = FakeTarget()
    assert calibrate(t).source == calibrate(t).source == "measured" and t.calls == 2
    assert not (tmp_path / "calibration").exists()
    monkeypatch.delenv("SPECOT_NO_CACHE")
    calibrate(t)
    assert len(list((tmp_path / "calibration").glob("*.json"))) == 1


def test_an_unwritable_cache_warns_once_and_still_measures(tmp_path):
    (tmp_path / "calibration").write_text("a file where the directory should be")
    curve, msgs = caught(lambda: calibrate(FakeTarget(), cache_dir=tmp_path))
    assert curve.source == "measured" and len(msgs) == 1 and "not stored" in msgs[0]


def _calibrate_many(root: str, n: int) -> None:
    t = FakeTarget()
    for _ in range(n):
        calibrate(t, cache_dir=root, refresh=True)


def test_concurrent_calibrations_leave_one_valid_entry(tmp_path):
    """Two processes (and a thread) write the same entry over and over while a reader reads it: the
    reader never sees a partial file, and one valid entry remains, with no temporary file left."""
    t = FakeTarget()
    path = calibration_path(calibration_key(t), tmp_path)
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_calibrate_many, args=(str(tmp_path), 40)) for _ in range(2)]
    writer = threading.Thread(target=_calibrate_many, args=(str(tmp_path), 40))
    bad: list[str] = []
    for p in procs:
        p.start()
    writer.start()
    while any(p.is_alive() for p in procs) or writer.is_alive():
        try:
            obj = json.loads(path.read_text())
            PassCostCurve.from_dict(obj["curve"])
        except FileNotFoundError:
            pass
        except (ValueError, KeyError) as exc:
            bad.append(repr(exc))
    for p in procs:
        p.join()
    writer.join()
    assert [p.exitcode for p in procs] == [0, 0] and bad == []
    assert [f.name for f in path.parent.iterdir()] == [path.name]
    assert calibrate(t, cache_dir=tmp_path).source == "cache" and t.calls == 0


def test_break_even_alpha_with_a_curve():
    free = PassCostCurve.from_ratios((1, 2, 5), (1.0, 1.0, 1.0), "synthetic")
    width = PassCostCurve.from_ratios((1, 2, 5), (1.0, 2.0, 5.0), "synthetic")
    assert break_even_alpha(1, free) == pytest.approx(0.0, abs=1e-6) and break_even_alpha(0, width) == 0.0
    assert break_even_alpha(1, width) is None and break_even_alpha(4, width) is None
    half = PassCostCurve.from_ratios((1, 2), (1.0, 1.5), "synthetic")
    assert break_even_alpha(1, half) == pytest.approx(0.5, abs=1e-3)  # 1 + α = 1.5


# ---------------------------------------------------------------- pricing with a measured curve
REPEATS = [5, 6, 7, 8, 9, 10, 11, 12] * 4 + [5, 6, 7, 8]  # the suffix 5 6 7 8 was followed by 9 10 11 12


def _auto_suffix(curve: PassCostCurve, linear: tuple[float, float]):
    """The llama.cpp backend's auto suffix drafter on a target whose calibrated curve is ``curve``
    (and whose fallback linear model is ``linear``): its proposals on text that repeats."""
    target = tiny_lm(0)
    target.pass_cost = linear
    target.pass_cost_curve = lambda: curve
    e = AUTO_TABLE.greedy
    opts = dict(e.options)
    d = P.parse_draft("suffix", ngram_corpus="none", suffix_min_match=opts["suffix_min_match"],
                      suffix_kappa=opts["suffix_kappa"]).load(target)
    assert d.pass_cost is curve and pricing_curve(d) == {**curve.to_dict(), "draft_overhead": 0.0, "step_work": None}
    d.start(REPEATS, TreeSpec.sequences(e.children, e.gamma, DraftLaw.GREEDY))
    return d, d.propose(REPEATS, e.gamma, SamplingConfig(0.0))


def test_a_curve_where_wide_passes_cost_their_width_gives_plain_steps():
    costly = PassCostCurve.from_ratios((1, 2, 3, 5, 9), (1, 2, 3, 5, 9), "synthetic: r(B) = B")
    d, tree = _auto_suffix(costly, linear=(0.05, 0.03))  # the linear model alone would draft here
    assert tree.size == 0 and d.expected_value() == 1.0


def test_a_cheap_curve_drafts_on_the_same_text():
    cheap = PassCostCurve.from_ratios((1, 2, 3, 5, 9), (1, 1, 1, 1, 1), "synthetic: r(B) = 1")
    d, tree = _auto_suffix(cheap, linear=(10.0, 10.0))  # the linear model alone would not draft here
    assert tree.size == AUTO_TABLE.greedy.gamma and tree.is_chain() and d.expected_value() > 1.0
    assert tree.drafts[0] == [9]


def test_without_a_curve_the_linear_model_prices():
    target = tiny_lm(0)
    target.pass_cost = (10.0, 10.0)
    d = P.parse_draft("suffix", ngram_corpus="none").load(target)
    assert d.pass_cost is None and (d.cost_fixed, d.cost_per_token) == (10.0, 10.0) and pricing_curve(d) is None
    d.start(REPEATS, TreeSpec.sequences(1, 4, DraftLaw.GREEDY))
    assert d.propose(REPEATS, 4, SamplingConfig(0.0)).size == 0


# ---------------------------------------------------------------- measuring and the command
def test_the_transformers_target_measures_its_passes(tiny_target):
    tiny_target.reset_stats()
    t = tiny_target.measure_pass_times([1, 2, 5], 2)
    assert len(t) == 3 and all(x > 0 for x in t)
    assert tiny_target.forward_calls == 0 and tiny_target.cached_ids == []


def test_a_noisy_measurement_is_made_consistent_with_what_a_pass_can_cost(tmp_path):
    """A median below a narrower pass's, or above B one-token passes, is noise from other processes:
    the stored curve is non-decreasing in B and r(B) <= B; a consistent measurement is kept as is."""
    from specot.calibration import calibrate

    class Noisy:
        def __init__(self, times):
            self.times, self.name, self.backend = times, "noisy", "test"

        def measure_pass_times(self, widths, repeats):
            return list(self.times)

    curve = calibrate(Noisy([10.0, 45.0, 18.0, 20.0]), widths=(1, 2, 3, 4), repeats=1, cache_dir=tmp_path)
    assert curve.ratios == (1.0, 2.0, 2.0, 2.0)
    clean = calibrate(Noisy([10.0, 15.0, 21.0, 30.0]), widths=(1, 2, 3, 4), repeats=1, cache_dir=tmp_path / "b")
    assert clean.ratios == (1.0, 1.5, 2.1, 3.0)
