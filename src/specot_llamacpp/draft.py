"""A draft model on llama.cpp: any GGUF file sharing the target's vocabulary, or the distilled draft
(or any small Hugging Face ``LlamaForCausalLM`` sharing the target's tokenizer) converted to GGUF, and
a drafter that runs it in its own llama.cpp context.

**Conversion** (:func:`draft_gguf`), with the ``gguf`` package (the wheel of llama-cpp-python ships
no converter): the architecture keys of the ``llama`` GGUF layout, the tokenizer keys copied from the
target's GGUF (the draft shares its vocabulary, which is checked), and the tensors under llama.cpp's
names, in float32 (exact for the bfloat16 checkpoint) or float16. Query and key projections are
permuted from Hugging Face's rotate-half layout to GGUF's interleaved one, as llama.cpp's
``convert_hf_to_gguf.py`` does (``LlamaModel.permute``). The file is kept in specot's cache, keyed by
the checkpoint's and the target GGUF's hashes.

**A GGUF draft model** (:func:`load_gguf_draft`; ``--draft PATH.gguf``): loaded as it is, its
tokenizer read from the file; its vocabulary must be the target's (identical token strings, logits no
wider than the target's padded vocabulary: :func:`specot.drafting.check_vocab_compatible`), else one
line suggests ``xvocab:PATH`` (drafting across vocabularies).

**Drafting** (:class:`LlamaCppDrafter`): the chains of every specot draft model
(:func:`specot.drafting.model.draft_chain`): each token drawn from the standardized draft
distribution q (the engine's sampling transform) with the engine's generator, one draft pass per
token; the tree carries q, so any verifier is exact with it (Leviathan et al. 2023, Algorithm 1);
at T = 0 the drafts are the draft's argmax (no q is built). With a pricing
(:mod:`specot.drafting.pricing`) the chain ends where the next node no longer pays for its draft
pass and its share of the target's wider pass; γ is then the most. **The draft's KV cache** follows
the committed context by the longest common prefix (``llama_memory_seq_rm`` cuts what was not
accepted): after a block in which j of k drafts were accepted, the next chain decodes only what the
draft has not seen — the bonus token (and the k-th draft when all k were accepted: it was drawn, not
fed) — then its new drafts. Accepted text is never decoded twice.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from safetensors.torch import load_file

from specot.drafting.model import ModelDrafter, check_vocab_compatible
from specot.drafting.pricing import PricedChains, priced_chains
from specot.models.embedded import embedded_draft_dir, embedded_gguf, model_cache_dir

from .target import LlamaCppTarget

__all__ = ["draft_gguf", "convert_llama_checkpoint", "LlamaCppDrafter", "load_draft", "load_gguf_draft"]


def _digest(paths: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
    return h.hexdigest()[:16]


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Hugging Face's rotate-half q/k rows to GGUF's interleaved RoPE layout (convert_hf_to_gguf.py)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _load_tensors(directory: Path) -> dict[str, np.ndarray]:
    """The checkpoint's tensors as float32 arrays (exact for bfloat16 and float16)."""
    return {k: v.float().numpy() for k, v in load_file(str(directory / "model.safetensors")).items()}


def _copy_tokenizer(writer: GGUFWriter, target_gguf: Path) -> int:
    """Copy every ``tokenizer.*`` key of the target GGUF; returns the number of tokens."""
    reader = GGUFReader(str(target_gguf))
    n_tokens = 0
    for name, fld in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = fld.types[0]
        sub = fld.types[-1] if vtype == GGUFValueType.ARRAY else None
        val = fld.contents()
        if name == "tokenizer.ggml.tokens":
            n_tokens = len(val)
        writer.add_key_value(name, val, vtype, sub_type=sub)
    return n_tokens


