"""``specot bench acceptance``: Hu et al. 2025 Table 1 and Figures 1–2 on the embedded target.

Protocol (per temperature T):

1. For each prompt, the target samples a continuation at temperature T (plain autoregressive
   decoding, seeded). The target and every draft are then run over prompt + continuation (teacher
   forcing), giving at each continuation position the target's next-token distribution ``p`` and
   the draft's ``q``, both standardized at T (the same transform). These (p, q) pairs are
   the positions the draft would face when the target generates.
2. For every number of drafts n, draft law (``iid``, ``wor``, ``greedy``; n = 1 is one draw, law
   ``single``) and lossless verifier valid for that law (``speculative`` at n = 1; ``kseq``,
   ``rrs``, ``importance`` and ``ot`` for iid; ``rrs_wor`` for wor; ``greedy`` for greedy), the acceptance
   per position is computed **exactly** where a closed form exists (speculative, kseq, rrs, ot, greedy)
   and otherwise (``rrs_wor``, ``importance``: :data:`MC_VERIFIERS`) as a Rao–Blackwellised
   Monte-Carlo average of ``P(accept | drafts)`` over ``mc_samples`` draft tuples per position
   (``acceptance_method`` says which). ``importance`` (Khisti et al., ICLR 2025: importance-weighted
   selection of one draft, then speculative sampling against the selection's exact marginal) is
   valid for i.i.d. drafts only; its closed-form selected-draft acceptance ``Σ min(p, q_IS)`` — a
   lower bound, since a correction can also land on an unselected draft — is reported beside it as
   ``acceptance_lower_bound`` (``null`` for the other verifiers). All of it runs on q's most
   probable tokens (the
   dropped tail holds at most ``vocab_eps`` = 1e-4 of the mass q has outside its top n−1 tokens;
   renormalised), with p's mass on every other token lumped into one token that q never drafts —
   exact for the truncated q, within n·vocab_eps of the full one, see :func:`reduce_vocab`. The optimal acceptance ``α*`` for the law
   (:func:`specot.theory.optimal_acceptance`) is computed at the same positions, so the gap
   ``α* − α`` is paired. A **sampled** acceptance (one real draw of the drafts and one run of the
   verifier per position) is reported beside the exact value as an end-to-end check.
3. Means over positions come with 95% confidence intervals (normal approximation over positions;
   the positions of one continuation are not independent, so the intervals are optimistic — the
   per-prompt spread is also reported).

Drafts (``drafts=`` names, see :func:`load_bench_draft`): ``distilled`` (the shipped distilled
draft, skipped with a message when it is not installed), ``ngram-lm`` (a stochastic interpolated
trigram model — Witten–Bell back-off to add-one unigrams of the 2000 most frequent tokens — over
``pydoc_data.topics`` plus a cache of the current context: the stochastic twin of the n-gram
drafter, with thousands of tokens in its support so every law applies), ``ngram`` (specot's deterministic n-gram drafter: a one-hot q, so only n = 1; positions
where it proposes nothing count as rejections), ``early-exit:K`` (the target's first K layers and
its head, untrained), or a draft model directory / hub id.

For laws that draw distinct drafts (wor, greedy) a position where q has fewer than n tokens with
positive mass uses n' = support size drafts — what the tree engine does (``n_effective_mean``).

JSON result (``schema_version`` 1)::

    {"benchmark": "acceptance", "schema_version": 1, "command", "target", "target_dtype",
     "prompt_set", "prompt_set_description", "prompts", "max_new_tokens", "temperatures", "ns",
     "seed", "mc_samples", "vocab_eps", "reduced_vocab_mean": {draft: K}, "load_avg_start", "load_avg_end", "elapsed_s", "torch_threads",
     "drafts": [{"name", "kind", "available", "reason"}],
     "positions": {draft: {T: count}},
     "rows": [{"draft", "temperature", "n", "law", "verifier", "positions", "n_effective_mean",
               "acceptance", "acceptance_ci95": [lo, hi], "acceptance_method", "acceptance_lower_bound",
               "sampled_acceptance", "sampled_ci95", "alpha_star", "alpha_star_ci95",
               "gap", "gap_ci95", "per_prompt_sd"}],
     "skipped": [{"draft", "n", "law", "reason"}],
     "complete", "cells_done", "cells_total", "environment": {date, commit, ...}, "runs": [...]}

A cell is one prompt at one temperature (every draft); with ``journal`` (the CLI's
``OUT/acceptance.jsonl``) each finished cell is appended as the count, sum and sum of squares of
its per-position values, so an interrupted run keeps its cells, ``specot bench results`` reads them
and the same command resumes (:mod:`specot_lab.bench.journal`). Each cell's random draws come from
a generator seeded by (seed, prompt, temperature).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
import scipy.stats

from specot.laws import sample_drafts
from collections import Counter, defaultdict
from specot.api import load_drafter, load_target
from specot.plan.corpus import pydoc_texts
import copy
from specot.models.hf import CausalLM
from specot.drafting import ModelDrafter, NGramDrafter
from specot.sampling import SamplingConfig, standardize
from specot.theory import optimal_acceptance
from specot.verifiers import get_verifier
from specot.verifiers.importance import importance_selection
from tqdm import tqdm
from specot.engine import GenerationConfig, autoregressive_generate
from specot.envinfo import load_average
from ..corpus import describe_prompt_set
from .journal import Journal, load_result
from .runinfo import run_info

__all__ = [
    "LAW_VERIFIERS",
    "MC_VERIFIERS",
    "NGramLM",
    "BenchDraft",
    "load_bench_draft",
    "run_acceptance_bench",
    "acceptance_result",
    "load_acceptance_result",
    "mean_ci",
    "early_exit_draft",
    "one_and_two_greedy",
]

#: Lossless verifiers benchmarked for each draft law (n >= 2); n = 1 uses ``speculative``.
#: ``importance`` is valid for i.i.d. drafts only (its selection marginal assumes independent draws).
#: ``ot`` (the exactly optimal i.i.d. verifier, :mod:`specot.verifiers.ot`) has an exact closed-form
#: acceptance, α*_iid itself, so its row's gap is zero up to rounding: the row the others are read against.
LAW_VERIFIERS: dict[str, tuple[str, ...]] = {"iid": ("kseq", "rrs", "importance", "ot"), "wor": ("rrs_wor",),
                                             "greedy": ("greedy",)}
#: Verifiers without a closed-form acceptance at these vocabulary sizes (n >= 2): Rao–Blackwellised
#: Monte-Carlo over ``mc_samples`` draft tuples per position. (``importance``'s own ``acceptance`` is
#: exact only by enumerating every draft tuple, ≤ 5000 of them, far fewer than K^n here.)
MC_VERIFIERS: frozenset[str] = frozenset({"rrs_wor", "importance"})


def one_and_two_greedy(p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact first-position acceptance per row of ``p, q [N, V]``: one draft, Σ min(p, q) (Leviathan
    et al. 2023, Sec. 3), and two GREEDY-law children, p(top) + Σ_{v ≠ top} min(p(v), q_rest(v))
    (Hu et al. 2025, Theorem 7; q_rest = q without its top token, renormalised; 0 where nothing is
    left). Returns two ``[N]`` tensors."""
    one = torch.minimum(p, q).sum(-1)
    top = q.argmax(-1, keepdim=True)
    rest = q.scatter(-1, top, 0.0)
    rest = rest / rest.sum(-1, keepdim=True).clamp_min(1e-30)
    two = p.gather(-1, top)[:, 0] + torch.minimum(p.scatter(-1, top, 0.0), rest).sum(-1)
    return one, two


