"""specot bench pair: the seeds' verifiers on a target + draft pair, exact expectations given the
drafts (tiny models standing in for the pair).

The exact values are checked against identities that hold for every draw (one draft: every
multi-draft rule is token-level speculative sampling, gbv is block verification; a depth-one tree
accepts with the verifier's own acceptance given the drafts) and against the engine's own verifiers
run on the same draws (seeded Monte-Carlo means)."""

from __future__ import annotations

import json
import math

import pytest
import torch

from model_helpers import tiny_lm
from specot.sampling import SamplingConfig, standardize
from specot.verifiers import get_verifier
from specot_lab.bench.pair import (VERIFIERS, accepted_token_law, context_values, draw_context,
                                   match_expected_accepted, root_values, run_pair_bench, tree_expected_accepted)

V = 12
SC = SamplingConfig(temperature=1.0)


class _Draft:
    """A draft with a known q in the target's vocabulary (what TLIDraft gives for xvocab:PATH)."""

    def __init__(self, lm):
        self.lm = lm

    def q_after(self, context, path, sc):
        return standardize(self.lm.logits_after(list(context) + list(path))[-1:].double(), sc)[0]


@pytest.fixture(scope="module")
def models():
    return tiny_lm(0, vocab=V), _Draft(tiny_lm(1, vocab=V))


def _draws(models, seed, K=4, L=3):
    tgt, draft = models
    return draw_context(tgt, draft, [1, 2, 3, 4, 5], K, L, SC, torch.Generator().manual_seed(seed))


def _dist(seed, sparse=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(V, generator=g, dtype=torch.float64)
    if sparse:
        x[:V // 2] = 0.0
    return x / x.sum()


@pytest.mark.parametrize("name", ["kseq", "rrs", "ot", "rrs_wor", "speculative"])
def test_accepted_token_law_sums_to_the_verifiers_acceptance(name):
    v = get_verifier(name)
    p, q = _dist(0), _dist(1)
    drafts = [3, 7, 1] if name == "rrs_wor" else ([5] if name == "speculative" else [3, 7, 3])
    law = accepted_token_law(v, p, q, drafts)
    assert set(law) == set(drafts)
    ref = float(v.accept_probability(p[None], q[None], torch.tensor([drafts]))[0])
    assert sum(law.values()) == pytest.approx(ref, abs=1e-12)


@pytest.mark.parametrize("seed", range(3))
def test_one_draft_is_speculative_and_gbv_is_block(models, seed):
    vals = context_values(_draws(models, seed), [1, 2, 4], [1, 3], {v: get_verifier(v) for v in VERIFIERS if v != "match"})
    for G in (1, 3):
        for name in ("kseq", "rrs", "ot"):
            assert vals[(name, 1, G)] == pytest.approx(vals[("speculative", 1, G)], abs=1e-9), name
        assert vals[("gbv", 1, G)] == pytest.approx(vals[("block", 1, G)], abs=1e-9)
        # the wor tree's first branch is the first i.i.d. path: one draft is the same chain
        assert vals[("rrs_wor", 1, G)] == pytest.approx(vals[("speculative", 1, G)], abs=1e-9)
        assert vals[("traversal", 1, G)] == pytest.approx(vals[("block", 1, G)], abs=1e-9)
        assert all(0.0 <= x <= G + 1e-12 for (_, _, g), x in vals.items() if g == G)


def test_a_depth_one_tree_accepts_with_the_verifiers_acceptance():
    p, q = _dist(2)[None, None].expand(3, 2, V).clone(), _dist(3)[None, None].expand(3, 2, V).clone()
    paths = torch.tensor([[4], [9], [4]])
    for name in ("kseq", "rrs", "ot"):
        v = get_verifier(name)
        ref = float(v.accept_probability(p[:, 0][:1], q[:, 0][:1], paths.T))
        assert tree_expected_accepted(v, p, q, paths) == pytest.approx(ref, abs=1e-12), name


def test_match_rule_by_hand():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.0, 0.8], [1.0, 0.0, 0.0]], dtype=torch.float64)
    assert match_expected_accepted(p, [1, 2]) == pytest.approx(0.5 + 0.5 * 0.8)
    assert match_expected_accepted(p, [2, 0]) == 0.0


