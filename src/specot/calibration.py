"""Pass-cost calibration: what a pass over B new tokens costs on THIS machine, measured once and cached.

A speculative iteration that scores a draft of N nodes runs one target pass over B = 1 + N tokens
(the last committed token, then the nodes) with logits on every row. Its wall time t(B), relative
to a one-token pass, ``r(B) = t(B) / t(1)``, decides which drafts pay: a chain of γ drafts with
i.i.d. acceptance α yields ``E(α, γ) = (1 − α^{γ+1})/(1 − α)`` tokens per pass (Leviathan et al.
2023, Eq. 1) at the price of ``r(1 + γ)`` one-token passes. The curve depends on the CPU (AVX2 or
AVX-512, cores), the threads, the model file, the backend and its version, so a curve measured on
one machine mis-prices another (docs/llamacpp.md, "Calibration"). A measurement is made consistent
with what a pass can cost (non-decreasing in B, at most B one-token passes) and records the load
average; measure on a quiet machine (``specot calibrate --refresh``): other processes on the cores
make wide passes look dearer, and ``auto`` then drafts less.

* :class:`PassCostCurve`: a measured curve (widths B, median ms per pass t(B), ratios r(B)).
* :func:`calibration_key`: what the measurement depends on (model file identity, backend, device,
  dtype, threads, CPU model and flags, library versions, :data:`FORMAT_VERSION`).
* :func:`calibrate`: the cached curve of a target, measured by the target's own optional
  ``measure_pass_times(widths, repeats) -> list[float]`` (milliseconds; the protocol's docstring,
  :mod:`specot.models.protocol`) when there is none.

**Cache.** One JSON file per key, ``<specot cache>/calibration/<digest>.json``
(:func:`specot.models.embedded.model_cache_dir`), written to a temporary file in the same directory
and renamed over the entry (``os.replace``, atomic): two processes calibrating at once each write a
whole file and the last rename wins, so one valid entry remains. An entry that does not parse or
has the wrong fields (damaged), or was written under another :data:`FORMAT_VERSION` or key (stale),
is measured again with one warning and replaced. Every entry is read by the one validating reader
of :mod:`specot.cache_entry`: a file that is not UTF-8 or not strict JSON, a field of the wrong
type, a time that is not finite, an implausible curve (times that fall as B grows, a pass dearer
than B one-token passes, ``r(1) != 1``) is damaged, never used. A curve measured while the machine
was busy (:func:`specot.cache_entry.busy`: 1-minute load average per CPU above
:data:`~specot.cache_entry.BUSY_LOAD_PER_CPU`; or other processes took more than
:data:`OTHERS_BUSY_SHARE` of the CPU time while it was timed, :class:`specot.envinfo.CpuClock`, a
burst the load average has not seen yet) is flagged ``"busy": true`` in its entry, used while the
machine is not quiet, and measured again by the first run that finds it quiet
(:func:`specot.cache_entry.quiet`, or no other process using a tenth of the CPUs for a quarter second).
``SPECOT_NO_CACHE=1``: measured every time, nothing stored. A cache that cannot be written:
measured once per process, one warning, nothing stored.
:func:`cached_measurement` keeps other small measurements of the machine the same way (the work of a
drafted step outside its pass, :mod:`specot.plan.step_work`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .outputs import atomic_path
from .cache_entry import (MAX_PASS_MS, DamagedEntry, StaleEntry, busy, check_pass_cost, integer, mapping, number,
                          numbers, quiet, read_entry, same_json, text)
from .envinfo import CpuClock, cpu_flags, cpu_model, environment_info, load_average
from .models.embedded import model_cache_dir
from .theory.speedup import expected_tokens

__all__ = ["PassCostCurve", "FORMAT_VERSION", "DEFAULT_WIDTHS", "DEFAULT_REPEATS", "calibration_key",
           "calibration_path", "calibrate", "break_even_alpha", "interpolate", "calibration_enabled", "pricing_curve",
           "cached_measurement", "find_measurements"]

#: Version of the cache entries' format and of the measurement; an entry of another version is stale.
FORMAT_VERSION = 2  # 2: measured times made plausible (non-decreasing, at most B one-token passes)
#: The pass widths B timed by default: every width specot's plans run (a plain step, chains and trees
#: up to 8 nodes). Every one, not a few to interpolate between: on llama.cpp's CPU kernels a pass of
#: an even width can cost what the odd width below it costs (r(4) ≈ r(3) on a Zen 4), which a line
#: between r(3) and r(5) would price 20 % too high.
DEFAULT_WIDTHS = tuple(range(1, 10))
#: Timed passes per width (after one warm-up round); their median is t(B).
DEFAULT_REPEATS = 8
#: The most timed passes per width a cached entry may record.
MAX_REPEATS = 100_000
#: Measurements made in this process that the cache could not store, by cache file: measured once.
_UNSTORED: dict[Path, Any] = {}
#: Cache directories this process found unwritable and said so (one warning per directory).
_UNWRITABLE: set[str] = set()


def interpolate(widths: Sequence[int], values: Sequence[float], width: float) -> float:
    """``values`` at ``width``, linear between the measured ``widths`` (ascending) and extrapolated
    from the last two points past the widest (from the first two below the narrowest).

    Raises:
        ValueError: ``width < 1``, or fewer than one point.
    """
    if width < 1:
        raise ValueError(f"pass width must be >= 1, got {width}")
    if not widths:
        raise ValueError("a cost curve needs at least one measured width")
    w, r = list(widths), list(values)
    if width in w:
        return float(r[w.index(width)])
    if len(w) == 1:
        return float(r[0])
    i = next((k for k in range(1, len(w)) if w[k] > width), len(w) - 1)
    x0, x1, y0, y1 = w[i - 1], w[i], r[i - 1], r[i]
    return float(y0 + (y1 - y0) * (width - x0) / (x1 - x0))


@dataclass(frozen=True)
class PassCostCurve:
    """A target's measured pass cost: the median wall time of one pass over B new tokens after a
    fixed context, logits on all B rows, and its ratio to a one-token pass.

    Calling the curve gives ``r(B)`` (:meth:`ratio`), so it is the suffix drafter's ``pass_cost``.

    Attributes:
        widths: the pass widths B, ascending, starting at 1.
        t_ms: median milliseconds per pass, one per width.
        ratios: ``r(B) = t(B) / t(1)`` (computed; ``r(1) = 1``).
        repeats: timed passes per median (0 for a curve not measured here, e.g. a labelled fallback).
        key: the :func:`calibration_key` it was measured under (``{}`` for a synthetic curve).
        source: ``"measured"`` (just now), ``"cache"`` (read from the cache) or a label saying where
            a curve that was not measured here comes from.
        measured_at: when it was measured (ISO 8601, UTC), ``""`` when not measured.
        load_average: the 1/5/15-minute load averages when it was measured (timings on a busy
            machine are noisy), or ``None``.

    Raises:
        ValueError: widths not ascending from 1, lengths that differ, or a time that is not positive
            and finite.
    """

    widths: tuple[int, ...]
    t_ms: tuple[float, ...]
    repeats: int = 0
    key: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    source: str = field(default="measured", compare=False)
    measured_at: str = ""
    load_average: tuple[float, ...] | None = None
    ratios: tuple[float, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        w = tuple(int(x) for x in self.widths)
        t = tuple(float(x) for x in self.t_ms)
        if not w or w[0] != 1 or any(b <= a for a, b in zip(w, w[1:])):
            raise ValueError(f"widths must ascend from 1, got {list(self.widths)}")
        if len(t) != len(w) or not all(0 < x < float("inf") for x in t):
            raise ValueError(f"need one positive finite time per width, got {list(t)[:12]} for {len(w)} widths")
        object.__setattr__(self, "widths", w)
        object.__setattr__(self, "t_ms", t)
        object.__setattr__(self, "ratios", tuple(round(x / t[0], 4) for x in t))

    @classmethod
    def from_ratios(cls, widths: Sequence[int], ratios: Sequence[float], source: str) -> "PassCostCurve":
        """A curve given by its ratios (t(1) taken as 1 ms), e.g. a synthetic curve or a labelled
        fallback; ``source`` says where it comes from."""
        return cls(tuple(widths), tuple(float(r) for r in ratios), source=source)

    def ratio(self, width: int) -> float:
        """``r(B)`` for ``width`` B, linear between measured widths, extrapolated past the widest.

        Raises:
            ValueError: ``width < 1``.
        """
        return interpolate(self.widths, self.ratios, width)

    __call__ = ratio

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (the cache entry's body, the report's ``pass_cost``)."""
        d = asdict(self)
        d["key"] = dict(self.key)
        d["load_average"] = list(self.load_average) if self.load_average is not None else None
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "cache") -> "PassCostCurve":
        """The curve of :meth:`to_dict`'s fields.

        Raises:
            ValueError: missing or malformed fields (:func:`curve_fields`; a cache entry is checked
                further, :func:`specot.cache_entry.check_pass_cost`).
        """
        return cls(**curve_fields(d), source=source)


