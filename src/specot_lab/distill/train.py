"""Train a small draft (a standard ``LlamaForCausalLM`` with the target's tokenizer) by distillation.

Loss at every labelled position j (predicting token ``j + 1``), with the target's stored top-k
probabilities ``p_1..p_k`` (ids ``i_1..i_k``), residual mass ``r = 1 − Σ p`` and the draft's
``q = softmax(logits)``:

* ``kd = − Σ_m p_m log q(i_m) − r log(1 − Σ_m q(i_m))`` — the cross-entropy H(p̄, q̄) of the two
  distributions coarsened to {the k tokens, everything else}; it equals ``KL(p̄ ‖ q̄) + H(p̄)`` and
  is the DistillSpec forward-KL objective restricted to what is stored (exact when r = 0);
* ``ce = − log q(x_{j+1})`` on the actual next token — the cross-entropy fallback (and the only
  term for positions without soft labels). For sampled responses x_{j+1} ~ p, so ce is an
  unbiased, noisier estimate of the same objective.

``loss = (1 − ce_weight)·kd + ce_weight·ce`` averaged over positions with weights (response
tokens 1, prompt tokens ``prompt_weight``). Reported during training: ``alpha_topk = Σ_m
min(p_m, q(i_m))`` — a lower bound on the single-draft acceptance ``1 − TV(p, q)`` at
temperature 1 — and ``greedy_agree`` = P(argmax q = argmax p) (the acceptance at temperature 0).

Initialisation: the draft's tied embedding is the target's embedding projected onto its top-``d``
principal directions (SVD), so the draft starts with the target's token geometry; the
transformer layers start random (seeded).

Runs are resumable: ``OUT/ckpt.pt`` holds model, optimizer, step and RNG state (written every
``ckpt_every`` steps, atomically); the data order depends only on the seed and the epoch.
"""

from __future__ import annotations

import json
import math
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from .data import iter_shards
from .files import load_torch_file, save_torch_file
from tqdm import tqdm

__all__ = ["DraftArch", "TrainConfig", "draft_config", "init_draft", "load_sequences", "make_batches",
           "distill_loss", "sampled_distill_loss", "train_draft", "export_draft", "evaluate_loss"]


@dataclass
class DraftArch:
    """Architecture of the draft (a ``LlamaConfig``; vocabulary, RoPE and special ids come from the target)."""

    hidden: int = 192
    layers: int = 4
    heads: int = 6
    kv_heads: int = 3
    intermediate: int = 768


@dataclass
class TrainConfig:
    """Training hyper-parameters (see module docstring)."""

    arch: DraftArch = field(default_factory=DraftArch)
    epochs: float = 2.0
    batch_tokens: int = 4096
    max_len: int = 640
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    ce_weight: float = 0.1
    prompt_weight: float = 0.5
    seed: int = 0
    ckpt_every: int = 50
    eval_every: int = 200
    threads: int = 0
    pca_init: bool = True
    negatives: int = 2048
    train_topk: int = 16
    val_sequences: int = 8


def draft_config(target_config: Any, arch: DraftArch) -> Any:
    """A ``LlamaConfig`` for the draft: ``arch`` sizes, the target's vocabulary, context, RoPE
    parameters and special token ids, tied input/output embeddings."""

    tc = target_config
    rope = getattr(tc, "rope_parameters", None) or {"rope_type": "default", "rope_theta": getattr(tc, "rope_theta", 10000.0)}
    return LlamaConfig(
        vocab_size=tc.vocab_size, hidden_size=arch.hidden, intermediate_size=arch.intermediate,
        num_hidden_layers=arch.layers, num_attention_heads=arch.heads, num_key_value_heads=arch.kv_heads,
        head_dim=arch.hidden // arch.heads, max_position_embeddings=tc.max_position_embeddings,
        rms_norm_eps=getattr(tc, "rms_norm_eps", 1e-5), rope_parameters=dict(rope), hidden_act="silu",
        tie_word_embeddings=True, bos_token_id=tc.bos_token_id, eos_token_id=tc.eos_token_id,
        pad_token_id=getattr(tc, "pad_token_id", None), attention_bias=False, mlp_bias=False,
    )


def init_draft(target_model: Any, arch: DraftArch, *, seed: int = 0, pca_init: bool = True) -> Any:
    """A fresh draft ``LlamaForCausalLM`` (float32), embedding initialised from the target's (PCA)."""

    torch.manual_seed(seed)
    cfg = draft_config(target_model.config, arch)
    model = LlamaForCausalLM(cfg)
    if pca_init:
        with torch.no_grad():
            E = target_model.get_input_embeddings().weight.detach().float()  # [V, D]
            evals, evecs = torch.linalg.eigh(E.T @ E)  # ascending
            top = evecs[:, -arch.hidden:].flip(-1)  # [D, d] principal directions
            model.get_input_embeddings().weight.copy_(E @ top)  # [V, d]
            model.model.norm.weight.fill_(0.5)  # milder initial logits (the PCA rows keep the target's norms)
    model.tie_weights()
    return model


