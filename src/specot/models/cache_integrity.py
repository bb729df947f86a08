"""Integrity of specot's cached directories (the converted embedded model, the llama.cpp backend's
tokenizer): a marker written last, the lock, the check that runs at every load.

A finished directory holds a JSON marker, written last, with its own fields, a random ``id`` and
``files``: for every file its size, SHA-256 and the ``stat`` seen when it was hashed (``mtime_ns``,
``ctime_ns``, ``inode``, and ``checked_ns``, the clock just before). :func:`verify` runs at every
load:

- every recorded file must exist with its recorded size;
- files up to :data:`ALWAYS_HASH_BYTES` (configs, tokenizer files) are hashed every time (a few
  milliseconds);
- a larger file (the 540 MB ``model.safetensors``) is hashed only when its ``stat`` differs from the
  recorded one, or when that record is too recent to trust (its ``ctime_ns`` less than
  :data:`RACY_NS` before ``checked_ns``: timestamps are coarse, so a write in the same clock tick
  as the record would leave them unchanged). After a matching hash the new ``stat`` is recorded (the
  marker is rewritten under the lock, when the cache is writable), so later loads only compare it.

A full SHA-256 of the 540 MB weights costs about 0.3-0.5 s on a 2-core CPU with SHA-NI, the
``stat`` comparison microseconds. What the comparison catches: any write through the file system,
in place and of the same size included, since every write sets the file's ``ctime``, which no
program can set back (``touch``/``utime`` restore ``mtime`` only), as well as a replaced file (a new
inode). What it misses: a change that bypasses the file system (bit rot on the disk, writes to the
raw device) and a file system that keeps no ``ctime``; such a copy loads, and only a failed load
triggers a full check (the caller's ``full=True``).

The marker itself is read by the cache's one validating reader (:func:`specot.cache_entry.read_json_file`):
a marker that is not UTF-8 or not strict JSON, or whose ``files`` record is not the one
:func:`build_into` writes (plain file names; a non-negative integer ``size``; a 64-digit hex
``sha256``; integer ``stat`` fields), is unreadable, so the directory is built again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from ..cache_entry import DamagedEntry, integer, mapping, read_json_file, text

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: the cache works unlocked
    fcntl = None  # type: ignore[assignment]

__all__ = ["file_sha256", "read_marker", "marker_problem", "verify", "build_into", "cache_lock", "ALWAYS_HASH_BYTES",
           "RACY_NS", "LOCK_NAME", "TMP_PREFIX", "NO_CHECKSUMS"]

#: Files up to this size are hashed at every check; larger ones when their ``stat`` changed.
ALWAYS_HASH_BYTES = 16 << 20
#: A ``stat`` record is trusted only when the file's ``ctime`` was this much older than the record.
RACY_NS = 2_000_000_000
LOCK_NAME = ".lock"  # flock'ed around check-build-rename, a marker refresh, the removal of temporaries
TMP_PREFIX = ".converting-"  # a directory being built (or left by a killed process)
#: :func:`verify`'s answer, with ``full=True``, for a marker that records no files (an older one).
NO_CHECKSUMS = "it fails to load and its marker records no checksums"
_LOCK_WAIT_S = 600.0  # how long to wait for another process's build


def file_sha256(path: Path) -> str:
    """The SHA-256 hex digest of the file at ``path`` (read in 4 MiB blocks).

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def read_marker(directory: Path, mark: str) -> dict | None:
    """The marker ``directory / mark`` (a JSON object whose ``files`` record, when it has one, is the
    one :func:`build_into` writes: module docstring), or ``None`` when it is missing, unreadable or
    damaged (:func:`marker_problem` says which)."""
    return _marker(directory, mark)[0]


def marker_problem(directory: Path, mark: str) -> str | None:
    """Why the marker ``directory / mark`` cannot be used (``"missing"``, ``"damaged (...)"``,
    ``"unreadable (...)"``), or ``None`` when :func:`read_marker` returns it."""
    return _marker(directory, mark)[1]


