"""The ``llamacpp`` target backend of :mod:`specot.plan.backends`, registered under the entry-point
group ``specot.backends``: ``backend="llamacpp"`` / ``--backend llamacpp`` loads targets with
:func:`specot_llamacpp.load_target`."""

from __future__ import annotations

from typing import Any

import torch

from specot.plan.backends import Backend

__all__ = ["BACKEND", "load_for_plan"]


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


#: The backend object the entry point ``specot.backends: llamacpp`` names.
BACKEND = Backend("llamacpp", load_for_plan, hidden_states=False, devices=("cpu",))