# ----------------------------------------------------------------------------------- data
def load_sequences(*dirs: str | os.PathLike[str], max_len: int = 640) -> list[dict[str, Any]]:
    """All stored sequences of the shard directories, each cut to ``max_len`` tokens."""

    seqs = []
    for s in iter_shards(*dirs):
        if "topk_p" not in s:
            raise ValueError(f"the shards in {', '.join(map(str, dirs))} hold token ids without soft labels "
                             "(sampled with top_k = 0, as EAGLE data); sample them again with --top-k >= 1")
        if len(s["ids"]) < 2:
            continue
        if len(s["ids"]) > max_len:
            s = dict(s, ids=s["ids"][:max_len], topk_ids=s["topk_ids"][: max_len - 1], topk_p=s["topk_p"][: max_len - 1])
        seqs.append(s)
    return seqs


def make_batches(seqs: Sequence[dict[str, Any]], batch_tokens: int, seed: int) -> list[list[int]]:
    """Index batches of about ``batch_tokens`` padded tokens: sequences sorted by length (with a
    seeded jitter) and cut greedily, then the batch order shuffled with ``seed``."""
    rng = random.Random(seed)
    order = sorted(range(len(seqs)), key=lambda i: (len(seqs[i]["ids"]) + rng.random() * 8))
    batches, cur, longest = [], [], 0
    for i in order:
        n = len(seqs[i]["ids"])
        if cur and max(longest, n) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(seqs: Sequence[dict[str, Any]], pad: int, prompt_weight: float) -> dict[str, torch.Tensor]:
    """Right-padded tensors: ``input_ids [B, T]``, ``attention_mask``, labels ``[B, T−1]``
    (next token), soft labels ``topk_ids/topk_p [B, T−1, k]``, position weights ``[B, T−1]``."""
    B = len(seqs)
    T = max(len(s["ids"]) for s in seqs)
    k = seqs[0]["topk_ids"].shape[-1]
    ids = torch.full((B, T), pad, dtype=torch.int64)
    mask = torch.zeros((B, T), dtype=torch.int64)
    tid = torch.zeros((B, T - 1, k), dtype=torch.int64)
    tp = torch.zeros((B, T - 1, k), dtype=torch.float32)
    w = torch.zeros((B, T - 1), dtype=torch.float32)
    soft = torch.zeros((B, T - 1), dtype=torch.bool)
    for b, s in enumerate(seqs):
        L = len(s["ids"])
        ids[b, :L] = s["ids"].long()
        mask[b, :L] = 1
        if s.get("topk_p") is not None:
            tid[b, : L - 1] = s["topk_ids"].long()
            tp[b, : L - 1] = s["topk_p"].float()
            soft[b, : L - 1] = True
        n_prompt = int(s.get("n_prompt", 0))
        w[b, : L - 1] = 1.0
        if n_prompt > 1:
            w[b, : n_prompt - 1] = prompt_weight  # rows predicting prompt tokens 1..n_prompt-1
    return {"input_ids": ids, "attention_mask": mask, "labels": ids[:, 1:].clone(), "topk_ids": tid,
            "topk_p": tp, "weight": w, "soft": soft}


