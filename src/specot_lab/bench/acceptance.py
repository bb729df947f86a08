"""``specot bench acceptance``: Hu et al. 2025 Table 1 and Figures 1–2 on the embedded target.

Protocol (per temperature T):

1. For each prompt, the target samples a continuation at temperature T (plain autoregressive
   decoding, seeded). The target and every draft are then run over prompt + continuation (teacher
   forcing), giving at each continuation position the target's next-token distribution ``p`` and
   the draft's ``q``, both standardized at T (the same transform). These (p, q) pairs are
   the positions the draft would face when the target generates.
2. For every number of drafts n, draft law (``iid``, ``wor``, ``greedy``; n = 1 is one draw, law
   ``single``) and lossless verifier valid for that law (``speculative`` at n = 1; ``kseq``,
   ``rrs`` and ``importance`` for iid; ``rrs_wor`` for wor; ``greedy`` for greedy), the acceptance
   per position is computed **exactly** where a closed form exists (speculative, kseq, rrs, greedy)
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
     "skipped": [{"draft", "n", "law", "reason"}]}
"""

from __future__ import annotations

import functools
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from specot.laws import sample_drafts
from collections import Counter, defaultdict
from specot.api import load_drafter, load_target, pydoc_texts
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

__all__ = [
    "LAW_VERIFIERS",
    "MC_VERIFIERS",
    "NGramLM",
    "BenchDraft",
    "load_bench_draft",
    "run_acceptance_bench",
    "mean_ci",
    "early_exit_draft",
    "one_and_two_greedy",
]

