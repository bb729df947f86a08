"""The tree attention backend against attention computed path by path, and the tree pieces that
need no engine: the cut of a tree the scheduler shortened, the redrawn trees, request eligibility."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm.config")  # (a namespace "vllm" where vLLM is absent)

from specot.geometry import TreeGeometry  # noqa: E402
from specot_vllm import tree_attn  # noqa: E402
from specot_vllm.adapter import AttentionReader  # noqa: E402
from specot_vllm.tree_attn import (TreeAttentionImpl, TreeAttentionMetadataBuilder, TreeStep,  # noqa: E402
                                   move_slots, tree_mask)

H, KVH, D, BS = 4, 2, 16, 16
#: A tree of 9 nodes after its root: node k's parent is PARENTS[k].
PARENTS = [-1, 0, 0, 0, 1, 1, 2, 4, 4, 6]
TREE = TreeGeometry.of_rooted(PARENTS)


def _batch():
    """Four requests: a fresh prefill (above the batched query length), a prefill chunk after 20
    computed tokens, a plain decode, and a tree verification (root + 9 nodes after 30 tokens)."""
    qlens = [tree_attn.SMALL_QUERY + 6, tree_attn.SMALL_QUERY + 3, 1, len(PARENTS)]
    ctx = [0, 20, 40, 30]
    blocks = [-(-(c + q) // BS) for c, q in zip(ctx, qlens)]
    first = [sum(blocks[:b]) for b in range(4)]
    table = torch.zeros(4, max(blocks), dtype=torch.int32)
    for b in range(4):
        table[b, :blocks[b]] = torch.arange(first[b], first[b] + blocks[b]).flip(0)  # blocks out of order
    qsl = torch.tensor([0] + list(torch.tensor(qlens).cumsum(0)), dtype=torch.int32)
    slot = lambda b, pos: int(table[b, pos // BS]) * BS + pos % BS  # noqa: E731
    slots = torch.tensor([slot(b, ctx[b] + i) for b in range(4) for i in range(qlens[b])])
    cm = SimpleNamespace(num_reqs=4, query_start_loc_cpu=qsl, seq_lens=torch.tensor([c + q for c, q in zip(ctx, qlens)]),
                         block_table_tensor=table, slot_mapping=slots, num_actual_tokens=int(qsl[-1]))
    return cm, ctx, qlens, table, slot, sum(blocks)


def _reference(q, kfull, vfull, ctx, qlens, parents_of):
    """Attention of every query over exactly the keys it may see (context, causal prefix, or the
    root-to-node path of its tree), one query at a time."""
    out = torch.zeros_like(q)
    t = 0
    for b, (c, n) in enumerate(zip(ctx, qlens)):
        par = parents_of.get(b)
        for i in range(n):
            if par is None or i < n - len(par):
                vis = list(range(c + i + 1))
            else:
                r, node, path = n - len(par), i - (n - len(par)), []
                while node >= 0:
                    path.append(c + r + node)
                    node = par[node]
                vis = list(range(c + r)) + sorted(path)
            for h in range(H):
                kh = kfull[b][vis, h // (H // KVH)]
                w = torch.softmax(q[t, h] @ kh.T / math.sqrt(D), -1)
                out[t, h] = w @ vfull[b][vis, h // (H // KVH)]
            t += 1
    return out


def _sibling_mask(geometry):
    """A deliberately wrong tree mask: every node also sees its earlier siblings."""
    parents = [-1] + [p + 1 for p in geometry.parents]
    m = tree_mask(geometry)
    for k in range(1, len(parents)):
        for j in range(1, k):
            if parents[j] == parents[k]:
                m[k, j] = True
    return m


@pytest.mark.parametrize("broken", [None, "sibling"])
def test_tree_attention_equals_attention_path_by_path(broken, monkeypatch):
    if broken == "sibling":
        monkeypatch.setattr(tree_attn, "tree_mask", _sibling_mask)
    torch.manual_seed(0)
    cm, ctx, qlens, table, slot, nblocks = _batch()
    impl = TreeAttentionImpl(H, D, 1 / math.sqrt(D), KVH, None, None, "auto")
    kv = torch.zeros(nblocks, KVH, BS, 2 * D)
    kfull = [torch.randn(c + n, KVH, D) for c, n in zip(ctx, qlens)]
    vfull = [torch.randn(c + n, KVH, D) for c, n in zip(ctx, qlens)]
    for b in range(4):  # the context was written by earlier steps
        s = torch.tensor([slot(b, p) for p in range(ctx[b])], dtype=torch.int64)
        impl.do_kv_cache_update(None, kfull[b][:ctx[b]], vfull[b][:ctx[b]], kv, s)
    key = torch.cat([kfull[b][ctx[b]:] for b in range(4)])
    value = torch.cat([vfull[b][ctx[b]:] for b in range(4)])
    impl.do_kv_cache_update(None, key, value, kv, cm.slot_mapping)
    monkeypatch.setattr(TreeAttentionMetadataBuilder, "reader", AttentionReader)  # as the adapter sets it
    builder = TreeAttentionMetadataBuilder(SimpleNamespace(block_size=BS), [], None, torch.device("cpu"))
    builder.step = TreeStep(trees={3: TREE})
    meta = builder.build(0, cm)
    q = torch.randn(int(cm.num_actual_tokens), H, D)
    out = impl.forward(None, q, key, value, kv, meta, torch.empty_like(q))
    ref = _reference(q, kfull, vfull, ctx, qlens, {3: PARENTS})
    close = torch.allclose(out, ref, atol=1e-5, rtol=1e-5)
    assert close == (broken is None), float((out - ref).abs().max())
    assert torch.equal(builder.step.slots, cm.slot_mapping)  # recorded for the runner's KV move


def test_tree_mask_is_ancestors_and_self():
    m = tree_mask(TREE)
    assert m[7].nonzero().flatten().tolist() == [0, 1, 4, 7]
    assert m[3].nonzero().flatten().tolist() == [0, 3]


def test_the_builder_reads_vllm_only_through_the_adapter(monkeypatch):
    monkeypatch.setattr(TreeAttentionMetadataBuilder, "reader", None)
    with pytest.raises(RuntimeError, match="specot_vllm.adapter"):
        TreeAttentionMetadataBuilder(SimpleNamespace(block_size=BS), [], None, torch.device("cpu"))


def test_move_slots_moves_every_layer_and_reads_before_writing():
    kv = [torch.arange(2 * 1 * 4 * 2, dtype=torch.float32).reshape(2, 1, 4, 2) + 100 * i for i in range(2)]
    before = [k.clone() for k in kv]
    move_slots(kv + [kv[0]], torch.tensor([5, 6]), torch.tensor([1, 5]))  # a shared layer moved once
    for k, b in zip(kv, before):
        assert torch.equal(k[0, :, 1], b[1, :, 1]) and torch.equal(k[1, :, 1], b[1, :, 2])
