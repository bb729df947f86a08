"""The statistics of the exactness audit: is the law of the first ``k`` generated tokens of a
speculative decoder the target's law? (numpy and scipy only.)

Input: ``samples [n, k]`` int token ids (``END = -1`` after a sequence ended early), and either

* the **exact law** ``law(prefixes) -> p [M, V]``: the target's standardized next-token law after
  the prompt + each prefix (computed with the target itself), or
* a **reference sample** ``[m, k]`` drawn by plain (autoregressive) decoding of the same target.

**Tests.** For each position ``j`` (0-based) and each prefix ``s`` of ``j`` tokens seen at least
``min_prefix`` times (the ``max_prefixes`` most frequent ones), the tokens at position ``j`` of the
samples that start with ``s`` are compared with p(· | prompt, s):

* exact law: Pearson's chi-square goodness of fit (``scipy.stats.chisquare``);
* two samples: Pearson's chi-square test of homogeneity of the 2 × C table
  (``scipy.stats.chi2_contingency``, no continuity correction).

**Position tests.** A prefix seen fewer than ``min_prefix`` times has no test of its own, and
at T ≥ 1 most samples sit behind such prefixes. So for each position j ≥ 1 one more test pools
every prefix seen ≥ :data:`MIN_POSITION_PREFIX` times that has ≥ 2 cells: the sum of their
Pearson statistics, which, given the prefixes' counts, are independent, so the sum is
chi-square with the summed degrees of freedom. Prefixes after which the law is one token join
it without a statistic (any other token fails at once). Its ``coverage`` is the fraction of
position j's samples behind its prefixes.

Cells: every token whose expected count is ≥ ``min_expected`` (5) is a cell; all others are pooled
into one cell, itself merged into the smallest cell when its expected count is below 5 (the usual
validity rule of the chi-square approximation). A sampled token outside the law's support
(p = 0, e.g. cut by top-k/top-p) gives p-value 0. The joint law of the first k tokens is the
product of these conditionals, so the family of tests covers it.

**Correction.** Holm's step-down procedure (Holm 1979) over all the tests of a run keeps the
family-wise false-failure rate at ``alpha`` (default 0.001): an exact engine is reported
NOT EXACT with probability at most ``alpha`` (asymptotically in the chi-square approximation).

**Effect size.** Per position the plug-in total variation (TV) between the sampled and the
reference conditional laws over the test's cells, averaged over the tested prefixes with weights
their counts, with a 95 % percentile bootstrap interval (parametric: the cells' counts resampled
from their multinomial law; ``n_boot`` replicates) and ``tv_null95``, the 95th percentile of the same
plug-in estimate when the engine is exact (its upward bias at this sample size).

**Power.** For one test with ``C`` cells (``C - 1`` degrees of freedom), ``n_eff`` samples
(``n`` for goodness of fit, ``n·m / (n + m)`` for two samples) and per-test level ``alpha / M``
(Bonferroni, the first and strictest step of Holm over ``M`` tests), a deviation ``d`` of the cells'
law from the reference p has noncentrality ``λ = n_eff · Σ d_i² / p_i``. Among deviations of total
variation δ (Σ d_i = 0, ½ Σ |d_i| = δ), Cauchy–Schwarz on the positive and the negative parts gives
``Σ d_i² / p_i ≥ δ² / P + δ² / (1 − P) ≥ 4 δ²`` (P: the reference mass of the cells that gain), so
every such deviation has ``λ ≥ 4 n_eff δ²``. The detectable TV is the smallest δ with
``P(χ'²(C − 1, 4 n_eff δ²) > χ²_{1 − alpha/M}(C − 1)) ≥ power`` (power 0.9): every deviation of the
cells' law by at least that TV is detected with probability ≥ 0.9 (noncentral chi-square, the
asymptotic law of Pearson's statistic under local alternatives; Cochran 1952). Deviations inside
the pooled cell are not seen by the test. For a position test over prefixes s with counts m_s
(``n_eff`` = Σ m_s; two samples: Σ of each prefix's n·m / (n + m)), the noncentrality is
``Σ_s m_s Σ_i d_si² / p_si ≥ 4 Σ_s m_s δ_s² ≥ 4 n_eff δ̄²`` (Cauchy–Schwarz), δ̄ = Σ_s m_s δ_s / n_eff
the mean conditional TV over the covered prefixes: the position's detectable TV bounds δ̄, the TV
between the joint laws of (prefix, token) at position j when the prefixes' law is the same, so the
joint law of the first k tokens deviates by at most Σ_j δ̄_j where every prefix is covered.
To reach a target power, ``specot audit --tv`` sizes the sample from a pilot sample that is then
set aside (:func:`samples_for_tv`): the audited sample's size does not depend on its own tokens,
so the false-failure rate stays the stated one.

**Greedy** (T = 0): :func:`compare_greedy` checks token equality of the first N tokens; at the
first difference the target's logit gap between the two tokens decides near-tie (gap ≤ tolerance)
or failure.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from scipy import optimize
from scipy import stats as sstats

__all__ = ["END", "CellTest", "PositionSummary", "SamplingVerdict", "GreedyVerdict", "pool_cells", "pooled_chisquare",
           "goodness_of_fit", "homogeneity", "holm", "detectable_tv", "audit_exact_law",
           "audit_two_sample", "samples_for_tv", "recheck", "compare_greedy", "verdict_from_dict"]

#: Padding after a sequence ended before ``k`` tokens (EOS, a server's stop).
END = -1
#: Probability with which a run is to detect a deviation of the stated TV (power statements).
POWER = 0.9
#: The fewest samples behind a prefix in a position test (below it no prefix has 2 cells of 5).
MIN_POSITION_PREFIX = 10


@dataclass(frozen=True)
class CellTest:
    """One conditional test: the token at ``position`` given ``prefix``.

    Attributes:
        position: j, 0-based.
        prefix: the j tokens before it.
        cells: the pooled cells, each a tuple of token ids (the last may pool many tokens: its
            ids are not kept, ``("rest",)``).
        observed: counts per cell in the audited sample ``[C]``.
        reference: exact law: probabilities per cell ``[C]``; two samples: the reference counts.
        kind: ``"exact-law"`` or ``"two-sample"``.
        statistic, dof, pvalue: Pearson's statistic, its degrees of freedom, its p-value.
        adjusted_pvalue: Holm-adjusted over the run's tests.
        detectable_tv: the smallest TV on the cells this test detects with probability 0.9.
        outside_support: sampled tokens with p = 0 (exact law only).
        group_prefixes, group_sizes: a *position test* (module docstring) pools the tests of every
            prefix of ``group_prefixes`` into one statistic; ``group_sizes`` counts each prefix's
            cells, in order (empty for a test of one prefix).
    """

    position: int
    prefix: tuple[int, ...]
    cells: tuple[tuple[Any, ...], ...]
    observed: tuple[float, ...]
    reference: tuple[float, ...]
    kind: str
    statistic: float
    dof: int
    pvalue: float
    adjusted_pvalue: float = 1.0
    detectable_tv: float = 1.0
    outside_support: int = 0
    group_prefixes: tuple[tuple[int, ...], ...] = ()
    group_sizes: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        """Samples behind the test (audited sample)."""
        return int(sum(self.observed))

    def units(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(observed [C_s], reference [C_s])`` per prefix (one pair for a test of one prefix)."""
        obs, ref = np.asarray(self.observed, float), np.asarray(self.reference, float)
        if not self.group_sizes:
            return [(obs, ref)]
        cuts = np.cumsum(self.group_sizes)[:-1]
        return list(zip(np.split(obs, cuts), np.split(ref, cuts)))

    @property
    def n_eff(self) -> float:
        """Effective sample size of the test (module docstring: power); summed over the prefixes
        of a position test."""
        if self.kind == "exact-law":  # a prefix whose law is one token adds nothing to λ (only its failures)
            return float(self.n if not self.group_sizes else
                         sum(o.sum() for o, r in self.units() if (r > 0).sum() >= 2))
        total = 0.0
        for obs, ref in self.units():
            a, b = obs.sum(), ref.sum()
            total += a * b / (a + b) if a + b > 0 else 0.0
        return total

    @property
    def tv(self) -> float:
        """Plug-in TV between the sampled and the reference cell laws (a position test: the mean
        over its prefixes, weighted by their counts)."""
        units = self.units()
        w = np.array([o.sum() for o, _ in units])
        if w.sum() <= 0:
            return 0.0
        return float(sum(wi * _tv(o, r) for wi, (o, r) in zip(w, units)) / w.sum())


