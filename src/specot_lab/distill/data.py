"""Training data for a distilled draft: the target's own samples (with its soft next-token
distributions) for the corpus's prompts (:mod:`specot_lab.corpus`), stored in resumable shards.

Samples (:func:`generate_shards`): every prompt is chat-templated (the target's chat template),
prompts are grouped into length-sorted batches with LEFT padding and attention masks, and the
target samples a response at temperature 1 with its KV cache, until EOS or ``max_new_tokens``.
For every position of prompt and response the shard keeps the target's top-``k`` next-token
probabilities (the soft label; the rest of the mass is ``1 − Σ top-k``), so training never runs
the target again. With ``top_k = 0`` it keeps the token ids alone: an EAGLE head's training runs
the target again anyway (it needs the target's features), and without labels the prefill computes
the last position's logits only. Text mode (:func:`teacher_force_shards`) stores the same labels for raw text
(teacher forcing: one forward pass per batch, no sampling).

A shard is one ``torch.save``'d dict ``{"seqs": [{"ids", "n_prompt", "topk_ids", "topk_p",
"kind"}...], "meta": {...}}`` (no ``topk_*`` with ``top_k = 0``) named ``shard_00000.pt``...; a finished shard is never redone, so an
interrupted run resumes where it stopped. Shards are read with ``weights_only=True``
(:mod:`specot_lab.distill.files`): a shard that holds anything but tensors and plain containers is
refused, unrun.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch import Tensor
from transformers import DynamicCache
from tqdm import tqdm

from specot._validation import check_count, check_positive_number
from specot.engine import make_generator
from specot.models.device import sdpa_without_cudnn
from specot.sampling import sample_categorical

from .files import load_torch_file, save_torch_file

__all__ = ["generate_shards", "teacher_force_shards", "iter_shards", "shard_stats", "SampleConfig", "sample_batch",
           "label_batch", "right_padded"]

PREFILL_TOPK_ROWS = 8  # prompts whose prefill logits are soft-maxed at once in sample_batch (memory)


@dataclass(frozen=True)
class SampleConfig:
    """How :func:`generate_shards` samples the target.

    Attributes:
        batch_size: prompts per batch (left-padded).
        max_new_tokens: response cap.
        temperature: sampling temperature of the responses (1 = the target's own distribution).
        top_k: probabilities kept per position as the soft label; 0: none, the token ids alone
            (what EAGLE training reads: it runs the target itself).
        seed: base seed; batch ``i`` uses ``seed + i`` (so resumption reproduces the same samples).
        max_prompt_tokens: prompts longer than this (chat-templated) are skipped.
    """

    batch_size: int = 48
    max_new_tokens: int = 160
    temperature: float = 1.0
    top_k: int = 32
    seed: int = 0
    max_prompt_tokens: int = 384

    def __post_init__(self) -> None:
        for name, flag in (("batch_size", "--batch-size"), ("max_new_tokens", "--max-new-tokens"),
                           ("max_prompt_tokens", None)):
            check_count(getattr(self, name), name, flag)
        check_count(self.top_k, "top_k", "--top-k", minimum=0)
        check_positive_number(self.temperature, "temperature", "--temperature", allow_zero=True)


def _topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-``k`` softmax probabilities (float16) and ids (int32) of ``logits [..., V]`` at T = 1."""
    probs = torch.softmax(logits.float(), dim=-1)
    p, i = torch.topk(probs, k, dim=-1)
    return p.to(torch.float16), i.to(torch.int32)


def right_padded(seqs: Sequence[Sequence[int]], pad: int) -> tuple[Tensor, Tensor]:
    """Token sequences as one right-padded batch: ids ``[B, L]`` (``pad`` after each sequence) and
    the attention mask ``[B, L]`` (1 on real tokens), int64 on the CPU; ``L`` the longest length."""
    B, L = len(seqs), max(len(s) for s in seqs)
    ids = torch.full((B, L), int(pad), dtype=torch.int64)
    mask = torch.zeros((B, L), dtype=torch.int64)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.as_tensor(list(s), dtype=torch.int64)
        mask[b, : len(s)] = 1
    return ids, mask


def _model_and_pad(target: Any) -> tuple[Any, int]:
    model = target.model if hasattr(target, "model") else target
    tok = getattr(target, "tokenizer", None)
    pad = getattr(tok, "pad_token_id", None) if tok is not None else None
    if pad is None:
        pad = getattr(model.config, "pad_token_id", None)
    if pad is None:
        eos = getattr(model.config, "eos_token_id", 0)
        pad = eos[0] if isinstance(eos, (list, tuple)) else (eos or 0)
    return model, int(pad)


@torch.inference_mode()
def sample_batch(target: Any, prompts: Sequence[Sequence[int]], cfg: SampleConfig, *,
                 eos_ids: set[int] | None = None, generator: torch.Generator | None = None) -> list[dict[str, Any]]:
    """Sample one response per prompt (token ids) from ``target`` in ONE left-padded batch.

    Args:
        target: a :class:`specot.models.CausalLM` (or a bare HF causal LM).
        prompts: token ids per prompt.
        eos_ids: tokens that end a response (default: the target's EOS ids).

    Returns:
        one dict per prompt: ``ids`` (int32 ``[L]``, prompt + response, EOS kept), ``n_prompt``,
        ``topk_ids`` (int32 ``[L − 1, k]``) and ``topk_p`` (float16 ``[L − 1, k]``): row j is the
        target's distribution of token ``j + 1`` given ``ids[: j + 1]`` (both left out when
        ``cfg.top_k`` is 0); ``kind = "sample"``.

    Each response token is drawn by :func:`specot.sampling.sample_categorical` (inverse CDF) from
    the softmax at ``cfg.temperature``: exact, and cheaper on a CPU than ``torch.multinomial``,
    which took 36 ms per step for 48 rows of 49 152 tokens on a 2-core machine (docs/results.md,
    "Component costs").
    """

    model, pad = _model_and_pad(target)
    if eos_ids is None:
        eos_ids = set(getattr(target, "eos_token_ids", set())) or {pad}
    dev = next(model.parameters()).device
    vocab = int(getattr(target, "vocab_size", 0) or model.config.vocab_size)
    B = len(prompts)
    T = max(len(p) for p in prompts)
    ids = torch.full((B, T), pad, dtype=torch.int64)
    mask = torch.zeros((B, T), dtype=torch.int64)
    for b, p in enumerate(prompts):
        ids[b, T - len(p):] = torch.as_tensor(list(p), dtype=torch.int64)
        mask[b, T - len(p):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    labels = cfg.top_k > 0
    cache = DynamicCache(config=model.config)
    with sdpa_without_cudnn(dev):  # every decoding step is a new key length: cuDNN attention re-plans each
        out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), position_ids=pos.to(dev),
                    past_key_values=cache, use_cache=True, **({} if labels else {"logits_to_keep": 1}))
    logits = out.logits[:, :, :vocab]  # [B, T, V] in the model's dtype ([B, 1, V] without labels)
    del out
    seq_tp: list[list[Tensor]] = [[] for _ in range(B)]
    seq_ti: list[list[Tensor]] = [[] for _ in range(B)]
    if labels:
        # top-k a few rows at a time: a float32 copy of all [B, T, V] logits is 19 GB for 160 prompts
        # of 600 tokens, and four sampling processes on one H100 ran out of memory
        parts = [_topk(logits[b0:b0 + PREFILL_TOPK_ROWS], cfg.top_k) for b0 in range(0, B, PREFILL_TOPK_ROWS)]
        tp, ti = torch.cat([t for t, _ in parts]), torch.cat([i for _, i in parts])  # [B, T, k]
        del parts
        seq_tp = [[tp[b, T - len(p):]] for b, p in enumerate(prompts)]  # rows for positions of the prompt
        seq_ti = [[ti[b, T - len(p):]] for b, p in enumerate(prompts)]
    resp: list[list[int]] = [[] for _ in range(B)]
    last = logits[:, -1].float()  # [B, V]
    del logits
    alive = list(range(B))  # original row of each live batch row
    cur_pos = pos[:, -1].clone()
    for _step in range(cfg.max_new_tokens):
        if cfg.temperature == 0:
            nxt = last.argmax(-1)
        else:
            probs = torch.softmax(last / cfg.temperature, dim=-1)
            nxt = sample_categorical(probs, generator)  # [B']
        keep_rows = []
        nxt_ids = nxt.tolist()  # one device sync per step, not one per row
        for j, b in enumerate(alive):
            tok = nxt_ids[j]
            resp[b].append(tok)
            if tok not in eos_ids and len(resp[b]) < cfg.max_new_tokens:
                keep_rows.append(j)
        if not keep_rows:
            break
        if len(keep_rows) < len(alive):
            sel = torch.tensor(keep_rows, dtype=torch.int64)
            cache.batch_select_indices(sel.to(dev))
            mask = mask[sel]
            cur_pos = cur_pos[sel]
            nxt = nxt[sel]
            alive = [alive[j] for j in keep_rows]
        mask = torch.cat([mask, torch.ones(len(alive), 1, dtype=mask.dtype)], dim=1)
        cur_pos = cur_pos + 1
        with sdpa_without_cudnn(dev):
            out = model(input_ids=nxt.view(-1, 1).to(dev), attention_mask=mask.to(dev),
                        position_ids=cur_pos.view(-1, 1).to(dev), past_key_values=cache, use_cache=True)
        last = out.logits[:, -1, :vocab].float()  # [B', V]
        if labels:
            tp1, ti1 = _topk(last, cfg.top_k)
            for j, b in enumerate(alive):
                seq_tp[b].append(tp1[j:j + 1])
                seq_ti[b].append(ti1[j:j + 1])
    seqs = []
    for b, p in enumerate(prompts):
        full = list(p) + resp[b]
        seq: dict[str, Any] = {"ids": torch.tensor(full, dtype=torch.int32), "n_prompt": len(p), "kind": "sample"}
        if labels:
            seq["topk_ids"] = torch.cat(seq_ti[b])[: len(full) - 1].to("cpu", copy=True)
            seq["topk_p"] = torch.cat(seq_tp[b])[: len(full) - 1].to("cpu", copy=True)
        seqs.append(seq)
    return seqs


