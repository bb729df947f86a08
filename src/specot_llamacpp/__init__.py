"""specot on llama.cpp: a target backend over llama-cpp-python's low-level API.

:func:`load_target` gives a :class:`LlamaCppTarget`, which implements specot's target protocol
(:class:`specot.models.protocol.TargetModel`): the one decoding loop, every verifier and the
model-free drafters (n-gram, suffix) run on it unchanged, with draft chains and draft trees scored
in one ``llama_decode`` batch and the KV cache rolled back by sequence operations. The embedded
SmolLM2 GGUF is loaded as is (Q4_1, memory-mapped). :class:`LlamaCppDrafter` drafts with a small
GGUF model (the distilled draft, converted by :func:`draft_gguf`). See docs/llamacpp.md.

Needs ``llama-cpp-python`` (``make setup-llamacpp`` builds and caches its wheel).
"""

from .loading import EMBEDDED_NAME, gguf_tokenizer, load_target
from .target import LlamaCppTarget, default_threads

__all__ = ["load_target", "LlamaCppTarget", "gguf_tokenizer", "default_threads", "EMBEDDED_NAME"]