@dataclass(frozen=True)
class PositionSummary:
    """Per position j: the TV estimate (the mean conditional TV over the position test's prefixes,
    count-weighted) with a 95 % bootstrap interval, its null level ``tv_null95``, the position
    test's detectable TV (module docstring: power) and ``coverage``, the fraction of the
    position's samples whose prefix that test covers."""

    position: int
    tests: int
    samples: int
    tv: float
    tv_low: float
    tv_high: float
    tv_null95: float
    detectable_tv: float
    min_adjusted_pvalue: float
    coverage: float = 1.0


@dataclass(frozen=True)
class SamplingVerdict:
    """The audit of one sampled setting (T > 0).

    Attributes:
        exact: no Holm-adjusted p-value below ``alpha`` (and no token outside the support).
        kind: ``"exact-law"`` or ``"two-sample"``.
        alpha: the family-wise false-failure rate.
        n, n_ref: sample sizes (``n_ref`` 0 against the exact law).
        k: tokens per sample.
        tests: every conditional test, Holm-adjusted.
        positions: per-position summaries.
        min_adjusted_pvalue: the smallest Holm-adjusted p-value (1 without tests).
        detectable_tv: the smallest detectable TV of the run's tests (its best-powered test: a
            deviation of that TV in that conditional law is caught with probability ≥ 0.9).
    """

    exact: bool
    kind: str
    alpha: float
    n: int
    n_ref: int
    k: int
    tests: tuple[CellTest, ...]
    positions: tuple[PositionSummary, ...]
    min_adjusted_pvalue: float
    detectable_tv: float

    @property
    def label(self) -> str:
        return "exact" if self.exact else "NOT EXACT"

    @property
    def position_tv(self) -> float:
        """The largest per-position detectable TV (the weakest position's power; 1 untested)."""
        return max((s.detectable_tv for s in self.positions if s.tests), default=1.0)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["label"] = self.label
        d["position_tv"] = self.position_tv
        d["tests"] = [dict(asdict(t), prefix=list(t.prefix), cells=[list(c) for c in t.cells],
                           group_prefixes=[list(g) for g in t.group_prefixes]) for t in self.tests]
        return d


