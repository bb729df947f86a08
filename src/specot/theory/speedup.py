"""Speedup model of speculative decoding (Leviathan et al. 2023 §3; SpecTr §4 block efficiency).

Leviathan et al. assume the acceptance events are i.i.d. with rate α (= E[β]). With γ drafted
tokens per iteration and cost coefficient ``c = time(draft step) / time(target step)``:

* expected tokens per iteration (Eq. 1): ``(1 − α^{γ+1}) / (1 − α)`` (``γ + 1`` at α = 1);
* walltime improvement (Thm 3.8): ``(1 − α^{γ+1}) / ((1 − α)(γc + 1))``;
* the optimal γ maximises it (integer search, :func:`optimal_gamma`);
* if ``α > c`` the improvement at γ = 1 is ``(1 + α)/(1 + c) > 1`` (Corollary 3.9), a lower
  bound on the optimum;
* arithmetic-operations factor (Thm 3.11) with ``ĉ`` = ops(draft)/ops(target):
  ``(1 − α)(γĉ + γ + 1) / (1 − α^{γ+1})``.

Block efficiency (tokens per target call) from per-depth acceptance rates ``a_1..a_L`` — the
probability of getting past depth d given depth d−1 was passed — is
``E[tokens] = 1 + Σ_{d=1}^{L} Π_{j≤d} a_j`` (the +1 is the correction / bonus token). It covers:

* a single chain: ``a_d = α`` for all d gives Eq. 1;
* multi-draft and tree decoding (SpecTr Alg. 3/4, Hu et al. App. D): at depth d a node has
  ``k_d`` children, verified by a token-level rule with acceptance ``α(k_d)``; under the same
  i.i.d.-per-depth assumption ``a_d = α(k_d)`` (:func:`tree_acceptance_rates`). The wall-clock
  model divides by ``1 + c·L`` (L sequential draft steps, the width drafted in one batch).

All functions accept scalars or numpy arrays (broadcasting) and raise ``ValueError`` on rates
outside [0, 1], negative costs or γ < 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

__all__ = [
    "expected_tokens",
    "walltime_improvement",
    "optimal_gamma",
    "OptimalGamma",
    "operations_factor",
    "improvement_lower_bound",
    "block_efficiency",
    "tree_acceptance_rates",
    "block_walltime_improvement",
    "speedup_table",
]


def _rate(alpha: object, name: str = "alpha") -> np.ndarray:
    if isinstance(alpha, bool):
        raise TypeError(f"{name} must be a number or array of numbers, got bool")
    try:
        a = np.asarray(alpha, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or array of numbers, got {type(alpha).__name__}") from None
    if not np.all(np.isfinite(a)) or (a < 0).any() or (a > 1).any():
        raise ValueError(f"{name} must lie in [0, 1], got {alpha!r}")
    return a


def _cost(c: object, name: str = "c") -> np.ndarray:
    if isinstance(c, bool):
        raise TypeError(f"{name} must be a number, got bool")
    try:
        v = np.asarray(c, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or array of numbers, got {type(c).__name__}") from None
    if not np.all(np.isfinite(v)) or (v < 0).any():
        raise ValueError(f"{name} (cost coefficient) must be finite and >= 0, got {c!r}")
    return v


def _gamma(gamma: object) -> np.ndarray:
    g = np.asarray(gamma)
    if g.dtype == bool or not np.issubdtype(g.dtype, np.integer):
        if np.issubdtype(g.dtype, np.floating) and np.all(g == np.round(g)):
            g = g.astype(np.int64)
        else:
            raise TypeError(f"gamma (draft length) must be an integer, got {gamma!r}")
    if (g < 0).any():
        raise ValueError(f"gamma (draft length) must be >= 0, got {gamma!r}")
    return g.astype(np.int64)


def _scalar(x: np.ndarray) -> float | np.ndarray:
    return float(x) if x.ndim == 0 else x


def expected_tokens(alpha: object, gamma: object) -> float | np.ndarray:
    """Expected tokens per iteration ``(1 − α^{γ+1})/(1 − α)`` (Leviathan Eq. 1); ``γ + 1`` at α = 1."""
    a, g = _rate(alpha), _gamma(gamma)
    a, g = np.broadcast_arrays(a, g)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(a < 1.0, -np.expm1((g + 1) * np.log(np.where(a > 0, a, 1.0))) / (1.0 - a), g + 1.0)
    out = np.where(a == 0.0, 1.0, out)
    return _scalar(np.asarray(out, dtype=np.float64))


def walltime_improvement(alpha: object, gamma: object, c: object) -> float | np.ndarray:
    """Expected walltime improvement ``(1 − α^{γ+1}) / ((1 − α)(γc + 1))`` (Leviathan Thm 3.8)."""
    g = _gamma(gamma)
    return _scalar(np.asarray(expected_tokens(alpha, g)) / (g * _cost(c) + 1.0))


def operations_factor(alpha: object, gamma: object, c_hat: object) -> float | np.ndarray:
    """Expected factor of arithmetic operations ``(1 − α)(γĉ + γ + 1)/(1 − α^{γ+1})`` (Leviathan Thm 3.11)."""
    g = _gamma(gamma)
    return _scalar((g * _cost(c_hat, "c_hat") + g + 1.0) / np.asarray(expected_tokens(alpha, g)))


def improvement_lower_bound(alpha: object, c: object) -> float | np.ndarray:
    """``(1 + α)/(1 + c)``: the improvement at γ = 1, hence a lower bound on the optimum (Corollary 3.9)."""
    return _scalar((1.0 + _rate(alpha)) / (1.0 + _cost(c)))


@dataclass(frozen=True)
class OptimalGamma:
    """Result of :func:`optimal_gamma`.

    Attributes:
        gamma: the draft length maximising the walltime improvement (``0`` = do not speculate).
        improvement: the improvement at that γ (1.0 at γ = 0).
        expected_tokens: expected tokens per iteration at that γ.
    """

    gamma: int
    improvement: float
    expected_tokens: float


def optimal_gamma(alpha: float, c: float, max_gamma: int = 256) -> OptimalGamma:
    """The integer γ ∈ [0, max_gamma] maximising :func:`walltime_improvement` (exhaustive search).

    γ = 0 (plain decoding, improvement 1) wins when speculation cannot pay off (e.g. α ≤ c).
    """
    a = float(_rate(alpha))
    cc = float(_cost(c))
    if isinstance(max_gamma, bool) or not isinstance(max_gamma, (int, np.integer)) or max_gamma < 1:
        raise ValueError(f"max_gamma must be an int >= 1, got {max_gamma!r}")
    g = np.arange(0, int(max_gamma) + 1)
    imp = np.asarray(walltime_improvement(a, g, cc))
    best = int(np.argmax(imp))  # first maximiser: the smallest optimal γ
    return OptimalGamma(best, float(imp[best]), float(np.asarray(expected_tokens(a, best))))


def block_efficiency(rates: object) -> float | np.ndarray:
    """Expected tokens per target call from per-depth acceptance rates ``a [..., L]``:
    ``1 + Σ_{d=1}^{L} Π_{j≤d} a_j`` (SpecTr's block efficiency under an i.i.d.-per-depth model)."""
    a = _rate(rates, "rates")
    if a.ndim == 0:
        raise ValueError("rates must be a vector [L] (or batch [..., L]) of per-depth acceptance rates")
    return _scalar(1.0 + np.cumprod(a, axis=-1).sum(-1))


def tree_acceptance_rates(expansion: Sequence[int], alpha_of_n: Callable[[int], float] | Sequence[float]) -> np.ndarray:
    """Per-depth acceptance rates of a draft tree with expansion factors ``(k_1..k_L)``.

    Args:
        expansion: children per node at each depth (``k_d ≥ 1``); K·L chains are ``(K,1,..,1)`` for
            SpecTr's DraftSelection only approximately (surviving drafts shrink after depth 1).
        alpha_of_n: ``n → α(n)``, the token-level acceptance with n drafts (e.g.
            ``lambda n: optimal_acceptance(p, q, n, "wor").alpha`` or a verifier's acceptance), or a
            sequence indexed by ``n − 1``.

    Returns:
        ``[L]`` rates ``a_d = α(k_d)`` for :func:`block_efficiency`.
    """
    ks = list(expansion)
    if not ks or any(isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1 for k in ks):
        raise ValueError(f"expansion must be a non-empty sequence of ints >= 1, got {expansion!r}")
    if callable(alpha_of_n):
        vals = [float(alpha_of_n(int(k))) for k in ks]
    else:
        table = list(alpha_of_n)
        if max(ks) > len(table):
            raise ValueError(f"alpha_of_n has {len(table)} entries but the tree needs n up to {max(ks)}")
        vals = [float(table[k - 1]) for k in ks]
    return _rate(np.array(vals), "alpha_of_n values")


def block_walltime_improvement(rates: object, c: object) -> float | np.ndarray:
    """Walltime improvement of a depth-L block: ``block_efficiency(rates) / (1 + c·L)``."""
    a = _rate(rates, "rates")
    L = a.shape[-1]
    return _scalar(np.asarray(block_efficiency(a)) / (1.0 + _cost(c) * L))


def speedup_table(alpha: float, c: float, max_gamma: int = 10) -> list[dict[str, float]]:
    """Rows ``{gamma, expected_tokens, improvement, optimal}`` for γ = 1..max_gamma (CLI table)."""
    opt = optimal_gamma(alpha, c, max(max_gamma, 256))
    rows = []
    for g in range(1, int(max_gamma) + 1):
        rows.append(
            {
                "gamma": g,
                "expected_tokens": float(np.asarray(expected_tokens(alpha, g))),
                "improvement": float(np.asarray(walltime_improvement(alpha, g, c))),
                "optimal": g == opt.gamma,
            }
        )
    return rows