def _marker(directory: Path, mark: str) -> tuple[dict | None, str | None]:
    obj, why = read_json_file(directory / mark)
    if obj is None:
        return None, why or "missing"
    try:
        _check_marker(obj)
    except DamagedEntry as exc:
        return None, f"damaged ({exc})"
    return obj, None


def _check_marker(obj: Any) -> None:
    """Raise :class:`~specot.cache_entry.DamagedEntry` unless ``obj`` is a marker :func:`build_into` writes."""
    mapping(obj, "marker")
    if "id" in obj:
        text(obj["id"], "id")
    files = obj.get("files")
    if files is None:
        return
    for name, rec in mapping(files, "files").items():
        if name in ("", ".", "..") or "/" in name or "\\" in name or "\x00" in name:
            raise DamagedEntry(f"files names {name[:40]!r}, not a file of the directory")
        rec = mapping(rec, f"files[{name[:40]!r}]")
        integer(rec.get("size"), f"size of {name[:40]}", lo=0, hi=1 << 50)
        text(rec.get("sha256"), f"sha256 of {name[:40]}", pattern="[0-9a-f]{64}")
        if rec.get("stat") is not None:
            for k, v in mapping(rec["stat"], f"stat of {name[:40]}").items():
                if type(v) is not int:  # noqa: E721 - a bool is no time
                    raise DamagedEntry(f"stat {k[:20]} of {name[:40]} is not an integer")


