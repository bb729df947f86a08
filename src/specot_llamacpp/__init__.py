"""specot on llama.cpp: a target backend over llama-cpp-python's low-level API.

:func:`load_target` gives a :class:`LlamaCppTarget`, which implements specot's target protocol
(:class:`specot.models.protocol.TargetModel`): the one decoding loop, every verifier and the
model-free drafters (n-gram, suffix) run on it unchanged, with draft chains and draft trees scored
in one ``llama_decode`` batch and the KV cache rolled back by sequence operations. The embedded
SmolLM2 GGUF is loaded as is (Q4_1, memory-mapped). :mod:`specot_llamacpp.draft` converts the
distilled draft to GGUF and drafts with it; the target measures its own pass-cost curve
(:meth:`LlamaCppTarget.pass_cost_curve`), which the suffix drafter prices its drafts with. Its
benchmarks live in the lab (``specot bench llamacpp``, :mod:`specot_lab.bench.llamacpp`). See
docs/llamacpp.md.

Needs ``llama-cpp-python`` (``make setup-llamacpp`` builds and caches its wheel). The names below
load on first use, so the ``specot.backends`` entry point (:mod:`specot_llamacpp.backend`) imports
without it and says how to install it when a target is asked for.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["load_target", "LlamaCppTarget", "gguf_tokenizer", "default_threads", "EMBEDDED_NAME"]

_WHERE = {"load_target": "loading", "gguf_tokenizer": "loading", "EMBEDDED_NAME": "loading",
          "LlamaCppTarget": "target", "default_threads": "target"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