@dataclass(frozen=True)
class GreedyVerdict:
    """The audit of greedy decoding: ``label`` ``"exact"`` (all equal), ``"near-tie"`` (every
    difference at a logit gap ≤ ``tolerance``) or ``"NOT EXACT"``; ``differences`` lists, per
    differing prompt, ``{"prompt", "position", "speculative", "plain", "gap"}`` (gap ``None`` when
    the engine exposes no logits: then a difference counts as a failure)."""

    label: str
    prompts: int
    tokens: int
    tolerance: float
    differences: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    @property
    def exact(self) -> bool:
        return self.label != "NOT EXACT"

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), differences=list(self.differences), exact=self.exact)


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    """TV between two count (or probability) vectors, each normalised; 0 when either is empty."""
    sa, sb = a.sum(), b.sum()
    if sa <= 0 or sb <= 0:
        return 0.0
    return float(0.5 * np.abs(a / sa - b / sb).sum())


def pool_cells(expected: np.ndarray, min_expected: float = 5.0, merge_rest: bool = True) -> list[np.ndarray]:
    """Group the indices of ``expected [V]`` (expected counts) into chi-square cells: every index
    with expected ≥ ``min_expected`` alone, the others in one pooled cell (last), merged into the
    smallest cell when its total is below ``min_expected`` (unless ``merge_rest`` is False).
    Fewer than 2 cells: nothing to test."""
    expected = np.asarray(expected, float)
    big = np.flatnonzero(expected >= min_expected)
    big = big[np.argsort(-expected[big], kind="stable")]
    small = np.flatnonzero(expected < min_expected)
    cells = [np.array([i]) for i in big]
    if small.size:
        if expected[small].sum() >= min_expected or not cells or not merge_rest:
            cells.append(small)
        else:
            cells[-1] = np.concatenate([cells[-1], small])
    return cells


def _pearson(obs: np.ndarray, exp: np.ndarray) -> tuple[float, int, float]:
    """(statistic, dof, p-value) of Pearson's goodness of fit; ``exp`` rescaled to ``obs``'s total."""
    if len(obs) < 2:
        return 0.0, 0, 1.0
    exp = exp * obs.sum() / exp.sum()
    res = sstats.chisquare(obs, exp)
    return float(res.statistic), len(obs) - 1, float(res.pvalue)


def pooled_chisquare(observed: Sequence[float], probs: Sequence[float], min_expected: float = 5.0,
                     merge_rest: bool = True) -> tuple[float, int, float]:
    """Pearson's goodness of fit of counts ``observed [C]`` to probabilities ``probs [C]`` with the
    rare cells pooled (:func:`pool_cells`; expected counts rescaled to the observed total).

    Returns:
        ``(statistic, dof, pvalue)``; ``(0, 0, 1.0)`` for fewer than 2 cells.
    """
    obs, prob = np.asarray(observed, float), np.asarray(probs, float)
    groups = pool_cells(prob * obs.sum(), min_expected, merge_rest)
    return _pearson(np.array([obs[g].sum() for g in groups]), np.array([prob[g].sum() for g in groups]))


