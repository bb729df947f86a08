"""The decoding loop: speculative decoding (Leviathan et al. 2023, Algorithm 1) and its baseline.

Each iteration drafts γ tokens, scores all γ+1 prefixes with ONE target forward pass, verifies
the drafts left to right with a single-draft verifier, emits the accepted prefix plus either the
correction token (drawn from the residual at the first rejection) or the bonus token (drawn from
the target at the end), and rolls both KV caches back to the committed sequence. Autoregressive
decoding runs through the same model wrapper and is the baseline for speedups.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch

from ..drafting.base import DraftProposal, Drafter
from ..models.hf import CausalLM
from ..sampling import sample_categorical, standardize
from ..verifiers.base import DraftLaw, Verifier
from ..verifiers.speculative import SpeculativeVerifier
from .types import GenerationConfig, GenerationResult, GenerationStats

__all__ = ["speculative_generate", "autoregressive_generate", "check_prompt_fits", "make_generator"]

TokenCallback = Callable[[list[int]], None]


def make_generator(seed: int | None, device: str | torch.device = "cpu") -> torch.Generator:
    """A ``torch.Generator`` seeded with ``seed`` (a random seed when ``None``)."""
    g = torch.Generator(device=device)
    if seed is None:
        g.seed()
    else:
        g.manual_seed(int(seed))
    return g


def check_prompt_fits(target: CausalLM, prompt_ids: Sequence[int], max_new_tokens: int) -> None:
    """Raise ``ValueError`` before decoding if the prompt (plus ``max_new_tokens``) exceeds the
    target's context, or if the prompt is empty or holds ids outside the vocabulary."""
    n = len(prompt_ids)
    if n == 0:
        raise ValueError("the prompt is empty: pass at least one token")
    bad = [t for t in prompt_ids if not 0 <= int(t) < target.vocab_size]
    if bad:
        raise ValueError(f"prompt has token ids outside [0, {target.vocab_size}): {bad[:5]}")
    if n > target.max_context:
        raise ValueError(f"the prompt has {n} tokens, longer than {target.name}'s context of {target.max_context}")
    if n + max_new_tokens > target.max_context:
        raise ValueError(
            f"prompt ({n} tokens) + max_new_tokens ({max_new_tokens}) = {n + max_new_tokens} exceeds "
            f"{target.name}'s context of {target.max_context}; lower max_new_tokens to at most {target.max_context - n}"
        )


def _finish_tokens(emitted: list[int], remaining: int, eos: set[int]) -> tuple[list[int], bool]:
    """Cut ``emitted`` at the first EOS (kept) and at ``remaining`` tokens; returns (tokens, stop)."""
    for i, t in enumerate(emitted[:remaining]):
        if t in eos:
            return emitted[: i + 1], True
    cut = emitted[:remaining]
    return cut, len(cut) == remaining


def speculative_generate(
    target: CausalLM,
    drafter: Drafter | None,
    prompt_ids: Sequence[int],
    config: GenerationConfig | None = None,
    *,
    verifier: Verifier | None = None,
    generator: torch.Generator | None = None,
    on_tokens: TokenCallback | None = None,
) -> GenerationResult:
    """Generate with speculative decoding (``drafter=None``: plain autoregressive decoding).

    Args:
        target: the target model.
        drafter: proposes up to γ tokens per iteration (an n-gram or model drafter).
        prompt_ids: prompt token ids ``[L]``.
        config: lengths, γ, sampling transform, seed.
        verifier: a single-draft verifier valid for one i.i.d. draft (default lossless
            speculative sampling; ``LenientVerifier`` for lenience).
        generator: overrides ``config.seed``.
        on_tokens: called with each batch of newly committed token ids (for streaming).

    Returns:
        :class:`GenerationResult`; ``stats.target_calls`` counts serial target passes.

    Raises:
        ValueError: prompt too long for the context, empty prompt, vocabulary mismatch between
            the drafter and the target, or a verifier not valid for single-draft decoding.
    """
    cfg = config or GenerationConfig()
    check_prompt_fits(target, prompt_ids, cfg.max_new_tokens)
    if drafter is not None and drafter.vocab_size is not None and drafter.vocab_size != target.vocab_size:
        raise ValueError(
            f"vocabulary mismatch: draft {drafter.name!r} has {drafter.vocab_size} tokens, target "
            f"{target.name!r} has {target.vocab_size}; the draft must share the target's tokenizer"
        )
    ver = verifier if verifier is not None else SpeculativeVerifier()
    if drafter is not None:
        ver.check_construction(DraftLaw.IID, 1)
    gen = generator if generator is not None else make_generator(cfg.seed)
    eos = target.eos_token_ids if cfg.stop_at_eos else set()
    V = target.vocab_size

    target.reset()
    target.reset_stats()
    if drafter is not None:
        drafter.reset()
        drafter.reset_stats()
    stats = GenerationStats()
    ctx = [int(t) for t in prompt_ids]
    out: list[int] = []
    cur_gamma = cfg.gamma
    t_start = time.perf_counter()
    while len(out) < cfg.max_new_tokens:
        remaining = cfg.max_new_tokens - len(out)
        gamma = min(cur_gamma, remaining - 1) if drafter is not None else 0
        proposal = drafter.propose(ctx, gamma, cfg.sampling, gen) if gamma > 0 else DraftProposal([])  # type: ignore[union-attr]
        d = proposal.tokens
        k = len(d)
        logits = target.logits_after(ctx, d)  # [k + 1, V]
        p = standardize(logits, cfg.sampling)  # [k + 1, V]
        stats.iterations += 1
        if k:
            q = proposal.draft_probs(V, p.dtype)  # [k, V]
            drafts = torch.tensor(d, dtype=torch.int64).unsqueeze(-1)  # [k, 1]
            res = ver.verify(p[:k], q, drafts, gen)
            accepted = res.accepted.tolist()
            n_acc = accepted.index(False) if False in accepted else k
            for i in range(min(n_acc + 1, k)):
                stats.record_position(i, accepted[i])
            stats.drafted += k
            stats.accepted += n_acc
            cur_gamma = cfg.next_gamma(cur_gamma, k, n_acc)
            if n_acc < k:
                emitted = d[:n_acc] + [int(res.tokens[n_acc])]
            else:
                emitted = d + [int(sample_categorical(p[k:k + 1], gen)[0])]
        else:
            emitted = [int(sample_categorical(p[0:1], gen)[0])]
        emitted, stop = _finish_tokens(emitted, remaining, eos)
        out.extend(emitted)
        ctx.extend(emitted)
        if on_tokens is not None:
            on_tokens(emitted)
        if stop:
            break
    stats.total_time_s = time.perf_counter() - t_start
    stats.new_tokens = len(out)
    stats.target_calls = target.forward_calls
    stats.target_time_s = target.forward_time_s
    if drafter is not None:
        stats.draft_calls = drafter.calls
        stats.draft_time_s = drafter.draft_time_s
    text = target.decode(out) if target.tokenizer is not None else ""
    return GenerationResult(tokens=out, text=text, stats=stats,
                            method="speculative" if drafter is not None else "autoregressive")


def autoregressive_generate(
    target: CausalLM,
    prompt_ids: Sequence[int],
    config: GenerationConfig | None = None,
    *,
    generator: torch.Generator | None = None,
    on_tokens: TokenCallback | None = None,
) -> GenerationResult:
    """Plain autoregressive decoding through the same model wrapper (the speedup baseline):
    one target forward pass per generated token, sampled from the standardized distribution."""
    return speculative_generate(target, None, prompt_ids, config, generator=generator, on_tokens=on_tokens)
