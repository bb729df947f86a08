"""The llama.cpp target against the target protocol: rows in the right place, crafted trees (empty, a
chain of one, wider than deep), and rollbacks that leave exactly the accepted path in the KV cache."""

from __future__ import annotations

import llama_cpp as lc
import pytest
import torch

from llamacpp_helpers import NEAR_TIE, cache_census, fresh_census, gap_to_max
from specot.geometry import token_tree
from specot.models.protocol import TargetModel
from specot_llamacpp import LlamaCppTarget

pytestmark = pytest.mark.real_model

# a tree wider than it is deep: five children of the root, one grandchild under the first and fourth
WIDE_TOKENS = [330, 253, 198, 1067, 314, 28, 1401]
WIDE_PARENTS = [-1, -1, -1, -1, -1, 0, 3]
WIDE_PATHS = [[0], [1], [2], [3], [4], [0, 5], [3, 6]]


def _path_tokens(nodes):
    return [WIDE_TOKENS[n] for n in nodes]


def _tree(context, tokens=WIDE_TOKENS, parents=WIDE_PARENTS):
    """The tree of ``tokens`` (parents: -1 = the root, else an earlier node) after ``context``, root first."""
    return token_tree([context[-1]] + list(tokens), [-1] + [p + 1 for p in parents])


def _path(nodes):
    """``nodes`` (indices into WIDE_TOKENS) as the tree's node indices, root first."""
    return [n + 1 for n in nodes]


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Two rows of one prefix from different pass shapes: the same argmax up to a near-tie and
    no logit apart by more than 2 (llama.cpp's batched and one-token kernels differ by up to ~1.1)."""
    assert float((a - b).abs().max()) < 2.0
    assert gap_to_max(a, int(b.argmax())) <= NEAR_TIE


def test_implements_the_protocol(target):
    assert isinstance(target, TargetModel)
    assert target.vocab_size == 49152 and target.max_context == 2048
    assert target.eos_token_ids == {2}
    assert target.device == torch.device("cpu") and target.last_hidden is None
    with pytest.raises(ValueError, match="hidden states"):
        target.logits_after([1, 2], hidden_layers=[3])


@pytest.mark.parametrize("text", ["Hello world, this is a test of the tokenizer.",
                                  "def f(x):\n    return x ** 2  # square\n",
                                  "Ünïcödé — naïve café, 東京, emoji 🙂 and  two  spaces."])
def test_hf_tokenizer_ids_equal_llama_cpp_ids(target, text):
    assert target.tokenizer(text)["input_ids"] == target.tokenize_native(text)
    chat = target.tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=False)
    assert target.encode_prompt(text) == target.tokenize_native(chat)


def test_chain_rows_are_the_one_token_rows_in_order(target, prompt_ids):
    ids = prompt_ids[0]
    target.reset()
    ctx, singles = list(ids), []
    for _ in range(4):
        singles.append(target.logits_after(ctx)[0])
        ctx.append(int(singles[-1].argmax()))
    chain = ctx[len(ids):]
    rows = target.logits_after(ids, chain[:3])  # [4, V]
    assert rows.shape == (4, 49152) and rows.dtype == torch.float32
    for i in range(4):
        _close(rows[i], singles[i])
        # misplaced rows would be far closer to a neighbour's
        others = [float((rows[i] - singles[j]).abs().mean()) for j in range(4) if j != i]
        assert float((rows[i] - singles[i]).abs().mean()) < 0.2 * min(others)


def test_tree_rows_equal_each_paths_chain_rows(target, prompt_ids):
    ids = prompt_ids[1]
    target.reset()
    tree = target.tree_logits(ids, _tree(ids))  # [1 + 7, V]
    assert tree.shape == (8, 49152)
    target.reset()
    _close(tree[0], target.logits_after(ids)[0])
    for nodes in WIDE_PATHS:
        target.reset()
        chain = target.logits_after(ids, _path_tokens(nodes))
        _close(tree[1 + nodes[-1]], chain[-1])


def test_empty_tree_is_a_plain_step(target, prompt_ids):
    ids = prompt_ids[0]
    target.reset()
    rows = target.tree_logits(ids, _tree(ids, [], []))
    assert rows.shape == (1, 49152)
    target.keep_tree_path([])
    assert cache_census(target) == fresh_census(target, ids)