def goodness_of_fit(tokens: Counter, p: np.ndarray, min_expected: float = 5.0
                    ) -> tuple[list[tuple[Any, ...]], np.ndarray, np.ndarray, float, int, float, int]:
    """Chi-square goodness of fit of the observed ``tokens`` (token id → count) to ``p [V]``.

    Returns:
        ``(cells, observed [C], probabilities [C], statistic, dof, pvalue, outside_support)``;
        a token with p = 0 (or outside ``[0, V)``) that was sampled makes the p-value 0.
    """
    n = sum(tokens.values())
    V = len(p)
    outside = sum(c for t, c in tokens.items() if not (0 <= t < V) or p[t] <= 0)
    groups = pool_cells(p * n, min_expected)
    counts = np.zeros(V)
    for t, c in tokens.items():
        if 0 <= t < V and p[t] > 0:
            counts[t] += c
    obs = np.array([counts[g].sum() for g in groups])
    prob = np.array([p[g].sum() for g in groups])
    cells = [tuple(int(i) for i in g) if len(g) <= 4 else ("rest", len(g)) for g in groups]
    if outside:
        cells.append(("outside-support",))
        obs = np.append(obs, outside)
        prob = np.append(prob, 0.0)
        return cells, obs, prob, math.inf, max(len(cells) - 1, 1), 0.0, outside
    stat, dof, pv = _pearson(obs, prob)
    return cells, obs, prob, stat, dof, pv, 0


def homogeneity(a: Counter, b: Counter, min_expected: float = 5.0
                ) -> tuple[list[tuple[Any, ...]], np.ndarray, np.ndarray, float, int, float]:
    """Chi-square test of homogeneity of two samples of categories (id → count).

    Cells: a category is a cell when both its expected counts (pooled law × each sample size)
    are ≥ ``min_expected``; the others are pooled (:func:`pool_cells` on the smaller sample's
    expected counts).

    Returns:
        ``(cells, observed_a [C], observed_b [C], statistic, dof, pvalue)``.
    """
    keys = sorted(set(a) | set(b))
    ca = np.array([a.get(t, 0) for t in keys], float)
    cb = np.array([b.get(t, 0) for t in keys], float)
    na, nb = ca.sum(), cb.sum()
    pooled = (ca + cb) / (na + nb)
    groups = pool_cells(pooled * min(na, nb), min_expected)
    oa = np.array([ca[g].sum() for g in groups])
    ob = np.array([cb[g].sum() for g in groups])
    cells = [tuple(keys[i] for i in g) if len(g) <= 4 else ("rest", len(g)) for g in groups]
    stat, dof, pv = _contingency(oa, ob)
    return cells, oa, ob, stat, dof, pv


def _contingency(oa: np.ndarray, ob: np.ndarray) -> tuple[float, int, float]:
    """(statistic, dof, p-value) of the 2 × C homogeneity test (1.0 for fewer than 2 cells)."""
    if len(oa) < 2 or oa.sum() == 0 or ob.sum() == 0:
        return 0.0, 0, 1.0
    res = sstats.chi2_contingency(np.stack([oa, ob]), correction=False)
    return float(res.statistic), int(res.dof), float(res.pvalue)


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): reject test i at family-wise level α iff
    its adjusted p-value is < α."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adj = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adj[i] = running
    return adj


def detectable_tv(n_eff: float, dof: int, level: float, power: float = POWER) -> float:
    """The smallest TV δ that a chi-square test with ``dof`` degrees of freedom at ``level``
    detects with probability ≥ ``power`` on ``n_eff`` samples, against the worst deviation of that
    TV (λ = 4 n_eff δ², module docstring). 1.0 when even δ = 1 is not detected, or ``dof < 1``."""
    if dof < 1 or n_eff <= 0:
        return 1.0
    crit = sstats.chi2.isf(level, dof)

    def gap(lam: float) -> float:
        return float(sstats.ncx2.sf(crit, dof, lam)) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2
        if hi > 1e9:
            return 1.0
    lam = optimize.brentq(gap, 1e-9, hi, xtol=1e-6) if gap(1e-9) < 0 else 0.0
    return float(min(1.0, math.sqrt(lam / (4 * n_eff))))


def _prefix_groups(samples: np.ndarray, j: int) -> dict[tuple[int, ...], Counter]:
    """Position ``j``'s tokens grouped by their prefix (prefixes holding ``END`` skipped)."""
    out: dict[tuple[int, ...], Counter] = defaultdict(Counter)
    for row in samples:
        pre = tuple(int(t) for t in row[:j])
        if END in pre:
            continue
        out[pre][int(row[j])] += 1
    return out


