"""No cache content makes a run fail or mislead: every cached entry (pass-cost curves, step-work
measurements, the markers of cached model and tokenizer directories) is read by one validating
reader (specot.cache_entry). An entry that is not UTF-8, not strict JSON, of the wrong types, not
finite or implausible is damaged: measured (or built) again with one warning naming the file, and
the run completes. A curve measured on a busy machine is flagged and measured again once the
machine is quiet. A cache that cannot be written: measured once, one warning."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specot.calibration as C
from calibration_helpers import FakeTarget, caught
from specot.cache_entry import busy, check_pass_cost, quiet, read_entry, read_json_file
from specot.calibration import FORMAT_VERSION, cached_measurement, calibrate, calibration_key, calibration_path
from specot.models.cache_integrity import build_into, marker_problem, read_marker, verify
from specot.plan import step_work as SW

STEP = {"plain_ms": 0.2, "chain_ms": 0.5, "chain_nodes": 3.0, "chains": 40.0}


@pytest.fixture(autouse=True)
def _quiet_machine(monkeypatch):
    """Every test sees a quiet machine unless it says otherwise (no test depends on the real load)."""
    monkeypatch.setattr(C, "load_average", lambda: [0.0, 0.0, 0.0])


class _Counter:
    def __init__(self, values):
        self.calls, self.values = 0, values

    def __call__(self):
        self.calls += 1
        return dict(self.values)


def _curve_entry(root: Path) -> tuple[Path, dict]:
    """A valid cached curve of a fake target under ``root``: its file and JSON object."""
    t = FakeTarget()
    calibrate(t, cache_dir=root)
    path = calibration_path(calibration_key(t), root)
    return path, json.loads(path.read_text())


def _recalibrated(root: Path, path: Path):
    """calibrate() over a planted entry: it must measure again with one warning naming the file,
    replace the entry, and read it silently the next time."""
    t = FakeTarget()
    curve, msgs = caught(lambda: calibrate(t, cache_dir=root))
    assert curve.source == "measured" and t.calls == 1
    assert len(msgs) == 1 and "damaged" in msgs[0] and str(path) in msgs[0], msgs
    again, msgs = caught(lambda: calibrate(t, cache_dir=root))
    assert again.source == "cache" and msgs == [] and t.calls == 1
    return msgs


# ----------------------------------------------------------------------------- pass-cost curves
def _set(obj, where, value):
    out = json.loads(json.dumps(obj))
    node = out
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    return out


@pytest.mark.parametrize("where,value", [
    (("curve",), [1, 2, 3]),  # AttributeError before
    (("curve", "t_ms"), [10.0, 8.8, 12.0, 14.0, 16.0, 18.0, 20.0, 22.0, 24.0]),  # a 2-token pass cheaper
    (("curve", "t_ms"), [10.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0, 30.0]),  # dearer than 2 passes
    (("curve", "t_ms"), [0.0] * 9),
    (("curve", "ratios"), [2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]),  # r(1) != 1
    (("curve", "widths"), [1, 2.5, 3, 4, 5, 6, 7, 8, 9]),
    (("curve", "repeats"), 0),
    (("curve", "repeats"), "8"),
    (("curve", "repeats"), True),
    (("curve", "key"), "fake"),
    (("curve", "load_average"), "high"),
    (("curve", "measured_at"), 5),
    (("busy",), "yes"),
    (("cpu_count",), -2),
])
def test_a_curve_entry_with_impossible_values_is_measured_again(tmp_path, where, value):
    path, obj = _curve_entry(tmp_path)
    path.write_text(json.dumps(_set(obj, where, value)))
    _recalibrated(tmp_path, path)


@pytest.mark.parametrize("where,literal", [(("curve", "repeats"), "1e999"),  # OverflowError before
                                           (("curve", "t_ms", 0), "1e999"),  # ZeroDivisionError before
                                           (("curve", "t_ms", 3), "NaN"), (("curve", "repeats"), "Infinity"),
                                           (("curve", "t_ms", 0), "-Infinity")])
def test_numbers_json_cannot_carry_are_damaged(tmp_path, where, literal):
    path, obj = _curve_entry(tmp_path)
    path.write_text(json.dumps(_set(obj, where, "@@")).replace('"@@"', literal))
    _recalibrated(tmp_path, path)


@pytest.mark.parametrize("body", [b'{"format": 2, "curve": "\xff\xfe"}', b"\x80" * 40,
                                  b"[" * 200_000 + b"]" * 200_000, b" " * (2 << 20)])
def test_bytes_that_are_not_utf8_json_are_damaged_and_repaired(tmp_path, body):
    path, _ = _curve_entry(tmp_path)
    path.write_bytes(body)
    _recalibrated(tmp_path, path)
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == FORMAT_VERSION


def test_a_non_utf8_entry_is_repaired_by_the_calibrate_command(tmp_path, monkeypatch, capsys, tiny_model_dir):
    """``specot calibrate`` over a non-UTF-8 entry: one warning naming it, measured, rewritten."""
    from specot.cli.main import main

    monkeypatch.setenv("SPECOT_CACHE_DIR", str(tmp_path))
    argv = ["calibrate", "--backend", "transformers", "--target", str(tiny_model_dir), "--widths", "1,2,3",
            "--repeats", "1", "--json"]
    assert main(argv) == 0
    path = Path(json.loads(capsys.readouterr().out)["cache_file"])
    path.write_bytes(b"\xff\xfe not text")
    assert main(argv) == 0
    out, err = capsys.readouterr()
    warned = [ln for ln in err.splitlines() if "warning" in ln]
    assert json.loads(out)["source"] == "measured" and len(warned) == 1 and str(path) in warned[0]
    assert main(argv) == 0 and json.loads(capsys.readouterr().out)["source"] == "cache"


def test_the_reader_enforces_what_the_writer_enforces():
    check_pass_cost((1, 2, 3), (10.0, 10.0, 30.0))  # r(B) in [1, B]: fine
    for t in ((10.0, 9.0, 12.0), (10.0, 21.0, 22.0), (10.0, math.inf, 40.0), (0.0, 1.0, 2.0)):
        with pytest.raises(ValueError):
            check_pass_cost((1, 2, 3), t)
    # a noisy measurement made plausible by the writer passes the reader
    t = C._plausible((1, 2, 3, 4), [10.0, 9.0, 50.0, 38.0])
    check_pass_cost((1, 2, 3, 4), [round(x, 4) for x in t])


# ----------------------------------------------------------------------------- busy machines
def test_a_curve_measured_busy_is_flagged_and_measured_again_when_quiet(tmp_path, monkeypatch):
    cpus = C.os.cpu_count()
    monkeypatch.setattr(C, "load_average", lambda: [4.0 * cpus, 1.0, 1.0])
    monkeypatch.setattr(C, "_others_share_now", lambda: 0.5)  # other processes hold half the CPUs
    t = FakeTarget()
    calibrate(t, cache_dir=tmp_path)
    path = calibration_path(calibration_key(t), tmp_path)
    assert json.loads(path.read_text())["busy"] is True
    again, msgs = caught(lambda: calibrate(t, cache_dir=tmp_path))  # still busy: used as it is
    assert again.source == "cache" and msgs == [] and t.calls == 1
    monkeypatch.setattr(C, "load_average", lambda: [0.75 * cpus, 1.0, 1.0])  # not busy, not yet quiet
    assert calibrate(t, cache_dir=tmp_path).source == "cache" and t.calls == 1
    monkeypatch.setattr(C, "load_average", lambda: [0.1, 0.1, 0.1])
    quiet_curve, msgs = caught(lambda: calibrate(t, cache_dir=tmp_path))
    assert quiet_curve.source == "measured" and t.calls == 2
    assert len(msgs) == 1 and "busy machine" in msgs[0] and str(path) in msgs[0]
    assert json.loads(path.read_text())["busy"] is False
    assert calibrate(t, cache_dir=tmp_path).source == "cache" and t.calls == 2


def test_a_curve_timed_while_other_processes_took_the_cores_is_busy_whatever_the_load_average(tmp_path, monkeypatch):
    """A burst of other work during the timing (the load average lags it by a minute): the entry is
    flagged busy, and measured again by the first run that finds no other process on the CPUs."""
    import multiprocessing

    cpus = C.os.cpu_count()
    monkeypatch.setattr(C, "load_average", lambda: [0.6 * cpus, 0.6 * cpus, 0.6 * cpus])  # neither busy nor quiet

    class Contended(FakeTarget):
        def measure_pass_times(self, widths, repeats):
            hogs = [multiprocessing.get_context("spawn").Process(target=_spin, args=(0.6,)) for _ in range(cpus)]
            for h in hogs:
                h.start()
            for h in hogs:
                h.join()
            return super().measure_pass_times(widths, repeats)

    t = Contended()
    calibrate(t, cache_dir=tmp_path)
    path = calibration_path(calibration_key(t), tmp_path)
    assert json.loads(path.read_text())["busy"] is True
    monkeypatch.setattr(C, "_others_share_now", lambda: 0.6)  # the cores still taken: the entry is used
    assert calibrate(t, cache_dir=tmp_path).source == "cache" and t.calls == 1
    monkeypatch.setattr(C, "_others_share_now", lambda: 0.0)  # nobody else on the CPUs now
    again, msgs = caught(lambda: calibrate(t, cache_dir=tmp_path))
    assert again.source == "measured" and t.calls == 2 and len(msgs) == 1


def test_the_cpu_clock_sees_other_processes_and_not_its_own(tmp_path):
    import multiprocessing
    import time

    from specot.envinfo import CpuClock

    with CpuClock() as own:
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            pass
    hog = multiprocessing.get_context("spawn").Process(target=_spin, args=(1.0,))
    hog.start()
    time.sleep(0.3)  # the child started
    with CpuClock() as others:
        time.sleep(0.4)
    hog.join()
    assert own.others_share is not None and others.others_share is not None
    assert own.others_share < others.others_share and others.others_share > 0.3 / C.os.cpu_count()


def _spin(seconds: float) -> None:
    import time

    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_an_entry_without_the_flag_is_judged_by_its_load_average(tmp_path, monkeypatch):
    """An entry written before the flag existed: busy when its recorded load average says so."""
    path, obj = _curve_entry(tmp_path)
    for k in ("busy", "cpu_count"):
        obj.pop(k)
    path.write_text(json.dumps(_set(obj, ("curve", "load_average"), [50.0 * C.os.cpu_count(), 1.0, 1.0])))
    t = FakeTarget()
    curve, msgs = caught(lambda: calibrate(t, cache_dir=tmp_path))
    assert curve.source == "measured" and len(msgs) == 1 and "busy machine" in msgs[0]
    path.write_text(json.dumps(_set(obj, ("curve", "load_average"), [0.1, 0.1, 0.1])))
    assert calibrate(t, cache_dir=tmp_path).source == "cache" and t.calls == 1


def test_busy_is_relative_to_the_cpus():
    assert busy([3.0, 0, 0], 2) and not busy([3.0, 0, 0], 4) and not busy(None, 2) and not busy([9.0], None)
    assert quiet([0.9, 5, 5], 2) and not quiet([1.5, 0, 0], 2) and not quiet(None, 2)


# ----------------------------------------------------------------------------- an unwritable cache
def test_an_unwritable_cache_measures_once_and_warns_once(tmp_path):
    (tmp_path / "calibration").write_text("a file where the directory should be")
    t = FakeTarget()
    (a, b), msgs = caught(lambda: (calibrate(t, cache_dir=tmp_path), calibrate(t, cache_dir=tmp_path)))
    assert a is b and t.calls == 1 and len(msgs) == 1 and "not stored" in msgs[0]
    m = _Counter(STEP)  # the same directory: measured once, and no second warning about it
    _, msgs = caught(lambda: [cached_measurement("x", {"k": 1}, m, cache_dir=tmp_path) for _ in range(3)])
    assert m.calls == 1 and msgs == []


def test_a_damaged_entry_in_a_cache_that_cannot_be_written_gives_one_warning(tmp_path, monkeypatch):
    path, _ = _curve_entry(tmp_path)
    path.write_bytes(b"\xff")
    monkeypatch.setattr(C, "_write_json", lambda *a: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
    t = FakeTarget()
    (a, b), msgs = caught(lambda: (calibrate(t, cache_dir=tmp_path), calibrate(t, cache_dir=tmp_path)))
    assert a is b and t.calls == 1 and len(msgs) == 1, msgs
    assert str(path) in msgs[0] and "damaged" in msgs[0] and "but not stored" in msgs[0] and "Permission" in msgs[0]


# ----------------------------------------------------------------------------- step work
_CURVE = C.PassCostCurve(tuple(range(1, 10)), tuple(2.0 * (1 + 0.3 * (b - 1)) for b in range(1, 10)), repeats=4)


def _step_entry(root: Path, monkeypatch) -> tuple[Path, dict, _Counter]:
    m = _Counter(STEP)
    monkeypatch.setattr(SW, "measure_suffix_step_work", lambda *a, **k: m())
    overhead, rec = SW.suffix_draft_overhead(lambda: None, _CURVE, 400, {"o": 1}, cache_dir=str(root))
    assert rec["source"] == "measured" and overhead == pytest.approx(0.15)
    path = next((root / "calibration").glob("*.json"))
    return path, json.loads(path.read_text()), m


@pytest.mark.parametrize("change", [
    lambda v: v.pop("chain_ms"),  # KeyError before
    lambda v: v.update(chain_ms=-1000.0),
    lambda v: v.update(chain_ms=1e300),
    lambda v: v.update(chains=2.5),
    lambda v: v.update(chain_ms="0.5"),
    lambda v: v.update(chains=0.0),  # nodes without a drafted step
])
def test_a_step_work_entry_with_impossible_values_is_measured_again(tmp_path, monkeypatch, change):
    path, obj, m = _step_entry(tmp_path, monkeypatch)
    change(obj["measurement"]["values"])
    path.write_text(json.dumps(obj))
    (overhead, rec), msgs = caught(lambda: SW.suffix_draft_overhead(lambda: None, _CURVE, 400, {"o": 1},
                                                                      cache_dir=str(tmp_path)))
    assert rec["source"] == "measured" and m.calls == 2 and overhead == pytest.approx(0.15)
    assert len(msgs) == 1 and "damaged" in msgs[0] and str(path) in msgs[0]


def test_an_infinite_chain_ms_never_reaches_the_overhead(tmp_path, monkeypatch):
    path, obj, m = _step_entry(tmp_path, monkeypatch)
    path.write_text(path.read_text().replace('"chain_ms": 0.5', '"chain_ms": 1e999'))
    (overhead, _), msgs = caught(lambda: SW.suffix_draft_overhead(lambda: None, _CURVE, 400, {"o": 1},
                                                                   cache_dir=str(tmp_path)))
    assert math.isfinite(overhead) and len(msgs) == 1 and m.calls == 2


def test_the_reported_pricing_is_strict_json_whatever_the_cache_held(tmp_path, monkeypatch):
    """What ``generate --json`` reports of the pricing (``draft_overhead`` beside the curve) comes
    from the validated entries: never a non-finite number."""
    from specot.drafting import SuffixDrafter

    path, obj, m = _step_entry(tmp_path, monkeypatch)
    path.write_text(path.read_text().replace('"chain_ms": 0.5', '"chain_ms": 1e999'))
    (overhead, rec), msgs = caught(lambda: SW.suffix_draft_overhead(lambda: None, _CURVE, 400, {"o": 1},
                                                                      cache_dir=str(tmp_path)))
    assert len(msgs) == 1 and "damaged" in msgs[0]
    drafter = SuffixDrafter(vocab_size=400, pass_cost=_CURVE, draft_overhead=overhead)
    drafter.step_work = rec
    json.dumps(C.pricing_curve(drafter), allow_nan=False)


def test_a_step_work_measurement_out_of_range_is_not_stored(tmp_path):
    with pytest.raises(ValueError, match="chain_ms"):
        cached_measurement("x", {}, lambda: {**STEP, "chain_ms": -1.0}, check=SW.check_step_work, cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*.json"))


# ----------------------------------------------------------------------------- any JSON in any field
_JSON = st.recursive(st.none() | st.booleans() | st.integers(min_value=-(2 ** 80), max_value=2 ** 80)
                     | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=6),
                     lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=4), c, max_size=4),
                     max_leaves=12)
_MISSING = object()
_CURVE_FIELDS = [("format",), ("curve",), ("curve", "widths"), ("curve", "t_ms"), ("curve", "repeats"),
                 ("curve", "key"), ("curve", "measured_at"), ("curve", "load_average"), ("curve", "ratios"),
                 ("busy",), ("cpu_count",), ("curve", "widths", 1), ("curve", "t_ms", 0), ("curve", "t_ms", 4),
                 ("curve", "key", "threads")]
_STEP_FIELDS = [("format",), ("measurement",), ("measurement", "values"), ("measurement", "name"),
                ("measurement", "key"), ("measurement", "load_average"), ("measurement", "measured_at"),
                ("busy",)] + [("measurement", "values", k) for k in STEP]


def _mutate(obj, where, value):
    out = json.loads(json.dumps(obj))
    node = out
    for k in where[:-1]:
        node = node[k]
    if value is _MISSING:
        node.pop(where[-1])
    else:
        node[where[-1]] = value
    return out


def _dump(obj) -> str:
    return json.dumps(obj)  # NaN and Infinity as Python writes them: not strict JSON


@pytest.fixture(scope="module")
def entries(tmp_path_factory):
    root = tmp_path_factory.mktemp("entries")
    path, curve = _curve_entry(root)
    cached_measurement(SW.STEP_WORK_NAME, {"k": 1}, lambda: STEP, check=SW.check_step_work, cache_dir=root)
    step_path = next(p for p in (root / "calibration").glob("*.json") if p != path)
    return curve, json.loads(step_path.read_text())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(_CURVE_FIELDS), value=_JSON | st.just(_MISSING))
def test_any_json_in_any_field_of_a_curve_entry_is_a_curve_or_damaged(entries, field, value):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        t = FakeTarget()
        key = calibration_key(t)
        path = calibration_path(key, root)
        path.parent.mkdir(parents=True)
        path.write_text(_dump(_mutate(entries[0], field, value)))
        found, why = read_entry(path, FORMAT_VERSION, lambda obj: C._curve_entry(obj, key))
        assert (found is None) != (why is None)
        assert why is None or why.startswith(("damaged (", "stale (")), why
        curve, msgs = caught(lambda: calibrate(t, cache_dir=root))
        used = found is not None and found[0].widths == C.DEFAULT_WIDTHS and not found[1]  # not busy
        assert len(msgs) <= 1 and curve.source == ("cache" if used else "measured")
        assert curve.ratios[0] == 1.0 and all(1 - 0.02 <= r <= b * 1.02 for b, r in zip(curve.widths, curve.ratios))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(_STEP_FIELDS), value=_JSON | st.just(_MISSING))
def test_any_json_in_any_field_of_a_step_work_entry_is_a_measurement_or_damaged(entries, field, value):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        full_key = {"format": FORMAT_VERSION, "measurement": SW.STEP_WORK_NAME, "k": 1}
        path = calibration_path(full_key, root)
        path.parent.mkdir(parents=True)
        path.write_text(_dump(_mutate(entries[1], field, value)))
        m = _Counter(STEP)
        rec, msgs = caught(lambda: cached_measurement(SW.STEP_WORK_NAME, {"k": 1}, m, check=SW.check_step_work,
                                                      cache_dir=root))
        assert len(msgs) <= 1 and (rec["source"] == "cache") == (m.calls == 0)
        assert all(msg.startswith(f"calibration cache {path}") and any(w in msg for w in (
            " is damaged (", " is stale (", " was measured on a busy machine")) for msg in msgs), msgs
        SW.check_step_work(rec["values"])


# ----------------------------------------------------------------------------- cached directories
_MARK = "specot_test.json"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("built")
    with build_into(root / "dir", _MARK, {"what": "a test"}) as tmp:
        (tmp / "tokenizer.json").write_text('{"a": 1}')
    return root / "dir"


_MARKER_FIELDS = [("files",), ("id",), ("files", "tokenizer.json"), ("files", "tokenizer.json", "size"),
                  ("files", "tokenizer.json", "sha256"), ("files", "tokenizer.json", "stat"),
                  ("files", "tokenizer.json", "stat", "checked_ns"), ("files", "../../etc/passwd"),
                  ("files", "a\x00b"), ("files", "")]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(_MARKER_FIELDS), value=_JSON | st.just(_MISSING))
def test_any_json_in_any_field_of_a_marker_is_a_marker_or_damaged(built, field, value):
    marker = json.loads((built / _MARK).read_text())
    if value is _MISSING and field[-1] not in _dig(marker, field[:-1]):
        return
    with tempfile.TemporaryDirectory() as d:
        copy = Path(d) / "dir"
        copy.mkdir()
        (copy / "tokenizer.json").write_bytes((built / "tokenizer.json").read_bytes())
        (copy / _MARK).write_text(_dump(_mutate(marker, field, value)))
        problem = verify(copy, _MARK, full=True)  # never raises
        if read_marker(copy, _MARK) is None:
            assert problem.startswith("incomplete: no readable marker") and "damaged" in marker_problem(copy, _MARK)


def _dig(obj, where):
    for k in where:
        obj = obj[k]
    return obj


@pytest.mark.parametrize("body", [b"\xff\xfe", b'{"files": {"tokenizer.json": {"size": 1e999}}}', b"NaN",
                                  b'{"files": {"x\\u0000y": {"size": 1, "sha256": "' + b"0" * 64 + b'"}}}'])
def test_a_damaged_marker_means_the_directory_is_built_again(built, tmp_path, body):
    copy = tmp_path / "dir"
    copy.mkdir()
    (copy / "tokenizer.json").write_bytes((built / "tokenizer.json").read_bytes())
    (copy / _MARK).write_bytes(body)
    assert read_marker(copy, _MARK) is None
    assert verify(copy, _MARK).startswith(f"incomplete: no readable marker {_MARK}, it is damaged (")
    assert verify(built, _MARK) is None


def test_read_json_file_never_raises(tmp_path):
    assert read_json_file(tmp_path / "none.json") == (None, None)
    assert read_json_file(tmp_path)[1].startswith("unreadable")
    (tmp_path / "big.json").write_text("1" * 100)
    assert read_json_file(tmp_path / "big.json", max_bytes=10)[1].startswith("damaged (larger than")