@torch.inference_mode()
def label_batch(target: Any, texts: Sequence[Sequence[int]], top_k: int = 32) -> list[dict[str, Any]]:
    """Teacher forcing: the target's top-``k`` soft labels for every position of each token sequence
    (one right-padded forward pass); ``n_prompt = 0``, ``kind = "text"``."""
    model, pad = _model_and_pad(target)
    dev = next(model.parameters()).device
    vocab = int(getattr(target, "vocab_size", 0) or model.config.vocab_size)
    ids, mask = right_padded(texts, pad)
    with sdpa_without_cudnn(dev):
        out = model(input_ids=ids.to(dev), attention_mask=mask.to(dev), use_cache=False)
    tp, ti = _topk(out.logits[:, :, :vocab], top_k)
    return [{"ids": torch.tensor(list(t), dtype=torch.int32), "n_prompt": 0, "topk_ids": ti[b, : len(t) - 1].clone(),
             "topk_p": tp[b, : len(t) - 1].clone(), "kind": "text"} for b, t in enumerate(texts)]


def _shard(path: Path) -> list[dict[str, Any]]:
    """The sequences of the shard at ``path``, read without running code (:func:`load_torch_file`).

    Raises:
        ValueError: the file is not a shard specot wrote (one line naming it).
    """
    seqs = load_torch_file(path, "data shard", keys=("seqs",))["seqs"]
    if not isinstance(seqs, list) or not all(isinstance(s, dict) and isinstance(s.get("ids"), torch.Tensor)
                                             and isinstance(s.get("n_prompt", 0), int) for s in seqs):
        raise ValueError(f"data shard {str(path)!r} does not hold sequences of token ids; sample it again with "
                         "specot distill data")
    return seqs


