"""Priced drafting (specot.drafting.pricing): one pass-cost formula for the suffix drafter and the draft
models' chains; a chain taken node by node where the draft's confidence pays for one more draft pass
and a wider target pass; γ the most; exact at T = 1 (the length is a stopping time)."""

from __future__ import annotations

import functools
import math

import pytest
import torch

from engine_helpers import chi_square_pvalue, exact_joint
from model_helpers import tiny_lm
from specot.drafting import ModelDrafter, SuffixDrafter
from specot.drafting.model import confidence, draft_chain
from specot.calibration import PassCostCurve
from specot.drafting.pricing import (AcceptanceCalibration, ChainPricer, PricedChains, block_values, best_size,
                                     pass_cost, priced_chains)
from specot.engine import GenerationConfig, autoregressive_generate, make_generator, speculative_generate
from specot.sampling import SamplingConfig

GREEDY = SamplingConfig(temperature=0.0)
V = 8


def row_of(conf: float, top: int = 3) -> torch.Tensor:
    """Logits ``[1, V]`` whose softmax puts ``conf`` on token ``top`` and the rest evenly elsewhere."""
    rest = (1.0 - conf) / (V - 1)
    x = torch.full((1, V), math.log(rest), dtype=torch.float64)
    x[0, top] = math.log(conf)
    return x


def chain_of(confs, curve, d, depth, calibration=None, tail=0):
    """A chain drafted from a fake draft whose q after k drafts has top-1 probability ``confs[k]``."""
    rows = iter([row_of(c) for c in confs])
    fed = []
    cal = calibration or AcceptanceCalibration()
    pricer = ChainPricer(functools.partial(pass_cost, curve=curve), d, cal)
    chain = draft_chain(lambda: next(rows), lambda tok: fed.append(tok) or next(rows), depth, GREEDY, None,
                        pricer=pricer, tail=tail)
    return chain, fed


def test_pass_cost_is_one_formula():
    curve = {1: 1.0, 2: 1.5, 3: 1.8}.__getitem__
    assert pass_cost(0, curve) == 1.0 and pass_cost(2, curve, overhead=0.1) == pytest.approx(1.9)
    assert pass_cost(3, None, cost_fixed=0.05, cost_per_token=0.03) == pytest.approx(1.14)
    with pytest.raises(ValueError):
        pass_cost(-1)
    values = block_values([0.9, 0.5], functools.partial(pass_cost, curve=curve))
    assert values == pytest.approx([1.0, 1.9 / 1.5, 2.4 / 1.8]) and best_size(values) == 2
    # the suffix drafter prices its budget with the same formula
    d = SuffixDrafter(vocab_size=10, pass_cost=curve, draft_overhead=0.1)
    assert d._pass_cost(2) == pass_cost(2, curve, overhead=0.1)
    n, value = d._budget([0.9, 0.5], 1.0)
    assert (n, value) == (best_size(block_values([0.9, 0.5], d._pass_cost)), max(block_values([0.9, 0.5], d._pass_cost)))


def test_confidence_is_top1_at_t0_and_collision_probability_above():
    x = row_of(0.7)[0]
    assert confidence(x, None) == pytest.approx(0.7)
    q = torch.softmax(x, -1)
    assert confidence(x, q) == pytest.approx(0.7 ** 2 + 7 * (0.3 / 7) ** 2)


def test_chain_stops_where_the_next_node_no_longer_pays():
    """r(B) = 1 + 0.1 (B − 1), d = 0.2: two confident nodes pay; the third (confidence 0.1) would lower
    the value 2.71 / 1.8 to 2.791 / 1.9 and is refused; its draft pass was the chain's third."""
    curve = lambda b: 1.0 + 0.1 * (b - 1)  # noqa: E731
    chain, fed = chain_of([0.9, 0.9, 0.1, 0.9, 0.9], curve, 0.2, depth=5)
    assert chain.tokens == [3, 3] and chain.passes == 3 and len(fed) == 2
    assert chain.confidences == pytest.approx([0.9, 0.9]) and chain.q is None  # T = 0: a deterministic chain


def test_a_tail_follows_the_priced_nodes_unpriced():
    """SLEM's drop_last: the priced nodes, then ``tail`` drafts (the refused node's pass drafts the
    first of them); no node, no tail."""
    curve = lambda b: 1.0 + 0.1 * (b - 1)  # noqa: E731
    chain, _ = chain_of([0.9, 0.9, 0.1, 0.9, 0.9], curve, 0.2, depth=5, tail=1)
    assert len(chain.tokens) == 3 and chain.passes == 3 and len(chain.confidences) == 2
    chain, _ = chain_of([0.99] * 9, lambda b: 1.0, 0.0, depth=3, tail=1)  # gamma nodes, then the tail
    assert len(chain.tokens) == 4 and chain.passes == 4
    chain, _ = chain_of([0.99] * 9, lambda b: float(b), 0.0, depth=3, tail=1)
    assert chain.tokens == []


