"""Which drafts pay on a llama.cpp target: specot's speedup model with a measured cost curve.

specot's model (:mod:`specot.theory.speedup`, Leviathan et al. 2023 Thm 3.8; SpecTr's block
efficiency for trees) charges a target pass the same whatever its width. On llama.cpp on a CPU a
pass over B tokens costs r(B) = t(B)/t(1) one-token passes (:mod:`specot_llamacpp.cost`), so:

* a chain of γ drafts with i.i.d. acceptance α and draft cost c per draft token (in one-token target
  passes): ``speedup = E(α, γ) / (r(1 + γ) + γ·c)``, ``E = (1 − α^{γ+1})/(1 − α)`` (Eq. 1);
* a draft tree of N nodes and depth L with per-depth acceptance rates a_1..a_L:
  ``speedup = (1 + Σ_d Π_{j≤d} a_j) / (r(1 + N) + L·c)``;
* a run's own prediction, from its iterations (tree sizes N_i, committed tokens n_i):
  ``Σ n_i / Σ (r(1 + N_i) + c_i)`` against autoregressive decoding's one pass per token — exact
  bookkeeping of where the passes' time goes, with nothing assumed about acceptance.

:func:`break_even_alpha` is the acceptance a chain needs just to pay for its wider pass; with r(2)
near 2 (a pass of two tokens costing two passes of one), no acceptance rate can pay for γ = 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from specot.calibration import break_even_alpha as _break_even_alpha
from specot.plan import make_plan
from specot.theory.speedup import block_efficiency, expected_tokens

from .auto import AUTO_PLAN, PASS_COST, auto_choice
from .cost import CostCurve

__all__ = ["chain_speedup", "tree_speedup", "break_even_alpha", "run_speedup", "best_chain", "ChainChoice",
           "QUIET_CURVE", "AUTO_PLAN", "PASS_COST", "auto_choice", "auto_drafter"]


def chain_speedup(alpha: float, gamma: int, curve: CostCurve, c: float = 0.0, way: str = "all") -> float:
    """Predicted speedup of a γ-chain over autoregressive decoding on a target with cost ``curve``
    (module docstring); ``γ = 0`` gives 1.

    Raises:
        ValueError: α outside [0, 1], γ < 0 or c < 0.
    """
    if gamma < 0 or c < 0:
        raise ValueError(f"gamma must be >= 0 and c >= 0, got {gamma} and {c}")
    if gamma == 0:
        return 1.0
    return float(expected_tokens(alpha, gamma)) / (curve.ratio(1 + gamma, way) + gamma * c)


def tree_speedup(rates: Sequence[float], n_nodes: int, curve: CostCurve, c: float = 0.0) -> float:
    """Predicted speedup of a draft tree of ``n_nodes`` nodes and depth ``len(rates)`` with per-depth
    acceptance ``rates`` and draft cost ``c`` per depth (module docstring).

    Raises:
        ValueError: rates outside [0, 1], or fewer nodes than depths.
    """
    if n_nodes < len(rates):
        raise ValueError(f"a tree of depth {len(rates)} has at least {len(rates)} nodes, got {n_nodes}")
    return float(block_efficiency(list(rates))) / (curve.ratio(1 + n_nodes, "tree") + len(rates) * c)


def break_even_alpha(gamma: int, curve: CostCurve, c: float = 0.0) -> float | None:
    """The smallest i.i.d. acceptance α at which a γ-chain pays (speedup 1), by bisection; ``None``
    when even α = 1 does not (``γ + 1 <= r(1 + γ) + γc``): :func:`specot.calibration.break_even_alpha`
    with the curve's ``all`` ratios.

    Raises:
        ValueError: γ < 0 or c < 0.
    """
    return _break_even_alpha(gamma, lambda b: curve.ratio(b, "all"), c)


def run_speedup(tree_sizes: Sequence[int], emitted: Sequence[int], curve: CostCurve,
                draft_cost: Sequence[float] | None = None) -> float:
    """A run's predicted speedup from its iterations: ``Σ emitted / Σ (r(1 + N_i) + c_i)``.

    Args:
        tree_sizes: draft nodes N_i of each iteration (0: a plain step).
        emitted: tokens committed by each iteration.
        curve: the target's cost curve.
        draft_cost: the drafter's time per iteration in one-token target passes (default 0).
    """
    if len(tree_sizes) != len(emitted) or not tree_sizes:
        raise ValueError("tree_sizes and emitted must be non-empty and of one length")
    cost = sum(curve.ratio(1 + int(n)) for n in tree_sizes) + (sum(draft_cost) if draft_cost is not None else 0.0)
    return float(sum(emitted)) / cost


@dataclass(frozen=True)
class ChainChoice:
    """The best chain length for an acceptance rate: γ (0 = do not speculate) and its speedup."""

    alpha: float
    gamma: int
    speedup: float


def best_chain(alpha: float, curve: CostCurve, c: float = 0.0, max_gamma: int = 10) -> ChainChoice:
    """The γ in ``0..max_gamma`` with the highest :func:`chain_speedup` (first maximiser)."""
    vals = [chain_speedup(alpha, g, curve, c) for g in range(max_gamma + 1)]
    g = int(np.argmax(vals))
    return ChainChoice(float(alpha), g, round(float(vals[g]), 4))


#: FALLBACK and reference: the cost curve t(B)/t(1) of the embedded SmolLM2 Q4_1 GGUF on llama.cpp,
#: logits on all rows, measured on a quiet 2-vCPU Zen 4 (avx512_bf16) with llama-cpp-python 0.3.36 and
#: n_threads = 2: 10.1 / 19.0 / 31.9 / 54.2 ms at B = 1 / 2 / 5 / 11 (the measurement that opened this
#: backend's work). It prices nothing where the target was calibrated (:meth:`LlamaCppTarget.pass_cost_curve`,
#: ``specot calibrate``): other CPUs differ (an AVX2-only EPYC: r = 1.56 / 2.27 / 3.28 / 4.34 at
#: B = 2 / 3 / 5 / 7). :data:`PASS_COST` is its linear fit. Measure all three ways with
#: ``python -m specot_llamacpp.bench cost`` on a quiet machine.
QUIET_CURVE = CostCurve(widths=(1, 2, 5, 11), t_all_ms=(10.1, 19.0, 31.9, 54.2), t_last_ms=(10.1, 13.6, 21.5, 47.4),
                        t_tree_ms=(10.1, 19.0, 31.9, 54.2), context_len=0, repeats=0, n_threads=2)

def auto_drafter(target, temperature: float = 0.0, curve: CostCurve | None = None):
    """The drafter and draft-tree shape of ``draft="auto"`` on ``target`` at ``temperature`` (the plan
    :func:`specot.plan.make_plan` makes from :func:`auto_choice`), priced by ``curve``'s ``all``
    ratios when given (e.g. measured by :func:`specot_llamacpp.cost.measure_cost_curve`), else as the
    plan prices it: the target's calibrated curve (:meth:`LlamaCppTarget.pass_cost_curve`), or its
    fallback ``pass_cost``.

    Returns:
        ``(drafter, TreeBudget)`` for :func:`specot.engine.tree_generate`: the suffix drafter and
        its budget (:class:`specot.drafting.TreeBudget`: children per node × depth γ).
    """
    plan = make_plan("auto", target=target, temperature=temperature)
    drafter = plan.draft.load(target)
    if curve is not None:
        drafter.pass_cost = curve.pass_cost_curve(source="specot_llamacpp.cost.measure_cost_curve")
    return drafter, plan.shape
