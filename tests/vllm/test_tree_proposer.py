"""The draft-tree pieces that need no vLLM: the tree proposer behind vLLM's custom-class
interface, redrawn trees, the cut of a tree the scheduler shortened, request eligibility, settings."""

from __future__ import annotations

from types import SimpleNamespace

from conftest import token_rows
import pytest

pytest.importorskip("specot_vllm")
torch = pytest.importorskip("torch")

from specot.drafting import DraftTree  # noqa: E402
from specot.laws import DraftLaw  # noqa: E402

from specot_vllm import SuffixTreeProposer, parse_config  # noqa: E402
from specot_vllm.proposers import redraw_tree  # noqa: E402
from specot_vllm.adapter import tree_eligible  # noqa: E402
from specot_vllm.tree import cut_tree  # noqa: E402

V = 64


def _config(nodes=8, extra=None):
    return SimpleNamespace(speculative_config=SimpleNamespace(num_speculative_tokens=nodes),
                           model_config=SimpleNamespace(max_model_len=64, hf_config=SimpleNamespace(eos_token_id=2),
                                                        get_vocab_size=lambda: V, seed=0),
                           additional_config=extra or {})


#: "5 6" was followed by 7 and by 9: the suffix tree after "... 5 6" branches.
BRANCHY = [5, 6, 7, 8, 5, 6, 9, 10, 5, 6, 7, 8, 5, 6]


def test_tree_proposer_drafts_a_tree_per_row_parents_first():
    prop = SuffixTreeProposer(_config(extra={"specot": {"suffix": {"adaptive": False}}}))
    table, n = token_rows(BRANCHY, [10, 11, 12])
    out = prop.propose([[6], [12]], n, table)
    tree = prop.last_trees[0]
    assert out[0] == tree.tokens[1:] and out[1] == [] and 1 not in prop.last_trees
    assert sorted(tree.child_of[0]) == [7, 9] and tree.deterministic and tree.law == DraftLaw.GREEDY
    assert all(p < k for k, p in enumerate(tree.parents) if k) and tree.size <= 8


def test_tree_proposer_redraws_children_for_an_iid_verifier():
    prop = SuffixTreeProposer(_config(extra={"specot": {"verifier": "kseq", "suffix": {"adaptive": False}}}))
    table, n = token_rows(BRANCHY)
    seen = set()
    for _ in range(20):
        prop._rows.clear()
        out = prop.propose([[6]], n, table)
        tree = prop.last_trees[0]
        assert out[0] == tree.tokens[1:] and not tree.deterministic and tree.law == DraftLaw.IID
        assert set(tree.child_of[0]) <= {7, 9} and len(tree.drafts[0]) == 2  # two i.i.d. draws
        assert tree.q.shape[1] == V and all(float(tree.q[tree.q_row[k]].sum()) == pytest.approx(1) for k in tree.drafts)
        seen.add(tuple(tree.drafts[0]))
    assert len(seen) > 1  # the draws vary


def test_redraw_without_replacement_keeps_every_child():
    base = SuffixTreeProposer(_config(extra={"specot": {"suffix": {"adaptive": False}}}))
    table, n = token_rows(BRANCHY)
    base.propose([[6]], n, table)
    tree = redraw_tree(base.last_trees[0], DraftLaw.WOR, torch.Generator().manual_seed(0))
    assert sorted(tree.drafts[0]) == [7, 9] and tree.size == base.last_trees[0].size


def test_cut_keeps_a_node_children_only_when_all_its_draws_fit():
    t = DraftTree.root(1)
    t.add_children(0, [5, 5, 6])  # three i.i.d. draws, two distinct children: nodes 1, 2
    t.add_children(1, [7])  # node 3
    t.add_children(2, [8, 9])  # nodes 4, 5
    assert cut_tree(t, 5) is t
    # 4 nodes scored: node 2's two draws end at node 5 > 4, so node 2 keeps no child
    c = cut_tree(t, 4)
    assert c.tokens == [1, 5, 6, 7] and c.drafts == {0: [5, 5, 6], 1: [7]}
    # 2 nodes scored: both distinct children fit, but the root's THREE draws need three slots — a
    # cut by distinct children would depend on the root's own draws (and bias them)
    assert cut_tree(t, 2).size == 0


def test_eligibility_of_a_request_for_draft_trees():
    plain = SimpleNamespace(temperature=0.7, top_k=20, top_p=0.9, seed=3)
    assert tree_eligible(plain, 0)
    for bad in ({"repetition_penalty": 1.1}, {"logprobs": 2}, {"min_p": 0.1}, {"logit_bias": {3: 1.0}},
                {"structured_outputs": object()}, {"allowed_token_ids": [1, 2]}):
        assert not tree_eligible(SimpleNamespace(**bad), 5), bad
    assert not tree_eligible(SimpleNamespace(min_tokens=4), 3) and tree_eligible(SimpleNamespace(min_tokens=4), 4)
    assert not tree_eligible(None, 0)


def test_tree_settings():
    assert parse_config({"specot": {}}, tree=True).verifier == "greedy"
    assert parse_config({"specot": {"verifier": "rrs_wor", "depth": 4}}, tree=True).depth == 4
    with pytest.raises(ValueError, match="SuffixTreeProposer"):
        parse_config({"specot": {"verifier": "kseq"}})  # a multi-draft verifier needs the tree proposer
    with pytest.raises(ValueError, match="choose one of"):
        parse_config({"specot": {"verifier": "mentored"}}, tree=True)
    with pytest.raises(ValueError, match="depth"):
        parse_config({"specot": {"depth": 0}}, tree=True)
    with pytest.raises(ValueError, match="max_nodes"):
        SuffixTreeProposer(_config(nodes=4, extra={"specot": {"suffix": {"max_nodes": 8}}}))