def _batches_by_length(items: list[tuple[int, list[int]]], batch_size: int, window: int = 8) -> list[list[tuple[int, list[int]]]]:
    """Cut ``items`` (already shuffled) into windows of ``window`` batches and sort each window by
    length, so a batch holds prompts of similar length (less padding) while staying mixed."""
    batches = []
    span = batch_size * window
    for s in range(0, len(items), span):
        chunk = sorted(items[s:s + span], key=lambda it: len(it[1]))
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    return batches


def generate_shards(target: Any, prompts: Sequence[str], out_dir: str | os.PathLike[str], cfg: SampleConfig, *,
                    max_tokens: int | None = None, chat: bool | None = None, progress: bool = True,
                    log: Any = None) -> dict[str, Any]:
    """Sample the target on ``prompts`` into ``out_dir/shard_*.pt`` (resumable; see module docstring).

    Args:
        target: a :class:`specot.models.CausalLM` with a tokenizer.
        prompts: prompt texts (chat-templated with the target's template unless ``chat=False``).
        max_tokens: stop once the shards hold this many tokens in total (prompt + response).

    Returns:
        :func:`shard_stats` of ``out_dir`` after the run.
    """

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    encoded = []
    for i, p in enumerate(prompts):
        ids = target.encode_prompt(p, chat=chat)
        if len(ids) <= cfg.max_prompt_tokens:
            encoded.append((i, ids))
    batches = _batches_by_length(encoded, cfg.batch_size)
    (out / "meta.json").write_text(json.dumps({
        "prompts": len(prompts), "kept": len(encoded), "batches": len(batches), "config": cfg.__dict__,
        "target": getattr(target, "name", "?")}, indent=2))
    stats = shard_stats(out)
    done_tokens = stats["tokens"]
    bar = tqdm(total=max_tokens or None, initial=done_tokens, unit="tok", desc="sampling target",
               disable=not progress, file=sys.stderr, smoothing=0.05)
    eos = set(getattr(target, "eos_token_ids", set()))
    for bi, batch in enumerate(batches):
        if max_tokens and done_tokens >= max_tokens:
            break
        path = out / f"shard_{bi:05d}.pt"
        if path.exists():
            continue
        t0 = time.perf_counter()
        gen = make_generator(cfg.seed + bi, getattr(target, "device", "cpu"))  # on the target's device (multinomial needs it there)
        seqs = sample_batch(target, [ids for _, ids in batch], cfg, eos_ids=eos or None, generator=gen)
        for s, (pi, _) in zip(seqs, batch):
            s["prompt_index"] = pi
        save_torch_file({"seqs": seqs, "meta": {"batch": bi, "seed": cfg.seed + bi, "time_s": time.perf_counter() - t0}}, path)
        n = sum(len(s["ids"]) for s in seqs)
        resp = sum(len(s["ids"]) - s["n_prompt"] for s in seqs)
        done_tokens += n
        bar.update(n)
        if log is not None:
            log(f"shard {bi}: {len(seqs)} seqs, {n} tokens ({resp} sampled) in {time.perf_counter() - t0:.1f} s")
    bar.close()
    return shard_stats(out)