def distill_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor], ce_weight: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Loss of draft ``logits [B, T, V]`` (see module docstring); returns (loss, metrics)."""
    lg = logits[:, :-1]  # [B, T-1, V] (float32)
    lse = torch.logsumexp(lg, dim=-1)  # [B, T-1]; no [B, T, V] log-probability tensor is materialised
    l_k = lg.gather(-1, batch["topk_ids"])  # [B, T-1, k]
    l_y = lg.gather(-1, batch["labels"].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        argmax_is_top = lg.argmax(-1) == batch["topk_ids"][..., 0]
    return _loss_terms(lg, lse, l_k, l_y, argmax_is_top, batch, batch["topk_p"], ce_weight)


def _loss_terms(lg: torch.Tensor, lse: torch.Tensor, l_k: torch.Tensor, l_y: torch.Tensor, argmax_is_top: torch.Tensor,
                batch: dict[str, torch.Tensor], p: torch.Tensor, ce_weight: float) -> tuple[torch.Tensor, dict[str, float]]:
    w = batch["weight"]
    wsum = w.sum().clamp(min=1e-9)
    ce = lse - l_y  # [B, T-1]
    logq_k = l_k - lse.unsqueeze(-1)  # [B, T-1, k]
    q_k = logq_k.exp()
    r = (1.0 - p.sum(-1)).clamp(min=0.0)
    q_rest = (1.0 - q_k.sum(-1)).clamp(min=1e-6)
    kd = -(p * logq_k).sum(-1) - r * q_rest.log()
    soft = batch["soft"].float()
    per = soft * ((1 - ce_weight) * kd + ce_weight * ce) + (1 - soft) * ce
    loss = (per * w).sum() / wsum
    with torch.no_grad():
        resp = (w == 1.0).float() * soft
        rsum = resp.sum().clamp(min=1e-9)
        metrics = {"loss": float(loss), "kd": float((kd * w * soft).sum() / (w * soft).sum().clamp(min=1e-9)),
                   "ce": float((ce * w).sum() / wsum),
                   "alpha_topk": float((torch.minimum(p, q_k).sum(-1) * resp).sum() / rsum),
                   "greedy_agree": float((argmax_is_top.float() * resp).sum() / rsum), "positions": float(rsum)}
    return loss, metrics


def sampled_distill_loss(model: Any, batch: dict[str, torch.Tensor], ce_weight: float, *, negatives: int = 2048,
                         train_topk: int = 16, generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The loss of :func:`distill_loss` with the softmax normaliser estimated on a subset of the
    vocabulary (sampled softmax): exact over U = every token in the batch's top-``train_topk``
    labels and next tokens, plus ``negatives`` tokens drawn uniformly from the rest of the
    vocabulary, each weighted by |rest| / ``negatives``. Every vocabulary-wide tensor shrinks from
    V = 49152 columns to |U| + negatives (about 7k), which makes a CPU training step ~6x cheaper;
    evaluation always uses the exact softmax."""
    out = model.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False)
    h = out.last_hidden_state[:, :-1]  # [B, T-1, d]
    W = model.get_output_embeddings().weight  # [V, d]
    V = W.shape[0]
    tid = batch["topk_ids"][..., :train_topk]
    p = batch["topk_p"][..., :train_topk]
    U = torch.unique(torch.cat([tid.reshape(-1), batch["labels"].reshape(-1)]))
    lookup = torch.full((V,), -1, dtype=torch.int64)
    lookup[U] = torch.arange(len(U))
    rest = torch.nonzero(lookup < 0).squeeze(-1)
    cols = U
    logw = torch.zeros(len(U))
    if negatives > 0 and len(rest) > 0:
        neg = rest[torch.randint(0, len(rest), (negatives,), generator=generator)]
        cols = torch.cat([U, neg])
        logw = torch.cat([logw, torch.full((negatives,), math.log(len(rest) / negatives))])
    lg = h @ W[cols].T  # [B, T-1, C]
    lse = torch.logsumexp(lg + logw, dim=-1)
    l_k = lg.gather(-1, lookup[tid])
    l_y = lg.gather(-1, lookup[batch["labels"]].unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        top = lg[..., : len(U)].argmax(-1)  # argmax over U (the labelled tokens)
        argmax_is_top = U[top] == tid[..., 0]
    return _loss_terms(lg, lse, l_k, l_y, argmax_is_top, batch, p, ce_weight)


@torch.no_grad()
def evaluate_loss(model: Any, seqs: Sequence[dict[str, Any]], *, pad: int, batch_tokens: int = 4096,
                  ce_weight: float = 0.1) -> dict[str, float]:
    """Position-weighted mean of the training metrics over ``seqs`` (response positions for α)."""
    was = model.training
    model.eval()
    tot: dict[str, float] = {}
    npos = 0.0
    for idx in make_batches(seqs, batch_tokens, seed=0):
        b = collate([seqs[i] for i in idx], pad, 1.0)
        out = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], use_cache=False)
        _, m = distill_loss(out.logits, b, ce_weight)
        n = m.pop("positions")
        for key, v in m.items():
            tot[key] = tot.get(key, 0.0) + v * n
        npos += n
    model.train(was)
    return {k: v / max(npos, 1e-9) for k, v in tot.items()}


def _lr_at(step: int, total: int, cfg: TrainConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    prog = min((step - cfg.warmup) / max(total - cfg.warmup, 1), 1.0)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * prog)))


