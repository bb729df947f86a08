"""Target backends by name: ``transformers`` (the reference backend, built in) and any backend another
package registers under the entry-point group ``specot.backends`` (e.g. ``llamacpp`` from
``specot[llamacpp]``). A backend is one loader, ``load(target, *, dtype, device) -> TargetModel``
(:class:`~specot.models.protocol.TargetModel`); the one decoding loop runs on any of them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

import torch

from ..models.embedded import EMBEDDED_TARGET, is_embedded_target, load_embedded_target
from ..models.loading import check_model_source, load_model
from ..models.packaged import check_packaged, packaged_gguf, packaged_model
from ..models.protocol import Capabilities, TargetModel, capabilities_of

__all__ = ["BACKEND_ENTRY_POINTS", "EMBEDDED_VOCAB_AND_CONTEXT", "Backend", "capabilities_for", "available_backends", "get_backend", "check_target_source",
           "peek_vocab_and_context", "is_embedded", "choose_backend", "backend_of"]

#: Entry-point group through which another package adds a target backend (a :class:`Backend`).
BACKEND_ENTRY_POINTS = "specot.backends"
#: The embedded target's vocabulary size and context length (SmolLM2-135M-Instruct), as its GGUF
#: file declares them (``llama.vocab_size``, ``llama.context_length``): the plan's checks read them
#: from here because parsing the file's metadata takes seconds; a test reads the file and compares.
EMBEDDED_VOCAB_AND_CONTEXT = (49152, 8192)


@dataclass(frozen=True)
class Backend:
    """A target backend.

    Attributes:
        name: what ``backend=`` / ``--backend`` names it by.
        load: ``load(target, *, dtype, device) -> TargetModel``; ``target`` is ``None`` /
            ``"smollm2"`` for the embedded model, a packaged model's name
            (:data:`specot.models.packaged.PACKAGED_MODELS`), or a path / hub id.
        capabilities: what its targets can do (:class:`~specot.models.protocol.Capabilities`),
            known before any load; a loaded target's own ``capabilities`` may say more
            (:func:`capabilities_for`).
        devices: the device types it runs on.
        available: whether it can load a target here (its library is installed).
        auto: the backend's own ``draft="auto"`` table (a :class:`specot.plan.auto.AutoTable`: what
            measured fastest on it, per temperature), or ``None`` for the core's rule; the rule
            that reads it is :func:`specot.plan.auto.auto_choice`.
        auto_default: ``backend="auto"`` picks it for the embedded target on a CPU when the whole
            plan is automatic (``draft="auto"``, ``dtype="auto"``, no tree or verifier options), as
            measured fastest there.
        files: the suffixes of the model files it loads (``(".gguf",)`` for llama.cpp):
            ``backend="auto"`` picks it for a target named by such a file.
        check: ``check(target)``, its check of a target name or path before loading (raising
            ``ValueError`` / ``FileNotFoundError`` in one line), or ``None`` for transformers' (a
            model directory or hub id).
        exactness: its exactness contract in one line (the report's ``"exactness"``), or ``""``
            for the core's (:data:`specot.report.EXACTNESS`).
        weights: ``weights(target) -> str``, the weight type of a loaded target as the report gives
            it (e.g. ``"Q4_1"`` for a quantized GGUF), or ``None`` for its torch dtype.
    """

    name: str
    load: Callable[..., TargetModel]
    capabilities: Capabilities = Capabilities()
    devices: tuple[str, ...] = ("cpu",)
    available: Callable[[], bool] = field(default=lambda: True, compare=False)
    auto: Any = field(default=None, compare=False)  # an AutoTable (specot.plan.auto), or None
    auto_default: bool = False
    files: tuple[str, ...] = ()
    check: Callable[[str], None] | None = field(default=None, compare=False)
    exactness: str = ""
    weights: Callable[[Any], str] | None = field(default=None, compare=False)

    @property
    def hidden_states(self) -> bool:
        """Whether its targets expose hidden states (EAGLE heads need them)."""
        return self.capabilities.hidden_states


def _load_transformers(target: Any, *, dtype: str | torch.dtype = "auto", device: str = "cpu") -> TargetModel:
    if target is None or target == EMBEDDED_TARGET:
        return load_embedded_target(dtype=dtype, device=device)
    packaged = packaged_model(target)
    if packaged is not None:  # its GGUF, de-quantized by transformers
        path = packaged_gguf(packaged)
        return load_model(path.parent, gguf_file=path.name, dtype=dtype, device=device, label=packaged.label)
    return load_model(target, dtype=dtype, device=device)


#: The transformers backend's capabilities before a load (a loaded :class:`~specot.models.CausalLM`
#: adds its layers, its padded pass widths and whether its architecture captures CUDA graphs).
TRANSFORMERS_CAPABILITIES = Capabilities(hidden_states=True, static_cache=True,
                                         dtypes=(torch.float32, torch.bfloat16, torch.float16))
TRANSFORMERS = Backend("transformers", _load_transformers, capabilities=TRANSFORMERS_CAPABILITIES,
                       devices=("cpu", "cuda"))


def _entry_point_backends() -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=BACKEND_ENTRY_POINTS)}


def available_backends() -> list[str]:
    """The backend names: ``transformers`` and every installed entry point of ``specot.backends``."""
    return sorted({TRANSFORMERS.name, *_entry_point_backends()})


def get_backend(name: str) -> Backend:
    """The backend ``name``.

    Raises:
        ValueError: no such backend is installed (the message names the installed ones and the
            extra that brings the missing one).
        ImportError: its package is installed but cannot be imported.
    """
    if name == TRANSFORMERS.name:
        return TRANSFORMERS
    eps = _entry_point_backends()
    if not isinstance(name, str) or name not in eps:
        raise ValueError(f"unknown backend {name!r}; installed: {', '.join(available_backends())} "
                         f"(others come as extras, e.g. pip install 'specot[llamacpp]')")
    backend = eps[name].load()
    if not isinstance(backend, Backend):
        raise TypeError(f"entry point {name!r} of {BACKEND_ENTRY_POINTS} must be a specot.plan.Backend, "
                        f"got {type(backend).__name__}")
    return backend


def check_target_source(target: Any, backend: str | None = None) -> Any:
    """Type and path checks of a ``target`` before loading it: ``None`` / ``"smollm2"``, a loaded
    target (any :class:`TargetModel`), a packaged model's name (its file or parts are there:
    :func:`specot.models.packaged.check_packaged`), or a name or path (returned as ``str``),
    checked by ``backend``'s own check (:attr:`Backend.check`; llama.cpp: a ``.gguf`` file) or else
    as a model directory / hub id (transformers).

    Raises:
        TypeError: another type.
        FileNotFoundError / ValueError: a local path that the backend cannot load (one line: the
            path and the fix); a packaged model's missing part (one line: the install command).
    """
    if target is None or isinstance(target, TargetModel):
        return target
    if isinstance(target, Path):
        target = str(target)
    if not isinstance(target, str):
        raise TypeError(f"target must be None, 'smollm2', a model directory / hub id or a CausalLM, "
                        f"got {type(target).__name__}")
    if target == EMBEDDED_TARGET:
        return target
    if packaged_model(target) is not None:
        check_packaged(target)
        return target
    chosen = get_backend(backend) if backend is not None else TRANSFORMERS
    if chosen.check is not None:
        chosen.check(target)
        return target
    owner = _file_backend(target)
    if owner is not None and Path(target).expanduser().is_file():
        raise ValueError(f"target {target!r} is a {Path(target).suffix} file, which the {owner} backend loads; pass "
                         f"--backend {owner} (backend={owner!r}) or 'auto', or a model directory for {chosen.name}")
    check_model_source(target)
    return target


def _file_backend(target: str) -> str | None:
    """The installed backend (other than transformers) that loads files named like ``target``
    (:attr:`Backend.files`), or ``None``."""
    suffix = Path(target).suffix.lower()
    if not suffix:
        return None
    for name in available_backends():
        if name != TRANSFORMERS.name and suffix in get_backend(name).files:
            return name
    return None


def peek_vocab_and_context(target: Any) -> tuple[int | None, int | None]:
    """(vocabulary size, context length) of the target without loading it, where known: a loaded
    target's own, the embedded target's declared ones (:data:`EMBEDDED_VOCAB_AND_CONTEXT`), a
    packaged model's (:class:`~specot.models.packaged.PackagedModel`), a model directory's
    ``config.json`` (``vocab_size``, ``max_position_embeddings``); else ``None``."""
    if isinstance(target, TargetModel):
        return target.vocab_size, target.max_context
    if target is None or target == EMBEDDED_TARGET:
        return EMBEDDED_VOCAB_AND_CONTEXT
    packaged = packaged_model(target)
    if packaged is not None:
        return packaged.vocab_size, packaged.context
    cfg = Path(str(target)).expanduser() / "config.json"
    if cfg.is_file():
        try:
            obj = json.loads(cfg.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return None, None
        vocab, ctx = obj.get("vocab_size"), obj.get("max_position_embeddings")
        return (vocab if isinstance(vocab, int) else None), (ctx if isinstance(ctx, int) else None)
    return None, None


def is_embedded(target: Any) -> bool:
    """Whether ``target`` names or is the embedded SmolLM2-135M-Instruct (any backend's)."""
    if target is None or (isinstance(target, str) and target == EMBEDDED_TARGET):
        return True
    return isinstance(target, TargetModel) and is_embedded_target(target)


def backend_of(target: TargetModel) -> str:
    """The backend name of a loaded target (``target.backend``; transformers' :class:`CausalLM` has none)."""
    return str(getattr(target, "backend", TRANSFORMERS.name))


def capabilities_for(target: Any, backend: str) -> Capabilities:
    """What the plan may count on: a loaded target's own :class:`Capabilities` where it declares
    them, else those its backend declares (before any load)."""
    if isinstance(target, TargetModel) and isinstance(getattr(target, "capabilities", None), Capabilities):
        return capabilities_of(target)
    return get_backend(backend).capabilities


def choose_backend(asked: str, target: Any, *, device: str, dtype: Any, automatic: bool) -> str:
    """The backend a plan runs on: a loaded target's own; ``asked`` when it names one; for
    ``"auto"``, the backend that loads the target's kind of file (:attr:`Backend.files`: llama.cpp
    for a ``.gguf`` file) or a packaged model's own (``PackagedModel.backend``: llama.cpp), or an
    installed backend marked ``auto_default`` when the plan is ``automatic`` (the embedded target
    on a CPU, ``draft="auto"``, ``dtype="auto"``, no tree or verifier options), else
    ``transformers``, the reference backend.

    Raises:
        ValueError: an unknown backend name, one that cannot run the loaded target, or a model
            file or packaged model whose backend's library is not installed.
    """
    if isinstance(target, TargetModel):
        have = backend_of(target)
        if asked not in ("auto", have):
            raise ValueError(f"the target is loaded on the {have} backend but backend {asked!r} was asked for; "
                             f"load it there (specot.load_target(..., backend={asked!r})) or leave backend 'auto'")
        return have
    if asked != "auto":
        if asked not in available_backends():
            raise ValueError(f"unknown backend {asked!r}; installed: {', '.join(available_backends())}")
        return asked
    packaged = packaged_model(target)
    if packaged is not None and packaged.backend in available_backends():
        if not get_backend(packaged.backend).available():
            raise ValueError(f"{packaged.name} runs on the {packaged.backend} backend, whose library is not installed: "
                             f"pip install 'specot[{packaged.backend}]', or pass --backend transformers")
        return packaged.backend
    owner = _file_backend(target) if isinstance(target, str) and not is_embedded(target) else None
    if owner is not None:
        if not get_backend(owner).available():
            raise ValueError(f"target {target!r} is a {Path(target).suffix} file, which the {owner} backend loads, but "
                             f"its library is not installed: pip install 'specot[{owner}]'")
        return owner
    if automatic and is_embedded(target) and str(device) == "cpu" and isinstance(dtype, str) and dtype == "auto":
        for name in available_backends():
            if name != TRANSFORMERS.name:
                backend = get_backend(name)
                if backend.auto_default and backend.available():
                    return name
    return TRANSFORMERS.name
