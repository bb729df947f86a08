"""The exactly optimal verifier for n i.i.d. drafts at full vocabulary (``ot``).

Sources. The problem is SpecTr's OTM-n (Sun et al. 2023): couple the law of the draft set S with p
so that ``P(Y ∈ S)`` is maximal. Its value is Hu et al.'s ``α* = 1 + min_H [P(H) − q(H)^n]``
(ICLR 2025, subset selection; :func:`specot.theory.optimal_acceptance`, law ``"iid"``). R. Thomas
and A. Pal write the same OT as a max-flow problem and solve it with polymatroid theory ("Partial
Resolution", NeurIPS 2025; "Global Resolution", arXiv 2511.15898); their texts and code were not
available to this project, so the construction below is derived here, from the same polymatroid
view, and checked by enumeration against the exact LP (:func:`specot.verifiers.solve_otm_lp`).

Notation: ``φ(c) = 1 − (1 − c)^n`` (the probability that n i.i.d. drafts hit a set of q-mass c),
``w(s) = φ'(s) = n(1 − s)^{n−1}``. A selection rule picks one drafted token; its marginal x is a
point of the base polytope of the polymatroid ``h(A) = φ(q(A))``; selecting by x and then running
single-draft speculative sampling against x (accept with ``min(1, p/x)``, else draw from
``norm((p − x)_+)``) is lossless for any x and accepts ``Σ_i min(p_i, x_i)`` (Khisti et al.'s
canonical decomposition).

1. The optimal selection law (closed form). Sort the tokens by ``r = p/q`` descending (ties in an
   order fixed by p and q; ``q = 0 < p`` first, ``p = 0`` last), cumulate ``P_k``, ``Q_k``, and take the greatest convex
   minorant of the points ``(P_k, φ(Q_k))``, k = 0..V (pool-adjacent-violators on the chord slopes,
   ``scipy.optimize.isotonic_regression``). Its segments are the *levels* ``[b, e)``, with slopes
   ``λ = (φ(Q_e) − φ(Q_b)) / (P_e − P_b)`` (``∞`` for the tokens with ``p = 0``). The target
   selection law is ``x_i = λ(i)·p_i``. Proof sketch: within a level ``x/q = λr`` falls along the
   order while across a level boundary it cannot rise (the minorant is below both neighbouring
   chords and φ is concave), so every set's x-mass is at most the x-mass of the prefix with the
   same q-mass, which the minorant bounds by φ: x lies in the base polytope. Levels with ``λ ≤ 1``
   end at a vertex K of the minorant, so ``Σ min(p, x) = φ(Q_K) + 1 − P_K ≥ 1 + min_H [P(H) −
   q(H)^n] = α*``; LP duality gives the reverse inequality, hence the acceptance is exactly α*.

2. Realising x with positions. Draft j gets an independent position ``s_j ∈ [0, 1]`` with density
   ``ρ_{x_j} / q_{x_j}``, where the token densities satisfy ``Σ_i ρ_i = 1`` (so positions are i.i.d.
   uniform) and the draft with the smallest position is selected. The smallest of n i.i.d. uniforms
   has density w, so token i is selected with probability ``∫ ρ_i w``. Level ``[b, e)`` owns the
   positions ``[Q_b, Q_e]`` (a draft in a lower level always wins). Inside a level the token targets
   ``y_i = λ p_i`` are in convex order below the law of ``w(U)`` (U uniform on the level) — that is
   what lying above the minorant means — so the level is a martingale transport, built by *shadows*
   (Beiglböck & Juillet 2016): tokens are processed in q-descending order (ties by sorted index);
   token k takes the contiguous stretch, in the coordinates of the still-free positions, of mass
   ``q_k`` whose w-mass is ``y_k`` (unique: the w-mass of a stretch falls as it moves back). The
   shadow is the convex-order-minimal choice, so the rest of the level stays feasible whatever the
   order. Only the drafted tokens of the lowest drafted level need their pieces, and token k's are
   its shadow in what the tokens before it leave free; the shadow of those R tokens does not depend
   on the order they are processed in, so it is built at once (``_group_shadow``): it is the
   positions of disjoint intervals, each holding a run of tokens consecutive in p/q order with
   exactly their q-mass and w-mass, and the runs are the blocks of an isotonic regression whose
   block equation is that interval's w-mass (polynomial in its position) — solved by Newton steps
   on scipy's least-squares PAVA until the blocks repeat, then each block exactly; when few tokens
   precede k (or the blocks do not settle) the shadows are taken one at a time. (The code measures
   positions by the q-mass that remains after them, ``z = 1 − s``, so the selected draft is the one
   with the largest z and the tail of the order keeps full relative precision.)

3. Acceptance: the selected token i is accepted with ``min(1, 1/λ(i))``; otherwise the token is
   drawn from ``norm(p·(1 − λ)_+)`` (the residual lives on levels with ``λ < 1``, which hold no draft
   when a rejection happens, so the acceptance is ``P(Y ∈ S)`` exactly).

What is solved. Only the tokens in both supports (p > 0 and q > 0) are ordered one by one: those
with ``q = 0 < p`` are never drafted and sit first with λ = 0, those with ``p = 0`` are always
rejected and sit last with λ = ∞, so each group enters the minorant as one aggregate token (its
mass is all the level solve sees of it); the residual and λ by token are mapped back from them.
Dropping tokens of small but non-zero mass would not be exact — every token with both masses
positive moves the suffix sums Z, hence the minorant's vertices. With ``q = p`` the order is the
identity (one level, λ = 1, uniform positions: the drafts are chosen symmetrically).

Cost per position (V = 49152): one sort of V packed 64-bit words and one PAVA pass, O(V log V)
(:mod:`specot.verifiers.ot_vocab`: the float32-rounded ratio and the index in one word, float32
ties re-sorted by the float64 ratio, so the order is exactly the float64 one; a drafted token's
sorted index by a binary search in the sorted words; λ only of the levels asked for); a uniform or
one-token lowest drafted level costs nothing more; otherwise, per distinct drafted token there, one
group shadow, O(R) in vectorised numpy plus a few PAVA passes, and the selection law by quadrature
over the drafted tokens' pieces; on a rejection, the residual over the levels with λ < 1. The
full-vocabulary arrays live in per-thread work arrays (``ot_vocab.work_array``): made afresh at
every position they landed on pages glibc had handed back, ~750 page faults per position, as
much time as the sort. On the quiet 2-core CPU (one thread), n = 4, median ms per position over
30 fresh draft sets (docs/bench/ot_speed.json): real-shaped 2.0, peaked 1.0, near-uniform q 1.2,
uniform q 1.2, top-50 supports 0.95, q = p 0.6, flat (one level of ~47k tokens) 3.9; the plan
(sort, PAVA, sums) is ~0.65 ms of it, the sort ~0.28. Building the shadows one at a time over the whole sorted
vocabulary took 30, 3.7, 3.0, 3.0, 1.4, 1.6 and 1100 ms on the same cases. Re-measure with
``specot bench verifier-speed --verifier ot``.

Floating point. All of it runs in float64 on the CPU (p and q are copied there; the level solve
and the shadows are sequential, so they are numpy/scipy, not torch) — the float32 sort keys only
bucket the tokens, the order is the float64 one: suffix sums of q (relative
error O(V·ε); those below ``1e-300^(1/(n−1))`` count as 0 in the w-masses, which then drop less
than 1e-300 each), the minorant (PAVA; λ carries O(V·ε)), ``z_b^n − z_a^n`` as
``(z_b − z_a)·Σ_k z_a^k z_b^{n−1−k}`` (no cancellation), each shadow boundary by Newton's method kept
in its bracket (to ~1e-16 relative), each group block by vectorised Newton steps until the residual
of its w-mass is at float64 noise (8·n·ε of it) or a step falls below 1e-9 of the root (quadratic
convergence then leaves ~n·1e-18 of it; a block boundary moves by at most that over the local
density of w, and agrees with the one-at-a-time shadows to ~1e-12 at thousands of tokens),
and the selection probabilities by Gauss–Legendre quadrature
that is exact for their piecewise-polynomial integrands. A token lighter than the float64 spacing
of its level's coordinates is placed on one ulp there (its own probabilities are off by at most its
mass, < 1e-16 of the level). The enumeration tests measure the emitted law within 2e-15 of p and
the acceptance within 1e-13 of the brute-force α* (the HiGHS LP itself is accurate to ~1e-10).
"""

