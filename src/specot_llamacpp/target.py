"""A target model over llama.cpp: the engine's target protocol (:class:`specot.models.protocol.TargetModel`)
on a llama.cpp context, through llama-cpp-python's low-level API (``llama_batch``, ``llama_decode``,
``llama_get_logits``, the ``llama_memory_seq_*`` KV-cache functions); no C of its own.

**One KV cache, several sequence ids.** The context is made with a unified KV cache
(``kv_unified``): a cell holds one key/value pair and the SET of sequence ids it belongs to, and a
query of sequence ``s`` at position ``p`` attends to exactly the cells holding ``s`` at positions
``<= p`` (llama.cpp masks by the query's first sequence id). The committed sequence lives under one
id, :attr:`LlamaCppTarget.main_seq`.

**A chain** (``logits_after``): the cache is cut back to the longest common prefix of the cached
ids and ``context[:-1]`` (``llama_memory_seq_rm``), and the rest of the context plus the draft
chain run in one ``llama_decode`` batch, with logits requested only for the last context token and
the draft tokens (``1 + γ`` rows, not the re-fed context).

**A draft tree** (``tree_logits``, handed the tree and its geometry) runs in one batch too, the
scheme of llama.cpp's own speculative example with several drafts: every root-to-leaf path gets a
sequence id (the first leaf keeps :attr:`main_seq`, the others take free ids, at most
``max_leaves``), the cached context is added to every path's id (``llama_memory_seq_cp``: no data is
copied in a unified cache, only the cells' id sets grow), and a node enters the batch with the ids
of all leaves below it at position ``len(context) + depth - 1``. A node's query (first id = one leaf
below it) then sees the context, its ancestors and itself, nothing else. Logits are asked for the
last context token and every node.

**Rollback without re-evaluation** (``keep_tree_path``, handed the accepted path's node indices):
the accepted path is a prefix of the path to some leaf ``s``; ``llama_memory_seq_keep(s)`` drops
every cell not on that path (the other leaves' nodes) and ``llama_memory_seq_rm(s, C + k, -1)`` the
path's unaccepted tail; ``s`` becomes :attr:`main_seq`. Nothing of the prefix is run again.

**Exactness.** The rows are llama.cpp's own logits for those prefixes. A pass over several tokens
uses other kernels (and another activation quantization block layout) than a one-token pass, so its
logits differ from the one-token pass's by small amounts; greedy speculative decoding on this backend
then equals this backend's greedy autoregressive decoding except at near-ties (docs/llamacpp.md and
``tests/llamacpp`` measure and bound it).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from specot.calibration import PassCostCurve, calibrate, calibration_enabled
from specot.models.chat import decode_tokens, encode_prompt
from specot.geometry import TokenTree, TreeGeometry, common_prefix_length
from specot.models.protocol import Capabilities, check_scoring_fits
from specot.models.timing import median_pass_times
from .auto import CAPABILITIES, PASS_COST

try:
    import llama_cpp as lc
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("the llama.cpp backend needs llama-cpp-python 0.3.36: run `make setup-llamacpp` "
                      "(builds and caches its wheel) or pip install llama-cpp-python==0.3.36") from exc

__all__ = ["LlamaCppTarget", "default_threads", "PASS_WAYS"]

#: The ways of running a pass that :meth:`LlamaCppTarget.time_passes` times.
PASS_WAYS = ("all", "last", "tree")

_BACKEND_READY = threading.Lock()
_backend_initialized = False


def default_threads() -> int:
    """The CPUs this process may run on (``os.sched_getaffinity``; ``os.cpu_count()`` elsewhere)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _init_backend() -> None:
    """Initialise llama.cpp once; its log lines (a hundred per model load) are shown only with
    ``SPECOT_VERBOSE_LOADING=1``, errors always."""
    global _backend_initialized
    with _BACKEND_READY:
        if not _backend_initialized:
            if not os.environ.get("SPECOT_VERBOSE_LOADING"):
                logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # llama_cpp's log callback reads it
            lc.llama_backend_init()
            _backend_initialized = True