def mean_ci(x: Sequence[float] | np.ndarray, *, student_t: bool = False) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean and its 95% confidence interval, by the normal approximation or,
    with ``student_t`` (few samples), by Student's t with ``n − 1`` degrees of freedom."""
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(a.mean())
    if a.size < 2:
        return m, m, m
    z = float(scipy.stats.t.ppf(0.975, a.size - 1)) if student_t else 1.96
    h = z * float(a.std(ddof=1)) / math.sqrt(a.size)
    return m, m - h, m + h


# ----------------------------------------------------------------------------- drafts
class NGramLM:
    """A stochastic interpolated trigram LM over token ids (Witten–Bell back-off to add-one unigrams)
    with a cache of the current context (its n-gram counts are added with weight ``cache_weight``).

    :meth:`logits` returns ``log q`` for every position of a sequence, so it standardizes like a
    model's logits (temperature, top-k, top-p). The unigram floor covers the ``unigram_top`` most
    frequent corpus tokens (add-one on them); other tokens get mass only from trigram / bigram
    continuations seen in the corpus or the context, and q = 0 (logit −inf) elsewhere.
    """

    def __init__(self, sequences: Sequence[Sequence[int]], vocab_size: int, cache_weight: float = 3.0,
                 unigram_top: int = 2000) -> None:

        self.V = int(vocab_size)
        self.cache_weight = float(cache_weight)
        uni = np.zeros(self.V, dtype=np.float64)
        self.bi: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
        self.tri: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
        for seq in sequences:
            s = [int(t) for t in seq]
            np.add.at(uni, np.asarray(s, dtype=np.int64), 1.0)
            for i in range(1, len(s)):
                self.bi[(s[i - 1],)][s[i]] += 1
                if i >= 2:
                    self.tri[(s[i - 2], s[i - 1])][s[i]] += 1
        keep = np.argsort(-uni, kind="stable")[:unigram_top]
        u2 = np.zeros_like(uni)
        u2[keep] = uni[keep] + 1.0
        self.unigram = u2 / u2.sum()

    @staticmethod
    def _wb(lower: np.ndarray, counts: dict[int, float]) -> np.ndarray:
        """Witten–Bell: ``(c(x) + u·lower(x)) / (c + u)`` with u distinct continuations."""
        if not counts:
            return lower
        tot = float(sum(counts.values()))
        u = float(len(counts))
        out = lower * (u / (tot + u))
        idx = np.fromiter(counts.keys(), dtype=np.int64)
        out[idx] += np.fromiter(counts.values(), dtype=np.float64) / (tot + u)
        return out

    def _merged(self, table: dict, cache: dict, key: tuple[int, ...]) -> dict[int, float]:
        out: dict[int, float] = dict(table.get(key, {}))
        for t, c in cache.get(key, {}).items():
            out[t] = out.get(t, 0.0) + self.cache_weight * c
        return out

    def logits(self, ids: Sequence[int], start: int) -> torch.Tensor:
        """``log q [len(ids) − start, V]``: row i predicts ``ids[start + i]`` from ``ids[:start + i]``."""

        ids = [int(t) for t in ids]
        cache_bi: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
        cache_tri: dict[tuple[int, ...], Counter[int]] = defaultdict(Counter)
        for i in range(1, start):
            cache_bi[(ids[i - 1],)][ids[i]] += 1
            if i >= 2:
                cache_tri[(ids[i - 2], ids[i - 1])][ids[i]] += 1
        rows = []
        for t in range(start, len(ids)):
            p1 = self._wb(self.unigram, self._merged(self.bi, cache_bi, (ids[t - 1],)))
            p2 = self._wb(p1, self._merged(self.tri, cache_tri, (ids[t - 2], ids[t - 1]))) if t >= 2 else p1
            with np.errstate(divide="ignore"):
                rows.append(np.log(p2 / p2.sum()))
            cache_bi[(ids[t - 1],)][ids[t]] += 1
            if t >= 2:
                cache_tri[(ids[t - 2], ids[t - 1])][ids[t]] += 1
        return torch.from_numpy(np.stack(rows)).to(torch.float32) if rows else torch.empty(0, self.V)