def test_chain_of_one(target, prompt_ids):
    ids = prompt_ids[0]
    target.reset()
    rows = target.tree_logits(ids, _tree(ids, [330], [-1]))
    assert rows.shape == (2, 49152)
    target.keep_tree_path([1])
    assert target.cached_ids == list(ids) + [330]
    assert cache_census(target) == fresh_census(target, list(ids) + [330])


@pytest.mark.parametrize("nodes", WIDE_PATHS + [[]])
def test_rollback_keeps_exactly_the_accepted_path(target, prompt_ids, nodes):
    """After a tree wider than deep, keeping any root path (or none: back to the prompt) leaves the
    cache holding exactly context + path, as a fresh run of them would, and the next pass's logits
    are a fresh run's."""
    ids = list(prompt_ids[2])
    kept = ids + _path_tokens(nodes)
    want = fresh_census(target, kept)
    fresh_next = target.logits_after(kept + [28])[-1]
    target.reset()
    target.tree_logits(ids, _tree(ids))
    target.keep_tree_path(_path(nodes))
    assert target.cached_ids == kept
    assert cache_census(target) == want
    _close(target.logits_after(kept + [28])[-1], fresh_next)
    assert target.last_start == len(kept)  # nothing of the prefix ran again


def test_rollback_through_many_trees(target, prompt_ids):
    """Trees and chains alternate; sequence ids are reused; the cache stays one sequence."""
    ids = list(prompt_ids[0])
    target.reset()
    ctx = list(ids)
    for k in range(6):
        target.tree_logits(ctx, _tree(ctx))
        nodes = WIDE_PATHS[k % len(WIDE_PATHS)]
        target.keep_tree_path(_path(nodes))
        ctx = ctx + _path_tokens(nodes) + [13]
        target.logits_after(ctx, [11, 12])  # a chain; its drafts are cut by the next pass
    target.logits_after(ctx)
    assert cache_census(target) == fresh_census(target, ctx)


def _skip_seq_keep(self, path):  # deliberately broken: other paths' cells stay
    tree, nodes = self._tree, [j - 1 for j in path]
    s = tree.leaf_seqs[tree.shape.leaves_below[nodes[-1]][0]] if nodes else self.main_seq
    lc.llama_memory_seq_rm(self._mem, s, tree.base + len(nodes), -1)
    self.main_seq, self._tree = s, None
    self._ids.extend(tree.tokens[j] for j in path)


def _skip_tail_rm(self, path):  # deliberately broken: the path's rejected tail stays
    tree, nodes = self._tree, [j - 1 for j in path]
    s = tree.leaf_seqs[tree.shape.leaves_below[nodes[-1]][0]] if nodes else self.main_seq
    lc.llama_memory_seq_keep(self._mem, s)
    self.main_seq, self._tree = s, None
    self._ids.extend(tree.tokens[j] for j in path)


@pytest.mark.parametrize("broken", [_skip_seq_keep, _skip_tail_rm])
def test_a_broken_rollback_is_caught(target, prompt_ids, monkeypatch, broken):
    """The checks above can fail: a rollback that leaves rejected tokens in the cache is caught by
    the census (and llama.cpp refuses the next batch when the tail stays)."""
    ids = list(prompt_ids[2])
    kept = ids + _path_tokens([0])
    want = fresh_census(target, kept)
    monkeypatch.setattr(LlamaCppTarget, "keep_tree_path", broken)
    target.reset()
    target.tree_logits(ids, _tree(ids))
    target.keep_tree_path([1])
    with pytest.raises((AssertionError, RuntimeError)):
        assert cache_census(target) == want
        target.logits_after(kept + [28])
    monkeypatch.undo()
    target.reset()


def test_long_prompt_is_fed_in_chunks(target, prompt_ids):
    small = LlamaCppTarget(target.path, tokenizer=target.tokenizer, n_threads=1, n_ctx=256, n_batch=8, max_leaves=7)
    try:
        ids = list(prompt_ids[1])
        assert len(ids) > 16
        target.reset()
        _close(small.logits_after(ids)[0], target.logits_after(ids)[0])
        small.reset()
        rows = small.tree_logits(ids, _tree(ids))
        small.keep_tree_path(_path([3, 6]))
        assert rows.shape == (8, 49152) and small.cached_ids == ids + _path_tokens([3, 6])
        with pytest.raises(ValueError, match="n_batch"):
            small.tree_logits(ids, _tree(ids, list(range(100, 110)), [-1] + list(range(9))))
    finally:
        small.close()


