"""Hybrid drafting: a model-free suffix draft where the text repeats itself, a draft model elsewhere.

Suffix decoding (Oliaro et al. 2024, arXiv:2411.04975, Sec. 4.4) is combined with a model drafter
(EAGLE-3 there) by choosing, at every iteration, whichever draft promises more: suffix trees cost
almost nothing to build and are accepted far into repeated spans (code that quotes the prompt,
lists, boilerplate), while a draft model keeps drafting where nothing repeats.

**The choice** (:meth:`HybridDrafter.propose`). The suffix drafter proposes first; its scores give
the expected number of accepted drafts E_s = Σ_i min(1, a·s_i) of its N_s nodes (calibrated
scores, :class:`~specot.drafting.SuffixDrafter`). The model drafter's expected accepted drafts E_m,
tree size N_m and draft passes D_m are exponential moving averages over the iterations it drafted.
With the cost model of the suffix drafter — a target pass over N draft tokens costs
cost(N) = ``r(1 + N)`` one-token passes on its measured curve, else ``1 + f + c·N`` — plus ``c_d``
per draft pass (the cost coefficient c of the draft model), the drafter keeps the suffix tree when

    (1 + E_s) / cost(N_s)  ≥  (1 + E_m) / (cost(N_m) + c_d·D_m)

(expected tokens per unit of target time), and otherwise asks the model drafter — unless the
model drafter's value is below 1, the value of a plain target step (no draft): then nothing is
drafted, except that every ``probe_every``-th such iteration the model drafts anyway, so that its
averages follow the text (a model that stops paying for itself on one stretch of text may pay again
on the next). By default ``probe_every = 1``: the model drafts on every such iteration — with the
shipped EAGLE head on a CPU the plain steps lost more block efficiency than the skipped draft
passes saved (an interleaved comparison of ``probe_every`` and ``draft_cost``, docs/results.md). The
suffix drafter's own budget already returns the empty tree when no suffix tree beats a plain step. The model drafter does no work on
iterations it does not draft: an EAGLE head catches up on the target's features of those
positions in one pass the next time it drafts.

**Exactness.** The choice is a function of the committed context and past outcomes only, and each
iteration verifies one drafter's tree under that drafter's declared law, so every committed token
follows the target's distribution exactly. Both drafters must use laws the one verifier accepts:
chains (one draft per node, any single-draft verifier: a suffix chain is a one-hot q) or trees
under the GREEDY law (the suffix drafter's trees and EAGLE's top-k trees, verified by ``greedy``).
"""

from __future__ import annotations

import time
from typing import Sequence

import torch

from ..sampling import SamplingConfig
from .base import DraftOutcome, DraftSchedule, DraftTree, Drafter
from .suffix import SuffixDrafter
from .tree import DraftShape

__all__ = ["HybridDrafter", "model_drafter"]


