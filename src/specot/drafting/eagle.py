"""Feature-level drafting (EAGLE): a draft head of one decoder layer (or a few) over the target's
own hidden states.

References:

* EAGLE (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty"):
  draft at the *feature* level — the draft layer at position t reads the target's feature of
  position t−1 and the embedding of token t, and predicts token t+1; later draft steps feed the
  draft layer's own output feature back in.
* EAGLE-2 (Li et al. 2024, "EAGLE-2: Faster Inference of Language Models with Dynamic Draft
  Trees"): a *dynamic* draft tree — at every depth expand the nodes with the highest cumulative
  draft probability (the draft's confidence approximates its acceptance rate), under a node budget.
* EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
  Training-Time Test"): fuse low / mid / high target features (the inputs of decoder layers
  ``2, L//2, L−3``) with ``fc``; the decoder layer's attention reads ``[norm(embedding), norm(feature)]``
  (2H wide); the output head covers a reduced draft vocabulary of ``V_d`` tokens mapped to target ids
  by ``d2t`` (``target_id = draft_id + d2t[draft_id]``; FR-Spec, Zhao et al. 2025, also drafts over a
  frequency-ranked sub-vocabulary).

**The draft network** (:class:`Eagle3Head`, the layout of the published EAGLE-3 checkpoints served
by vLLM / SGLang)::

    fc:        Linear(k·H_t → H, no bias)             fused target features (k layers, k = 3)
    midlayer:  hidden_norm, input_layernorm            RMSNorm(H) of the feature / of the embedding
               self_attn.{q,k,v}_proj: Linear(2H → ·)  over cat(input_layernorm(emb), hidden_norm(f))
               self_attn.o_proj: Linear(· → H)         residual: the feature f
               post_attention_layernorm, mlp.{gate,up,down}_proj (a Llama MLP)
    layers.i:  (i = 1..L−1, deeper heads only) plain Llama decoder layers over the layer below
    norm:      RMSNorm(H)
    lm_head:   Linear(H → V_d, no bias)
    d2t:       int64 [V_d]   target_id = draft_id + d2t[draft_id]
    t2d:       bool  [V]     whether a target id is in the draft vocabulary
    embed_tokens: the TARGET's input embedding (shared, frozen) unless the checkpoint ships its own

**The draft distribution over the full vocabulary.** The draft's softmax over ``V_d`` (after the
engine's standardized-sampling transform, at temperature ``q_temperature_ratio · T``, a per-head
calibration) is scattered to the target ids ``d2t`` maps to; every
other target token has q = 0. Drafts are sampled from exactly this ``q [·, V]`` (under the tree's
law; drawn over the ``V_d`` draft ids and mapped by ``d2t``, which is the same law), so every
lossless verifier stays lossless (a token outside the draft vocabulary can still be
emitted: as a correction or bonus token, from the residual / the target).

**The cache model** (``cache_weights``, at temperature > 0; off unless asked for or set in the
checkpoint's ``config.json``). Where the context of a node (the committed tokens, then the node's
draft path) ends with m tokens that occurred earlier in the committed text, the draft law mixes
in what followed them: ``q = (1 − λ_m)·q_head + λ_m·q_cache``, where ``q_cache`` is the empirical
law of the tokens after the (at most 64) most recent earlier occurrences of the longest such suffix
(:meth:`~specot.drafting.SuffixIndex.followers`) and ``λ_m = cache_weights[m − 1]`` (the last weight
for longer matches). This is the cache language model's interpolation (Kuhn & De Mori 1990; Grave
et al. 2017, "Improving Neural Language Models with a Continuous Cache") applied to the draft: text
repeats itself, and a small head does not copy as well as a count does. The mixture is over the
whole target vocabulary (a cached token outside the draft vocabulary can be drafted), the drafts are
drawn from it and the verifier reads it, so verification stays lossless; the expansion order of
EAGLE-2's dynamic tree reads the same mixture of the head's own softmax. Exact first-position
acceptance at T = 1 of the shipped head with and without it: ``docs/distillation.md``.

**State and caches.** :meth:`EagleDrafter.update` stores the target's fused features of the
committed positions (the engine hands them over because the drafter sets ``hidden_layers``). The
draft keeps its own KV cache of *committed* entries: entry ``j`` reads token ``j`` and the target's
feature at ``j − 1`` — exactly as in training (keys and values ``[L, kv, P, d]`` for the head's ``L``
decoder layers). Drafted nodes read their parent's draft output
feature (EAGLE's feature extrapolation) and live in temporary KV entries discarded after
:meth:`~EagleDrafter.propose`; accepted drafts are re-run next time with the target's true features
(as EAGLE does). Until the target has produced the features of the context (the first iteration
after the prompt) the drafter proposes the empty tree (a plain target step).

**Trees and their laws** (see :meth:`EagleDrafter.propose`): a chain (``TreeSpec.sequences(1, γ)``)
is γ tokens sampled from q one by one (verify with ``speculative``); a tree is EAGLE-2's dynamic tree
(``dynamic=True``, the default) or the spec's static topology (``dynamic=False``). In both, the
children of an expanded node are ``n`` drafts drawn from q at that node under the spec's law
(:func:`specot.laws.sample_drafts`): ``GREEDY`` — EAGLE's top-k children, made exact: the top-(n−1)
tokens of q and one sampled from q without them (verify with ``greedy``); ``WOR`` — n distinct
samples (``rrs_wor``); ``IID`` — n i.i.d. samples, equal draws merging into one child (``kseq`` /
``rrs``). Which nodes are expanded, and with how many children, is decided before that node's
children are drawn, from the draft's confidence and the budget only — never by pruning drawn
children afterwards (EAGLE-2's final re-ranking would change the law at a node, so the budget is
spent during expansion instead). So the law declared in ``tree.law`` is exactly how every node's
children were drawn, and verification is lossless by construction. The exception is temperature 0
under GREEDY (``rerank=True``, the default): there nothing is sampled — EAGLE-2's top-k expansion
and final re-ranking give a deterministic tree (:meth:`EagleDrafter._draft_reranked`), any subtree
of which is a valid deterministic draft. Otherwise, at temperature 0 the standardized q is
one-hot, which allows one child per node; nodes with several children then draw them from the
draft's own softmax (top-(n−1) + one sampled under GREEDY) — exact, since every lossless verifier
is exact for any q.

**Checkpoints**: :meth:`EagleDrafter.from_pretrained` loads the published layout (above;
``config.json`` is a ``LlamaConfig`` with ``draft_vocab_size``, optionally ``target_hidden_size``
and ``eagle_config.eagle_aux_hidden_state_layer_ids``; weights in safetensors or EAGLE's
``pytorch_model.bin``) and the ``speculators`` layout that vLLM also serves (``config.json`` with
``speculators_model_type: "eagle3"``, the decoder layer's ``LlamaConfig`` under
``transformer_layer_config``; ``layers.0.*`` for ``midlayer.*``; where a head has them, ``fc.bias``,
``input_norm.weight`` before ``fc`` and Qwen3's ``self_attn.q_norm`` / ``k_norm``);
:meth:`Eagle3Head.save_pretrained` writes the first. ``specot distill eagle``
(:mod:`specot_lab.distill.eagle`, the lab beside the library) trains a head with EAGLE-3's training-time test.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from huggingface_hub import snapshot_download
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from transformers import LlamaConfig
from transformers.initialization import no_init_weights
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from .._validation import check_count, trusted_inputs
from ..laws import DraftLaw, sample_drafts
from ..models.device import install_prepacked_linears, prepacking_available, sdpa_without_cudnn
from ..models.int8 import Int8Linear, quantize_linears_int8
from ..sampling import SamplingConfig, standardize
from .base import DraftOutcome, DraftTree, Drafter, greedy_q
from .eagle_static import CATCH_UP_WIDTHS, StaticTreeDraft, tree_candidates
from .suffix import SuffixIndex
from .tree import TreeSpec

__all__ = ["Eagle3Head", "EagleDrafter", "eagle3_config", "default_eagle_layers", "rerank", "EAGLE3_KEYS"]

#: The parameter / buffer names of a published EAGLE-3 checkpoint (``embed_tokens.weight`` is
#: optional: heads whose width equals the target's share the target's embedding).
EAGLE3_KEYS: tuple[str, ...] = (
    "fc.weight",
    "midlayer.hidden_norm.weight",
    "midlayer.input_layernorm.weight",
    "midlayer.self_attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight",
    "midlayer.post_attention_layernorm.weight",
    "midlayer.mlp.gate_proj.weight",
    "midlayer.mlp.up_proj.weight",
    "midlayer.mlp.down_proj.weight",
    "norm.weight",
    "lm_head.weight",
    "d2t",
    "t2d",
)


#: Longest context suffix the cache model matches (tokens).
CACHE_MAX_N = 8


def _check_cache_weights(weights: Sequence[float] | None) -> tuple[float, ...] | None:
    """``cache_weights`` of :class:`EagleDrafter`: ``None`` (off) or 1 to :data:`CACHE_MAX_N` numbers in [0, 1]."""
    if weights is None:
        return None
    try:
        w = tuple(float(x) for x in weights)
    except (TypeError, ValueError):
        raise ValueError(f"cache_weights must be a sequence of numbers in [0, 1] or None, got {weights!r}") from None
    if not 1 <= len(w) <= CACHE_MAX_N or not all(0.0 <= x <= 1.0 for x in w):
        raise ValueError(f"cache_weights must hold 1 to {CACHE_MAX_N} numbers in [0, 1] (λ per match length), "
                         f"got {weights!r}")
    return w


def cache_mixture(q: Tensor, followers: Sequence[int], weight: float) -> Tensor:
    """``(1 − weight)·q + weight·q_cache`` for ``q [V]`` and the empirical law ``q_cache [V]`` of
    ``followers`` (token ids, at least one): the cache model's interpolation (module docstring)."""
    law = torch.zeros_like(q).index_add_(
        0, torch.tensor(list(followers), dtype=torch.int64, device=q.device),
        torch.full((len(followers),), 1.0 / len(followers), dtype=q.dtype, device=q.device))
    return q * (1.0 - weight) + law * weight


