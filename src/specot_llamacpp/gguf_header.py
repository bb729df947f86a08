"""The GGUF file header and metadata, read without llama-cpp-python or transformers: the checks a
target gets before it loads (:func:`check_gguf_file`) and the weight type a report names
(:func:`gguf_file_type`, :data:`FILE_TYPES`). GGUF: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

__all__ = ["check_gguf_file", "invalid_gguf", "gguf_file_type", "FILE_TYPES"]

#: The GGUF header: magic, version (uint32), tensor count and metadata count (uint64 each).
_HEADER = struct.Struct("<4sIQQ")
#: GGUF metadata value types: the struct format of each fixed-size one (8: string, 9: array).
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
#: llama.cpp's ``general.file_type`` values (``LLAMA_FTYPE_*``) as their usual names.
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
              11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M",
              18: "Q6_K", 32: "BF16"}


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