class LlamaCppTarget:
    """A GGUF model in a llama.cpp context with a KV cache for one sequence (plus a draft tree's paths).

    Implements :class:`specot.models.protocol.TargetModel`, so :func:`specot.engine.decode`, every
    verifier and every drafter that needs only a tokenizer and a vocabulary (n-gram, suffix) run on it
    unchanged; module docstring for the cache scheme.

    Args:
        model_path: a ``.gguf`` file (any quantization llama.cpp reads; loaded as is, memory-mapped).
        tokenizer: the Hugging Face tokenizer of the model (text in and out, chat template), or ``None``.
        name: a label for messages and statistics.
        n_threads: threads for one-token and batched passes (default: :func:`default_threads`).
        n_ctx: KV-cache positions (default: the model's training context).
        n_batch: the most tokens one ``llama_decode`` call takes; longer prompts are fed in chunks.
        max_leaves: the most root-to-leaf paths of a draft tree (sequence ids ``max_leaves + 1`` are
            reserved; llama.cpp allows 256).
        eos_token_ids: tokens that end generation (default: the GGUF's EOS and the tokenizer's, the set
            the transformers backend uses; llama.cpp's other end-of-generation tokens are not added).
        flash_attn: llama.cpp's flash-attention kernels (off by default, as in llama-cpp-python's
            ``Llama``, so plain llama.cpp and this target run the same kernels).

    Attributes (the protocol's): ``backend`` (``"llamacpp"``), ``pass_cost`` (the labelled fallback
    linear cost model of a wide pass, :data:`specot_llamacpp.auto.PASS_COST`, fitted on another CPU:
    the suffix drafter prices with it only when :meth:`pass_cost_curve` has no measured curve),
    ``auto_calibrate`` (whether :meth:`pass_cost_curve` measures on first use; default True),
    ``name``, ``vocab_size`` (``V``), ``max_context``, ``tokenizer``,
    ``forward_calls`` (``llama_decode`` calls since :meth:`reset_stats`), ``last_start``,
    ``last_hidden`` (always ``None``: llama.cpp exposes only the last layer's output, see
    docs/llamacpp.md). ``main_seq``: the sequence id of the committed sequence.
    ``capabilities`` (:class:`~specot.models.protocol.Capabilities`): no hidden states, no static
    cache, at most ``n_batch - 1`` tree nodes and ``max_leaves`` leaves, a measured pass-cost curve.

    Raises:
        FileNotFoundError: ``model_path`` does not exist.
        ValueError: a count out of range.
        RuntimeError: llama.cpp could not load the model or make the context.
    """

    backend = "llamacpp"
    pass_cost = PASS_COST

    @property
    def build_info(self) -> str:
        """The llama.cpp build's CPU features (``llama_print_system_info``, e.g. ``AVX512 = 1``): a
        measured pass cost depends on them (AVX-512 kernels make wide passes cheaper)."""
        return lc.llama_print_system_info().decode("utf-8", "replace").strip()

    def __init__(self, model_path: str | os.PathLike[str], *, tokenizer: Any = None, name: str | None = None,
                 n_threads: int | None = None, n_ctx: int | None = None, n_batch: int = 512, max_leaves: int = 63,
                 eos_token_ids: Sequence[int] | None = None, flash_attn: bool = False) -> None:
        path = Path(model_path).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"no GGUF file at {str(path)!r}")
        for value, what, lo, hi in ((n_threads, "n_threads", 1, 1024), (n_ctx, "n_ctx", 2, 1 << 24),
                                    (n_batch, "n_batch", 1, 1 << 16), (max_leaves, "max_leaves", 1, 255)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi):
                raise ValueError(f"{what} must be an integer in [{lo}, {hi}], got {value!r}")
        _init_backend()
        self._model = self._ctx = self._batch = None
        mparams = lc.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self._model = lc.llama_model_load_from_file(str(path).encode("utf-8"), mparams)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {str(path)!r} (not a GGUF model it reads?)")
        self.path = path
        self.n_threads = int(n_threads or default_threads())
        train_ctx = int(lc.llama_model_n_ctx_train(self._model))
        self.max_context = int(n_ctx or train_ctx)
        self.n_batch = int(n_batch)
        self.max_leaves = int(max_leaves)
        self.flash_attn = bool(flash_attn)
        self._vocab = lc.llama_model_get_vocab(self._model)
        self.vocab_size = int(lc.llama_vocab_n_tokens(self._vocab))
        self._make_context(1)
        self.tokenizer = tokenizer
        self.name = name or path.stem
        eos = set(int(t) for t in eos_token_ids) if eos_token_ids is not None else self._default_eos()
        self._eos = eos
        self.forward_calls = 0
        self._time_s = 0.0
        self.last_start = 0
        self.last_hidden: Tensor | None = None
        self.auto_calibrate = True
        self._pass_cost_curve: PassCostCurve | None = None

    # ----------------------------------------------------------------- life cycle
    def _make_context(self, n_seq: int) -> None:
        """Make the llama.cpp context and batch for ``n_seq`` sequence ids, the cache empty.

        A context starts with one sequence id and is made again with ``max_leaves + 1`` at the first
        draft tree of more than one path (:meth:`_need_sequences`): chains, plain decoding and draft
        models never need a second id, and a context of 64 ids ran Qwen2.5-Coder-1.5B's one-token
        pass 1.6 % slower than one of 2 (69.8 against 68.7 ms, medians of 6 interleaved rounds of 32
        passes in one process; llama-cpp-python's single-sequence ``Llama`` 67.8 ms).

        Raises:
            RuntimeError: llama.cpp could not make the context.
        """
        cparams = lc.llama_context_default_params()
        cparams.n_ctx = self.max_context
        cparams.n_batch = cparams.n_ubatch = self.n_batch
        cparams.n_seq_max = n_seq
        cparams.n_threads = cparams.n_threads_batch = self.n_threads
        cparams.kv_unified = True  # one KV stream: sequence copies only grow the cells' id sets
        cparams.embeddings = False
        cparams.flash_attn_type = (lc.LLAMA_FLASH_ATTN_TYPE_ENABLED if self.flash_attn
                                   else lc.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        cparams.no_perf = True
        self._ctx = lc.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp could not make a context of {self.max_context} positions for "
                               f"{self.path.name}")
        self._mem = lc.llama_get_memory(self._ctx)
        self._batch = lc.llama_batch_init(self.n_batch, 0, n_seq)
        self._n_seq = n_seq
        self._logits_views: dict[tuple[int | None, int], np.ndarray] = {}  # (buffer address, rows) -> view
        self.main_seq = 0
        self._ids: list[int] = []  # token ids of the committed sequence's cells, in position order
        self._tree: _OpenTree | None = None

    def _need_sequences(self, n: int) -> None:
        """Room for ``n`` sequence ids: where the context has fewer, it is made again with
        ``max_leaves + 1`` (:meth:`_make_context`), once — the cache then starts empty, and the pass
        that asked decodes the committed context again (its common prefix with the cache is empty)."""
        if n <= self._n_seq:
            return
        lc.llama_batch_free(self._batch)
        self._batch = None
        lc.llama_free(self._ctx)
        self._ctx = None
        self._make_context(self.max_leaves + 1)

    def close(self) -> None:
        """Free the llama.cpp context, batch and model (also done when the object is collected)."""
        self._logits_views = {}  # views of the context's buffer: gone with it
        if self._batch is not None:
            lc.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            lc.llama_free(self._ctx)
            self._ctx = None
        if self._model:
            lc.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:  # pragma: no cover - interpreter shutdown order varies
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __repr__(self) -> str:
        return (f"LlamaCppTarget(name={self.name!r}, vocab_size={self.vocab_size}, max_context={self.max_context}, "
                f"n_threads={self.n_threads})")

    # ----------------------------------------------------------------- protocol properties
    @property
    def device(self) -> torch.device:
        """Always the CPU: logits come back as CPU tensors (llama.cpp's own device is its business)."""
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        """float32: the dtype of the logits (the weights keep their GGUF quantization)."""
        return torch.float32

    @property
    def capabilities(self) -> Capabilities:
        """What this target can do: :data:`CAPABILITIES` with its own tree limits (one batch of
        ``n_batch`` holds the root and the nodes; one sequence id per leaf)."""
        return dataclasses.replace(CAPABILITIES, max_tree_nodes=self.n_batch - 1, max_tree_leaves=self.max_leaves)

    @property
    def forward_time_s(self) -> float:
        """Seconds spent in ``llama_decode`` and reading its logits since :meth:`reset_stats`."""
        return self._time_s

    @property
    def eos_token_ids(self) -> set[int]:
        return set(self._eos)

    @property
    def cached_ids(self) -> list[int]:
        """Token ids of the committed sequence in the cache (a copy; tree nodes excluded)."""
        return list(self._ids)

    def _default_eos(self) -> set[int]:
        ids = {int(lc.llama_vocab_eos(self._vocab))}  # as the transformers backend: config + tokenizer EOS
        tok_eos = getattr(self.tokenizer, "eos_token_id", None)
        if isinstance(tok_eos, int):
            ids.add(tok_eos)
        return {i for i in ids if 0 <= i < self.vocab_size}

    def encode_prompt(self, prompt: str, *, chat: bool | None = None, system: str | None = None) -> list[int]:
        """Token ids of ``prompt`` with the Hugging Face tokenizer (:func:`specot.models.chat.encode_prompt`)."""
        return encode_prompt(self.tokenizer, prompt, chat=chat, system=system, name=self.name)

    def decode(self, ids: Sequence[int]) -> str:
        return decode_tokens(self.tokenizer, ids)

    def tokenize_native(self, text: str, *, add_special: bool = False, parse_special: bool = True) -> list[int]:
        """llama.cpp's own tokenization of ``text`` (``llama_tokenize``), to check it against the
        Hugging Face tokenizer's."""
        data = text.encode("utf-8")
        cap = len(data) + 16
        buf = (lc.llama_token * cap)()
        n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            buf = (lc.llama_token * cap)()
            n = lc.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        return [int(buf[i]) for i in range(n)]

    # ----------------------------------------------------------------- cache
    def reset(self) -> None:
        """Empty the KV cache (a new sequence starts). The cells are freed, their data left: an empty
        cell is masked out of every later pass, and zeroing the buffers (``data=True``) cost ~3.5 ms of
        memset for an 8,192-position cache — half a decode step of every generation's first token."""
        lc.llama_memory_clear(self._mem, False)
        self.main_seq = 0
        self._ids = []
        self._tree = None

    def reset_stats(self) -> None:
        self.forward_calls = 0
        self._time_s = 0.0

    def rollback(self, length: int) -> None:
        """Keep the first ``length`` positions of the committed sequence (closes any open tree).

        Raises:
            ValueError: ``length`` outside ``[0, cached]``.
        """
        if not 0 <= length <= len(self._ids):
            raise ValueError(f"rollback length {length} outside [0, {len(self._ids)}]")
        self._close_tree()
        if length < len(self._ids):
            lc.llama_memory_seq_rm(self._mem, self.main_seq, length, -1)
            del self._ids[length:]

    def _close_tree(self) -> None:
        """Drop an open tree's nodes (no path kept): every path id but the main one leaves the cache
        and the main path is cut at the tree's base."""
        tree = self._tree
        if tree is None:
            return
        for s in tree.leaf_seqs:
            if s != self.main_seq:
                lc.llama_memory_seq_rm(self._mem, s, -1, -1)
        lc.llama_memory_seq_rm(self._mem, self.main_seq, tree.base, -1)
        self._tree = None

    def _reuse_prefix(self, context: Sequence[int]) -> int:
        """Cut the cache to the longest common prefix of the cached ids and ``context[:-1]``; its length."""
        self._close_tree()
        common = common_prefix_length(self._ids, context)
        self.rollback(common)
        self.last_start = common
        return common

    # ----------------------------------------------------------------- passes
    def _fill(self, tokens: Sequence[int], pos: Sequence[int], seqs: Sequence[Sequence[int]] | None,
              want: Sequence[bool]) -> None:
        """Write one batch: ``seqs[i]`` the sequence ids of token i (``None``: all in :attr:`main_seq`)."""
        b = self._batch
        n = len(tokens)
        b.n_tokens = n
        tok, p, nseq, sid, lg = b.token, b.pos, b.n_seq_id, b.seq_id, b.logits
        main = self.main_seq
        for i in range(n):
            tok[i] = int(tokens[i])
            p[i] = int(pos[i])
            lg[i] = 1 if want[i] else 0
            if seqs is None:
                nseq[i] = 1
                sid[i][0] = main
            else:
                ss = seqs[i]
                nseq[i] = len(ss)
                row = sid[i]
                for j, s in enumerate(ss):
                    row[j] = s

    def _decode(self, tokens: Sequence[int], pos: Sequence[int], seqs: Sequence[Sequence[int]] | None,
                want: Sequence[bool]) -> np.ndarray:
        """One ``llama_decode`` call (at most :attr:`n_batch` tokens); the logits of the tokens with
        ``want`` set, in batch order, as a float32 array ``[sum(want), V]`` (a copy)."""
        self._fill(tokens, pos, seqs, want)
        rc = lc.llama_decode(self._ctx, self._batch)
        self.forward_calls += 1
        if rc != 0:
            raise RuntimeError(f"{self.name}: llama_decode failed with code {rc} on a batch of {len(tokens)} tokens "
                               f"(1: no KV slot left in {self.max_context} positions; -1: an invalid batch)")
        n_out = sum(1 for w in want if w)
        if n_out == 0:
            return np.empty((0, self.vocab_size), dtype=np.float32)
        ptr = lc.llama_get_logits(self._ctx)
        # a numpy view of llama.cpp's logits buffer, made once per buffer address and row count (making
        # it costs ~30 us, a plain step's largest item outside the pass); the buffer moves when it grows
        where = (ctypes.cast(ptr, ctypes.c_void_p).value, n_out)
        view = self._logits_views.get(where)
        if view is None:
            if len(self._logits_views) > 64:
                self._logits_views.clear()
            view = self._logits_views[where] = np.ctypeslib.as_array(ptr, shape=(n_out, self.vocab_size))
        return view.copy()

    def _run_chain(self, tokens: Sequence[int], start: int, n_logits: int) -> Tensor:
        """Append ``tokens`` to the committed sequence at positions ``start..``; logits of the last
        ``n_logits`` tokens ``[n_logits, V]``. Chunks of :attr:`n_batch` tokens; only the last chunk
        asks for logits, so ``n_logits`` may not exceed it."""
        T = len(tokens)
        if n_logits > min(T, self.n_batch):
            raise ValueError(f"{self.name}: {n_logits} logit rows asked for a pass of {T} tokens (at most "
                             f"n_batch = {self.n_batch} rows per pass)")
        t0 = time.perf_counter()
        out = None
        cut = max(0, T - self.n_batch)
        for lo in list(range(0, cut, self.n_batch)) + [cut]:
            hi = min(lo + self.n_batch, cut) if lo < cut else T
            chunk = tokens[lo:hi]
            want = [hi == T and i >= T - n_logits for i in range(lo, hi)]
            out = self._decode(chunk, range(start + lo, start + hi), None, want)
        self._ids.extend(int(t) for t in tokens)
        self._time_s += time.perf_counter() - t0
        return torch.from_numpy(out)

    def forward(self, tokens: Sequence[int], *, last: int | None = None) -> Tensor:
        """Run ``tokens [T]`` after the cached sequence; float32 logits ``[T, V]`` (``[last, V]``:
        only the last ``last`` rows are computed). The draft-model side of the protocol."""
        T = len(tokens)
        if T == 0:
            raise ValueError("forward needs at least one token")
        self._close_tree()
        if len(self._ids) + T > self.max_context:
            raise ValueError(f"{self.name}: {len(self._ids) + T} positions exceed the context of {self.max_context}")
        return self._run_chain(tokens, len(self._ids), T if last is None else int(last))

    def logits_after(self, context: Sequence[int], extra: Sequence[int] = (), *,
                     hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Logits for the token after ``context`` and after each prefix of ``extra`` (a draft chain),
        in one ``llama_decode`` batch (chunked only for a prompt longer than :attr:`n_batch`).

        Returns:
            float32 logits ``[1 + len(extra), V]``: row 0 after ``context``, row i after
            ``context + extra[:i]``. The chain stays in the cache; the next call's common-prefix
            rule cuts what was not committed.

        Raises:
            ValueError: empty context, more positions than the context holds, ``hidden_layers``
                asked for (llama.cpp gives no per-layer hidden states here).
        """
        if hidden_layers is not None:
            CAPABILITIES.check_hidden_states(f"{self.name}: a pass with hidden_layers", "llamacpp")
        check_scoring_fits(self.name, self.max_context, context, len(extra))
        common = self._reuse_prefix(context)
        new = [int(t) for t in context[common:]] + [int(t) for t in extra]
        return self._run_chain(new, common, 1 + len(extra))

    def tree_logits(self, context: Sequence[int], tree: TokenTree, *,
                    hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Logits after ``context`` and after every node of ``tree``, in one ``llama_decode`` batch
        (a context suffix longer than one token, i.e. a prompt, is fed first in its own call).

        Args:
            context: committed token ids (>= 1).
            tree: a :class:`~specot.geometry.TokenTree` (a :class:`~specot.drafting.DraftTree`):
                ``tokens [1 + N]`` root first (the root is ``context[-1]``) and its geometry, whose
                depths and leaves place the nodes (module docstring).

        Returns:
            float32 logits ``[1 + N, V]``: row 0 after ``context``, row ``j`` after ``context`` +
            the root-to-node-j path. The nodes stay cached until :meth:`keep_tree_path`.

        Raises:
            ValueError: empty context, more leaves than :attr:`max_leaves`, more nodes than one
                batch holds, or positions past the context.
        """
        if hidden_layers is not None:
            CAPABILITIES.check_hidden_states(f"{self.name}: a pass with hidden_layers", "llamacpp")
        if len(context) == 0:
            raise ValueError("context must hold at least one token")
        shape = tree.geometry
        N = shape.size
        if N == 0:
            return self.logits_after(context)
        if shape.n_leaves > self.max_leaves:
            raise ValueError(f"a draft tree with {shape.n_leaves} leaves exceeds max_leaves = {self.max_leaves} of "
                             "this llama.cpp target (one sequence id per root-to-leaf path)")
        C = len(context)
        if C + shape.depth > self.max_context:
            raise ValueError(f"{self.name}: tree position {C + shape.depth - 1} exceeds the context of {self.max_context}")
        if N + 1 > self.n_batch:
            raise ValueError(f"{self.name}: a tree of {N} nodes does not fit one batch of n_batch = {self.n_batch}")
        self._need_sequences(shape.n_leaves)
        common = self._reuse_prefix(context)
        if C - 1 > common:  # a prompt: its head runs first, in the committed sequence only
            self._run_chain([int(t) for t in context[common:C - 1]], common, 0)
        t0 = time.perf_counter()
        seq_ids = self._leaf_seq_ids(shape.n_leaves)
        for s in seq_ids[1:]:
            lc.llama_memory_seq_cp(self._mem, self.main_seq, s, -1, -1)
        node_seqs = [[seq_ids[j] for j in leaves] for leaves in shape.leaves_below]
        toks = [int(context[-1])] + [int(t) for t in tree.tokens[1:]]
        pos = [C - 1] + shape.positions(C)
        rows = self._decode(toks, pos, [seq_ids] + node_seqs, [True] * (N + 1))
        self._ids.append(int(context[-1]))
        self._tree = _OpenTree(base=C, leaf_seqs=seq_ids, shape=shape, tokens=toks)
        self._time_s += time.perf_counter() - t0
        return torch.from_numpy(rows)

    def _leaf_seq_ids(self, n: int) -> list[int]:
        """``n`` sequence ids for a tree's paths: the main one first, then the lowest free ones."""
        others = [s for s in range(self.max_leaves + 1) if s != self.main_seq]
        return [self.main_seq] + others[:n - 1]

    def keep_tree_path(self, path: Sequence[int]) -> None:
        """Keep the context of the last :meth:`tree_logits` followed by the nodes ``path`` of its
        tree (node indices, a child of the root first); every other node leaves the cache (module
        docstring: ``seq_keep`` + ``seq_rm``).

        Raises:
            ValueError: ``path`` not a root path of that tree
                (:meth:`specot.geometry.TreeGeometry.check_rooted_path`), or a non-empty ``path``
                when no tree is open.
        """
        tree = self._tree
        if tree is None:
            if len(path):
                raise ValueError(f"keep_tree_path({list(path)}): no draft tree is in the cache (call tree_logits first)")
            return
        nodes = tree.shape.check_rooted_path(path)
        C = tree.base
        s = tree.leaf_seqs[tree.shape.leaves_below[nodes[-1]][0]] if nodes else self.main_seq
        lc.llama_memory_seq_keep(self._mem, s)  # cells off the path to leaf s leave; the others hold s only
        lc.llama_memory_seq_rm(self._mem, s, C + len(nodes), -1)
        self.main_seq = s
        self._ids.extend(tree.tokens[int(j)] for j in path)
        self._tree = None


    # ----------------------------------------------------------------- pass cost
    def measure_pass_times(self, widths: Sequence[int], repeats: int = 8) -> list[float]:
        """Median milliseconds of one ``llama_decode`` pass over B new tokens after a fixed context of
        :data:`CALIBRATION_CONTEXT` tokens, logits on all B rows (what the verifier asks for), one per
        width in ``widths`` (:meth:`time_passes`, its ``all`` way; ``repeats`` timed passes per width
        after a warm-up round). Empties the KV cache, as :meth:`reset` does; :attr:`forward_calls`
        and :attr:`forward_time_s` are left as they were. About 2 s for the default widths of
        :func:`specot.calibration.calibrate` (1–9) at 8 repeats where t(1) ≈ 7 ms.

        Raises:
            ValueError: a width below 1 or above ``n_batch``, ``repeats < 1``.
        """
        if not widths:
            raise ValueError("measure_pass_times needs at least one width")
        n = max(1, min(CALIBRATION_CONTEXT, self.max_context - max(int(w) for w in widths)))
        context = [(1000 + 37 * i) % self.vocab_size for i in range(n)]
        calls, spent = self.forward_calls, self._time_s
        try:
            med = self.time_passes(context, [int(w) for w in widths], int(repeats), ways=("all",))
        finally:
            self.reset()
            self.forward_calls, self._time_s = calls, spent
        return [round(med[("all", int(w))], 4) for w in widths]

    def time_passes(self, context: Sequence[int], widths: Sequence[int], repeats: int = 15,
                    ways: Sequence[str] = PASS_WAYS) -> dict[tuple[str, int], float]:
        """Median milliseconds of one ``llama_decode`` pass of each width B after ``context``, for each
        of ``ways`` (:data:`PASS_WAYS`): ``"all"``, logits on all B rows (a chain verified);
        ``"last"``, logits on the last row only (llama.cpp's own prompt pass); ``"tree"``, logits on
        all rows with the B − 1 nodes as two branches under sequence ids (a draft tree's mask).
        ``{(way, B): ms}``, by :func:`specot.models.timing.median_pass_times` (the widths and ways
        interleaved in every round, round 0 a warm-up); the context is cut back after every pass.
        Leaves the cache holding ``context[:-1]``.

        Raises:
            ValueError: an empty context, a width below 1 or above ``n_batch``, ``repeats < 1``, an
                unknown way.
        """
        if not context:
            raise ValueError("timing passes needs a context of at least one token")
        if any(w < 1 or w > self.n_batch for w in widths):
            raise ValueError(f"widths must lie in [1, {self.n_batch}], got {list(widths)}")
        if any(k not in PASS_WAYS for k in ways):
            raise ValueError(f"ways must be among {PASS_WAYS}, got {list(ways)}")
        if "tree" in ways:
            self._need_sequences(3)  # the two branches' ids beside the main one
        self.reset()
        self.logits_after(list(context))  # the context in the cache; its last token is re-fed by every pass
        C = len(context) - 1
        self.rollback(C)
        last = int(context[-1])
        toks = {w: [last] + [int(context[(i * 7) % len(context)]) for i in range(w - 1)] for w in widths}
        return median_pass_times(lambda kind: self._timed_pass(C, toks[kind[1]], *kind),
                                 [(k, w) for w in widths for k in ways], repeats)

    def _timed_pass(self, context_len: int, tokens: Sequence[int], way: str, width: int) -> float:
        """One pass of ``tokens`` (``width`` of them) run the ``way`` way after the first
        ``context_len`` cached positions; seconds. The cache is cut back to the context afterwards."""
        seqs = _two_branch_seqs(self.main_seq, width) if way == "tree" else None
        want = [False] * (width - 1) + [True] if way == "last" else [True] * width
        if seqs is not None:
            for s in {s for ss in seqs for s in ss} - {self.main_seq}:
                lc.llama_memory_seq_cp(self._mem, self.main_seq, s, -1, -1)
        offsets = _two_branch_offsets(width) if seqs is not None else range(width)
        t0 = time.perf_counter()
        self._decode(tokens, [context_len + d for d in offsets], seqs, want)
        dt = time.perf_counter() - t0
        for s in ({s for ss in seqs for s in ss} if seqs is not None else set()) - {self.main_seq}:
            lc.llama_memory_seq_rm(self._mem, s, -1, -1)
        lc.llama_memory_seq_rm(self._mem, self.main_seq, context_len, -1)
        return dt

    def pass_cost_curve(self) -> PassCostCurve | None:
        """The measured pass-cost curve r(B) of this target on this machine, which the suffix drafter
        prices its budget with (:func:`specot.plan.kinds.suffix.pass_cost`): calibrated on the first
        call (:func:`specot.calibration.calibrate`: read from specot's cache, else measured in about
        2 s and stored), then kept. ``None`` — the drafter then prices with the labelled fallback
        :attr:`pass_cost` — when :attr:`auto_calibrate` is False, ``SPECOT_CALIBRATE=0``, or the
        calibration failed (one warning)."""
        if self._pass_cost_curve is None and self.auto_calibrate and calibration_enabled():
            try:
                self._pass_cost_curve = calibrate(self)
            except (RuntimeError, OSError, ValueError) as exc:
                self.auto_calibrate = False
                warnings.warn(f"{self.name}: pass-cost calibration failed ({' '.join(str(exc).split())}); drafts "
                              f"are priced with the fallback PASS_COST {PASS_COST}, fitted on another CPU",
                              stacklevel=2)
        return self._pass_cost_curve


#: Tokens of the fixed context before every pass that :meth:`LlamaCppTarget.measure_pass_times` times.
CALIBRATION_CONTEXT = 64


def _two_branch_seqs(main: int, n: int) -> list[list[int]]:
    """Sequence ids of a timed tree pass of ``n`` tokens: the root (both paths), then two branches."""
    other = 1 if main != 1 else 2
    if n == 1:
        return [[main]]
    a = n // 2  # nodes of the first branch
    return [[main, other]] + [[main]] * a + [[other]] * (n - 1 - a)


def _two_branch_offsets(n: int) -> list[int]:
    """Position offsets of :func:`_two_branch_seqs`'s tokens: the root at 0, each branch's nodes at 1, 2, ..."""
    a = n // 2
    return [0] + list(range(1, a + 1)) + list(range(1, n - a))


class _OpenTree:
    """The draft tree last scored: its base (``len(context)``), path ids, shape and tokens (root first)."""

    def __init__(self, base: int, leaf_seqs: list[int], shape: TreeGeometry, tokens: list[int]) -> None:
        self.base = base
        self.leaf_seqs = leaf_seqs
        self.shape = shape
        self.tokens = tokens