@functools.lru_cache(maxsize=2)
def _pydoc_ngram_lm(tokenizer_key: int, vocab_size: int, tokenizer: Any) -> NGramLM:

    seqs = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in pydoc_texts()]
    return NGramLM(seqs, vocab_size)


def early_exit_draft(target: Any, layers: int) -> Any:
    """An untrained early-exit draft: a copy of the target's first ``layers`` decoder layers, its
    final norm and head (a :class:`CausalLM` with its own KV cache; HF's ``assistant_early_exit``
    drafts the same way inside the target)."""


    hf = target.model
    n_layers = len(hf.model.layers)
    if not 1 <= layers < n_layers:
        raise ValueError(f"early-exit:K needs 1 <= K < {n_layers}, got {layers}")
    keep = hf.model.layers[:layers]
    rest = hf.model.layers[layers:]
    hf.model.layers = keep  # shallow: deepcopy only the kept layers
    try:
        clone = copy.deepcopy(hf)
    finally:
        hf.model.layers = torch.nn.ModuleList(list(keep) + list(rest))
    clone.config.num_hidden_layers = layers
    if hasattr(clone.config, "layer_types") and clone.config.layer_types:
        clone.config.layer_types = clone.config.layer_types[:layers]
    return CausalLM(model=clone, tokenizer=target.tokenizer, name=f"early-exit-{layers}")


