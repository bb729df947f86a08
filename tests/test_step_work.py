"""A drafted step's work outside its pass, measured on this machine (specot.plan.step_work), and the
cache it is kept in (specot.calibration.cached_measurement): measured once, read after; a damaged
or stale entry measured again with one warning; the suffix kind's ``suffix_draft_overhead="measure"``
priced from it, and the labelled fallback where no curve was measured."""

from __future__ import annotations

import json
import warnings

import pytest

from specot.calibration import PassCostCurve, cached_measurement, calibration_path
from specot.drafting import SuffixDrafter
from specot.plan.kinds.suffix import KIND as SUFFIX
from specot.plan.step_work import (FALLBACK_DRAFT_OVERHEAD, STEP_WORK_NAME, measure_suffix_step_work,
                                   suffix_draft_overhead)

V = 400
#: measured-looking curves (repeats > 0): a draft token pays above ~30 % acceptance, or never
CHEAP = PassCostCurve(tuple(range(1, 10)), tuple(2.0 * (1 + 0.3 * (b - 1)) for b in range(1, 10)), repeats=4)
DEAR = PassCostCurve(tuple(range(1, 10)), tuple(2.0 * b for b in range(1, 10)), repeats=4)


def _maker(curve: PassCostCurve):
    return lambda: SuffixDrafter(vocab_size=V, children=1, min_n=4, copy_model=True, pass_cost=curve)


class _Counter:
    def __init__(self, values):
        self.calls, self.values = 0, values

    def __call__(self):
        self.calls += 1
        return self.values


def test_measured_once_then_read_from_the_cache(tmp_path):
    m = _Counter({"a": 1.5})
    first = cached_measurement("x", {"k": 1}, m, cache_dir=tmp_path)
    second = cached_measurement("x", {"k": 1}, m, cache_dir=tmp_path)
    assert (first["source"], second["source"], m.calls) == ("measured", "cache", 1)
    assert second["values"] == {"a": 1.5} and second["measured_at"] == first["measured_at"]
    assert cached_measurement("x", {"k": 2}, m, cache_dir=tmp_path)["source"] == "measured"  # another key
    assert cached_measurement("y", {"k": 1}, m, cache_dir=tmp_path)["source"] == "measured"  # another name
    assert cached_measurement("x", {"k": 1}, m, cache_dir=tmp_path, refresh=True)["source"] == "measured"
    assert m.calls == 4


@pytest.mark.parametrize("body, why", [("{not json", "damaged"), ('{"format": 1, "measurement": {}}', "stale"),
                                       ('{"format": %s, "measurement": {"values": {"a": "x"}}}', "damaged")])
def test_a_damaged_or_stale_entry_is_measured_again_with_one_warning(tmp_path, body, why):
    from specot.calibration import FORMAT_VERSION
    m = _Counter({"a": 2.0})
    cached_measurement("x", {"k": 1}, m, cache_dir=tmp_path)
    path = calibration_path({"format": FORMAT_VERSION, "measurement": "x", "k": 1}, tmp_path)
    path.write_text(body.replace("%s", str(FORMAT_VERSION)), encoding="utf-8")
    with pytest.warns(UserWarning, match=why) as rec:
        again = cached_measurement("x", {"k": 1}, m, cache_dir=tmp_path)
    assert len(rec) == 1 and again["source"] == "measured" and m.calls == 2
    assert json.loads(path.read_text())["measurement"]["values"] == {"a": 2.0}  # replaced by a valid entry


def test_no_cache_measures_every_time_and_bad_values_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECOT_NO_CACHE", "1")
    m = _Counter({"a": 1.0})
    cached_measurement("x", {}, m)
    cached_measurement("x", {}, m)
    assert m.calls == 2
    with pytest.raises(ValueError, match="finite"):
        cached_measurement("x", {}, lambda: {"a": float("nan")}, cache_dir=tmp_path)


def test_chain_steps_draft_whole_chains_and_plain_steps_none():
    v = measure_suffix_step_work(_maker(CHEAP), V, gamma=6, steps=12, warmup=2)
    assert v["chains"] == 12 and v["chain_nodes"] == 6.0  # every step copies a long match, accepted whole
    assert v["plain_ms"] > 0 and v["chain_ms"] > 0
    never = measure_suffix_step_work(_maker(DEAR), V, gamma=6, steps=12, warmup=2)
    assert never["chains"] == 0 and never["chain_ms"] == never["plain_ms"]  # no chain pays: nothing drafted
    with pytest.raises(ValueError, match="vocab_size"):
        measure_suffix_step_work(_maker(CHEAP), 50)


def test_the_overhead_is_the_extra_work_over_the_measured_one_token_pass(tmp_path):
    over, rec = suffix_draft_overhead(_maker(CHEAP), CHEAP, V, {"min_n": 4}, gamma=6, cache_dir=tmp_path)
    v = rec["values"]
    assert rec["name"] == STEP_WORK_NAME and v["chains"] > 0
    assert over == pytest.approx(round(max(0.0, v["chain_ms"] - v["plain_ms"]) / CHEAP.t_ms[0], 4))
    again, rec2 = suffix_draft_overhead(_maker(CHEAP), CHEAP, V, {"min_n": 4}, gamma=6, cache_dir=tmp_path)
    assert rec2["source"] == "cache" and again == over
    # the labelled fallback: no curve, a curve not measured here, or a curve on which no chain pays
    assert suffix_draft_overhead(_maker(CHEAP), None, V, {}) == (FALLBACK_DRAFT_OVERHEAD, None)
    synthetic = PassCostCurve.from_ratios(range(1, 10), CHEAP.ratios, source="test")
    assert suffix_draft_overhead(_maker(CHEAP), synthetic, V, {}) == (FALLBACK_DRAFT_OVERHEAD, None)
    assert suffix_draft_overhead(_maker(DEAR), DEAR, V, {}, gamma=6, cache_dir=tmp_path)[0] == FALLBACK_DRAFT_OVERHEAD


class _Target:
    """What the suffix kind reads of a target: a vocabulary and a measured curve."""

    vocab_size = V
    tokenizer = None

    def pass_cost_curve(self):
        return CHEAP


def test_the_suffix_kind_measures_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path))
    opts = {"suffix_copy_model": True, "suffix_min_match": 4, "ngram_corpus": "none"}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = SUFFIX.load(SUFFIX.parse("suffix", {**opts, "suffix_draft_overhead": "measure"}), _Target(),
                        dtype=None, device="cpu")
    v = d.step_work["values"]
    assert d.draft_overhead == pytest.approx(round(max(0.0, v["chain_ms"] - v["plain_ms"]) / CHEAP.t_ms[0], 4))
    d2 = SUFFIX.load(SUFFIX.parse("suffix", {**opts, "suffix_draft_overhead": 0.2}), _Target(), dtype=None,
                     device="cpu")
    assert d2.draft_overhead == 0.2 and d2.step_work is None
    with pytest.raises(ValueError, match="suffix_draft_overhead.*'measure'"):
        SUFFIX.parse("suffix", {"suffix_draft_overhead": "fast"})