def calibration_enabled() -> bool:
    """False when ``SPECOT_CALIBRATE`` is ``0`` / ``false`` / ``no`` / ``off``: backends then price
    with their labelled fallback curves."""
    return os.environ.get("SPECOT_CALIBRATE", "1").strip().lower() not in ("0", "false", "no", "off")


#: The files of a model directory that identify it: its weights and config (not markers or logs,
#: which a cache may rewrite without changing the model).
_MODEL_FILES = ("*.safetensors", "*.bin", "*.gguf", "*.pt", "config.json")


def _file_identity(path: Path) -> dict[str, Any]:
    """Path, size and mtime of a model file, or of a model directory's weights and config (summed
    size, latest mtime): cheap, and changed by any rewrite of the weights."""
    p = path.expanduser().resolve()
    if p.is_file():
        st = p.stat()
        return {"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    files = sorted({f for pat in _MODEL_FILES for f in p.glob(pat) if f.is_file()}) if p.is_dir() else []
    stats = [f.stat() for f in files]
    return {"path": str(p), "files": len(files), "size": sum(s.st_size for s in stats),
            "mtime_ns": max((s.st_mtime_ns for s in stats), default=0)}


def _model_identity(target: Any) -> dict[str, Any]:
    """The model's identity: its file (a GGUF's ``target.path``) or directory (a transformers
    model's ``name_or_path``), else its name and a hash of its config (an in-memory model)."""
    path = getattr(target, "path", None)
    model = getattr(target, "model", None)
    if path is None and model is not None:
        path = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None), "_name_or_path", None)
    if path and Path(str(path)).expanduser().exists():
        return _file_identity(Path(str(path)))
    ident: dict[str, Any] = {"name": str(path or getattr(target, "name", "model"))}
    config = getattr(model, "config", None)
    if config is not None and hasattr(config, "to_json_string"):
        ident["config_sha256"] = hashlib.sha256(config.to_json_string().encode("utf-8")).hexdigest()[:16]
    return ident


