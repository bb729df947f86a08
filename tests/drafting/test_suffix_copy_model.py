"""The suffix drafter's copy model: nodes scored by the copy rate h(L) of their match length,
learned in each generation around a prior, and priced by a pass-cost curve."""

from __future__ import annotations

import random

import pytest
import torch

from specot.calibration import PassCostCurve
from specot.drafting import DraftOutcome, SuffixDrafter, TreeBudget
from specot.drafting.copy import COPY_EDGES, COPY_PRIOR, copy_bucket as _copy_bucket
from specot.engine import GenerationConfig, autoregressive_generate, make_generator, tree_generate
from specot.laws import DraftLaw
from specot.sampling import SamplingConfig

from engine_helpers import chain_path, chi_square_pvalue, exact_joint
from model_helpers import tiny_lm

ALPHA = 1e-4  # significance level of the chi-square test (seed fixed: deterministic)
T0 = SamplingConfig(temperature=0.0)
# a pass over B tokens costs 1 + 0.8·(B - 1) one-token passes: a draft token pays only above 80 % acceptance
CURVE = PassCostCurve.from_ratios(range(1, 12), [1 + 0.8 * (b - 1) for b in range(1, 12)], source="test")


def _drafter(**kw) -> SuffixDrafter:
    d = SuffixDrafter(vocab_size=64, children=1, min_n=4, pass_cost=CURVE, copy_model=True, **kw)
    d.start([0], TreeBudget(children=1, gamma=8, law=DraftLaw.GREEDY))
    return d


def _best_chain(h: float, depth: int = 8) -> int:
    """The chain length a share-1 chain at a constant copy rate h pays most for on CURVE."""
    values = [(sum(h ** i for i in range(n + 1))) / CURVE.ratio(1 + n) for n in range(depth + 1)]
    return max(range(depth + 1), key=values.__getitem__)


def _text(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(1, 64) for _ in range(n)]


def test_buckets_and_prior_shape():
    assert [_copy_bucket(L) for L in (0, 1, 2, 3, 4, 5, 6, 8, 11, 12, 16, 31, 32, 500)] == \
        [0, 0, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8, 8]
    for row in COPY_PRIOR.values():
        assert len(row) == len(COPY_EDGES) and all(0 < h < 1 for h in row)
        assert list(row) == sorted(row)  # a longer match is copied at least as often


def test_a_long_match_drafts_a_long_chain_and_a_short_one_none():
    """Same index depth (max_n = 8): the copy model reads the 40-token match past it (h ≈ 0.97: a
    chain of 3 pays 1.12 at r(4) = 3.4) while a 5-token match (h ≈ 0.70) pays for no draft."""
    src = _text(60, 0)
    long_ctx = src + _text(10, 1) + src[:40]
    d = _drafter()
    tree = d.propose(long_ctx, 8, T0)
    n = _best_chain(COPY_PRIOR[0.0][-1])
    assert n >= 3 and tree.size == n and [tree.tokens[i] for i in chain_path(tree)] == src[40:40 + n]
    short_ctx = src + _text(10, 1) + src[:5]
    d = _drafter()
    assert d.propose(short_ctx, 8, T0).size == 0
    # without the copy model the 5-token match's single occurrence scores 0.95 a level: it drafts
    d = SuffixDrafter(vocab_size=64, children=1, min_n=4, pass_cost=CURVE, kappa=0.05)
    d.start([0], TreeBudget(children=1, gamma=8, law=DraftLaw.GREEDY))
    assert d.propose(short_ctx, 8, T0).size > 0


def test_rates_follow_the_temperature_between_the_prior_rows():
    d = _drafter()
    d.propose(_text(20, 2), 8, SamplingConfig(temperature=0.0))
    assert d.copy_rate(40) == pytest.approx(COPY_PRIOR[0.0][-1])
    d.propose(_text(20, 2), 8, SamplingConfig(temperature=0.5))
    assert d.copy_rate(40) == pytest.approx(0.5 * (COPY_PRIOR[0.0][-1] + COPY_PRIOR[1.0][-1]))
    d.propose(_text(20, 2), 8, SamplingConfig(temperature=1.7))
    assert d.copy_rate(5) == pytest.approx(COPY_PRIOR[1.0][3])


