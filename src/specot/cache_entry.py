"""One validating reader for specot's cache entries: whatever a cache file holds, its reader
returns either an entry that specot could have written or the reason it cannot be used.

specot keeps small JSON files in its cache (:func:`specot.models.embedded.model_cache_dir`): the
pass-cost curves and step-work measurements of :mod:`specot.calibration`, and the markers of the
cached model and tokenizer directories (:mod:`specot.models.cache_integrity`). Another program, a
full disk, an interrupted copy or a hand edit can leave anything in them, so every one is read
here, in two steps:

1. :func:`read_json_file`: the file's bytes as strict JSON. Not UTF-8, larger than
   :data:`MAX_ENTRY_BYTES`, nested deeper than Python parses, or holding a number JSON cannot carry
   (``NaN``, ``Infinity``, ``1e999``, which no specot writer emits): *damaged*.
2. :func:`read_entry`: its format version (another one: *stale*), then the caller's ``validate``,
   which checks every field the entry's reader uses — its type, finiteness and plausibility, the
   same rules its writer applies — with the helpers below, and raises :class:`StaleEntry` for an
   entry measured under another key. Whatever else ``validate`` raises on such data (``TypeError``,
   ``KeyError``, ``OverflowError`` ...) also means *damaged*: no content of a file makes a reader
   fail.

The caller measures or builds the entry again with one warning naming the file, and replaces it.

**Busy machines.** Timings taken while other processes held the cores are too slow (a wide pass
more so than a narrow one). A measurement records the load average; it was taken on a *busy*
machine (:func:`busy`) when the 1-minute load average per CPU exceeded
:data:`BUSY_LOAD_PER_CPU`, i.e. more runnable processes than CPUs. Such an entry is flagged
(``"busy": true``), used while the machine is not quiet, and measured again by the first run that
finds it quiet (:func:`quiet`: a 1-minute load average per CPU of at most
:data:`QUIET_LOAD_PER_CPU`; the gap between the two thresholds keeps a machine near one of them
from measuring at every run).
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

__all__ = ["StaleEntry", "DamagedEntry", "read_json_file", "read_entry", "number", "integer", "numbers", "mapping",
           "text", "check_pass_cost", "busy", "quiet", "same_json", "BUSY_LOAD_PER_CPU", "QUIET_LOAD_PER_CPU",
           "MAX_ENTRY_BYTES",
           "PLAUSIBLE_TOLERANCE", "MAX_PASS_MS", "MIN_PASS_MS"]

#: The largest cache entry read (bytes): specot's entries are a few kilobytes.
MAX_ENTRY_BYTES = 1 << 20
#: A measurement was taken on a busy machine when its 1-minute load average per CPU exceeded this.
BUSY_LOAD_PER_CPU = 1.0
#: A busy measurement is taken again once the 1-minute load average per CPU is at most this.
QUIET_LOAD_PER_CPU = 0.5
#: Relative slack of the plausibility rules over rounded times (a cached t(B) may fall this far
#: below t(B - 1), or rise this far above B·t(1)).
PLAUSIBLE_TOLERANCE = 0.01
#: The longest pass a curve may record, milliseconds (an hour: anything longer is not a timing).
MAX_PASS_MS = 3.6e6
#: The shortest: the curves store milliseconds to 4 decimals, so a measured time is at least this.
MIN_PASS_MS = 1e-4

T = TypeVar("T")


class DamagedEntry(ValueError):
    """A cache entry's content that no specot writer produces (its message says which field)."""


class StaleEntry(Exception):
    """A valid cache entry written for another key (another model, machine or configuration)."""


def _short(exc: BaseException | str, limit: int = 160) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _no_constant(name: str) -> Any:
    raise DamagedEntry(f"non-standard JSON number {name}")


