"""The ``llamacpp`` target backend of :mod:`specot.plan.backends`, registered under the entry-point
group ``specot.backends``: ``backend="llamacpp"`` / ``--backend llamacpp`` loads targets with
:func:`specot_llamacpp.load_target`; ``backend="auto"`` picks it for a ``.gguf`` file.

:func:`check_source` checks a target before it loads (with :mod:`specot_llamacpp.gguf_header`; neither
llama-cpp-python nor transformers is needed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch

from specot.models.embedded import EMBEDDED_TARGET
from specot.models.packaged import PACKAGED_MODELS, check_packaged, packaged_model
from specot.plan.backends import Backend

from .auto import AUTO_TABLE, CAPABILITIES
from .gguf_header import FILE_TYPES, check_gguf_file, gguf_file_type

__all__ = ["BACKEND", "EXACTNESS", "load_for_plan", "check_source", "weight_type"]

#: The exactness contract on this backend (the report's ``"exactness"``): llama.cpp's kernels for a
#: pass over several tokens round differently from a one-token pass's (docs/llamacpp.md).
EXACTNESS = ("lossless in distribution given the target's logits; greedy = autoregressive up to near-ties "
             "(llama.cpp's multi-token and one-token passes over the quantized weights round differently)")


def load_for_plan(target: Any, *, dtype: str | torch.dtype = "auto", device: str = "cpu") -> Any:
    """``Backend.load``: ``target`` ``None`` / ``"smollm2"`` (the embedded GGUF), a packaged model's
    name (``"qwen2.5-coder-1.5b"``) or a ``.gguf`` path.

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


def weight_type(target: Any) -> str:
    """``Backend.weights``: the weight type of a loaded llama.cpp target from its GGUF metadata, e.g.
    ``"Q4_1"`` (``"GGUF"`` when the file does not say)."""
    path = getattr(target, "path", None)
    try:
        ftype = gguf_file_type(path) if path is not None else None
    except (OSError, ValueError):
        ftype = None
    return FILE_TYPES.get(ftype, f"GGUF file type {ftype}") if ftype is not None else "GGUF"


def check_source(target: str) -> None:
    """``Backend.check``: ``target`` is the embedded model's name, a packaged model whose file or
    parts are there (:func:`specot.models.packaged.check_packaged`), or a ``.gguf`` file with a GGUF
    header.

    Raises:
        ValueError: not a ``.gguf`` path (a directory: the message names the ``.gguf`` files in it), or
            not a GGUF file (:func:`check_gguf_file`).
        FileNotFoundError: no such file; a packaged model's missing part (one line with the install
            command).
    """
    if target == EMBEDDED_TARGET:
        return
    if packaged_model(target) is not None:
        check_packaged(target)
        return
    path = Path(target).expanduser()
    if path.suffix.lower() != ".gguf":
        inside = sorted(f.name for f in path.glob("*.gguf")) if path.is_dir() else []
        hint = (f"; {target!r} holds {', '.join(inside[:3])}{', ...' if len(inside) > 3 else ''}: pass "
                f"{'that file' if len(inside) == 1 else 'one of them'}" if inside else "")
        raise ValueError(f"the llama.cpp backend loads a .gguf file, {EMBEDDED_TARGET!r} or a packaged model "
                         f"({', '.join(sorted(PACKAGED_MODELS))}), got {target!r}{hint}")
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
                  auto=AUTO_TABLE, auto_default=True, files=(".gguf",), check=check_source, exactness=EXACTNESS,
                  weights=weight_type)
