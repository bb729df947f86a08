"""Models: a KV-cached wrapper over Hugging Face causal LMs and the embedded default target."""

from .cache import cache_length, crop_cache, keep_cache_positions
from .embedded import EMBEDDED_DRAFT, EMBEDDED_TARGET, embedded_gguf, load_embedded_draft, load_embedded_target
from .hf import CausalLM, cpu_has_native_bf16, load_model, resolve_dtype

__all__ = [
    "CausalLM",
    "load_model",
    "resolve_dtype",
    "cpu_has_native_bf16",
    "load_embedded_target",
    "load_embedded_draft",
    "EMBEDDED_DRAFT",
    "embedded_gguf",
    "EMBEDDED_TARGET",
    "cache_length",
    "crop_cache",
    "keep_cache_positions",
]
