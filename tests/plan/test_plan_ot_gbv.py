"""The optimal i.i.d. verifier (``ot``) and greedy multi-path block verification (``gbv``) in the
plan: accepted wherever the tree's draft law allows them (IID trees of every shape; chains), refused
for WOR / GREEDY / SPECHUB trees before any model loads, never the default of a law, and run by the
tree engine on a tiny model pair."""

from __future__ import annotations

import pytest

import specot.plan as P
from specot.drafting import TreeSpec
from specot.laws import DraftLaw
from specot.verifiers import LAW_VERIFIERS

from model_helpers import tiny_lm


@pytest.mark.parametrize("verifier", ["ot", "gbv"])
@pytest.mark.parametrize("tree, drafts", [(None, 2), (None, 4), ("iid", 3), ("prefix:2,2", None), ("eagle", None)])
def test_iid_trees_take_ot_and_gbv(verifier, tree, drafts):
    plan = P.make_plan("distilled", n=drafts, tree=tree, verifier=verifier)
    assert plan.tree.law == DraftLaw.IID and plan.verifier.name == verifier


@pytest.mark.parametrize("verifier", ["ot", "gbv"])
def test_chains_take_ot_and_gbv(verifier):
    plan = P.make_plan("distilled", gamma=3, verifier=verifier)  # one draft per node: valid for both
    assert plan.tree is None and plan.verifier.name == verifier


@pytest.mark.parametrize("verifier", ["ot", "gbv"])
@pytest.mark.parametrize("tree", ["wor", "greedy", "spechub"])
def test_other_laws_are_refused_before_a_model_loads(verifier, tree):
    with pytest.raises(ValueError, match=f"cannot be verified by '{verifier}'"):
        P.make_plan("distilled", n=2, tree=tree, verifier=verifier)


def test_a_greedy_law_drafter_refuses_them():
    for verifier in ("ot", "gbv"):
        with pytest.raises(ValueError, match="cannot be verified"):
            P.make_plan("suffix+distilled", n=2, gamma=2, verifier=verifier)


def test_neither_is_a_law_default():
    assert "ot" not in LAW_VERIFIERS.values() and "gbv" not in LAW_VERIFIERS.values()
    assert P.make_plan("distilled", n=3).verifier.name == LAW_VERIFIERS[DraftLaw.IID]


@pytest.mark.parametrize("verifier", ["ot", "gbv"])
def test_the_tree_engine_runs_them(verifier):
    from specot.engine import GenerationConfig, tree_generate

    spec = TreeSpec.sequences(3, 2, DraftLaw.IID)
    res = tree_generate(tiny_lm(0), tiny_lm(1), [1, 2], spec, GenerationConfig(max_new_tokens=6, seed=0),
                        verifier=verifier)
    assert len(res.tokens) == 6 and all(0 <= t < 64 for t in res.tokens)
