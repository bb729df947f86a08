"""A draft model on llama.cpp: the distilled draft (or any small Hugging Face ``LlamaForCausalLM``
sharing the target's tokenizer) converted to GGUF, and a drafter that runs it in its own llama.cpp
context.

**Conversion** (:func:`draft_gguf`), with the ``gguf`` package (the wheel of llama-cpp-python ships
no converter): the architecture keys of the ``llama`` GGUF layout, the tokenizer keys copied from the
target's GGUF (the draft shares its vocabulary, which is checked), and the tensors under llama.cpp's
names, in float32 (exact for the bfloat16 checkpoint) or float16. Query and key projections are
permuted from Hugging Face's rotate-half layout to GGUF's interleaved one, as llama.cpp's
``convert_hf_to_gguf.py`` does (``LlamaModel.permute``). The file is kept in specot's cache, keyed by
the checkpoint's and the target GGUF's hashes.

**Drafting** (:class:`LlamaCppDrafter`): chains of γ tokens, each drawn from the standardized draft
distribution q (the engine's sampling transform) with the engine's generator, one draft pass per
token; the tree carries q, so any verifier is exact with it (Leviathan et al. 2023, Algorithm 1).
At temperature 0 q is one-hot on the draft's argmax. The draft's KV cache follows the committed
context by the longest-common-prefix rule.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from safetensors.torch import load_file

from specot.drafting.base import DraftTree, Drafter
from specot.laws import DraftLaw, sample_drafts
from specot.models.embedded import embedded_draft_dir, embedded_gguf, model_cache_dir
from specot.sampling import SamplingConfig, standardize

from .target import LlamaCppTarget

__all__ = ["draft_gguf", "convert_llama_checkpoint", "LlamaCppDrafter", "load_draft"]


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
               n_threads: int | None = None, f16: bool = False) -> "LlamaCppDrafter":
    """A :class:`LlamaCppDrafter` over the (converted) draft checkpoint for ``target``, sharing its tokenizer."""
    path = draft_gguf(directory, target.path if directory is not None else None, f16=f16)
    model = LlamaCppTarget(path, tokenizer=target.tokenizer, name=f"{Path(path).stem} (llama.cpp)",
                           n_threads=n_threads or target.n_threads, n_ctx=target.max_context, max_leaves=1)
    return LlamaCppDrafter(model)


class LlamaCppDrafter(Drafter):
    """Draft chains from a small GGUF model in its own llama.cpp context (module docstring).

    Args:
        model: the draft model (a :class:`LlamaCppTarget`), sharing the target's vocabulary.

    Raises:
        TypeError: ``model`` is not a :class:`LlamaCppTarget`.
    """

    def __init__(self, model: LlamaCppTarget) -> None:
        super().__init__()
        if not isinstance(model, LlamaCppTarget):
            raise TypeError(f"LlamaCppDrafter needs a LlamaCppTarget, got {type(model).__name__}")
        self.model = model
        self.name = model.name

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    @property
    def device(self) -> torch.device:
        return torch.device("cpu")

    def reset(self) -> None:
        self.model.reset()

    def propose(self, context: Sequence[int], max_depth: int, sampling: SamplingConfig,
                generator: torch.Generator | None = None) -> DraftTree:
        """A chain of up to γ tokens (the schedule's, cut at ``max_depth``), q ``[γ, V]``; stops early
        after a stop token. Trees are not drafted: a tree shape is drafted as its first chain."""
        depth = self.depth_limit(max_depth)
        t0 = time.perf_counter()
        if depth <= 0:
            return DraftTree.root(int(context[-1]))
        logits = self.model.logits_after(context)  # [1, V]
        tokens: list[int] = []
        qs: list[torch.Tensor] = []
        for i in range(depth):
            q = standardize(logits, sampling)  # [1, V]
            tok = int(sample_drafts(q, 1, DraftLaw.IID, generator)[0, 0])
            qs.append(q)
            tokens.append(tok)
            if i + 1 == depth or tok in self.stop_tokens:
                break
            logits = self.model.forward([tok])  # [1, V]
        tree = DraftTree.chain(int(context[-1]), tokens, torch.cat(qs))  # q [γ, V]
        tree.draft_calls = len(tokens)
        tree.q_standardized = True
        self.calls += tree.draft_calls
        self.draft_time_s += time.perf_counter() - t0
        return tree
