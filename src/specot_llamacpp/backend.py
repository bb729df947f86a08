"""The ``llamacpp`` target backend of :mod:`specot.plan.backends`, registered under the entry-point
group ``specot.backends``: ``backend="llamacpp"`` / ``--backend llamacpp`` loads targets with
:func:`specot_llamacpp.load_target`."""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

from specot.plan.backends import Backend

from .auto import auto_choice

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


def installed() -> bool:
    """Whether llama-cpp-python is installed (``make setup-llamacpp``)."""
    return importlib.util.find_spec("llama_cpp") is not None


#: The backend object the entry point ``specot.backends: llamacpp`` names. ``backend="auto"`` picks it
#: for the embedded target on a CPU when the plan is automatic and llama-cpp-python is installed:
#: plain decoding of the Q4_1 GGUF in llama.cpp runs at about twice the tokens/s of specot's best
#: speculative decoding on the transformers backend on a 2-core CPU (docs/llamacpp.md).
BACKEND = Backend("llamacpp", load_for_plan, hidden_states=False, devices=("cpu",), available=installed,
                  auto=auto_choice, auto_default=True)
