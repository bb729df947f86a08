"""The ``llamacpp`` target backend of :mod:`specot.plan.backends`, registered under the entry-point
group ``specot.backends``: ``backend="llamacpp"`` / ``--backend llamacpp`` loads targets with
:func:`specot_llamacpp.load_target`; ``backend="auto"`` picks it for a ``.gguf`` file.

:func:`check_source` and :func:`check_gguf_file` check a target before it loads (they need neither
llama-cpp-python nor transformers)."""

from __future__ import annotations

import importlib.util
import os
import struct
from pathlib import Path
from typing import Any

import torch

from specot.models.embedded import EMBEDDED_TARGET
from specot.plan.backends import Backend

from .auto import CAPABILITIES, auto_choice

__all__ = ["BACKEND", "EXACTNESS", "load_for_plan", "check_source", "check_gguf_file", "invalid_gguf",
           "gguf_file_type", "weight_type"]

#: The exactness contract on this backend (the report's ``"exactness"``): llama.cpp's kernels for a
#: pass over several tokens round differently from a one-token pass's (docs/llamacpp.md).
EXACTNESS = ("lossless in distribution given the target's logits; greedy = autoregressive up to near-ties "
             "(llama.cpp's multi-token and one-token passes over the quantized weights round differently)")

#: The GGUF header: magic, version (uint32), tensor count and metadata count (uint64 each).
_HEADER = struct.Struct("<4sIQQ")
#: GGUF metadata value types: the struct format of each fixed-size one (8: string, 9: array).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
#: llama.cpp's ``general.file_type`` values (``LLAMA_FTYPE_*``) as their usual names.
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
               18: "Q6_K", 32: "BF16"}


def load_for_plan(target: Any, *, dtype: str | torch.dtype = "auto", device: str = "cpu") -> Any:
    """``Backend.load``: ``target`` ``None`` / ``"smollm2"`` (the embedded GGUF) or a ``.gguf`` path.

    Returns:
        a :class:`~specot_llamacpp.LlamaCppTarget`.

    Raises:
        ValueError: a device other than the CPU, or a dtype other than ``"auto"`` (llama.cpp runs
            the GGUF's own quantization; there is nothing to cast), or a target that is not a GGUF.
        ImportError: llama-cpp-python is not installed (the message says how to install it).
    """
    from .loading import load_target  # llama-cpp-python is imported only when a target is asked for

    if str(device) != "cpu":
        raise ValueError(f"the llama.cpp backend runs on the CPU; got device {device!r} (use --device cpu, or "
                         "--backend transformers on CUDA)")
    if not (isinstance(dtype, str) and dtype == "auto"):
        raise ValueError(f"the llama.cpp backend runs the GGUF's own weights (Q4_1 for the embedded model); dtype "
                         f"must be 'auto', got {dtype!r}")
    return load_target(target)


def invalid_gguf(path: str | os.PathLike[str], why: str) -> ValueError:
    """The one-line error for a file that is not a readable GGUF file."""
    return ValueError(f"{str(path)!r} is not a valid GGUF file (truncated?): {why}; download or convert it again")


def check_gguf_file(path: str | os.PathLike[str]) -> None:
    """Check that ``path`` starts with a whole GGUF header (magic ``GGUF``, version 1-3), without
    reading the rest: a damaged file is named before transformers or llama.cpp reads it.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a file too short for the header, or not a GGUF file.
    """
    p = Path(path).expanduser()
    try:
        with open(p, "rb") as f:
            head = f.read(_HEADER.size)
    except FileNotFoundError:
        raise FileNotFoundError(f"no GGUF file at {str(path)!r}") from None
    except OSError as exc:
        raise ValueError(f"{str(path)!r} cannot be read ({(exc.strerror or type(exc).__name__).lower()}); make "
                         "it readable") from None
    if len(head) < _HEADER.size:
        raise invalid_gguf(path, f"{len(head)} bytes, shorter than the {_HEADER.size}-byte header")
    magic, version, _, _ = _HEADER.unpack(head)
    if magic != b"GGUF":
        raise ValueError(f"{str(path)!r} is not a GGUF file (it does not start with the bytes 'GGUF'); the llama.cpp "
                         "backend loads GGUF models")
    if not 1 <= version <= 3:
        raise invalid_gguf(path, f"unknown GGUF version {version}")