def calibration_key(target: Any) -> dict[str, Any]:
    """What a pass-cost measurement of ``target`` depends on, JSON-ready.

    Keys: ``format`` (:data:`FORMAT_VERSION`), ``backend`` (``target.backend``, ``"transformers"``
    when it has none), ``model`` (file or directory identity: path, size, mtime), ``device``,
    ``dtype``, ``threads`` (``target.n_threads``, else torch's intra-op threads), ``cpu_model``,
    ``cpu_flags`` (:func:`specot.envinfo.cpu_flags`), ``gpu`` (on CUDA), ``versions`` (torch,
    transformers and llama_cpp where loaded), and ``build`` where the target names the features its
    kernels were compiled with (``target.build_info``: a llama.cpp wheel built for AVX2 or AVX-512).
    Never measures anything; reads ``/proc/cpuinfo``.
    """
    env = environment_info()
    device = str(getattr(target, "device", "cpu"))
    threads = getattr(target, "n_threads", None)
    versions = {k: env["versions"].get(k) for k in ("torch", "transformers")}
    llama = sys.modules.get("llama_cpp")
    if llama is not None:
        versions["llama_cpp"] = getattr(llama, "__version__", None)
    build = getattr(target, "build_info", None)
    return {
        **({"build": str(build)} if build else {}),
        "format": FORMAT_VERSION,
        "backend": str(getattr(target, "backend", "transformers")),
        "model": _model_identity(target),
        "device": device,
        "dtype": str(getattr(target, "dtype", "")).removeprefix("torch."),
        "threads": int(threads) if threads is not None else env["torch_threads"],
        "cpu_model": cpu_model(),
        "cpu_flags": cpu_flags(),
        "gpu": env["gpu"] if device.startswith("cuda") else None,
        "versions": versions,
    }


