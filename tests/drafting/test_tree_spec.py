"""Draft-tree constructions (slot topologies), parsing, verifier validity, and batched tree drafting."""

from __future__ import annotations

import json

import pytest

from specot.drafting.model import draft_tree_from_model
from specot.drafting.tree import EAGLE_DEFAULT_TREE, TreeSpec, default_law_for, parse_tree_spec
from specot.engine import make_generator
from specot.sampling import SamplingConfig
from specot.verifiers import DraftLaw, available_verifiers, get_verifier

from model_helpers import tiny_lm


def test_constructions_shapes():
    s = TreeSpec.sequences(4, 3)
    assert (s.law, s.depth, s.num_slots, s.num_leaves) == (DraftLaw.IID, 3, 12, 4)
    assert s.children(()) == ((0,), (1,), (2,), (3,)) and s.children((2,)) == ((2, 0),)
    p = TreeSpec.prefix([2, 2, 1])
    assert (p.depth, p.num_slots, p.num_leaves) == (3, 2 + 4 + 4, 4)
    e = TreeSpec.topology(EAGLE_DEFAULT_TREE, "wor")
    assert (e.depth, e.num_slots, e.max_drafts_per_node()) == (5, 25, 4)
    assert len(e.children((0,))) == 3 and len(e.children((0, 0, 0, 0))) == 2
    # under IID every slot of one depth can merge into one node
    assert p.max_drafts_per_node() == 4 and TreeSpec.prefix([2, 2, 1], "wor").max_drafts_per_node() == 2
    assert TreeSpec.sequences(1, 5).max_drafts_per_node() == 1


def test_parse_forms(tmp_path):
    assert parse_tree_spec("iid", n=3, gamma=2) == TreeSpec.sequences(3, 2)
    assert parse_tree_spec("wor", n=3, gamma=2).law == DraftLaw.WOR
    assert parse_tree_spec("greedy:3,1").paths == TreeSpec.prefix([3, 1], "greedy").paths
    assert parse_tree_spec("prefix:2,2,1").paths == TreeSpec.prefix([2, 2, 1]).paths
    assert parse_tree_spec(None, n=2, gamma=3, law="wor") == TreeSpec.sequences(2, 3, "wor")
    assert parse_tree_spec("eagle", law="greedy").paths == TreeSpec.topology(EAGLE_DEFAULT_TREE, "iid").paths
    f = tmp_path / "tree.json"
    f.write_text(json.dumps([[0], [1], [0, 0], [0, 1], [1, 0]]))
    t = parse_tree_spec(f"topology:{f}", law="wor")
    assert (t.law, t.num_slots, t.depth) == (DraftLaw.WOR, 5, 2)
    f.write_text(json.dumps({"law": "greedy", "paths": [[0], [1], [0, 0]]}))
    assert parse_tree_spec(f"topology:{f}").law == DraftLaw.GREEDY
    assert TreeSpec.topology(json.loads(t.to_json())["paths"], "wor") == t


@pytest.mark.parametrize(
    "text,kw,match",
    [
        ("prefix:2,2", {"n": 3}, "contradicts"),
        ("prefix:2,2", {"gamma": 3}, "contradicts"),
        ("prefix", {}, "expansion factors"),
        ("prefix:2,x", {}, "integers"),
        ("prefix:2,0", {}, ">= 1"),
        ("banana", {}, "unknown tree construction"),
        ("wor", {"law": "iid"}, "asked for"),
        ("topology:/nonexistent/tree.json", {}, "does not exist"),
        ("spechub:3", {}, "at most 2 children"),
        ("iid", {"n": 0}, ">= 1"),
    ],
)
def test_parse_errors(text, kw, match):
    with pytest.raises((ValueError, FileNotFoundError), match=match):
        parse_tree_spec(text, **kw)


@pytest.mark.parametrize(
    "paths,match",
    [([], "at least one"), ([[0, 0]], "no parent"), ([[0], [2]], "no gaps"), ([[0], [0]], "twice"), ([[-1]], ">= 0")],
)
def test_bad_topologies(paths, match):
    with pytest.raises(ValueError, match=match):
        TreeSpec.topology(paths, "iid")


def test_bad_topology_file(tmp_path):
    f = tmp_path / "t.json"
    f.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_tree_spec(f"topology:{f}")
    f.write_text(json.dumps({"paths": "0,1"}))
    with pytest.raises(ValueError, match="list of index paths"):
        parse_tree_spec(f"topology:{f}")