def test_rates_learn_from_the_verified_nodes():
    """Accepted chains raise their buckets' rates; a rejected first node lowers its bucket's, the
    nodes below it untested, and the budget shrinks with the rate."""
    src = _text(100, 3)
    ctx = src + _text(10, 4) + src[:40]
    d = _drafter()
    before = d.copy_rate(40)
    for _ in range(3):  # accepted chains: the answer copies src
        tree = d.propose(ctx, 8, T0)
        assert tree.size > 0
        path = chain_path(tree)
        at = len(ctx) - 110  # ctx ends with src[:at]
        toks = tuple(tree.tokens[n] for n in path) + (src[at + len(path)],)
        d.update(DraftOutcome(tree=tree, path=tuple(path), tokens=toks, context_len=len(ctx)))
        ctx += list(toks)
    assert d.copy_rate(40) > before

    d = _drafter()
    ctx = src + _text(10, 4) + src[:40]
    first = d.propose(ctx, 8, T0)
    assert first.size == _best_chain(COPY_PRIOR[0.0][-1])
    d.update(DraftOutcome(tree=first, path=(), tokens=(0,), context_len=len(ctx)))  # the first node rejected
    b = _copy_bucket(40)
    assert d._copy_n[b] == pytest.approx(1.0) and d._copy_acc[b] == 0.0 and sum(d._copy_n) == pytest.approx(1.0)
    assert d.copy_rate(40) < before
    d.index = d.index.sync(ctx[:-1])  # the same context again
    assert d.propose(ctx, 8, T0).size < first.size


PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 1, 4, 1, 5, 9, 2], [7, 7, 7, 7, 7, 7, 7, 7]]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_identical_to_autoregressive(prompt):
    target = tiny_lm(0, vocab=16, dtype=torch.float32)
    cfg = GenerationConfig(max_new_tokens=40, sampling=T0)
    ar = autoregressive_generate(target, prompt, cfg)
    drafter = SuffixDrafter(vocab_size=16, children=1, min_n=2, copy_model=True, cost_fixed=0.0, cost_per_token=0.01)
    sd = tree_generate(target, drafter, prompt, TreeBudget(children=1, gamma=8, law=DraftLaw.GREEDY), cfg)
    assert sd.tokens == ar.tokens
    assert sd.stats.drafted > 0


@pytest.mark.slow
def test_sampling_is_lossless_chi_square():
    """Law of 3-token continuations with the copy model's adaptive chains == the exact joint."""
    V = 8
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 6, 1, 2, 3, 4]
    target = tiny_lm(0, vocab=V, dtype=torch.float32)
    sampling = SamplingConfig(1.0)
    exact = exact_joint(target.model, prompt, 3, sampling)
    gen = make_generator(2027)
    cfg = GenerationConfig(max_new_tokens=3, sampling=sampling, stop_at_eos=False)
    drafter = SuffixDrafter(vocab_size=V, children=1, min_n=2, copy_model=True, cost_fixed=0.0, cost_per_token=0.01)
    spec = TreeBudget(children=1, gamma=2, law=DraftLaw.GREEDY)
    samples, drafted = [], 0
    for _ in range(1500):
        res = tree_generate(target, drafter, prompt, spec, cfg, generator=gen)
        samples.append(tuple(res.tokens))
        drafted += res.stats.drafted
    assert drafted > 0
    assert chi_square_pvalue(samples, exact) > ALPHA


def test_no_trie_is_built_where_no_chain_can_pay(monkeypatch):
    """The shortcut: a match too short for any chain to pay returns the empty tree without the
    trie; a longer one builds it. The overhead term prices a borderline chain out."""
    src = _text(60, 5)
    d = _drafter()
    built = []
    real = d._context_trie
    monkeypatch.setattr(d, "_context_trie", lambda depth: built.append(depth) or real(depth))
    assert d.propose(src + _text(10, 6) + src[:5], 8, T0).size == 0 and built == []
    assert d.propose(src + _text(10, 6) + src[:40], 8, T0).size > 0 and built == [8]
    costly = _drafter(draft_overhead=1.0)  # a drafted step's work worth a whole pass
    assert costly.propose(src + _text(10, 6) + src[:40], 8, T0).size == 0


def test_invalid_copy_weight_and_option():
    with pytest.raises(ValueError, match="copy_weight"):
        SuffixDrafter(vocab_size=8, copy_model=True, copy_weight=0.0)
    with pytest.raises(ValueError, match="draft_overhead"):
        SuffixDrafter(vocab_size=8, draft_overhead=-0.1)
    from specot.plan import make_plan
    with pytest.raises(ValueError, match="suffix_copy_model"):
        make_plan("suffix", suffix_copy_model="yes")