def test_dear_draft_passes_stop_the_chain_early_and_gamma_is_the_most():
    flat = lambda b: 1.0  # noqa: E731
    chain, _ = chain_of([0.9] * 6, flat, 5.0, depth=5)  # d = 5 one-token passes: one node, no second pass
    assert len(chain.tokens) == 1 and chain.passes == 1
    chain, _ = chain_of([0.99] * 9, flat, 0.0, depth=4)  # free drafting: γ, never more
    assert len(chain.tokens) == 4 and chain.passes == 4
    linear = lambda b: float(b)  # noqa: E731  a pass costs its width: no node ever pays
    chain, _ = chain_of([0.99] * 9, linear, 0.0, depth=4)
    assert chain.tokens == [] and chain.passes == 1


def test_an_uneven_curve_is_priced_past_its_dear_step():
    """r(2) = 1.9 (one node does not pay: 1.9 / 1.9 = 1), r(3) = 1.95: two nodes do (2.71 / 1.95)."""
    curve = {1: 1.0, 2: 1.9, 3: 1.95, 4: 3.9, 5: 4.9}.__getitem__
    chain, _ = chain_of([0.9] * 5, curve, 0.0, depth=4)
    assert len(chain.tokens) == 2


def test_calibration_learns_the_acceptance_of_a_confidence():
    cal = AcceptanceCalibration(weight=4.0)
    assert cal.rate(0.85) == pytest.approx(0.85)
    curve = lambda b: 1.0 + 0.1 * (b - 1)  # noqa: E731
    chain, _ = chain_of([0.85] * 3, curve, 0.2, depth=3, calibration=cal)
    assert len(chain.tokens) == 3
    for _ in range(12):
        cal.record_chain([0.85, 0.85, 0.85], 0)  # the first node verified and rejected, the others never verified
    assert cal.rate(0.85) == pytest.approx(4 * 0.85 / 16) and sum(cal.verified) == 12
    # the draft is over-confident: the same confidences now buy one node (its pass was spent), no second pass
    chain, _ = chain_of([0.85] * 3, curve, 0.2, depth=3, calibration=cal)
    assert len(chain.tokens) == 1 and chain.passes == 1
    with pytest.raises(ValueError):
        AcceptanceCalibration(weight=0)
    with pytest.raises(ValueError):
        ChainPricer(lambda n: 1.0, -1.0, cal)


#: An uneven curve under which the tiny draft's confidences (Σq² of 0.15 to 0.5 at T = 1) buy no
#: node, one or two: r(2) = 1.2 needs â > 0.2, r(3) = 1.25 then costs little.
UNEVEN = {1: 1.0, 2: 1.2, 3: 1.25, 4: 1.6, 5: 2.0}.__getitem__


def _priced(draft):
    return ModelDrafter(draft, pricing=PricedChains(functools.partial(pass_cost, curve=UNEVEN), 0.0))


def test_priced_greedy_equals_autoregressive_and_learns():
    target, drafter = tiny_lm(0), _priced(tiny_lm(1))
    cfg = GenerationConfig(max_new_tokens=24, gamma=4, sampling=GREEDY)
    prompt = [1, 5, 3, 7]
    res = speculative_generate(target, drafter, prompt, cfg)
    assert res.tokens == autoregressive_generate(target, prompt, cfg).tokens
    lengths = drafter.pricing.lengths
    assert max(lengths) <= 4 and len(set(lengths)) > 1  # the chains' lengths vary with the draft's confidence
    assert sum(drafter.pricing.calibration.verified) > 0  # outcomes reached the calibration


@pytest.mark.slow
def test_priced_chains_sample_the_target_law_chi_square():
    """T = 1: 3-token continuations of priced chains (their length a function of the drafts so far)
    follow the exact autoregressive joint; significance 1e-4 with fixed seeds."""
    target, drafter = tiny_lm(0, vocab=V), _priced(tiny_lm(1, vocab=V))
    sampling, prompt = SamplingConfig(1.0), [1, 5, 3, 7]
    exact = exact_joint(target.model, prompt, 3, sampling)
    gen = make_generator(4321)
    cfg = GenerationConfig(max_new_tokens=3, gamma=3, sampling=sampling, stop_at_eos=False)
    samples, lengths = [], set()
    for _ in range(1500):
        samples.append(tuple(speculative_generate(target, drafter, prompt, cfg, generator=gen).tokens))
        lengths.update(drafter.pricing.lengths)
    assert lengths >= {0, 1, 2}  # no draft, one node, two: the length follows the drafts' confidence
    assert chi_square_pvalue(samples, exact) > 1e-4


class _Timed:
    def __init__(self, curve):
        self.curve = curve

    def pass_cost_curve(self):
        return self.curve


def test_priced_chains_need_both_models_measured():
    target = _Timed(PassCostCurve((1, 2, 3), (60.0, 90.0, 110.0), repeats=8))
    draft = _Timed(PassCostCurve((1, 2), (6.0, 7.0), repeats=8))
    pricing = priced_chains(target, draft)
    assert pricing.pricer.draft_cost == pytest.approx(0.1)  # the draft's t(1) in the target's t(1)
    assert pricing.to_dict()["pass_cost"][:3] == [1.0, 1.5, pytest.approx(1.8333, abs=1e-4)]
    synthetic = _Timed(PassCostCurve.from_ratios((1, 2), (1.0, 1.5), source="a labelled fallback"))
    assert priced_chains(target, synthetic) is None and priced_chains(_Timed(None), draft) is None
    assert priced_chains(object(), draft) is None  # a target without a measured curve: chains of gamma
