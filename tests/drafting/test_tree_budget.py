"""TreeBudget (children per node × depth, for drafters that build their own trees) against TreeSpec
(fixed shapes): one meaning each, the same trees and tokens as before the split."""

from __future__ import annotations


import pytest
import torch

import specot.plan as P
from specot.drafting import ModelDrafter, SuffixDrafter, TreeBudget, TreeSpec, parse_tree_spec
from specot.drafting.eagle.passes import DynamicTree
from specot.engine import GenerationConfig, tree_generate
from specot.laws import DraftLaw
from specot.plan.auto import AutoChoice
from specot.sampling import SamplingConfig
from specot.verifiers import get_verifier

from model_helpers import tiny_lm

CTX = [1, 2, 3, 4, 0, 1, 2, 5, 0, 1, 2, 3, 6, 0, 7, 1, 2]  # 1 2 → 3 (twice) or 5; 1 2 3 → 4 or 6


def test_a_budget_is_not_a_shape_and_says_so():
    b = TreeBudget(4, 4)
    assert (b.children, b.depth, b.law) == (4, 4, DraftLaw.GREEDY)
    assert b.label() == "budget 4 children × depth 4" and TreeBudget(1, 3).label() == "budget 1 child × depth 3"
    assert TreeSpec.sequences(2, 3).label() == "tree iid 2×3"
    assert TreeSpec.prefix([2, 2, 1], "greedy").label() == "tree greedy 2×3"
    assert b.max_drafts_per_node() == 4 and TreeBudget(1, 5).is_chain() and not b.is_chain()
    for bad in (dict(children=0, gamma=2), dict(children=2, gamma=0), dict(children=2.5, gamma=2)):
        with pytest.raises((ValueError, TypeError)):
            TreeBudget(**bad)
    with pytest.raises(ValueError, match="unknown draft law"):
        TreeBudget(2, 2, law="nope")


def test_the_budget_a_tree_spec_gives():
    assert TreeBudget.of(TreeSpec.sequences(3, 5, DraftLaw.GREEDY)) == TreeBudget(3, 5, DraftLaw.GREEDY)
    assert TreeBudget.of(TreeSpec.prefix([2, 3], "wor")) == TreeBudget(3, 2, DraftLaw.WOR)  # the widest node
    assert TreeBudget.of(TreeSpec.prefix([2, 2], "iid")) == TreeBudget(4, 2, DraftLaw.IID)  # IID slots may merge
    b = TreeBudget(3, 2)
    assert TreeBudget.of(b) is b


def test_the_budget_checks_its_verifier_for_every_width():
    TreeBudget(3, 2).check_verifier(get_verifier("greedy"))
    with pytest.raises(ValueError, match="budget 3 children × depth 2.*cannot be verified by 'speculative'"):
        TreeBudget(3, 2).check_verifier(get_verifier("speculative"))
    TreeBudget(1, 2).check_verifier(get_verifier("speculative"))


def _suffix_tree(shape, **kw):
    d = SuffixDrafter(vocab_size=8, adaptive=False, min_score=0.0, **kw)
    d.start(CTX, shape)
    return d.propose(CTX, 4, SamplingConfig(1.0))


@pytest.mark.parametrize("children", [1, 2, 3, 4])
def test_the_suffix_drafter_builds_the_same_tree_from_a_budget_as_from_the_spec_it_used_to_get(children):
    a = _suffix_tree(TreeBudget(children, 4))
    b = _suffix_tree(TreeSpec.sequences(children, 4, DraftLaw.GREEDY))
    assert (a.tokens, a.parents, a.drafts) == (b.tokens, b.parents, b.drafts)
    assert (a.q is None and b.q is None) or torch.equal(a.q, b.q)


def test_a_budget_of_two_is_not_two_sequences():
    # the suffix drafter's tree within "2 children × depth 4" expands a node below the root into two
    # children (3 → 4 and 3 → 6): no TreeSpec.sequences(2, ·) has a node of depth 1 with two children
    tree = _suffix_tree(TreeBudget(2, 4))
    assert tree.drafts[0] == [3, 5] and tree.drafts[tree.child_of[0][3]] == [4, 6]
    spec = TreeSpec.sequences(2, 4)
    assert all(len(spec.children(p)) <= 1 for p in spec.paths)


