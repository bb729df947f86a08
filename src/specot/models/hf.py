"""A thin wrapper over any Hugging Face ``AutoModelForCausalLM`` with a KV cache for one sequence.

The wrapper keeps the token ids whose keys/values are cached, so a caller can hand it the whole
committed context at every step: :meth:`CausalLM.logits_after` rolls the cache back to the longest
common prefix and runs only the new tokens (plus any drafted tokens) in ONE forward pass.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import Tensor

from .cache import cache_length, crop_cache, keep_cache_positions

__all__ = ["CausalLM", "load_model", "resolve_dtype", "cpu_has_native_bf16"]


def cpu_has_native_bf16() -> bool:
    """True if this CPU has bfloat16 matrix instructions (AVX512-BF16 or AMX-BF16).

    Without them (e.g. AVX2-only CPUs) PyTorch's bf16 matmuls over several tokens fall back to slow
    kernels: measured here, a SmolLM2-135M forward over 32 new tokens costs 518 ms in bf16 but
    158 ms in float32 (1 token: 58 vs 64 ms).
    """
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_dtype(dtype: str | torch.dtype, device: str | torch.device = "cpu") -> torch.dtype:
    """Map ``"auto" | "bfloat16" | "float32" | "float16" | "float64"`` (or a dtype) to a torch dtype.

    ``"auto"`` is bfloat16 on CUDA and on CPUs with native bf16 matmuls, float32 otherwise.

    Raises:
        ValueError: an unknown dtype name.
    """
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
             "float16": torch.float16, "fp16": torch.float16, "float64": torch.float64}
    if dtype == "auto":
        if str(device).startswith("cuda") or cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use one of auto, {', '.join(names)}")
    return names[dtype]


@dataclass
class CausalLM:
    """A causal LM plus its KV cache for one sequence (batch size 1).

    Attributes:
        model: a Hugging Face ``PreTrainedModel`` with a causal-LM head.
        tokenizer: its tokenizer, or ``None`` (token-level use, e.g. tiny test models).
        name: a label for messages and statistics.
        vocab_size: number of logits used (the tokenizer's size when known, which drops any
            padding rows of the output embedding; else the model's output size).
        max_context: maximum number of positions (``config.max_position_embeddings``).
        forward_calls: forward passes run since the last :meth:`reset_stats`.
        forward_time_s: wall time of those passes, seconds.
    """

    model: Any
    tokenizer: Any = None
    name: str = "model"
    vocab_size: int = 0
    max_context: int = 0
    forward_calls: int = 0
    forward_time_s: float = 0.0
    _cache: Any = field(default=None, repr=False)
    _cached_ids: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        cfg = self.model.config
        if not self.vocab_size:
            out_dim = self.model.get_output_embeddings().weight.shape[0]
            tok_len = len(self.tokenizer) if self.tokenizer is not None else out_dim
            self.vocab_size = min(out_dim, tok_len)
        if not self.max_context:
            self.max_context = int(getattr(cfg, "max_position_embeddings", 0) or 1 << 30)
        self.model.eval()

    # ----------------------------------------------------------------- properties
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def eos_token_ids(self) -> set[int]:
        """Token ids that end generation (from the generation config, config and tokenizer)."""
        ids: set[int] = set()
        for src in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            val = getattr(src, "eos_token_id", None) if src is not None else None
            if isinstance(val, int):
                ids.add(val)
            elif isinstance(val, (list, tuple)):
                ids.update(int(v) for v in val)
        return ids

    @property
    def cached_ids(self) -> list[int]:
        """Token ids whose keys/values are in the cache (a copy)."""
        return list(self._cached_ids)

    # ----------------------------------------------------------------- cache
    def reset(self) -> None:
        """Empty the KV cache (a new sequence starts)."""
        self._cache = None
        self._cached_ids = []

    def reset_stats(self) -> None:
        self.forward_calls = 0
        self.forward_time_s = 0.0

    def rollback(self, length: int) -> None:
        """Keep only the first ``length`` cached positions."""
        if self._cache is not None:
            crop_cache(self._cache, length)
        del self._cached_ids[length:]

    def keep_positions(self, keep: Sequence[int]) -> None:
        """Keep the cached positions ``keep`` (increasing indices), e.g. a tree's accepted path."""
        idx = torch.as_tensor(list(keep), dtype=torch.int64)
        if self._cache is not None:
            keep_cache_positions(self._cache, idx)
        self._cached_ids = [self._cached_ids[i] for i in idx.tolist()]

    # ----------------------------------------------------------------- forward
    @torch.inference_mode()
    def forward(self, tokens: Sequence[int] | Tensor, *, position_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Run ``tokens`` (``[T]``) after the cached positions; returns float32 logits ``[T, V]``.

        Appends the new positions to the cache. ``position_ids [T]`` and a 4D ``attention_mask``
        ``[1, 1, T, cached + T]`` may be passed for tree attention (default: causal, consecutive).
        """
        ids = torch.as_tensor(list(tokens) if not isinstance(tokens, Tensor) else tokens, dtype=torch.int64)
        ids = ids.to(self.device).reshape(1, -1)  # [1, T]
        if ids.shape[1] == 0:
            raise ValueError("forward needs at least one token")
        if self._cache is None:
            from transformers import DynamicCache

            self._cache = DynamicCache(config=self.model.config)
        kwargs: dict[str, Any] = {"past_key_values": self._cache, "use_cache": True}
        if position_ids is not None:
            kwargs["position_ids"] = position_ids.reshape(1, -1).to(self.device)
        if attention_mask is not None:
            kwargs["attention_mask"] = attention_mask.to(self.device)
        start = time.perf_counter()
        out = self.model(input_ids=ids, **kwargs)
        logits = out.logits[0, :, : self.vocab_size].float()  # [T, V]
        self.forward_time_s += time.perf_counter() - start
        self.forward_calls += 1
        self._cache = out.past_key_values
        self._cached_ids.extend(ids[0].tolist())
        return logits

    def logits_after(self, context: Sequence[int], extra: Sequence[int] = ()) -> Tensor:
        """Logits for the next token after ``context``, and after each prefix of ``extra``.

        Rolls the cache back to the longest common prefix of the cached ids and ``context[:-1]``,
        then runs the rest of ``context`` plus ``extra`` in one forward pass.

        Returns:
            float32 logits ``[1 + len(extra), V]``: row 0 predicts the token after ``context``,
            row i the token after ``context + extra[:i]``.

        Raises:
            ValueError: empty context, or context + extra longer than ``max_context``.
        """
        if len(context) == 0:
            raise ValueError("context must hold at least one token")
        total = len(context) + len(extra)
        if total > self.max_context:
            raise ValueError(f"{self.name}: {total} positions exceed the model's context of {self.max_context}")
        common = 0
        limit = min(len(self._cached_ids), len(context) - 1)
        cached = self._cached_ids
        while common < limit and cached[common] == context[common]:
            common += 1
        self.rollback(common)
        new = list(context[common:]) + list(extra)
        logits = self.forward(new)
        return logits[-(1 + len(extra)):]

    # ----------------------------------------------------------------- text
    def encode_prompt(self, prompt: str, *, chat: bool | None = None, system: str | None = None) -> list[int]:
        """Token ids of ``prompt``; with ``chat`` (default: when the tokenizer has a chat template)
        the prompt is wrapped as one user turn of the chat template with the generation prompt."""
        if self.tokenizer is None:
            raise ValueError(f"{self.name} has no tokenizer; pass token ids instead of text")
        use_chat = bool(getattr(self.tokenizer, "chat_template", None)) if chat is None else chat
        if use_chat:
            if not getattr(self.tokenizer, "chat_template", None):
                raise ValueError(f"{self.name}'s tokenizer has no chat template; use raw text (chat=False)")
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            enc = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            ids = enc["input_ids"] if hasattr(enc, "keys") else enc
            if ids and isinstance(ids[0], list):
                ids = ids[0]
            return [int(i) for i in ids]
        return [int(i) for i in self.tokenizer(prompt)["input_ids"]]

    def decode(self, ids: Sequence[int]) -> str:
        if self.tokenizer is None:
            return " ".join(str(i) for i in ids)
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def load_model(name_or_path: str | os.PathLike[str], *, dtype: str | torch.dtype = "auto", device: str = "cpu",
               gguf_file: str | None = None, label: str | None = None) -> CausalLM:
    """Load a Hugging Face causal LM and its tokenizer from a local directory or a hub name.

    Args:
        name_or_path: local directory (``config.json`` + weights, or a GGUF file with
            ``gguf_file``) or a hub model id (downloaded by transformers unless ``HF_HUB_OFFLINE=1``).
        dtype: see :func:`resolve_dtype`.
        device: ``"cpu"``, ``"cuda"``, ...
        gguf_file: name of a GGUF file inside ``name_or_path``.

    Raises:
        FileNotFoundError: a local path that does not exist.
        OSError: transformers could not load it (e.g. offline and not cached).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = str(name_or_path)
    looks_local = path.startswith((".", "/", "~")) or os.sep in path and Path(path).expanduser().exists()
    if looks_local and not Path(path).expanduser().exists():
        raise FileNotFoundError(f"model path {path!r} does not exist")
    torch_dtype = resolve_dtype(dtype, device)
    kw: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(path, **kw)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, **kw).to(device)
    return CausalLM(model=model, tokenizer=tokenizer, name=label or Path(path).name or path)
