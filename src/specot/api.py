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
from .drafting.tree import TreeSpec, default_law_for, parse_tree_spec
from .engine.generate import autoregressive_generate, speculative_generate, tree_generate
from .engine.types import GenerationConfig, GenerationResult
from .models.embedded import (EMBEDDED_DRAFT, EMBEDDED_TARGET, embedded_draft_dir, is_embedded_target, load_embedded_draft,
                              load_embedded_target)
from .models.hf import CausalLM, load_model
from .sampling import SamplingConfig
from .verifiers.base import get_verifier

__all__ = ["GenerateReport", "generate", "load_target", "load_drafter", "pydoc_ngram_table", "pydoc_texts",
           "resolve_tree_spec"]


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
        spec: ``"auto"`` (the shipped distilled draft for the embedded target, else ``"ngram"``),
            ``"distilled"`` (the draft distilled from SmolLM2, ``specot/data/draft``), ``"ngram"``
            (prompt lookup + an n-gram table), a local directory / hub id of a draft causal LM, a
            :class:`CausalLM`, or a ready :class:`Drafter`.
        target: the target (its tokenizer builds the n-gram table; the draft must match it).
        ngram_corpus: ``"pydoc"`` (``pydoc_data.topics``), a text file path, or ``None``
            (prompt lookup only).

    Raises:
        ValueError: the draft model's vocabulary or tokenizer differs from the target's.
        FileNotFoundError: a path that does not exist.
    """
    if isinstance(spec, Drafter):
        return spec
    if isinstance(spec, str) and spec == "auto":
        spec = EMBEDDED_DRAFT if is_embedded_target(target) and (embedded_draft_dir() / "config.json").exists() else "ngram"
    if isinstance(spec, str) and spec == "ngram":
        table = None
        if ngram_corpus and target.tokenizer is not None:
            if ngram_corpus == "pydoc":
                table = pydoc_ngram_table(target.tokenizer, ngram_n)
            else:
                text = Path(ngram_corpus).read_text(encoding="utf-8")
                table = NGramTable.from_text([text], target.tokenizer, n=ngram_n)
        return NGramDrafter(n=ngram_n, table=table)
    if isinstance(spec, str) and spec == EMBEDDED_DRAFT:
        spec = load_embedded_draft(dtype=dtype, device=device)
    draft = spec if isinstance(spec, CausalLM) else load_model(spec, dtype=dtype, device=device)
    if draft is target:
        raise ValueError("the draft wrapper must not be the target's own CausalLM (they would share a KV cache)")
    check_vocab_compatible(target, draft)
    return ModelDrafter(draft)


def resolve_tree_spec(tree: str | TreeSpec | None, *, drafts: int | None, draft_len: int | None,
                      verifier: Any, tree_law: str | None = None, default_len: int = 4) -> TreeSpec:
    """The :class:`TreeSpec` for the tree options of :func:`generate` / ``specot generate``.

    ``tree`` is a :class:`TreeSpec` or a CLI form (see :func:`specot.drafting.tree.parse_tree_spec`);
    ``None`` means K = ``drafts`` sequences of length ``draft_len``. Where the form does not name
    the law (``None``, ``topology:FILE`` without one, ``eagle``), it is ``tree_law`` or else the
    verifier's own (:func:`default_law_for`: kseq/rrs → iid, rrs_wor → wor, greedy → greedy, ...).
    Forms without expansion factors take L = ``draft_len``, else ``default_len``.
    """
    if isinstance(tree, TreeSpec):
        return tree
    kind = (tree or "").partition(":")[0].strip().lower()
    names_law = kind not in ("", "topology", "eagle")
    law = tree_law if (tree_law or names_law) else default_law_for(verifier).value
    has_factors = ":" in (tree or "") and kind != "topology"
    if draft_len is None and not has_factors:
        draft_len = default_len
    return parse_tree_spec(tree, drafts=drafts, draft_len=draft_len, law=law)


def generate(
    prompt: str | Sequence[int],
    *,
    target: str | CausalLM | None = None,
    draft: str | Drafter | CausalLM = "auto",
    gamma: int = 4,
    gamma_schedule: str = "constant",
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
    drafts: int | None = None,
    draft_len: int | None = None,
    tree: str | TreeSpec | None = None,
    tree_law: str | None = None,
) -> GenerateReport:
    """Speculative decoding of ``prompt`` with ``target`` and ``draft`` (see ``specot generate``).

    Args:
        prompt: text (chat-templated for instruct models unless ``chat=False``) or token ids.
        target: ``None``/``"smollm2"`` (embedded default), a path, a hub id or a :class:`CausalLM`.
        draft: ``"auto"`` (default: the distilled draft for the embedded target, else ``"ngram"``),
            ``"distilled"``, ``"ngram"``, a path / hub id of a draft model, a :class:`CausalLM` or a
            :class:`Drafter`.
        gamma: draft length γ >= 1.
        gamma_schedule: ``"constant"`` or ``"heuristic"`` (adaptive γ; see :class:`GenerationConfig`).
        temperature, top_k, top_p: the standardized-sampling transform (temperature 0 = greedy).
        max_new_tokens: exact cap on new tokens.
        seed: seed of every random decision; ``None`` for a random seed.
        verifier: a single-draft verifier name (``"speculative"``, ``"lenient"``, ...).
        verifier_params: parameters of the verifier (e.g. ``{"lenience": 0.5}``).
        baseline: also run autoregressive decoding on the same prompt (for ``report.speedup``).
        on_text: called with each newly decoded piece of text, for streaming.
        drafts, draft_len, tree, tree_law: multi-draft tree decoding (``specot generate --drafts K
            --draft-len L --tree ...``): K drafts, draft length L (default ``gamma``), the
            construction (``iid | wor | greedy | spechub | prefix:k1,..,kL | topology:FILE | eagle``
            or a :class:`TreeSpec`; default K sequences under the verifier's law) and the law of a
            topology. The draft must be a model. When ``drafts`` and ``tree`` are both ``None`` the
            single-draft engine runs, unchanged.

    Returns:
        :class:`GenerateReport`.

    Raises:
        ValueError: invalid sampling parameters, γ or lengths, unknown verifier, vocabulary
            mismatch, prompt too long for the target's context.
    """
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, gamma=gamma, seed=seed, gamma_schedule=gamma_schedule,
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

    if drafts is None and tree is None:
        result = speculative_generate(tgt, drafter, ids, cfg, verifier=ver, on_tokens=stream)
    else:
        if not isinstance(drafter, ModelDrafter):
            raise ValueError("multi-draft tree decoding needs a draft MODEL (draft=PATH or a CausalLM), not an n-gram drafter")
        spec = resolve_tree_spec(tree, drafts=drafts, draft_len=draft_len, verifier=ver, tree_law=tree_law,
                                 default_len=gamma)
        if verifier == "otm" and "law" not in (verifier_params or {}):
            ver = get_verifier("otm", law=spec.law)  # the exact OT plan for the tree's own law
        result = tree_generate(tgt, drafter, ids, spec, cfg, verifier=ver, on_tokens=stream)
    base = autoregressive_generate(tgt, ids, cfg) if baseline else None
    return GenerateReport(result=result, baseline=base, prompt_tokens=len(ids))
