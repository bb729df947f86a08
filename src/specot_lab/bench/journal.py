"""Benchmark journals: every finished cell of a run is one JSON line, written as soon as it is
measured, so an interrupted run keeps what it measured and the same command resumes it.

A journal (``<out>/<benchmark>.jsonl``) holds, one JSON object per line:

* ``{"kind": "header", "benchmark", "schema_version", "config": {...}, "run": {...}}`` — first;
  ``config`` is everything that decides what the cells measure (model, dtype, prompts' digest,
  lengths, temperatures, methods, seed, threads, device); ``run`` is :func:`~.runinfo.run_info`
  (date, commit, machine, versions, load) at the start;
* ``{"kind": "resume", "run": {...}}`` — each later run that went on with it (written with its
  first record: a rerun that finds every cell measured adds nothing);
* any other kind (``"cell"``, ``"cost_curve"``, ...) — the benchmark's own records.

A rerun opens the journal with :meth:`Journal.open`: a different ``config`` is refused (one line
naming the first differing field), the same one resumes and the benchmark skips the cells already
present (:meth:`Journal.records`). A line cut short by a kill mid-write is ignored (its cell runs
again). Lines are flushed and fsync'ed one by one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Journal", "JournalRun", "read_journal", "load_result", "config_difference"]


def _norm(obj: Any) -> Any:
    """``obj`` as JSON would give it back (tuples → lists, int keys → strings)."""
    return json.loads(json.dumps(obj))


def config_difference(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """The first field where two configurations differ, as ``"field: OLD here, NEW now"``; ``None``
    when they are equal (after a JSON round trip)."""
    old, new = _norm(old), _norm(new)
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            a, b = json.dumps(old.get(key)), json.dumps(new.get(key))
            short = lambda s: s if len(s) <= 60 else s[:57] + "..."  # noqa: E731
            return f"{key}: {short(a)} in the journal, {short(b)} now"
    return None


def _text(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of a result or journal file.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a directory, or bytes that are not UTF-8 (one line naming the file)."""
    if Path(path).is_dir():
        raise ValueError(f"{path} is a directory; name a result JSON or a journal file")
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (byte {exc.start}), so not a benchmark result or journal; "
                         "name the JSON or JSONL file the benchmark wrote") from None