def _digest(key: Mapping[str, Any]) -> str:
    """The entry's file name stem: a hash of the key without its format version (so an entry of
    another version is found, and reported stale, rather than left behind)."""
    body = {k: v for k, v in key.items() if k != "format"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:24]


def calibration_path(key: Mapping[str, Any], root: Path | None = None) -> Path | None:
    """The cache file of ``key`` under ``root`` (default: specot's cache directory), or ``None``
    when ``SPECOT_NO_CACHE`` is set."""
    root = model_cache_dir() if root is None else Path(root)
    return None if root is None else root / "calibration" / f"{_digest(key)}.json"


def curve_fields(d: Any) -> dict[str, Any]:
    """The :class:`PassCostCurve` arguments in ``d`` (:meth:`PassCostCurve.to_dict`'s fields), each
    checked for its type and finiteness (:mod:`specot.cache_entry`): ``widths`` (integers),
    ``t_ms`` (positive numbers), ``repeats`` (an integer ``0..MAX_REPEATS``), ``key`` (an object),
    ``measured_at`` (a string), ``load_average`` (``None`` or 1-3 numbers >= 0).

    Raises:
        DamagedEntry: a field that is missing, of the wrong type, not finite or out of range.
    """
    d = mapping(d, "curve")
    widths = tuple(integer(w, f"widths[{i}]", lo=1, hi=1 << 16)
                   for i, w in enumerate(numbers(d.get("widths"), "widths", lo=1, hi=1 << 16)))
    t_ms = numbers(d.get("t_ms"), "t_ms", lo=0.0, hi=MAX_PASS_MS)
    la = d.get("load_average")
    return {"widths": widths, "t_ms": t_ms, "repeats": integer(d.get("repeats", 0), "repeats", lo=0, hi=MAX_REPEATS),
            "key": dict(mapping(d.get("key", {}), "key")), "measured_at": text(d.get("measured_at", ""), "measured_at"),
            "load_average": None if la is None else numbers(la, "load_average", lo=0.0, hi=1e6, max_len=3)}


def _flags(obj: Mapping[str, Any], load: Sequence[float] | None) -> bool:
    """The entry's ``busy`` flag (checked: a bool; ``cpu_count`` an integer); an entry written
    without one is busy when its recorded ``load`` says so (:func:`specot.cache_entry.busy`, on its
    ``cpu_count`` or this machine's)."""
    cpus = obj.get("cpu_count")
    if cpus is not None:
        cpus = integer(cpus, "cpu_count", lo=1, hi=1 << 20)
    if "busy" not in obj:
        return busy(load, cpus or os.cpu_count())
    flag = obj["busy"]
    if not isinstance(flag, bool):
        raise DamagedEntry(f"busy is a {type(flag).__name__}, not true or false")
    return flag


