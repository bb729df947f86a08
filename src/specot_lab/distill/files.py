"""The distillation's own files (data shards, training checkpoints): written atomically, read
without running code.

``torch.load`` unpickles: with ``weights_only=False`` a file can name any function and have it
called while it loads (a pickle whose ``__reduce__`` returns ``os.system``), so a shard or a
checkpoint from someone else would run their code. :func:`load_torch_file` reads with
``weights_only=True``: tensors, numbers, strings, ``None`` and lists, tuples and dicts of them, which
is all specot writes into these files (model and optimizer state dicts, token ids, top-k labels,
the RNG state); anything else is refused with one line naming the file, and nothing in it runs.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any, Sequence

import torch

from specot.outputs import atomic_path

__all__ = ["load_torch_file", "save_torch_file"]


def _why(exc: BaseException) -> str:
    """The informative line of ``torch.load``'s error (the weights-only unpickler's own reason)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    reasons = [ln.split("WeightsUnpickler error:", 1)[-1].strip() for ln in lines
               if not ln.startswith(("Weights only load failed", "Check the documentation", "Please file an issue"))]
    return (reasons or lines or [type(exc).__name__])[0][:200]


def load_torch_file(path: str | os.PathLike[str], what: str, keys: Sequence[str] = ()) -> dict[str, Any]:
    """The dict stored in ``path`` by :func:`save_torch_file` (or ``torch.save``), loaded with
    ``weights_only=True`` onto the CPU: nothing in the file is run (module docstring).

    Args:
        path: the file.
        what: what it is, for the message (``"data shard"``, ``"training checkpoint"``).
        keys: the entries it must hold.

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: one line naming the file: it holds anything but tensors and plain containers
            (a pickled object or function: refused unrun), is damaged or truncated, is not a dict,
            or lacks one of ``keys``.
    """
    p = Path(path)
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except (FileNotFoundError, IsADirectoryError):
        raise
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, OSError, AttributeError, TypeError,
            KeyError, IndexError, UnicodeDecodeError) as exc:
        raise ValueError(f"{what} {str(p)!r} was not loaded: it holds more than tensors, numbers, strings, lists and "
                         f"dicts, or is damaged ({_why(exc)}); specot runs no code from a file: write it again "
                         "with specot distill") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{what} {str(p)!r} holds a {type(obj).__name__}, not the dict specot distill writes; "
                         "write it again with specot distill")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise ValueError(f"{what} {str(p)!r} has no {', '.join(map(repr, missing))} entry; write it again with "
                         "specot distill")
    return obj


def save_torch_file(obj: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """``torch.save`` ``obj`` to ``path`` atomically: a temporary file of a unique name in the same
    directory, then ``os.replace`` (a killed run leaves the previous file whole).

    Raises:
        OSError: the directory cannot be written.
    """
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)
