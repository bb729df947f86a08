"""Quiet model loading: no transformers / GGUF progress bars or warnings while specot loads a model.

specot chooses the dtype and device itself and reports its own progress, so transformers' own
output during ``from_pretrained`` (a de-quantisation bar per GGUF read, a "Loading weights" bar,
warnings about dtypes specot has already decided) only contradicts or repeats it. Errors still
propagate as exceptions; set ``SPECOT_VERBOSE_LOADING=1`` to see transformers' output again.
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Iterator
from types import ModuleType

from transformers.utils import logging as hf_logging

try:  # GGUF support is optional in transformers
    from transformers import modeling_gguf_pytorch_utils as _gguf_mod

    gguf_mod: ModuleType | None = _gguf_mod
except Exception:  # noqa: BLE001
    gguf_mod = None

__all__ = ["quiet_loading"]


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silence transformers' logging (errors still shown), its progress bars and the GGUF
    de-quantisation bar for the duration; everything is restored on exit."""
    if os.environ.get("SPECOT_VERBOSE_LOADING"):
        yield
        return
    verbosity = hf_logging.get_verbosity()
    bars = hf_logging.is_progress_bar_enabled()
    gguf_tqdm = getattr(gguf_mod, "tqdm", None)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if gguf_tqdm is not None:
        gguf_mod.tqdm = functools.partial(gguf_tqdm, disable=True)  # type: ignore[union-attr]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if gguf_tqdm is not None:
            gguf_mod.tqdm = gguf_tqdm  # type: ignore[union-attr]
        if bars:
            hf_logging.enable_progress_bar()
        hf_logging.set_verbosity(verbosity)
