"""Entry points of the one decoding loop (:func:`specot.engine.loop.decode`).

* :func:`speculative_generate` — one draft chain of γ tokens per iteration (Leviathan et al. 2023,
  Algorithm 1), from any drafter.
* :func:`tree_generate` — a draft tree per iteration (SpecTr Algorithm 3; Hu et al. 2025, App. D).
* :func:`autoregressive_generate` — the empty tree: one target pass per token (the baseline).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..drafting.base import Drafter
from ..drafting.model import as_drafter
from ..drafting.tree import DraftShape, TreeSpec
from ..laws import DraftLaw
from ..models.protocol import TargetModel
from ..verifiers.base import AnyVerifier, get_verifier
from ..verifiers.speculative import SpeculativeVerifier
from .loop import TokenCallback, decode
from .types import GenerationConfig, GenerationResult

__all__ = ["speculative_generate", "tree_generate", "autoregressive_generate"]


def _check_drafter(target: TargetModel, drafter: Drafter) -> None:
    if drafter.vocab_size is not None and drafter.vocab_size != target.vocab_size:
        raise ValueError(
            f"vocabulary mismatch: draft {drafter.name!r} has {drafter.vocab_size} tokens, target "
            f"{target.name!r} has {target.vocab_size}; the draft must share the target's tokenizer"
        )
    if drafter.device is not None and drafter.device.type != target.device.type:
        raise ValueError(f"the draft is on {drafter.device} but the target on {target.device}; load both on one device")
    model = getattr(drafter, "model", None)
    if model is target:
        raise ValueError("the draft wrapper must not be the target's own CausalLM (they would share a KV cache)")


def speculative_generate(
    target: TargetModel,
    drafter: Drafter | None,
    prompt_ids: Sequence[int],
    config: GenerationConfig | None = None,
    *,
    verifier: AnyVerifier | None = None,
    generator: torch.Generator | None = None,
    on_tokens: TokenCallback | None = None,
) -> GenerationResult:
    """Speculative decoding with one draft chain of γ = ``config.gamma`` tokens per iteration
    (``drafter=None``: plain autoregressive decoding).

    Args:
        target: the target model.
        drafter: any :class:`~specot.drafting.Drafter` (n-gram, draft model, ...).
        prompt_ids: prompt token ids ``[L]``.
        config: lengths, γ and its schedule, sampling transform, seed.
        verifier: valid for one draft per position (default lossless speculative sampling;
            ``LenientVerifier`` for lenience; ``block`` for block verification).
        generator: overrides ``config.seed``; on the target's device.
        on_tokens: called with each batch of newly committed token ids (for streaming).

    Returns:
        :class:`GenerationResult` (``method`` ``"speculative"`` or ``"autoregressive"``).

    Raises:
        ValueError: prompt too long for the context, empty prompt, vocabulary or device mismatch
            between the drafter and the target, or a verifier not valid for single-draft decoding.
    """
    cfg = config or GenerationConfig()
    ver = verifier if verifier is not None else SpeculativeVerifier()
    if drafter is not None:
        _check_drafter(target, drafter)
        ver.check_construction(DraftLaw.IID, 1)
    return decode(target, drafter, prompt_ids, cfg, shape=TreeSpec.sequences(1, cfg.gamma), verifier=ver,
                  generator=generator, on_tokens=on_tokens,
                  method="speculative" if drafter is not None else "autoregressive")


def autoregressive_generate(
    target: TargetModel,
    prompt_ids: Sequence[int],
    config: GenerationConfig | None = None,
    *,
    generator: torch.Generator | None = None,
    on_tokens: TokenCallback | None = None,
) -> GenerationResult:
    """Plain autoregressive decoding through the same loop (the empty draft tree; the speedup
    baseline): one target forward pass per generated token, sampled from the standardized p."""
    return speculative_generate(target, None, prompt_ids, config, generator=generator, on_tokens=on_tokens)


def tree_generate(
    target: TargetModel,
    draft: TargetModel | Drafter,
    prompt_ids: Sequence[int],
    spec: DraftShape,
    config: GenerationConfig | None = None,
    *,
    verifier: AnyVerifier | str | None = None,
    generator: torch.Generator | None = None,
    on_tokens: TokenCallback | None = None,
) -> GenerationResult:
    """Multi-draft speculative decoding over draft trees (one target pass per iteration).

    Args:
        target: the target model.
        draft: a drafter, or a draft :class:`CausalLM` (not the target's own wrapper) sharing the
            target's vocabulary.
        prompt_ids: prompt token ids.
        spec: the tree construction (:class:`TreeSpec`; :func:`~specot.drafting.parse_tree_spec`
            for the CLI forms), or the :class:`~specot.drafting.TreeBudget` of a drafter that
            builds its own trees (a draft model refuses a budget wider than 1). Its depth is the
            draft length L (cut to ``remaining − 1`` near ``max_new_tokens``).
        config: ``max_new_tokens``, ``sampling``, ``seed``, ``stop_at_eos``, ``gamma_schedule``
            (``gamma`` is unused: the tree's depth is the draft length).
        verifier: a verifier or registry name (``"otm"`` gets the tree's law) valid for ``spec``
            at every node (default: the shape's own, :attr:`TreeSpec.default_verifier
            <specot.drafting.TreeSpec.default_verifier>`).
        generator: overrides ``config.seed``; on the target's device.
        on_tokens: called with each batch of committed tokens.

    Returns:
        :class:`GenerationResult` (``method="tree"``).

    Raises:
        ValueError: before decoding — a verifier not valid for the construction, vocabulary or
            device mismatch, the draft sharing the target's wrapper, or a prompt that does not fit.
    """
    cfg = config or GenerationConfig()
    drafter = as_drafter(target, draft)
    _check_drafter(target, drafter)
    if verifier is None:
        verifier = spec.default_verifier
    if isinstance(verifier, str):
        ver = get_verifier(verifier, law=spec.law) if verifier == "otm" else get_verifier(verifier)
    else:
        ver = verifier
    spec.check_verifier(ver)
    return decode(target, drafter, prompt_ids, cfg, shape=spec, verifier=ver, generator=generator,
                  on_tokens=on_tokens, method="tree")
