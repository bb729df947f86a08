"""Loading Hugging Face causal LMs from a local directory or a hub id, with one-line errors."""

from __future__ import annotations

import json
import os
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer

from .._validation import check_device
from ._quiet import quiet_loading
from .device import resolve_dtype
from .hf import CausalLM

__all__ = ["load_model", "check_model_source", "damaged_file", "load_error", "LOAD_ERRORS"]

#: What a load of damaged or unreadable files raises: transformers' ``OSError`` / ``ValueError``,
#: safetensors' ``SafetensorError`` (not an ``OSError``), torch's ``RuntimeError`` / ``EOFError`` /
#: ``UnpicklingError`` for a broken ``pytorch_model.bin``.
LOAD_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, RuntimeError, EOFError, SafetensorError,
                                                pickle.UnpicklingError)

_REPAIR = "copy the model directory again or re-save it with save_pretrained"


def load_model(name_or_path: str | os.PathLike[str], *, dtype: str | torch.dtype = "auto", device: str = "cpu",
               gguf_file: str | None = None, label: str | None = None, repair: str = _REPAIR) -> CausalLM:
    """Load a Hugging Face causal LM and its tokenizer from a local directory or a hub name.

    Args:
        name_or_path: local directory (``config.json`` + weights, or a GGUF file with
            ``gguf_file``) or a hub model id (downloaded by transformers unless ``HF_HUB_OFFLINE=1``).
        dtype: see :func:`resolve_dtype`.
        device: ``"cpu"``, ``"cuda"``, ...
        gguf_file: name of a GGUF file inside ``name_or_path``.
        label: the model's name in messages (default: the directory's name).
        repair: the fix that a message about a damaged local file ends with.

    Raises:
        FileNotFoundError: a local path that does not exist, or a directory without ``config.json``
            (e.g. an empty one) or without tokenizer files.
        ValueError: a broken ``config.json``, an unknown dtype or an unusable device (checked
            before anything is loaded).
        OSError: transformers, safetensors or torch could not load it: a damaged local file (the
            message names it, e.g. a truncated ``model.safetensors``), or a hub id while offline and
            not cached; the message names the model and the fix, in one line.
    """
    path = str(name_or_path)
    torch_dtype = resolve_dtype(dtype, device)
    check_model_source(path, gguf_file=gguf_file)
    check_device(device)
    kw: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(path, **kw)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kw).to(device)
    except LOAD_ERRORS as exc:
        raise load_error(path, exc, repair) from exc
    return CausalLM(model=model, tokenizer=tokenizer, name=label or Path(path).name or path)


def load_error(path: str, exc: BaseException, repair: str = _REPAIR) -> OSError:
    """The one-line ``OSError`` for a failed load of ``path`` (raised as ``exc``, one of
    :data:`LOAD_ERRORS`): the damaged file of a local directory when :func:`damaged_file` finds
    one, followed by ``repair``; else the loader's error type and first line; for a hub id, why it
    was not fetched."""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    if Path(path).expanduser().is_dir():
        damage = damaged_file(Path(path).expanduser())
        if damage is not None:
            return OSError(f"cannot load the model in {path!r}: {damage}; {repair}")
        return OSError(f"cannot load the model in {path!r}: {type(exc).__name__}: {first}")
    if not isinstance(exc, (OSError, ValueError)):  # not a download failure (e.g. out of memory)
        return OSError(f"cannot load model {path!r}: {type(exc).__name__}: {first}")
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or \
        os.environ.get("TRANSFORMERS_OFFLINE", "") not in ("", "0")
    why = ("the hub is off (HF_HUB_OFFLINE=1) and it is not in the local cache" if offline
           else f"it could not be fetched from the Hugging Face hub ({first})")
    return OSError(f"cannot load model {path!r}: it is not a local directory and {why}; pass a local model "
                   "directory (config.json, weights, tokenizer files), or 'smollm2' for the embedded model")


