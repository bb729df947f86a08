"""The decoding engine: speculative decoding (Leviathan Algorithm 1) and the autoregressive baseline."""

from .speculative import autoregressive_generate, check_prompt_fits, make_generator, speculative_generate
from .types import GenerationConfig, GenerationResult, GenerationStats

__all__ = [
    "GenerationConfig",
    "GenerationResult",
    "GenerationStats",
    "speculative_generate",
    "autoregressive_generate",
    "check_prompt_fits",
    "make_generator",
]
