"""One tree geometry (:class:`specot.geometry.TreeGeometry`): derived once from the parents, validated
once with one message, read alike by the backends (the transformers mask, llama.cpp's sequence ids,
vLLM's mask) and the verifiers; and one longest-common-prefix rule for every backend's cache."""

from __future__ import annotations

import pytest
import torch

from specot.drafting import DraftTree
from specot.geometry import TokenTree, TreeGeometry, common_prefix_length, token_tree
from specot.verifiers.traversal import tree_structure

from model_helpers import tiny_lm

#:      root
#:     /    \
#:    0      1
#:   / \      \
#:  2   3      4
#:      |
#:      5
PARENTS = [-1, -1, 0, 0, 1, 3]


def test_the_geometry_of_a_tree():
    g = TreeGeometry.of(PARENTS)
    assert g.size == 6 and g.depth == 3
    assert g.depths == (1, 1, 2, 2, 2, 3)
    assert g.root_children == (0, 1) and g.children == ((2, 3), (4,), (), (5,), (), ())
    assert g.leaves == (2, 4, 5) and g.n_leaves == 3
    assert g.leaves_below == ((0, 2), (1,), (0,), (2,), (1,), (2,))
    assert g.ancestors(5) == [0, 3, 5] and g.ancestors(4) == [1, 4]
    assert g.positions(10) == [10, 10, 11, 11, 11, 12]  # the root (last committed token) at 9
    assert g.is_root_path([0, 3, 5]) and g.is_root_path([1]) and g.is_root_path([])
    assert not g.is_root_path([3, 5]) and not g.is_root_path([0, 4]) and not g.is_root_path([6])
    mask = g.ancestor_mask()
    expect = torch.zeros(6, 6, dtype=torch.bool)
    for i in range(6):
        expect[i, g.ancestors(i)] = True
    assert torch.equal(mask, expect)
    with pytest.raises(AttributeError):
        g.depths = ()  # frozen


def test_the_rooted_numbering_describes_the_same_nodes():
    rooted = [-1] + [p + 1 for p in PARENTS]
    assert TreeGeometry.of_rooted(rooted) == TreeGeometry.of(PARENTS)
    assert TreeGeometry.of_rooted(rooted).rooted_children() == tree_structure(rooted)[0]
    assert tree_structure(rooted)[0] == [[1, 2], [3, 4], [5], [], [6], [], []]
    assert TreeGeometry.of([]).depth == 0 and TreeGeometry.of_rooted([-1]).size == 0


@pytest.mark.parametrize("parents,rooted", [
    ([-1, 1], False),  # a node its own parent
    ([0, -1], False),  # a parent after its child
    ([-1, -2], False),
    ([0, 0], True),  # node 0 is the root: its parent must be -1
    ([-1, 0, 2], True),
    ([-1, -1], True),  # a second root
    ([], True),
])
def test_one_validation_one_message(parents, rooted):
    with pytest.raises(ValueError, match=r"^tree parents \[.*\]: parent .* of tree node \d+ must be -?\d+ \(the root\) "
                                         r"or an earlier node index \(every parent must precede its children\)$"):
        (TreeGeometry.of_rooted if rooted else TreeGeometry.of)(parents)


def test_every_reader_refuses_a_malformed_tree_with_the_one_message():
    lm = tiny_lm(0)
    with pytest.raises(ValueError) as hf:
        lm.tree_logits([1, 2, 3], token_tree([3, 4, 5], [-1, 0, 6]))
    with pytest.raises(ValueError) as drafted:
        DraftTree(tokens=[3, 4, 5], parents=[-1, 0, 6]).geometry
    with pytest.raises(ValueError) as traversal:
        tree_structure([-1, 0, 3])
    with pytest.raises(ValueError) as direct:
        TreeGeometry.of_rooted([-1, 0, 6])
    assert str(hf.value) == str(direct.value) == str(drafted.value)
    assert "must be 0 (the root) or an earlier node index" in str(traversal.value)


def test_the_common_prefix_rule():
    assert common_prefix_length([1, 2, 3, 4], [1, 2, 3, 4, 5]) == 4
    assert common_prefix_length([1, 2, 3, 4], [1, 2, 3, 4]) == 3  # the last context token always runs
    assert common_prefix_length([1, 2, 9], [1, 2, 3, 4]) == 2
    assert common_prefix_length([], [1, 2]) == 0 and common_prefix_length([1], [1]) == 0
    assert common_prefix_length([1, 2, 3, 4], [1, 2, 3, 4, 5], limit=2) == 2  # e.g. not into a tree region


def test_a_draft_tree_derives_its_geometry_once_and_again_after_a_change():
    tree = DraftTree.root(7)
    a, b = tree.add_children(0, [3, 5])
    g = tree.geometry
    assert tree.geometry is g and g.parents == (-1, -1) and not tree.is_chain()  # kept, not derived again
    assert tree.depths == (0, 1, 1) and tree.depth == 1
    tree.add_children(a, [4])  # the shape changed: derived again
    assert tree.geometry is not g and tree.geometry.parents == (-1, -1, 0) and tree.depths == (0, 1, 1, 2)
    chain = DraftTree.chain(7, [3, 4])
    assert chain.is_chain() and chain.geometry.leaves == (1,) and chain.depth == 2


def test_a_token_tree_is_what_a_draft_tree_hands_a_target():
    tree = DraftTree.chain(7, [3, 4])
    assert isinstance(tree, TokenTree) and isinstance(token_tree([7, 3, 4], [-1, 0, 1]), TokenTree)
    assert token_tree([7, 3, 4], [-1, 0, 1]).geometry == tree.geometry
    with pytest.raises(ValueError, match="one length"):
        token_tree([7, 3], [-1, 0, 1])
    g = TreeGeometry.of_rooted([-1, 0, 0, 1])
    assert g.check_rooted_path([1, 3]) == [0, 2] and g.check_rooted_path([]) == []
    for bad in ([3], [2, 3], [0], [4]):
        with pytest.raises(ValueError, match="accepted path"):
            g.check_rooted_path(bad)