def _stat_record(st: os.stat_result, checked_ns: int) -> dict[str, int]:
    return {"mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "inode": st.st_ino, "checked_ns": checked_ns}


def _trusted(rec: dict[str, Any], st: os.stat_result) -> bool:
    """Whether the file's ``stat`` vouches for its recorded checksum (module docstring)."""
    seen = rec.get("stat")
    if not isinstance(seen, dict) or not isinstance(seen.get("checked_ns"), int):
        return False
    same = _stat_record(st, seen["checked_ns"]) == seen
    return same and st.st_ctime_ns + RACY_NS < seen["checked_ns"]


def verify(directory: Path, mark: str, *, full: bool = False,
           select: Callable[[str], bool] | None = None) -> str | None:
    """Why the files of the cached ``directory`` are not the ones its marker ``mark`` records, or
    ``None`` when they are (the check is the module docstring's; a large file whose hash matched
    gets its new ``stat`` recorded). Answers ``"missing"`` when there is no directory and
    ``"incomplete: ..."`` without a readable marker; a marker that records no files passes (its
    load is the check), or gives :data:`NO_CHECKSUMS` with ``full``.

    Args:
        directory: the cached directory.
        mark: its marker's file name.
        full: hash every file, whatever its ``stat`` (after a failed load).
        select: check only the recorded files whose name it accepts.
    """
    if not directory.is_dir():
        return "missing"
    marker, why = _marker(directory, mark)
    if marker is None:
        return f"incomplete: no readable marker {mark}" + ("" if why == "missing" else f", it is {why}")
    files = marker.get("files")
    if not isinstance(files, dict) or not files:
        return NO_CHECKSUMS if full else None
    fresh: dict[str, dict[str, int]] = {}
    for name, rec in files.items():
        if select is not None and not select(name):
            continue
        rec = rec if isinstance(rec, dict) else {}
        try:
            checked_ns = time.time_ns()
            st = (directory / name).stat()
            if st.st_size != rec.get("size"):
                return f"{name} has {st.st_size} bytes, {rec.get('size')} were written"
            if not full and st.st_size > ALWAYS_HASH_BYTES and _trusted(rec, st):
                continue
            if file_sha256(directory / name) != rec.get("sha256"):
                return f"{name} does not match its checksum"
        except FileNotFoundError:
            return f"{name} is missing"
        except OSError as exc:
            return f"{name} is unreadable ({exc.strerror or exc})"
        if st.st_size > ALWAYS_HASH_BYTES and rec.get("stat") != _stat_record(st, checked_ns):
            fresh[name] = _stat_record(st, checked_ns)
    if fresh:
        _record_stats(directory, mark, marker, fresh)
    return None


def _record_stats(directory: Path, mark: str, seen: dict, fresh: dict[str, dict[str, int]]) -> None:
    """Record the ``stat`` of files whose hash just matched, if the marker is still ``seen`` and the
    lock is free at once; a cache that cannot be written is checked in full again next time."""
    try:
        with cache_lock(directory.parent, wait_s=0) as held:
            if not held or read_marker(directory, mark) != seen:
                return
            marker = json.loads(json.dumps(seen))
            for name, st in fresh.items():
                marker["files"][name]["stat"] = st
            _write_marker(directory, mark, marker)
    except OSError:
        pass


def _write_marker(directory: Path, mark: str, marker: dict) -> None:
    """Write the marker atomically (a temporary file flushed to the disk, then renamed)."""
    fd, tmp = tempfile.mkstemp(prefix=".specot-marker-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(marker))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, directory / mark)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _fingerprint(directory: Path, known_sha256: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """``{file name: {"size", "sha256", "stat"}}`` of every file in ``directory``, each flushed to the
    disk (``fsync``) so that a marker never outlives the data it describes; a file named in
    ``known_sha256`` is not read again (its writer hashed it while writing)."""
    files: dict[str, dict[str, Any]] = {}
    for f in sorted(directory.iterdir()):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
            checked_ns = time.time_ns()
            st = f.stat()
            digest = known_sha256.get(f.name) or file_sha256(f)
            files[f.name] = {"size": st.st_size, "sha256": digest, "stat": _stat_record(st, checked_ns)}
    return files


@contextlib.contextmanager
def build_into(dest: Path, mark: str, fields: dict[str, Any],
               known_sha256: Mapping[str, str] | None = None) -> Iterator[Path]:
    """Yield a fresh temporary directory next to ``dest`` (``.converting-*``); once the block has
    filled it without raising, write the marker ``mark`` (``fields``, a new ``id``, the files'
    fingerprints) and rename it into place, a previous ``dest`` (damaged or incomplete) moved aside
    and removed. ``known_sha256``: ``{file name: SHA-256}`` that the block filled in for files it
    hashed while writing them (read when the block ends; those files are not read again). Call it holding :func:`cache_lock`. Whatever fails, no temporary is left behind
    (a killed process's is removed by the next one that holds the lock).

    Raises:
        OSError: the directory cannot be written (a full disk, a read-only cache).
    """
    tmp = Path(tempfile.mkdtemp(prefix=TMP_PREFIX, dir=dest.parent))
    old = tmp.with_name(tmp.name + "-old")
    try:
        yield tmp
        marker = dict(fields, id=uuid.uuid4().hex, files=_fingerprint(tmp, known_sha256 or {}))
        _write_marker(tmp, mark, marker)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def cache_lock(root: Path, *, wait_s: float = _LOCK_WAIT_S) -> Iterator[bool]:
    """Hold ``<root>/.lock`` (``fcntl.flock``, released by the kernel when the process dies);
    yields ``True`` once held, or ``False`` at once when ``wait_s`` is 0 and another process (or
    another open of the file in this one) holds it. Without ``fcntl`` (Windows) nothing is locked
    and it yields ``True``.

    Raises:
        OSError: the lock file cannot be opened (a read-only directory), or ``TimeoutError`` after
            ``wait_s`` seconds of another process's build.
    """
    if fcntl is None:  # pragma: no cover - Windows
        yield True
        return
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if wait_s <= 0:
                    yield False
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"another process has held {root / LOCK_NAME} for over {wait_s:.0f} s")
                time.sleep(0.2)
        yield True
    finally:
        os.close(fd)  # releases the lock