#: Lossless verifiers benchmarked for each draft law (n >= 2); n = 1 uses ``speculative``.
#: ``importance`` is valid for i.i.d. drafts only (its selection marginal assumes independent draws).
LAW_VERIFIERS: dict[str, tuple[str, ...]] = {"iid": ("kseq", "rrs", "importance"), "wor": ("rrs_wor",),
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


def mean_ci(x: Sequence[float] | np.ndarray) -> tuple[float, float, float]:
    """``(mean, lo, hi)``: the mean and its 95% normal-approximation confidence interval."""
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0:
        return float("nan"), float("nan"), float("nan")
    m = float(a.mean())
    if a.size < 2:
        return m, m, m
    h = 1.96 * float(a.std(ddof=1)) / math.sqrt(a.size)
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


@dataclass
class _Acc:
    exact: list[np.ndarray] = field(default_factory=list)
    sampled: list[np.ndarray] = field(default_factory=list)
    star: list[np.ndarray] = field(default_factory=list)
    n_eff: list[np.ndarray] = field(default_factory=list)
    lower: list[np.ndarray] = field(default_factory=list)
    method: str = "exact"


def run_acceptance_bench(*, target: Any = None, drafts: Sequence[str | BenchDraft] = ("distilled", "ngram-lm", "ngram"),
                         prompts: list[str], prompt_set: str = "custom", temperatures: Sequence[float] = (0.1, 0.3, 0.5, 0.7, 1.0),
                         ns: Sequence[int] = (1, 2, 3, 4, 8), max_new_tokens: int = 64, seed: int = 0,
                         dtype: str = "float32", mc_samples: int = 4, alpha_star: bool = True, vocab_eps: float = 1e-4,
                         progress: bool = True, log: Any = sys.stderr) -> dict[str, Any]:
    """Run the acceptance benchmark (module docstring); returns the JSON-ready dict.

    ``target``: a :class:`CausalLM` or a name for :func:`specot.load_target`; ``drafts``: names or
    ready :class:`BenchDraft` s.
    """


    t0 = time.perf_counter()
    load_start = load_average()
    tgt = load_target(target, dtype=dtype)
    bds = [d if isinstance(d, BenchDraft) else load_bench_draft(d, tgt, dtype=dtype) for d in drafts]
    for d in bds:
        if not d.available:
            print(f"[bench acceptance] skipping draft {d.name!r}: {d.reason}", file=log)
    live = [d for d in bds if d.available]
    encoded = [tgt.encode_prompt(p) if isinstance(p, str) and tgt.tokenizer is not None else list(p) for p in prompts]
    gen = torch.Generator().manual_seed(seed)
    acc: dict[tuple, _Acc] = {}
    positions: dict[str, dict[str, int]] = {d.name: {} for d in live}
    reduced: dict[str, list[int]] = {d.name: [] for d in live}
    per_prompt: dict[tuple, list[float]] = {}
    skipped: list[dict[str, Any]] = []
    skipped_keys: set[tuple] = set()

    bar = tqdm(total=len(temperatures) * len(encoded), desc="bench acceptance", disable=not progress, file=sys.stderr)
    for temp in temperatures:
        sc = SamplingConfig(temperature=float(temp))
        for i, ids in enumerate(encoded):
            cfg = GenerationConfig(max_new_tokens=max_new_tokens, gamma=1, seed=seed + 1000 * i + int(round(temp * 100)),
                                   sampling=sc)
            cont = autoregressive_generate(tgt, ids, cfg).tokens
            bar.update()
            if not cont:
                continue
            full = list(ids) + list(cont)
            tgt.reset()
            p = standardize(tgt.logits_after(ids, cont[:-1]).double(), sc)  # [R, V] float64
            R = p.shape[0]
            for d in live:
                positions[d.name][f"{temp:g}"] = positions[d.name].get(f"{temp:g}", 0) + R
                lq, toks = _draft_logits(d, full, len(ids))
                if toks is not None:  # deterministic draft: one-hot q, n = 1 only
                    ok = toks >= 0
                    px = torch.where(ok, p.gather(-1, toks.clamp_min(0).unsqueeze(-1)).squeeze(-1), torch.zeros(R, dtype=p.dtype))
                    u = torch.rand(R, generator=gen)
                    key = (d.name, float(temp), 1, "single", "speculative")
                    a = acc.setdefault(key, _Acc())
                    a.exact.append(px.double().numpy())
                    a.sampled.append(((u < px) & ok).double().numpy())
                    a.star.append(px.double().numpy())  # one draw from a one-hot q: α* = p(x)
                    a.n_eff.append(np.ones(R))
                    per_prompt.setdefault(key, []).append(float(px.mean()))
                    for n in ns:
                        if n > 1 and (d.name, n) not in skipped_keys:
                            skipped_keys.add((d.name, n))
                            skipped.append({"draft": d.name, "n": n, "law": "*",
                                            "reason": "deterministic draft (one-hot q): one draft per position"})
                    continue
                q = standardize(lq.double(), sc)
                pr, qr = reduce_vocab(p, q, vocab_eps, max(ns))
                support = (qr > 0).sum(-1)
                reduced[d.name].append(pr.shape[-1])
                for n in ns:
                    laws = ("single",) if n == 1 else tuple(LAW_VERIFIERS)
                    for law in laws:
                        n_eff = torch.full((R,), n, dtype=torch.int64) if law in ("single", "iid") else support.clamp_max(n)
                        star = _alpha_star(pr, qr, n_eff, "iid" if law == "single" else law) if alpha_star else np.full(R, np.nan)
                        for vname in (("speculative",) if law == "single" else LAW_VERIFIERS[law]):
                            key = (d.name, float(temp), n, law, vname)
                            ex, sa, method, lb = _verifier_acceptance(vname, "iid" if law == "single" else law, pr, qr,
                                                                      n_eff, mc_samples, gen)
                            a = acc.setdefault(key, _Acc())
                            a.exact.append(ex)
                            if lb is not None:
                                a.lower.append(lb)
                            a.sampled.append(sa)
                            a.star.append(star)
                            a.n_eff.append(n_eff.double().numpy())
                            if method != "exact":
                                a.method = method
                            per_prompt.setdefault(key, []).append(float(ex.mean()))
    bar.close()

    rows = []
    for key, a in acc.items():
        dname, temp, n, law, vname = key
        ex, sa, st = np.concatenate(a.exact), np.concatenate(a.sampled), np.concatenate(a.star)
        m, lo, hi = mean_ci(ex)
        sm, slo, shi = mean_ci(sa)
        am, alo, ahi = mean_ci(st)
        gm, glo, ghi = mean_ci(st - ex)
        pp = per_prompt.get(key, [])
        rows.append({
            "draft": dname, "temperature": temp, "n": n, "law": law, "verifier": vname, "positions": int(ex.size),
            "n_effective_mean": float(np.concatenate(a.n_eff).mean()),
            "acceptance": m, "acceptance_ci95": [lo, hi], "acceptance_method": a.method,
            "acceptance_lower_bound": float(np.concatenate(a.lower).mean()) if a.lower else None,
            "sampled_acceptance": sm, "sampled_ci95": [slo, shi],
            "alpha_star": am if alpha_star else None, "alpha_star_ci95": [alo, ahi] if alpha_star else None,
            "gap": gm if alpha_star else None, "gap_ci95": [glo, ghi] if alpha_star else None,
            "per_prompt_sd": float(np.std(pp, ddof=1)) if len(pp) > 1 else 0.0,
        })
    rows.sort(key=lambda r: (r["draft"], r["temperature"], r["n"], r["law"], r["verifier"]))
    return {
        "benchmark": "acceptance",
        "schema_version": 1,
        "target": tgt.name,
        "target_dtype": str(tgt.dtype).replace("torch.", ""),
        "prompt_set": prompt_set,
        "prompt_set_description": describe_prompt_set(prompt_set),
        "prompts": len(encoded),
        "max_new_tokens": max_new_tokens,
        "temperatures": [float(t) for t in temperatures],
        "ns": [int(n) for n in ns],
        "seed": seed,
        "mc_samples": mc_samples,
        "torch_threads": torch.get_num_threads(),
        "drafts": [d.info() for d in bds],
        "positions": positions,
        "vocab_eps": vocab_eps,
        "reduced_vocab_mean": {k: float(np.mean(v)) for k, v in reduced.items() if v},
        "rows": rows,
        "skipped": skipped,
        "load_avg_start": load_start,
        "load_avg_end": load_average(),
        "elapsed_s": time.perf_counter() - t0,
    }