@dataclass
class BenchDraft:
    """A draft for the benchmarks: ``kind`` is ``model`` (``obj`` a CausalLM), ``ngram-lm``
    (an :class:`NGramLM`), ``ngram`` (an NGramDrafter); ``available`` False with ``reason``."""

    name: str
    kind: str
    obj: Any = None
    available: bool = True
    reason: str | None = None

    def info(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "available": self.available, "reason": self.reason}


def load_bench_draft(spec: str, target: Any, *, dtype: str = "float32", device: str = "cpu") -> BenchDraft:
    """Resolve a draft name (see module docstring). Two drafts exist only in the lab (``ngram-lm``,
    ``early-exit:K``); every other name is resolved by :func:`specot.api.load_drafter`, the one
    draft registry. A draft that cannot be loaded (e.g. the distilled draft is not installed) gives
    ``available=False`` with the reason, instead of raising."""

    if spec == "ngram-lm":
        if target.tokenizer is None:
            return BenchDraft(spec, "ngram-lm", None, False, "the target has no tokenizer to build the n-gram LM")
        return BenchDraft(spec, "ngram-lm", _pydoc_ngram_lm(id(target.tokenizer), target.vocab_size, target.tokenizer))
    if spec.startswith("early-exit"):
        k = int(spec.partition(":")[2] or 4)
        return BenchDraft(spec, "model", early_exit_draft(target, k))
    corpus = "pydoc" if target.tokenizer is not None else None
    try:
        drafter = load_drafter(spec, target, dtype=dtype, device=device, ngram_corpus=corpus)
    except (FileNotFoundError, OSError) as exc:
        return BenchDraft(spec, "model", None, False, f"draft {spec!r} not available: {exc}")
    if isinstance(drafter, NGramDrafter):
        return BenchDraft(spec, "ngram", drafter)
    if isinstance(drafter, ModelDrafter):
        if drafter.model.tokenizer is None:
            drafter.model.tokenizer = target.tokenizer
        return BenchDraft(spec, "model", drafter.model)
    return BenchDraft(spec, "drafter", None, False,
                      f"{type(drafter).__name__} has no teacher-forced draft distribution q to benchmark here")


