"""specot — speculative decoding that is exact by construction.

The short public API is below; everything else is reachable by module:

* :mod:`specot.sampling` — the standardized-sampling transform; :mod:`specot.laws` — draft laws,
  their samplers and exact enumeration;
* :mod:`specot.verifiers` — every verifier, a registry by name;
* :mod:`specot.drafting` — the drafter protocol, draft trees, draft models, n-gram, suffix and
  EAGLE-style drafters;
* :mod:`specot.models` — the KV-cached model wrapper, loading, the embedded SmolLM2 target;
* :mod:`specot.engine` — the one decoding loop and its entry points;
* :mod:`specot.theory` — the optimal acceptance rate α*, bounds and the speedup model.

Exactness: with a lossless verifier the output is lossless in distribution given the target's
logits; greedy decoding equals autoregressive decoding in float32, and in bf16/fp16 up to
near-ties (kernel rounding).
"""

from .api import GenerateReport, generate, load_drafter, load_target
from .drafting import Drafter, DraftTree, ModelDrafter, NGramDrafter, TreeSpec
from .engine import (GenerationConfig, GenerationResult, GenerationStats, autoregressive_generate, decode,
                     make_generator, speculative_generate, tree_generate)
from .laws import DraftLaw
from .models import CausalLM, load_embedded_target, load_model
from .sampling import SamplingConfig, sample_categorical, standardize
from .theory import optimal_acceptance
from .verifiers import SequenceVerifier, Verifier, available_verifiers, get_verifier

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # one call
    "generate",
    "GenerateReport",
    "load_target",
    "load_drafter",
    # the decoding loop
    "decode",
    "speculative_generate",
    "tree_generate",
    "autoregressive_generate",
    "GenerationConfig",
    "GenerationResult",
    "GenerationStats",
    "make_generator",
    # sampling, draft laws, verifiers
    "SamplingConfig",
    "standardize",
    "sample_categorical",
    "DraftLaw",
    "Verifier",
    "SequenceVerifier",
    "get_verifier",
    "available_verifiers",
    # drafting and models
    "Drafter",
    "DraftTree",
    "TreeSpec",
    "ModelDrafter",
    "NGramDrafter",
    "CausalLM",
    "load_model",
    "load_embedded_target",
    # theory
    "optimal_acceptance",
]