def gguf_file_type(path: str | os.PathLike[str]) -> int | None:
    """The ``general.file_type`` of a GGUF file's metadata (llama.cpp's ``LLAMA_FTYPE_*``: 3 is
    Q4_1), or ``None`` where the metadata has none, reading the metadata up to that key.

    Raises:
        ValueError: a file whose metadata ends early (:func:`invalid_gguf`) or that is not GGUF.
        FileNotFoundError: no such file.
    """
    check_gguf_file(path)
    with open(Path(path).expanduser(), "rb") as f:
        _, version, _, n_kv = _HEADER.unpack(f.read(_HEADER.size))

        def read(fmt: str) -> Any:
            size = struct.calcsize("<" + fmt)
            data = f.read(size)
            if len(data) < size:
                raise invalid_gguf(path, "the metadata ends early")
            return struct.unpack("<" + fmt, data)[0]

        def skip(kind: int) -> None:
            if kind in _SCALARS:
                read(_SCALARS[kind])
            elif kind == 8:
                f.seek(read("Q"), os.SEEK_CUR)
            elif kind == 9:
                inner, count = read("I"), read("Q")
                if inner in _SCALARS:
                    f.seek(count * struct.calcsize("<" + _SCALARS[inner]), os.SEEK_CUR)
                else:
                    for _ in range(count):
                        skip(inner)
            else:
                raise invalid_gguf(path, f"unknown metadata type {kind}")

        for _ in range(n_kv):
            key = f.read(read("Q"))
            kind = read("I")
            if key == b"general.file_type" and kind in _SCALARS:
                return int(read(_SCALARS[kind]))
            skip(kind)
    return None


def weight_type(target: Any) -> str:
    """``Backend.weights``: the weight type of a loaded llama.cpp target from its GGUF metadata, e.g.
    ``"Q4_1"`` (``"GGUF"`` when the file does not say)."""
    path = getattr(target, "path", None)
    try:
        ftype = gguf_file_type(path) if path is not None else None
    except (OSError, ValueError):
        ftype = None
    return _FILE_TYPES.get(ftype, f"GGUF file type {ftype}") if ftype is not None else "GGUF"


def check_source(target: str) -> None:
    """``Backend.check``: ``target`` is the embedded model's name or a ``.gguf`` file with a GGUF header.

    Raises:
        ValueError: not a ``.gguf`` path (a directory: the message names the ``.gguf`` files in it), or
            not a GGUF file (:func:`check_gguf_file`).
        FileNotFoundError: no such file.
    """
    if target == EMBEDDED_TARGET:
        return
    path = Path(target).expanduser()
    if path.suffix.lower() != ".gguf":
        inside = sorted(f.name for f in path.glob("*.gguf")) if path.is_dir() else []
        hint = (f"; {target!r} holds {', '.join(inside[:3])}{', ...' if len(inside) > 3 else ''}: pass "
                f"{'that file' if len(inside) == 1 else 'one of them'}" if inside else "")
        raise ValueError(f"the llama.cpp backend loads a .gguf file or {EMBEDDED_TARGET!r}, got {target!r}{hint}")
    check_gguf_file(path)


def installed() -> bool:
    """Whether llama-cpp-python is installed (``make setup-llamacpp``)."""
    return importlib.util.find_spec("llama_cpp") is not None


#: The backend object the entry point ``specot.backends: llamacpp`` names. ``backend="auto"`` picks it
#: for the embedded target on a CPU when the plan is automatic and llama-cpp-python is installed:
#: plain decoding of the Q4_1 GGUF in llama.cpp runs at about twice the tokens/s of specot's best
#: speculative decoding on the transformers backend on a 2-core CPU (docs/llamacpp.md); and for any
#: ``.gguf`` file.
BACKEND = Backend("llamacpp", load_for_plan, capabilities=CAPABILITIES, devices=("cpu",), available=installed,
                  auto=auto_choice, auto_default=True, files=(".gguf",), check=check_source, exactness=EXACTNESS,
                  weights=weight_type)