def _draft_logits(draft: BenchDraft, ids: list[int], n_prompt: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(logits [R, V], valid [R])`` of the draft over the continuation ``ids[n_prompt:]``;
    for the deterministic n-gram drafter ``(None, tokens [R])`` with −1 where it proposes nothing."""
    if draft.kind == "model":
        m = draft.obj
        m.reset()
        return m.logits_after(ids[:n_prompt], ids[n_prompt:-1]).float(), None
    if draft.kind == "ngram-lm":
        return draft.obj.logits(ids, n_prompt), None

    toks = []
    for t in range(n_prompt, len(ids)):
        prop = draft.obj.propose(ids[:t], 1, SamplingConfig())
        toks.append(prop.tokens[0] if prop.tokens else -1)
    return None, torch.tensor(toks, dtype=torch.int64)


# ----------------------------------------------------------------------------- measurement
def reduce_vocab(p: torch.Tensor, q: torch.Tensor, eps: float = 1e-4, min_keep: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """``(p', q') [R, K + 1]``: q restricted to its K most probable tokens, renormalised; p on the
    same tokens plus ONE bucket column holding all of p's remaining mass, with q' = 0 there.

    K is the smallest count such that, in every row, the dropped tail of q holds at most ``eps``
    times the mass ``r`` that q has outside its top ``min_keep − 1`` tokens (and K >= ``min_keep``).
    The relative bound matters: the laws without replacement and greedy draw their later drafts
    from q renormalised after removing the top tokens, so at low temperature a tail that is tiny
    in absolute terms is most of what they sample from. With it, every conditional draw law moves
    by at most ``eps`` in total variation, so each acceptance by at most ``n·eps``.

    Lumping tokens with q = 0 into one is exact for every acceptance computed here (they are never
    drafted: they enter only through sums of p — the residuals of speculative sampling, RRS and
    k-Seq, and α*, whose minimising set never contains them).
    """
    V = q.shape[-1]
    qs, order = q.sort(-1, descending=True)
    m = max(min(min_keep, V) - 1, 0)
    r = (1.0 - qs[:, :m].sum(-1, keepdim=True)).clamp_min(0.0)  # mass outside the top (min_keep − 1)
    tail = (1.0 - qs.cumsum(-1)).clamp_min(0.0)  # mass after the first k+1 tokens
    need = (tail > eps * r + 1e-15).sum(-1) + 1
    need = torch.minimum(need, (qs > 0).sum(-1))  # never beyond q's support
    K = int(need.max().clamp(min=min(min_keep, V), max=V))
    idx = order[:, :K]
    qr = qs[:, :K]
    qr = qr / qr.sum(-1, keepdim=True)
    pk = p.gather(-1, idx)
    rest = (1.0 - pk.sum(-1, keepdim=True)).clamp_min(0.0)
    pr = torch.cat([pk, rest], -1)
    pr = pr / pr.sum(-1, keepdim=True)
    return pr, torch.cat([qr, torch.zeros_like(rest)], -1)


@np.errstate(divide="ignore", invalid="ignore")
def _alpha_star(p: torch.Tensor, q: torch.Tensor, n_eff: torch.Tensor, law: str) -> np.ndarray:

    p64, q64 = p.double().numpy(), q.double().numpy()
    out = np.empty(p.shape[0])
    for b in range(p.shape[0]):
        k = int(n_eff[b])
        if k == 1:
            out[b] = float(np.minimum(p64[b], q64[b]).sum())
        else:
            out[b] = optimal_acceptance(p64[b], q64[b], k, law).alpha  # type: ignore[union-attr]
    return out


def _verifier_acceptance(name: str, law: str, p: torch.Tensor, q: torch.Tensor, n_eff: torch.Tensor,
                         mc_samples: int, gen: torch.Generator) -> tuple[np.ndarray, np.ndarray, str, np.ndarray | None]:
    """Per-position acceptance (exact or Rao–Blackwell MC), one sampled accept flag each, the
    method, and (``importance`` only, else ``None``) the closed-form selected-draft acceptance
    ``Σ min(p, q_IS)`` per position, a lower bound on the acceptance."""

    ver = get_verifier(name)
    exact = np.empty(p.shape[0])
    sampled = np.empty(p.shape[0])
    lower = np.empty(p.shape[0]) if name == "importance" else None
    method = "exact"
    for k in sorted(set(n_eff.tolist())):
        rows = (n_eff == k).nonzero().squeeze(-1)
        pk, qk = p[rows], q[rows]
        dl = "iid" if k == 1 else law
        if lower is not None:  # the selection's exact marginal q_IS, solved once per group
            q_is = importance_selection(pk, qk, k)[0]
            lower[rows.numpy()] = torch.minimum(pk.double(), q_is).sum(-1).numpy()  # Σ min(p, q_IS)
        if name in MC_VERIFIERS and k > 1:
            method = f"rao-blackwell-mc({mc_samples}/position)"
            S = mc_samples
            vals = torch.zeros(rows.numel(), dtype=torch.float64)
            if name == "importance":
                # P(accept | drafts) = P(selected draft accepted | drafts) + P(correction is another draft
                # | drafts); the first term's mean is the closed form Σ min(p, q_IS) (the lower bound):
                # only the second, small term is sampled (a control variate — same mean, less noise)
                method = f"rao-blackwell-mc({mc_samples}/position; selected-draft term closed-form)"
                a_sel = (pk.double() / q_is.clamp_min(torch.finfo(torch.float64).tiny)).clamp_max(1.0)
            for _ in range(S):
                d = sample_drafts(qk, k, dl, gen)
                acc_d = ver.accept_probability(pk, qk, d).double()  # type: ignore[attr-defined]
                if name == "importance":
                    sel = (ver.selection_law(pk, qk, d) * a_sel.gather(-1, d)).sum(-1)  # type: ignore[attr-defined]
                    acc_d = (acc_d - sel).clamp_min(0.0)
                vals += acc_d
            exact[rows.numpy()] = (vals / S).numpy()
            if lower is not None:
                exact[rows.numpy()] += lower[rows.numpy()]
        else:
            exact[rows.numpy()] = ver.acceptance(pk, qk, k).value.double().numpy()
        d = sample_drafts(qk, k, dl, gen)
        sampled[rows.numpy()] = ver.verify(pk, qk, d, gen).accepted.double().numpy()
    return exact, sampled, method, lower


def _moments(x: np.ndarray | None) -> list[float] | None:
    """``[count, sum, sum of squares]`` of ``x`` in float64 (``None`` for ``None``): what a cell
    keeps of an array of per-position values, enough for the mean and its CI over all cells."""
    if x is None:
        return None
    a = np.asarray(x, dtype=np.float64)
    return [int(a.size), float(a.sum()), float((a * a).sum())]


def _moments_ci(parts: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """:func:`mean_ci` of the values summarised by the :func:`_moments` of several cells."""
    n, s, ss = (float(sum(p[j] for p in parts)) for j in range(3))
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    m = s / n
    if n < 2:
        return m, m, m
    h = 1.96 * math.sqrt(max(ss - s * s / n, 0.0) / (n - 1)) / math.sqrt(n)
    return m, m - h, m + h


def _deterministic_entries(d: Any, p: torch.Tensor, toks: torch.Tensor, temp: float, ns: Sequence[int],
                           gen: torch.Generator) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A one-hot draft (``toks`` [R], −1 where it proposes nothing): n = 1 only, α = α* = p(x)."""
    R = p.shape[0]
    ok = toks >= 0
    px = torch.where(ok, p.gather(-1, toks.clamp_min(0).unsqueeze(-1)).squeeze(-1), torch.zeros(R, dtype=p.dtype))
    u = torch.rand(R, generator=gen)
    ex = px.double().numpy()
    entry = {"key": [d.name, float(temp), 1, "single", "speculative"], "exact": _moments(ex),
             "sampled": _moments(((u < px) & ok).double().numpy()), "star": _moments(ex),  # one draw: α* = p(x)
             "gap": _moments(np.zeros(R)), "n_eff": float(R), "lower": None, "method": "exact",
             "prompt_mean": float(px.mean())}
    skipped = [{"draft": d.name, "n": n, "law": "*", "reason": "deterministic draft (one-hot q): one draft per position"}
               for n in ns if n > 1]
    return [entry], skipped


def _model_entries(d: Any, p: torch.Tensor, lq: torch.Tensor, temp: float, sc: SamplingConfig, ns: Sequence[int],
                   mc_samples: int, alpha_star: bool, vocab_eps: float, gen: torch.Generator) -> tuple[list[dict[str, Any]], int]:
    """Every (n, law, verifier) of a draft with logits ``lq`` at one prompt's positions; returns the
    entries and the size of the reduced vocabulary."""
    R = p.shape[0]
    q = standardize(lq.double(), sc)
    pr, qr = reduce_vocab(p, q, vocab_eps, max(ns))
    support = (qr > 0).sum(-1)
    out = []
    for n in ns:
        for law in (("single",) if n == 1 else tuple(LAW_VERIFIERS)):
            n_eff = torch.full((R,), n, dtype=torch.int64) if law in ("single", "iid") else support.clamp_max(n)
            star = _alpha_star(pr, qr, n_eff, "iid" if law == "single" else law) if alpha_star else np.full(R, np.nan)
            for vname in (("speculative",) if law == "single" else LAW_VERIFIERS[law]):
                ex, sa, method, lb = _verifier_acceptance(vname, "iid" if law == "single" else law, pr, qr, n_eff,
                                                          mc_samples, gen)
                out.append({"key": [d.name, float(temp), n, law, vname], "exact": _moments(ex), "sampled": _moments(sa),
                            "star": _moments(star), "gap": _moments(star - ex), "n_eff": float(n_eff.sum()),
                            "lower": _moments(lb), "method": method, "prompt_mean": float(ex.mean())})
    return out, int(pr.shape[-1])


def _cell(tgt: Any, live: Sequence[Any], ids: list[int], i: int, temp: float, ns: Sequence[int], max_new_tokens: int,
          seed: int, mc_samples: int, alpha_star: bool, vocab_eps: float) -> dict[str, Any]:
    """One prompt at one temperature: the target's continuation, then every draft's entries. Its
    random draws come from a generator seeded by (seed, prompt, temperature), so a resumed run draws
    what an uninterrupted one would."""
    sc = SamplingConfig(temperature=float(temp))
    cell_seed = seed + 1000 * i + int(round(temp * 100))
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, gamma=1, seed=cell_seed, sampling=sc)
    cont = autoregressive_generate(tgt, ids, cfg).tokens
    cell: dict[str, Any] = {"kind": "cell", "temperature": float(temp), "prompt": i, "tokens": len(cont),
                            "positions": {}, "reduced": {}, "entries": [], "skipped": [], "load_average": load_average()}
    if not cont:
        return cell
    gen = torch.Generator().manual_seed(10_007 * seed + cell_seed)
    full = list(ids) + list(cont)
    tgt.reset()
    p = standardize(tgt.logits_after(ids, cont[:-1]).double(), sc)  # [R, V] float64
    for d in live:
        cell["positions"][d.name] = int(p.shape[0])
        lq, toks = _draft_logits(d, full, len(ids))
        if toks is not None:  # deterministic draft: one-hot q, n = 1 only
            entries, skipped = _deterministic_entries(d, p, toks, temp, ns, gen)
            cell["skipped"] += skipped
        else:
            entries, k = _model_entries(d, p, lq, temp, sc, ns, mc_samples, alpha_star, vocab_eps, gen)
            cell["reduced"][d.name] = k
        cell["entries"] += entries
    return cell