def damaged_file(directory: str | os.PathLike[str]) -> str | None:
    """The first damaged file of a saved model directory, as ``"<name> is damaged (<why>)"``, or
    ``None`` when none is found. Cheap: reads each ``*.safetensors`` file's header (the 8-byte
    length, the JSON table, the data size it promises against the file's size), parses the JSON
    files (config, tokenizer, shard index) and checks that every shard an index names exists; a
    ``pytorch_model*.bin`` is checked for being torch's zip archive (whose directory sits at its
    end, so a truncated one fails) or a legacy pickle."""
    d = Path(directory)
    for f in sorted(d.glob("*.json")):
        try:
            json.loads(f.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            why = next(iter(str(exc).splitlines()), "") or type(exc).__name__
            return f"{f.name} is damaged (not valid JSON: {why})"
        except OSError as exc:
            return f"{f.name} is unreadable ({exc.strerror or exc})"
    for index in sorted(d.glob("*.index.json")):
        weight_map = json.loads(index.read_text(encoding="utf-8"))
        weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
        shards = {s for s in weight_map.values() if isinstance(s, str)} if isinstance(weight_map, dict) else set()
        missing = sorted(s for s in shards if not (d / s).is_file())
        if missing:
            return f"{missing[0]} is missing (named by {index.name})"
    for f in sorted(d.glob("*.safetensors")):
        why = _safetensors_damage(f)
        if why is not None:
            return f"{f.name} is damaged ({why})"
    for f in sorted(d.glob("pytorch_model*.bin")):
        with open(f, "rb") as fh:
            first = fh.read(1)
        if not first:
            return f"{f.name} is damaged (empty)"
        if first != b"\x80" and not zipfile.is_zipfile(f):  # neither torch's zip archive nor a legacy pickle
            return f"{f.name} is damaged (not a complete torch archive)"
    return None


def _safetensors_damage(path: Path) -> str | None:
    """Why the ``.safetensors`` file at ``path`` cannot be whole (format: an 8-byte little-endian
    header length, a JSON header of ``data_offsets``, then the data), or ``None``."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"truncated: {size} bytes, too short for a header"
            n = struct.unpack("<Q", head)[0]
            if n > size - 8:
                return f"truncated: {size} bytes, the header alone needs {n + 8}"
            table = json.loads(f.read(n))
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"
    except (ValueError, UnicodeDecodeError):
        return "its header is not valid JSON"
    if not isinstance(table, dict):
        return "its header is not a JSON object"
    ends = [v["data_offsets"][1] for k, v in table.items()
            if k != "__metadata__" and isinstance(v, dict) and len(v.get("data_offsets", ())) == 2]
    need = 8 + n + max(ends, default=0)
    if size < need:
        return f"truncated: {size} of {need} bytes"
    if size > need:
        return f"{size - need} bytes more than its header describes"
    return None


_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def check_model_source(name_or_path: str | os.PathLike[str], *, gguf_file: str | None = None,
                       need_tokenizer: bool = True) -> None:
    """Check a model directory before loading it (cheap: no weights are read).

    A name that does not look like a local path is taken as a hub id and not checked here.

    Raises:
        FileNotFoundError: a local path that does not exist, a directory without ``config.json``
            (or without the named GGUF file), or without tokenizer files.
        ValueError: a ``config.json`` that is not a JSON object.
    """
    path = str(name_or_path)
    p = Path(path).expanduser()
    looks_local = path.startswith((".", "/", "~")) or os.sep in path or p.exists()
    if not looks_local:
        return
    if not p.exists():
        raise FileNotFoundError(f"model path {path!r} does not exist")
    if not p.is_dir():
        raise FileNotFoundError(f"model path {path!r} is a file; pass the model's directory (config.json, weights, "
                                "tokenizer files)")
    if gguf_file:
        if not (p / gguf_file).is_file():
            raise FileNotFoundError(f"no GGUF file {gguf_file!r} in {path!r}")
        return
    cfg = p / "config.json"
    if not cfg.is_file():
        listing = "it is empty" if not any(p.iterdir()) else "it holds no config.json"
        raise FileNotFoundError(f"{path!r} is not a Hugging Face model directory: {listing}; pass a directory "
                                "saved with save_pretrained (config.json, model weights, tokenizer files)")
    try:
        obj = json.loads(cfg.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{str(cfg)!r} is not valid JSON ({exc}); fix the file or re-save the model with "
                         "save_pretrained") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{str(cfg)!r} must hold a JSON object, got {type(obj).__name__}")
    if need_tokenizer and not any((p / f).is_file() for f in _TOKENIZER_FILES):
        raise FileNotFoundError(f"no tokenizer files in {path!r} (tokenizer.json or tokenizer_config.json); save the "
                                "tokenizer next to the model (tokenizer.save_pretrained)")