from __future__ import annotations

import functools
import math
import weakref

import numpy as np
import torch
from torch import Tensor

from .._validation import working_dtype
from ..sampling import draw_uniforms, sample_categorical
from ._common import check_draft_probs, first_match, first_occurrences
from .base import Acceptance, DraftLaw, Verifier, VerifyOutput, prepare_inputs, register_verifier
from .ot_vocab import (index_range, isotonic, ratio_order, ratio_order_words, ratio_words, suffix_sums, wmass_into,
                       work_array)

__all__ = ["OTVerifier", "OTPlan", "ot_selection_law"]

_ratio_order = ratio_order  # the exact float64 ratio order (its test's name)

#: Tokens whose ratios p/q agree to this relative tolerance share a level density (uniform).
_TIE_RTOL = 1e-14


def _zmass(z1: object, z2: object, length: object, n: int) -> object:
    """``z2^n − z1^n`` for ``z1 ≤ z2`` with ``z2 − z1 = length`` (the w-mass of the positions whose
    remaining q-mass lies in ``[z1, z2]``), as ``length·Σ_k z1^k z2^{n−1−k}`` (no cancellation)."""
    if n < 2:
        return length * 1.0  # type: ignore[operator]
    s: object = z2 + z1  # type: ignore[operator]  # Σ_{k ≤ m} z1^k z2^{m−k}, from m = 1: positive terms, no powers
    zk: object = z1
    for _ in range(n - 2):  # the sum for m is z2·(the sum for m − 1) + z1^m
        zk = zk * z1  # type: ignore[operator]
        if isinstance(s, np.ndarray):  # s is a fresh array: in place
            s *= z2
            s += zk
        else:
            s = s * z2 + zk  # type: ignore[operator]
    return length * s  # type: ignore[operator]