def run_acceptance_bench(*, target: Any = None, drafts: Sequence[str | BenchDraft] = ("distilled", "ngram-lm", "ngram"),
                         prompts: list[Any], prompt_set: str = "custom", temperatures: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 1.0),
                         ns: Sequence[int] = (1, 2, 3, 4, 8), max_new_tokens: int = 64, seed: int = 0,
                         dtype: str = "float32", mc_samples: int = 4, alpha_star: bool = True, vocab_eps: float = 1e-4,
                         progress: bool = True, log: Any = sys.stderr, journal: str | os.PathLike[str] | None = None,
                         fresh: bool = False) -> dict[str, Any]:
    """Run the acceptance benchmark (module docstring); returns the JSON-ready dict.

    ``target``: a :class:`CausalLM` or a name for :func:`specot.load_target`; ``drafts``: names or
    ready :class:`BenchDraft` s. With ``journal`` (a ``.jsonl`` path, :mod:`specot_lab.bench.journal`)
    each finished cell (one prompt at one temperature, every draft) is appended as it is measured and
    a journal of the same configuration is resumed (``fresh`` starts it over);
    :func:`load_acceptance_result` reads it back, finished or not.

    Raises:
        ValueError: the journal holds a run of another configuration.
    """
    t0 = time.perf_counter()
    config = {"target": "embedded" if target is None else str(getattr(target, "name", target)), "dtype": str(dtype),
              "drafts": [getattr(d, "name", d) for d in drafts], "prompt_set": prompt_set,
              "prompts_sha256": hashlib.sha256(json.dumps(list(prompts), ensure_ascii=False).encode()).hexdigest()[:16],
              "prompts": len(prompts), "temperatures": [float(t) for t in temperatures], "ns": [int(n) for n in ns],
              "max_new_tokens": int(max_new_tokens), "seed": int(seed), "mc_samples": int(mc_samples),
              "alpha_star": bool(alpha_star), "vocab_eps": float(vocab_eps), "torch_threads": torch.get_num_threads()}
    jr = Journal.open(journal, "acceptance", 1, config, run_info(), fresh=fresh) if journal else None
    tgt = load_target(target, dtype=dtype)
    bds = [d if isinstance(d, BenchDraft) else load_bench_draft(d, tgt, dtype=dtype) for d in drafts]
    for d in bds:
        if not d.available:
            print(f"[bench acceptance] skipping draft {d.name!r}: {d.reason}", file=log)
    live = [d for d in bds if d.available]
    encoded = [tgt.encode_prompt(p) if isinstance(p, str) and tgt.tokenizer is not None else list(p) for p in prompts]
    setup = {"target": tgt.name, "target_dtype": str(tgt.dtype).replace("torch.", ""), "prompt_set": prompt_set,
             "prompt_set_description": describe_prompt_set(prompt_set), "prompts": len(encoded),
             "drafts": [d.info() for d in bds]}
    if jr is not None and not jr.of_kind("setup"):
        jr.add({"kind": "setup", **setup})
    cells = jr.of_kind("cell") if jr is not None else []
    done = {(c["temperature"], c["prompt"]) for c in cells}
    bar = tqdm(total=len(temperatures) * len(encoded), initial=len(done), desc="bench acceptance",
               disable=not progress, file=sys.stderr)
    for temp in temperatures:
        for i, ids in enumerate(encoded):
            if (float(temp), i) in done:
                continue
            cell = _cell(tgt, live, ids, i, float(temp), ns, max_new_tokens, seed, mc_samples, alpha_star, vocab_eps)
            if jr is not None:
                jr.add(cell)
            cells.append(cell)
            bar.update()
    bar.close()
    res = acceptance_result(config, setup, cells, jr.runs() if jr is not None else [run_info()])
    res["elapsed_s"] = time.perf_counter() - t0
    return res