@pytest.mark.parametrize("children,depth", [(1, 3), (2, 3), (3, 6)])
def test_eagle_dynamic_trees_read_a_budget_as_the_sequences_spec(children, depth):
    spec = TreeSpec.sequences(children, depth, DraftLaw.GREEDY)
    assert DynamicTree.for_spec(TreeBudget(children, depth)) == DynamicTree.for_spec(spec)
    assert DynamicTree.for_spec(TreeBudget(children, depth), 2, 9, 1) == DynamicTree.for_spec(spec, 2, 9, 1)


def test_a_draft_model_refuses_a_budget_wider_than_one():
    drafter = ModelDrafter(tiny_lm(1, vocab=16, dtype=torch.float32))
    with pytest.raises(TypeError, match="fixed tree shapes.*budget 2 children × depth 3"):
        drafter.start([1, 2, 3], TreeBudget(2, 3))
    drafter.start([1, 2, 3], TreeBudget(1, 3))  # one child per node: a chain of its depth
    assert drafter.spec == TreeSpec.sequences(1, 3)


def test_decoding_under_a_budget_gives_the_same_tokens_as_under_the_spec():
    target = tiny_lm(0, vocab=16, dtype=torch.float32)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4, 3, 3, 8, 3, 2, 7, 9, 5]
    for temp in (0.0, 1.0):
        cfg = GenerationConfig(max_new_tokens=30, sampling=SamplingConfig(temp), seed=3, stop_at_eos=False)
        a = tree_generate(target, SuffixDrafter(vocab_size=16), prompt, TreeBudget(3, 4), cfg)
        b = tree_generate(target, SuffixDrafter(vocab_size=16), prompt, TreeSpec.sequences(3, 4, DraftLaw.GREEDY), cfg)
        assert a.tokens == b.tokens and a.stats.accepted == b.stats.accepted and a.stats.accepted > 0


def test_the_plan_hands_a_suffix_drafter_a_budget_and_model_drafts_a_shape():
    plan = P.make_plan("suffix", n=3, gamma=2)
    assert plan.tree == TreeBudget(3, 2) and plan.shape is plan.tree
    given = P.make_plan("suffix", tree=TreeBudget(3, 2))  # (plan.gamma is a chain's; a tree's γ is its depth)
    assert (given.tree, given.verifier, given.describe()) == (plan.tree, plan.verifier, plan.describe())
    assert plan.to_dict()["tree"] == {"law": "greedy", "budget": {"children": 3, "depth": 2},
                                      "name": "budget 3 children × depth 2"}
    assert P.make_plan("suffix").tree == TreeBudget(4, 4)  # the kind's default children, γ 4
    with pytest.raises(ValueError, match="contradicts"):
        P.make_plan("suffix", tree=TreeBudget(3, 2), gamma=5)
    with pytest.raises(ValueError, match="builds its own draft trees"):
        P.make_plan("suffix", tree="greedy")
    with pytest.raises(ValueError, match="draws fixed tree shapes"):
        P.make_plan("distilled", tree=TreeBudget(2, 3))
    fixed = P.make_plan("distilled", n=2, gamma=3, tree="greedy")
    assert fixed.tree == TreeSpec.sequences(2, 3, DraftLaw.GREEDY) and fixed.describe() == "distilled, tree greedy 2×3"


def test_the_renamed_keywords_are_gone():
    """0.1.0 keeps one name per quantity: n, not n=, and AutoChoice.children."""
    with pytest.raises(TypeError):
        TreeSpec.sequences(drafts=3, gamma=2)
    with pytest.raises(TypeError):
        parse_tree_spec("wor", drafts=3, gamma=2)
    with pytest.raises(TypeError):
        P.resolve_tree_spec(None, drafts=2, gamma=3, verifier=get_verifier("kseq"))
    assert not hasattr(AutoChoice("suffix", 2, 3), "drafts") and AutoChoice("suffix", 2, 3).children == 2
