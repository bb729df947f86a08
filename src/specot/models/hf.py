"""Scoring and committing: a thin wrapper over any Hugging Face ``AutoModelForCausalLM`` with a KV
cache for one sequence. KV-cache surgery lives in :mod:`specot.models.cache`, device and dtype
choice in :mod:`specot.models.device`, chat formatting in :mod:`specot.models.chat`, loading in
:mod:`specot.models.loading`.

The wrapper keeps the token ids whose keys/values are cached, so a caller can hand it the whole
committed context at every step: :meth:`CausalLM.logits_after` rolls the cache back to the longest
common prefix and runs only the new tokens (plus any drafted tokens) in ONE forward pass.
"""

from __future__ import annotations

import inspect
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch
from torch import Tensor
from transformers import DynamicCache, StaticCache

from .cache import crop_cache, is_static, keep_cache_positions
from .chat import decode_tokens, encode_prompt
from ..geometry import TokenTree, TreeGeometry, common_prefix_length
from .protocol import Capabilities, check_scoring_fits
from .timing import median_pass_times
from .device import (capture_cuda_graph, install_gqa_sdpa, install_prepacked_linears, install_small_batch_head,
                     sdpa_without_cudnn)

__all__ = ["CausalLM", "GRAPH_WIDTHS", "tree_attention_mask"]

#: The widths (new tokens per pass) that :meth:`CausalLM.use_static_cache` with ``cuda_graphs``
#: pads a pass to: one captured CUDA graph each. Wider passes (prompt prefills) run eagerly.
GRAPH_WIDTHS = (1, 2, 4, 8, 16, 32, 64)


def tree_attention_mask(visible: Tensor, dtype: torch.dtype) -> Tensor:
    """Additive 4D attention mask ``[1, 1, T, S]`` from a bool ``visible [T, S]``: 0 where a query
    may attend, the dtype's most negative finite value elsewhere (as transformers' own masks)."""
    fill = torch.finfo(dtype).min
    return torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill(~visible, fill)[None, None]


@dataclass
class _PaddedPass:
    """The static buffers of one padded pass width (:meth:`CausalLM.use_static_cache`), and its
    captured CUDA graph once captured."""

    ids: Tensor  # [1, W] int64 token ids, the real ones first
    pos: Tensor  # [1, W] int64 position ids
    mask: Tensor  # [1, 1, W, S] additive attention mask over the S static cache slots, the model's dtype
    lens: Tensor  # [2] int64: the cache's running length before and after the pass
    hidden: bool  # whether the pass returns the hidden states (an EAGLE drafter reads them)
    graph: Any = None  # torch.cuda.CUDAGraph, on CUDA after the first pass
    out: Any = None  # the captured graph's outputs: logits [W, V] and hidden states, static buffers

    @classmethod
    def empty(cls, width: int, slots: int, dtype: torch.dtype, device: torch.device, hidden: bool) -> "_PaddedPass":
        z = dict(dtype=torch.int64, device=device)
        return cls(torch.zeros(1, width, **z), torch.zeros(1, width, **z),
                   torch.zeros(1, 1, width, slots, dtype=dtype, device=device), torch.zeros(2, **z), hidden)