@pytest.mark.parametrize("tokens,parents,match", [
    ([5, 6], [-1], "one length"),
    ([5, 6], [-1, 1], "earlier node"),
    ([5, 6], [0, -1], "earlier node"),
])
def test_bad_trees_are_refused(target, tokens, parents, match):
    with pytest.raises(ValueError, match=match):  # the tree's geometry refuses it, before any pass
        target.tree_logits([1, 2, 3], _tree([1, 2, 3], tokens, parents))


def test_too_many_leaves_and_non_paths_are_refused(target):
    with pytest.raises(ValueError, match="max_leaves"):
        target.tree_logits([1, 2, 3], _tree([1, 2, 3], list(range(100, 100 + target.max_leaves + 1)),
                                            [-1] * (target.max_leaves + 1)))
    target.reset()
    target.tree_logits([1, 2, 3], _tree([1, 2, 3]))
    with pytest.raises(ValueError, match="accepted path"):
        target.keep_tree_path(_path([5]))  # node 5 without its parent 0
    with pytest.raises(ValueError, match="accepted path"):
        target.keep_tree_path(_path([0, 6]))  # 6 hangs below 3, not 0
    assert target.cached_ids == [1, 2, 3]  # a refused path changes nothing
    target.keep_tree_path(_path([3, 6]))
    assert target.cached_ids == [1, 2, 3] + _path_tokens([3, 6])
    with pytest.raises(ValueError, match="no draft tree"):
        target.keep_tree_path([1])  # the tree was closed
    target.reset()


def test_reset_leaves_no_trace_of_the_last_sequence(target, prompt_ids):
    """``reset`` frees the cells without zeroing their data: a prompt scored after a long run of
    trees and chains gets the same logits, bit for bit, as it got before them (an empty cell is
    masked out of every pass, whatever it holds)."""
    ids = list(prompt_ids[1])
    target.reset()
    first = target.logits_after(ids).clone()
    ctx = list(prompt_ids[2])
    target.reset()
    for _ in range(3):
        target.tree_logits(ctx, _tree(ctx))
        target.keep_tree_path([1])
        ctx = ctx + [WIDE_TOKENS[0], 13]
        target.logits_after(ctx, [11, 12])
    target.reset()
    assert torch.equal(target.logits_after(ids), first)


def test_returned_logits_are_copies_that_later_passes_leave_alone(target, prompt_ids):
    """The rows come out of llama.cpp's buffer through a cached view of it; what a pass returns must
    be the caller's own: passes of other widths after it (the buffer reused, or moved when it grows)
    leave it as it was, and a pass of the same width returns the same rows again."""
    ids = prompt_ids[0]
    target.reset()
    first = target.logits_after(ids, [11, 12])  # [3, V]
    kept = first.clone()
    for extra in ([], [11], [11, 12, 13, 14, 15, 16], [], [11, 12]):
        out = target.logits_after(ids, extra)
        assert out.shape == (1 + len(extra), target.vocab_size)
    assert torch.equal(first, kept)
    again = target.logits_after(ids, [11, 12])
    torch.testing.assert_close(again, kept, rtol=0, atol=1e-4)


def test_a_context_grows_its_sequence_ids_at_the_first_tree_and_its_rows_stay_put(target, prompt_ids):
    """A new target's context holds one sequence id (chains, plain decoding); the first tree of several
    paths makes it again with ``max_leaves + 1`` and decodes the committed context again: the tree's
    rows are those of a target that had room from the start, and the committed path is kept."""
    fresh = LlamaCppTarget(target.path, tokenizer=target.tokenizer, n_threads=1, n_ctx=256, max_leaves=7)
    grown = LlamaCppTarget(target.path, tokenizer=target.tokenizer, n_threads=1, n_ctx=256, max_leaves=7)
    try:
        ids = list(prompt_ids[0])
        assert fresh._n_seq == 1
        grown.tree_logits(ids, _tree(ids))
        assert grown._n_seq == 8
        grown.reset()
        chain = fresh.logits_after(ids, [330, 253])  # one sequence id is enough for a chain
        assert fresh._n_seq == 1 and fresh.cached_ids == ids + [330, 253]
        rows = fresh.tree_logits(ids, _tree(ids))  # grows, and decodes ids again
        assert fresh._n_seq == 8 and torch.equal(rows, grown.tree_logits(ids, _tree(ids)))
        _close(rows[0], chain[0])
        fresh.keep_tree_path(_path([3, 6]))
        assert fresh.cached_ids == ids + _path_tokens([3, 6])
    finally:
        fresh.close()
        grown.close()
