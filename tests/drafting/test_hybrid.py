"""Hybrid drafting (suffix trees + an EAGLE head) on tiny random Llama targets: greedy equality,
losslessness by chi-square at T = 1, the choice rule, and the names in the API."""

from __future__ import annotations

import pytest
import torch

from specot.api import load_drafter
from specot.plan import make_plan
from specot.drafting import DraftOutcome, DraftTree, EagleDrafter, HybridDrafter, SuffixDrafter, TreeSpec
from specot.engine import GenerationConfig, autoregressive_generate, make_generator, speculative_generate, tree_generate
from specot.laws import DraftLaw
from specot.sampling import SamplingConfig

from model_helpers import tiny_lm
from engine_helpers import chi_square_pvalue, exact_joint

GREEDY = SamplingConfig(temperature=0.0)
ALPHA = 1e-4  # false-failure rate of each chi-square test
PROMPT = [1, 5, 3, 7, 1, 5, 3, 7, 1, 5]  # repeats itself: the suffix drafter has matches from the start


def _target(vocab: int = 16):
    return tiny_lm(0, vocab=vocab, dtype=torch.float32, layers=4)


def _hybrid(target, draft_vocab=None, seed: int = 1, **kw) -> HybridDrafter:
    eagle = EagleDrafter.random(target, draft_vocab=draft_vocab or list(range(target.vocab_size)), seed=seed,
                                scale=5.0)
    return HybridDrafter(SuffixDrafter(vocab_size=target.vocab_size), eagle, **kw)


# (3, 6, 0.1): auto's tree at T = 0, gated by the head's confidence (api.AUTO_MIN_CONFIDENCE_GREEDY)
@pytest.mark.parametrize(("drafts", "gamma", "tau"), [(None, 3, None), (2, 3, None), (3, 6, None), (3, 6, 0.1)])
def test_greedy_identical_to_autoregressive_and_both_drafters_draft(drafts, gamma, tau):
    target = _target()
    cfg = GenerationConfig(max_new_tokens=40, gamma=gamma, sampling=GREEDY, stop_at_eos=False)
    ar = autoregressive_generate(target, PROMPT, cfg)
    hy = _hybrid(target, draft_cost=0.0)
    hy.model.min_confidence = tau
    if drafts is None:
        res = speculative_generate(target, hy, PROMPT, cfg)
    else:
        plan = make_plan(hy, gamma=gamma, n=drafts)
        spec, ver = plan.tree, plan.verifier.build()
        assert spec.law == DraftLaw.GREEDY and ver.name == "greedy"
        res = tree_generate(target, hy, PROMPT, spec, cfg, verifier=ver)
    assert res.tokens == ar.tokens
    assert {"suffix", "model"} <= set(hy.choices), hy.choices


@pytest.mark.slow
@pytest.mark.parametrize("drafts", [None, 2])
def test_sampling_is_lossless_chi_square(drafts):
    """Empirical law of 4-token continuations == the exact autoregressive joint (2000 samples), with
    a reduced draft vocabulary (4 of 6 tokens) and a prompt whose suffix repeats: iterations drafted
    by the suffix drafter and by the EAGLE head alternate within one generation."""
    V, L = 6, 4
    target = _target(vocab=V)
    prompt = [1, 5, 3, 2, 1, 5, 3, 2, 1]
    exact = exact_joint(target.model, prompt, L, SamplingConfig(1.0))
    cfg = GenerationConfig(max_new_tokens=L, gamma=2, sampling=SamplingConfig(1.0), stop_at_eos=False)
    gen = make_generator(4321)
    hy = _hybrid(target, draft_vocab=[0, 1, 3, 4], seed=2, draft_cost=0.0)
    plan = make_plan(hy, gamma=2, n=drafts)
    spec, ver = plan.tree, plan.verifier.build()
    samples = []
    for _ in range(2000):
        if spec is None:
            r = speculative_generate(target, hy, prompt, cfg, generator=gen)
        else:
            r = tree_generate(target, hy, prompt, spec, cfg, verifier=ver, generator=gen)
        samples.append(tuple(r.tokens))
    assert {"suffix", "model"} <= set(hy.choices)
    assert chi_square_pvalue(samples, exact) > ALPHA


def test_choice_rule():
    """Nothing repeats → the model drafts; a strong suffix match beats a model whose drafts are
    rarely accepted, but not one whose drafts are always accepted."""
    target = _target()
    hy = _hybrid(target)
    spec = TreeSpec.sequences(1, 3)
    hy.start([1, 2, 3, 4], spec)
    hy.propose([1, 2, 3, 4], 8, GREEDY)
    assert hy.choices[-1] in ("model", "none")  # no earlier occurrence of any suffix: no suffix tree
    assert hy._last is hy.model
    ctx = [1, 2, 3, 4] * 6
    hy.start(ctx, spec)
    hy._acc, hy._size, hy._passes = 0.1, 3.0, 3.0  # a model drafter that is rarely accepted
    tree = hy.propose(ctx, 8, GREEDY)
    assert hy.choices[-1] == "suffix" and tree.size == 3 and hy.suffix.expected_value() > hy._model_value()
    hy.start(ctx, spec)
    hy._acc, hy._size, hy._passes = 3.0, 3.0, 0.0  # one that is always accepted, at no draft cost
    hy.propose(ctx, 8, GREEDY)
    assert hy._last is hy.model  # (its tree is empty here: no target features yet)


