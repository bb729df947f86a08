"""Running a :class:`~specot.plan.DecodingPlan` on a loaded target: its caches, then the one
decoding loop (:func:`specot.engine.decode`) through the chain or tree entry point."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch

from ..drafting.base import Drafter
from ..engine.generate import autoregressive_generate, speculative_generate, tree_generate
from ..engine.loop import TokenCallback, make_generator
from ..engine.types import GenerationConfig, GenerationResult
from ..models.protocol import capabilities_of
from ..verifiers.base import AnyVerifier
from .plan import DecodingPlan, tree_room

__all__ = ["run_plan", "prepare_cache", "warm_up", "wants_cuda_graphs"]


def wants_cuda_graphs(cache: str, model: Any) -> bool:
    """Whether ``model``'s passes replay as CUDA graphs under a plan's ``cache``: as it asks, or by
    default (``"auto"``) when the model is on CUDA and declares graphs among its capabilities
    (:attr:`~specot.models.protocol.Capabilities.cuda_graphs`: transformers marks the architecture as
    compiling whole, ``_can_compile_fullgraph``; an architecture without it keeps its own cache).
    ``"cuda_graphs"`` off CUDA runs the same padded passes eagerly (how the tests check them)."""
    if cache != "auto":
        return cache == "cuda_graphs"
    return model.device.type == "cuda" and capabilities_of(model).cuda_graphs


def prepare_cache(plan: DecodingPlan, target: Any, drafter: Drafter | None, prompt_len: int,
                  max_new_tokens: int) -> bool:
    """Set up the plan's caches on ``target`` (and a draft model / EAGLE head): static KV caches
    whose passes replay as CUDA graphs (:meth:`specot.models.CausalLM.use_static_cache`), sized for
    the prompt, the output, one draft tree and a pass's padding. Returns whether graphs are on.
    A loaded target keeps its static cache and graphs for later calls."""
    caps = capabilities_of(target)
    if not caps.static_cache or not wants_cuda_graphs(plan.cache, target):
        return False
    room = tree_room(plan.tree) if plan.tree is not None else 2 * plan.gamma  # a chain may grow to 2γ
    span = prompt_len + max_new_tokens + room + 8 + max(caps.graph_widths, default=0)
    draft_model = getattr(drafter, "model", None)
    for m in (target, draft_model):
        if m is None or not capabilities_of(m).static_cache or not wants_cuda_graphs(plan.cache, m):
            continue
        if m.static_cache_len is None or m.static_cache_len < min(span, m.max_context):
            m.use_static_cache(min(span, m.max_context), cuda_graphs=True)
    if drafter is not None:
        drafter.use_static_cache(min(span, target.max_context), cuda_graphs=True)  # EAGLE's temperature-0 trees
    return True


def run_plan(plan: DecodingPlan, target: Any, drafter: Drafter | None, prompt_ids: Sequence[int],
             config: GenerationConfig, verifier: AnyVerifier, *, generator: torch.Generator | None = None,
             on_tokens: TokenCallback | None = None) -> GenerationResult:
    """Decode ``prompt_ids [L]`` under ``plan`` with a loaded ``target`` and ``drafter`` (the plan's,
    loaded) and ``verifier`` (``plan.verifier.build()``): a chain (Leviathan et al. 2023,
    Algorithm 1), a draft tree (SpecTr Algorithm 3; Hu et al. 2025, App. D), or autoregressive
    decoding when the plan has no draft. ``config.gamma`` is the plan's γ."""
    cfg = dataclasses.replace(config, gamma=plan.gamma, gamma_schedule=plan.gamma_schedule)
    if drafter is None:
        return autoregressive_generate(target, prompt_ids, cfg, generator=generator, on_tokens=on_tokens)
    if plan.tree is None:
        return speculative_generate(target, drafter, prompt_ids, cfg, verifier=verifier, generator=generator,
                                    on_tokens=on_tokens)
    return tree_generate(target, drafter, prompt_ids, plan.tree, cfg, verifier=verifier, generator=generator,
                         on_tokens=on_tokens)


def warm_up(plan: DecodingPlan, target: Any, drafter: Drafter | None, prompt_ids: Sequence[int],
            config: GenerationConfig, verifier: AnyVerifier) -> None:
    """Run the plan briefly (16 tokens, and 2 autoregressive ones) with its own generator, so that
    every CUDA graph it meets is captured before a timed run: the first timed run would otherwise
    pay every capture and the baseline none (docs/results.md, "GPU runs")."""
    warm = dataclasses.replace(config, max_new_tokens=min(config.max_new_tokens, 16))
    g = make_generator(0, target.device)
    run_plan(plan, target, drafter, prompt_ids, warm, verifier, generator=g)
    autoregressive_generate(target, prompt_ids, dataclasses.replace(warm, max_new_tokens=2), generator=g)
