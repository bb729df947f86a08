"""The configuration of an EAGLE-3 head: the published parameter names, the target's feature layers
and the ``LlamaConfig`` a head is built from (EAGLE-3, Li et al. 2025, "EAGLE-3: Scaling up
Inference Acceleration of Large Language Models via Training-Time Test")."""

from __future__ import annotations

from typing import Any, Sequence

from transformers import LlamaConfig

__all__ = ["EAGLE3_KEYS", "default_eagle_layers", "eagle3_config", "config_layers", "llama_config"]

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


def default_eagle_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low / mid / high features for a target of ``num_layers`` decoder layers: the
    inputs of layers ``2, L//2, L−3`` (= transformers' ``hidden_states[i]``), ascending, clamped to
    ``[0, L]`` for tiny targets."""
    raw = (2, num_layers // 2, num_layers - 3)
    return tuple(sorted(min(max(i, 0), num_layers) for i in raw))


def llama_config(obj: dict[str, Any]) -> LlamaConfig:
    """A ``LlamaConfig`` of the flat dict ``obj`` (a head's ``config.json``)."""
    return LlamaConfig(**obj)


def config_layers(cfg: Any) -> tuple[int, ...] | None:
    """The target's feature layers a head's config names (``eagle_config.eagle_aux_hidden_state_layer_ids``,
    or the same key at the top level), or ``None`` when it names none."""
    ec = getattr(cfg, "eagle_config", None)
    ids = (ec or {}).get("eagle_aux_hidden_state_layer_ids") if isinstance(ec, dict) else None
    ids = ids if ids is not None else getattr(cfg, "eagle_aux_hidden_state_layer_ids", None)
    return tuple(int(i) for i in ids) if ids is not None else None


def eagle3_config(target_config: Any, *, draft_vocab_size: int | None = None, num_attention_heads: int | None = None,
                  num_key_value_heads: int | None = None, intermediate_size: int | None = None,
                  layers: Sequence[int] | None = None, num_layers: int = 1) -> LlamaConfig:
    """A ``LlamaConfig`` for an EAGLE-3 head on a target with ``target_config`` (a transformers
    config): the target's width, vocabulary, RoPE and norm settings, ``num_layers`` decoder layers
    (EAGLE-3: one), ``draft_vocab_size`` (default: the full vocabulary) and the feature layers
    (default :func:`default_eagle_layers`) under ``eagle_config.eagle_aux_hidden_state_layer_ids``.

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
    return llama_config(obj)
