"""The EAGLE-3 draft network (:class:`Eagle3Head`): one decoder layer (or a few) over the target's
own features, in the layout of the published EAGLE-3 checkpoints served by vLLM / SGLang.

* EAGLE (Li et al. 2024, "EAGLE: Speculative Sampling Requires Rethinking Feature Uncertainty"):
  draft at the *feature* level — the draft layer at position t reads the target's feature of
  position t−1 and the embedding of token t, and predicts token t+1; later draft steps feed the
  draft layer's own output feature back in.
* EAGLE-3 (Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language Models via
  Training-Time Test"): fuse low / mid / high target features (the inputs of decoder layers
  ``2, L//2, L−3``) with ``fc``; the decoder layer's attention reads ``[norm(embedding), norm(feature)]``
  (2H wide); the output head covers a reduced draft vocabulary of ``V_d`` tokens mapped to target ids
  by ``d2t`` (``target_id = draft_id + d2t[draft_id]``; FR-Spec, Zhao et al. 2025, also drafts over a
  frequency-ranked sub-vocabulary).

The layout::

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

Loading a checkpoint: :mod:`specot.drafting.eagle.checkpoint`; :meth:`Eagle3Head.save_pretrained`
writes the published layout.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor, nn
from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding

from ...models.device import sdpa_without_cudnn
from ...models.int8 import Int8Linear, quantize_linears_int8

__all__ = ["Eagle3Head"]


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
        A head pass on a CPU reads half the bytes of bfloat16; the shipped head asks for this on a
        CPU (``specot_int8_weights`` in its ``config.json``).
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
        """The input embedding ``[T, H]`` of ``tokens [T]``, in the head's dtype.

        Raises:
            RuntimeError: the head has no embedding of its own and none was attached.
        """
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
        written into at ``slots`` and ``mask`` is ``[T, S]`` (:class:`~specot.drafting.eagle.static_tree.StaticTreeDraft`)."""
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

