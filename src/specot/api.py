"""High-level Python API: ``specot.generate(...)`` — the same job as ``specot generate``.

Example::

    import specot
    report = specot.generate("What is a Python generator?", draft="ngram", gamma=4,
                             temperature=0.0, max_new_tokens=64, baseline=True)
    print(report.result.text, report.result.stats.block_efficiency, report.speedup)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .drafting.base import Drafter
from .drafting.model import ModelDrafter, check_vocab_compatible
from .drafting.ngram import NGramDrafter, NGramTable
from .engine.speculative import autoregressive_generate, speculative_generate
from .engine.types import GenerationConfig, GenerationResult
from .models.embedded import EMBEDDED_TARGET, load_embedded_target
from .models.hf import CausalLM, load_model
from .sampling import SamplingConfig
from .verifiers.base import get_verifier

__all__ = ["GenerateReport", "generate", "load_target", "load_drafter", "pydoc_ngram_table", "pydoc_texts"]


@dataclass
class GenerateReport:
    """What :func:`generate` returns.

    Attributes:
        result: the speculative generation (text, tokens, statistics).
        baseline: the autoregressive generation on the same prompt, when asked for.
        prompt_tokens: length of the encoded prompt.
    """

    result: GenerationResult
    baseline: GenerationResult | None = None
    prompt_tokens: int = 0

    @property
    def speedup(self) -> float | None:
        """Speculative tokens/s divided by autoregressive tokens/s (``None`` without a baseline)."""
        if self.baseline is None or self.baseline.stats.tokens_per_s == 0:
            return None
        return self.result.stats.tokens_per_s / self.baseline.stats.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "speculative": self.result.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup": self.speedup,
        }


def load_target(spec: str | CausalLM | None = None, *, dtype: str | torch.dtype = "auto", device: str = "cpu") -> CausalLM:
    """The target model: ``None`` or ``"smollm2"`` for the embedded SmolLM2-135M-Instruct, else a
    local directory or Hugging Face hub id (see :func:`specot.models.load_model`)."""
    if isinstance(spec, CausalLM):
        return spec
    if spec is None or spec == EMBEDDED_TARGET:
        return load_embedded_target(dtype=dtype, device=device)
    return load_model(spec, dtype=dtype, device=device)


def pydoc_texts() -> list[str]:
    """The English prose of CPython's ``pydoc_data.topics`` (one string per help topic)."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


@functools.lru_cache(maxsize=4)
def _pydoc_table(tokenizer_key: int, n: int, tokenizer: Any) -> NGramTable:
    return NGramTable.from_text(pydoc_texts(), tokenizer, n=n)


def pydoc_ngram_table(tokenizer: Any, n: int = 3) -> NGramTable:
    """An :class:`NGramTable` over ``pydoc_data.topics`` tokenized with ``tokenizer`` (cached)."""
    return _pydoc_table(id(tokenizer), n, tokenizer)


def load_drafter(spec: str | Drafter | CausalLM, target: CausalLM, *, dtype: str | torch.dtype = "auto",
                 device: str = "cpu", ngram_n: int = 3, ngram_corpus: str | None = "pydoc") -> Drafter:
    """Build the drafter named by ``spec``.

    Args:
        spec: ``"ngram"`` (prompt lookup + an n-gram table), a local directory / hub id of a draft
            causal LM, a :class:`CausalLM`, or a ready :class:`Drafter`.
        target: the target (its tokenizer builds the n-gram table; the draft must match it).
        ngram_corpus: ``"pydoc"`` (``pydoc_data.topics``), a text file path, or ``None``
            (prompt lookup only).

    Raises:
        ValueError: the draft model's vocabulary or tokenizer differs from the target's.
        FileNotFoundError: a path that does not exist.
    """
    if isinstance(spec, Drafter):
        return spec
    if isinstance(spec, str) and spec == "ngram":
        table = None
        if ngram_corpus and target.tokenizer is not None:
            if ngram_corpus == "pydoc":
                table = pydoc_ngram_table(target.tokenizer, ngram_n)
            else:
                text = Path(ngram_corpus).read_text(encoding="utf-8")
                table = NGramTable.from_text([text], target.tokenizer, n=ngram_n)
        return NGramDrafter(n=ngram_n, table=table)
    draft = spec if isinstance(spec, CausalLM) else load_model(spec, dtype=dtype, device=device)
    if draft is target:
        raise ValueError("the draft wrapper must not be the target's own CausalLM (they would share a KV cache)")
    check_vocab_compatible(target, draft)
    return ModelDrafter(draft)


def generate(
    prompt: str | Sequence[int],
    *,
    target: str | CausalLM | None = None,
    draft: str | Drafter | CausalLM = "ngram",
    gamma: int = 4,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    max_new_tokens: int = 128,
    seed: int | None = 0,
    verifier: str = "speculative",
    verifier_params: dict[str, Any] | None = None,
    baseline: bool = False,
    chat: bool | None = None,
    dtype: str | torch.dtype = "auto",
    device: str = "cpu",
    on_text: Callable[[str], None] | None = None,
) -> GenerateReport:
    """Speculative decoding of ``prompt`` with ``target`` and ``draft`` (see ``specot generate``).

    Args:
        prompt: text (chat-templated for instruct models unless ``chat=False``) or token ids.
        target: ``None``/``"smollm2"`` (embedded default), a path, a hub id or a :class:`CausalLM`.
        draft: ``"ngram"``, a path / hub id of a draft model, a :class:`CausalLM` or a :class:`Drafter`.
        gamma: draft length γ >= 1.
        temperature, top_k, top_p: the standardized-sampling transform (temperature 0 = greedy).
        max_new_tokens: exact cap on new tokens.
        seed: seed of every random decision; ``None`` for a random seed.
        verifier: a single-draft verifier name (``"speculative"``, ``"lenient"``, ...).
        verifier_params: parameters of the verifier (e.g. ``{"lenience": 0.5}``).
        baseline: also run autoregressive decoding on the same prompt (for ``report.speedup``).
        on_text: called with each newly decoded piece of text, for streaming.

    Returns:
        :class:`GenerateReport`.

    Raises:
        ValueError: invalid sampling parameters, γ or lengths, unknown verifier, vocabulary
            mismatch, prompt too long for the target's context.
    """
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, gamma=gamma, seed=seed,
                           sampling=SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p))
    ver = get_verifier(verifier, **(verifier_params or {}))
    tgt = load_target(target, dtype=dtype, device=device)
    drafter = load_drafter(draft, tgt, dtype=dtype, device=device)
    ids = tgt.encode_prompt(prompt, chat=chat) if isinstance(prompt, str) else [int(t) for t in prompt]

    streamed: list[int] = []
    printed = [""]

    def stream(tokens: list[int]) -> None:
        if on_text is None:
            return
        streamed.extend(tokens)
        text = tgt.decode(streamed).rstrip("\ufffd")  # hold back a partial multi-byte character
        if text.startswith(printed[0]) and len(text) > len(printed[0]):
            on_text(text[len(printed[0]):])
            printed[0] = text

    result = speculative_generate(tgt, drafter, ids, cfg, verifier=ver, on_tokens=stream)
    base = autoregressive_generate(tgt, ids, cfg) if baseline else None
    return GenerateReport(result=result, baseline=base, prompt_tokens=len(ids))
