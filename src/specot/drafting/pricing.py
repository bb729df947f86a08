"""Pricing a draft: how many draft nodes pay for their target pass (and for their draft passes).

One formula prices every drafter that adapts its draft to the target's cost. A target pass scoring
N ≥ 1 draft nodes costs ``cost(N)`` one-token passes — ``r(1 + N)`` of the target's measured
pass-cost curve (:class:`specot.calibration.PassCostCurve`), else the linear model
``1 + f + c·N`` — plus the drafted step's own work outside the pass (``overhead``); ``cost(0) = 1``,
a plain step (:func:`pass_cost`). A draft whose node i is accepted with probability P_i (its whole
path accepted) yields ``1 + Σ_{i≤N} P_i`` tokens per pass (the bonus or correction token included),
so its **value**, tokens per one-token pass, is ``(1 + Σ_{i≤N} P_i) / (cost(N) + D)`` with D the
drafter's own work in one-token passes (a draft model's passes; 0 for suffix decoding); a plain
step's is 1 (:func:`block_values`). The suffix drafter keeps the N of the highest value over its
scored nodes (:meth:`specot.drafting.SuffixDrafter`'s budget); a draft model's chains are priced
node by node as they are drafted (:class:`ChainPricer`).

**A draft model's chain** (:class:`ChainPricer`; Leviathan et al. 2023 §3.5 for the model of a
chain, the draft's confidence as a stopping signal as in llama.cpp's ``p_min`` and SpecDec++). After
k nodes (path probability P_k, expected tokens E_k = 1 + Σ_{i≤k} P_i, cost T_k = cost(k) + D_k),
node k + 1 has the draft's distribution q_{k+1} but no token yet. Its acceptance given its parent
is estimated from the draft's **confidence** in q_{k+1} — at T = 0 the top-1 probability of the
draft's softmax (the acceptance if the target's argmax were distributed as the draft believes), at
T > 0 Σ_x q(x)² (the acceptance Σ min(p, q) if the target were certain of a token distributed as
q) — through a per-generation calibration (:class:`AcceptanceCalibration`: per confidence bucket,
the verified nodes' acceptance around the prior "acceptance = confidence"). Adding node k + 1 gains
P_{k+1} = P_k·â_{k+1} expected tokens and costs the target's width step cost(k + 1) − cost(k), and,
to draft the node after it, one more draft pass d (the draft's one-token pass in units of the
target's t(1)). The chain takes node k + 1 while some length k + j (j ≥ 1; later nodes projected
with the latest acceptance â) has a higher value than k — the marginal gain against the marginal
cost at the block's own rate E_k/T_k, which for the first node is "P_1 beats d + r(2) − r(1)" — and
pays the next draft pass only while some longer chain still beats the value it has. Looking past
the next node prices a curve whose steps are uneven (llama.cpp's repacked kernels make some widths
cheap). γ is the most nodes a chain may hold.

**Exactness.** A node is taken or refused from what is known before its token is drawn (q_{k+1}
and the drafts before it): the chain's length is a stopping time of the drafting, so every draft
that is verified was drawn from the q it carries and every verifier stays exact (Leviathan et al.
2023, Thm. 1, holds for any draft length chosen so). A drawn draft is never dropped for what came
after it: that would keep drafts whose q-mass favoured a longer chain, biasing them away from q.
The calibration learns from past outcomes only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

__all__ = ["pass_cost", "block_values", "best_size", "AcceptanceCalibration", "ChainPricer", "PricedChains",
           "priced_chains", "CONFIDENCE_EDGES"]

#: Lower edges of the confidence buckets of :class:`AcceptanceCalibration`.
CONFIDENCE_EDGES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def pass_cost(nodes: int, curve: Callable[[int], float] | None = None, *, cost_fixed: float = 0.0,
              cost_per_token: float = 0.0, overhead: float = 0.0) -> float:
    """The cost of a target pass scoring ``nodes`` draft nodes, in one-token passes (module docstring).

    Args:
        nodes: draft nodes N ≥ 0 in the pass (0: a plain step, cost 1).
        curve: B ↦ r(B), a measured curve (``r(1) = 1``), or ``None`` for the linear model.
        cost_fixed, cost_per_token: f and c of the linear model ``1 + f + c·N``.
        overhead: a drafted step's own work outside its pass (N ≥ 1 only), in one-token passes.

    Raises:
        ValueError: ``nodes < 0``.
    """
    if nodes < 0:
        raise ValueError(f"a pass scores nodes >= 0 draft nodes, got {nodes}")
    if nodes == 0:
        return 1.0
    if curve is not None:
        return float(curve(1 + nodes)) + overhead
    return 1.0 + cost_fixed + cost_per_token * nodes + overhead


def block_values(path_probs: Sequence[float], cost: Callable[[int], float], drafting: float = 0.0) -> list[float]:
    """``values[N] = (1 + Σ_{i≤N} P_i) / (cost(N) + drafting)`` for N = 0..len(path_probs): the
    expected tokens per one-token pass of the first N nodes (module docstring); ``values[0]`` is a
    plain step's, ``1 / (1 + drafting)``.

    Args:
        path_probs: P_i, the probability that node i and its whole path are accepted, best first.
        cost: N ↦ the pass's cost (:func:`pass_cost`).
        drafting: the drafter's work, one-token passes (the same for every N: already spent).
    """
    values, gain = [1.0 / (cost(0) + drafting)], 1.0
    for n, p in enumerate(path_probs, start=1):
        gain += p
        values.append(gain / (cost(n) + drafting))
    return values


def best_size(values: Sequence[float]) -> int:
    """The N of the highest value (the first, i.e. smallest, maximiser)."""
    return max(range(len(values)), key=values.__getitem__)


class AcceptanceCalibration:
    """Confidence → acceptance, learned per generation from the verifier's outcomes.

    Per bucket b of :data:`CONFIDENCE_EDGES`: ``â(c) = (accepted_b + w·c) / (verified_b + w)`` —
    the prior "acceptance = confidence" (``w`` pseudo nodes) moved by this generation's verified
    nodes of that bucket (a node counts once it is verified: its parent was accepted).

    Args:
        weight: pseudo nodes w of the prior (default 4).

    Raises:
        ValueError: ``weight <= 0``.
    """

    def __init__(self, weight: float = 4.0) -> None:
        if not weight > 0:
            raise ValueError(f"the calibration's prior weight must be > 0, got {weight!r}")
        self.weight = float(weight)
        self.reset()

    def reset(self) -> None:
        """Forget every outcome (a new generation)."""
        self.verified = [0.0] * len(CONFIDENCE_EDGES)
        self.accepted = [0.0] * len(CONFIDENCE_EDGES)

    @staticmethod
    def bucket(confidence: float) -> int:
        """The bucket of ``confidence`` (clipped to [0, 1])."""
        c = min(1.0, max(0.0, float(confidence)))
        return max(i for i, e in enumerate(CONFIDENCE_EDGES) if c >= e)

    def rate(self, confidence: float) -> float:
        """â(c), the estimated acceptance of a node of confidence ``c``, in [0, 1]."""
        c = min(1.0, max(0.0, float(confidence)))
        b = self.bucket(c)
        return (self.accepted[b] + self.weight * c) / (self.verified[b] + self.weight)

    def record(self, confidence: float, accepted: bool) -> None:
        """One verified node of ``confidence``: accepted or not."""
        b = self.bucket(confidence)
        self.verified[b] += 1.0
        self.accepted[b] += 1.0 if accepted else 0.0

    def record_chain(self, confidences: Sequence[float], accepted: int) -> None:
        """A verified chain: its nodes' confidences in order, ``accepted`` of them accepted (the first
        ones); the node after them was verified and rejected, the rest were not verified."""
        for i, c in enumerate(confidences[:accepted + 1]):
            self.record(c, i < accepted)


@dataclass
class ChainPricer:
    """Decides, node by node, how long a draft model's chain is (module docstring).

    Args:
        cost: N ↦ the target pass's cost in one-token passes (:func:`pass_cost` with the target's
            curve; ``cost(0) = 1``).
        draft_cost: one draft pass in one-token target passes (d ≥ 0).
        calibration: confidence → acceptance (:class:`AcceptanceCalibration`), shared across the
            generation's chains.

    Use: :meth:`begin` after the first draft pass of a chain (it is counted), then for each node
    :meth:`take` with the confidence of its q (``False``: the chain ends before it), and before each
    further draft pass :meth:`go_on` (``False``: the chain ends after the last node taken).
    """

    cost: Callable[[int], float]
    draft_cost: float
    calibration: AcceptanceCalibration

    def __post_init__(self) -> None:
        if not (self.draft_cost >= 0 and math.isfinite(self.draft_cost)):
            raise ValueError(f"draft_cost must be a finite number >= 0 (one-token target passes), got {self.draft_cost!r}")
        self.begin()

    def begin(self, passes: int = 1) -> None:
        """A new chain whose first ``passes`` draft passes are spent."""
        self.nodes, self.gain, self.path, self.last = 0, 1.0, 1.0, 1.0
        self.drafting = passes * self.draft_cost

    def value(self) -> float:
        """Expected tokens per one-token pass of the chain as it stands."""
        return self.gain / (self.cost(self.nodes) + self.drafting)

    def _best_ahead(self, first: float, next_rate: float, room: int, first_pass: bool) -> float:
        """The best value of the chain lengthened by j = 1..room nodes: the first accepted with
        ``first``, the others with ``next_rate`` each, one draft pass per node after the first (and
        before it when ``first_pass``)."""
        gain, path, best = self.gain, self.path, -math.inf
        drafting = self.drafting + (self.draft_cost if first_pass else 0.0)
        for j in range(1, room + 1):
            path *= first if j == 1 else next_rate
            gain += path
            best = max(best, gain / (self.cost(self.nodes + j) + drafting))
            drafting += self.draft_cost
        return best

    def take(self, confidence: float, room: int = 1) -> bool:
        """Whether the chain takes its next node, of draft confidence ``confidence`` (its draft pass
        is spent); ``room``: nodes the chain may still hold, this one included. Taken: the chain's
        expected tokens grow by P_k·â."""
        a = self.calibration.rate(confidence)
        if self._best_ahead(a, a, max(1, room), first_pass=False) <= self.value():
            return False
        self.nodes += 1
        self.path *= a
        self.gain += self.path
        self.last = a
        return True

    def go_on(self, room: int) -> bool:
        """Whether to pay one more draft pass for up to ``room`` more nodes (projected with the last
        node's acceptance); the pass is counted when it is."""
        if room < 1 or self._best_ahead(self.last, self.last, room, first_pass=True) <= self.value():
            return False
        self.drafting += self.draft_cost
        return True


class PricedChains:
    """A chain drafter's pricing (:mod:`specot.drafting.pricing`): the generation's confidence →
    acceptance calibration, the pricer of its chains, and the confidences of the chain last proposed
    (learned from its outcome).

    Args:
        cost: N ↦ the target pass's cost in one-token passes (:func:`pass_cost`
            with the target's curve).
        draft_cost: one draft pass in one-token target passes.
        source: where the costs come from, for reports.
        weight: pseudo nodes of the calibration's prior.
    """

    def __init__(self, cost: Callable[[int], float], draft_cost: float, source: str = "given",
                 weight: float = 4.0) -> None:
        self.calibration = AcceptanceCalibration(weight)
        self.pricer = ChainPricer(cost, float(draft_cost), self.calibration)
        self.source = source
        self.last: list[float] = []
        self.lengths: list[int] = []  # nodes of each priced chain, for reports

    def reset(self) -> None:
        """A new generation: the calibration starts again from its prior."""
        self.calibration.reset()
        self.last = []
        self.lengths = []

    def note(self, confidences: Sequence[float]) -> None:
        """The confidences of the chain just proposed."""
        self.last = list(confidences)
        self.lengths.append(len(self.last))

    def learn(self, accepted: int) -> None:
        """The outcome of the chain last proposed: its first ``accepted`` nodes were accepted."""
        self.calibration.record_chain(self.last, accepted)
        self.last = []

    def to_dict(self) -> dict[str, Any]:
        """The pricing's inputs, for reports."""
        costs = [round(self.pricer.cost(n), 4) for n in range(9)]  # a pass of 0..8 draft nodes
        return {"draft_cost": round(self.pricer.draft_cost, 4), "pass_cost": costs, "source": self.source}


def priced_chains(target: Any, draft: Any) -> PricedChains | None:
    """The pricing of ``draft``'s chains for ``target`` from their measured costs, or ``None`` (chains
    of γ) when either is not measured: the target's pass-cost curve (``target.pass_cost_curve()``, a
    :class:`~specot.calibration.PassCostCurve` timed on this machine) prices the pass; the draft's own
    measured t(1) (``draft.pass_cost_curve()``) over the target's gives d. Both are calibrated once
    and cached (:func:`specot.calibration.calibrate`)."""
    curves = []
    for model in (target, draft):
        measured = getattr(model, "pass_cost_curve", None)
        curve = measured() if callable(measured) else None
        if curve is None or not getattr(curve, "repeats", 0) or not getattr(curve, "t_ms", None):
            return None
        curves.append(curve)
    tc, dc = curves
    d = float(dc.t_ms[0]) / float(tc.t_ms[0])
    return PricedChains(functools.partial(pass_cost, curve=tc), d,
                        source=f"target {tc.source} t(1) = {tc.t_ms[0]:.2f} ms, draft {dc.source} t(1) = {dc.t_ms[0]:.2f} ms")
