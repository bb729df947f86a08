"""The decoding engine: speculative decoding (Leviathan Algorithm 1), multi-draft tree decoding
(SpecTr Algorithm 3, Hu et al. App. D) and the autoregressive baseline."""

from .speculative import autoregressive_generate, check_prompt_fits, make_generator, speculative_generate
from .tree import TreeGenerationStats, TreeStep, tree_generate, verify_tree
from .types import GenerationConfig, GenerationResult, GenerationStats

__all__ = [
    "GenerationConfig",
    "GenerationResult",
    "GenerationStats",
    "speculative_generate",
    "autoregressive_generate",
    "check_prompt_fits",
    "make_generator",
    "tree_generate",
    "verify_tree",
    "TreeGenerationStats",
    "TreeStep",
]