def _curve_entry(obj: Mapping[str, Any], key: Mapping[str, Any]) -> tuple[PassCostCurve, bool]:
    """A cache entry's curve and its busy flag (module docstring: every field checked, the curve a
    plausible measurement, its key ``key``).

    Raises:
        DamagedEntry: a field :func:`curve_fields` or :func:`~specot.cache_entry.check_pass_cost`
            refuses, a ``repeats`` below 1, stored ratios that are not ``t(B)/t(1)``.
        StaleEntry: measured under another key.
    """
    body = mapping(obj.get("curve"), "curve")
    fields = curve_fields(body)
    check_pass_cost(fields["widths"], fields["t_ms"])
    if fields["repeats"] < 1:
        raise DamagedEntry(f"repeats = {fields['repeats']}: a cached curve is measured, with repeats >= 1")
    if "ratios" in body:
        t = fields["t_ms"]
        ratios = numbers(body["ratios"], "ratios", lo=0.0, hi=1 << 16, min_len=len(t), max_len=len(t))
        if any(abs(r - x / t[0]) > 1e-3 * max(1.0, r) for r, x in zip(ratios, t)):
            raise DamagedEntry(f"ratios {list(ratios)[:12]} are not t(B)/t(1) with r(1) = 1")
    flag = _flags(obj, fields["load_average"])
    if not same_json(fields["key"], key):
        raise StaleEntry("measured under another key")
    return PassCostCurve(**fields, source="cache"), flag


#: A measurement during which other processes took more than this share of the machine's CPU time
#: (:class:`specot.envinfo.CpuClock`) is busy, whatever the load average said.
OTHERS_BUSY_SHARE = 0.25


def _quiet_now() -> bool:
    """Whether this machine is quiet now: a quiet load average (:func:`specot.cache_entry.quiet`), or
    other processes using under a tenth of its CPU time over a quarter second."""
    if quiet(load_average(), os.cpu_count()):
        return True
    share = _others_share_now()
    return share is not None and share < 0.1


def _timed(run: Callable[[], Any]) -> tuple[Any, list[float] | None, bool]:
    """``run()`` (a timing) with the load average before it and whether the machine was busy for it:
    a busy load average (:func:`specot.cache_entry.busy`), or other processes taking more than
    :data:`OTHERS_BUSY_SHARE` of the CPU time while it ran (:class:`CpuClock`)."""
    load = load_average()
    with CpuClock() as clock:
        out = run()
    share = clock.others_share
    return out, load, busy(load, os.cpu_count()) or (share is not None and share > OTHERS_BUSY_SHARE)


def _others_share_now() -> float | None:
    """Other processes' share of the CPU time over the next quarter second (:class:`CpuClock`)."""
    with CpuClock() as clock:
        time.sleep(0.25)
    return clock.others_share


def _busy_note(load: Any) -> str:
    return (f"was measured on a busy machine (load average {list(load or [])} on {os.cpu_count()} CPUs) "
            "and the machine is quiet now")


def _write_json(path: Path, obj: Mapping[str, Any]) -> None:
    """Write ``obj`` as JSON to ``path`` atomically (:func:`specot.outputs.atomic_path`).

    Raises:
        OSError: the directory cannot be made or written.
    """
    body = json.dumps(obj, indent=1, sort_keys=True, default=str)
    with atomic_path(path) as tmp:
        tmp.write_text(body, encoding="utf-8")


def _measure(target: Any, key: Mapping[str, Any], widths: Sequence[int], repeats: int) -> tuple[PassCostCurve, bool]:
    """The target's own measurement (``measure_pass_times``) as a curve, and whether the machine was
    busy for it (:func:`_timed`).

    Raises:
        TypeError: the target has no ``measure_pass_times``.
        ValueError: it returned one time per width that is not positive, or not one per width.
    """
    measure = getattr(target, "measure_pass_times", None)
    if not callable(measure):
        raise TypeError(f"{type(target).__name__} cannot measure its passes (no measure_pass_times method)")
    times, load, was_busy = _timed(lambda: measure(list(widths), repeats))
    t = [float(x) for x in times]
    if len(t) != len(widths):
        raise ValueError(f"measure_pass_times returned {len(t)} times for {len(widths)} widths")
    t = _plausible(widths, t)
    return PassCostCurve(tuple(widths), tuple(round(x, 4) for x in t), repeats=int(repeats), key=dict(key),
                         source="measured", measured_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                         load_average=tuple(load) if load is not None else None), was_busy


