"""The target protocol: what the one decoding loop needs from a target model.

The loop (:func:`specot.engine.decode`) never touches a model's internals. It scores the committed
context plus a draft tree in ONE pass, commits the accepted path and lets the target roll its KV
cache back. Any backend that implements :class:`TargetModel` runs every drafter and every verifier
unchanged: :class:`specot.models.CausalLM` (transformers, the reference backend) implements it, and
so can a llama.cpp context or a serving engine's runner.

Contract of one iteration (``C`` committed tokens in ``context``, a draft tree of ``N`` nodes):

1. ``logits_after(context, chain)`` for a chain (``N = len(chain)``, possibly 0), or
   ``tree_logits(context, tree)`` for a tree (a :class:`~specot.geometry.TokenTree`: the
   :class:`~specot.drafting.DraftTree` itself, with its :class:`~specot.geometry.TreeGeometry`
   computed once), returns float32 logits ``[1 + N, V]`` on :attr:`device`: row 0 predicts the
   token after ``context``, row ``j`` the token after ``context`` + the root-to-node-j path (node
   ``j`` of the tree, root first). The backend reuses whatever prefix of ``context`` it has cached
   (the longest common prefix) and runs the rest plus the nodes.
2. For a tree, ``keep_tree_path(path)`` keeps the context followed by the accepted path — node
   indices of that tree, a child of the root first (the verifier's path as it comes); the other
   nodes leave the cache. Where a node sits in the cache is the backend's business. A chain needs
   no call: the next pass's common-prefix rule cuts it back.

Adding a backend is one class with these methods (docs/engine.md, "Adding a backend", runs a toy
one through :func:`specot.generate`).

Exactness: the rows must be the target's logits for those prefixes (the backend's own kernels; a
multi-token pass may round differently from a one-token pass, which the contract allows only at
near-ties in bf16/fp16 or quantized backends).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import torch
from torch import Tensor

from ..geometry import TokenTree

__all__ = ["TargetModel", "Capabilities", "capabilities_of", "check_scoring_fits"]


@dataclass(frozen=True)
class Capabilities:
    """What a target backend can do, declared once: by its :class:`~specot.plan.Backend` entry
    (before any load) and by a loaded target's ``capabilities`` attribute (where it knows more).
    The plan reads it to refuse, in one line, what the backend cannot run.

    Attributes:
        hidden_states: whether a pass can return per-layer hidden states (``hidden_layers``; EAGLE
            heads read them).
        hidden_layers: the number of layers whose hidden states can be asked for (indices
            ``0..hidden_layers``, the embeddings first), or ``None`` when not known.
        static_cache: whether the target can run on a static KV cache (``use_static_cache``).
        cuda_graphs: whether that cache's passes can replay as captured CUDA graphs on CUDA (the
            architecture supports it).
        graph_widths: the pass widths (new tokens) such a static cache pads a pass to, increasing.
        max_tree_nodes: the most draft-tree nodes one pass scores, or ``None`` (no own limit).
        max_tree_leaves: the most root-to-leaf paths of one draft tree, or ``None`` (no own limit).
        dtypes: the torch dtypes it loads a target in (``()``: not declared).
        pass_cost: whether the target measures its own pass-cost curve (``pass_cost_curve``).
    """

    hidden_states: bool = False
    hidden_layers: int | None = None
    static_cache: bool = False
    cuda_graphs: bool = False
    graph_widths: tuple[int, ...] = ()
    max_tree_nodes: int | None = None
    max_tree_leaves: int | None = None
    dtypes: tuple[torch.dtype, ...] = ()
    pass_cost: bool = False

    def check_hidden_states(self, reader: str, backend: str) -> None:
        """Refuse ``reader`` (e.g. ``"draft 'eagle'"``), which reads the target's hidden states,
        when this backend has none.

        Raises:
            ValueError: the backend exposes no hidden states (the one message).
        """
        if not self.hidden_states:
            raise ValueError(f"{reader} reads the target's hidden states, which the {backend} backend does not "
                             "expose; use backend 'transformers', or draft 'ngram' / 'suffix'")


def capabilities_of(target: Any) -> Capabilities:
    """A loaded target's declared :class:`Capabilities` (its ``capabilities`` attribute); a target
    that declares none gets the defaults: no hidden states, no static cache, no pass-cost curve."""
    caps = getattr(target, "capabilities", None)
    return caps if isinstance(caps, Capabilities) else Capabilities()


def check_scoring_fits(name: str, max_context: int, context: Sequence[int], n_new: int) -> None:
    """The checks every backend makes before scoring ``n_new`` draft tokens after ``context``.

    Raises:
        ValueError: an empty context, or more positions than the target's context holds.
    """
    if len(context) == 0:
        raise ValueError("context must hold at least one token")
    total = len(context) + n_new
    if total > max_context:
        raise ValueError(f"{name}: {total} positions exceed the model's context of {max_context}")


@runtime_checkable
class TargetModel(Protocol):
    """A target model with a KV cache for one sequence (the engine's view of it).

    Attributes:
        name: a label for messages and statistics.
        vocab_size: number of logits per row ``V``.
        max_context: maximum number of positions.
        tokenizer: the Hugging Face tokenizer, or ``None`` (token-level use).
        forward_calls: forward passes since :meth:`reset_stats`.
        forward_time_s: wall time of those passes, seconds.
        last_start: the first position run by the last pass (the end of the reused prefix).
        last_hidden: hidden states ``[T, F]`` of the last pass's positions when ``hidden_layers``
            was asked for, else ``None``. A backend without hidden states leaves it ``None`` and
            drafters that need them (EAGLE) refuse it at load time.
        capabilities: (optional) the target's :class:`Capabilities` (:func:`capabilities_of`
            gives the defaults where it declares none).
        generation_lock: (optional) a re-entrant lock that :func:`specot.engine.decode` holds for a
            whole generation; one is attached on first use when a backend has none.

    Optional methods (not members of the protocol; looked up with ``getattr``):

    * ``measure_pass_times(widths, repeats) -> list[float]``: the median milliseconds of one pass
      over B new tokens after a fixed context, logits on all B rows, for each B in ``widths``
      (empties the KV cache; leaves the statistics as they were). :func:`specot.calibration.calibrate`
      measures and caches a target's pass-cost curve with it.
    * ``pass_cost_curve() -> PassCostCurve | None``: the target's measured curve r(B) (calibrated on
      first use where the backend does so), which the suffix drafter prices its budget with
      (:func:`specot.plan.kinds.suffix.pass_cost`); ``None`` where there is none.
    * ``pass_cost``: a ``(cost_fixed, cost_per_token)`` linear model of a wide pass, the fallback.
    """

    name: str
    vocab_size: int
    max_context: int
    tokenizer: Any
    forward_calls: int
    last_start: int
    last_hidden: Tensor | None

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def forward_time_s(self) -> float: ...

    @property
    def eos_token_ids(self) -> set[int]: ...

    def encode_prompt(self, prompt: str, *, chat: bool | None = None, system: str | None = None) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def reset(self) -> None:
        """Empty the KV cache (a new sequence starts)."""

    def reset_stats(self) -> None:
        """Zero :attr:`forward_calls` and :attr:`forward_time_s`."""

    def logits_after(self, context: Sequence[int], extra: Sequence[int] = (), *,
                     hidden_layers: Sequence[int] | None = None) -> Tensor:
        """float32 logits ``[1 + len(extra), V]`` after ``context`` and each prefix of ``extra``
        (a draft chain), in one pass."""

    def tree_logits(self, context: Sequence[int], tree: TokenTree, *,
                    hidden_layers: Sequence[int] | None = None) -> Tensor:
        """float32 logits ``[1 + N, V]`` after ``context`` and after every node of ``tree`` (a
        :class:`~specot.geometry.TokenTree`: ``tree.tokens [1 + N]`` root first, ``tree.geometry``
        its shape), in one pass: row ``j`` after the root-to-node-j path. The nodes stay in the
        cache until :meth:`keep_tree_path`."""

    def keep_tree_path(self, path: Sequence[int]) -> None:
        """Keep the context of the last :meth:`tree_logits` followed by the nodes ``path`` of its
        tree (node indices ``1..N``, a child of the root first, each the previous one's child;
        ``[]``: none); every other tree node leaves the cache.

        Raises:
            ValueError: ``path`` is not a root path of the last tree, or a non-empty ``path``
                when no tree was scored."""
