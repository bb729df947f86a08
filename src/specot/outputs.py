"""The one rule for the files a command writes (``--out``, ``--plot``, ``--json FILE``).

* **Never replace a file the command did not create** unless asked (``--force``):
  :func:`check_output` refuses an existing file in one line naming it and ``--force``, and is called
  before any model loads or any work starts. A file this process wrote already (an audit's partial
  results, rewritten after every row) and a file an earlier run of the same command wrote
  (recognised by the caller's ``ours`` test: its JSON schema or its marker) may be written again,
  so that a benchmark resumes or regenerates its own results.
* **Unique temporary names, atomic replace**: :func:`atomic_path` writes into a temporary file of
  a unique name in the target's directory (:func:`tempfile.mkstemp`, never a fixed ``report.tmp``
  that could be a user's file) and renames it over the target with :func:`os.replace`; on any
  failure the temporary file is removed and the target is left as it was: never a partial file.
* **Strict JSON**: :func:`dumps` writes standard JSON (``allow_nan=False``): a non-finite number
  becomes ``null`` with the reason beside it, ``"<key>_note": "not a finite number (inf)"`` (a
  list's non-finite entries are ``null``, the note on the list's key naming their positions), so
  that every strict JSON reader takes the file and nothing is silently lost.

Imports nothing of specot: the core's CLI and the lab use it alike.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

__all__ = ["check_output", "atomic_path", "write_text", "write_json", "dumps", "strict", "json_has"]

#: The paths this process has written (absolute): written again without ``--force``.
_WRITTEN: set[str] = set()


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.abspath(os.fspath(path))


def json_has(**fields: Any) -> Callable[[Path], bool]:
    """An ``ours`` test for :func:`check_output`: the file is a JSON object holding each of
    ``fields`` with that value (a benchmark's ``{"benchmark": "paths"}``); ``...`` as a value only
    asks for the key."""
    def test(path: Path) -> bool:
        try:
            with open(path, encoding="utf-8") as fh:
                obj = json.loads(fh.read(64 << 20))
        except (OSError, ValueError):
            return False
        return isinstance(obj, dict) and all(k in obj and (v is ... or obj[k] == v) for k, v in fields.items())
    return test


def check_output(path: str | os.PathLike[str] | None, flag: str, *, force: bool = False,
                 ours: Callable[[Path], bool] | None = None) -> None:
    """Refuse ``path`` as an output file before any work starts (module docstring).

    Args:
        path: the file the command will write; ``None``: nothing to check.
        flag: the option that names it (``"--out"``), for the message.
        force: replace an existing file (the command's ``--force``).
        ours: whether an existing file is one this command wrote (then it may be replaced).

    Raises:
        ValueError: ``path`` is a directory, its directory cannot be written or made, or
            it is an existing file the command did not write and ``force`` is off (one line naming
            the file and the fix).
    """
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise ValueError(f"{flag} {str(p)!r} is a directory; name a file")
    parent = Path(os.path.abspath(p)).parent
    while not parent.exists() and parent != parent.parent:  # a missing directory is made where it would be
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"{flag} {str(p)!r}: {str(parent)!r} is not a directory; name a file in a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{flag} {str(p)!r}: its directory {str(parent)!r} is not writable; name a file in a "
                         "directory you can write")
    if (p.exists() or p.is_symlink()) and not force and _key(p) not in _WRITTEN and not (ours and ours(p)):
        raise ValueError(f"{flag} {str(p)!r} exists and this command did not write it; pass --force to replace "
                         "it, or name another file")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary file of a unique name beside ``path`` to write; renamed over ``path`` when the
    block ends without an error, removed when it raises (``path`` is then as it was); missing
    directories above ``path`` are made. The
    temporary name ends in ``path``'s suffix, so that writers that read the format from the name
    (``matplotlib.savefig``) write the right one.

    Raises:
        OSError: the directory cannot be written.
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp" + p.suffix, dir=p.parent if str(p.parent) else ".")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _WRITTEN.add(_key(p))


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically (:func:`atomic_path`); returns the path."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | os.PathLike[str], obj: Any, *, indent: int | None = 2) -> Path:
    """Write ``obj`` as strict JSON (:func:`dumps`) and a final newline to ``path`` atomically."""
    return write_text(path, dumps(obj, indent=indent) + "\n")


def _finite_or_none(v: Any) -> tuple[Any, str | None]:
    if isinstance(v, float) and not math.isfinite(v):
        return None, f"not a finite number ({v})"
    return v, None


def strict(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by ``None`` and the reason beside it: a dict's
    ``"k": inf`` becomes ``"k": null, "k_note": "not a finite number (inf)"``; non-finite entries
    of a list under key ``k`` become ``null`` and ``"k_note"`` names their positions. Tuples
    become lists; other values are returned as they are (numpy scalars are converted by
    :func:`dumps`' ``default``)."""
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for k, v in obj.items():
            v = _plain(v)
            if isinstance(v, float):
                v, note = _finite_or_none(v)
            elif isinstance(v, (list, tuple)):
                items = [_plain(x) for x in v]
                bad = [i for i, x in enumerate(items) if isinstance(x, float) and not math.isfinite(x)]
                note = (f"not finite numbers at positions {bad} ({', '.join(str(items[i]) for i in bad)})"
                        if bad else None)
                v = [None if i in bad else strict(x) for i, x in enumerate(items)]
            else:
                v, note = strict(v), None
            out[k] = v
            if note is not None and isinstance(k, str):
                out[f"{k}_note"] = note
        return out
    if isinstance(obj, (list, tuple)):
        return [strict(x) for x in obj]
    obj = _plain(obj)
    return _finite_or_none(obj)[0] if isinstance(obj, float) else obj


def _plain(v: Any) -> Any:
    """A numpy or torch scalar as the Python number it holds; anything else as it is."""
    if type(v).__module__ in ("numpy", "torch") and hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
        with contextlib.suppress(Exception):
            return v.item()
    return v


def _default(v: Any) -> Any:
    plain = _plain(v)
    if plain is not v:
        return strict(plain)
    if isinstance(v, (Path, os.PathLike)):
        return os.fspath(v)
    if isinstance(v, (set, frozenset)):
        return sorted(v, key=str)
    raise TypeError(f"{type(v).__name__} is not JSON serializable")


def dumps(obj: Any, **kwargs: Any) -> str:
    """``obj`` as strict JSON (module docstring): :func:`strict`, then :func:`json.dumps` with
    ``allow_nan=False`` (numpy and torch scalars as numbers, paths as text; a ``default`` in
    ``kwargs`` replaces that conversion).

    Raises:
        TypeError: a value JSON has no type for."""
    kwargs.setdefault("default", _default)
    return json.dumps(strict(obj), allow_nan=False, **kwargs)