class HybridDrafter(Drafter):
    """A suffix drafter and a model drafter, the better one chosen at every iteration (module docstring).

    Args:
        suffix: the model-free drafter (its ``cost_fixed`` f and ``cost_per_token`` c are the cost
            model of the choice).
        model: the draft model's drafter (an :class:`~specot.drafting.EagleDrafter` or a
            :class:`~specot.drafting.ModelDrafter`); its ``hidden_layers`` become this drafter's.
        draft_cost: c_d, the cost of one draft pass of ``model`` in autoregressive target steps
            (default 0.03: the shipped EAGLE head of SmolLM2-135M against a target step on a CPU in
            bf16; the same comparison).
        decay: weight of the past in the model drafter's moving averages (default 0.9).
        probe_every: while the model drafter's value is below a plain step's, it still drafts every
            ``probe_every``-th iteration (default 1: every time, so no plain target steps; 1 beat 8
            in the same comparison; 0: never).

    Raises:
        ValueError: drafters with different vocabulary sizes, ``draft_cost < 0``, ``decay``
            outside [0, 1) or ``probe_every < 0``.
    """

    def __init__(self, suffix: SuffixDrafter, model: Drafter, *, draft_cost: float = 0.03, decay: float = 0.9,
                 probe_every: int = 1) -> None:
        super().__init__()
        if not isinstance(suffix, SuffixDrafter):
            raise TypeError(f"suffix must be a SuffixDrafter, got {type(suffix).__name__}")
        if not isinstance(model, Drafter) or isinstance(model, (SuffixDrafter, HybridDrafter)):
            raise TypeError(f"model must be a draft model's Drafter, got {type(model).__name__}")
        if suffix.vocab_size is not None and model.vocab_size is not None and suffix.vocab_size != model.vocab_size:
            raise ValueError(f"vocabulary mismatch: the suffix drafter's q has {suffix.vocab_size} tokens, the "
                             f"draft model's {model.vocab_size}")
        if not draft_cost >= 0.0:
            raise ValueError(f"draft_cost must be >= 0, got {draft_cost!r}")
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must lie in [0, 1), got {decay!r}")
        if isinstance(probe_every, bool) or not isinstance(probe_every, int) or probe_every < 0:
            raise ValueError(f"probe_every must be an integer >= 0, got {probe_every!r}")
        self.probe_every = probe_every
        self.suffix, self.model = suffix, model
        self.draft_cost, self.decay = float(draft_cost), float(decay)
        self.hidden_layers = model.hidden_layers
        self.name = f"suffix+{model.name}"
        self.reset()

    @property
    def vocab_size(self) -> int | None:
        return self.model.vocab_size if self.model.vocab_size is not None else self.suffix.vocab_size

    @property
    def device(self) -> torch.device | None:
        return self.model.device

    def reset(self) -> None:
        self.suffix.reset()
        self.model.reset()
        # moving averages of the model drafter's iterations: accepted drafts, tree size, draft passes
        # (prior: one accepted draft of a γ-deep chain — set in start(), once γ is known)
        self._acc, self._size, self._passes = 1.0, 1.0, 1.0
        self._last: Drafter | None = None
        self._skipped = 0  # iterations without a suffix tree since the model drafter last drafted
        self.choices: list[str] = []  # "suffix" / "model" / "none" per proposal (for reports)

    def start(self, prompt_ids: Sequence[int], spec: DraftShape, schedule: DraftSchedule | None = None,
              stop_tokens: frozenset[int] = frozenset()) -> None:
        """:meth:`Drafter.start` of both drafters, each with its own schedule: the suffix drafter
        reads ``spec`` as its budget (:meth:`TreeBudget.of <specot.drafting.TreeBudget.of>`); the
        model drafter draws ``spec`` (a :class:`~specot.drafting.TreeSpec`; an EAGLE drafter's
        dynamic trees take a :class:`~specot.drafting.TreeBudget` too)."""
        super().start(prompt_ids, spec, schedule, stop_tokens)
        for d in (self.suffix, self.model):  # each its own schedule (a shared one would advance twice)
            d.start(prompt_ids, spec, DraftSchedule(self.schedule.gamma, self.schedule.kind), stop_tokens)
        self._size = self._passes = float(spec.depth)

    def use_static_cache(self, max_len: int, *, cuda_graphs: bool = False) -> "HybridDrafter":
        """The model drafter's :meth:`~specot.drafting.Drafter.use_static_cache` (suffix trees need none)."""
        self.model.use_static_cache(max_len, cuda_graphs=cuda_graphs)
        return self

    def _model_value(self) -> float:
        """(1 + E_m) / (cost(N_m) + c_d·D_m): the model drafter's expected tokens per unit of target
        time, the pass priced as the suffix drafter prices its own (its measured curve r(1 + N_m)
        where it has one, else ``1 + f + c·N_m``; plus its drafted step's work)."""
        return (1.0 + self._acc) / (self.suffix._pass_cost(self._size) + self.draft_cost * self._passes)

    def propose(self, context: Sequence[int], gamma: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """The suffix drafter's tree when it promises more than the model drafter, else the model
        drafter's (module docstring); deterministic given the context and past outcomes, apart
        from the model drafter's own sampling from ``generator``."""
        t0 = time.perf_counter()
        calls0 = self.suffix.calls + self.model.calls
        tree = self.suffix.propose(context, gamma, sampling, generator)
        self._last = self.suffix
        model_value = self._model_value()
        if tree.size == 0 or self.suffix.expected_value() < model_value:
            self._skipped += 1
            if model_value >= 1.0 or (self.probe_every and self._skipped >= self.probe_every):
                tree = self.model.propose(context, gamma, sampling, generator)
                self._last, self._skipped = self.model, 0
            else:  # neither beats a plain target step
                tree, self._last = DraftTree.root(int(context[-1])), None
        self.choices.append("none" if tree.size == 0 else ("suffix" if self._last is self.suffix else "model"))
        self.calls += self.suffix.calls + self.model.calls - calls0
        self.draft_time_s += time.perf_counter() - t0
        return tree

    def update(self, outcome: DraftOutcome) -> None:
        """Both drafters learn the outcome (the suffix index and the EAGLE features need every
        committed token); the moving averages learn the model drafter's own iterations."""
        super().update(outcome)
        self.suffix.update(outcome)
        self.model.update(outcome)
        if self._last is self.model and outcome.tree.size:
            w = self.decay
            self._acc = w * self._acc + (1 - w) * outcome.accepted
            self._size = w * self._size + (1 - w) * outcome.tree.size
            self._passes = w * self._passes + (1 - w) * max(outcome.tree.draft_calls, 1)
        self._last = None


def model_drafter(drafter: Drafter | None) -> Drafter | None:
    """The drafter of ``drafter``'s draft model: a hybrid's model drafter, else ``drafter`` itself
    (where a draft model's pricing, :class:`~specot.drafting.pricing.PricedChains`, is read)."""
    return drafter.model if isinstance(drafter, HybridDrafter) else drafter
