"""Train an EAGLE-3 head on a target (``specot distill eagle``): a skeleton of the pipeline.

1. **Draft vocabulary** (EAGLE-3 / FR-Spec): the ``V_d`` most frequent target tokens of the training
   text (:func:`frequent_vocab`), in id order → ``d2t``/``t2d``.
2. **Teacher-forced features** (:func:`target_features`): one no-grad target pass per chunk of
   text gives the fused features of the head's layers, the target's next-token distribution
   (token loss) and its last hidden state (feature regression).
3. **Training-time test** (EAGLE-3, Li et al. 2025 §3.2): the head is unrolled ``ttt_steps``
   times. Step 0 reads the target's features; step ``s`` reads, at entry ``e``, the head's own
   output of step ``s − 1`` at entry ``e − 1`` — what it sees when the previous token was itself
   drafted — and attends to the step-0 keys up to entry ``e − s`` plus its own "diagonal" keys of
   steps ``1..s`` (:func:`ttt_loss`). Each step adds the forward KL from the target's distribution
   (restricted to the draft vocabulary and renormalized) to the draft's (``token_loss="tvd"``: their
   total variation instead, one minus the acceptance rate at T = 1), and (``feat_weight``) a
   smooth-L1 regression of the normed output feature onto the target's last hidden state
   (EAGLE-1's feature loss).
4. **Resumable**: ``out/ckpt.pt`` (head, optimizer, step) every ``save_every`` steps, metrics in
   ``out/log.jsonl``, progress on a tqdm bar; the finished head is written in the published
   layout (:meth:`~specot.drafting.Eagle3Head.save_pretrained`) to ``out/head``.

Training a useful head needs a GPU and a large corpus (EAGLE-3 trains on ShareGPT/UltraChat for
hours); on a CPU this runs for smoke tests and tiny targets.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from specot.drafting.eagle import Eagle3Head, EagleDrafter, _config_layers, eagle3_config
from specot._validation import check_count, check_positive_number
from specot.models.device import sdpa_without_cudnn
from tqdm import tqdm

from .data import right_padded
from .files import load_torch_file, save_torch_file

__all__ = ["EagleTrainConfig", "TOKEN_LOSSES", "frequent_vocab", "grow_draft_vocab", "target_features", "target_features_batch",
           "answer_positions",
           "ttt_loss", "ttt_loss_batch", "train_eagle", "chunk_token_ids", "epoch_batches"]


#: The token losses of :class:`EagleTrainConfig` (``token_loss``); the training CLIs offer exactly these.
TOKEN_LOSSES = ("fkl", "tvd")


@dataclass(frozen=True)
class EagleTrainConfig:
    """Hyper-parameters of :func:`train_eagle`."""

    draft_vocab_size: int | None = None  # None: the full target vocabulary
    layers: tuple[int, ...] | None = None  # None: EAGLE-3's default (2, L//2, L−3)
    ttt_steps: int = 3
    feat_weight: float = 0.1
    # The token loss between the target's law p (on the draft vocabulary, renormalized) and the
    # head's q: "fkl" = KL(p || q) (EAGLE), or "tvd" = TV(p, q) = 1 − Σ min(p, q), which is one minus
    # the acceptance rate of speculative sampling at temperature 1 (Leviathan et al. 2023, Sec. 3):
    # DistillSpec's (Zhou et al., ICLR 2024) direct objective for α (docs/distillation.md, "Head variants":
    # it did not beat KL).
    token_loss: str = "fkl"
    step_decay: float = 0.8  # weight of unroll step s: step_decay**s
    lr: float = 1e-4
    warmup: int = 20
    steps: int = 1000
    max_len: int = 512
    seed: int = 0
    save_every: int = 200
    # Start the head's output layer and final norm from the target's rows of the draft vocabulary
    # (the head begins as "the target's head over a predicted feature"). Off by default: tried once
    # (docs/distillation.md, "Head variants"), it did not converge faster than a random output layer.
    init_from_target: bool = False
    # Run the head's forward/backward under bfloat16 autocast (weights and optimizer stay float32).
    # On a CPU with native bf16 a step is 2.2x faster (168 vs 379 ms per 256 tokens).
    autocast: bool = False
    # Start from a trained head in the published layout (a directory, e.g. the shipped
    # specot/data/eagle): its weights, draft vocabulary and feature layers — continued training on
    # new text with a fresh optimizer and learning-rate schedule. A draft_vocab_size larger than
    # its vocabulary grows it (grow_draft_vocab); smaller or None keeps it.
    init_head: str | None = None
    # Decoder layers of the head (EAGLE-3: 1). None: the initial head's, else 1. More layers than
    # the initial head's adds plain decoder layers on top whose output projections (o_proj,
    # down_proj) start at zero, so the deeper head starts as exactly the initial one.
    num_layers: int | None = None
    # Sequences per optimizer step (right-padded, of similar lengths: epoch_batches). On a GPU a
    # batch of one leaves it idle between kernel launches, and 16 sequences cost about as much wall
    # time as one (an H100). On a CPU a step costs about 16x more, but continuing a trained head
    # with batches of one at lr 1e-4 lost accuracy where batches of 16 at 1.5e-4 gained
    # (docs/distillation.md, "Head variants"): Adam's step is about lr whatever the batch.
    batch_size: int = 1
    # A fixed wall-time slot (seconds; e.g. a GPU's booked time): from step 40 on, every 40 steps, the
    # run measures its mean step rate since step 10 (start-up made a first-30-steps estimate 3x
    # too slow on the H100) and sets the schedule's length so that it ends within the slot, with
    # the learning-rate schedule completed. None: run ``steps``.
    time_budget_s: float | None = None

    def __post_init__(self) -> None:
        if self.token_loss not in TOKEN_LOSSES:
            raise ValueError(f"token_loss (--token-loss) must be {' or '.join(map(repr, TOKEN_LOSSES))}, "
                             f"got {self.token_loss!r}")
        for name, flag in (("ttt_steps", "--ttt-steps"), ("steps", "--steps"), ("save_every", "--save-every"),
                           ("batch_size", "--batch-size")):
            check_count(getattr(self, name), name, flag)
        check_count(self.max_len, "max_len", "--max-len", minimum=3)  # a training chunk holds >= 3 tokens
        check_count(self.warmup, "warmup", minimum=0)
        for name, flag in (("draft_vocab_size", "--draft-vocab"), ("num_layers", "--num-layers")):
            if getattr(self, name) is not None:  # None: the full vocabulary / the initial head's layers
                check_count(getattr(self, name), name, flag)
        if self.layers is not None:
            if len(self.layers) == 0:
                raise ValueError("layers (--layers) names no target layer; leave it out for EAGLE-3's 2, L//2, L-3")
            for i in self.layers:
                check_count(i, "each of layers", "--layers", minimum=0)
        check_positive_number(self.lr, "lr", "--lr")
        check_positive_number(self.step_decay, "step_decay")
        check_positive_number(self.feat_weight, "feat_weight", "--feat-weight", allow_zero=True)
        if self.time_budget_s is not None:
            check_positive_number(self.time_budget_s, "time_budget_s", "--time-budget-min")


def _steps_within(seconds_left: float, seconds_per_step: float) -> int:
    """Steps that fit in ``seconds_left`` at ``seconds_per_step`` (0 when the slot is spent)."""
    return max(int(seconds_left / seconds_per_step), 0) if seconds_per_step > 0 else 0


def _budget_total(step: int, steps: int, seconds_left: float, seconds_per_step: float) -> int:
    """The schedule's length under a time budget: ``step`` plus the steps that fit in
    ``seconds_left``, at most ``steps`` (the configured schedule)."""
    return min(steps, step + _steps_within(seconds_left, seconds_per_step))


def chunk_token_ids(seqs: Iterable[Sequence[int]], max_len: int) -> list[list[int]]:
    """Cut token sequences into chunks of at most ``max_len`` (at least 3 tokens each)."""
    out = []
    for s in seqs:
        s = [int(t) for t in s]
        for i in range(0, len(s), max_len):
            c = s[i:i + max_len]
            if len(c) >= 3:
                out.append(c)
    return out


def frequent_vocab(seqs: Iterable[Sequence[int]], size: int, vocab_size: int,
                   keep: Sequence[int] = ()) -> list[int]:
    """The reduced draft vocabulary: ``size`` token ids, the most frequent of ``seqs`` (ties: lower id;
    padded with the lowest unseen ids). Without ``keep`` sorted by id; with ``keep`` (a trained
    head's vocabulary, grown by :func:`grow_draft_vocab`) ``keep`` in its order, then the most
    frequent other tokens."""
    if size > vocab_size or size < len(keep):
        raise ValueError(f"draft vocabulary of {size} tokens: it must lie in [{len(keep)}, {vocab_size}]")
    counts = Counter(int(t) for s in seqs for t in s)
    kept = set(int(t) for t in keep)
    ranked = sorted((t for t in counts if t not in kept), key=lambda t: (-counts[t], t))[:size - len(kept)]
    if len(ranked) < size - len(kept):
        seen = kept | set(ranked)
        ranked += [t for t in range(vocab_size) if t not in seen][: size - len(kept) - len(ranked)]
    return [int(t) for t in keep] + ranked if keep else sorted(ranked)


def grow_draft_vocab(lm_head: Tensor, old_ids: Sequence[int], new_ids: Sequence[int], target_out: Tensor) -> Tensor:
    """Output rows for a larger draft vocabulary (docs/distillation.md, "Head variants").

    The head's feature loss pulls its final normed state towards the target's, so its output rows
    live near a linear image of the target's output embedding. Fit that map by least squares on
    the trained rows, ``target_out[old_ids] @ M ≈ lm_head``, and start each added token's row at
    ``target_out[id] @ M``; the trained rows are kept as they are.

    Args:
        lm_head: ``[V_old, H]`` the trained head's output layer.
        old_ids: ``[V_old]`` its draft vocabulary (target ids, in draft-id order).
        new_ids: ``[V_new]`` the larger vocabulary, starting with ``old_ids`` in the same order.
        target_out: ``[V, H_t]`` the target's output embedding.
    Returns:
        ``[V_new, H]`` float32.
    Raises:
        ValueError: if ``new_ids`` does not start with ``old_ids`` or repeats a token.
    """
    old, new = [int(t) for t in old_ids], [int(t) for t in new_ids]
    if new[:len(old)] != old or len(set(new)) != len(new):
        raise ValueError(f"the new draft vocabulary ({len(new)} ids) must start with the old one ({len(old)} ids) "
                         "in the same order and repeat no token")
    W = lm_head.detach().float()
    E = target_out.detach().float()
    M = torch.linalg.lstsq(E[old], W).solution  # [H_t, H]
    added = E[torch.tensor(new[len(old):], dtype=torch.int64)] @ M
    return torch.cat([W, added], dim=0)


@torch.no_grad()
def target_features(target_model: Any, ids: Sequence[int], layers: Sequence[int]) -> dict[str, Tensor]:
    """Teacher-forced target pass over ``ids``: fused features ``[T, k·H]`` of ``layers``, the
    next-token probabilities ``[T, V]`` (row t: after token t) and the last hidden state ``[T, H]``,
    all float32 whatever the target's dtype."""
    dev = next(target_model.parameters()).device
    with sdpa_without_cudnn(dev):  # a new length per call: cuDNN attention would re-plan each
        out = target_model(input_ids=torch.tensor([list(ids)], device=dev), output_hidden_states=True)
    hs = out.hidden_states
    return {"feats": torch.cat([hs[i][0] for i in layers], dim=-1).float(),
            "probs": torch.softmax(out.logits[0].float(), dim=-1),
            "last": hs[-1][0].float()}


@torch.no_grad()
def answer_positions(target: Any, drafter: Any, prompt_len: int, full: Sequence[int]) -> tuple[Tensor, Tensor]:
    """The EAGLE head's first draft position at every position of an answer: one teacher-forced
    target pass over ``full`` (a prompt of ``prompt_len`` tokens, then the target's continuation)
    and one head pass (:meth:`~specot.drafting.eagle.Eagle3Head.forward_sequence`, what the engine
    computes at a tree's root) give the head's draft logits ``z [N, V_d]`` and the target's
    next-token probabilities ``p [N, V]``, float32, where row j is the law of token
    ``full[prompt_len + j]`` (the last row: the token after ``full``); ``N = len(full) − prompt_len + 1``.
    ``drafter`` is an :class:`~specot.drafting.EagleDrafter` of ``target``."""
    data = target_features(target.model, full, drafter.hidden_layers)
    z, _ = drafter.head.forward_sequence(torch.tensor(list(full[1:])), data["feats"][:-1])  # z[j] ~ probs[j + 1]
    lo = prompt_len - 2  # z[lo] and probs[lo + 1]: the law of the first answer token
    return z[lo:].float(), data["probs"][lo + 1:].float()


@torch.no_grad()
def target_features_batch(target_model: Any, chunks: Sequence[Sequence[int]], layers: Sequence[int],
                          target_ids: Tensor) -> dict[str, Tensor]:
    """Teacher-forced target pass over a right-padded batch of ``B`` token sequences, arranged as the
    training-time test's entries (:func:`ttt_loss_batch`): entry ``e`` of row ``b`` reads token
    ``chunks[b][e + 1]`` and the target's feature of position ``e``.

    Returns (float32 except ``tokens`` / ``lengths``): ``tokens [B, T]``, ``feats [B, T, k·H]`` (fused
    features of ``layers``), ``p [B, T, V_d]`` (the target's next-token law after token ``e + 1``
    restricted to the draft vocabulary ``target_ids [V_d]`` and renormalized, i.e. a softmax over
    those logits), ``last [B, T, H]`` (its last hidden state there) and ``lengths [B]`` (entries of
    each row, ``len(chunk) − 1``); ``T`` is the longest chunk's length − 1.
    """
    dev = next(target_model.parameters()).device
    ids, mask = right_padded(chunks, 0)
    ids, mask = ids.to(dev), mask.to(dev)
    with sdpa_without_cudnn(dev):
        out = target_model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    hs = out.hidden_states
    logits = out.logits[:, 1:].index_select(-1, target_ids.to(dev))  # [B, T, V_d]
    return {"tokens": ids[:, 1:],
            "feats": torch.cat([hs[i][:, :-1] for i in layers], dim=-1).float(),
            "p": torch.softmax(logits.float(), dim=-1),
            "last": hs[-1][:, 1:].float(),
            "lengths": mask.sum(-1) - 1}


def _unrolled_attention(att: Any, q: Tensor, keys: list[Tensor], vals: list[Tensor], mask: Tensor) -> Tensor:
    """``att``'s output ``[B, T, H]`` for queries ``q [B, h, T, d]`` over the keys / values
    ``[B, kv, T, d]`` of every unroll step so far (concatenated along positions) under
    ``mask [T, (s + 1)·T]``."""
    rep = att.num_heads // att.num_kv
    K = torch.cat(keys, dim=-2).repeat_interleave(rep, dim=-3)
    V = torch.cat(vals, dim=-2).repeat_interleave(rep, dim=-3)
    out = F.scaled_dot_product_attention(q, K, V, attn_mask=mask[None, None])  # [B, h, T, d]
    B, _, T, _ = q.shape
    return att.o_proj(out.transpose(1, 2).reshape(B, T, -1))


def ttt_loss(head: Eagle3Head, ids: Tensor, data: dict[str, Tensor], cfg: EagleTrainConfig) -> tuple[Tensor, dict[str, float]]:
    """The training-time-test loss of one sequence ``ids [T + 1]`` with ``data`` from
    :func:`target_features` (module docstring; :func:`ttt_loss_batch` with a batch of one).

    Entry ``e = 0..T−1`` reads token ``ids[e+1]`` and (step 0) the target's feature of position
    ``e``; it predicts token ``e + 2`` and is scored against the target's distribution after
    token ``e + 1``.
    """
    dev = head.norm.weight.device
    tid = head.target_ids()
    p = data["probs"][1:, :].to(dev).index_select(1, tid)  # [T, V_d] the target's law on the draft vocabulary
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-12)
    T = ids.shape[0] - 1
    return ttt_loss_batch(head, ids[None, 1:].to(dev), data["feats"][None, :-1], p[None], data["last"][None, 1:],
                          torch.tensor([T], device=dev), cfg)