def _row(key: tuple, entries: list[dict[str, Any]], alpha_star: bool) -> dict[str, Any]:
    """One result row from the entries of one (draft, T, n, law, verifier) over cells."""
    dname, temp, n, law, vname = key
    m, lo, hi = _moments_ci([e["exact"] for e in entries])
    sm, slo, shi = _moments_ci([e["sampled"] for e in entries])
    am, alo, ahi = _moments_ci([e["star"] for e in entries])
    gm, glo, ghi = _moments_ci([e["gap"] for e in entries])
    positions = int(sum(e["exact"][0] for e in entries))
    lower = [e["lower"] for e in entries if e.get("lower")]
    pp = [e["prompt_mean"] for e in entries]
    method = next((e["method"] for e in entries if e["method"] != "exact"), "exact")
    return {
        "draft": dname, "temperature": temp, "n": n, "law": law, "verifier": vname, "positions": positions,
        "n_effective_mean": sum(e["n_eff"] for e in entries) / positions if positions else float("nan"),
        "acceptance": m, "acceptance_ci95": [lo, hi], "acceptance_method": method,
        "acceptance_lower_bound": _moments_ci(lower)[0] if lower else None,
        "sampled_acceptance": sm, "sampled_ci95": [slo, shi],
        "alpha_star": am if alpha_star else None, "alpha_star_ci95": [alo, ahi] if alpha_star else None,
        "gap": gm if alpha_star else None, "gap_ci95": [glo, ghi] if alpha_star else None,
        "per_prompt_sd": float(np.std(pp, ddof=1)) if len(pp) > 1 else 0.0,
    }