@dataclass
class CausalLM:
    """A causal LM plus its KV cache for one sequence (batch size 1).

    Attributes:
        model: a Hugging Face ``PreTrainedModel`` with a causal-LM head.
        tokenizer: its tokenizer, or ``None`` (token-level use, e.g. tiny test models).
        name: a label for messages and statistics.
        vocab_size: number of logits used (the tokenizer's size when known, which drops any
            padding rows of the output embedding; else the model's output size).
        max_context: maximum number of positions (``config.max_position_embeddings``).
        forward_calls: forward passes run since the last :meth:`reset_stats`.
        forward_time_s: wall time of those passes, seconds. On CUDA each pass is timed by CUDA
            events around it (from the first kernel queued to the last one done), read back when
            this property is read: the time lands here, not in the caller's next host read, and
            timing adds no host sync to the loop.
        last_hidden: the target's hidden states of the last forward pass, ``[T, len(layers)·H]``,
            when it was asked for (``hidden_layers``), else ``None``.
        static_cache_len: when set (:meth:`use_static_cache`), the KV cache is a transformers
            ``StaticCache`` of this many positions instead of a ``DynamicCache``.
        generation_lock: a re-entrant lock (``threading.RLock``) that the decoding loop
            (:func:`specot.engine.decode`) holds for a whole generation. The wrapper holds ONE
            sequence's KV cache, so threads sharing it run their generations one after the other
            (each gets exactly its sequential result); a caller driving :meth:`logits_after` /
            :meth:`forward_tree` directly from several threads must hold it too.
    """

    model: Any
    tokenizer: Any = None
    name: str = "model"
    vocab_size: int = 0
    max_context: int = 0
    forward_calls: int = 0
    static_cache_len: int | None = None
    generation_lock: Any = field(default_factory=threading.RLock, repr=False, compare=False)
    _time_s: float = field(default=0.0, repr=False)
    # padded passes (use_static_cache(cuda_graphs=True)): width -> _PaddedPass; None = plain passes
    _graphs: dict[tuple[int, bool], "_PaddedPass"] | None = field(default=None, repr=False)
    _graph_pool: Any = field(default=None, repr=False)
    _events: list[Any] = field(default_factory=list, repr=False)
    last_hidden: Tensor | None = field(default=None, repr=False)
    _cache: Any = field(default=None, repr=False)
    _ids: list[int] = field(default_factory=list, repr=False)
    # ids fed as device tensors (a drafted token on CUDA) are read back lazily, so a draft step does
    # not wait for the host: one read when the ids are next needed
    _pending: list[Tensor] = field(default_factory=list, repr=False)
    # Tree region (see forward_tree): cached positions >= _tree_base hold tree nodes; for each,
    # its position id and its ancestors' absolute cache indices (itself included).
    last_start: int = field(default=0, repr=False)
    _tree_base: int | None = field(default=None, repr=False)
    _tree_pos: list[int] = field(default_factory=list, repr=False)
    _tree_anc: list[list[int]] = field(default_factory=list, repr=False)
    # the tree of the last tree_logits: (its context length, its geometry), for keep_tree_path
    _scored: tuple[int, TreeGeometry] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        cfg = self.model.config
        if not self.vocab_size:
            out_dim = self.model.get_output_embeddings().weight.shape[0]
            tok_len = len(self.tokenizer) if self.tokenizer is not None else out_dim
            self.vocab_size = min(out_dim, tok_len)
        if not self.max_context:
            self.max_context = int(getattr(cfg, "max_position_embeddings", 0) or 1 << 30)
        self.model.eval()
        try:
            params = inspect.signature(self.model.forward).parameters
        except (TypeError, ValueError):  # pragma: no cover - exotic wrappers
            params = {}
        self._keeps_logits = "logits_to_keep" in params
        if self.device.type == "cpu":
            install_prepacked_linears(self.model)  # large layers on oneDNN over weights reordered once (faster)
            install_small_batch_head(self.model)  # where oneDNN is missing: a faster float32 head for 2–32 rows
            install_gqa_sdpa(self.model)  # masked multi-token passes without copying K/V per head group

    def use_static_cache(self, max_len: int, *, cuda_graphs: bool = False) -> "CausalLM":
        """Decode over a fixed-size ``StaticCache`` of ``max_len`` positions and, with
        ``cuda_graphs``, run every pass of at most 64 new tokens after the prefill as a captured CUDA
        graph, as gpt-fast, vLLM and EAGLE's own code do: a pass of ``T`` new tokens is padded to
        the next width of :data:`GRAPH_WIDTHS` (one graph per width, captured with
        ``torch.cuda.CUDAGraph`` at its first use: two eager warm-up passes and the capture, well
        under 0.1 s; no ``torch.compile``), with static buffers for the ids ``[1, W]``, position
        ids ``[1, W]`` and an additive attention mask ``[1, 1, W, max_len]``. The ``W - T``
        padding queries come after the real ones, which never see them; their keys and values land
        in slots past the cache's new length, which later passes overwrite. Only the real rows are
        returned.

        Why: a pass of a small target is bound by kernel launches on a GPU; replayed, it runs several
        times faster with logits bit-identical to the eager pass's (``benchmarks/gpu/graph_step.py``;
        docs/results.md, "GPU runs").

        Off CUDA the same padded passes run eagerly (that is how the CPU tests check them). If a
        capture fails the wrapper warns once and runs plain eager passes from then on. Off by
        default here; ``specot.generate`` turns it on for a target on CUDA. Rollback moves the
        cache's running length back; compaction moves entries in place. The cache's buffers are made by the
        first pass and kept across sequences (captured graphs hold their addresses): call this again
        after moving the model to another device or dtype. Padding needs room: a pass whose padded
        width would overrun ``max_len`` runs unpadded and eagerly.

        Raises:
            ValueError: ``max_len`` below 2 or above the model's context.
        """
        if not 2 <= int(max_len) <= self.max_context:
            raise ValueError(f"static cache length {max_len} must lie in [2, {self.max_context}] (the model's context)")
        self.static_cache_len = int(max_len)
        self._graphs = {} if cuda_graphs else None
        self._graph_pool = None
        self._cache = None  # a cache of the new length is made by the next pass
        self.reset()
        return self

    # ----------------------------------------------------------------- properties
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    @property
    def capabilities(self) -> Capabilities:
        """What this target can do (:class:`~specot.models.protocol.Capabilities`): hidden states of
        every layer, a static cache (CUDA graphs where the architecture compiles whole), the padded
        widths :data:`GRAPH_WIDTHS`, float32 / bfloat16 / float16, no own pass-cost curve."""
        cfg = self.model.config
        layers = getattr(getattr(cfg, "get_text_config", lambda: cfg)(), "num_hidden_layers", None)
        return Capabilities(hidden_states=True, hidden_layers=layers if isinstance(layers, int) else None,
                            static_cache=True, cuda_graphs=bool(getattr(self.model, "_can_compile_fullgraph", False)),
                            graph_widths=GRAPH_WIDTHS, dtypes=(torch.float32, torch.bfloat16, torch.float16))

    @property
    def cuda_graphs(self) -> bool:
        """Whether passes run padded over the static cache, replayed as CUDA graphs on CUDA
        (:meth:`use_static_cache` with ``cuda_graphs``, and no capture has failed)."""
        return self._graphs is not None

    # ----------------------------------------------------------------- text (specot.models.chat)
    def encode_prompt(self, prompt: str, *, chat: bool | None = None, system: str | None = None) -> list[int]:
        """Token ids of ``prompt`` (:func:`specot.models.chat.encode_prompt` with this model's tokenizer)."""
        return encode_prompt(self.tokenizer, prompt, chat=chat, system=system, name=self.name)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (:func:`specot.models.chat.decode_tokens`)."""
        return decode_tokens(self.tokenizer, ids)

    @property
    def eos_token_ids(self) -> set[int]:
        """Token ids that end generation (from the generation config, config and tokenizer)."""
        ids: set[int] = set()
        for src in (getattr(self.model, "generation_config", None), self.model.config, self.tokenizer):
            val = getattr(src, "eos_token_id", None) if src is not None else None
            if isinstance(val, int):
                ids.add(val)
            elif isinstance(val, (list, tuple)):
                ids.update(int(v) for v in val)
        return ids

    @property
    def cached_ids(self) -> list[int]:
        """Token ids whose keys/values are in the cache (a copy)."""
        return list(self._cached_ids)

    # ----------------------------------------------------------------- cache
    @property
    def _cached_ids(self) -> list[int]:
        """The cached token ids (the list itself; pending device ids read back first)."""
        if self._pending:
            self._ids.extend(torch.cat(self._pending).tolist())
            self._pending = []
        return self._ids

    def reset(self) -> None:
        """Empty the KV cache (a new sequence starts). A static cache keeps its buffers (their
        addresses are baked into the captured CUDA graphs) and only moves its length to 0."""
        if self._cache is not None and is_static(self._cache):
            crop_cache(self._cache, 0)
        else:
            self._cache = None
        self._ids = []
        self._pending = []
        self._clear_tree()

    @property
    def forward_time_s(self) -> float:
        """Seconds spent in forward passes since :meth:`reset_stats` (see the class docstring)."""
        if self._events:
            self._events[-1][1].synchronize()
            self._time_s += sum(a.elapsed_time(b) for a, b in self._events) / 1000.0
            self._events = []
        return self._time_s

    def reset_stats(self) -> None:
        self.forward_calls = 0
        self._time_s = 0.0
        self._events = []

    def rollback(self, length: int) -> None:
        """Keep only the first ``length`` cached positions."""
        if self._cache is not None:
            crop_cache(self._cache, length)
        del self._cached_ids[length:]
        if self._tree_base is not None:
            if length <= self._tree_base:
                self._clear_tree()
            else:
                del self._tree_pos[length - self._tree_base:]
                del self._tree_anc[length - self._tree_base:]

    @torch.inference_mode()
    def keep_positions(self, keep: Sequence[int]) -> None:
        """Keep the cached positions ``keep`` (strictly increasing indices), compacted in place
        (:func:`specot.models.cache.keep_cache_positions`); closes any tree region."""
        idx = [int(i) for i in keep]
        if self._cache is not None:
            keep_cache_positions(self._cache, idx)
        elif any(b <= a for a, b in zip(idx, idx[1:])) or (idx and (idx[0] < 0 or idx[-1] >= len(self._cached_ids))):
            raise ValueError(f"positions to keep must increase strictly within [0, {len(self._cached_ids)})")
        ids = self._cached_ids
        self._ids = [ids[i] for i in idx]
        self._clear_tree()

    # ----------------------------------------------------------------- forward
    @torch.inference_mode()
    def forward(self, tokens: Sequence[int] | Tensor, *, position_ids: Tensor | None = None,
                attention_mask: Tensor | None = None, last: int | None = None,
                hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Run ``tokens`` (``[T]``) after the cached positions; returns float32 logits ``[T, V]``
        on the model's device.

        Appends the new positions to the cache. ``position_ids [T]`` and a 4D ``attention_mask``
        ``[1, 1, T, cached + T]`` may be passed for tree attention (default: causal, consecutive).
        With ``last = k`` only the logits of the last ``k`` positions are computed (transformers'
        ``logits_to_keep``; a prompt prefill needs one row, not ``T``) and ``[k, V]`` is returned.
        With ``hidden_layers`` (indices into transformers' ``hidden_states`` tuple: 0 = embeddings,
        ``num_hidden_layers`` = the last layer after the final norm) the hidden states of all ``T``
        tokens at those layers are concatenated into :attr:`last_hidden` ``[T, len(layers)·H]``
        (the features an EAGLE-style drafter reads).
        """
        ids = torch.as_tensor(list(tokens) if not isinstance(tokens, Tensor) else tokens, dtype=torch.int64)
        ids = ids.to(self.device).reshape(1, -1)  # [1, T]
        if ids.shape[1] == 0:
            raise ValueError("forward needs at least one token")
        C = len(self._cached_ids)
        if self.static_cache_len is not None and C + ids.shape[1] > self.static_cache_len:
            raise ValueError(f"{self.name}: {C + ids.shape[1]} positions exceed the static cache of {self.static_cache_len}; "
                             "pass a larger length to use_static_cache()")
        if self._cache is None:
            self._cache = (StaticCache(config=self.model.config, max_cache_len=self.static_cache_len)
                           if self.static_cache_len is not None else DynamicCache(config=self.model.config))
        start = time.perf_counter()
        if ids.device.type == "cuda":
            start_ev = torch.cuda.Event(enable_timing=True)
            start_ev.record()
        width = self._graph_width(ids.shape[1], C)
        padded = self._run_padded(ids, position_ids, attention_mask, C, width, hidden_layers is not None) \
            if width is not None else None
        if padded is not None:
            rows_all, hidden = padded  # views into static buffers that the next pass overwrites
        else:
            kwargs: dict[str, Any] = {"past_key_values": self._cache, "use_cache": True}
            if position_ids is not None:
                kwargs["position_ids"] = position_ids.reshape(1, -1).to(self.device)
            if attention_mask is not None:
                kwargs["attention_mask"] = attention_mask.to(self.device)
            if last is not None and self._keeps_logits and 0 < last < ids.shape[1]:
                kwargs["logits_to_keep"] = int(last)
            if hidden_layers is not None:
                kwargs["output_hidden_states"] = True
            with sdpa_without_cudnn(ids.device):  # cuDNN attention re-plans at every new pass shape
                out = self.model(input_ids=ids, **kwargs)
            self._cache = out.past_key_values
            rows_all, hidden = out.logits[0], out.hidden_states
        rows = rows_all[:, : self.vocab_size]  # [T, V], or [last, V] with logits_to_keep
        rows = rows[-last:] if last is not None else rows
        # cast only the rows returned; a padded pass's rows are copied out of its static buffer
        logits = rows.clone() if padded is not None and rows.dtype == torch.float32 else rows.float()
        self.last_hidden = (torch.cat([hidden[i][0] for i in hidden_layers], dim=-1)  # [T, L·H]
                            if hidden_layers is not None else None)
        if logits.device.type == "cuda":  # GPU-side span of the pass, read back lazily (no host sync here)
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            self._events.append((start_ev, end))
        else:
            self._time_s += time.perf_counter() - start
        self.forward_calls += 1
        if ids.device.type == "cpu":
            self._cached_ids.extend(ids[0].tolist())
        else:
            self._pending.append(ids[0])
        return logits

    # ----------------------------------------------------------------- padded passes (CUDA graphs)
    def _graph_width(self, T: int, cached: int) -> int | None:
        """The width a pass of ``T`` new tokens after ``cached`` positions is padded to, or ``None``
        for a plain eager pass: graphs off, the prefill (the static cache allocates its buffers at
        its first update; allocated inside a captured graph they would become graph outputs that
        the next replay overwrites), wider than :data:`GRAPH_WIDTHS`, or no room for the padding."""
        if self._graphs is None or cached == 0 or T > GRAPH_WIDTHS[-1]:
            return None
        W = next(w for w in GRAPH_WIDTHS if w >= T)
        return W if cached + W <= int(self.static_cache_len or 0) else None

    def _set_cache_length(self, length: Tensor) -> None:
        """Set every layer's running length of the static cache from the 0-d device tensor
        ``length`` (a copy inside what a graph captures: no host sync)."""
        for layer in self._cache.layers:
            layer.cumulative_length.copy_(length)

    def _padded_call(self, p: "_PaddedPass") -> tuple[Tensor, Any]:
        """The model over ``p``'s static buffers: the cache's length set to ``p.lens[0]`` before
        and to ``p.lens[1]`` after, inside what a graph captures. Returns logits ``[W, V]`` and the
        hidden states (a tuple of ``[1, W, H]``, or ``None``)."""
        self._set_cache_length(p.lens[0])
        out = self.model(input_ids=p.ids, position_ids=p.pos, attention_mask=p.mask, past_key_values=self._cache,
                         use_cache=True, output_hidden_states=p.hidden)
        self._set_cache_length(p.lens[1])
        return out.logits[0], (out.hidden_states if p.hidden else None)

    def _run_padded(self, ids: Tensor, position_ids: Tensor | None, attention_mask: Tensor | None, cached: int,
                    width: int, hidden: bool) -> tuple[Tensor, Any] | None:
        """One pass of ``ids [1, T]`` padded to ``width`` (:meth:`use_static_cache`): replayed
        from its CUDA graph (captured at the first pass of this width), eagerly off CUDA. Returns
        the real rows (logits ``[T, V]``, hidden states), or ``None`` after a failed capture (the
        caller then runs a plain pass)."""
        T, dev, S = ids.shape[1], ids.device, int(self.static_cache_len or 0)
        p = self._graphs.get((width, hidden))
        if p is None:
            p = self._graphs[(width, hidden)] = _PaddedPass.empty(width, S, self.dtype, dev, hidden)
        p.ids[:, :T].copy_(ids)
        pos = (position_ids.reshape(1, -1).to(dev) if position_ids is not None
               else torch.arange(cached, cached + T, device=dev)[None])  # [1, T]
        p.pos[:, :T].copy_(pos)
        p.pos[:, T:].copy_(pos[:, -1:].expand(1, width - T))  # padding: any valid position
        if attention_mask is not None:
            p.mask[:, :, :T].copy_(attention_mask)
        else:  # causal over the cached positions
            visible = torch.arange(S, device=dev)[None, :] <= torch.arange(cached, cached + T, device=dev)[:, None]
            p.mask[:, :, :T].copy_(tree_attention_mask(visible, self.dtype))
        p.mask[:, :, T:].zero_()  # padding queries see every slot; no real query sees them
        p.lens[0].fill_(cached)
        p.lens[1].fill_(cached + T)  # the padding's keys and values lie past the new length
        with sdpa_without_cudnn(dev):  # cuDNN attention re-plans at every new pass shape
            if dev.type != "cuda":
                logits, states = self._padded_call(p)
            else:
                if p.graph is None and not self._capture(p, cached):
                    return None
                p.graph.replay()
                logits, states = p.out
        return logits[:T], (tuple(h[:, :T] for h in states) if states is not None else None)

    def _capture(self, p: "_PaddedPass", cached: int) -> bool:
        """Capture ``p``'s pass as a CUDA graph (after two warm-up passes on a side stream, as
        ``torch.cuda.graphs`` asks; they compute the same pass). All graphs share one memory pool:
        passes run one at a time and their outputs are copied out before the next. On failure:
        warn once, restore the cache's length and run plain passes from now on (``False``)."""
        try:
            p.graph, p.out, self._graph_pool = capture_cuda_graph(lambda: self._padded_call(p), p.ids.device,
                                                                  self._graph_pool)
            return True
        except Exception as exc:  # noqa: BLE001 - any capture failure: plain eager passes from now on
            warnings.warn(f"{self.name}: capturing a CUDA graph of a {p.ids.shape[1]}-token pass failed "
                          f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); running eagerly",
                          RuntimeWarning, stacklevel=4)
            self._graphs = None
            crop_cache(self._cache, cached)
            return False

    def _reuse_prefix(self, context: Sequence[int]) -> int:
        """Roll the cache back to the longest common prefix of the cached ids and ``context[:-1]``
        (never into a tree region: tree nodes are not a sequence, so the region is dropped) and
        return its length, also kept as :attr:`last_start`."""
        common = common_prefix_length(self._cached_ids, context, self._tree_base)
        self.rollback(common)  # common <= the tree base: the tree region is cleared too
        self.last_start = common
        return common

    def logits_after(self, context: Sequence[int], extra: Sequence[int] = (), *,
                     hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Logits for the next token after ``context``, and after each prefix of ``extra``.

        Rolls the cache back to the longest common prefix of the cached ids and ``context[:-1]``,
        then runs the rest of ``context`` plus ``extra`` in one forward pass.

        Returns:
            float32 logits ``[1 + len(extra), V]``: row 0 predicts the token after ``context``,
            row i the token after ``context + extra[:i]``. With ``hidden_layers``,
            :attr:`last_hidden` holds the hidden states of the positions run, the first being
            :attr:`last_start`.

        Raises:
            ValueError: empty context, or context + extra longer than ``max_context``.
        """
        check_scoring_fits(self.name, self.max_context, context, len(extra))
        common = self._reuse_prefix(context)
        new = list(context[common:]) + list(extra)
        return self.forward(new, last=1 + len(extra), hidden_layers=hidden_layers)  # [1 + len(extra), V]

    # ----------------------------------------------------------------- tree attention
    def _clear_tree(self) -> None:
        self._tree_base = None
        self._tree_pos = []
        self._tree_anc = []
        self._scored = None

    @property
    def tree_base(self) -> int | None:
        """First cached index of the tree region (``None`` when the cache holds one plain sequence)."""
        return self._tree_base

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int], *,
                     hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Run ``tokens`` (``[T]``) as nodes of a token tree hanging off the cached sequence, in one pass.

        The first call after a plain sequence opens a *tree region* at ``base = len(cached_ids)``:
        positions ``< base`` are the committed sequence, seen by every node. ``parents[i]`` is the
        absolute cache index of token i's parent: ``base − 1`` (the last committed token; ``-1`` on
        an empty cache) or a tree position ``>= base`` (earlier call, or an earlier token of this
        call). Token i then attends to the committed sequence, its tree ancestors and itself
        (a float ``[1, 1, T, cached + T]`` mask of 0 / dtype-min, returned as-is by transformers'
        mask builders and added to the attention scores by both the SDPA and eager kernels), with
        position id = its parent's position id + 1 (committed positions: their index).

        Returns float32 logits ``[T, V]``. The cache then holds the tree nodes; cut it back with
        :meth:`keep_positions` or :meth:`rollback` (after :meth:`tree_logits`: :meth:`keep_tree_path`)
        before plain decoding.

        Raises:
            ValueError: empty ``tokens``, mismatched lengths, or a parent outside the allowed range.
        """
        T = len(tokens)
        if T == 0 or len(parents) != T:
            raise ValueError(f"forward_tree needs tokens and parents of one nonzero length, got {T} and {len(parents)}")
        C = len(self._cached_ids)
        if self._tree_base is None:
            self._tree_base = C
        base = self._tree_base
        pos: list[int] = []
        anc: list[list[int]] = []
        for i, par in enumerate(parents):
            par = int(par)
            if par == base - 1:
                pos.append(base)
                anc.append([C + i])
            elif base <= par < C + i:
                r = par - base
                ppos, panc = (self._tree_pos[r], self._tree_anc[r]) if par < C else (pos[par - C], anc[par - C])
                pos.append(ppos + 1)
                anc.append(panc + [C + i])
            else:
                raise ValueError(f"parent {par} of tree token {i} must be {base - 1} (the last committed position) "
                                 f"or a tree position in [{base}, {C + i})")
        if max(pos) >= self.max_context:
            raise ValueError(f"{self.name}: tree position {max(pos)} exceeds the model's context of {self.max_context}")
        dev = self.device
        # one host-to-device copy of the index lists; the mask is built on the model's device
        idx = torch.tensor([[i for i, a in enumerate(anc) for _ in a], [c for a in anc for c in a]],
                           dtype=torch.int64).to(dev, non_blocking=True)  # [2, Σ depth]
        width = self.static_cache_len if self.static_cache_len is not None else C + T  # the key axis
        visible = torch.zeros(T, width, dtype=torch.bool, device=dev)  # [T, cached + T] (or the static length)
        visible[:, :base] = True
        visible[idx[0], idx[1]] = True
        mask = tree_attention_mask(visible, self.dtype)  # [1, 1, T, cached + T]
        logits = self.forward(tokens, position_ids=torch.tensor(pos, dtype=torch.int64), attention_mask=mask,
                              hidden_layers=hidden_layers)
        self._tree_pos.extend(pos)
        self._tree_anc.extend(anc)
        return logits

    def tree_logits(self, context: Sequence[int], tree: TokenTree, *,
                    hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Logits after ``context`` and after every node of ``tree``, in ONE forward pass.

        Rolls the cache back to the longest common prefix of the cached ids and ``context[:-1]``,
        then runs the rest of ``context`` (causally) and the tree nodes (tree attention, depths and
        ancestors from ``tree.geometry``).

        Args:
            context: committed token ids (>= 1).
            tree: a :class:`~specot.geometry.TokenTree` (a :class:`~specot.drafting.DraftTree`):
                ``tokens [1 + N]`` root first (the root is ``context[-1]``) and its geometry.

        Returns:
            float32 logits ``[1 + N, V]``: row 0 predicts the token after ``context``, row ``j``
            the token after ``context`` + the root-to-node-j path. With ``hidden_layers``,
            :attr:`last_hidden` holds the hidden states of the positions run (context suffix from
            :attr:`last_start`, then the nodes). The nodes stay cached until :meth:`keep_tree_path`.

        Raises:
            ValueError: an empty context, or positions past the context.
        """
        if len(context) == 0:
            raise ValueError("context must hold at least one token")
        geometry = tree.geometry
        common = self._reuse_prefix(context)
        new_ctx = [int(t) for t in context[common:]]
        n0 = len(new_ctx)
        L = len(context)
        abs_par = [common - 1 + j for j in range(n0)]  # the context suffix: a chain
        abs_par += [L - 1 if par < 0 else L + par for par in geometry.parents]
        logits = self.forward_tree(new_ctx + [int(t) for t in tree.tokens[1:]], abs_par, hidden_layers=hidden_layers)
        self._scored = (L, geometry)
        return logits[n0 - 1:]

    @torch.inference_mode()
    def keep_tree_path(self, path: Sequence[int]) -> None:
        """Keep the context of the last :meth:`tree_logits` followed by the nodes ``path`` of its
        tree (node ``j`` is cached at ``len(context) - 1 + j``), compacted in place by
        :func:`specot.models.cache.keep_cache_positions` (the context is not copied). Closes the
        tree region: the cache is one plain sequence again.

        Raises:
            ValueError: ``path`` not a root path of that tree
                (:meth:`specot.geometry.TreeGeometry.check_rooted_path`), or a non-empty ``path``
                when no tree was scored.
        """
        if self._scored is None:
            if len(path):
                raise ValueError(f"keep_tree_path({list(path)}): no draft tree is in the cache (call tree_logits first)")
            return
        L, geometry = self._scored
        nodes = geometry.check_rooted_path(path)
        self.keep_positions(list(range(L)) + [L + i for i in nodes])

    def measure_pass_times(self, widths: Sequence[int], repeats: int = 8, context_len: int = 32) -> list[float]:
        """Median milliseconds of one pass over B new tokens after a fixed context of ``context_len``
        tokens (``logits_after(context, chain)`` with a chain of B − 1 tokens: logits on all B rows,
        as the verifier asks for), one per width in ``widths``; ``repeats`` timed passes per width
        after a warm-up round, the widths interleaved in every round
        (:func:`specot.models.timing.median_pass_times`). Times are :attr:`forward_time_s`
        deltas (CUDA events on CUDA). Empties the KV cache, as :meth:`reset` does;
        :attr:`forward_calls` and :attr:`forward_time_s` are left as they were.

        Raises:
            ValueError: a width below 1, ``repeats < 1``, or more positions than the model holds.
        """
        ws = [int(w) for w in widths]
        if not ws or min(ws) < 1 or isinstance(repeats, bool) or int(repeats) < 1:
            raise ValueError(f"widths must be >= 1 and repeats >= 1, got {ws} and {repeats!r}")
        n = max(1, min(int(context_len), self.max_context - max(ws)))
        context = [(3 + 7 * i) % self.vocab_size for i in range(n)]
        calls, spent = self.forward_calls, self.forward_time_s

        def run_pass(w: int) -> float:
            before = self.forward_time_s
            self.logits_after(context, [context[(i * 5) % n] for i in range(w - 1)])
            return self.forward_time_s - before

        try:
            self.reset()
            self.logits_after(context)
            med = median_pass_times(run_pass, list(dict.fromkeys(ws)), int(repeats))
        finally:
            self.reset()
            _ = self.forward_time_s  # resolve pending CUDA events before restoring the totals
            self.forward_calls, self._time_s = calls, spent
        return [round(med[w], 4) for w in ws]
