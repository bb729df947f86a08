"""Exactness of tree decoding: for every (construction, verifier) pair declared valid and lossless,
the law of the first 3 emitted tokens matches the target's exact autoregressive joint law
(enumerated), by a pooled chi-square test.

False-failure rate: each test below rejects at significance ALPHA = 1e-4. Seeds are fixed, so the
tests are deterministic; were the seeds drawn at random, each would fail wrongly with probability
1e-4, and the whole family of ~25 tests with probability below 3e-3 (union bound).
"""

from __future__ import annotations

import copy

import pytest
import torch

from specot.models import CausalLM

from specot.drafting.tree import TreeSpec
from specot.engine import GenerationConfig, make_generator, tree_generate
from specot.sampling import SamplingConfig
from specot.verifiers import available_verifiers, get_verifier

from model_helpers import tiny_llama
from engine_helpers import chi_square_pvalue, exact_joint

ALPHA = 1e-4
V = 8
PROMPT = [1, 5, 3]
SAMPLES = 800  # per pair in the default selection (FAST); the slow pairs use SLOW_SAMPLES
SLOW_SAMPLES = 400
# at K = 1 these verifiers ARE speculative sampling (n = 1: ρ* = 1, one RRS round, SpecHub's and
# OTM's plans reduce to the maximal coupling): a lighter check suffices
N1_SAMPLES = 300
N1_SAME = {"kseq", "rrs", "spechub", "otm"}
T1 = SamplingConfig(1.0)

CONSTRUCTIONS = {
    "iid K=3 L=2": (TreeSpec.sequences(3, 2), T1),
    "prefix 2,2": (TreeSpec.prefix([2, 2]), T1),
    "wor K=3 L=2": (TreeSpec.sequences(3, 2, "wor"), T1),
    "greedy K=3 L=2": (TreeSpec.sequences(3, 2, "greedy"), T1),
    "spechub 2,1": (TreeSpec.prefix([2, 1], "spechub"), T1),
    "topology wor": (TreeSpec.topology([[0], [1], [2], [0, 0], [0, 1], [1, 0]], "wor"), T1),
    "K=1 L=2": (TreeSpec.sequences(1, 2), T1),
    # wider than the vocabulary allows without replacement (and top-k cuts the support to 5)
    "wor K=10 > V, top-k 5": (TreeSpec.sequences(10, 2, "wor"), SamplingConfig(1.0, top_k=5)),
}
# OTM's exact LP over 8 drafts without replacement (8! ordered tuples per node) is too large to
# run per node in a test; every other declared-valid lossless pair is tested.
SKIP = {("wor K=10 > V, top-k 5", "otm")}


def _make_verifier(name: str, spec: TreeSpec):
    return get_verifier(name, law=spec.law) if name == "otm" else get_verifier(name)


def _valid_pairs() -> list[tuple[str, str]]:
    pairs = []
    for cname, (spec, _) in CONSTRUCTIONS.items():
        for vname in available_verifiers():
            ver = _make_verifier(vname, spec)
            if not ver.lossless or (cname, vname) in SKIP:
                continue
            try:
                spec.check_verifier(ver)
            except ValueError:
                continue
            pairs.append((cname, vname))
    return pairs


PAIRS = _valid_pairs()
# the commonest pairs run in the default selection; the rest are marked slow (still run in CI)
FAST = {("iid K=3 L=2", "kseq"), ("wor K=3 L=2", "rrs_wor"), ("greedy K=3 L=2", "greedy"), ("prefix 2,2", "rrs")}


@pytest.fixture(scope="module")
def models():
    """A peaked target (3-token joint entropy 3.6 nats, 19 cells above 1%) and a draft made from it
    by perturbing its output head: 3-token TV(target, draft) = 0.49, block efficiency 2.4-2.9, so
    acceptances and rejections at every depth are both frequent. (Two independent random models
    would be near-uniform and far apart: a chi-square test on them has almost no power.)"""
    t = tiny_llama(0, vocab=V, layers=1, hidden=32)
    with torch.no_grad():
        t.lm_head.weight.mul_(2.5)
    d = copy.deepcopy(t)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        w = d.lm_head.weight
        w.add_(0.5 * t.lm_head.weight.std() * torch.randn(w.shape, generator=g, dtype=w.dtype))
    return CausalLM(t, name="target"), CausalLM(d, name="draft")


_EXACT: dict[SamplingConfig, dict] = {}


def _sample(target, draft, spec, sampling, verifier, n, seed=1234):
    gen = make_generator(seed)
    cfg = GenerationConfig(max_new_tokens=3, sampling=sampling, stop_at_eos=False)
    return [tuple(tree_generate(target, draft, PROMPT, spec, cfg, verifier=verifier, generator=gen).tokens)
            for _ in range(n)]


def test_every_lossless_verifier_has_a_valid_construction():
    lossless = {n for n in available_verifiers() if get_verifier(n).lossless}
    assert {v for _, v in PAIRS} == lossless
    assert {c for c, _ in PAIRS} == set(CONSTRUCTIONS)


@pytest.mark.parametrize(
    "cname,vname", [pytest.param(c, v, marks=() if (c, v) in FAST else pytest.mark.slow) for c, v in PAIRS]
)
def test_first_three_tokens_follow_the_target(models, cname, vname):
    target, draft = models
    spec, sampling = CONSTRUCTIONS[cname]
    if sampling not in _EXACT:
        _EXACT[sampling] = exact_joint(target.model, PROMPT, 3, sampling)
    n = SAMPLES if (cname, vname) in FAST else N1_SAMPLES if (cname == "K=1 L=2" and vname in N1_SAME) else SLOW_SAMPLES
    samples = _sample(target, draft, spec, sampling, _make_verifier(vname, spec), n)
    assert chi_square_pvalue(samples, _EXACT[sampling]) > ALPHA


class _Unchecked(TreeSpec):
    def check_verifier(self, verifier):  # bypass the validity check, to run an INVALID pair
        return None


@pytest.mark.slow
@pytest.mark.parametrize("case", ["lenient", "rrs on wor drafts"])
def test_chi_square_has_power_against_wrong_pairs(models, case):
    """The same statistic, sample size and seed reject a lossy verifier (lenient, l = 0.5) and an
    invalid pair (RRS-with-replacement on drafts drawn without replacement): measured p-values
    4e-64 and 1e-5."""
    target, draft = models
    if case == "lenient":
        spec, ver = TreeSpec.sequences(1, 2), get_verifier("lenient", lenience=0.5)
    else:
        spec, ver = _Unchecked("wor", TreeSpec.sequences(3, 2).paths), get_verifier("rrs")
    exact = exact_joint(target.model, PROMPT, 3, T1)
    samples = _sample(target, draft, spec, T1, ver, 500, seed=1)
    assert chi_square_pvalue(samples, exact) < ALPHA