def _finite_float(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise DamagedEntry(f"number {s[:24]} out of range")
    return x


def read_json_file(path: str | os.PathLike[str], *, max_bytes: int = MAX_ENTRY_BYTES) -> tuple[Any, str | None]:
    """The JSON value in ``path``: ``(value, None)``; ``(None, None)`` when there is no such file;
    ``(None, why)`` when it cannot be used — ``why`` is ``"unreadable (...)"`` (the file system
    refused) or ``"damaged (...)"`` (not UTF-8, over ``max_bytes``, not strict JSON, a number out
    of range, nested too deep). Never raises."""
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as exc:
        return None, f"unreadable ({_short(exc.strerror or exc)})"
    except ValueError as exc:  # a path with a NUL byte
        return None, f"unreadable ({_short(exc)})"
    if len(raw) > max_bytes:
        return None, f"damaged (larger than {max_bytes} bytes)"
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"damaged (not UTF-8 text: byte {exc.start})"
    try:
        return json.loads(body, parse_constant=_no_constant, parse_float=_finite_float), None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and DamagedEntry are ValueErrors
        return None, f"damaged ({_short(exc)})"


def read_entry(path: str | os.PathLike[str], version: int, validate: Callable[[dict[str, Any]], T], *,
               version_field: str = "format") -> tuple[T | None, str | None]:
    """The entry in ``path`` as ``validate`` makes it: ``(entry, None)``; ``(None, None)`` when
    there is no file; ``(None, why)`` — ``"unreadable (...)"``, ``"damaged (...)"`` (module
    docstring) or ``"stale (...)"`` (another format ``version``, or ``validate`` raised
    :class:`StaleEntry`). Never raises for any content of the file.

    Args:
        path: the entry's file.
        version: the format version this specot writes (the object's ``version_field``).
        validate: the JSON object → the entry; raises :class:`DamagedEntry` (or any error of bad
            data) for a field that is missing, of the wrong type, not finite or implausible.
    """
    obj, why = read_json_file(path)
    if obj is None:
        return None, why
    if not isinstance(obj, dict):
        return None, f"damaged (a JSON {type(obj).__name__}, not an object)"
    found = obj.get(version_field)
    if type(found) is not int or found != version:  # noqa: E721 - True is not version 1
        return None, f"stale (format version {_short(repr(found), 40)}, this specot writes {version})"
    try:
        return validate(obj), None
    except StaleEntry as exc:
        return None, f"stale ({_short(exc)})"
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, ZeroDivisionError,
            RecursionError) as exc:
        return None, f"damaged ({_short(exc if isinstance(exc, DamagedEntry) else f'{type(exc).__name__}: {exc}')})"