def _valid(spec: TreeSpec, name: str) -> bool:
    ver = get_verifier(name, law=spec.law) if name == "otm" else get_verifier(name)
    try:
        spec.check_verifier(ver)
        return True
    except ValueError:
        return False


def test_verifier_validity_per_construction():
    iid, wor, greedy = TreeSpec.sequences(3, 2), TreeSpec.sequences(3, 2, "wor"), TreeSpec.sequences(3, 2, "greedy")
    chain = TreeSpec.sequences(1, 4)
    assert {n for n in available_verifiers() if _valid(iid, n)} >= {"kseq", "rrs", "otm"}
    assert not _valid(iid, "speculative") and not _valid(iid, "rrs_wor") and not _valid(iid, "greedy")
    assert {n for n in available_verifiers() if _valid(wor, n)} == {"rrs_wor", "otm"}
    assert {n for n in available_verifiers() if _valid(greedy, n)} == {"greedy", "otm"}
    assert _valid(TreeSpec.prefix([2, 1], "spechub"), "spechub")
    assert all(_valid(chain, n) for n in available_verifiers())  # one draft per node: every verifier
    with pytest.raises(ValueError, match="cannot be verified by 'rrs'"):
        wor.check_verifier(get_verifier("rrs"))


def test_default_law_for_verifier():
    assert default_law_for(get_verifier("kseq")) == DraftLaw.IID
    assert default_law_for(get_verifier("rrs_wor")) == DraftLaw.WOR
    assert default_law_for(get_verifier("greedy")) == DraftLaw.GREEDY
    assert default_law_for(get_verifier("otm", law="spechub")) == DraftLaw.SPECHUB


def test_build_draft_tree_one_pass_per_depth_and_multiplicity():
    draft = tiny_lm(1, vocab=8)
    ctx = [1, 5, 3, 7]
    spec = TreeSpec.sequences(6, 4)
    tree, draft_pos = draft_tree_from_model(draft, ctx, spec, 4, SamplingConfig(1.0), make_generator(0))
    assert tree.draft_calls == 4 == draft.forward_calls  # root pass + one per inner depth
    assert sum(len(d) for n, d in tree.drafts.items() if tree.depths[n] == 0) == 6
    for node, d in tree.drafts.items():  # multiplicity: a node shared by m sequences has m drafts
        if node > 0:
            mult = sum(1 for t in tree.drafts[tree.parents[node]] if t == tree.tokens[node])
            assert len(d) == mult
        assert set(tree.child_of[node]) == set(d)
    assert all(tree.depths[i] <= tree.depths[i + 1] for i in range(tree.size))  # numbered by depth
    assert all(tree.parents[i] < i for i in range(1, tree.size + 1))
    # leaves never go through the draft model; the cache holds context + fed nodes
    assert len(draft.cached_ids) == len(ctx) + len(draft_pos) - 1
    assert all(tree.depths[n] < 4 for n in draft_pos)


def test_build_draft_tree_wor_wider_than_vocabulary():
    draft = tiny_lm(1, vocab=8)
    spec = TreeSpec.prefix([12, 2], "wor")  # 12 children at the root > 8 tokens
    tree, _ = draft_tree_from_model(draft, [1, 2], spec, 2, SamplingConfig(1.0), make_generator(0))
    root = tree.drafts[0]
    assert len(root) == 8 and sorted(root) == list(range(8))  # clamped to the support
    for node, d in tree.drafts.items():
        assert len(d) == len(set(d))
    top3, _ = draft_tree_from_model(draft, [1, 2], spec, 2, SamplingConfig(1.0, top_k=3), make_generator(0))
    assert len(top3.drafts[0]) == 3 and all(len(d) <= 2 for n, d in top3.drafts.items() if n)


def test_build_draft_tree_stops_at_eos_and_depth_zero():
    draft = tiny_lm(1, vocab=8)
    spec = TreeSpec.sequences(8, 3)
    tree, _ = draft_tree_from_model(draft, [1, 2], spec, 3, SamplingConfig(1.0), make_generator(3), stop_tokens=frozenset(range(8)))
    assert tree.draft_calls == 1 and set(tree.drafts) == {0}  # every child is a stop token: not expanded
    empty, _ = draft_tree_from_model(draft, [1, 2], spec, 0, SamplingConfig(1.0), make_generator(0))
    assert empty.size == 0 and empty.draft_calls == 0