def _plausible(widths: Sequence[int], t_ms: Sequence[float]) -> list[float]:
    """Measured times made consistent with what a pass can cost: non-decreasing in B (a wider pass
    never costs less; a smaller median is noise) and at most ``B·t(1)`` (B one-token passes do the
    same work; a larger median means another process took the cores meanwhile). A quiet machine's
    curve passes unchanged.

    Raises:
        ValueError: a time that is not a positive finite number.
    """
    if not all(x > 0 and x != float("inf") for x in t_ms):
        raise ValueError(f"measured pass times must be positive and finite, got {list(t_ms)}")
    out: list[float] = []
    for w, x in zip(widths, t_ms):
        x = max(x, out[-1]) if out else x
        out.append(min(x, w * t_ms[0]))
    return out


def calibrate(target: Any, *, widths: Sequence[int] = DEFAULT_WIDTHS, repeats: int = DEFAULT_REPEATS,
              refresh: bool = False, cache_dir: str | os.PathLike[str] | None = None) -> PassCostCurve:
    """The pass-cost curve of ``target`` on this machine: the cached entry of its
    :func:`calibration_key` when there is one for these ``widths``, else measured (the target's
    ``measure_pass_times``) and stored (module docstring: atomic write, damaged and stale entries).

    Args:
        target: a target with ``measure_pass_times(widths, repeats) -> list[float]`` (ms).
        widths: pass widths B, ascending from 1 (default :data:`DEFAULT_WIDTHS`).
        repeats: timed passes per width (default :data:`DEFAULT_REPEATS`).
        refresh: measure even when an entry exists (and replace it).
        cache_dir: the cache's root (default :func:`~specot.models.embedded.model_cache_dir`;
            ``SPECOT_NO_CACHE=1``: nothing read or stored).

    Returns:
        the curve, ``source`` ``"cache"`` or ``"measured"``.

    Raises:
        TypeError: the target cannot measure its passes.
        ValueError: widths not ascending from 1, ``repeats < 1``, or a measurement that is not a
            positive time per width.
    """
    widths = tuple(int(w) for w in widths)
    if not widths or widths[0] != 1 or any(b <= a for a, b in zip(widths, widths[1:])):
        raise ValueError(f"widths must ascend from 1, got {list(widths)}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    key = calibration_key(target)
    path = calibration_path(key, Path(cache_dir) if cache_dir is not None else None)
    if path is not None and not refresh:
        unstored = _UNSTORED.get(path)
        if isinstance(unstored, PassCostCurve) and unstored.widths == widths:
            return unstored
        found, why = read_entry(path, FORMAT_VERSION, lambda obj: _curve_entry(obj, key))
        if found is not None and found[0].widths == widths:
            cached, was_busy = found
            if not (was_busy and _quiet_now()):
                return cached
            why = _busy_note(cached.load_average)
    else:
        why = None
    curve, was_busy = _measure(target, key, widths, repeats)
    if path is not None:
        unstored = _store(path, {"format": FORMAT_VERSION, "curve": curve.to_dict(), "cpu_count": os.cpu_count(),
                                 "busy": was_busy}, curve)
        _warn(f"pass-cost calibration cache {path}", why, "pass-cost calibration", unstored)
    return curve


def _store(path: Path, obj: Mapping[str, Any], value: Any) -> str | None:
    """Write the entry ``obj`` to ``path`` (:func:`_write_json`); when the cache cannot be written,
    keep ``value`` for this process (measured once) and say why."""
    try:
        _write_json(path, obj)
    except OSError as exc:
        _UNSTORED[path] = value
        return f"{path.parent} is not writable ({exc.strerror or exc})"
    _UNSTORED.pop(path, None)
    return None


def _warn(entry: str, why: str | None, what: str, unstored: str | None) -> None:
    """One warning for a measurement: why the cached ``entry`` was not used, and that the new one
    was not stored (``unstored``: the directory and why, said once per process); nothing when neither."""
    if why is None and (unstored is None or unstored in _UNWRITABLE):
        return
    line = f"{entry} {why if why.startswith('was ') else 'is ' + why}; measured again" if why is not None else ""
    if unstored is not None:
        line = (f"{line}, but not stored: " if line else f"{what} not stored: ") + unstored
        _UNWRITABLE.add(unstored)
    warnings.warn(line, stacklevel=3)


#: The largest magnitude of a cached measurement's value.
_MAX_VALUE = 1e12


def _measured_values(values: Any, name: str, check: Callable[[Mapping[str, float]], None] | None) -> dict[str, float]:
    """``values`` as ``{field: float}`` when every value is a finite number of magnitude at most
    1e12 and ``check`` (the measurement's own plausibility rules) accepts them.

    Raises:
        DamagedEntry / ValueError: a value that is not such a number, or one ``check`` refuses.
    """
    out = {str(k): number(v, f"{name} {k}", lo=-_MAX_VALUE, hi=_MAX_VALUE) for k, v in mapping(values, "values").items()}
    if check is not None:
        check(out)
    return out


def _measurement_entry(obj: Mapping[str, Any], name: str, key: Mapping[str, Any] | None,
                       check: Callable[[Mapping[str, float]], None] | None) -> tuple[dict[str, Any], bool]:
    """A cache entry's measurement (every field checked) and its busy flag.

    Raises:
        DamagedEntry / ValueError: a field of the wrong type, a value that is not finite, or one
            ``check`` refuses.
        StaleEntry: another measurement's entry, or measured under another key (``key`` None: any key).
    """
    body = mapping(obj.get("measurement"), "measurement")
    values = _measured_values(body.get("values"), name, check)
    la = body.get("load_average")
    la = None if la is None else list(numbers(la, "load_average", lo=0.0, hi=1e6, max_len=3))
    measured_at = text(body.get("measured_at", ""), "measured_at")
    flag = _flags(obj, la)
    if body.get("name") != name or key is not None and not same_json(mapping(body.get("key"), "key"), key):
        raise StaleEntry("measured under another key")
    return {"name": name, "key": body["key"], "values": values, "measured_at": measured_at, "load_average": la,
            "source": "cache"}, flag


def cached_measurement(name: str, key: Mapping[str, Any], measure: Callable[[], Mapping[str, float]], *,
                       check: Callable[[Mapping[str, float]], None] | None = None, refresh: bool = False,
                       cache_dir: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """A small measurement of this machine beside the pass-cost curves (e.g. the decoding loop's
    work per drafted step, :mod:`specot.plan.step_work`), cached the same way (module docstring:
    ``<cache>/calibration/<digest>.json``, atomic write, a damaged or stale entry measured again
    with one warning, ``SPECOT_NO_CACHE=1`` measures every time).

    Args:
        name: what is measured (part of the entry's identity).
        key: what the measurement depends on (JSON-ready; compared on read).
        measure: returns the values ``{field: number}``.
        check: the values' plausibility rules (raises ``ValueError``), applied to a new
            measurement before it is stored and to a cached one before it is used (a cached entry
            it refuses is damaged: measured again with one warning).
        refresh: measure even when an entry exists (and replace it).
        cache_dir: the cache's root (default: specot's cache directory).

    Returns:
        ``{"name", "key", "values", "measured_at", "load_average", "source"}`` (``source``:
        ``"cache"`` or ``"measured"``).

    Raises:
        ValueError: ``measure`` returned a value that is not a finite number, or one ``check`` refuses.
    """
    full_key = {"format": FORMAT_VERSION, "measurement": name, **dict(key)}
    path = calibration_path(full_key, Path(cache_dir) if cache_dir is not None else None)
    if path is not None and not refresh:
        if isinstance(_UNSTORED.get(path), dict):
            return _UNSTORED[path]
        found, why = read_entry(path, FORMAT_VERSION, lambda obj: _measurement_entry(obj, name, full_key, check))
        if found is not None:
            cached, was_busy = found
            if not (was_busy and _quiet_now()):
                return cached
            why = _busy_note(cached["load_average"])
    else:
        why = None
    measured, load, was_busy = _timed(measure)
    values = {k: float(v) for k, v in measured.items()}
    if not all(v == v and abs(v) != float("inf") for v in values.values()):
        raise ValueError(f"{name}: measured values must be finite numbers, got {values}")
    if check is not None:
        check(values)
    body = {"name": name, "key": full_key, "values": values,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average": list(load) if load is not None else None}
    if path is not None:
        unstored = _store(path, {"format": FORMAT_VERSION, "measurement": body, "cpu_count": os.cpu_count(),
                                 "busy": was_busy}, {**body, "source": "measured"})
        _warn(f"calibration cache {path} ({name})", why, name, unstored)
    return {**body, "source": "measured"}


def find_measurements(name: str, where: Mapping[str, Any], *,
                      check: Callable[[Mapping[str, float]], None] | None = None,
                      cache_dir: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """Every cached measurement called ``name`` (:func:`cached_measurement`) whose key holds each
    item of ``where``, oldest file name first; measures nothing. An entry that is damaged or that
    ``check`` refuses is left out (the measurement that writes it again replaces it).

    Returns:
        the records, as :func:`cached_measurement` returns them (``source`` ``"cache"``).
    """
    root = model_cache_dir() if cache_dir is None else Path(cache_dir)
    if root is None or not (root / "calibration").is_dir():
        return []
    out = []
    for path in sorted((root / "calibration").glob("*.json")):
        found, _ = read_entry(path, FORMAT_VERSION, lambda obj: _measurement_entry(obj, name, None, check))
        if found is None:
            continue
        key = found[0]["key"]
        if all(k in key for k in where) and same_json({k: key[k] for k in where}, where):
            out.append(found[0])
    return out


def break_even_alpha(gamma: int, ratio: Callable[[int], float], c: float = 0.0) -> float | None:
    """The smallest i.i.d. acceptance α at which a chain of γ drafts pays for its wider pass
    (``E(α, γ) = r(1 + γ) + γ·c``, Leviathan et al. 2023 Eq. 1), by bisection; ``None`` when even
    α = 1 does not (``γ + 1 <= r(1 + γ) + γ·c``); 0 for γ = 0.

    Args:
        gamma: drafts in the chain.
        ratio: ``r(B)``, the cost of a pass over B tokens in one-token passes (a :class:`PassCostCurve`).
        c: the drafter's cost per draft token, in one-token target passes.

    Raises:
        ValueError: ``gamma < 0`` or ``c < 0``.
    """
    if gamma < 0 or c < 0:
        raise ValueError(f"gamma must be >= 0 and c >= 0, got {gamma} and {c}")
    if gamma == 0:
        return 0.0
    cost = float(ratio(1 + gamma)) + gamma * c
    if gamma + 1 <= cost:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(expected_tokens(mid, gamma)) < cost else (lo, mid)
    return round(hi, 4)


def pricing_curve(drafter: Any) -> dict[str, Any] | None:
    """The measured curve that prices ``drafter``'s budget — its ``pass_cost``, or its suffix part's
    (a ``suffix+MODEL`` hybrid) — as :meth:`PassCostCurve.to_dict`, with ``draft_overhead`` (a drafted
    step's own work in one-token passes, priced beside the pass) and ``step_work`` (its measurement,
    :mod:`specot.plan.step_work`, or ``None`` when the overhead was given); ``None`` when no curve does."""
    for d in (drafter, getattr(drafter, "suffix", None)):
        curve = getattr(d, "pass_cost", None)
        if isinstance(curve, PassCostCurve):
            work = getattr(d, "step_work", None)
            return {**curve.to_dict(), "draft_overhead": float(getattr(d, "draft_overhead", 0.0)),
                    "step_work": {"values": work["values"], "source": work["source"],
                                  "measured_at": work["measured_at"]} if work else None}
    return None