# ----------------------------------------------------------------------------- field checks
def number(value: Any, what: str, *, lo: float = -math.inf, hi: float = math.inf) -> float:
    """``value`` as a float when it is a finite JSON number within ``[lo, hi]``.

    Raises:
        DamagedEntry: a bool, a string, ``None``, a container, or a number out of range.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DamagedEntry(f"{what} is a {type(value).__name__}, not a number")
    try:
        x = float(value)
    except OverflowError:
        raise DamagedEntry(f"{what} is out of range") from None
    if not (math.isfinite(x) and lo <= x <= hi):
        raise DamagedEntry(f"{what} = {_short(repr(value), 40)} is outside [{lo:g}, {hi:g}]")
    return x


def integer(value: Any, what: str, *, lo: int, hi: int) -> int:
    """``value`` when it is a JSON integer (``8`` or ``8.0``) within ``[lo, hi]``.

    Raises:
        DamagedEntry: not an integer, or out of range.
    """
    x = number(value, what, lo=lo, hi=hi)
    if x != int(x):
        raise DamagedEntry(f"{what} = {value!r} is not an integer")
    return int(x)


def numbers(value: Any, what: str, *, lo: float = -math.inf, hi: float = math.inf, min_len: int = 1,
            max_len: int = 4096) -> tuple[float, ...]:
    """``value`` as floats when it is a JSON list of ``min_len`` to ``max_len`` numbers in ``[lo, hi]``.

    Raises:
        DamagedEntry: not a list, of another length, or an element that is not such a number.
    """
    if not isinstance(value, (list, tuple)):
        raise DamagedEntry(f"{what} is a {type(value).__name__}, not a list")
    if not min_len <= len(value) <= max_len:
        raise DamagedEntry(f"{what} has {len(value)} elements, not {min_len} to {max_len}")
    return tuple(number(v, f"{what}[{i}]", lo=lo, hi=hi) for i, v in enumerate(value))


def mapping(value: Any, what: str) -> dict[str, Any]:
    """``value`` when it is a JSON object.

    Raises:
        DamagedEntry: anything else.
    """
    if not isinstance(value, dict):
        raise DamagedEntry(f"{what} is a {type(value).__name__}, not an object")
    return value


def text(value: Any, what: str, *, max_len: int = 256, pattern: str | None = None) -> str:
    """``value`` when it is a string of at most ``max_len`` characters (matching ``pattern``, a
    regular expression, in full when given).

    Raises:
        DamagedEntry: anything else.
    """
    if not isinstance(value, str) or len(value) > max_len:
        raise DamagedEntry(f"{what} is not a string of at most {max_len} characters")
    if pattern is not None and re.fullmatch(pattern, value) is None:
        raise DamagedEntry(f"{what} = {_short(repr(value), 40)} is not of the form {pattern}")
    return value


def check_pass_cost(widths: Sequence[int], t_ms: Sequence[float], *,
                    tolerance: float = PLAUSIBLE_TOLERANCE) -> None:
    """Whether a cached pass-cost curve is one a measurement gives (:func:`specot.calibration.calibrate`
    makes its times so before storing them): widths ascending from 1, one time per width in
    ``[MIN_PASS_MS, MAX_PASS_MS]``, non-decreasing in B (a wider pass never costs less) and at most
    ``B·t(1)`` (B one-token passes do the same work), each within ``tolerance`` (rounding) — so
    ``r(1) = 1`` and ``1 <= r(B) <= B``.

    Raises:
        DamagedEntry: the first rule broken.
    """
    w, t = list(widths), list(t_ms)
    if not w or w[0] != 1 or any(b <= a for a, b in zip(w, w[1:])):
        raise DamagedEntry(f"widths {_short(w, 60)} do not ascend from 1")
    if len(t) != len(w):
        raise DamagedEntry(f"{len(t)} times for {len(w)} widths")
    if not all(MIN_PASS_MS <= x <= MAX_PASS_MS for x in t):
        raise DamagedEntry(f"pass times {_short(t, 60)} are not all in [{MIN_PASS_MS:g}, {MAX_PASS_MS:g}] ms")
    slack = 1e-3  # ms: the times are stored rounded to 4 decimals
    for (a, ta), (b, tb) in zip(zip(w, t), zip(w[1:], t[1:])):
        if tb < ta * (1 - tolerance) - slack:
            raise DamagedEntry(f"a pass of {b} tokens is cached as cheaper than one of {a} ({tb:g} < {ta:g} ms)")
    for b, tb in zip(w, t):
        if tb > b * t[0] * (1 + tolerance) + slack:
            raise DamagedEntry(f"a pass of {b} tokens is cached as dearer than {b} one-token passes "
                               f"({tb:g} > {b} x {t[0]:g} ms)")


def _per_cpu(load_average: Sequence[float] | None, cpu_count: int | None) -> float | None:
    if not load_average or not cpu_count or cpu_count < 1:
        return None
    try:
        x = float(load_average[0]) / int(cpu_count)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def busy(load_average: Sequence[float] | None, cpu_count: int | None) -> bool:
    """Whether a machine with this load average (1, 5, 15 minutes) and ``cpu_count`` CPUs is busy:
    its 1-minute load average per CPU exceeds :data:`BUSY_LOAD_PER_CPU` (more runnable processes
    than CPUs: a timing then waits for the cores). False when either is unknown."""
    x = _per_cpu(load_average, cpu_count)
    return x is not None and x > BUSY_LOAD_PER_CPU


def quiet(load_average: Sequence[float] | None, cpu_count: int | None) -> bool:
    """Whether a machine with this load average and ``cpu_count`` CPUs is quiet enough to measure
    again what was measured busy: a 1-minute load average per CPU of at most
    :data:`QUIET_LOAD_PER_CPU`. False when either is unknown."""
    x = _per_cpu(load_average, cpu_count)
    return x is not None and x <= QUIET_LOAD_PER_CPU


def same_json(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two keys are equal as JSON (tuples and lists alike, values as :func:`json.dumps`
    writes them)."""
    def norm(k: Mapping[str, Any]) -> Any:
        return json.loads(json.dumps(dict(k), sort_keys=True, default=str))
    return norm(a) == norm(b)