def _zmass_slope(z1: np.ndarray, z2: np.ndarray, length: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(z2^n − z1^n, n·(z2^{n−1} − z1^{n−1}))`` ``([m], [m])``, both by :func:`_zmass`'s sums (n ≥ 2)."""
    if n < 2:
        return length * 1.0, n * length * 0.0
    s: np.ndarray | float = z2 + z1  # the sums of :func:`_zmass` for m = 1 (the one for m = 0 is 1)
    prev: np.ndarray | float = 1.0
    zk: np.ndarray | float = z1
    for _ in range(n - 2):
        zk = zk * z1
        prev = s
        s = s * z2 + zk
    return length * s, n * length * prev


def _solve_increasing(f, fprime, lo: float, hi: float, t: float) -> float:  # type: ignore[no-untyped-def]
    """Root of the increasing ``f`` on ``[lo, hi]`` (``f(lo) ≤ 0 ≤ f(hi)``) from ``t``: Newton's
    method, kept inside the bracket (bisection when a step leaves it). At the noise of f, Newton can
    cycle between two neighbouring floats a few ulps apart (f of opposite signs): then the one with
    the smaller |f| is the root."""
    back, back_val = math.nan, math.inf  # the point before t and its value
    for _ in range(100):
        val = f(t)
        if val == 0.0:
            return t
        if val < 0:
            lo = t
        else:
            hi = t
        d = fprime(t)
        nt = t - val / d if d > 0 else 0.5 * (lo + hi)
        if not lo <= nt <= hi:
            nt = 0.5 * (lo + hi)
        if abs(nt - t) <= 2e-16 * abs(t) or hi - lo <= 2e-16 * abs(hi):
            return nt
        if nt == back:  # a two-cycle
            return t if abs(val) <= abs(back_val) else back
        back, back_val, t = t, val, nt
    return t


def _shadow_step(free: tuple[np.ndarray, np.ndarray, np.ndarray], ze: float, qk: float, yk: float,
                 n: int) -> tuple[np.ndarray, float, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """One shadow inside a level, in level coordinates ``v`` (remaining q-mass of the level below a
    position; the value density ``w = n (ze + v)^{n−1}`` rises with v). ``free = (fa, fb, fv)``: the
    free positions as sorted intervals ``[fa, fb]`` with their w-masses ``fv``. The token takes the
    stretch of free length ``qk`` (free coordinate counted from the bottom) whose w-mass is ``yk``;
    the stretch contains the position where ``w = yk/qk`` (its mean lies between its end values),
    which brackets the search to the free pieces within ``qk`` of that point. Returns
    ``(pieces [r, 2], bottom of the stretch, free')``."""
    fa, fb, fv = free
    za = ze + fa
    cm = np.concatenate(([0.0], np.cumsum(fb - fa)))
    cv = np.concatenate(([0.0], np.cumsum(fv)))
    qk = min(qk, float(cm[-1]))
    top = float(cm[-1]) - qk
    last = len(fa) - 1
    lo_t, hi_t = 0.0, top
    if n > 1:  # free coordinate of v* where w(v*) = yk/qk
        vstar = (yk / qk / n) ** (1.0 / (n - 1)) - ze
        j = max(int(np.searchsorted(fa, vstar, side="right")) - 1, 0)
        cstar = float(cm[j]) + min(max(vstar - float(fa[j]), 0.0), float(fb[j] - fa[j]))
        lo_t, hi_t = max(0.0, min(cstar - qk, top)), min(top, max(cstar, 0.0))
    inner = cm[(cm > lo_t) & (cm < hi_t + qk)]
    starts = np.concatenate(([lo_t, hi_t], inner[inner < hi_t], inner[inner - qk > lo_t] - qk))
    starts.sort()

    def gmass(t: np.ndarray) -> np.ndarray:
        j = np.minimum(np.searchsorted(cm, t, side="right") - 1, last)
        return cv[j] + _zmass(za[j], za[j] + (t - cm[j]), t - cm[j], n)

    vals = gmass(starts + qk) - gmass(starts)  # non-decreasing in the start t
    if yk <= vals[0]:
        t = float(starts[0])
    elif yk >= vals[-1]:
        t = float(starts[-1])
    else:
        i = int(np.searchsorted(vals, yk, side="right")) - 1  # vals[i] <= yk < vals[i + 1]
        lo, hi = float(starts[i]), float(starts[i + 1])
        mid = 0.5 * (lo + hi)
        j1 = min(int(np.searchsorted(cm, mid, side="right")) - 1, last)
        j2 = min(int(np.searchsorted(cm, mid + qk, side="right")) - 1, last)
        a1, c1, a2, c2 = float(za[j1]), float(cm[j1]), float(za[j2]), float(cm[j2])
        base = float(cv[j2] - cv[j1]) - yk

        def f(t: float) -> float:
            return base + _zmass(a2, a2 + (t + qk - c2), t + qk - c2, n) - _zmass(a1, a1 + (t - c1), t - c1, n)

        def fp(t: float) -> float:
            return n * ((a2 + (t + qk - c2)) ** (n - 1) - (a1 + (t - c1)) ** (n - 1))

        v0, v1 = float(vals[i]), float(vals[i + 1])
        t = _solve_increasing(f, fp, lo, hi, lo + (hi - lo) * (yk - v0) / (v1 - v0) if v1 > v0 else mid)
    j1 = min(int(np.searchsorted(cm, t, side="right")) - 1, last)
    j2 = min(int(np.searchsorted(cm, t + qk, side="right")) - 1, last)
    s1 = float(fa[j1] + (t - cm[j1]))
    s2 = float(min(fa[j2] + (t + qk - cm[j2]), fb[j2]))
    if j1 == j2:
        pieces = np.array([[s1, s2]])
    else:
        pieces = np.concatenate(([[s1, fb[j1]]], np.stack([fa[j1 + 1:j2], fb[j1 + 1:j2]], -1), [[fa[j2], s2]]))
    a_j1, b_j2 = float(fa[j1]), float(fb[j2])
    rest_v = [_zmass(ze + a_j1, ze + s1, s1 - a_j1, n), _zmass(ze + s2, ze + b_j2, b_j2 - s2, n)]
    new_a = np.concatenate((fa[:j1], [a_j1, s2], fa[j2 + 1:]))
    new_b = np.concatenate((fb[:j1], [s1, b_j2], fb[j2 + 1:]))
    new_v = np.concatenate((fv[:j1], rest_v, fv[j2 + 1:]))
    keep = new_b > new_a
    return pieces[pieces[:, 1] > pieces[:, 0]], s1, (new_a[keep], new_b[keep], new_v[keep])


#: A level's tokens are passed one shadow at a time while at most this many precede the wanted one;
#: beyond that the shadow of all of them is built at once (:func:`_group_shadow`).
_GROUP_MIN = 2


def _roots(M: np.ndarray, Y: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int, guess: np.ndarray) -> np.ndarray:
    """``z ∈ [lo, hi]`` with ``z^n − (z − M)^n = Y`` per entry ``[m]`` (the left side rises with z):
    vectorised Newton kept in the bracket, until the step or the residual is at float64 noise."""
    t = np.clip(guess, lo, hi)
    noise = 8.0 * n * np.finfo(np.float64).eps * np.maximum(Y, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        for _ in range(200):
            f, d = _zmass_slope(t - M, t, M, n)
            f -= Y
            lo = np.where(f <= 0, t, lo)  # new arrays: the caller's lo and hi are left alone
            hi = np.where(f >= 0, t, hi)
            nt = t - f / d
            newton = (nt >= lo) & (nt <= hi)
            nt = np.where(newton, nt, 0.5 * (lo + hi))
            busy = np.abs(f) > noise  # the residual is not yet noise, nor the step or the bracket
            if busy.any():  # a Newton step below 1e-9·t leaves an error ~n·1e-18·t (quadratic convergence)
                step = np.abs(nt - t)
                busy &= (step > np.where(newton, 1e-9, 2e-16) * t) & (hi - lo > 2e-16 * hi)
            t = nt
            if not busy.any():
                break
    return t


def _group_shadow(qh: np.ndarray, yh: np.ndarray, ze: float, length: float,
                  n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The shadow of a group of a level's tokens in its positions, built at once.

    ``qh, yh [R]``: the tokens' q-masses and w-mass targets ``λ·p``, in the sorted (p/q-descending)
    order. Their shadow (Beiglböck & Juillet 2016; whatever order they are processed in) is the
    positions of a set of disjoint intervals, each holding a run of consecutive tokens with exactly
    their q-mass and w-mass. With ``u`` = the top of a run's interval (``z = ze + v``) plus the
    q-mass of the group before the run, the runs are the blocks of the isotonic regression
    (non-increasing ``u``) whose block equation is ``Σ_run g_i(u) = 0``, ``g_i(u) = (u − S_i)^n −
    (u − S_{i+1})^n − y_i`` (S: cumulative q-mass): blocks do not overlap iff ``u`` does not rise,
    and a run is a shadow (its tokens are in convex order below its interval) iff every prefix of
    it has ``Σ g ≥ 0`` — PAVA's conditions. Solved by Newton steps on PAVA: weighted least-squares
    PAVA (scipy) of the linearised ``g``, then each block's exact root (:func:`_roots`), until the
    blocks repeat; then the block roots satisfy the exact conditions (the least-squares PAVA's are
    theirs at the linearisation point). Returns ``(bottom, top) [r]`` ascending, in level
    coordinates, or None when the blocks do not settle (the caller builds the shadows one by one).
    """
    S = np.zeros(qh.size + 1)
    S[1:] = np.cumsum(qh) if qh.size < 2048 else torch.cumsum(torch.from_numpy(qh), 0).numpy()  # the same sums
    top = ze + length
    u = np.clip((yh / qh / n) ** (1.0 / (n - 1)) + 0.5 * qh, ze + qh, top) + S[:-1]  # each token's own stretch
    prev: np.ndarray | None = None
    for _ in range(50):
        mass, c = _zmass_slope(u - S[1:], u - S[:-1], qh, n)
        g = mass - yh
        if not np.all(c > 0):
            return None
        fit_x, blocks = isotonic(u - g / c, c, increasing=False)
        if prev is not None and prev.size == blocks.size and bool((prev == blocks).all()):  # u: their exact roots
            hi = zb - ze
            lo = np.maximum(hi - M, 0.0)
            return lo[::-1].copy(), np.minimum(hi, length)[::-1].copy()
        a, b = blocks[:-1], blocks[1:]
        M = S[b] - S[a]
        zb = _roots(M, np.add.reduceat(yh, a), ze + M, np.full(a.size, top), n, fit_x[a] - S[a])
        u = np.repeat(zb + S[a], b - a)
        prev = blocks
    return None


def _complement(lo: np.ndarray, hi: np.ndarray, ze: float, length: float,
                n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The free positions of a level ``(fa, fb, fv)`` outside the ascending intervals ``[lo, hi]``."""
    fa = np.concatenate(([0.0], hi))
    fb = np.maximum(np.concatenate((lo, [length])), fa)
    keep = fb > fa
    fa, fb = fa[keep], fb[keep]
    return fa, fb, _zmass(ze + fa, ze + fb, fb - fa, n)


class _LevelShadows:
    """The shadows of one level in q-descending order (ties by sorted index): one at a time from the
    last token processed, or, when more than ``_GROUP_MIN`` tokens precede the wanted one, all of
    those at once (:func:`_group_shadow`) and then its own."""

    def __init__(self, plan: "OTPlan", level: int) -> None:
        # a weak reference: the plan keeps its levels' shadows, and no cycle delays freeing its work arrays
        self.plan = plan if isinstance(plan, weakref.ProxyType) else weakref.proxy(plan)
        self.level = level
        self.b, self.e = int(plan.blocks[level]), int(plan.blocks[level + 1])
        self.lam = float(plan.level_lam(np.array([level]))[0])
        self.ze = float(plan.Z[self.e])
        self.length = float(np.sum(plan.qs[self.b:self.e]))
        self.total = float(np.sum(plan.ym[self.b:self.e]))  # the level's w-mass
        self.free = (np.array([0.0]), np.array([self.length]), np.array([self.total]))
        self.last: tuple[float, int] | None = None  # key (−q, index) of the last token processed
        self._done = 0  # tokens processed so far (the state `free` is after them)
        self.pieces: dict[int, np.ndarray] = {}
        ratios = [float(plan.ps[i]) / float(plan.qs[i]) if plan.qs[i] > 0 else float(plan.ps[i])
                  for i in (self.b, self.e - 1)]  # the level's largest and smallest p/q (sorted order)
        self.uniform = abs(ratios[0] - ratios[1]) <= _TIE_RTOL * abs(ratios[0])
        self._heavy: tuple[float, np.ndarray, np.ndarray] | None = None  # (threshold, sorted indices, q)

    def heavier(self, qk: float) -> tuple[np.ndarray, np.ndarray]:
        """``(sorted indices [r] ascending, their q [r])``: a superset of the level's tokens with
        ``q ≥ qk`` (one pass over the level, kept for the lightest threshold asked so far)."""
        if self._heavy is None or qk < self._heavy[0]:
            idx = self.b + np.flatnonzero(self.plan.qs[self.b:self.e] >= qk)
            self._heavy = (qk, idx, self.plan.qs.take(idx))
        return self._heavy[1], self._heavy[2]

    def get(self, k: int) -> np.ndarray:
        """Position pieces ``[r, 2]`` (level coordinates) of the token at sorted index ``k``."""
        if self.uniform:  # every token has the level's mean value: the uniform density is exact
            return np.array([[0.0, self.length]])
        if k not in self.pieces:
            qk = float(self.plan.qs[k])
            key = (-qk, k)
            idx, q = self.heavier(qk)
            ids = idx[(q > qk) | ((q == qk) & (idx < k))]  # the tokens before k, in sorted order
            passed = self.last is not None and key < self.last
            if not passed and (self.plan.n == 1 or ids.size - self._done <= _GROUP_MIN):
                self._advance(key)
            else:
                self._group(k, ids, commit=not passed)
        return self.pieces[k]

    def _group(self, k: int, ids: np.ndarray, commit: bool) -> None:
        """The pieces of token k from the shadow of all tokens before it (:func:`_group_shadow`),
        then its own shadow step (``ids``: the sorted indices of the tokens before k, ascending); with
        ``commit`` the one-by-one state continues after k."""
        plan = self.plan
        qh = plan.qs.take(ids)
        free = (np.array([0.0]), np.array([self.length]), np.array([self.total]))  # the whole level
        if qh.size:
            yh = self.lam * plan.ps.take(ids)
            shadow = _group_shadow(qh, yh, self.ze, self.length, plan.n)
            if shadow is None:  # not settled: one by one (from scratch if k was passed)
                if commit:
                    self._advance((-float(plan.qs[k]), k))
                else:
                    fresh = _LevelShadows(plan, self.level)
                    fresh._advance((-float(plan.qs[k]), k))
                    self.pieces[k] = fresh.pieces[k]
                return
            free = _complement(*shadow, self.ze, self.length, plan.n)
        self.pieces[k], free = self._step(k, free)
        if commit:
            self.free, self.last, self._done = free, (-float(plan.qs[k]), k), qh.size + 1

    def _step(self, k: int, free: tuple[np.ndarray, np.ndarray, np.ndarray]
              ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Token k's shadow in the free positions: ``(pieces [r, 2], free')``."""
        qk = float(self.plan.qs[k])
        if qk <= 0.0 or free[0].size == 0:
            return np.zeros((0, 2)), free
        pieces, s1, free = _shadow_step(free, self.ze, qk, self.lam * float(self.plan.ps[k]), self.plan.n)
        if pieces.size == 0:  # lighter than the float64 resolution of the level: one ulp there
            pieces = np.array([[s1, s1 + max(qk, math.ulp(s1))]])
        return pieces, free

    def _advance(self, target: tuple[float, int]) -> None:
        idx, qs = self.heavier(-target[0])  # every token up to the target is at least as heavy
        upto = (-qs < target[0]) | ((-qs == target[0]) & (idx <= target[1]))
        if self.last is not None:
            upto &= (-qs > self.last[0]) | ((-qs == self.last[0]) & (idx > self.last[1]))
        sel = idx[upto]
        for k in sel[np.lexsort((sel, -self.plan.qs[sel]))].tolist():
            self.pieces[k], self.free = self._step(k, self.free)
        self._done += int(sel.size)
        self.last = target


@functools.lru_cache(maxsize=None)
def _leggauss(g: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss–Legendre nodes and weights on [−1, 1] ``([g], [g])`` (cached)."""
    return np.polynomial.legendre.leggauss(g)


def _max_position_law(pieces: list[np.ndarray]) -> np.ndarray:
    """P(draft j has the largest position) ``[m]`` when draft j's position is uniform on ``pieces[j]``
    (sorted disjoint intervals ``[r_j, 2]``): ``∫ f_j Π_{i≠j} F_i`` over the elementary intervals
    between all piece ends, by Gauss–Legendre quadrature (exact: the integrand is a polynomial of
    degree m − 1 there); each ``F_i`` by a binary search in its cumulative piece lengths, the
    products over the other drafts from prefix and suffix products."""
    m = len(pieces)
    pts = np.unique(np.concatenate([pc.reshape(-1) for pc in pieces]))
    u, v = pts[:-1], pts[1:]
    u, v = u[v > u], v[v > u]
    g = m // 2 + 1  # Gauss–Legendre with g nodes is exact up to degree 2g − 1 ≥ m − 1
    xg, wg = _leggauss(g)
    s = 0.5 * (u + v)[:, None] + 0.5 * (v - u)[:, None] * xg[None, :]  # [S, g]
    mid = 0.5 * (u + v)
    dens = np.zeros((m, u.size))
    cdf = np.ones((m + 2, u.size, g))  # rows 1..m: F_j at the nodes (rows 0 and m + 1: ones)
    for j, pc in enumerate(pieces):
        a, length = pc[:, 0], pc[:, 1] - pc[:, 0]
        cum = np.concatenate(([0.0], np.cumsum(length)))
        i = np.searchsorted(a, mid, side="right") - 1  # the last piece starting below mid
        ic = np.maximum(i, 0)
        inside = (i >= 0) & (mid <= pc[ic, 1])
        below = np.where(i >= 0, cum[ic] + np.clip(u - a[ic], 0.0, length[ic]), 0.0)  # mass below u
        dens[j] = np.where(inside, 1.0 / cum[-1], 0.0)
        cdf[j + 1] = np.clip(below[:, None] / cum[-1] + dens[j][:, None] * (s - u[:, None]), 0.0, 1.0)
    pre = np.cumprod(cdf[:-1], axis=0)  # pre[j] = Π_{i < j} F_i
    suf = np.cumprod(cdf[:0:-1], axis=0)[::-1]  # suf[j] = Π_{i > j} F_i (shifted by one row)
    others = pre[:m] * suf[1:]  # [m, S, g]
    out = np.einsum("js,jsg->j", dens * (0.5 * (v - u))[None, :], others * wg[None, None, :])
    return out / out.sum()


class OTPlan:
    """The optimal plan for one position: levels, λ, the acceptance α* and the residual.

    Args:
        p, q: float64 numpy ``[V]`` (normalised here).
        n: number of i.i.d. drafts.

    Attributes:
        blocks: level boundaries in the sorted order ``[L + 1]``; ``lam_level``: λ per level ``[L]``.
        alpha, lam, residual: see the properties (computed on demand).
    """

    def __init__(self, p: np.ndarray, q: np.ndarray, n: int) -> None:
        p = np.divide(p, p.sum(), out=work_array("p", p.size, np.float64))  # = p / p.sum(), in a work array
        q = np.divide(q, q.sum(), out=work_array("q", q.size, np.float64))
        self.n = n
        self._p = p
        self.cid: np.ndarray | None = None  # token id -> index in the solved vocabulary (None: the same)
        if not (p.min() > 0 and q.min() > 0):  # only the tokens in both supports are ordered one by one
            both = (p > 0) & (q > 0)
            ids = np.flatnonzero(both)
            m = ids.size
            self.cid = np.full(p.size, m + 1, dtype=np.int64)  # p = 0: one always-rejected token
            self.cid[ids] = np.arange(m)
            p_only = (p > 0) & ~both
            self.cid[p_only] = m  # q = 0 < p: one never-drafted token
            p = np.concatenate((p[ids], [float(np.sum(p[p_only])), 0.0]))
            q = np.concatenate((q[ids], [0.0, float(np.sum(q[~both & (q > 0)]))]))
        # one level with λ = 1 when q = p (ratio 1 throughout): no sort needed
        self._words: tuple[np.ndarray, np.ndarray] | None = None  # (sorted words, key) of the sort
        if p[:8].tolist() == q[:8].tolist() and np.array_equal(p, q):
            self.order = index_range(p.size)
        else:
            self.order, words, key = ratio_order_words(p, q, pooled=True)
            self._words = (words, key)
        self.ps = np.take(p, self.order, out=work_array("ps", p.size, np.float64))
        self.qs = np.take(q, self.order, out=work_array("qs", p.size, np.float64))
        # Z[k]: the q-mass of the tokens from sorted index k on (suffix sums keep the tail precise)
        self.Z = suffix_sums(self.qs, pooled=True)
        # each token's w-mass in the identity order; suffix masses below 1e-300^(1/(n−1)) count as 0 there
        # (their w-mass is below 1e-300, and subnormal products would cost ~100× as much)
        zf = self.Z
        tiny = 1e-300 ** (1.0 / max(n - 1, 1))
        if zf[-2] < tiny:  # Z does not rise along the order: its entries below `tiny` are a tail
            zf = zf.copy()
            zf[zf.size - int(np.searchsorted(zf[::-1], tiny, side="left")):] = 0.0
        self.ym = ym = wmass_into(zf[1:], zf[:-1], self.qs, n, work_array("ym", p.size, np.float64))
        k0 = p.size if self.cid is None else int(np.count_nonzero(self.ps > 0))  # tokens with p > 0 come first
        y = np.divide(ym[:k0], self.ps[:k0], out=work_array("pava_y", k0, np.float64))
        w = work_array("pava_w", k0, np.float64)
        np.copyto(w, self.ps[:k0])
        self._fit, blocks = isotonic(y, w)  # the fit: PAVA's mean per level, kept for the residual's head
        del y, w
        if k0 < p.size:  # the tokens with p = 0: one level, λ = ∞ (always rejected)
            blocks = np.append(blocks, np.int64(p.size))
        self.blocks = blocks
        self._lam_level: np.ndarray | None = None
        self._lam_of: dict[int, float] = {}  # λ of the levels asked for one by one
        self._levels: dict[int, _LevelShadows] = {}
        self._laws: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray]] = {}

    @property
    def lam_level(self) -> np.ndarray:
        """λ per level ``[L]`` (``inf`` for the level with ``p = 0``), computed on first use."""
        if self._lam_level is None:
            self._lam_level = self._level_lams(self.blocks[:-1], self.blocks[1:])
        return self._lam_level

    def _level_lams(self, b: np.ndarray, e: np.ndarray) -> np.ndarray:
        """λ of the levels ``[b, e)`` ``[m]``: their w-mass over their p-mass (sequential sums, the same
        whichever levels are asked for)."""
        if b.size and b[0] == 0 and b.size == np.searchsorted(self.blocks, b[-1]) + 1:  # the first levels
            end = int(e[-1])
            sums_y, sums_p = np.add.reduceat(self.ym[:end], b), np.add.reduceat(self.ps[:end], b)
        elif not b.size:
            return np.zeros(0)
        else:
            sums_y = np.array([np.add.reduceat(self.ym[i:j], [0])[0] for i, j in zip(b.tolist(), e.tolist())])
            sums_p = np.array([np.add.reduceat(self.ps[i:j], [0])[0] for i, j in zip(b.tolist(), e.tolist())])
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(sums_p > 0, sums_y / np.where(sums_p > 0, sums_p, 1.0), np.inf)

    def level_lam(self, levels: np.ndarray) -> np.ndarray:
        """λ of the given levels ``[m]`` (without computing every level's)."""
        if self._lam_level is not None or self.order.size <= 4096:  # small: every level's at once
            return self.lam_level[levels]
        for lv in set(levels.tolist()) - self._lam_of.keys():
            self._lam_of[lv] = float(self._level_lams(self.blocks[lv:lv + 1], self.blocks[lv + 1:lv + 2])[0])
        return np.array([self._lam_of[lv] for lv in levels.tolist()])

    def sorted_index(self, tokens: np.ndarray) -> np.ndarray:
        """The sorted indices of token ids ``[m]`` (a binary search in the sorted words)."""
        ids = np.asarray(tokens if self.cid is None else self.cid[tokens], dtype=np.int64)
        if self._words is None:  # identity order
            return ids
        if self.order.size <= 1024:  # a small solved vocabulary: the inverse permutation is cheaper
            inv = np.empty_like(self.order)
            inv[self.order] = np.arange(self.order.size)
            return inv[ids]
        words, key = self._words
        pos = np.minimum(np.searchsorted(words, ratio_words(key[ids]) & ~np.uint64(0xFFFFFFFF)
                                         | ids.astype(np.uint64)), words.size - 1)
        for i in np.flatnonzero(self.order[pos] != ids).tolist():  # re-sorted float32 ties
            pos[i] = int(np.flatnonzero(self.order == ids[i])[0])
        return pos

    def level_of(self, k: np.ndarray) -> np.ndarray:
        """The level of the tokens at sorted indices ``k``."""
        return np.searchsorted(self.blocks, k, side="right") - 1

    @property
    def lam(self) -> np.ndarray:
        """λ per token id ``[V]`` (``inf`` where ``p = 0``)."""
        return self._lam_tokens().copy()

    def _lam_tokens(self) -> np.ndarray:
        """λ per token id ``[V]``, in work arrays (:func:`work_array`)."""
        size = self.order.size
        level = work_array("level", size, np.intp)  # the level of each sorted index
        level.fill(0)
        level[self.blocks[1:-1]] = 1
        np.cumsum(level, out=level)
        out = work_array("lam", size, np.float64)
        out[self.order] = np.take(self.lam_level, level, out=work_array("lam_sorted", size, np.float64))
        return out if self.cid is None else np.take(out, self.cid, out=work_array("lam_v", self.cid.size, np.float64))

    @property
    def alpha(self) -> float:
        """The acceptance ``Σ_i p_i min(1, λ_i)`` (= α*)."""
        return float(np.sum(np.add.reduceat(self.ps, self.blocks[:-1]) * np.minimum(1.0, self.lam_level)))

    @property
    def residual(self) -> np.ndarray:
        """``norm(p·(1 − λ)_+)`` ``[V]`` (p itself when that mass is 0)."""
        res = work_array("res", self._p.size, np.float64)
        if self.cid is None:  # λ < 1 only on levels at the head of the sorted order: the rest are 0
            # PAVA's level means rise along the order and agree with λ to ~V·ε (< 1e-11) relative, so
            # the levels whose mean reaches 1 + 1e-6 have λ ≥ 1: λ is needed only before them
            cand = int(np.searchsorted(self._fit[self.blocks[:-1]], 1.0 + 1e-6, side="left"))
            lam = self.lam_level if self._lam_level is not None else self._level_lams(
                self.blocks[:cand], self.blocks[1:cand + 1])
            head = np.flatnonzero(lam[:cand] < 1.0)
            k = int(head[-1]) + 1 if head.size else 0  # the levels [0, k) hold every λ < 1
            e = int(self.blocks[k])
            one_minus = np.clip(1.0 - np.repeat(lam[:k], np.diff(self.blocks[:k + 1])), 0.0, None)
            res.fill(0.0)
            res[self.order[:e]] = self.ps[:e] * one_minus  # = p·clip(1 − λ, 0) there, the same products
        else:
            np.subtract(1.0, self._lam_tokens(), out=res)
            np.clip(res, 0.0, None, out=res)
            np.multiply(self._p, res, out=res)  # = p·clip(1 − λ, 0)
        total = float(res.sum())
        return np.divide(res, total, out=res) if total > 0 else self._p

    def selection(self, drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(select [n], accept [n])``: P(draft j is selected | drafts) and the probability that draft j,
        when selected, is accepted (``min(1, 1/λ)``)."""
        perm = np.argsort(drafts, kind="stable")
        key = tuple(drafts[perm].tolist())
        if key not in self._laws:
            self._laws[key] = self._selection_sorted(np.asarray(key, dtype=np.int64))
        sel_s, acc_s = self._laws[key]
        sel, acc = np.empty_like(sel_s), np.empty_like(acc_s)
        sel[perm], acc[perm] = sel_s, acc_s
        return sel, acc

    def _selection_sorted(self, drafts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = self.sorted_index(drafts)
        levels = self.level_of(k)
        with np.errstate(divide="ignore"):
            lam = self.level_lam(levels)
            acc = np.minimum(1.0, 1.0 / lam)
        sel = np.zeros(drafts.size)
        lvl = int(levels.min())
        low = np.flatnonzero(levels == lvl)
        if np.unique(drafts[low]).size == 1 or not math.isfinite(float(lam[levels == lvl][0])):
            sel[low] = 1.0 / low.size  # one token (or the always-rejected p = 0 level): symmetric
            return sel, acc
        shadows = self._levels.get(lvl)
        if shadows is None:
            shadows = self._levels[lvl] = _LevelShadows(self, lvl)
        if shadows.uniform:  # every token of the level has the same position law: symmetric
            sel[low] = 1.0 / low.size
            return sel, acc
        shadows.heavier(float(self.qs.take(k[low]).min()))  # one pass over the level for all drafts
        for kk in sorted(set(k[low].tolist()), key=lambda t: (-float(self.qs[t]), t)):  # heavier first
            shadows.get(kk)
        sel[low] = _max_position_law([shadows.get(int(kk)) for kk in k[low]])
        return sel, acc


def ot_selection_law(p: Tensor, q: Tensor, n: int) -> Tensor:
    """The optimal selection law ``x = λ·p`` ``[B, V]`` (float64; ``x_i = 0`` where ``p_i = 0`` stands
    for the always-rejected level) for n i.i.d. drafts: ``Σ_i min(p_i, x_i) = α*``."""
    p, q, _ = prepare_inputs(p, q)
    out = torch.empty(p.shape, dtype=torch.float64)
    pn, qn = p.detach().to(torch.float64).cpu().numpy(), q.detach().to(torch.float64).cpu().numpy()
    for b in range(p.shape[0]):
        plan = OTPlan(pn[b], qn[b], n)
        out[b] = torch.from_numpy(np.where(np.isfinite(plan.lam), plan.lam, 0.0) * pn[b] / pn[b].sum())
    return out.to(p.device)


@register_verifier("ot")
class OTVerifier(Verifier):
    """The exactly optimal (OT) verifier for n i.i.d. drafts at full vocabulary (module docstring).

    Lossless, and its acceptance is α* (Hu et al. 2025) at every position. At temperature 0 (p
    one-hot on t) the token t is a level of its own with ``λ ≤ 1``: a drafted t is accepted with
    probability 1, otherwise t is emitted.

    Shapes: ``p, q: [B, V]``, ``drafts: [B, n]`` (i.i.d. from q) → tokens ``[B]``, accepted index
    ``[B]`` (the first draft equal to the emitted token, −1 if none). One plan per row, shared when
    every row repeats the first (levels: a sort and a PAVA pass, O(V log V)); only the drafted
    tokens of the lowest drafted level get position pieces, each from the shadow of the tokens
    before it in q-descending order, built at once. Randomness: two
    uniforms per position (the selection, the acceptance) plus one per rejected position.

    Raises:
        ValueError: a drafted token with ``q(x) = 0``; invalid inputs (see :func:`prepare_inputs`).
    """

    name = "ot"
    valid_laws = frozenset({DraftLaw.IID})
    argmax_at_temperature_0 = True

    @staticmethod
    def _plans(p: Tensor, q: Tensor, n: int) -> tuple[list[OTPlan], list[int]]:
        """One plan per row, or one for all rows when every row repeats the first (as in enumeration
        and Monte-Carlo acceptance, where the cached shadows and laws are then shared)."""
        B = p.shape[0]
        same = B > 1 and bool((p == p[:1]).all()) and bool((q == q[:1]).all())
        rows = 1 if same or B == 1 else B
        V = p.shape[1]
        pn = work_array("p_in", rows * V, np.float64).reshape(rows, V)  # float64 copies in work arrays
        qn = work_array("q_in", rows * V, np.float64).reshape(rows, V)
        np.copyto(pn, p[:rows].detach().cpu().numpy())
        np.copyto(qn, q[:rows].detach().cpu().numpy())
        return [OTPlan(pn[u], qn[u], n) for u in range(rows)], [0] * B if rows == 1 else list(range(B))

    def _laws(self, p: Tensor, q: Tensor, drafts: Tensor) -> tuple[list[OTPlan], Tensor, Tensor, Tensor]:
        """``(plan per row, select [B, n], accept [B, n], drafts)`` (float64 / int64 on the CPU)."""
        p, q, d = prepare_inputs(p, q, drafts)
        assert d is not None
        check_draft_probs(q, d, self.name)
        B, n = d.shape
        plans, rows = self._plans(p, q, n)
        dn = d.cpu().numpy()
        sel = np.empty((B, n))
        acc = np.empty((B, n))
        for b in range(B):
            sel[b], acc[b] = plans[rows[b]].selection(dn[b])
        return [plans[r] for r in rows], torch.from_numpy(sel), torch.from_numpy(acc), d.cpu()

    @staticmethod
    def _residuals(plans: list[OTPlan], rows: list[int]) -> Tensor:
        """The residual laws ``[len(rows), V]`` of the given rows (each plan's computed once)."""
        cache: dict[int, np.ndarray] = {}
        out = []
        for r in rows:
            if id(plans[r]) not in cache:
                cache[id(plans[r])] = plans[r].residual
            out.append(cache[id(plans[r])])
        if len(out) == 1:  # no copy
            return torch.from_numpy(out[0][None])
        return torch.from_numpy(np.stack(out)) if out else torch.zeros(0, 0, dtype=torch.float64)

    def verify(self, p: Tensor, q: Tensor, drafts: Tensor, generator: torch.Generator | None = None) -> VerifyOutput:
        plans, sel, acc, d = self._laws(p, q, drafts)
        device = p.device
        u = draw_uniforms((d.shape[0], 2), generator, device).cpu()
        j = sample_categorical(sel, uniforms=u[:, 0])
        tokens = d.gather(-1, j.unsqueeze(-1)).squeeze(-1)
        accept = u[:, 1] < acc.gather(-1, j.unsqueeze(-1)).squeeze(-1)
        rej = (~accept).nonzero().squeeze(-1)
        if rej.numel():
            res = self._residuals(plans, rej.tolist())
            tokens[rej] = sample_categorical(res.to(device), generator).cpu()
        tokens = tokens.to(device)
        return VerifyOutput(tokens=tokens, accepted_index=first_match(d.to(device), tokens))

    def output_distribution(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        plans, sel, acc, d = self._laws(p, q, drafts)
        a = sel * acc
        out = (1.0 - a.sum(-1, keepdim=True)).clamp_min(0.0) * self._residuals(plans, list(range(d.shape[0])))
        out.scatter_add_(-1, d, a)
        return out.to(device=p.device, dtype=working_dtype(p, q))

    def accept_probability(self, p: Tensor, q: Tensor, drafts: Tensor) -> Tensor:
        """``P(emitted token ∈ drafts | drafts)`` ``[B]`` (float64)."""
        plans, sel, acc, d = self._laws(p, q, drafts)
        first = first_occurrences(d)  # count each distinct drafted token once
        a = (sel * acc).sum(-1)
        res = self._residuals(plans, list(range(d.shape[0])))
        return (a + (1.0 - a) * (res.gather(-1, d) * first).sum(-1)).to(p.device)

    def acceptance(self, p: Tensor, q: Tensor, n: int, **kwargs: object) -> Acceptance:
        """Exact acceptance ``Σ_i p_i min(1, λ_i)`` (= α*) per position ``[B]``."""
        self.check_construction(DraftLaw.IID, n)
        p, q, _ = prepare_inputs(p, q)
        plans, rows = self._plans(p, q, n)
        val = torch.tensor([plans[r].alpha for r in rows], dtype=torch.float64)
        return Acceptance(value=val, stderr=torch.zeros_like(val), exact=True)