def _frequent(groups: dict[tuple[int, ...], Counter], min_prefix: int, max_prefixes: int,
              other: dict[tuple[int, ...], Counter] | None = None) -> list[tuple[int, ...]]:
    """The ``max_prefixes`` most frequent prefixes seen ≥ ``min_prefix`` times (in both samples)."""
    def size(s: tuple[int, ...], g: dict) -> int:
        return sum(g[s].values()) if s in g else 0
    keep = [s for s in groups if size(s, groups) >= min_prefix and (other is None or size(s, other) >= min_prefix)]
    keep.sort(key=lambda s: (-(size(s, groups) + (size(s, other) if other is not None else 0)), s))
    return keep[:max_prefixes]


def _check_samples(samples: Any, name: str) -> np.ndarray:
    arr = np.asarray(samples)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name} must be an integer array [n, k] with n, k >= 1, got shape {arr.shape} "
                         f"and dtype {arr.dtype}")
    return arr.astype(np.int64)


def audit_exact_law(samples: Any, law: Callable[[list[tuple[int, ...]]], np.ndarray], *, alpha: float = 1e-3,
                    min_prefix: int = 50, max_prefixes: int = 8, min_expected: float = 5.0,
                    n_boot: int = 200, seed: int = 0) -> SamplingVerdict:
    """Audit ``samples [n, k]`` against the exact law (module docstring): per position, one test
    per frequent prefix and one position test over every prefix seen ≥ :data:`MIN_POSITION_PREFIX`
    times.

    Args:
        law: ``law(prefixes) -> p [M, V]``, the target's standardized law after the prompt + each
            prefix (called once per position with that position's tested prefixes).
        alpha: family-wise false-failure rate (Holm).
        min_prefix, max_prefixes: a prefix has its own test when seen ≥ ``min_prefix`` times, at
            most ``max_prefixes`` prefixes per position (the most frequent; position 0 has one).

    Raises:
        ValueError: samples not ``[n, k]`` integers, ``alpha`` outside (0, 1), ``law`` giving rows
            that are not probability vectors.
    """
    arr = _check_samples(samples, "samples")
    _check_alpha(alpha)
    raw, covered = [], {}
    for j in range(arr.shape[1]):
        groups = _prefix_groups(arr, j)
        frequent = _frequent(groups, min_prefix if j else 1, max_prefixes)
        pooled = _frequent(groups, MIN_POSITION_PREFIX, len(groups)) if j else []
        prefixes = list(dict.fromkeys(frequent + pooled))
        if not prefixes:
            continue
        laws = np.asarray(law(prefixes), dtype=np.float64)
        if laws.shape[0] != len(prefixes) or not np.allclose(laws.sum(-1), 1.0, atol=1e-4) or (laws < 0).any():
            raise ValueError(f"law() must return probability rows [{len(prefixes)}, V], got shape {laws.shape}")
        fits = {s: goodness_of_fit(groups[s], p, min_expected) for s, p in zip(prefixes, laws)}
        for s in frequent:
            cells, obs, prob, stat, dof, pv, out = fits[s]
            raw.append(dict(position=j, prefix=s, cells=tuple(cells), observed=tuple(obs.tolist()),
                            reference=tuple(prob.tolist()), kind="exact-law", statistic=stat, dof=dof, pvalue=pv,
                            outside_support=out))
        support = {s: int((p > 0).sum()) for s, p in zip(prefixes, laws)}
        # a prefix after which the law is one token is covered too: any other token fails at once
        units = [(s, fits[s]) for s in pooled if fits[s][4] >= 1 or support[s] == 1]
        if any(f[4] >= 1 for _, f in units):
            raw.append(_position_test(j, [(s, f[0], f[1], f[2], f[6]) for s, f in units], "exact-law"))
            covered[j] = sum(sum(groups[s].values()) for s, _ in units) / _at_position(arr, j)
    return _finish(raw, "exact-law", alpha, len(arr), 0, arr.shape[1], n_boot, seed, covered)


