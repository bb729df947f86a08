"""specot bench paths: gbv against block verification on the same draft paths (tiny models).

The exact expectations it reports are checked against the verifiers run on the same draws (a
seeded Monte-Carlo mean), and against what holds for every draw: gbv on one path is block
verification. (More paths raise the expected accepted length over the draws, which the verifiers'
enumeration tests check; given one set of draws they need not: a second path through the first
path's nodes changes the weights those nodes are tried with.)"""

from __future__ import annotations

import json
import math

import pytest
import torch

from model_helpers import tiny_lm
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier
from specot_lab.bench.acceptance import BenchDraft
from specot_lab.bench.paths import context_values, draw_paths, run_paths_bench

V = 12


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0, vocab=V), tiny_lm(1, vocab=V)


def _draws(models, seed: int, K: int = 4, L: int = 3):
    tgt, draft = models
    return draw_paths(tgt, draft, [1, 2, 3, 4, 5], K, L, SamplingConfig(temperature=1.0),
                      torch.Generator().manual_seed(seed))


def test_shapes_and_rows_are_the_models(models):
    tgt, draft = models
    p, q, paths = _draws(models, 0)
    assert p.shape == q.shape == (4, 4, V) and paths.shape == (4, 3)
    torch.testing.assert_close(p.sum(-1), torch.ones(4, 4, dtype=torch.float64))
    tgt.reset()
    ref = torch.softmax(tgt.logits_after([1, 2, 3, 4, 5], paths[2].tolist()).double(), -1)
    torch.testing.assert_close(p[2], ref, rtol=0, atol=1e-6)
    draft.reset()
    ref_q = torch.softmax(draft.logits_after([1, 2, 3, 4, 5] + paths[1, :2].tolist())[-1].double(), -1)
    torch.testing.assert_close(q[1, 2], ref_q, rtol=0, atol=1e-6)


@pytest.mark.parametrize("seed", range(4))
def test_one_path_is_block(models, seed):
    p, q, paths = _draws(models, seed)
    vals = context_values(p, q, paths, lengths=[1, 3], ks=[1, 2, 3, 4])
    for L in (1, 3):
        assert vals[(L, 1, "gbv")] == pytest.approx(vals[(L, 1, "block")], abs=1e-12)
        assert all(0.0 <= vals[(L, K, "gbv")] <= L for K in (1, 2, 3, 4))


def test_expectations_match_the_verifiers_on_the_same_draws(models):
    """The mean accepted length of 4,000 seeded runs of each verifier on fixed draws lies within 4.5
    standard errors of the reported expectation (false-failure rate < 1e-5 per comparison)."""
    p, q, paths = _draws(models, 7, K=3, L=3)
    vals = context_values(p, q, paths, lengths=[3], ks=[3])
    g = torch.Generator().manual_seed(3)
    gbv, block = get_verifier("gbv"), get_verifier("block")
    runs = {"gbv": [], "block": []}
    for _ in range(4000):
        runs["gbv"].append(len(gbv.verify_paths(p, q, paths, g)[1].path))
        out = block.verify_tree(p[0], q[0], torch.cat([torch.zeros(1, dtype=torch.int64), paths[0]]),
                                torch.arange(-1, 3), g)
        runs["block"].append(len(out.path))
    for name, key in (("gbv", (3, 3, "gbv")), ("block", (3, 1, "block"))):
        x = torch.tensor(runs[name], dtype=torch.float64)
        se = float(x.std()) / math.sqrt(x.numel())
        assert abs(float(x.mean()) - vals[key]) <= 4.5 * max(se, 1e-3), (name, float(x.mean()), vals[key])


def test_run_schema_and_refusals(models):
    tgt, draft = models
    res = run_paths_bench(target=tgt, draft=BenchDraft("tiny-draft", "model", draft), prompts=[[1, 2, 3], [4, 5, 6, 7]],
                          temperatures=[1.0], lengths=[2], ks=[1, 2], positions=3, max_new_tokens=6, progress=False)
    json.loads(json.dumps(res))
    names = {(r["verifier"], r["K"]) for r in res["rows"]}
    assert names == {("speculative", 1), ("block", 1), ("gbv", 1), ("gbv", 2)}
    assert all(r["contexts"] == 6 for r in res["rows"])
    with pytest.raises(ValueError, match="temperature must be > 0"):
        run_paths_bench(target=tgt, draft=BenchDraft("d", "model", draft), prompts=[[1]], temperatures=[0.0])
    with pytest.raises(ValueError, match="cannot draw paths"):
        run_paths_bench(target=tgt, draft=BenchDraft("gone", "model", None, False, "not here"), prompts=[[1]])
