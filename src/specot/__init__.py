"""specot — speculative decoding that is exact by construction.

The short public API is below; everything else is reachable by module:

* :mod:`specot.plan` — the decoding plan: drafts parsed once, tree shapes, verifiers, backends;
* :mod:`specot.sampling` — the standardized-sampling transform; :mod:`specot.laws` — draft laws,
  their samplers and exact enumeration;
* :mod:`specot.verifiers` — every verifier, a registry by name;
* :mod:`specot.drafting` — the drafter protocol, draft trees, draft models, n-gram, suffix and
  EAGLE-style drafters;
* :mod:`specot.models` — the target protocol, the KV-cached transformers backend, loading, the
  embedded SmolLM2 target;
* :mod:`specot.engine` — the one decoding loop and its entry points;
* :mod:`specot.theory` — the optimal acceptance rate α*, bounds and the speedup model.

Exactness: with a lossless verifier the output is lossless in distribution given the target's
logits; greedy decoding equals autoregressive decoding in float32, and in bf16/fp16 up to
near-ties (kernel rounding).

The names load on first use (PEP 562), so ``import specot`` and the ``specot`` command start
without importing torch and transformers until a name that needs them is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: Public name → the module that defines it.
_EXPORTS = {
    # one call
    "generate": "api", "load_target": "api", "load_drafter": "api",
    "GenerateReport": "report", "GenerationInterrupted": "report",
    # the decoding plan
    "make_plan": "plan", "DecodingPlan": "plan",
    # the decoding loop
    "decode": "engine", "speculative_generate": "engine", "tree_generate": "engine",
    "autoregressive_generate": "engine", "GenerationConfig": "engine", "GenerationResult": "engine",
    "GenerationStats": "engine", "make_generator": "engine",
    # sampling, draft laws, verifiers
    "SamplingConfig": "sampling", "standardize": "sampling", "sample_categorical": "sampling",
    "DraftLaw": "laws", "Verifier": "verifiers", "SequenceVerifier": "verifiers", "get_verifier": "verifiers",
    "available_verifiers": "verifiers",
    # drafting and models
    "Drafter": "drafting", "DraftTree": "drafting", "TreeSpec": "drafting", "TargetModel": "models.protocol",
    "CausalLM": "models",
    # theory
    "optimal_acceptance": "theory",
}

__all__ = ["__version__", *_EXPORTS]

#: Reachable here too, but documented in their modules: the embedded target's loader, the
#: transformers loader and two drafters.
_ALSO = {"load_embedded_target": "models", "load_model": "models", "ModelDrafter": "drafting",
         "NGramDrafter": "drafting"}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name) or _ALSO.get(name)
    if module is None:
        raise AttributeError(f"module 'specot' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from .api import generate, load_drafter, load_target
    from .drafting import Drafter, DraftTree, TreeSpec
    from .engine import (GenerationConfig, GenerationResult, GenerationStats, autoregressive_generate, decode,
                         make_generator, speculative_generate, tree_generate)
    from .laws import DraftLaw
    from .models import CausalLM
    from .models.protocol import TargetModel
    from .plan import DecodingPlan, make_plan
    from .report import GenerateReport, GenerationInterrupted
    from .sampling import SamplingConfig, sample_categorical, standardize
    from .theory import optimal_acceptance
    from .verifiers import SequenceVerifier, Verifier, available_verifiers, get_verifier
