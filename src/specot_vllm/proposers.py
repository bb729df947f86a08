"""specot's model-free drafter as a vLLM proposer (vLLM's ``custom_class`` proposer interface).

``speculative_config={"method": "custom_class", "model": "specot_vllm.SuffixProposer",
"num_speculative_tokens": γ}`` drafts with :class:`specot.drafting.SuffixDrafter` (suffix decoding,
Oliaro et al. 2024, with specot's scoring and adaptive budget): each request gets its best chain of
at most γ tokens from the earlier occurrences of its current suffix in its prompt and output.

The drafts are deterministic given the context, so any lossless verifier (vLLM's, or specot's
``speculative`` with a one-hot q) keeps the output law exact at every temperature.

vLLM's interface hands the proposer the batch's token rows (``token_ids_cpu [max_reqs, max_len]``,
valid up to ``num_tokens_no_spec[i]``) and the tokens each request committed in the last step, but
no request ids. One drafter is kept per batch row; its suffix index extends incrementally when the
row continues the same sequence and is rebuilt when another request took the row
(:meth:`specot.drafting.SuffixIndex.sync`). The acceptance of the previous proposal (committed
tokens − 1) feeds the drafter's calibrated budget.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

__all__ = ["SuffixProposer"]


class SuffixProposer:
    """vLLM custom-class proposer over :class:`specot.drafting.SuffixDrafter` (module docstring).

    Args:
        vllm_config: vLLM's ``VllmConfig``; ``num_speculative_tokens`` is γ, and
            ``additional_config["specot"]["suffix"]`` holds keyword arguments of the drafter
            (``max_n``, ``min_score``, ``adaptive``, ...).

    Raises:
        ValueError: bad drafter arguments (the drafter's own message).
    """

    def __init__(self, vllm_config: Any) -> None:
        from specot.drafting import SuffixDrafter

        from .config import parse_config

        spec = vllm_config.speculative_config
        self.k = int(spec.num_speculative_tokens)
        self.max_model_len = int(vllm_config.model_config.max_model_len)
        cfg = parse_config(getattr(vllm_config, "additional_config", None))
        self._kwargs = dict(cfg.suffix) if cfg is not None else {}
        SuffixDrafter(None, **self._kwargs)  # validate now: one clear error at start-up
        self._rows: dict[int, Any] = {}
        self._last: dict[int, tuple[int, Any]] = {}  # row -> (context length, the tree proposed there)
        eos = getattr(getattr(vllm_config.model_config, "hf_config", None), "eos_token_id", None)
        self._stop = frozenset([eos] if isinstance(eos, int) else (eos or []))

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """No model to load (vLLM calls this on every drafter)."""

    def _drafter(self, row: int, context: list[int]):
        from specot.drafting import SuffixDrafter, TreeSpec

        d = self._rows.get(row)
        n = len(d.index) if d is not None else 0
        same = d is not None and n <= len(context) and d.index.tokens[max(0, n - 8):] == context[max(0, n - 8):n]
        if not same:  # a new request in this row
            d = SuffixDrafter(None, **self._kwargs)
            d.start(context, TreeSpec.sequences(1, self.k), stop_tokens=self._stop)
            self._rows[row] = d
            self._last.pop(row, None)
        return d

    def _learn(self, d: Any, row: int, sampled: Sequence[int], context: list[int]) -> None:
        """Tell the drafter how many of its last drafts were accepted (committed − 1)."""
        from specot.drafting import DraftOutcome

        last = self._last.pop(row, None)
        if last is None or last[0] + len(sampled) != len(context):
            return
        tree = last[1]
        acc = max(0, min(len(sampled) - 1, tree.size))
        d.update(DraftOutcome(tree=tree, path=tuple(range(1, acc + 1)), tokens=tuple(int(t) for t in sampled),
                              context_len=last[0]))

    def propose(self, sampled_token_ids: list[list[int]], num_tokens_no_spec: np.ndarray, token_ids_cpu: np.ndarray,
                slot_mappings: Any = None) -> list[list[int]]:
        """Draft token ids per request (``[]``: no draft, a plain target step)."""
        from specot.sampling import SamplingConfig

        out: list[list[int]] = []
        greedy = SamplingConfig(temperature=0.0)
        for i, sampled in enumerate(sampled_token_ids):
            n = int(num_tokens_no_spec[i])
            if not sampled or n >= self.max_model_len:
                out.append([])
                continue
            context = token_ids_cpu[i, :n].tolist()
            d = self._drafter(i, context)
            self._learn(d, i, sampled, context)
            depth = min(self.k, self.max_model_len - n - 1)
            tree = d.propose(context, depth, greedy) if depth > 0 else None
            drafts = tree.path_tokens(len(tree.tokens) - 1) if tree is not None and tree.size else []
            if tree is not None:
                self._last[i] = (n, tree)
            out.append(drafts[: self.k])
        for row in [r for r in self._rows if r >= len(sampled_token_ids)]:
            self._rows.pop(row, None)
            self._last.pop(row, None)
        return out