def train_draft(target_model: Any, data_dirs: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str],
                cfg: TrainConfig, *, val_dirs: Sequence[str | os.PathLike[str]] = (), progress: bool = True,
                max_steps: int | None = None) -> Any:
    """Distil a draft from the shards in ``data_dirs`` into ``out_dir`` (resumable); returns the
    trained draft model (float32). ``target_model`` gives the config and the embedding for the PCA
    initialisation (only at step 0). Metrics go to ``out_dir/log.jsonl``."""

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    seqs = load_sequences(*data_dirs, max_len=cfg.max_len)
    if not seqs:
        raise ValueError(f"no training sequences in {list(map(str, data_dirs))}")
    val = load_sequences(*val_dirs, max_len=cfg.max_len)[: cfg.val_sequences or None] if val_dirs else []
    pad = int(getattr(target_model.config, "pad_token_id", None) or 0)
    model = init_draft(target_model, cfg.arch, seed=cfg.seed, pca_init=cfg.pca_init)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))
    steps_per_epoch = len(make_batches(seqs, cfg.batch_tokens, cfg.seed))
    total = max(int(cfg.epochs * steps_per_epoch), 1)
    step = 0
    ckpt = out / "ckpt.pt"
    if ckpt.exists():
        state = load_torch_file(ckpt, "training checkpoint", keys=("model", "opt", "step", "rng"))
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        step = int(state["step"])
        torch.set_rng_state(state["rng"])
    (out / "train_config.json").write_text(json.dumps({**asdict(cfg), "sequences": len(seqs),
        "tokens": sum(len(s["ids"]) for s in seqs), "steps_per_epoch": steps_per_epoch, "total_steps": total,
        "data_dirs": [str(d) for d in data_dirs], "val_dirs": [str(d) for d in val_dirs],
        "params": sum(p.numel() for p in model.parameters())}, indent=2))
    model.train()
    logf = open(out / "log.jsonl", "a", encoding="utf-8")
    bar = tqdm(total=total, initial=step, desc="distilling draft", unit="step", disable=not progress, file=sys.stderr)
    epoch_batches: dict[int, list[list[int]]] = {}
    t_last, tok_since = time.perf_counter(), 0
    end = total if max_steps is None else min(total, max_steps)
    while step < end:
        epoch, pos = divmod(step, steps_per_epoch)
        if epoch not in epoch_batches:
            epoch_batches = {epoch: make_batches(seqs, cfg.batch_tokens, cfg.seed * 1000 + epoch)}
        idx = epoch_batches[epoch][pos]
        b = collate([seqs[i] for i in idx], pad, cfg.prompt_weight)
        lr = _lr_at(step, total, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        if cfg.negatives > 0:
            loss, m = sampled_distill_loss(model, b, cfg.ce_weight, negatives=cfg.negatives, train_topk=cfg.train_topk)
        else:
            out_ = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"], use_cache=False)
            loss, m = distill_loss(out_.logits, b, cfg.ce_weight)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        tok_since += int(b["attention_mask"].sum())
        rec = {"step": step, "epoch": epoch, "lr": lr, "grad_norm": float(gn), **m}
        if step % 10 == 0 or step == end:
            now = time.perf_counter()
            rec["tokens_per_s"] = tok_since / (now - t_last)
            t_last, tok_since = now, 0
        if val and (step % cfg.eval_every == 0 or step == end):
            rec["val"] = evaluate_loss(model, val, pad=pad, batch_tokens=cfg.batch_tokens, ce_weight=cfg.ce_weight)
            tqdm.write(f"step {step}: val {json.dumps({k: round(v, 4) for k, v in rec['val'].items()})}", file=sys.stderr)
        logf.write(json.dumps(rec) + "\n")
        logf.flush()
        bar.set_postfix(loss=f"{m['loss']:.3f}", a=f"{m['alpha_topk']:.3f}", g=f"{m['greedy_agree']:.3f}")
        bar.update()
        if step % cfg.ckpt_every == 0 or step == end:
            save_torch_file({"model": model.state_dict(), "opt": opt.state_dict(), "step": step,
                          "rng": torch.get_rng_state()}, ckpt)
    bar.close()
    logf.close()
    model.eval()
    return model


def export_draft(model: Any, out_dir: str | os.PathLike[str], *, tokenizer: Any = None,
                 dtype: torch.dtype = torch.bfloat16, meta: dict[str, Any] | None = None) -> Path:
    """Save the draft as a Hugging Face checkpoint (``config.json``, ``model.safetensors``,
    ``generation_config.json``, the tokenizer when given), weights in ``dtype`` (bf16 halves the size;
    loading upcasts to the requested dtype). ``meta`` goes to ``specot_draft.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    m = model.to(dtype)
    m.config.dtype = str(dtype).replace("torch.", "")
    m.save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    if meta is not None:
        (out / "specot_draft.json").write_text(json.dumps(meta, indent=2))
    return out