def teacher_force_shards(target: Any, texts: Sequence[str], out_dir: str | os.PathLike[str], *, seq_len: int = 256,
                         batch_size: int = 16, top_k: int = 32, progress: bool = True,
                         max_tokens: int | None = None) -> dict[str, Any]:
    """Soft labels of the target on raw ``texts`` (cut into ``seq_len``-token pieces) into
    ``out_dir/shard_*.pt`` (resumable; the first ``max_tokens`` tokens of the pieces when given)."""

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pieces: list[list[int]] = []
    for t in texts:
        ids = [int(i) for i in target.tokenizer(t)["input_ids"]]
        pieces.extend(ids[i:i + seq_len] for i in range(0, len(ids), seq_len) if len(ids[i:i + seq_len]) >= 2)
    if max_tokens is not None:
        total, cut = 0, 0
        while cut < len(pieces) and total < max_tokens:
            total += len(pieces[cut])
            cut += 1
        pieces = pieces[:cut]
    batches = [pieces[i:i + batch_size] for i in range(0, len(pieces), batch_size)]
    bar = tqdm(total=sum(len(p) for p in pieces), unit="tok", desc="teacher forcing", disable=not progress, file=sys.stderr)
    for bi, batch in enumerate(batches):
        path = out / f"shard_{bi:05d}.pt"
        if not path.exists():
            save_torch_file({"seqs": label_batch(target, batch, top_k), "meta": {"batch": bi}}, path)
        bar.update(sum(len(p) for p in batch))
    bar.close()
    return shard_stats(out)


def iter_shards(*dirs: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every stored sequence of the shards in ``dirs`` (in shard order)."""
    for d in dirs:
        for path in sorted(Path(d).glob("shard_*.pt")):
            yield from _shard(path)


def shard_stats(*dirs: str | os.PathLike[str]) -> dict[str, Any]:
    """Sequence and token counts of the shards in ``dirs`` (sampled = response tokens), and the mean
    top-k mass of the stored labels (``None`` when no shard holds labels)."""
    n_seq = tokens = sampled = shards = labelled = 0
    mass = 0.0
    for d in dirs:
        for path in sorted(Path(d).glob("shard_*.pt")):
            shards += 1
            for s in _shard(path):
                n_seq += 1
                tokens += len(s["ids"])
                sampled += len(s["ids"]) - s["n_prompt"]
                if "topk_p" in s:
                    labelled += len(s["ids"]) - 1
                    mass += float(s["topk_p"].float().sum(-1).sum())
    return {"shards": shards, "sequences": n_seq, "tokens": tokens, "sampled_tokens": sampled,
            "topk_mass": mass / labelled if labelled else None}