def ttt_loss_batch(head: Eagle3Head, tokens: Tensor, feats: Tensor, p: Tensor, last: Tensor, lengths: Tensor,
                   cfg: EagleTrainConfig) -> tuple[Tensor, dict[str, float]]:
    """The training-time-test loss (module docstring) of a batch of ``B`` right-padded rows of
    entries (:func:`target_features_batch`): ``tokens [B, T]``, target features ``feats [B, T, k·H]``,
    the target's law on the draft vocabulary ``p [B, T, V_d]``, its last hidden state
    ``last [B, T, H]`` and the entries of each row ``lengths [B]``. The token loss is the mean
    forward KL (or total variation, ``cfg.token_loss``) over every valid entry of the batch, per unroll step.
    """
    B, T = tokens.shape
    dev = head.norm.weight.device
    tokens, p, last, lengths = tokens.to(dev), p.to(dev), last.to(dev), lengths.to(dev)
    pos = torch.arange(T, device=dev)
    cos, sin = head.rotary(last, pos[None])
    cos, sin = cos[0].to(head.dtype), sin[0].to(head.dtype)
    mid = head.midlayer
    # keys / values of every layer (midlayer, then head.layers), one entry per unroll step
    keys: list[list[Tensor]] = [[] for _ in range(head.num_layers)]
    vals: list[list[Tensor]] = [[] for _ in range(head.num_layers)]
    feat = head.fuse(feats.to(dev))  # [B, T, H]: feature of position e
    with torch.no_grad():  # the embedding is the target's, frozen
        emb = head.embed(tokens)
    total = torch.zeros((), device=dev)
    stats: dict[str, float] = {}
    e = torch.arange(T, device=dev)
    real = e[None, :] < lengths[:, None]  # [B, T] entries that are not padding
    for s in range(min(cfg.ttt_steps, T)):  # a chunk of T entries has no history for step T or later
        # keys: step 0 at entries <= e − s; step r (1..s) at entry e − s + r (the diagonal)
        blocks = [(e[None, :] <= (e[:, None] - s))]
        for r in range(1, s + 1):
            blocks.append(e[None, :] == (e[:, None] - s + r))
        mask = torch.cat(blocks, dim=1)  # [T, (s + 1)·T]
        has_history = e >= s  # entries whose unrolled history exists
        mask = mask | ~has_history[:, None]  # rows without history: any keys (masked out of the loss)
        valid = has_history[None, :] & real  # [B, T]
        normed_f = mid.hidden_norm(feat)
        residual = normed_f if mid.norm_before_residual else feat
        x = torch.cat([mid.input_layernorm(emb), normed_f], dim=-1)  # [B, T, 2H]
        h = residual
        for i, (layer, inp) in enumerate([(mid, x)] + [(lay, None) for lay in head.layers.values()]):
            q, k, v = layer.self_attn.project(inp if inp is not None else layer.input_layernorm(h), cos, sin)
            keys[i].append(k)
            vals[i].append(v)
            h = h + _unrolled_attention(layer.self_attn, q, keys[i], vals[i], mask)
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        normed = head.norm(h)
        logq = torch.log_softmax(head.lm_head(normed).float(), dim=-1)  # [B, T, V_d]
        if cfg.token_loss == "tvd":  # 1 − Σ min(p, q): one minus the acceptance rate at T = 1
            div = 0.5 * (p - logq.exp()).abs().sum(-1)  # [B, T]
        else:
            div = (p * (p.clamp_min(1e-12).log() - logq)).sum(-1)  # [B, T] KL(p || q)
        tok = div[valid].mean()
        reg = F.smooth_l1_loss(normed.float()[valid], last[valid]) if cfg.feat_weight else torch.zeros((), device=dev)
        w = cfg.step_decay ** s
        total = total + w * (tok + cfg.feat_weight * reg)
        with torch.no_grad():
            acc = (logq.argmax(-1) == p.argmax(-1))[valid].float().mean()
        stats[f"{'tv' if cfg.token_loss == 'tvd' else 'kl'}{s}"], stats[f"acc{s}"] = float(tok.detach()), float(acc)
        # the next step's input: entry e reads this step's output of entry e−1 (entry 0's is unused)
        feat = torch.cat([h[:, :1], h[:, :-1]], dim=1)
    return total, stats


