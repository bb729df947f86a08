"""The decoding engine: one loop over draft trees (:func:`decode`) and its entry points —
speculative decoding (Leviathan Algorithm 1), multi-draft tree decoding (SpecTr Algorithm 3,
Hu et al. App. D) and the autoregressive baseline."""

from .generate import autoregressive_generate, speculative_generate, tree_generate
from .loop import TreeStep, check_prompt_fits, decode, make_generator, verify_draft_tree
from .types import GenerationConfig, GenerationResult, GenerationStats

__all__ = [
    "GenerationConfig",
    "GenerationResult",
    "GenerationStats",
    "decode",
    "speculative_generate",
    "autoregressive_generate",
    "tree_generate",
    "verify_draft_tree",
    "TreeStep",
    "check_prompt_fits",
    "make_generator",
]