def audit_two_sample(samples: Any, reference: Any, *, alpha: float = 1e-3, min_prefix: int = 50,
                     max_prefixes: int = 8, min_expected: float = 5.0, n_boot: int = 200,
                     seed: int = 0) -> SamplingVerdict:
    """Audit ``samples [n, k]`` against ``reference [m, k]`` from plain decoding (module docstring;
    arguments as :func:`audit_exact_law`; a prefix must be frequent in both samples).

    Raises:
        ValueError: samples not integer arrays with the same ``k``, ``alpha`` outside (0, 1).
    """
    arr, ref = _check_samples(samples, "samples"), _check_samples(reference, "reference")
    if arr.shape[1] != ref.shape[1]:
        raise ValueError(f"samples and reference must hold the same number of tokens k, got {arr.shape[1]} "
                         f"and {ref.shape[1]}")
    _check_alpha(alpha)
    raw, covered = [], {}
    for j in range(arr.shape[1]):
        ga, gb = _prefix_groups(arr, j), _prefix_groups(ref, j)
        for s in _frequent(ga, min_prefix if j else 1, max_prefixes, gb):
            cells, oa, ob, stat, dof, pv = homogeneity(ga[s], gb[s], min_expected)
            raw.append(dict(position=j, prefix=s, cells=tuple(cells), observed=tuple(oa.tolist()),
                            reference=tuple(ob.tolist()), kind="two-sample", statistic=stat, dof=dof, pvalue=pv))
        if not j:
            continue
        fits = [(s, homogeneity(ga[s], gb[s], min_expected)) for s in _frequent(ga, MIN_POSITION_PREFIX, len(ga), gb)]
        units = [(s, f[0], f[1], f[2], 0) for s, f in fits if f[4] >= 1]
        if units:
            raw.append(_position_test(j, units, "two-sample"))
            covered[j] = sum(sum(ga[u[0]].values()) for u in units) / _at_position(arr, j)
    return _finish(raw, "two-sample", alpha, len(arr), len(ref), arr.shape[1], n_boot, seed, covered)


def _at_position(arr: np.ndarray, j: int) -> int:
    """Samples whose first ``j`` tokens hold no ``END`` (those with a token at position j)."""
    return max(int((arr[:, :j] != END).all(axis=1).sum()), 1)


def _position_test(j: int, units: list[tuple[tuple[int, ...], list, np.ndarray, np.ndarray, int]],
                   kind: str) -> dict[str, Any]:
    """Position ``j``'s pooled test from its prefixes' ``(prefix, cells, observed, reference,
    outside_support)``: the sum of their statistics (:func:`_grouped`)."""
    obs = np.concatenate([u[2] for u in units])
    ref = np.concatenate([u[3] for u in units])
    sizes = tuple(len(u[2]) for u in units)
    out = sum(u[4] for u in units)
    stat, dof, pv = _grouped(obs, ref, sizes, kind, out)
    return dict(position=j, prefix=(), cells=tuple(c for u in units for c in u[1]), observed=tuple(obs.tolist()),
                reference=tuple(ref.tolist()), kind=kind, statistic=stat, dof=dof, pvalue=pv, outside_support=out,
                group_prefixes=tuple(u[0] for u in units), group_sizes=sizes)


def _grouped(obs: np.ndarray, ref: np.ndarray, sizes: Sequence[int], kind: str, outside: int = 0
             ) -> tuple[float, int, float]:
    """(statistic, dof, p-value) of a position test: the prefixes' Pearson statistics summed
    (independent given the prefixes' counts), degrees of freedom summed; p-value 0 with a token
    outside the support."""
    cuts = np.cumsum(sizes)[:-1]
    stat, dof = 0.0, 0
    for o, r in zip(np.split(obs, cuts), np.split(ref, cuts)):
        if kind == "exact-law":
            keep = r > 0  # the outside-support cell (p = 0) is counted by ``outside``
            st, df, _ = _pearson(o[keep], r[keep])
        else:
            st, df, _ = _contingency(o, r)
        stat, dof = stat + st, dof + df
    if outside:
        return math.inf, max(dof, 1), 0.0
    return stat, dof, float(sstats.chi2.sf(stat, dof)) if dof else 1.0


