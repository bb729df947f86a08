"""specot — speculative decoding that is exact by construction.

Public API (see the README):

* sampling: :class:`SamplingConfig`, :func:`standardize`, :func:`sample_categorical`
* verifiers: :func:`get_verifier`, :func:`available_verifiers`, :class:`Verifier`, :class:`DraftLaw`, ...
* theory: :mod:`specot.theory`
* engine: :func:`generate`, :class:`GenerationResult`, :class:`GenerationStats`, models and drafters
"""

from .sampling import SamplingConfig, draw_uniforms, sample_categorical, standardize
from .verifiers import *  # noqa: F401,F403  (re-exported, see specot.verifiers.__all__)
from .verifiers import __all__ as _verifiers_all
from .theory import *  # noqa: F401,F403
from .theory import __all__ as _theory_all

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "SamplingConfig",
    "standardize",
    "sample_categorical",
    "draw_uniforms",
    *_verifiers_all,
    *_theory_all,
]
