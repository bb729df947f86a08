"""Models: a KV-cached wrapper over Hugging Face causal LMs (scoring and committing), KV-cache
surgery, device/dtype choice, chat formatting, loading, and the embedded default target."""

from .cache import cache_length, crop_cache, keep_cache_positions
from .chat import decode_tokens, encode_prompt
from .device import cpu_has_native_bf16, resolve_dtype
from .embedded import EMBEDDED_DRAFT, EMBEDDED_TARGET, embedded_gguf, load_embedded_draft, load_embedded_target
from .hf import CausalLM
from .loading import check_model_source, load_model

__all__ = [
    "CausalLM",
    "load_model",
    "check_model_source",
    "resolve_dtype",
    "cpu_has_native_bf16",
    "encode_prompt",
    "decode_tokens",
    "load_embedded_target",
    "load_embedded_draft",
    "EMBEDDED_DRAFT",
    "embedded_gguf",
    "EMBEDDED_TARGET",
    "cache_length",
    "crop_cache",
    "keep_cache_positions",
]