def epoch_batches(lengths: Sequence[int], batch_size: int, seed: int, epoch: int, window: int = 8) -> list[list[int]]:
    """Chunk indices per optimizer step for one epoch: a seeded permutation of the chunks, cut into
    windows of ``window`` batches, each window sorted by length (less padding) and cut into batches
    of ``batch_size``, then the batches shuffled. Deterministic in ``(seed, epoch)``, so a resumed
    run sees the same batches. With ``batch_size == 1``: the permutation itself."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(len(lengths), generator=g).tolist()
    if batch_size == 1:
        return [[i] for i in order]
    span = batch_size * window
    batches = []
    for w in range(0, len(order), span):
        chunk = sorted(order[w:w + span], key=lambda i: lengths[i])
        batches.extend(chunk[j:j + batch_size] for j in range(0, len(chunk), batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]


def _lr(step: int, cfg: EagleTrainConfig, total: int) -> float:
    """Linear warm-up, then a cosine decay to a tenth of ``cfg.lr`` at step ``total``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    prog = min((step - cfg.warmup) / max(total - cfg.warmup, 1), 1.0)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * prog)))


def _make_head(target: Any, chunks: list[list[int]], cfg: EagleTrainConfig,
               resume: dict[str, Any] | None) -> tuple[Eagle3Head, list[int], tuple[int, ...], int]:
    """The head to train, on ``target``'s device in float32: resumed (its vocabulary, layers and depth
    from the checkpoint; the weights are loaded by the caller), continued from ``cfg.init_head`` (its
    weights, a grown vocabulary, added identity layers), or new (the most frequent tokens of ``chunks``,
    output rows from the target's). Returns ``(head, draft vocabulary, feature layers, layers)``."""
    tm = target.model
    # int8=False: training needs the float weights even where the head's config asks for int8 on a CPU
    init = EagleDrafter.from_pretrained(cfg.init_head, target, int8=False) if resume is None and cfg.init_head else None
    n_layers = cfg.num_layers or (init.head.num_layers if init is not None else 1)
    if resume is not None:
        vocab = resume["draft_vocab"]
        layers = tuple(resume["layers"])
        n_layers = int(resume.get("num_layers", 1))
    elif init is not None:
        vocab = init.head.target_ids().tolist()
        if cfg.draft_vocab_size is not None and cfg.draft_vocab_size > len(vocab):
            vocab = frequent_vocab(chunks, cfg.draft_vocab_size, target.vocab_size, keep=vocab)
        layers = tuple(init.hidden_layers)
    else:
        vocab = frequent_vocab(chunks, cfg.draft_vocab_size or target.vocab_size, target.vocab_size)
        layers = tuple(cfg.layers) if cfg.layers is not None else None
    if init is not None and n_layers < init.head.num_layers:
        raise ValueError(f"num_layers={n_layers} is fewer than the initial head's {init.head.num_layers} layers")
    hcfg = eagle3_config(tm.config, draft_vocab_size=len(vocab), layers=layers, num_layers=n_layers)
    layers = _config_layers(hcfg)
    torch.manual_seed(cfg.seed)
    head = Eagle3Head(hcfg, num_features=len(layers))
    head.set_draft_vocab(vocab)
    head.attach_embedding(tm.get_input_embeddings())
    head.to(target.device, torch.float32)
    if resume is None and cfg.init_from_target:
        with torch.no_grad():
            head.lm_head.weight.copy_(tm.get_output_embeddings().weight.index_select(0, head.target_ids()).float())
            final_norm = getattr(getattr(tm, "model", tm), "norm", None)
            if final_norm is not None and getattr(final_norm, "weight", None) is not None:
                head.norm.weight.copy_(final_norm.weight.float())
    if init is not None:
        state = {k: v.float() if v.is_floating_point() else v for k, v in init.head.checkpoint_state().items()}
        if len(vocab) > init.head.draft_vocab_size:  # a grown vocabulary: new output rows, the head's own map
            state = {k: v for k, v in state.items() if k not in ("d2t", "t2d")}
            state["lm_head.weight"] = grow_draft_vocab(state["lm_head.weight"], vocab[:init.head.draft_vocab_size], vocab,
                                                       tm.get_output_embeddings().weight)
        head.load_state_dict(state, strict=False)
        with torch.no_grad():  # added layers start as the identity: zero output projections
            for layer in list(head.layers.values())[init.head.num_layers - 1:]:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
    return head, vocab, layers, n_layers