def acceptance_result(config: dict[str, Any], setup: dict[str, Any], cells: list[dict[str, Any]],
                      runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The result JSON (module docstring) from a run's cells, finished or not (``complete``,
    ``cells_done`` of ``cells_total``; ``runs``: the processes that measured them)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    positions: dict[str, dict[str, int]] = {d["name"]: {} for d in setup["drafts"] if d["available"]}
    reduced: dict[str, list[int]] = {}
    skipped: dict[tuple, dict[str, Any]] = {}
    for c in cells:
        for e in c["entries"]:
            groups.setdefault(tuple(e["key"]), []).append(e)
        for name, r in c["positions"].items():
            t = f"{c['temperature']:g}"
            positions.setdefault(name, {})[t] = positions.get(name, {}).get(t, 0) + r
        for name, k in c["reduced"].items():
            reduced.setdefault(name, []).append(k)
        for s in c["skipped"]:
            skipped.setdefault((s["draft"], s["n"]), s)
    rows = [_row(k, v, config["alpha_star"]) for k, v in groups.items()]
    rows.sort(key=lambda r: (r["draft"], r["temperature"], r["n"], r["law"], r["verifier"]))
    total = len(config["temperatures"]) * setup["prompts"]
    loads = [c["load_average"] for c in cells if c.get("load_average")]
    return {
        "benchmark": "acceptance", "schema_version": 1, **setup,
        "max_new_tokens": config["max_new_tokens"], "temperatures": config["temperatures"], "ns": config["ns"],
        "seed": config["seed"], "mc_samples": config["mc_samples"], "torch_threads": config["torch_threads"],
        "positions": positions, "vocab_eps": config["vocab_eps"],
        "reduced_vocab_mean": {k: float(np.mean(v)) for k, v in reduced.items() if v},
        "rows": rows, "skipped": list(skipped.values()), "complete": len(cells) >= total, "cells_done": len(cells),
        "cells_total": total, "load_avg_start": runs[0].get("load_average"),
        "load_avg_end": loads[-1] if loads else runs[-1].get("load_average"), "elapsed_s": None,
        "environment": runs[0], "runs": runs,
    }


def load_acceptance_result(path: str | os.PathLike[str]) -> dict[str, Any]:
    """An acceptance result from ``path``: ``acceptance.json``, the journal ``acceptance.jsonl``
    (finished or interrupted: :func:`acceptance_result` of its cells) or a directory holding either
    (:func:`~specot_lab.bench.journal.load_result`).

    Raises:
        FileNotFoundError: nothing readable at ``path``.
        ValueError: a file of another benchmark, or a journal without a measured cell.
    """
    run = load_result(path, "acceptance")
    return run if isinstance(run, dict) else acceptance_result(run.config, run.setup, run.cells, run.runs)
