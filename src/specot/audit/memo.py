"""The audit's fast path: a model whose logits are memoized by token prefix.

An audit draws thousands of samples of ``k ≤ 4`` tokens after ONE prompt, so the same few
hundred prefixes are scored again and again. The logits after a prefix are a function of the
prefix (the :class:`~specot.models.protocol.TargetModel` contract), so :class:`MemoModel` keeps
them, keyed by the full token tuple, and runs the real model only for a prefix it has not seen
(the real model's own passes and kernels, its prefix cache reused). The engine's whole loop —
drafting from q with the engine's generator, the verifier, the walk, the commit and the
drafter's update — runs unchanged on every sample; what a memoized run does NOT exercise is the
real model's KV-cache rollback (the model behind it sees only the misses). ``specot audit
--no-memo`` runs the real models on every sample (slower) to cover it.

**One row, one value.** An audit draws more rows than it keeps: a row dropped from memory and
asked for again is computed again, and must come out as the engine first saw it. llama.cpp's CPU
kernels give a pass of ONE token other logits than a pass of several (on SmolLM2 Q4_1, up to ~1
nat apart; ~0.01 total variation at T = 1; passes of 2, 3, ... 33 tokens agree bit for bit), so
every pass of a :class:`MemoModel` runs at least two tokens (the context's last token again, with
the new one): every row and every cached key and value come from the batched kernels.

A :class:`MemoModel` keeps a virtual cache (the token ids of the committed chain and the paths of
an open tree) so that it speaks both roles: the target protocol (``logits_after``,
``tree_logits``, ``keep_tree_path``) and what a :class:`~specot.drafting.ModelDrafter`
asks of its draft model (``forward``, ``forward_tree``, ``keep_positions``, ``cached_ids``).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

import torch
from torch import Tensor

from ..drafting.base import Drafter
from ..geometry import TokenTree
from ..drafting.model import ModelDrafter

__all__ = ["MemoModel", "memo_drafter"]


class MemoModel:
    """Logits memoized by token prefix in front of a real model (module docstring).

    Args:
        real: a target (:class:`~specot.models.CausalLM`, a llama.cpp target, any
            :class:`~specot.models.protocol.TargetModel`).
        max_rows: the most rows kept (least recently used dropped; a row is ``V`` float32, 196 KiB
            for SmolLM2's 49 152 tokens).

    Attributes:
        hits, misses: rows served from memory / computed by the real model.
        forward_calls: real passes since :meth:`reset_stats` (the engine's statistics).
    """

    def __init__(self, real: Any, max_rows: int = 4096) -> None:
        self.real = real
        self.max_rows = max_rows
        self._rows: OrderedDict[tuple[int, ...], Tensor] = OrderedDict()
        self._ids: list[int] = []
        self._extra: list[tuple[int, ...]] = []  # open tree nodes' full paths, after ``_ids``
        self._scored: Any = None  # the TreeGeometry of the last tree_logits, while its nodes are open
        self.hits = self.misses = 0
        self.forward_calls = 0
        self.last_start = 0
        self.last_hidden = None

    def __getattr__(self, name: str) -> Any:  # name, vocab_size, tokenizer, device, eos_token_ids, ...
        if name == "real":
            raise AttributeError(name)
        return getattr(self.real, name)

    # ------------------------------------------------------------------ memory
    def _get(self, key: tuple[int, ...]) -> Tensor | None:
        row = self._rows.get(key)
        if row is not None:
            self._rows.move_to_end(key)
            self.hits += 1
        return row

    def _put(self, key: tuple[int, ...], row: Tensor) -> None:
        self._rows[key] = row.detach().clone()
        self._rows.move_to_end(key)
        while len(self._rows) > self.max_rows:
            self._rows.popitem(last=False)

    def rows(self, keys: Sequence[tuple[int, ...]]) -> Tensor:
        """Logits ``[len(keys), V]`` after each token tuple (the real model for the missing ones:
        one chain pass when they are the prefixes of the longest key, else one pass each)."""
        out = [self._get(k) for k in keys]
        missing = [k for k, r in zip(keys, out) if r is None]
        if missing:
            self.misses += len(missing)
            fresh: dict[tuple[int, ...], Tensor] = {}  # read from here: a small memory may drop them at once
            longest = max(missing, key=len)
            if all(longest[:len(k)] == k for k in missing) and len(missing) > 1:
                base = min(len(k) for k in missing)
                got = self.real.logits_after(list(longest[:base]), list(longest[base:]))  # [1 + extra, V]
                self.forward_calls += 1
                for i in range(got.shape[0]):
                    fresh[longest[:base + i]] = got[i]
            else:
                for k in missing:
                    fresh[k] = self._two_token_pass(k)[-1]
                    self.forward_calls += 1
            for k, row in fresh.items():
                self._put(k, row)
            out = [r if r is not None else fresh[k] for k, r in zip(keys, out)]
        return torch.stack(out)

    def _two_token_pass(self, key: tuple[int, ...]) -> Tensor:
        """The real model's logits after ``key[:-1]`` and after ``key`` ``[2, V]``, in a pass of at
        least two tokens (module docstring: one row, one value)."""
        if len(key) < 2:
            return self.real.logits_after(list(key))
        return self.real.logits_after(list(key[:-1]), [key[-1]])

    # ------------------------------------------------------------ target side
    def reset(self) -> None:
        """Empty the virtual cache (the memory of rows stays)."""
        self._ids, self._extra, self._scored = [], [], None

    def reset_stats(self) -> None:
        self.forward_calls = 0

    @property
    def forward_time_s(self) -> float:
        return 0.0

    def logits_after(self, context: Sequence[int], extra: Sequence[int] = (), *,
                     hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Logits ``[1 + len(extra), V]`` after ``context`` and each prefix of ``extra``."""
        if hidden_layers is not None:
            raise ValueError("a memoized model keeps no hidden states")
        ids = [int(t) for t in context] + [int(t) for t in extra]
        n = len(context)
        self._ids, self._extra, self._scored = ids, [], None
        return self.rows([tuple(ids[:n + i]) for i in range(len(extra) + 1)])

    def tree_logits(self, context: Sequence[int], tree: TokenTree, *, hidden_layers: Sequence[int] | None = None) -> Tensor:
        """Logits ``[1 + N, V]`` after ``context`` and after every node of ``tree`` (a
        :class:`~specot.geometry.TokenTree`, root first)."""
        if hidden_layers is not None:
            raise ValueError("a memoized model keeps no hidden states")
        ctx = tuple(int(t) for t in context)
        paths: list[tuple[int, ...]] = []
        for tok, par in zip(tree.tokens[1:], tree.geometry.parents):
            paths.append((ctx if par < 0 else paths[par]) + (int(tok),))
        self._ids, self._extra = list(ctx), paths
        self._scored = tree.geometry
        keys = [ctx] + paths
        if any(k not in self._rows for k in keys):  # one real tree pass for the whole tree, its nodes then dropped
            self._two_token_pass(ctx)  # the context's tail in a batched pass, not alone before the tree
            self.forward_calls += 1
            got = self.real.tree_logits(list(ctx), tree)
            self.real.keep_tree_path([])
            self.forward_calls += 1
            self.misses += sum(k not in self._rows for k in keys)
            for key, row in zip(keys, got):
                if key not in self._rows:
                    self._put(key, row)
        return self.rows(keys)

    def keep_tree_path(self, path: Sequence[int]) -> None:
        """Keep the context of the last :meth:`tree_logits` and then the nodes ``path`` of its
        tree, as a chain.

        Raises:
            ValueError: ``path`` not a root path of that tree, or no tree scored.
        """
        if self._scored is None:
            if len(path):
                raise ValueError(f"keep_tree_path({list(path)}): no draft tree was scored (call tree_logits first)")
            return
        nodes = self._scored.check_rooted_path(path)
        self._ids = self._ids + [self._extra[i][-1] for i in nodes]
        self._extra, self._scored = [], None

    # ------------------------------------------------------------- draft side
    @property
    def cached_ids(self) -> list[int]:
        """The virtual cache's token ids (chain, then open tree nodes)."""
        return self._ids + [p[-1] for p in self._extra]

    def _path(self, pos: int) -> tuple[int, ...]:
        return tuple(self._ids[:pos + 1]) if pos < len(self._ids) else self._extra[pos - len(self._ids)]

    def forward(self, tokens: Sequence[int] | Tensor, **_: Any) -> Tensor:
        """Logits ``[T, V]`` after each of ``tokens`` appended to the chain."""
        toks = [int(t) for t in (tokens.reshape(-1).tolist() if isinstance(tokens, Tensor) else tokens)]
        base = self.cached_ids
        self._ids, self._extra, self._scored = base + toks, [], None
        n = len(base)
        return self.rows([tuple(self._ids[:n + i + 1]) for i in range(len(toks))])

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int], **_: Any) -> Tensor:
        """Logits ``[N, V]`` after tree nodes appended to the cache (``parents``: cache indices)."""
        paths = [self._path(int(par)) + (int(tok),) for tok, par in zip(tokens, parents)]
        self._extra = self._extra + paths
        self._scored = None
        return self.rows(paths)

    def keep_positions(self, keep: Sequence[int]) -> None:
        """Keep the cached positions ``keep`` (increasing) of the virtual cache, as a chain."""
        cached = self.cached_ids
        self._ids, self._extra, self._scored = [cached[int(i)] for i in keep], [], None


class _MemoModelDrafter(ModelDrafter):
    """specot's :class:`ModelDrafter` (its chain and tree drafting, unchanged) over a
    :class:`MemoModel` of its draft model."""

    def __init__(self, memo: MemoModel, like: ModelDrafter) -> None:  # noqa: D107 (ModelDrafter's checks skipped)
        Drafter.__init__(self)
        self._init_chains(memo, like.pricing, like.width)  # the same chains as ``like``'s
        self.name = like.name
        self._draft_pos = {}


def memo_drafter(drafter: ModelDrafter, max_rows: int = 4096) -> ModelDrafter:
    """``drafter`` with its draft model's logits memoized by prefix (:class:`MemoModel`).

    Raises:
        TypeError: ``drafter`` is not a :class:`~specot.drafting.ModelDrafter`.
    """
    if not isinstance(drafter, ModelDrafter):
        raise TypeError(f"only a model drafter can be memoized, got {type(drafter).__name__}")
    return _MemoModelDrafter(MemoModel(drafter.model, max_rows), drafter)