def train_eagle(target: Any, token_seqs: Sequence[Sequence[int]], out_dir: str | os.PathLike[str],
                cfg: EagleTrainConfig, *, progress: bool = True, max_steps: int | None = None) -> EagleDrafter:
    """Train (or resume training) an EAGLE-3 head for ``target`` (a
    :class:`~specot.models.CausalLM`) on ``token_seqs``; writes ``out_dir/{ckpt.pt, log.jsonl,
    train_config.json}`` and the head in the published layout to ``out_dir/head``. Returns the drafter.

    Raises:
        ValueError: no sequence of 3 tokens or more, fewer layers than the initial head's, feature
            layers outside the target, or a draft vocabulary size out of range (``cfg`` itself,
            an :class:`EagleTrainConfig`, refuses bad values when it is built).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    chunks = chunk_token_ids(token_seqs, cfg.max_len)
    if not chunks:
        raise ValueError("no training text: every sequence is shorter than 3 tokens")
    ckpt_path = out / "ckpt.pt"
    resume = load_torch_file(ckpt_path, "EAGLE training checkpoint", keys=("head", "opt", "step", "draft_vocab", "layers")) \
        if ckpt_path.exists() else None
    head, vocab, layers, n_layers = _make_head(target, chunks, cfg, resume)
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.0)
    step = 0
    if resume is not None:
        head.load_state_dict(resume["head"], strict=False)
        opt.load_state_dict(resume["opt"])
        step = int(resume["step"])
    (out / "train_config.json").write_text(json.dumps({**asdict(cfg), "layers": list(layers)}, indent=2))
    total = cfg.steps  # the schedule's length (a time budget may shorten it)
    stop = min(total, step + max_steps) if max_steps is not None else total
    stop_cap = stop  # a time budget may end training earlier than this, never later
    start_step, t_start = step, time.perf_counter()
    t_warm = t_start
    lengths = [len(c) for c in chunks]
    n_batches = -(-len(chunks) // cfg.batch_size)  # optimizer steps per epoch
    epoch_of: dict[int, list[list[int]]] = {}

    def save() -> None:
        save_torch_file({"head": head.checkpoint_state(), "opt": opt.state_dict(), "step": step, "draft_vocab": vocab,
                         "layers": list(layers), "num_layers": n_layers}, ckpt_path)

    bar = tqdm(total=cfg.steps, initial=step, desc="training EAGLE head", unit="step", disable=not progress,
               file=sys.stderr)
    head.train()
    with open(out / "log.jsonl", "a", encoding="utf-8") as log:
        while step < stop:
            epoch = step // n_batches
            if epoch not in epoch_of:
                epoch_of.clear()
                epoch_of[epoch] = epoch_batches(lengths, cfg.batch_size, cfg.seed, epoch)
            batch = [chunks[i] for i in epoch_of[epoch][step % n_batches]]
            data = target_features_batch(target.model, batch, layers, head.target_ids())
            for g in opt.param_groups:
                g["lr"] = _lr(step, cfg, total)
            with torch.autocast(device_type=torch.device(target.device).type, dtype=torch.bfloat16,
                                enabled=cfg.autocast):
                loss, st = ttt_loss_batch(head, data["tokens"], data["feats"], data["p"], data["last"],
                                          data["lengths"], cfg)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            step += 1
            if cfg.time_budget_s is not None and step == start_step + 10:
                t_warm = time.perf_counter()  # start-up (compilation, allocation, caches) is over
            if cfg.time_budget_s is not None and step >= start_step + 40 and (step - start_step) % 40 == 0:
                # re-estimated every 40 steps from the mean rate since step 10: on an H100 (2026-11),
                # steps 10-40 ran at half the later rate and one estimate ended a 9-minute slot at 4
                now = time.perf_counter()
                total = _budget_total(step, cfg.steps, cfg.time_budget_s - (now - t_start),
                                      (now - t_warm) / (step - start_step - 10))
                stop = min(stop_cap, total)
                bar.total = total
            log.write(json.dumps({"step": step, "loss": float(loss.detach()), **st}) + "\n")
            bar.update(1)
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}", acc0=f"{st.get('acc0', 0):.2f}")
            if step % cfg.save_every == 0 or step == stop:
                save()
    bar.close()
    head.eval()
    head.to(dtype=target.dtype)
    head.save_pretrained(out / "head")
    return EagleDrafter(head, target, layers=layers)