def test_no_draft_when_neither_pays_and_the_model_is_probed():
    """Nothing repeats and the model's drafts are rarely accepted: plain target steps, except that
    the model drafts every probe_every-th iteration."""
    target = _target()
    hy = _hybrid(target, probe_every=3)
    spec = TreeSpec.sequences(1, 3)
    ctx = list(range(1, 12))  # no token repeats: no suffix tree
    hy.start(ctx, spec)
    hy._acc, hy._size, hy._passes = 0.05, 3.0, 3.0
    assert hy._model_value() < 1.0
    picked = []
    for _ in range(6):
        tree = hy.propose(ctx, 8, GREEDY)
        picked.append(hy._last is hy.model)
        assert hy._last is hy.model or tree.size == 0
    assert picked == [False, False, True, False, False, True]
    never = _hybrid(target, probe_every=0)
    never.start(ctx, spec)
    never._acc, never._size, never._passes = 0.05, 3.0, 3.0
    for _ in range(6):
        never.propose(ctx, 8, GREEDY)
        assert never._last is None


def test_the_suffix_drafter_learns_only_from_its_own_trees():
    sd = SuffixDrafter(vocab_size=16)
    ctx = [1, 2, 3, 4] * 4
    sd.start(ctx, TreeSpec.sequences(1, 3))
    own = sd.propose(ctx, 8, GREEDY)
    assert own.size > 0
    other = DraftTree.chain(ctx[-1], [9, 9, 9])
    before = sd.calibration
    sd.update(DraftOutcome(tree=other, path=(), tokens=(1,), context_len=len(ctx)))
    assert sd.calibration == before  # another drafter's rejected tree does not shrink the budget
    assert len(sd.index) == len(ctx) + 1  # but its committed token is indexed
    sd.propose(ctx + [1], 8, GREEDY)
    tree = sd._last_tree
    sd.update(DraftOutcome(tree=tree, path=(), tokens=(9,), context_len=len(ctx) + 1))
    assert sd.calibration < before


def test_hybrid_errors():
    target = _target()
    eagle = EagleDrafter.random(target, draft_vocab=4)
    with pytest.raises(TypeError, match="SuffixDrafter"):
        HybridDrafter(eagle, eagle)
    with pytest.raises(TypeError, match="draft model"):
        HybridDrafter(SuffixDrafter(vocab_size=16), SuffixDrafter(vocab_size=16))
    with pytest.raises(ValueError, match="vocabulary mismatch"):
        HybridDrafter(SuffixDrafter(vocab_size=17), eagle)
    with pytest.raises(ValueError, match="draft_cost"):
        HybridDrafter(SuffixDrafter(vocab_size=16), eagle, draft_cost=-1.0)
    with pytest.raises(ValueError, match="probe_every"):
        HybridDrafter(SuffixDrafter(vocab_size=16), eagle, probe_every=-1)
    with pytest.raises(ValueError, match="model-free"):
        load_drafter("suffix+ngram", target)
    with pytest.raises(ValueError, match="shipped head of the embedded target"):
        load_drafter("suffix+eagle", target)
    hy = HybridDrafter(SuffixDrafter(vocab_size=16), eagle)
    with pytest.raises(ValueError, match="cannot be verified by .kseq."):
        make_plan(hy, verifier="kseq", n=2, gamma=3)
    with pytest.raises(ValueError, match="GREEDY-law trees"):
        make_plan(hy, n=2, gamma=3, tree="wor")
    plan = make_plan(hy, gamma=3)
    spec, ver = plan.tree, plan.verifier.build()
    assert spec is None and ver.name == "speculative"  # chains: any single-draft verifier


def test_the_model_drafter_is_priced_on_the_suffix_drafters_measured_curve():
    """With a measured curve r(B) the model drafter's value is (1 + E_m) / (r(1 + N_m) + overhead +
    c_d·D_m), as the suffix drafter prices its own trees; without one, the linear model."""
    target = _target()
    eagle = EagleDrafter.random(target, draft_vocab=list(range(target.vocab_size)), seed=1, scale=5.0)

    def curve(b: float) -> float:
        return 1.0 + 0.5 * (b - 1)

    hy = HybridDrafter(SuffixDrafter(vocab_size=target.vocab_size, pass_cost=curve, draft_overhead=0.05), eagle,
                       draft_cost=0.1)
    hy._acc, hy._size, hy._passes = 2.0, 3.0, 3.0
    assert hy._model_value() == pytest.approx(3.0 / (curve(4) + 0.05 + 0.3))
    linear = HybridDrafter(SuffixDrafter(vocab_size=target.vocab_size, cost_fixed=0.2, cost_per_token=0.1), eagle,
                           draft_cost=0.1)
    linear._acc, linear._size, linear._passes = 2.0, 3.0, 3.0
    assert linear._model_value() == pytest.approx(3.0 / (1.0 + 0.2 + 0.1 * 3 + 0.3))