def _walk(verifier, p, q, paths, g):
    """The engine's walk on the prefix tree: verify the drafts at a node, descend into the accepted one."""
    ks, depth, L = list(range(paths.shape[0])), 0, paths.shape[1]
    while depth < L:
        drafts = torch.tensor([[int(paths[k, depth]) for k in ks]])
        out = verifier.verify(p[ks[0], depth][None], q[ks[0], depth][None], drafts, g)
        if int(out.accepted_index[0]) < 0:
            break
        x = int(out.tokens[0])
        ks = [k for k in ks if int(paths[k, depth]) == x]
        depth += 1
    return depth


def test_tree_expectations_match_the_verifiers_on_the_same_draws(models):
    """The mean accepted length of 3,000 seeded walks of each verifier on fixed draws lies within 4.5
    standard errors of the exact value (false-failure rate < 1e-5 per comparison)."""
    draws = _draws(models, 11, K=4, L=3)
    p, q, paths = draws["iid"]
    vals = context_values(draws, [4], [3], {v: get_verifier(v) for v in VERIFIERS if v != "match"})
    g = torch.Generator().manual_seed(5)
    for name in ("kseq", "rrs", "ot"):
        v = get_verifier(name)
        x = torch.tensor([_walk(v, p, q, paths, g) for _ in range(3000)], dtype=torch.float64)
        se = float(x.std()) / math.sqrt(x.numel())
        assert abs(float(x.mean()) - vals[(name, 4, 3)]) <= 4.5 * max(se, 1e-3), (name, float(x.mean()))


def test_wor_draws_are_distinct_and_root_values_are_probabilities(models):
    draws = _draws(models, 4)
    firsts = draws["wor"][2][:, 0].tolist()
    assert len(set(firsts)) == len(firsts) == 4
    assert torch.equal(draws["wor"][2][0], draws["iid"][2][0])
    g = draws["greedy"]
    assert g[2][0] == int(g[1][0].argmax())
    root = root_values(draws, [1, 2, 4])
    assert root[("alpha_star", "iid", 1)] == pytest.approx(root[("acceptance", "p/q, sampled drafts", 1)])
    assert all(0.0 <= v <= 1.0 + 1e-9 for v in root.values())
    assert root[("alpha_star", "iid", 4)] >= root[("alpha_star", "iid", 1)] - 1e-9


def test_run_schema_and_refusals(models):
    tgt, draft = models
    res = run_pair_bench(target=tgt, draft=draft, prompts=[[1, 2, 3], [4, 5, 6, 7]], temperatures=[1.0], ns=[1, 2],
                         gammas=[2], positions=2, max_new_tokens=5, progress=False)
    json.loads(json.dumps(res))
    names = {(r["verifier"], r["n"]) for r in res["rows"]}
    assert {("speculative", 1), ("block", 1), ("match", 1), ("gbv", 2), ("rrs_wor", 2), ("traversal", 2),
            ("kseq", 2), ("rrs", 2), ("ot", 2)} <= names
    assert all(r["contexts"] == 4 for r in res["rows"])
    assert {a["rule"] for a in res["acceptance"]} == {"p/q, sampled drafts", "match, greedy draft"}
    with pytest.raises(ValueError, match="temperature must be > 0"):
        run_pair_bench(target=tgt, draft=draft, prompts=[[1]], temperatures=[0.0])
    with pytest.raises(ValueError, match="not a TLI cross-vocabulary drafter"):
        run_pair_bench(target=tgt, draft=object(), prompts=[[1]], temperatures=[1.0])


def test_cli_refuses_bad_options_before_loading(capsys):
    from specot.cli.main import main

    for argv, text in ((["--ns", "0"], "--ns"), (["--gammas", "x"], "--gammas"), (["--temperatures", "0"], "temperatures")):
        assert main(["bench", "pair", "--draft", "xvocab:none.gguf", *argv]) == 1  # as every bench sub-command's bad option
        err = capsys.readouterr().err
        assert "specot: error:" in err and text in err and "Traceback" not in err