def samples_for_tv(pilot: SamplingVerdict, target_tv: float, margin: float = 1.15) -> int:
    """The sample size at which every position of an audit like ``pilot`` is predicted to detect
    a TV of ``target_tv`` (module docstring: power).

    Scaling the sample by f multiplies each position test's ``n_eff`` by f; it also opens cells
    and brings prefixes over :data:`MIN_POSITION_PREFIX`, which raises the degrees of freedom:
    predicted here as growing like √f (between the fixed cells of position 0 and the new prefixes
    of later positions at T ≥ 1). The smallest f (found by bisection) whose predicted detectable TV
    (:func:`detectable_tv`) reaches the target at every position, times ``margin``.

    Args:
        pilot: the verdict of a pilot sample (set aside afterwards).
        target_tv: the detectable TV wanted at every position, in (0, 1).
        margin: factor on the predicted size.

    Raises:
        ValueError: ``target_tv`` outside (0, 1).
    """
    if not 0 < target_tv < 1:
        raise ValueError(f"the target TV must lie in (0, 1), got {target_tv!r}")
    level = pilot.alpha / max(len(pilot.tests), 1)
    basis = []
    for j in range(pilot.k):
        tests = [t for t in pilot.tests if t.position == j]
        test = next((t for t in tests if t.group_sizes), None) or next((t for t in tests if t.dof >= 1), None)
        if test is not None and test.n_eff > 0:
            basis.append(test)

    def worst(f: float) -> float:
        return max((detectable_tv(t.n_eff * f, math.ceil(t.dof * math.sqrt(f)), level) for t in basis), default=0.0)

    if worst(1.0) <= target_tv:
        return pilot.n
    lo, hi = 1.0, 2.0
    while worst(hi) > target_tv and hi < 1e6:
        lo, hi = hi, hi * 2
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if worst(mid) <= target_tv else (mid, hi)
    return int(math.ceil(pilot.n * hi * margin))


def _check_alpha(alpha: float) -> None:
    if not (isinstance(alpha, (int, float)) and 0 < alpha < 1):
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")


def _finish(raw: list[dict], kind: str, alpha: float, n: int, n_ref: int, k: int, n_boot: int,
            seed: int, covered: dict[int, float] | None = None) -> SamplingVerdict:
    """Holm over ``raw`` tests, power per test, per-position summaries: the verdict."""
    adj = holm([r["pvalue"] for r in raw])
    m = max(len(raw), 1)
    tests = []
    for r, a in zip(raw, adj):
        t = CellTest(**r, adjusted_pvalue=a)
        tests.append(CellTest(**r, adjusted_pvalue=a, detectable_tv=detectable_tv(t.n_eff, t.dof, alpha / m)))
    rng = np.random.default_rng(seed)
    covered = covered or {}
    positions = tuple(_summary(j, [t for t in tests if t.position == j], n_boot, rng,
                               covered.get(j, 0.0 if j else 1.0))
                      for j in range(k))
    min_adj = min(adj) if adj else 1.0
    exact = min_adj >= alpha and not any(t.outside_support for t in tests)
    return SamplingVerdict(exact=exact, kind=kind, alpha=alpha, n=n, n_ref=n_ref, k=k, tests=tuple(tests),
                           positions=positions, min_adjusted_pvalue=min_adj,
                           detectable_tv=min((t.detectable_tv for t in tests), default=1.0))


def _summary(j: int, tests: list[CellTest], n_boot: int, rng: np.random.Generator,
             coverage: float = 1.0) -> PositionSummary:
    """Position ``j``'s TV estimate, bootstrap interval and null level over the position test's
    prefixes (over its per-prefix tests where it has none: position 0), and its power."""
    if not tests:
        return PositionSummary(j, 0, 0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0)
    pooled = [t for t in tests if t.group_sizes]
    basis = pooled or tests
    units = [(o, r, t.kind) for t in basis for o, r in t.units()]
    w = np.array([o.sum() for o, _, _ in units], float)
    w = w / w.sum()
    est = float(sum(wi * _tv(o, r) for wi, (o, r, _) in zip(w, units)))
    boots, nulls = np.zeros(n_boot), np.zeros(n_boot)
    for wi, (obs, ref, kind) in zip(w, units):
        n = int(obs.sum())
        pa = obs / n
        if kind == "exact-law":
            pr = ref / ref.sum()
            bo, br = rng.multinomial(n, pa, n_boot), np.tile(pr, (n_boot, 1))
            nu = rng.multinomial(n, pr, n_boot)
            nulls += wi * 0.5 * np.abs(nu / n - pr).sum(-1)
        else:
            m = int(ref.sum())
            pr = ref / m
            bo, br = rng.multinomial(n, pa, n_boot), rng.multinomial(m, pr, n_boot)
            pool = (obs + ref) / (n + m)
            na, nb = rng.multinomial(n, pool, n_boot), rng.multinomial(m, pool, n_boot)
            nulls += wi * 0.5 * np.abs(na / n - nb / m).sum(-1)
        boots += wi * 0.5 * np.abs(bo / bo.sum(-1, keepdims=True) - br / br.sum(-1, keepdims=True)).sum(-1)
    lo, hi = (np.quantile(boots, [0.025, 0.975]) if n_boot else (est, est))
    return PositionSummary(position=j, tests=len(tests), samples=int(sum(t.n for t in basis)), tv=est,
                           tv_low=float(lo), tv_high=float(hi),
                           tv_null95=float(np.quantile(nulls, 0.95)) if n_boot else 0.0,
                           detectable_tv=min(t.detectable_tv for t in basis),
                           min_adjusted_pvalue=min(t.adjusted_pvalue for t in tests),
                           coverage=coverage)


