"""specot's chain verifiers on vLLM's flattened speculative batch.

vLLM hands its rejection sampler, for a batch of ``B`` requests with ``n_b`` draft tokens each
(``T = Σ n_b``), the draft tokens ``[T]``, the draft law ``[T, V]`` (or none: a deterministic
draft such as n-gram or suffix lookup, verified as a one-hot q), the target logits at the draft
positions ``[T, V]`` (after vLLM's temperature / top-k / top-p transform) and one bonus token per
request ``[B, 1]`` (already sampled from the target at the last position). It returns ``[B, γ + 1]``
token ids, ``-1`` after the first rejection.

:func:`verify_chains` does the same with any single-draft :class:`specot.verifiers.Verifier`,
position by position (Leviathan et al. 2023, Algorithm 1: accept the longest prefix that passes,
then the verifier's correction, or the bonus token when every draft passed):

* greedy requests (temperature 0): accept a draft iff it is the target's argmax, else emit the
  argmax — vLLM's own greedy rule, so greedy output is token for token vLLM's;
* the others: ``verifier.verify(p, q, draft)`` on the still-alive requests at each position,
  each seeded request with its own ``torch.Generator`` (vLLM's per-request seeds).

A padded draft (id ``-1``) is a rejection whose emitted token is drawn from p, as in vLLM.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import Tensor

from specot.sampling import sample_categorical

__all__ = ["verify_chains", "GREEDY_EPS"]

#: Temperatures below this are greedy (vLLM's ``_SAMPLING_EPS``).
GREEDY_EPS = 1e-5


def _greedy_rows(out: Tensor, starts: list[int], counts: list[int], drafts: list[int], argmax: list[int],
                 bonus: list[int], reqs: Sequence[int]) -> None:
    """vLLM's greedy rule for the requests ``reqs``, written into ``out [B, γ + 1]`` in place."""
    for b in reqs:
        s, n = starts[b], counts[b]
        for j in range(n):
            t = argmax[s + j]
            out[b, j] = t
            if drafts[s + j] != t:
                break
        else:
            out[b, n] = bonus[b]


def _draft_law(p_rows: Tensor, draft_probs: Tensor | None, rows: Tensor, x: Tensor) -> Tensor:
    """q ``[R, V]`` of the draft tokens ``x [R]``: vLLM's draft probabilities, or one-hot on x (a
    deterministic draft). A row whose q(x) is not positive (a float32 underflow of a sampled draft)
    falls back to one-hot, so no verifier sees a draft outside its law's support."""
    onehot = torch.zeros_like(p_rows).scatter_(-1, x.clamp_min(0).unsqueeze(-1), 1.0)
    if draft_probs is None:
        return onehot
    q = draft_probs[rows].to(p_rows.dtype)
    bad = q.gather(-1, x.clamp_min(0).unsqueeze(-1)).squeeze(-1) <= 0
    return torch.where(bad.unsqueeze(-1), onehot, q) if bool(bad.any()) else q


def _verify_rows(verifier, p: Tensor, q: Tensor, x: Tensor, gen: torch.Generator | None) -> tuple[list[int], list[bool]]:
    """Verify R rows; a padded draft (x < 0) emits a token drawn from p (a rejection)."""
    tokens = torch.empty_like(x)
    accepted = torch.zeros_like(x, dtype=torch.bool)
    pad = x < 0
    if bool(pad.any()):
        tokens[pad] = sample_categorical(p[pad], gen)
    ok = ~pad
    if bool(ok.any()):
        res = verifier.verify(p[ok], q[ok], x[ok].unsqueeze(-1), gen)
        tokens[ok] = res.tokens
        accepted[ok] = res.accepted
    return tokens.tolist(), accepted.tolist()


def verify_chains(verifier, draft_token_ids: Tensor, num_draft_tokens: Sequence[int], max_spec_len: int,
                  draft_probs: Tensor | None, target_logits: Tensor, bonus_token_ids: Tensor,
                  temperature: Tensor | None, generators: Mapping[int, torch.Generator]) -> Tensor:
    """Verify one draft chain per request with ``verifier`` (module docstring).

    Args:
        verifier: a single-draft :class:`specot.verifiers.Verifier` (``speculative``, ``lenient``,
            ``mentored``).
        draft_token_ids: ``[T]`` draft tokens, request after request.
        num_draft_tokens: ``n_b`` per request, ``[B]`` (0 allowed).
        max_spec_len: γ, the widest chain (output width γ + 1).
        draft_probs: ``[T, V]`` draft law, or ``None`` (deterministic drafts, one-hot q).
        target_logits: ``[T, V]`` target logits after vLLM's sampling transform.
        bonus_token_ids: ``[B, 1]`` bonus tokens sampled from the target after the last draft.
        temperature: ``[B]`` per-request temperature (``< GREEDY_EPS``: greedy), or ``None``
            (every request greedy).
        generators: request index → its seeded ``torch.Generator`` (others use the global RNG).

    Returns:
        int32 ``[B, max_spec_len + 1]``: the emitted tokens of each request, ``-1`` after them.
    """
    B, dev = len(num_draft_tokens), target_logits.device
    counts = [int(n) for n in num_draft_tokens]
    starts = [0] * B
    for b in range(1, B):
        starts[b] = starts[b - 1] + counts[b - 1]
    out = torch.full((B, max_spec_len + 1), -1, dtype=torch.int64)
    drafts = draft_token_ids.to(torch.int64).tolist()
    bonus = bonus_token_ids.reshape(-1).to(torch.int64).tolist()
    greedy = [True] * B if temperature is None else (temperature.float() < GREEDY_EPS).tolist()
    g_reqs = [b for b in range(B) if greedy[b]]
    if g_reqs:
        _greedy_rows(out, starts, counts, drafts, target_logits.argmax(-1).tolist(), bonus, g_reqs)
    alive = [b for b in range(B) if not greedy[b]]
    if alive:
        x_all = draft_token_ids.to(device=dev, dtype=torch.int64)
        for j in range(max_spec_len):
            act = [b for b in alive if counts[b] > j]
            if not act:
                break
            groups: dict[int | None, list[int]] = {}
            for b in act:
                groups.setdefault(b if b in generators else None, []).append(b)
            rejected: set[int] = set()
            for key, reqs in groups.items():
                rows = torch.tensor([starts[b] + j for b in reqs], device=dev)
                p = torch.softmax(target_logits[rows].float(), dim=-1)
                x = x_all[rows]
                toks, acc = _verify_rows(verifier, p, _draft_law(p, draft_probs, rows, x), x,
                                         None if key is None else generators[key])
                for b, t, a in zip(reqs, toks, acc):
                    out[b, j] = t
                    if not a:
                        rejected.add(b)
            alive = [b for b in alive if b not in rejected]
        for b in alive:  # every draft accepted (or none drafted): the bonus token
            out[b, counts[b]] = bonus[b]
    return out.to(torch.int32).to(dev)