def convert_llama_checkpoint(directory: str | os.PathLike[str], target_gguf: str | os.PathLike[str],
                             out: str | os.PathLike[str], *, f16: bool = False) -> Path:
    """Write a Hugging Face ``LlamaForCausalLM`` checkpoint (``config.json`` + ``model.safetensors``)
    as a GGUF file ``out`` with the tokenizer of ``target_gguf`` (module docstring).

    Raises:
        FileNotFoundError: a missing file.
        ValueError: not a Llama checkpoint, or its vocabulary differs in size from the target's.
    """
    directory, target_gguf, out = Path(directory), Path(target_gguf), Path(out)
    cfg = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    if cfg.get("model_type") != "llama":
        raise ValueError(f"{directory} holds a {cfg.get('model_type')!r} model; only 'llama' checkpoints convert")
    t = _load_tensors(directory)
    H, L = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    nh, nkv = int(cfg["num_attention_heads"]), int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or H // nh)
    rope = cfg.get("rope_parameters") or {}
    theta = float(rope.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    w = GGUFWriter(str(tmp), arch="llama")
    w.add_name(directory.name)
    w.add_context_length(int(cfg.get("max_position_embeddings", 8192)))
    w.add_embedding_length(H)
    w.add_block_count(L)
    w.add_feed_forward_length(int(cfg["intermediate_size"]))
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-5)))
    w.add_file_type(1 if f16 else 0)
    n_tokens = _copy_tokenizer(w, target_gguf)
    vocab = int(cfg["vocab_size"])
    if n_tokens != vocab:
        raise ValueError(f"the draft has {vocab} tokens, the target's GGUF {n_tokens}; they must share a vocabulary")
    w.add_vocab_size(vocab)

    def put(name: str, a: np.ndarray, matrix: bool = True) -> None:
        a = np.ascontiguousarray(a, dtype=np.float16 if (f16 and matrix) else np.float32)
        w.add_tensor(name, a)

    put("token_embd.weight", t["model.embed_tokens.weight"])
    put("output_norm.weight", t["model.norm.weight"], matrix=False)
    if not cfg.get("tie_word_embeddings", False):
        put("output.weight", t["lm_head.weight"])
    for i in range(L):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", t[p + "input_layernorm.weight"], matrix=False)
        put(f"blk.{i}.attn_q.weight", _permute(t[p + "self_attn.q_proj.weight"], nh))
        put(f"blk.{i}.attn_k.weight", _permute(t[p + "self_attn.k_proj.weight"], nkv))
        put(f"blk.{i}.attn_v.weight", t[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", t[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_norm.weight", t[p + "post_attention_layernorm.weight"], matrix=False)
        put(f"blk.{i}.ffn_gate.weight", t[p + "mlp.gate_proj.weight"])
        put(f"blk.{i}.ffn_up.weight", t[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", t[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out)
    return out


def draft_gguf(directory: str | os.PathLike[str] | None = None, target_gguf: str | os.PathLike[str] | None = None,
               *, f16: bool = False) -> Path:
    """The GGUF file of a draft checkpoint (default: the shipped distilled draft, ``specot/data/draft``)
    with the tokenizer of ``target_gguf`` (default: the embedded target's), converted once into
    specot's cache (``draft-<name>-<hash16>[-f16].gguf``; a temporary directory when the cache is off)."""
    src = Path(directory) if directory is not None else embedded_draft_dir()
    if target_gguf is None:
        d, name = embedded_gguf()
        target_gguf = d / name
    tg = Path(target_gguf)
    key = _digest([src / "config.json", src / "model.safetensors", tg])
    root = model_cache_dir() or Path(os.environ.get("TMPDIR", "/tmp")) / "specot-gguf"
    out = root / "gguf" / f"draft-{src.name}-{key}{'-f16' if f16 else ''}.gguf"
    if not out.is_file():
        convert_llama_checkpoint(src, tg, out, f16=f16)
    return out


def load_draft(target: LlamaCppTarget, directory: str | os.PathLike[str] | None = None, *,
               n_threads: int | None = None, f16: bool = False, priced: bool = False) -> "LlamaCppDrafter":
    """A :class:`LlamaCppDrafter` over the (converted) draft checkpoint for ``target``, sharing its
    tokenizer: chains of γ, or (``priced``) priced where both models' costs are measured
    (:func:`specot.drafting.pricing.priced_chains`)."""
    path = draft_gguf(directory, target.path if directory is not None else None, f16=f16)
    model = LlamaCppTarget(path, tokenizer=target.tokenizer, name=f"{Path(path).stem} (llama.cpp)",
                           n_threads=n_threads or target.n_threads, n_ctx=target.max_context, max_leaves=1)
    return LlamaCppDrafter(model, pricing=priced_chains(target, model) if priced else None, width=target.vocab_size)


def load_gguf_draft(target: Any, path: str | os.PathLike[str], *, n_threads: int | None = None,
                    priced: bool = True) -> "LlamaCppDrafter":
    """A draft model from any GGUF file that shares ``target``'s vocabulary, in its own llama.cpp
    context (its tokenizer read from the file, :func:`specot_llamacpp.gguf_tokenizer`).

    Args:
        target: the target (any backend's), with ``tokenizer``, ``vocab_size``, ``max_context``.
        path: the draft's ``.gguf`` file.
        n_threads: llama.cpp threads of the draft (default: the target's, else every CPU).
        priced: price its chains where both models' costs are measured
            (:func:`specot.drafting.pricing.priced_chains`), else chains of γ.

    Raises:
        FileNotFoundError / ValueError / RuntimeError: a missing or unreadable file.
        ValueError: another vocabulary (one line suggesting ``xvocab:PATH``).
    """
    from .loading import gguf_tokenizer  # transformers' GGUF reader, only when a draft is loaded

    p = Path(path).expanduser()
    model = LlamaCppTarget(p, tokenizer=gguf_tokenizer(p), name=f"{p.stem} (llama.cpp)",
                           n_threads=n_threads or getattr(target, "n_threads", None),
                           n_ctx=int(target.max_context), max_leaves=1)
    try:
        check_vocab_compatible(target, model, source=str(path))
    except ValueError:
        model.close()
        raise
    return LlamaCppDrafter(model, pricing=priced_chains(target, model) if priced else None, width=target.vocab_size)


class LlamaCppDrafter(ModelDrafter):
    """Draft chains from a GGUF model sharing the target's vocabulary, in its own llama.cpp context
    (module docstring): :class:`~specot.drafting.ModelDrafter`'s chains (:func:`specot.drafting.model.draft_chain`,
    priced by ``pricing``) over a :class:`LlamaCppTarget`. Trees are not drafted: a tree shape is
    drafted as the chain of its depth.

    Args:
        model: the draft model (a :class:`LlamaCppTarget`), sharing the target's vocabulary.
        pricing: prices its chains (:class:`~specot.drafting.pricing.PricedChains`), or ``None``: chains of γ.
        width: the target's vocabulary (its q rows' width; default the draft's).

    Raises:
        TypeError: ``model`` is not a :class:`LlamaCppTarget`.
    """

    def __init__(self, model: LlamaCppTarget, *, pricing: PricedChains | None = None, width: int | None = None) -> None:
        if not isinstance(model, LlamaCppTarget):
            raise TypeError(f"LlamaCppDrafter needs a LlamaCppTarget, got {type(model).__name__}")
        super().__init__(model, pricing=pricing, width=width)

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")