def default_eagle_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low / mid / high features for a target of ``num_layers`` decoder layers: the
    inputs of layers ``2, L//2, L−3`` (= transformers' ``hidden_states[i]``), ascending, clamped to
    ``[0, L]`` for tiny targets."""
    raw = (2, num_layers // 2, num_layers - 3)
    return tuple(sorted(min(max(i, 0), num_layers) for i in raw))


def _llama_config(obj: dict[str, Any]):
    return LlamaConfig(**obj)


def eagle3_config(target_config: Any, *, draft_vocab_size: int | None = None, num_attention_heads: int | None = None,
                  num_key_value_heads: int | None = None, intermediate_size: int | None = None,
                  layers: Sequence[int] | None = None, num_layers: int = 1):
    """A ``LlamaConfig`` for an EAGLE-3 head on a target with ``target_config`` (a transformers
    config): the target's width, vocabulary, RoPE and norm settings, ``num_layers`` decoder layers
    (EAGLE-3: one),
    ``draft_vocab_size`` (default: the full vocabulary) and the feature layers (default
    :func:`default_eagle_layers`) under ``eagle_config.eagle_aux_hidden_state_layer_ids``.

    Raises:
        ValueError: a feature layer outside ``[0, L]`` (``hidden_states[i]``, L the target's decoder layers).
    """
    tc = target_config
    H = tc.hidden_size
    n_layers = tc.num_hidden_layers
    layers = tuple(int(i) for i in layers) if layers is not None else default_eagle_layers(n_layers)
    if not layers or any(i < 0 or i > n_layers for i in layers):
        raise ValueError(f"feature layers {list(layers)} must lie in 0..{n_layers}: hidden state i is the input of the "
                         f"target's decoder layer i, and it has {n_layers} (EAGLE-3's default: 2, L//2, L-3)")
    rope = getattr(tc, "rope_parameters", None) or {}
    obj = dict(
        architectures=["LlamaForCausalLMEagle3"], model_type="llama",
        hidden_size=H, intermediate_size=intermediate_size or getattr(tc, "intermediate_size", 4 * H),
        num_attention_heads=num_attention_heads or tc.num_attention_heads,
        num_key_value_heads=num_key_value_heads or getattr(tc, "num_key_value_heads", tc.num_attention_heads),
        num_hidden_layers=int(num_layers), vocab_size=tc.vocab_size, draft_vocab_size=int(draft_vocab_size or tc.vocab_size),
        max_position_embeddings=tc.max_position_embeddings, rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-6),
        hidden_act=getattr(tc, "hidden_act", "silu"), tie_word_embeddings=False,
        rope_theta=rope.get("rope_theta", getattr(tc, "rope_theta", 10000.0)),
        eagle_config={"eagle_aux_hidden_state_layer_ids": list(layers)},
    )
    if num_attention_heads is None and getattr(tc, "head_dim", None):
        obj["head_dim"] = tc.head_dim
    return _llama_config(obj)


def rerank(score: Sequence[float], budget: int) -> list[int]:
    """EAGLE-2's re-ranking (Li et al. 2024, Sec. 4.2): the ``budget`` draft nodes of highest
    cumulative draft log-probability, in increasing node order.

    ``score[0]`` is the root (never returned); nodes are numbered so that parents precede children.
    As a child never scores above its parent (a log-probability is ≤ 0) and ties go to the earlier
    node, the kept set is closed under parents: it is a tree.
    """
    return sorted(sorted(range(1, len(score)), key=lambda nd: (-score[nd], nd))[:max(budget, 0)])


def _rotate_half(x: Tensor) -> Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _attend(q: Tensor, keys: Tensor, vals: Tensor, mask: Tensor) -> Tensor:
    """Grouped-query attention of ``q [h, T, d]`` over ``keys / vals [kv, S, d]`` under a boolean
    ``mask [T, S]`` (True: attend); returns ``[h, T, d]`` in q's dtype.

    On a CPU a half-precision input is attended in float32: PyTorch's bf16 CPU kernel is slow for the
    few queries of a draft pass (1 query over 200 keys: 0.086 ms against 0.024 ms in float32 on this
    project's 2-core machine; 0.25 against 0.05 ms over 600 keys), and float32 rounds less. The draft
    law is whatever the head computes, so this changes no exactness guarantee. On CUDA, cuDNN's
    attention kernel is left out (:func:`specot.models.device.sdpa_without_cudnn`)."""
    h, kv = q.shape[0], keys.shape[0]
    with sdpa_without_cudnn(q.device):  # the draft's key length grows every step: cuDNN would re-plan each
        if q.device.type == "cpu":
            dt = q.dtype
            out = F.scaled_dot_product_attention(q.float()[None], keys.float()[None], vals.float()[None],
                                                 attn_mask=mask[None, None], enable_gqa=h != kv)[0]
            return out.to(dt)
        if h != kv:  # repeated keys keep the fused GPU kernels (enable_gqa may fall back to the math path)
            keys, vals = keys.repeat_interleave(h // kv, dim=0), vals.repeat_interleave(h // kv, dim=0)
        return F.scaled_dot_product_attention(q[None], keys[None], vals[None], attn_mask=mask[None, None])[0]


class _Eagle3Attention(nn.Module):
    """Llama attention whose q/k/v projections read the 2H-wide ``[embedding, feature]`` input (the
    first layer) or the H-wide output of the layer below (``in_width=H``, later layers).
    ``qk_norm``: Qwen3's per-head RMSNorm of queries and keys before the rotation (``q_norm``,
    ``k_norm``; heads trained for Qwen3 targets by ``speculators``)."""

    def __init__(self, cfg: Any, in_width: int | None = None, qk_norm: bool = False) -> None:
        super().__init__()
        H = cfg.hidden_size
        W = 2 * H if in_width is None else in_width  # 2H in the first layer, H in later ones
        self.num_heads = cfg.num_attention_heads
        self.num_kv = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or H // self.num_heads
        bias = bool(getattr(cfg, "attention_bias", False))
        self.q_proj = nn.Linear(W, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(W, self.num_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(W, self.num_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, H, bias=bias)
        eps = getattr(cfg, "rms_norm_eps", 1e-6)
        self.q_norm = LlamaRMSNorm(self.head_dim, eps=eps) if qk_norm else None
        self.k_norm = LlamaRMSNorm(self.head_dim, eps=eps) if qk_norm else None

    def project(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Rotated queries ``[..., h, T, d]``, keys and values ``[..., kv, T, d]`` of ``x [..., T, ·]``
        (a leading batch dimension is kept: training runs batches of sequences)."""
        *lead, T, _ = x.shape
        q = self.q_proj(x).view(*lead, T, self.num_heads, self.head_dim)  # [..., T, h, d]
        k = self.k_proj(x).view(*lead, T, self.num_kv, self.head_dim)  # [..., T, kv, d]
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(-3, -2), k.transpose(-3, -2)  # [..., h, T, d], [..., kv, T, d]
        v = self.v_proj(x).view(*lead, T, self.num_kv, self.head_dim).transpose(-3, -2)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin, v

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, past_k: Tensor, past_v: Tensor,
                mask: Tensor, slots: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """``x [T, 2H]``, ``cos/sin [T, d]``, ``past_k/v [kv, P, d]``, boolean ``mask [T, P + T]``
        (True: attend). Returns the output ``[T, H]`` and the new keys / values ``[kv, T, d]``.
        With ``slots [T]`` the past is a static cache ``[kv, S, d]``: the new keys and values are
        written into it at ``slots`` (in place) and ``mask [T, S]`` covers all of it (the form a
        captured CUDA graph needs: no shape depends on the context's length)."""
        T = x.shape[0]
        q, k, v = self.project(x, cos, sin)
        if slots is None:
            keys = torch.cat([past_k, k], dim=1)  # [kv, P + T, d]
            vals = torch.cat([past_v, v], dim=1)
        else:
            keys, vals = past_k.index_copy_(1, slots, k), past_v.index_copy_(1, slots, v)  # [kv, S, d]
        return self.o_proj(_attend(q, keys, vals, mask).transpose(0, 1).reshape(T, -1)), k, v


class _Eagle3Layer(nn.Module):
    """EAGLE-3's ``midlayer``: one Llama decoder layer over ``[input_layernorm(emb), hidden_norm(f)]``
    with the feature ``f`` as the residual (``norm_before_residual``: the normed feature)."""

    def __init__(self, cfg: Any, qk_norm: bool = False) -> None:
        super().__init__()
        eps = getattr(cfg, "rms_norm_eps", 1e-6)
        self.norm_before_residual = bool(getattr(cfg, "norm_before_residual", False))
        self.self_attn = _Eagle3Attention(cfg, qk_norm=qk_norm)
        self.mlp = LlamaMLP(cfg)
        self.hidden_norm = LlamaRMSNorm(cfg.hidden_size, eps=eps)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=eps)

    def forward(self, emb: Tensor, feat: Tensor, cos: Tensor, sin: Tensor, past_k: Tensor, past_v: Tensor,
                mask: Tensor, slots: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        normed = self.hidden_norm(feat)
        residual = normed if self.norm_before_residual else feat
        x = torch.cat([self.input_layernorm(emb), normed], dim=-1)  # [T, 2H]: embedding first
        a, k, v = self.self_attn(x, cos, sin, past_k, past_v, mask, slots)
        h = residual + a
        h = h + self.mlp(self.post_attention_layernorm(h))
        return h, k, v


class _DecoderLayer(nn.Module):
    """A plain Llama decoder layer (pre-norm, H-wide) stacked on ``midlayer`` in a deeper head
    (``num_hidden_layers > 1``; published layout ``layers.{i}.*``, i >= 1, as vLLM names the
    layers of a multi-layer EAGLE-3 head with ``midlayer`` = layer 0)."""

    def __init__(self, cfg: Any, qk_norm: bool = False) -> None:
        super().__init__()
        eps = getattr(cfg, "rms_norm_eps", 1e-6)
        self.self_attn = _Eagle3Attention(cfg, in_width=cfg.hidden_size, qk_norm=qk_norm)
        self.mlp = LlamaMLP(cfg)
        self.input_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=eps)
        self.post_attention_layernorm = LlamaRMSNorm(cfg.hidden_size, eps=eps)

    def forward(self, h: Tensor, cos: Tensor, sin: Tensor, past_k: Tensor, past_v: Tensor,
                mask: Tensor, slots: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        a, k, v = self.self_attn(self.input_layernorm(h), cos, sin, past_k, past_v, mask, slots)
        h = h + a
        return h + self.mlp(self.post_attention_layernorm(h)), k, v


class Eagle3Head(nn.Module):
    """The EAGLE-3 draft network (module docstring); parameter names follow the published layout.

    Args:
        config: a ``LlamaConfig`` with ``draft_vocab_size`` (and optionally ``target_hidden_size``,
            ``eagle_config.eagle_aux_hidden_state_layer_ids``, ``norm_before_residual``, and
            ``num_hidden_layers``: decoder layers, ``midlayer`` plus plain ``layers.{i}``; 1 in EAGLE-3).
        num_features: how many target layers ``fc`` fuses (3 for EAGLE-3).
        own_embedding: give the head its own ``embed_tokens`` (saved with it) instead of sharing
            the target's (:meth:`attach_embedding`).
        fc_bias: give ``fc`` a bias (``fc.bias``: some heads in the ``speculators`` layout have one;
            EAGLE-3's own have none). :meth:`quantize_int8` leaves a biased ``fc`` in full precision.
        qk_norm: Qwen3's per-head RMSNorm of queries and keys (``self_attn.q_norm`` / ``k_norm`` in
            every decoder layer; ``speculators`` heads for Qwen3 targets).
        input_norm: an RMSNorm of the fused target features before ``fc`` (``input_norm.weight``;
            ``speculators``' ``norm_before_fc``).
    """

    def __init__(self, config: Any, num_features: int = 3, own_embedding: bool = False, fc_bias: bool = False,
                 qk_norm: bool = False, input_norm: bool = False) -> None:
        super().__init__()
        self.config = config
        H = config.hidden_size
        V = config.vocab_size
        Vd = int(getattr(config, "draft_vocab_size", None) or V)
        Ht = int(getattr(config, "target_hidden_size", None) or H)
        self.hidden_size, self.vocab_size, self.draft_vocab_size = H, V, Vd
        self.num_features = num_features
        eps = getattr(config, "rms_norm_eps", 1e-6)
        self.input_norm = LlamaRMSNorm(num_features * Ht, eps=eps) if input_norm else None
        self.fc = nn.Linear(num_features * Ht, H, bias=fc_bias)
        self.midlayer = _Eagle3Layer(config, qk_norm=qk_norm)
        # layers 1.. of a deeper head (EAGLE-3 heads have one layer: an empty list)
        n_layers = int(getattr(config, "num_hidden_layers", 1) or 1)
        # keyed "1".."L−1" so the weights are saved as layers.{i}.* (layer 0 is midlayer)
        self.layers = nn.ModuleDict({str(i): _DecoderLayer(config, qk_norm=qk_norm) for i in range(1, n_layers)})
        self.num_layers = n_layers
        self.norm = LlamaRMSNorm(H, eps=eps)
        self.lm_head = nn.Linear(H, Vd, bias=False)
        self.register_buffer("d2t", torch.zeros(Vd, dtype=torch.int64))
        self.register_buffer("t2d", torch.zeros(V, dtype=torch.bool))
        self.t2d[:Vd] = True
        self.embed_tokens: nn.Embedding | None = nn.Embedding(V, H) if own_embedding else None
        self._shared_embedding: list[nn.Embedding] = []  # the target's (not a submodule: not saved)
        self.rotary = LlamaRotaryEmbedding(config=config)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the head's activations (that of its norms; int8 layers keep it in their scales)."""
        return self.norm.weight.dtype

    @property
    def int8(self) -> bool:
        """Whether :meth:`quantize_int8` has replaced the linear layers."""
        return isinstance(self.lm_head, Int8Linear)

    def quantize_int8(self) -> "Eagle3Head":
        """Store every linear layer (``fc``, the decoder layers' projections, ``lm_head``) as int8
        weights with one scale per output row (:class:`~specot.models.int8.Int8Linear`), in place.
        A head pass on a CPU reads half the bytes of bfloat16 (attempt 12, docs/distillation.md).
        The draft law is whatever the quantized head computes, so verification stays lossless.
        Call after moving the head to its device and dtype; a quantized head cannot be saved."""
        if not self.int8:
            quantize_linears_int8(self)
        return self

    # ------------------------------------------------------------------ vocabulary map
    def set_draft_vocab(self, target_ids: Sequence[int] | Tensor) -> None:
        """Use the target tokens ``target_ids`` (distinct, in draft-id order) as the draft
        vocabulary: sets ``d2t`` (``target_ids − arange``) and ``t2d``."""
        ids = torch.as_tensor(target_ids, dtype=torch.int64, device=self.d2t.device).reshape(-1)
        if ids.numel() != self.draft_vocab_size:
            raise ValueError(f"the draft vocabulary has {self.draft_vocab_size} tokens, got {ids.numel()} target ids")
        self.d2t.copy_(ids - torch.arange(ids.numel(), device=ids.device))
        self.t2d.zero_()
        self.t2d[ids] = True
        self.check_vocab_map()

    def target_ids(self) -> Tensor:
        """int64 ``[V_d]``: the target id of every draft id (``draft_id + d2t[draft_id]``)."""
        return torch.arange(self.draft_vocab_size, device=self.d2t.device) + self.d2t

    def check_vocab_map(self) -> None:
        """Raise ``ValueError`` unless ``d2t`` maps the draft ids to distinct target ids in ``[0, V)``."""
        tid = self.target_ids()
        if bool(((tid < 0) | (tid >= self.vocab_size)).any()):
            raise ValueError(f"d2t maps draft ids outside the target vocabulary [0, {self.vocab_size})")
        if torch.unique(tid).numel() != tid.numel():
            raise ValueError("d2t maps two draft ids to one target id; the draft vocabulary must be distinct tokens")

    # ------------------------------------------------------------------ embedding
    def attach_embedding(self, embedding: nn.Embedding) -> None:
        """Share the target's input embedding (frozen; not saved with the head)."""
        if embedding.weight.shape != (self.vocab_size, self.hidden_size):
            raise ValueError(f"the target's embedding is {tuple(embedding.weight.shape)}, the head needs "
                             f"({self.vocab_size}, {self.hidden_size}); this checkpoint needs its own embed_tokens")
        self._shared_embedding = [embedding]

    def embed(self, tokens: Tensor) -> Tensor:
        emb = self.embed_tokens if self.embed_tokens is not None else (
            self._shared_embedding[0] if self._shared_embedding else None)
        if emb is None:
            raise RuntimeError("the EAGLE head has no token embedding: attach the target's (attach_embedding)")
        return emb(tokens.to(emb.weight.device)).to(self.dtype)

    # ------------------------------------------------------------------ forward
    def step(self, tokens: Tensor, feats: Tensor, positions: Tensor, past_k: Tensor, past_v: Tensor,
             mask: Tensor, fused: bool, last_logits: bool = False, *, slots: Tensor | None = None,
             logit_rows: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """Run ``T`` draft positions: ``tokens [T]``, features ``feats`` (``fused``: the target's
        ``[T, k·H_t]``, through ``fc``; else draft output features ``[T, H]``), rotary ``positions
        [T]``, ``past_k/v [L, kv, P, d]`` (L = the head's layers), ``mask [T, P + T]``. Returns
        (draft logits ``[T, V_d]``, output features ``[T, H]`` (pre-norm, fed to the next draft step),
        new keys, new values ``[L, kv, T, d]``). ``last_logits``: logits of the last position only
        (``[1, V_d]``; a catch-up pass needs no others); ``logit_rows [R]``: of those rows only.
        With ``slots [T]``, ``past_k/v`` is a static cache ``[L, kv, S, d]`` that the new entries are
        written into at ``slots`` and ``mask`` is ``[T, S]`` (:class:`StaticTreeDraft`)."""
        dt = self.dtype
        f = self.fuse(feats) if fused else feats.to(dt)
        cos, sin = self.rotary(f, positions[None])
        cos, sin = cos[0], sin[0]
        h, k, v = self.midlayer(self.embed(tokens), f, cos, sin, past_k[0], past_v[0], mask, slots)
        ks, vs = [k], [v]
        for i, layer in enumerate(self.layers.values(), start=1):
            h, k, v = layer(h, cos, sin, past_k[i], past_v[i], mask, slots)
            ks.append(k)
            vs.append(v)
        out = h[-1:] if last_logits else h if logit_rows is None else h.index_select(0, logit_rows)
        return self.lm_head(self.norm(out)), h, torch.stack(ks), torch.stack(vs)

    def fuse(self, feats: Tensor) -> Tensor:
        """The draft feature ``[..., H]`` of the target's fused features ``feats [..., k·H_t]``:
        ``fc``, after ``input_norm`` where the head has one."""
        x = feats.to(self.dtype)
        return self.fc(self.input_norm(x) if self.input_norm is not None else x)

    def empty_kv(self) -> tuple[Tensor, Tensor]:
        """An empty KV cache ``[L, kv, 0, d]`` (keys, values) of the head's ``L`` layers."""
        att = self.midlayer.self_attn
        w = self.norm.weight
        z = torch.zeros(self.num_layers, att.num_kv, 0, att.head_dim, dtype=w.dtype, device=w.device)
        return z, z.clone()

    def forward_sequence(self, tokens: Tensor, feats: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher-forced pass over one sequence (training / tests): entry ``j`` reads
        ``tokens[j]`` and ``feats[j]`` (the target's fused feature of the position BEFORE token j),
        causally. Returns (logits ``[T, V_d]``, output features ``[T, H]``)."""
        T = tokens.shape[0]
        pk, pv = self.empty_kv()
        mask = torch.ones(T, T, dtype=torch.bool, device=pk.device).tril()
        pos = torch.arange(T, device=pk.device)
        logits, h, _, _ = self.step(tokens, feats, pos, pk, pv, mask, fused=True)
        return logits, h

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict[str, Tensor]:
        """The published-layout state dict (no rotary buffers; the embedding only when owned).

        Raises:
            RuntimeError: the head was quantized (:meth:`quantize_int8`); save it before.
        """
        if self.int8:
            raise RuntimeError("an int8-quantized EAGLE head has no published layout; save the head before quantize_int8()")
        return {k: v for k, v in self.state_dict().items() if not k.startswith("rotary.")}

    def save_pretrained(self, path: str | os.PathLike[str]) -> None:
        """Write ``config.json`` and ``model.safetensors`` in the published EAGLE-3 layout."""
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        cfg = self.config.to_dict()
        cfg["architectures"] = ["LlamaForCausalLMEagle3"]
        cfg["draft_vocab_size"] = self.draft_vocab_size
        (d / "config.json").write_text(json.dumps(cfg, indent=2, default=str), encoding="utf-8")
        save_file({k: v.detach().contiguous().cpu() for k, v in self.checkpoint_state().items()},
                  str(d / "model.safetensors"), metadata={"format": "pt"})


def _read_state(d: Path) -> dict[str, Tensor]:
    """The tensors of a checkpoint directory: ``model.safetensors``, sharded safetensors (with an
    index), or ``pytorch_model.bin`` (EAGLE's own releases)."""
    files = sorted(d.glob("*.safetensors"))
    if files:
        state: dict[str, Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        return state
    bins = sorted(d.glob("pytorch_model*.bin"))
    if bins:
        state = {}
        for f in bins:
            state.update(torch.load(str(f), map_location="cpu", weights_only=True))
        return state
    raise FileNotFoundError(f"no model.safetensors or pytorch_model.bin in {d}")


def _resolve_dir(path: str | os.PathLike[str]) -> Path:
    d = Path(path).expanduser()
    if d.is_dir():
        return d
    if str(path).count("/") == 1 and not d.exists():  # a hub id: the cached / downloaded snapshot
        return Path(snapshot_download(str(path), allow_patterns=["*.json", "*.safetensors", "*.bin"]))
    raise FileNotFoundError(f"EAGLE checkpoint {str(path)!r} is not a directory")


#: The top-level fields of a ``speculators`` EAGLE-3 config that belong to the head's config.
_SPECULATORS_FIELDS = ("draft_vocab_size", "target_hidden_size", "norm_before_residual",
                       "eagle_aux_hidden_state_layer_ids")


#: The decoder-layer types of ``speculators`` EAGLE-3 heads that specot's layer computes: Llama's,
#: and Qwen3's (Llama's with ``q_norm`` / ``k_norm``).
_SPECULATORS_LAYER_TYPES = ("llama", "qwen3")


def _flat_eagle3_config(obj: dict[str, Any], where: Path) -> dict[str, Any]:
    """A checkpoint's ``config.json`` as one flat ``LlamaConfig`` dict: EAGLE-3's own layout as it
    is; the ``speculators`` layout (vLLM's ``speculators`` library) as its ``transformer_layer_config``
    plus the EAGLE-3 fields it keeps at the top level (None values dropped) and any ``specot_*`` keys.

    Raises:
        ValueError: a ``speculators`` config of another algorithm, or without a ``transformer_layer_config``.
    """
    kind = obj.get("speculators_model_type")
    if kind is None:
        return obj
    if kind != "eagle3":
        raise ValueError(f"{where}: a speculators checkpoint of type {kind!r}; specot loads EAGLE-3 heads "
                         "(speculators_model_type 'eagle3') only")
    layer = obj.get("transformer_layer_config")
    if not isinstance(layer, dict):
        raise ValueError(f"{where}: a speculators EAGLE-3 config needs a 'transformer_layer_config' object")
    if layer.get("model_type", "llama") not in _SPECULATORS_LAYER_TYPES:
        raise ValueError(f"{where}: the head's decoder layer is of type {layer.get('model_type')!r}; specot runs "
                         f"EAGLE-3 heads built from {' and '.join(map(repr, _SPECULATORS_LAYER_TYPES))} layers only")
    flat = dict(layer)
    flat.update({k: obj[k] for k in _SPECULATORS_FIELDS if obj.get(k) is not None})
    flat.update({k: v for k, v in obj.items() if k.startswith("specot_")})
    return flat


def _config_layers(cfg: Any) -> tuple[int, ...] | None:
    ec = getattr(cfg, "eagle_config", None)
    ids = (ec or {}).get("eagle_aux_hidden_state_layer_ids") if isinstance(ec, dict) else None
    ids = ids if ids is not None else getattr(cfg, "eagle_aux_hidden_state_layer_ids", None)
    return tuple(int(i) for i in ids) if ids is not None else None


class EagleDrafter(Drafter):
    """An EAGLE-3 drafter speaking the one drafter protocol (module docstring).

    Args:
        head: the draft network.
        target: the target :class:`~specot.models.CausalLM` (its embedding is shared with the head
            unless the head owns one; its width, vocabulary and depth are checked).
        layers: the target's feature layers (indices into transformers' ``hidden_states``); default:
            the config's ``eagle_aux_hidden_state_layer_ids``, else :func:`default_eagle_layers`.
        dynamic: trees use EAGLE-2's dynamic expansion (``True``) or the spec's static topology.
        top_k: children per expanded node of a dynamic tree (default: the spec's widest node);
            capped at the spec's :meth:`~TreeSpec.max_drafts_per_node` (what the verifier was
            checked for).
        total_tokens: node budget of a dynamic tree (default: the spec's number of slots).
        width: nodes expanded per depth of a dynamic tree (default ``top_k``, as in EAGLE-2).
        min_confidence: τ in (0, 1) or ``None`` (off, the default): a drafted node is expanded
            further only while its path's cumulative draft probability (the draft's own softmax at
            temperature 1, EAGLE-2's confidence) is at least τ — for a chain, a draft length that
            stops where the draft becomes unsure (Hugging Face's ``assistant_confidence_threshold``
            applies the same idea per token). It saves draft passes and verified tokens that would
            likely be rejected; the decision reads only drafted tokens, so the output law is unchanged.
        rerank: at temperature 0, GREEDY-law dynamic trees follow EAGLE-2 to the letter (``True``,
            the default): top-k children everywhere, ``width`` best nodes expanded per depth, then
            the ``total_tokens`` nodes of highest cumulative draft probability kept — a deterministic
            tree (see :meth:`_draft_reranked`). Otherwise, and at every temperature > 0, the budget
            is spent during expansion and the last child of every node is sampled (the construction
            the IID and WOR laws always use): at T > 0 a sampled draft is accepted with probability
            Σ min(p, q), which beats the top-k's p(top-k) when p is spread — measured on the shipped
            head, deterministic trees at T = 1 lost 0.1–0.2 block efficiency (``docs/results.md``).
        q_temperature_ratio: r > 0, a calibration of the head: at a sampling temperature T > 0 the
            draft law is ``q = softmax(z / (r·T))`` over the draft vocabulary (z: the head's logits);
            r = 1 (the default) is the head's own law. A head trained by forward KL is
            under-confident, and a single draft is accepted with probability Σ min(p, q), which a
            sharper q raises where the head's top token is right: for the shipped head r = 0.75
            raised the exact first-position acceptance at T = 1 by 0.03–0.06 on six prompt sets
            (``docs/results.md``). Any r keeps verification lossless: q is exactly the law the
            drafts are drawn from. :meth:`from_pretrained` reads ``specot_q_temperature_ratio``
            from the checkpoint's ``config.json`` (absent in published heads: r = 1).
        int8: store the head's linear layers as int8 weights with a scale per output row
            (:meth:`Eagle3Head.quantize_int8`): half the bytes of a bfloat16 pass. Lossless all the
            same (q is what the quantized head computes). Without it, a head on a CPU runs its
            linear layers prepacked for oneDNN (:class:`~specot.models.device.PrepackedLinear`).
            In bf16 the two were level end to end (int8 3 % ahead on eight cells, within noise);
            in float32 PyTorch's int8 kernel is 8-40x slower than the prepacked layers
            (docs/results.md, "Session 23 runs"). :meth:`from_pretrained` reads
            ``specot_int8_weights`` from ``config.json`` (absent: off) and applies it on a CPU,
            except to a float32 head that oneDNN can prepack.
        cache_weights: λ_1, λ_2, ... of the cache model (module docstring): at temperature > 0, a
            node whose context ends with an m-token repeat of earlier text drafts from
            ``(1 − λ_m)·q_head + λ_m·q_cache`` (the last weight for longer matches); ``None`` (the
            default) is off. :meth:`from_pretrained` reads ``specot_cache_weights`` from
            ``config.json`` (absent: off). ``cache_rows`` counts the rows it mixed in the current
            generation.

    Raises:
        ValueError: a head that does not fit the target (vocabulary, feature width, layers),
            ``min_confidence`` outside (0, 1), ``q_temperature_ratio`` not a finite number > 0, or
            ``cache_weights`` not 1 to 8 numbers in [0, 1].
    """

    def __init__(self, head: Eagle3Head, target: Any, *, layers: Sequence[int] | None = None, dynamic: bool = True,
                 top_k: int | None = None, total_tokens: int | None = None, width: int | None = None,
                 min_confidence: float | None = None, rerank: bool = True, q_temperature_ratio: float = 1.0,
                 int8: bool = False, cache_weights: Sequence[float] | None = None, name: str = "eagle3") -> None:
        super().__init__()
        tcfg = target.model.config
        n_layers = int(tcfg.num_hidden_layers)
        layers = tuple(int(i) for i in layers) if layers is not None else (
            _config_layers(head.config) or default_eagle_layers(n_layers))
        if len(layers) != head.num_features:
            raise ValueError(f"the head's fc fuses {head.num_features} target layers, got layers {list(layers)}")
        if any(not 0 <= i <= n_layers for i in layers):
            raise ValueError(f"feature layers {list(layers)} must lie in [0, {n_layers}] (the target's hidden_states)")
        if head.fc.in_features != len(layers) * int(tcfg.hidden_size):
            raise ValueError(f"the head's fc reads {head.fc.in_features} features, the target gives "
                             f"{len(layers)} x {tcfg.hidden_size}")
        if head.vocab_size != target.vocab_size:
            raise ValueError(f"vocabulary mismatch: the EAGLE head maps to {head.vocab_size} target tokens, the target "
                             f"{target.name!r} has {target.vocab_size}")
        head.check_vocab_map()
        if head.embed_tokens is None:
            head.attach_embedding(target.model.get_input_embeddings())
        for x in (top_k, total_tokens, width):
            if x is not None and (isinstance(x, bool) or not isinstance(x, int) or x < 1):
                raise ValueError(f"top_k, total_tokens and width must be integers >= 1, got {x!r}")
        if min_confidence is not None and not 0.0 < float(min_confidence) < 1.0:
            raise ValueError(f"min_confidence must lie in (0, 1) or be None, got {min_confidence!r}")
        ratio = float(q_temperature_ratio)
        if not (math.isfinite(ratio) and ratio > 0):
            raise ValueError(f"q_temperature_ratio must be a finite number > 0 (1 = the head's own law), "
                             f"got {q_temperature_ratio!r}")
        self.q_temperature_ratio = ratio
        self.cache_weights = _check_cache_weights(cache_weights)
        self.head = head.to(target.device).eval()
        self.head.requires_grad_(False)
        if int8:
            self.head.quantize_int8()
        else:  # on a CPU, the large layers on oneDNN over weights reordered once (models.device.PrepackedLinear)
            install_prepacked_linears(self.head)
        self.target = target
        self.hidden_layers = layers
        self.dynamic, self.top_k, self.total_tokens, self.width = dynamic, top_k, total_tokens, width
        self.min_confidence = None if min_confidence is None else float(min_confidence)
        self.rerank = bool(rerank)
        self.name = name
        self._target_ids = self.head.target_ids()  # [V_d]: target id of each draft id
        self._target_id_list: list[int] = self._target_ids.tolist()
        self._static_len: int | None = None  # use_static_cache(max_len): positions the static cache holds
        self._static_graphs = False
        self._static: StaticTreeDraft | None = None
        self._static_key: tuple[Any, ...] | None = None  # the tree parameters _static was built for
        self.reset()

    def use_static_cache(self, max_len: int, *, cuda_graphs: bool = False) -> "EagleDrafter":
        """Build EAGLE-2's re-ranked trees (temperature 0, GREEDY law, ``dynamic`` and ``rerank``) on
        the head's device over a static KV cache of ``max_len`` committed positions, and on CUDA with
        ``cuda_graphs`` replay them as CUDA graphs (:class:`~specot.drafting.eagle_static.StaticTreeDraft`):
        the same trees, one host read per draft. Other trees are drafted as before. Returns ``self``.

        Raises:
            ValueError: ``max_len`` < 1.
        """
        check_count(max_len, "max_len")
        if self._static_len is not None and self._static_len >= max_len and self._static_graphs == bool(cuda_graphs):
            return self  # the cache (and its captured graphs) already fit
        self._static_len, self._static_graphs, self._static = int(max_len), bool(cuda_graphs), None
        self._send = self._sbase = 1
        return self

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_pretrained(cls, path: str | os.PathLike[str], target: Any, **kw: Any) -> "EagleDrafter":
        """Load a published EAGLE-3 head (``config.json`` with ``draft_vocab_size``; weights
        ``fc.weight``, ``midlayer.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``, and
        optionally ``embed_tokens.weight`` and ``fc.bias``) for ``target``, in the target's dtype and
        device. A deeper head's later decoder layers are ``layers.{i}.*`` (i >= 1; ``layers.0.*`` is
        read as ``midlayer.*``); the depth comes from the weights, not from ``num_hidden_layers``.
        A ``speculators`` checkpoint (``speculators_model_type: "eagle3"``, module docstring) is read
        through its ``transformer_layer_config`` (Llama or Qwen3 layers) plus the top-level
        ``draft_vocab_size``, ``target_hidden_size``, ``norm_before_residual`` and
        ``eagle_aux_hidden_state_layer_ids``; ``fc.bias``, ``input_norm.weight`` and
        ``self_attn.q_norm`` / ``k_norm`` are used where present.

        Raises:
            FileNotFoundError: no checkpoint there.
            ValueError: missing weights, wrong shapes, a head that does not fit the target, or a
                ``speculators`` checkpoint of another algorithm than EAGLE-3 or with another layer type.
        """
        d = _resolve_dir(path)
        cfg_file = d / "config.json"
        if not cfg_file.is_file():
            raise FileNotFoundError(f"no config.json in EAGLE checkpoint {d}")
        obj = _flat_eagle3_config(json.loads(cfg_file.read_text(encoding="utf-8")), d)
        state = {k.removeprefix("model."): v for k, v in _read_state(d).items()}
        if not any(k.startswith("midlayer.") for k in state):  # vLLM's name for it: layers.0
            state = {("midlayer." + k.removeprefix("layers.0.")) if k.startswith("layers.0.") else k: v
                     for k, v in state.items()}
        cfg = _llama_config({k: v for k, v in obj.items() if k not in ("architectures", "model_type")})
        # the depth is what the weights hold (published configs may copy the target's layer count)
        cfg.num_hidden_layers = 1 + len({k.split(".")[1] for k in state if k.startswith("layers.")})
        if "draft_vocab_size" not in obj and "lm_head.weight" in state:
            cfg.draft_vocab_size = int(state["lm_head.weight"].shape[0])
        if "fc.weight" not in state:
            raise ValueError(f"{d} is not an EAGLE-3 checkpoint: no fc.weight (keys: {sorted(state)[:8]}...)")
        H = int(cfg.hidden_size)
        k_in = int(state["fc.weight"].shape[1])
        Ht = int(getattr(cfg, "target_hidden_size", None) or H)
        if k_in % Ht:
            raise ValueError(f"fc.weight reads {k_in} features, not a multiple of the target width {Ht}")
        with no_init_weights():  # every weight comes from the checkpoint (checked below): no random init (40 ms)
            head = Eagle3Head(cfg, num_features=k_in // Ht, own_embedding="embed_tokens.weight" in state,
                              fc_bias="fc.bias" in state, qk_norm="midlayer.self_attn.q_norm.weight" in state,
                              input_norm="input_norm.weight" in state)
        Vd = head.draft_vocab_size
        if "d2t" not in state:
            if Vd != head.vocab_size:
                raise ValueError(f"{d}: a reduced draft vocabulary ({Vd} of {head.vocab_size}) needs the d2t map")
            state["d2t"] = torch.zeros(Vd, dtype=torch.int64)
        if "t2d" not in state:
            t2d = torch.zeros(head.vocab_size, dtype=torch.bool)
            t2d[torch.arange(Vd) + state["d2t"].to(torch.int64)] = True
            state["t2d"] = t2d
        state["d2t"] = state["d2t"].to(torch.int64)
        state["t2d"] = state["t2d"].to(torch.bool)
        expected = head.checkpoint_state()
        missing = sorted(set(expected) - set(state))
        if missing:
            raise ValueError(f"EAGLE-3 checkpoint {d} lacks {missing}")
        extra = sorted(set(state) - set(expected))
        if extra:
            warnings.warn(f"EAGLE-3 checkpoint {d}: ignoring unexpected weights {extra[:6]}", stacklevel=2)
        for k, v in expected.items():
            if tuple(state[k].shape) != tuple(v.shape):
                raise ValueError(f"EAGLE-3 checkpoint {d}: {k} has shape {tuple(state[k].shape)}, the config "
                                 f"gives {tuple(v.shape)}")
        head.load_state_dict({k: state[k] for k in expected}, strict=False)
        head.to(dtype=target.dtype)
        kw.setdefault("q_temperature_ratio", float(obj.get("specot_q_temperature_ratio", 1.0)))
        kw.setdefault("cache_weights", obj.get("specot_cache_weights"))
        # a CPU setting for bf16 heads: there int8 weights halve the bytes a pass reads. A float32 head
        # runs prepacked instead wherever oneDNN can: PyTorch's int8 kernel is 8-40x slower with
        # float32 activations (docs/results.md, "Session 23 runs")
        kw.setdefault("int8", bool(obj.get("specot_int8_weights", False)) and torch.device(target.device).type == "cpu"
                      and not (target.dtype == torch.float32 and prepacking_available(torch.float32)))
        return cls(head, target, name=kw.pop("name", d.name or "eagle3"), **kw)

    @classmethod
    def random(cls, target: Any, *, draft_vocab: Sequence[int] | int | None = None, seed: int = 0,
               layers: Sequence[int] | None = None, scale: float = 1.0, num_layers: int = 1,
               **kw: Any) -> "EagleDrafter":
        """An untrained head for ``target`` (tests, training from scratch): ``draft_vocab`` is the
        list of target ids of the draft vocabulary, or its size (the first ``V_d`` ids), or ``None``
        (the full vocabulary); ``scale`` multiplies ``lm_head`` (sharper draft distributions);
        ``num_layers`` decoder layers (EAGLE-3: 1)."""
        tcfg = target.model.config
        if draft_vocab is None:
            ids = list(range(target.vocab_size))
        elif isinstance(draft_vocab, int):
            ids = list(range(draft_vocab))
        else:
            ids = [int(t) for t in draft_vocab]
        cfg = eagle3_config(tcfg, draft_vocab_size=len(ids), layers=layers, num_layers=num_layers)
        torch.manual_seed(seed)
        head = Eagle3Head(cfg, num_features=len(_config_layers(cfg) or ()))
        for m in head.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02 * 5)
        with torch.no_grad():
            head.lm_head.weight.mul_(scale)
        head.set_draft_vocab(ids)
        head.to(dtype=target.dtype)
        return cls(head, target, **kw)

    # ------------------------------------------------------------------ protocol
    @property
    def vocab_size(self) -> int:
        return self.head.vocab_size

    @property
    def device(self) -> torch.device:
        return self.head.norm.weight.device

    def reset(self) -> None:
        self._ids: list[int] = []
        self._feats = torch.zeros(0, self.head.fc.in_features, dtype=self.head.dtype,
                                  device=self.device)
        self._fbase = 0  # absolute position of _feats[0]
        self._k, self._v = self.head.empty_kv()
        self._kbase = 1  # absolute position of KV entry 0 (entry j reads token j and feature j − 1)
        self._last: tuple[Tensor, Tensor] | None = None  # (logits [V_d], feature [H]) of the last entry
        self._cache = SuffixIndex(CACHE_MAX_N)  # the committed tokens, for the cache model
        self.cache_rows = 0  # q rows the cache model mixed, this generation (for reports and tests)
        self._send = self._sbase = 1  # the static cache (use_static_cache) holds positions [_sbase, _send)

    def start(self, prompt_ids: Sequence[int], spec: TreeSpec, schedule=None, stop_tokens=frozenset()) -> None:
        super().start(prompt_ids, spec, schedule, stop_tokens)
        self._ids = [int(t) for t in prompt_ids]

    @property
    def _fend(self) -> int:
        return self._fbase + self._feats.shape[0]

    @property
    def _kend(self) -> int:
        return self._kbase + self._k.shape[2]

    def _truncate(self, n: int) -> None:
        """Forget everything that depends on tokens at positions ``>= n``."""
        if self._fend > n:
            self._feats = self._feats[: max(0, n - self._fbase)]
        self._truncate_kv(n)

    def _truncate_kv(self, n: int) -> None:
        """Drop the KV entries at positions ``>= n``."""
        self._send = min(self._send, max(n, 1))
        if self._kend > n:
            keep = max(0, n - self._kbase)
            self._k, self._v = self._k[:, :, :keep], self._v[:, :, :keep]
            self._last = None

    def update(self, outcome: DraftOutcome) -> None:
        """Store the target's features of the committed positions (truncating stale ones)."""
        super().update(outcome)
        n = outcome.context_len
        self._truncate(n)
        self._ids = self._ids[:n] + [int(t) for t in outcome.tokens]
        h = outcome.hidden_states
        if h is None or h.shape[0] == 0:
            return
        start = int(outcome.hidden_start)
        last_valid = len(self._ids) - 2  # the last committed token has not been through the target
        h = h[: max(0, last_valid - start + 1)]
        if h.shape[0] == 0:
            return
        h = h.to(device=self.device, dtype=self._feats.dtype)
        if start > self._fend or start < self._fbase:  # a gap (or earlier start): restart from here
            self._feats, self._fbase = h, start
            self._k, self._v = self.head.empty_kv()
            self._kbase, self._last = start + 1, None
            return
        self._truncate(start + 1)  # entries reading a replaced feature (none in the engine's order)
        self._feats = torch.cat([self._feats[: start - self._fbase], h])

    @torch.no_grad()
    def _catch_up(self, context: Sequence[int]) -> tuple[Tensor, Tensor] | None:
        """Run the committed entries up to the last context token; returns its (draft logits
        ``[V_d]``, output feature ``[H]``), or ``None`` when the target's features are missing."""
        c = len(context)
        if c - 1 < self._kbase or self._fend < c - 1:  # need features up to position c − 2
            return None
        if self._kend > c:
            self._truncate(c)
        if self._kend == c and self._last is not None:
            return self._last
        if self._kend == c:  # the last entry's outputs were dropped: recompute it
            self._truncate_kv(c - 1)
        lo = self._kend
        toks = torch.tensor([int(t) for t in context[lo:c]], dtype=torch.int64, device=self.device)
        feats = self._feats[lo - 1 - self._fbase: c - 1 - self._fbase]
        T, P = c - lo, self._k.shape[2]
        mask = torch.ones(T, P + T, dtype=torch.bool, device=self.device)
        mask[:, P:] = torch.ones(T, T, dtype=torch.bool, device=self.device).tril()
        pos = torch.arange(lo - 1, c - 1, device=self.device)  # the draft's own positions (EAGLE: j − 1)
        logits, h, k, v = self.head.step(toks, feats, pos, self._k, self._v, mask, fused=True, last_logits=True)
        self._k, self._v = torch.cat([self._k, k], 2), torch.cat([self._v, v], 2)
        self._last = (logits[-1], h[-1])
        self.calls += 1
        return self._last

    def draft_distribution(self, logits_d: Tensor, sampling: SamplingConfig) -> Tensor:
        """The draft law q ``[B, V]`` of head logits ``logits_d [B, V_d]``: the standardized
        distribution over the draft vocabulary (``sampling``'s transform at temperature
        ``q_temperature_ratio · T``; one-hot at T = 0) scattered to the target ids ``d2t`` maps to,
        0 on every other target token. Drafts are sampled from exactly this law, so verifying them
        against it is lossless (module docstring)."""
        return self._to_target_vocab(self._draft_probs(logits_d, sampling))

    def _draft_probs(self, logits_d: Tensor, sampling: SamplingConfig) -> Tensor:
        """The draft law over the draft vocabulary ``[B, V_d]`` (:meth:`draft_distribution` before the scatter)."""
        if sampling.temperature > 0 and self.q_temperature_ratio != 1.0:
            sampling = dataclasses.replace(sampling, temperature=sampling.temperature * self.q_temperature_ratio)
        return standardize(logits_d, sampling)  # [B, V_d]

    def _to_target_vocab(self, qd: Tensor) -> Tensor:
        """Scatter draft-vocabulary probabilities ``qd [B, V_d]`` to the target ids: ``[B, V]``, 0 elsewhere."""
        q = torch.zeros(qd.shape[0], self.vocab_size, dtype=qd.dtype, device=qd.device)
        return q.index_copy_(1, self._target_ids, qd)

    def propose(self, context: Sequence[int], max_depth: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """A chain (a chain spec) or a tree (EAGLE-2 dynamic or the spec's static topology) after
        ``context``; the empty tree until the target has produced the context's features."""
        t0 = time.perf_counter()
        context = [int(t) for t in context]
        common = 0
        for a, b in zip(self._ids, context):
            if a != b:
                break
            common += 1
        if common < len(self._ids):
            self._truncate(common)
        self._ids = list(context)
        spec = self.spec if self.spec is not None else TreeSpec.sequences(1, max(max_depth, 1))
        depth = self.depth_limit(max_depth)
        static = self._static_tree(spec, sampling, len(context)) if depth > 0 else None
        if static is not None:
            tree = self._draft_static(static, context, depth)
            self.draft_time_s += time.perf_counter() - t0
            return tree
        root = self._catch_up(context) if depth > 0 else None
        if root is None:
            tree = DraftTree.root(context[-1])
        else:
            with trusted_inputs():  # q from standardize (or a mixture of laws): no value checks, no syncs for them
                tree = self._draft(context, root, spec, depth, sampling, generator)
        if tree.q is not None and tree.q.device.type == "cuda":
            torch.cuda.synchronize(tree.q.device)
        self.draft_time_s += time.perf_counter() - t0
        return tree

    # ------------------------------------------------------------------ tree drafting
    @torch.no_grad()
    def _draft(self, context: list[int], root: tuple[Tensor, Tensor], spec: TreeSpec, depth: int,
               sampling: SamplingConfig, generator: torch.Generator | None) -> DraftTree:
        """Grow the tree depth by depth (see the module docstring for the laws).

        Per depth: every frontier node (fed to the draft, with its logits) gets its number of
        children ``n`` (a chain: 1; static: its slots' child slots; dynamic: ``top_k`` within the
        budget), capped at q's support for WOR / GREEDY; then ONE :func:`sample_drafts` call per
        distinct n draws the children from the nodes' q rows under the law. The next frontier
        (static: nodes with child slots; dynamic: the ``width`` highest cumulative draft
        log-probabilities, within the budget) runs through the draft head in ONE pass under a tree
        mask; leaves are never run.
        """
        c = len(context)
        chain = spec.is_chain()
        law = DraftLaw.IID if chain else spec.law
        dynamic = self.dynamic and not chain
        k_children, budget, width = self._tree_params(spec)
        if dynamic and self.rerank and law == DraftLaw.GREEDY and sampling.greedy:
            return self._draft_reranked(context, root, depth, k_children, budget, width)
        tree = DraftTree.root(context[-1])
        tree.law = law
        if not chain:
            depth = min(depth, spec.depth) if not dynamic else depth
        slots: dict[int, list[tuple[int, ...]]] = {0: [()]}
        score = {0: 0.0}
        logits = {0: root[0]}
        feat = {0: root[1]}
        anc: dict[int, list[int]] = {0: []}  # node -> temporary entries it attends to (ancestors + itself)
        tk, tv = self.head.empty_kv()
        frontier = [0]
        q_rows: list[Tensor] = []
        greedy_target = sampling.greedy
        cached = self.cache_weights is not None and not greedy_target
        if cached:
            self._cache = self._cache.sync(context)
        gated = self.min_confidence is not None
        log_tau = math.log(self.min_confidence) if self.min_confidence is not None else 0.0
        for d in range(depth):
            # ---- how many children each frontier node gets (decided before drawing them)
            if chain:
                plan = [1 for _ in frontier]
            elif dynamic:
                left = budget - tree.size
                plan = []
                for _ in frontier:
                    m = min(k_children, max(left, 0))
                    plan.append(m)
                    left -= m
            else:
                plan = [len([cs for s in slots[nd] for cs in spec.children(s)]) for nd in frontier]
            lg = torch.stack([logits[nd] for nd in frontier])  # [F, V_d]
            # the law over the draft vocabulary: drawing there and mapping the ids through d2t is
            # drawing from q [F, V] (zero off the draft vocabulary) — at a sixth of the width
            qd = self._draft_probs(lg, sampling)  # [F, V_d]
            if greedy_target and not chain and any(m > 1 for m in plan):
                # temperature 0: a one-hot q allows one child only; nodes with several children draw
                # them from the draft's own softmax (any q is exact for a lossless verifier)
                soft = self._draft_probs(lg, SamplingConfig(1.0))
                multi = torch.tensor([m > 1 for m in plan], device=qd.device)[:, None]
                qd = torch.where(multi, soft, qd)
            # the law the children are drawn from: over the draft vocabulary, or over the target's
            # where the cache model mixes in a repeat's continuation (mixed rows, target ids)
            mixed = self._cache_rows(context, tree, frontier) if cached else {}
            space, conf = qd, None
            if mixed:
                space = self._to_target_vocab(qd)  # [F, V]
                if dynamic or gated:  # the law the draft's confidence (the expansion order) reads
                    conf = self._to_target_vocab(torch.softmax(lg.to(torch.float32), dim=-1))
                self.cache_rows += len(mixed)
                for i, (lam, follow) in mixed.items():
                    space[i] = cache_mixture(space[i], follow, lam)
                    if conf is not None:
                        conf[i] = cache_mixture(conf[i], follow, lam)
            to_target = (lambda j: j) if mixed else self._target_id_list.__getitem__
            if law != DraftLaw.IID:
                support = (space > 0).sum(-1).tolist()
                plan = [min(m, int(s)) for m, s in zip(plan, support)]
            draws: dict[int, list[int]] = {}  # frontier index -> ids (in `space`) of its children
            for m in dict.fromkeys(plan):
                if m == 0:
                    continue
                rows = [i for i, x in enumerate(plan) if x == m]
                got = sample_drafts(space[rows], m, law, generator).tolist()
                for i, ids in zip(rows, got):
                    draws[i] = ids
            q = space if mixed else self._to_target_vocab(qd)  # [F, V]: the rows the verifier reads
            new_children: list[int] = []
            pending: list[tuple[int, int, int]] = []  # (parent node, child node, flat index into logp)
            Vs = space.shape[-1]
            for i, nd in enumerate(frontier):
                if i not in draws:
                    continue
                tree.q_row[nd] = len(q_rows)
                q_rows.append(q[i])
                kid_slots = [cs for s in slots[nd] for cs in spec.children(s)] if not (chain or dynamic) else []
                kids = tree.add_children(nd, [to_target(j) for j in draws[i]])
                for j, child in enumerate(kids):
                    if child not in kids[:j]:  # equal IID draws share one child
                        new_children.append(child)
                        pending.append((nd, child, i * Vs + draws[i][j]))
                if kid_slots:
                    for j, child in enumerate(kids):
                        slots.setdefault(child, []).append(kid_slots[j])
            if (dynamic or gated) and pending:  # cumulative log-probabilities (the draft's confidence), one host read
                logp = (torch.log(conf) if conf is not None else torch.log_softmax(lg.to(torch.float32), dim=-1)).reshape(-1)
                lps = logp.index_select(0, torch.tensor([x[2] for x in pending], device=logp.device)).tolist()
            else:
                lps = [0.0] * len(pending)
            for (nd, child, _), lp in zip(pending, lps):
                score[child] = score[nd] + lp
            if d + 1 >= depth or not new_children:
                break
            # ---- the next frontier
            cands = [nd for nd in new_children if tree.tokens[nd] not in self.stop_tokens
                     and (not gated or score[nd] >= log_tau)]  # τ: expand only confident paths
            if chain:
                nxt = cands
            elif dynamic:
                left = budget - tree.size
                cands.sort(key=lambda nd: (-score[nd], nd))
                nxt = cands[: min(width, max(left, 0))]  # best first: the budget goes to them first
            else:
                nxt = [nd for nd in cands if any(spec.children(s) for s in slots.get(nd, []))]
            if not nxt:
                break
            # ---- one draft pass for the whole next frontier, under the tree mask
            lg2, h2, tk, tv = self._tree_pass(c, nxt, tree.tokens, tree.parents, tree.depths, feat, anc, tk, tv)
            tree.draft_calls += 1
            for j, nd in enumerate(nxt):
                logits[nd], feat[nd] = lg2[j], h2[j]
            frontier = nxt
        tree.draft_calls += 1  # the catch-up pass that gave the root
        tree.q = torch.stack(q_rows) if q_rows else None
        tree.q_standardized = True  # rows of standardize() scattered into zeros (or mixed with a cache law): valid
        return tree

    def _cache_rows(self, context: list[int], tree: DraftTree, frontier: list[int]) -> dict[int, tuple[float, list[int]]]:
        """The cache model at the frontier: ``{frontier index: (λ_m, tokens that followed)}`` for the
        nodes whose context (``context``, then the node's draft path) ends with an m-token repeat of
        the committed text, λ_m > 0 (module docstring)."""
        w = self.cache_weights or ()
        out: dict[int, tuple[float, list[int]]] = {}
        for i, nd in enumerate(frontier):
            path: list[int] = []
            while nd != 0 and len(path) < CACHE_MAX_N:
                path.append(tree.tokens[nd])
                nd = tree.parents[nd]
            m, follow = self._cache.followers(context[-CACHE_MAX_N:] + path[::-1])
            lam = w[min(m, len(w)) - 1] if m else 0.0
            if lam > 0:
                out[i] = (lam, follow)
        return out

    def _tree_pass(self, c: int, nodes: list[int], tokens: list[int], parents: list[int], depths: list[int],
                   feat: dict[int, Tensor], anc: dict[int, list[int]], tk: Tensor, tv: Tensor
                   ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """ONE draft pass over ``nodes`` (a frontier) under the tree mask: each reads the committed KV
        entries, its ancestors' temporary entries and itself. Returns (logits ``[T, V_d]``, output
        features ``[T, H]``, the temporary KV grown by the T new entries)."""
        P, Tp, T = self._k.shape[2], tk.shape[2], len(nodes)
        tmask = torch.zeros(T, Tp + T, dtype=torch.bool)  # built on the host, moved once
        for j, nd in enumerate(nodes):
            par = parents[nd]
            tmask[j, anc[par]] = True
            tmask[j, Tp + j] = True
            anc[nd] = anc[par] + [Tp + j]
        mask = torch.cat([torch.ones(T, P, dtype=torch.bool, device=self.device), tmask.to(self.device)], dim=1)
        toks = torch.tensor([tokens[nd] for nd in nodes], dtype=torch.int64, device=self.device)
        fin = torch.stack([feat[parents[nd]] for nd in nodes])
        pos = torch.tensor([c - 2 + depths[nd] for nd in nodes], device=self.device)
        pk, pv = torch.cat([self._k, tk], 2), torch.cat([self._v, tv], 2)
        lg, h, k, v = self.head.step(toks, fin, pos, pk, pv, mask, fused=False)
        self.calls += 1
        return lg, h, torch.cat([tk, k], 2), torch.cat([tv, v], 2)

    def _tree_params(self, spec: TreeSpec) -> tuple[int, int, int]:
        """(children per expanded node, node budget, nodes expanded per depth) of a dynamic tree."""
        k_children = min(self.top_k or max(len(spec.children(p)) for p in ((),) + spec.paths),
                         spec.max_drafts_per_node())
        return k_children, self.total_tokens or spec.num_slots, self.width or k_children

    def _static_tree(self, spec: TreeSpec, sampling: SamplingConfig, context_len: int) -> StaticTreeDraft | None:
        """The static-cache tree builder for this proposal, or ``None`` when the tree is not one it
        builds (use_static_cache not asked for, temperature > 0, a chain, another law or construction,
        a context longer than the static cache)."""
        if (self._static_len is None or not sampling.greedy or spec.is_chain() or not self.dynamic
                or not self.rerank or spec.law != DraftLaw.GREEDY or context_len + CATCH_UP_WIDTHS[-1] > self._static_len):
            return None
        top_k, budget, width = self._tree_params(spec)
        top_k = min(top_k, self.head.draft_vocab_size)
        width = min(width, top_k)
        budget = min(budget, tree_candidates(spec.depth, top_k, width))
        key = (spec.depth, top_k, width, budget, self.stop_tokens, self.min_confidence)
        if self._static is None or self._static_key != key:
            self._static = StaticTreeDraft(self.head, self._target_ids, max_len=self._static_len, depth=spec.depth,
                                           top_k=top_k, width=width, budget=budget, stop_tokens=self.stop_tokens,
                                           min_confidence=self.min_confidence, cuda_graphs=self._static_graphs)
            self._static_key, self._send, self._sbase = key, 1, 1
        return self._static

    @torch.no_grad()
    def _draft_static(self, st: StaticTreeDraft, context: list[int], depth: int) -> DraftTree:
        """EAGLE-2's re-ranked tree from the static builder: the committed positions the static cache
        lacks are caught up (at least the last one, whose logits are the root's), then ONE call."""
        c = len(context)
        if c - 1 < max(self._fbase + 1, 1) or self._fend < c - 1:  # the target's features up to c − 2 are needed
            return DraftTree.root(context[-1])
        if self._sbase < self._fbase + 1:  # the features restart later (a gap): so does the cache
            self._sbase = self._send = self._fbase + 1
        start = max(min(self._send, c - 1), self._sbase)
        feats = self._feats[start - 1 - self._fbase: c - 1 - self._fbase]
        depth = min(depth, st.depth)
        keep, toks, pars, score = st.draft(context[start:c], feats, start, self._sbase, depth)
        self._send = c
        self.calls += depth  # the catch-up and depth − 1 expansion passes
        nodes = sorted(i + 1 for i in keep if score[i] > -math.inf)  # root = node 0
        return self._ranked_tree(context[-1], [context[-1]] + toks, [-1] + [p + 1 for p in pars],
                                 [0.0] + score, nodes, depth, q_device="cpu")

    def _ranked_tree(self, root: int, tokens: list[int], parents: list[int], score: list[float], keep: list[int],
                     draft_calls: int, q_device: Any) -> DraftTree:
        """The deterministic GREEDY-law tree of the kept ``keep`` nodes (increasing; closed under
        parents; siblings stored best first) of a candidate tree (node 0 the root)."""
        tree = DraftTree.root(root)
        tree.law = DraftLaw.GREEDY
        kids: dict[int, list[int]] = {}
        for nd in keep:  # node ids grow depth by depth and siblings are stored best first
            kids.setdefault(parents[nd], []).append(nd)
        new_id = {0: 0}
        rows: list[tuple[int, list[float]]] = []
        for nd in [0] + keep:
            ch = kids.get(nd)
            if not ch:
                continue
            for old, nid in zip(ch, tree.add_children(new_id[nd], [tokens[x] for x in ch])):
                new_id[old] = nid
            tree.q_row[new_id[nd]] = len(rows)
            rows.append((new_id[nd], [math.exp(score[x] - score[nd]) for x in ch]))
        if rows:
            tree.q = greedy_q(tree, rows, self.vocab_size, device=q_device)
            tree.q_standardized = True  # rows of strict_weights: distributions by construction
        tree.deterministic = True
        tree.draft_calls = draft_calls
        return tree

    @torch.no_grad()
    def _draft_reranked(self, context: list[int], root: tuple[Tensor, Tensor], depth: int, top_k: int,
                        budget: int, width: int) -> DraftTree:
        """EAGLE-2's dynamic draft tree with its final re-ranking (Li et al. 2024, EAGLE-2, Sec. 4.1
        "expansion" and 4.2 "re-ranking"), as a deterministic tree.

        Expansion: every expanded node gets the ``top_k`` tokens of the draft's distribution as
        children; of each depth's new nodes, the ``width`` with the highest cumulative draft
        log-probability (the path's confidence) are expanded next, in ONE draft pass under a tree
        mask — except nodes that can no longer make the final cut (``budget`` nodes already score
        higher: a descendant never scores above its ancestor). Re-ranking: the ``budget`` nodes of
        highest confidence are kept (ties to the earlier node, so a kept node's parent is kept).

        Nothing is sampled: the tree is a deterministic function of the context, handed over as a
        GREEDY-law tree with q supported on each node's children (:func:`~specot.drafting.base.greedy_q`);
        the ``greedy`` verifier then accepts child x with probability p(x) — lossless at every
        temperature (unlike pruning *sampled* children, which would change the law at a node).
        """
        c = len(context)
        tokens, parents, depths, score = [context[-1]], [-1], [0], [0.0]
        logits: dict[int, Tensor] = {0: root[0]}
        feat: dict[int, Tensor] = {0: root[1]}
        anc: dict[int, list[int]] = {0: []}
        tk, tv = self.head.empty_kv()
        frontier, passes = [0], 0
        gated = self.min_confidence is not None
        log_tau = math.log(self.min_confidence) if self.min_confidence is not None else 0.0
        k = min(top_k, self.head.draft_vocab_size)
        for d in range(depth):
            lg = torch.stack([logits[nd] for nd in frontier])  # [F, V_d]
            top = torch.log_softmax(lg.to(torch.float32), dim=-1).topk(k, dim=-1)  # sorted, best first
            lps, ids = top.values.tolist(), self._target_ids[top.indices].tolist()  # one host read each
            new: list[int] = []
            for i, nd in enumerate(frontier):
                for lp, t in zip(lps[i], ids[i]):
                    new.append(len(tokens))
                    tokens.append(int(t))
                    parents.append(nd)
                    depths.append(d + 1)
                    score.append(score[nd] + lp)
            if d + 1 >= depth:
                break
            # a node expands only if fewer than `budget` nodes score strictly higher (else no
            # descendant of it survives the re-ranking)
            cut = sorted(score[1:], reverse=True)[budget - 1] if len(score) - 1 >= budget else -math.inf
            cands = [nd for nd in new if tokens[nd] not in self.stop_tokens and score[nd] >= cut
                     and (not gated or score[nd] >= log_tau)]
            cands.sort(key=lambda nd: (-score[nd], nd))
            nxt = cands[:width]
            if not nxt:
                break
            lg2, h2, tk, tv = self._tree_pass(c, nxt, tokens, parents, depths, feat, anc, tk, tv)
            passes += 1
            for j, nd in enumerate(nxt):
                logits[nd], feat[nd] = lg2[j], h2[j]
            frontier = nxt
        # + the catch-up pass that gave the root
        return self._ranked_tree(context[-1], tokens, parents, score, rerank(score, budget), passes + 1, self.device)

