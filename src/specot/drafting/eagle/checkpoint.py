"""Loading EAGLE-3 heads: the published layout (EAGLE-3's own releases, served by vLLM / SGLang) and
the ``speculators`` layout that vLLM also serves.

* **EAGLE-3's layout**: ``config.json`` is a ``LlamaConfig`` with ``draft_vocab_size``, optionally
  ``target_hidden_size`` and ``eagle_config.eagle_aux_hidden_state_layer_ids``; weights in
  safetensors or EAGLE's ``pytorch_model.bin`` under the names of :data:`~.config.EAGLE3_KEYS`
  (:mod:`specot.drafting.eagle.head` draws the layout).
* **The speculators layout**: ``config.json`` with ``speculators_model_type: "eagle3"`` and the
  decoder layer's ``LlamaConfig`` under ``transformer_layer_config``; ``layers.0.*`` for
  ``midlayer.*``; where a head has them, ``fc.bias``, ``input_norm.weight`` before ``fc`` and
  Qwen3's ``self_attn.q_norm`` / ``k_norm``.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Sequence

import torch
from huggingface_hub import snapshot_download
from safetensors.torch import load_file
from torch import Tensor, nn
from transformers.initialization import no_init_weights

from .config import config_layers, eagle3_config, llama_config
from .head import Eagle3Head

__all__ = ["load_head", "random_head"]


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
    """The checkpoint directory of ``path``: a directory as it is, a hub id (``owner/name``, not a
    local path) as its cached or downloaded snapshot."""
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



def _read_checkpoint(d: Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A checkpoint's flat config dict and its tensors under the published names (``model.``
    prefixes dropped; vLLM's ``layers.0.*`` read as ``midlayer.*``)."""
    cfg_file = d / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"no config.json in EAGLE checkpoint {d}")
    obj = _flat_eagle3_config(json.loads(cfg_file.read_text(encoding="utf-8")), d)
    state = {k.removeprefix("model."): v for k, v in _read_state(d).items()}
    if not any(k.startswith("midlayer.") for k in state):  # vLLM's name for it: layers.0
        state = {("midlayer." + k.removeprefix("layers.0.")) if k.startswith("layers.0.") else k: v
                 for k, v in state.items()}
    return obj, state


def _build_head(d: Path, obj: dict[str, Any], state: dict[str, Tensor]) -> Eagle3Head:
    """The (uninitialized) head the config and the weights describe: its depth, draft vocabulary,
    fused features and optional parts come from the weights."""
    cfg = llama_config({k: v for k, v in obj.items() if k not in ("architectures", "model_type")})
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
    with no_init_weights():  # every weight comes from the checkpoint (checked by the caller): no random init (40 ms)
        return Eagle3Head(cfg, num_features=k_in // Ht, own_embedding="embed_tokens.weight" in state,
                          fc_bias="fc.bias" in state, qk_norm="midlayer.self_attn.q_norm.weight" in state,
                          input_norm="input_norm.weight" in state)


def _vocab_maps(d: Path, head: Eagle3Head, state: dict[str, Tensor]) -> None:
    """``d2t`` / ``t2d`` in ``state``, completed where a checkpoint leaves them out (the full
    vocabulary: ``d2t`` zeros; ``t2d`` from ``d2t``), in their dtypes (in place)."""
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


def load_head(path: str | os.PathLike[str], dtype: torch.dtype) -> tuple[Eagle3Head, dict[str, Any], Path]:
    """The EAGLE-3 head at ``path`` (a directory, or a hub id ``owner/name`` whose snapshot is
    cached) in ``dtype`` on the CPU, in either layout (module docstring). A deeper head's later
    decoder layers are ``layers.{i}.*`` (i >= 1); the depth comes from the weights, not from
    ``num_hidden_layers``. Returns (the head, the flat config dict with any ``specot_*`` settings,
    the directory).

    Raises:
        FileNotFoundError: no checkpoint there.
        ValueError: missing weights, wrong shapes, or a ``speculators`` checkpoint of another
            algorithm than EAGLE-3 or with another layer type.
    """
    d = _resolve_dir(path)
    obj, state = _read_checkpoint(d)
    head = _build_head(d, obj, state)
    _vocab_maps(d, head, state)
    expected = head.checkpoint_state()
    missing = sorted(set(expected) - set(state))
    if missing:
        raise ValueError(f"EAGLE-3 checkpoint {d} lacks {missing}")
    extra = sorted(set(state) - set(expected))
    if extra:
        warnings.warn(f"EAGLE-3 checkpoint {d}: ignoring unexpected weights {extra[:6]}", stacklevel=3)
    for k, v in expected.items():
        if tuple(state[k].shape) != tuple(v.shape):
            raise ValueError(f"EAGLE-3 checkpoint {d}: {k} has shape {tuple(state[k].shape)}, the config "
                             f"gives {tuple(v.shape)}")
    head.load_state_dict({k: state[k] for k in expected}, strict=False)
    return head.to(dtype=dtype), obj, d


def random_head(target_config: Any, vocab_size: int, dtype: torch.dtype, *,
                draft_vocab: Sequence[int] | int | None = None, seed: int = 0, layers: Sequence[int] | None = None,
                scale: float = 1.0, num_layers: int = 1) -> Eagle3Head:
    """An untrained head (tests, training from scratch) for a target with ``target_config`` and
    ``vocab_size`` tokens, in ``dtype``: ``draft_vocab`` is the list of target ids of the draft
    vocabulary, or its size (the first ``V_d`` ids), or ``None`` (the full vocabulary); weights
    normal with std 0.1 (seeded by ``seed``), ``lm_head`` multiplied by ``scale`` (sharper draft
    distributions); ``num_layers`` decoder layers (EAGLE-3: 1)."""
    if draft_vocab is None:
        ids = list(range(vocab_size))
    elif isinstance(draft_vocab, int):
        ids = list(range(draft_vocab))
    else:
        ids = [int(t) for t in draft_vocab]
    cfg = eagle3_config(target_config, draft_vocab_size=len(ids), layers=layers, num_layers=num_layers)
    torch.manual_seed(seed)
    head = Eagle3Head(cfg, num_features=len(config_layers(cfg) or ()))
    for m in head.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02 * 5)
    with torch.no_grad():
        head.lm_head.weight.mul_(scale)
    head.set_draft_vocab(ids)
    return head.to(dtype=dtype)