def read_journal(path: str | os.PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(header, records)`` of the journal at ``path``; ``records`` are every later line in order
    (``resume`` lines included); a final line cut short is dropped.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file does not start with a journal header, or a line other than the last is
            not JSON.
    """
    lines = _text(path).split("\n")
    objs: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            objs.append(json.loads(line))
        except json.JSONDecodeError:
            if any(rest.strip() for rest in lines[i + 1:]):
                raise ValueError(f"{path}:{i + 1}: not a JSON line; the journal is damaged (delete it or "
                                 f"rerun with --fresh)") from None
            break  # the last line, cut short by a kill mid-write: its cell is measured again
    if not objs or objs[0].get("kind") != "header":
        raise ValueError(f"{path} is not a benchmark journal (no header line); delete it or rerun with --fresh")
    return objs[0], objs[1:]


@dataclass
class Journal:
    """An open journal (:meth:`open`); :meth:`add` appends one record."""

    path: Path
    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    resumed: bool = False
    _pending: dict[str, Any] | None = None

    @classmethod
    def open(cls, path: str | os.PathLike[str], benchmark: str, schema_version: int, config: dict[str, Any],
             run: dict[str, Any], *, fresh: bool = False) -> "Journal":
        """Start a journal at ``path`` (``fresh``, or no file there) or resume the one there.

        Raises:
            ValueError: the journal there is of another benchmark or schema, or was started with
                another ``config`` (the message names the first differing field and the way out).
        """
        path = Path(path)
        if path.exists() and not fresh:
            header, records = read_journal(path)
            if (header.get("benchmark"), header.get("schema_version")) != (benchmark, schema_version):
                raise ValueError(f"{path} is a journal of {header.get('benchmark')!r} (schema "
                                 f"{header.get('schema_version')}), not {benchmark!r} (schema {schema_version}); "
                                 f"use another --out or rerun with --fresh")
            diff = config_difference(header["config"], config)
            if diff is not None:
                raise ValueError(f"{path} holds a run with another configuration ({diff}); rerun the command "
                                 f"that started it to resume, or use another --out, or --fresh to start over")
            data = path.read_bytes()
            if not data.endswith(b"\n"):  # a line cut short by a kill mid-write: drop it before appending
                with open(path, "r+b") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)
            journal = cls(path, header, records, resumed=True)
            journal._pending = {"kind": "resume", "run": run}  # written with the first new record
            return journal
        path.parent.mkdir(parents=True, exist_ok=True)
        header = {"kind": "header", "benchmark": benchmark, "schema_version": schema_version,
                  "config": _norm(config), "run": run}
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(header) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return cls(path, header)

    def add(self, record: dict[str, Any]) -> None:
        """Append ``record`` (a JSON-ready dict with a ``kind``) and flush it to disk; the first record
        a resumed journal gets is preceded by its ``resume`` line."""
        new = ([self._pending] if self._pending is not None else []) + [record]
        self._pending = None
        with open(self.path, "a", encoding="utf-8") as fh:
            for rec in map(_norm, new):
                fh.write(json.dumps(rec) + "\n")
                self.records.append(rec)
            fh.flush()
            os.fsync(fh.fileno())

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        """The records of one ``kind``, in order."""
        return [r for r in self.records if r.get("kind") == kind]

    def runs(self) -> list[dict[str, Any]]:
        """The header's ``run`` and every resume's, in order: one per process that measured cells."""
        return [self.header["run"]] + [r["run"] for r in self.of_kind("resume")]


@dataclass(frozen=True)
class JournalRun:
    """What a journal holds of a run, finished or not: its ``config``, its ``setup`` record (less
    ``kind``), its ``cells`` in order and the ``runs`` (processes) that measured them."""

    config: dict[str, Any]
    setup: dict[str, Any]
    cells: list[dict[str, Any]]
    runs: list[dict[str, Any]]


def load_result(path: str | os.PathLike[str], benchmark: str) -> dict[str, Any] | JournalRun:
    """A ``benchmark`` result at ``path``: the result JSON (``<benchmark>.json``) as a dict, or the
    :class:`JournalRun` of its journal (``<benchmark>.jsonl``); a directory gives the journal when it
    holds one (it is the newer when a run was resumed), else the JSON.

    Raises:
        FileNotFoundError: nothing readable at ``path``.
        ValueError: a file of another benchmark, or a journal without a measured cell.
    """
    p = Path(path)
    if p.is_dir():
        p = p / f"{benchmark}.jsonl" if (p / f"{benchmark}.jsonl").exists() else p / f"{benchmark}.json"
    if p.suffix != ".jsonl":
        try:
            res = json.loads(_text(p))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{p} is not JSON ({exc}); name a {benchmark} result, its journal or its run's "
                             "directory") from None
        if not isinstance(res, dict) or res.get("benchmark") != benchmark:
            raise ValueError(f"{p} is not a {benchmark} result (benchmark "
                             f"{res.get('benchmark') if isinstance(res, dict) else None!r})")
        return res
    header, records = read_journal(p)
    if header.get("benchmark") != benchmark:
        raise ValueError(f"{p} is a journal of {header.get('benchmark')!r}, not of the {benchmark} benchmark")
    setup = [r for r in records if r.get("kind") == "setup"]
    cells = [r for r in records if r.get("kind") == "cell"]
    if not setup or not cells:
        raise ValueError(f"{p}: the run stopped before its first cell was measured; nothing to report")
    runs = [header["run"]] + [r["run"] for r in records if r.get("kind") == "resume"]
    return JournalRun(header["config"], {k: v for k, v in setup[0].items() if k != "kind"}, cells, runs)
