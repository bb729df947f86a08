"""Tree attention: one pass over a token tree (4D mask + per-node positions on top of the KV cache)
gives the same logits as scoring each root-to-node path separately; in-place cache compaction."""

from __future__ import annotations

import pytest
import torch

from specot.geometry import token_tree
from specot.models import CausalLM

from model_helpers import tiny_llama, tiny_lm

CTX = [1, 5, 3, 7, 2]
# a tree of 12 nodes, depth 5 (parents: -1 = root, else an earlier node index)
TOKENS = [4, 9, 4, 2, 11, 0, 6, 6, 3, 15, 8, 1]
PARENTS = [-1, -1, -1, 0, 0, 1, 3, 3, 4, 6, 6, 9]


def _tree(context: list[int], tokens: list[int], parents: list[int]):
    """The tree of ``tokens`` (parents: -1 = root, else an earlier node index) after ``context``,
    root first, as a target scores it."""
    return token_tree([context[-1]] + tokens, [-1] + [p + 1 for p in parents])


def _path(i: int) -> list[int]:
    out = []
    while i >= 0:
        out.append(TOKENS[i])
        i = PARENTS[i]
    return out[::-1]


@torch.no_grad()
def _reference(model, context: list[int]) -> torch.Tensor:
    """Logits after context and after every root-to-node path, each by a separate full pass."""
    rows = [model(input_ids=torch.tensor([context])).logits[0, -1]]
    rows += [model(input_ids=torch.tensor([context + _path(i)])).logits[0, -1] for i in range(len(TOKENS))]
    return torch.stack(rows).float()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("cached", [0, 3, 4])
def test_tree_pass_matches_per_path_float32(attn, cached):
    lm = tiny_lm(0, dtype=torch.float32)
    lm.model.config._attn_implementation = attn
    if cached:
        lm.forward(CTX[:cached])  # part of the context already in the cache: only the rest runs
    out = lm.tree_logits(CTX, _tree(CTX, TOKENS, PARENTS))  # [1 + N, V]
    assert out.shape == (1 + len(TOKENS), 16)
    assert lm.forward_calls == (2 if cached else 1)  # the tree is ONE pass
    torch.testing.assert_close(out, _reference(lm.model, CTX), atol=1e-5, rtol=0)
    assert lm.cached_ids == CTX + TOKENS and lm.tree_base == min(cached, len(CTX) - 1)


def test_tree_pass_then_compaction_continues_exactly():
    lm = tiny_lm(0, dtype=torch.float32)
    lm.tree_logits(CTX, _tree(CTX, TOKENS, PARENTS))
    path = [0, 3, 6, 9]  # tokens 4, 2, 6, 15
    lm.keep_tree_path([i + 1 for i in path])  # node indices, root first: moved in place, the rest cropped
    assert lm.cached_ids == CTX + [TOKENS[i] for i in path] and lm.tree_base is None
    new_ctx = CTX + [TOKENS[i] for i in path] + [5]
    out = lm.tree_logits(new_ctx, _tree(new_ctx, TOKENS, PARENTS))  # a second tree on the compacted cache
    assert lm.forward_calls == 2  # nothing re-run but the correction token and the new tree
    torch.testing.assert_close(out, _reference(lm.model, new_ctx), atol=1e-5, rtol=0)
    lm.keep_tree_path([])
    plain = lm.logits_after(new_ctx + [3])  # back to plain decoding
    with torch.no_grad():
        ref = lm.model(input_ids=torch.tensor([new_ctx + [3]])).logits[0, -1].float()
    torch.testing.assert_close(plain[-1], ref, atol=1e-5, rtol=0)


def test_forward_tree_depth_by_depth_like_the_drafter():
    """Frontier nodes added in several calls (one per depth) see their ancestors from earlier calls."""
    lm = tiny_lm(1, dtype=torch.float64)
    lm.logits_after(CTX)
    n = len(CTX)
    by_depth = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 10], [11]]
    pos: dict[int, int] = {}
    got: dict[int, torch.Tensor] = {}
    for level in by_depth:
        start = len(lm.cached_ids)
        parents = [n - 1 if PARENTS[i] < 0 else pos[PARENTS[i]] for i in level]
        logits = lm.forward_tree([TOKENS[i] for i in level], parents)
        for j, i in enumerate(level):
            pos[i] = start + j
            got[i] = logits[j]
    ref = _reference(lm.model, CTX)
    for i in range(len(TOKENS)):
        torch.testing.assert_close(got[i], ref[1 + i], atol=1e-10, rtol=0)


def test_logits_after_never_reuses_tree_positions():
    lm = tiny_lm(0, dtype=torch.float64)
    lm.tree_logits(CTX, _tree(CTX, [4, 2], [-1, -1]))  # siblings 4 and 2: cached as ... 4, 2
    out = lm.logits_after(CTX + [4, 2])  # the SEQUENCE 4, 2 differs from the siblings
    with torch.no_grad():
        ref = lm.model(input_ids=torch.tensor([CTX + [4, 2]])).logits[0, -1].float()
    torch.testing.assert_close(out[-1], ref, atol=1e-10, rtol=0)
    assert lm.tree_base is None  # rolled back past the tree region


def test_rollback_inside_tree_region():
    lm = tiny_lm(0, dtype=torch.float64)
    lm.tree_logits(CTX, _tree(CTX, TOKENS[:3], PARENTS[:3]))
    lm.rollback(len(CTX) + 1)  # keep the first node only
    assert lm.tree_base == 0  # the uncached context ran in the same pass, as a chain
    out = lm.forward_tree([2], [len(CTX)])  # child of node 0
    ref = _reference(lm.model, CTX)[1 + 3]  # node 3 = child of node 0 with token 2
    torch.testing.assert_close(out[0], ref, atol=1e-10, rtol=0)


def test_forward_tree_rejects_bad_parents_and_context():
    lm = tiny_lm(0)
    lm.forward(CTX)
    with pytest.raises(ValueError, match="parent"):
        lm.forward_tree([3], [1])  # inside the committed prefix, not its last token
    with pytest.raises(ValueError, match="parent"):
        lm.tree_logits(CTX, _tree(CTX, [3, 4], [-1, 5]))
    with pytest.raises(ValueError, match="nonzero length"):
        lm.forward_tree([], [])
    with pytest.raises(ValueError, match="no draft tree"):
        lm.keep_tree_path([1])  # no tree scored
    lm.tree_logits(CTX, _tree(CTX, TOKENS, PARENTS))
    for bad in ([2, 1], [4], [1, 6], [13]):  # not parent to child from a child of the root; no node 13
        with pytest.raises(ValueError, match="accepted path"):
            lm.keep_tree_path(bad)
    assert lm.cached_ids == CTX + TOKENS  # a refused path leaves the cache as it was
    short = CausalLM(tiny_llama(0, max_pos=6), name="short")
    short.forward([1, 2, 3, 4, 5])
    with pytest.raises(ValueError, match="context"):
        short.forward_tree([1, 2], [4, 5])  # depth 2 -> position 6
