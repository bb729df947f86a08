"""Loading Hugging Face causal LMs from a local directory or a hub id, with one-line errors."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from .._validation import check_device
from ._quiet import quiet_loading
from .device import resolve_dtype
from .hf import CausalLM

__all__ = ["load_model", "check_model_source"]


def load_model(name_or_path: str | os.PathLike[str], *, dtype: str | torch.dtype = "auto", device: str = "cpu",
               gguf_file: str | None = None, label: str | None = None) -> CausalLM:
    """Load a Hugging Face causal LM and its tokenizer from a local directory or a hub name.

    Args:
        name_or_path: local directory (``config.json`` + weights, or a GGUF file with
            ``gguf_file``) or a hub model id (downloaded by transformers unless ``HF_HUB_OFFLINE=1``).
        dtype: see :func:`resolve_dtype`.
        device: ``"cpu"``, ``"cuda"``, ...
        gguf_file: name of a GGUF file inside ``name_or_path``.

    Raises:
        FileNotFoundError: a local path that does not exist, or a directory without ``config.json``
            (e.g. an empty one) or without tokenizer files.
        ValueError: a broken ``config.json``, an unknown dtype or an unusable device (checked
            before anything is loaded).
        OSError: transformers could not load it (e.g. a hub id while offline and not cached); the
            message names the model and the fix, in one line.
    """
    path = str(name_or_path)
    torch_dtype = resolve_dtype(dtype, device)
    check_model_source(path, gguf_file=gguf_file)
    check_device(device)
    kw: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    local = Path(path).expanduser().is_dir()
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(path, **kw)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kw).to(device)
    except (OSError, ValueError) as exc:
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        if local:
            raise OSError(f"cannot load the model in {path!r}: {first}") from exc
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0") or \
            os.environ.get("TRANSFORMERS_OFFLINE", "") not in ("", "0")
        why = ("the hub is off (HF_HUB_OFFLINE=1) and it is not in the local cache" if offline
               else f"it could not be fetched from the Hugging Face hub ({first})")
        raise OSError(f"cannot load model {path!r}: it is not a local directory and {why}; pass a local model "
                      "directory (config.json, weights, tokenizer files), or 'smollm2' for the embedded "
                      "model") from exc
    return CausalLM(model=model, tokenizer=tokenizer, name=label or Path(path).name or path)


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
