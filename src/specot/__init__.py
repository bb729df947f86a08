"""specot — speculative decoding that is exact by construction.

Public API (see the README):

* sampling: :class:`SamplingConfig`, :func:`standardize`, :func:`sample_categorical`
* verifiers: :func:`get_verifier`, :func:`available_verifiers`, :class:`Verifier`, :class:`DraftLaw`, ...
* drafting: :func:`sample_drafts`, :func:`enumerate_draft_law`, :class:`NGramDrafter`, :class:`ModelDrafter`
* theory: :func:`optimal_acceptance`, SpecTr bounds, the speedup model
* models and engine: :func:`load_model`, :func:`load_embedded_target`, :func:`speculative_generate`,
  :func:`autoregressive_generate`, and the one-call :func:`generate`
"""

from .sampling import SamplingConfig, draw_uniforms, sample_categorical, standardize
from .laws import MAX_ENUMERATED_TUPLES, enumerate_draft_law, sample_drafts, top_tokens
from .verifiers import *  # noqa: F401,F403  (re-exported, see specot.verifiers.__all__)
from .verifiers import __all__ as _verifiers_all
from .theory import *  # noqa: F401,F403
from .theory import __all__ as _theory_all
from .drafting import *  # noqa: F401,F403
from .drafting import __all__ as _drafting_all
from .models import CausalLM, load_embedded_target, load_model, resolve_dtype
from .engine import (
    GenerationConfig,
    GenerationResult,
    GenerationStats,
    autoregressive_generate,
    make_generator,
    speculative_generate,
    tree_generate,
)
from .api import GenerateReport, generate, load_drafter, load_target

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "SamplingConfig",
    "standardize",
    "sample_categorical",
    "draw_uniforms",
    "sample_drafts",
    "enumerate_draft_law",
    "top_tokens",
    "MAX_ENUMERATED_TUPLES",
    *_verifiers_all,
    *_theory_all,
    *_drafting_all,
    "CausalLM",
    "load_model",
    "load_embedded_target",
    "resolve_dtype",
    "GenerationConfig",
    "GenerationResult",
    "GenerationStats",
    "speculative_generate",
    "autoregressive_generate",
    "tree_generate",
    "make_generator",
    "GenerateReport",
    "generate",
    "load_target",
    "load_drafter",
]