def recheck(saved: dict[str, Any], alpha: float | None = None, n_boot: int = 200, seed: int = 0) -> SamplingVerdict:
    """Recompute a verdict from its saved counts (:meth:`SamplingVerdict.to_dict`): every test's
    statistic and p-value from its cells' counts, Holm, power and the summaries.

    Raises:
        ValueError / KeyError: a dictionary that is not a saved sampling verdict.
    """
    alpha = float(saved["alpha"] if alpha is None else alpha)
    _check_alpha(alpha)
    raw = []
    for t in saved["tests"]:
        obs, ref = np.asarray(t["observed"], float), np.asarray(t["reference"], float)
        out = int(t.get("outside_support", 0))
        if t["kind"] not in ("exact-law", "two-sample"):
            raise ValueError(f"unknown test kind {t['kind']!r}")
        sizes = tuple(int(c) for c in t.get("group_sizes", ()))
        stat, dof, pv = _grouped(obs, ref, sizes or (len(obs),), t["kind"], out)
        raw.append(dict(position=int(t["position"]), prefix=tuple(t["prefix"]),
                        cells=tuple(tuple(c) for c in t["cells"]), observed=tuple(obs.tolist()),
                        reference=tuple(ref.tolist()), kind=t["kind"], statistic=stat, dof=dof, pvalue=pv,
                        outside_support=out, group_prefixes=tuple(tuple(g) for g in t.get("group_prefixes", ())),
                        group_sizes=sizes))
    covered = {int(p["position"]): float(p.get("coverage", 1.0)) for p in saved.get("positions", [])}
    return _finish(raw, saved["kind"], alpha, int(saved["n"]), int(saved["n_ref"]), int(saved["k"]), n_boot, seed,
                   covered)


def verdict_from_dict(saved: dict[str, Any]) -> SamplingVerdict | GreedyVerdict:
    """A saved verdict (``to_dict``) as an object, the sampling ones recomputed (:func:`recheck`)."""
    if "tests" in saved:
        return recheck(saved)
    return GreedyVerdict(label=saved["label"], prompts=int(saved["prompts"]), tokens=int(saved["tokens"]),
                         tolerance=float(saved["tolerance"]), differences=tuple(saved.get("differences", ())))


def compare_greedy(speculative: Sequence[Sequence[int]], plain: Sequence[Sequence[int]],
                   gap: Callable[[int, list[int], int, int], float] | None, tolerance: float) -> GreedyVerdict:
    """Greedy (T = 0) audit: token equality of speculative and plain decoding, prompt by prompt.

    Args:
        speculative, plain: per prompt, the first N generated tokens of each.
        gap: ``gap(prompt_index, prefix, a, b)`` → |z_a − z_b|, the target's logit gap between the
            two tokens after the prompt + ``prefix`` (the common tokens before the difference), or
            ``None`` when the engine exposes no logits.
        tolerance: a difference at a gap ≤ ``tolerance`` is a near-tie (two kernels rounding an
            almost-tie apart), above it a failure.

    Raises:
        ValueError: the two lists hold different numbers of prompts.
    """
    if len(speculative) != len(plain):
        raise ValueError(f"speculative and plain runs cover {len(speculative)} and {len(plain)} prompts")
    diffs = []
    for i, (a, b) in enumerate(zip(speculative, plain)):
        a, b = list(a), list(b)
        j = next((t for t in range(min(len(a), len(b))) if a[t] != b[t]), None)
        if j is None and len(a) == len(b):
            continue
        if j is None:  # one stopped earlier: a difference of length, no logit gap to read
            diffs.append(dict(prompt=i, position=min(len(a), len(b)), speculative=None, plain=None, gap=None))
            continue
        g = gap(i, b[:j], a[j], b[j]) if gap is not None else None
        diffs.append(dict(prompt=i, position=j, speculative=a[j], plain=b[j], gap=None if g is None else float(g)))
    if not diffs:
        label = "exact"
    elif all(d["gap"] is not None and d["gap"] <= tolerance for d in diffs):
        label = "near-tie"
    else:
        label = "NOT EXACT"
    return GreedyVerdict(label=label, prompts=len(plain), tokens=max((len(b) for b in plain), default=0),
                         tolerance=tolerance, differences=tuple(diffs))
