"""The integration's settings, read from vLLM's own ``additional_config`` (key ``"specot"``).

A deployment chooses them where it chooses everything else::

    vllm serve MODEL --speculative-config '{"method": "eagle3", "model": HEAD, "num_speculative_tokens": 4,
                                            "draft_sample_method": "probabilistic"}' \\
                     --additional-config '{"specot": {"verifier": "mentored", "verifier_params": {"D": 0.1}}}'

or ``LLM(..., additional_config={"specot": {...}})``. Keys:

* ``verifier``: a chain verifier of :mod:`specot.verifiers` — ``"speculative"`` (lossless
  speculative sampling, Leviathan et al. 2023), ``"lenient"`` (lossy, App. A.5), ``"mentored"``
  (lossy, KL-bounded, Tran-Thien 2023) — or ``"vllm"`` (vLLM's own rejection sampler, with the
  CPU defect fixed). Default ``"speculative"`` when the ``"specot"`` key is present.
* ``verifier_params``: keyword arguments of the verifier (``{"lenience": 0.5}``, ``{"D": 0.1}``).
* ``q_temperature_ratio``: r > 0, the draft-law calibration of an EAGLE head drafting
  probabilistically: ``q = softmax(z / (r·T))`` (default: the head's ``specot_q_temperature_ratio``
  from its ``config.json``, else 1).
* ``suffix``: keyword arguments of :class:`specot.drafting.SuffixDrafter` for the
  ``specot_vllm.SuffixProposer`` / ``specot_vllm.SuffixTreeProposer`` custom-class proposers.
* ``depth``: the deepest node of a draft tree (``SuffixTreeProposer``; default: the node budget
  ``num_speculative_tokens``).

With the tree proposer (``"model": "specot_vllm.SuffixTreeProposer"``, a draft TREE of at most
``num_speculative_tokens`` nodes per request) ``verifier`` is a multi-draft verifier of
:data:`TREE_VERIFIERS` (default ``"greedy"``): ``greedy`` verifies the suffix drafter's own trees
(GREEDY law: its distinct children, deterministic); the others verify trees whose children are
redrawn from the drafter's q under their law (``kseq``, ``rrs``, ``importance``, ``traversal``:
i.i.d.; ``rrs_wor``: without replacement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["SpecotVllmConfig", "CHAIN_VERIFIERS", "TREE_VERIFIERS", "parse_config", "tree_config"]

#: Verifiers the integration runs on vLLM's single-chain drafts (one draft per position).
CHAIN_VERIFIERS = ("speculative", "lenient", "mentored", "vllm")
#: Multi-draft verifiers the integration runs on draft trees (``SuffixTreeProposer``).
TREE_VERIFIERS = ("greedy", "kseq", "rrs", "rrs_wor", "importance", "traversal")
_KEYS = ("verifier", "verifier_params", "q_temperature_ratio", "suffix", "depth")


@dataclass(frozen=True)
class SpecotVllmConfig:
    """The integration's settings (module docstring).

    Attributes:
        verifier: one of :data:`CHAIN_VERIFIERS`.
        verifier_params: keyword arguments of the verifier.
        q_temperature_ratio: the EAGLE draft-law calibration r, or ``None`` (the head's own).
        suffix: keyword arguments of the suffix drafter.
        tree: draft trees (the tree proposer) rather than chains.
        depth: the deepest tree node, or ``None`` (the node budget).
    """

    verifier: str = "speculative"
    verifier_params: Mapping[str, Any] = field(default_factory=dict)
    q_temperature_ratio: float | None = None
    suffix: Mapping[str, Any] = field(default_factory=dict)
    tree: bool = False
    depth: int | None = None

    def build_verifier(self):
        """The :class:`specot.verifiers.Verifier` instance, or ``None`` for ``"vllm"``.

        Raises:
            ValueError: invalid verifier parameters (the verifier's own message).
        """
        if self.verifier == "vllm":
            return None
        from specot.verifiers import get_verifier

        return get_verifier(self.verifier, **dict(self.verifier_params))

    @property
    def lossless(self) -> bool:
        """Whether the chosen verifier keeps the target's output law (``vllm`` and ``speculative``:
        yes; ``lenient`` with l < 1 and ``mentored`` with D > 0: no)."""
        v = self.build_verifier()
        return True if v is None else bool(v.lossless)

    def label(self) -> str:
        """A one-line description for logs and metrics, e.g. ``mentored(D=0.1) LOSSY``."""
        params = ",".join(f"{k}={v}" for k, v in sorted(self.verifier_params.items()))
        return f"{self.verifier}({params}) {'lossless' if self.lossless else 'LOSSY'}"


def parse_config(additional_config: Mapping[str, Any] | None, *, tree: bool = False) -> SpecotVllmConfig | None:
    """The settings under ``additional_config["specot"]``; ``None`` when the key is absent
    (vLLM runs unchanged apart from the CPU fix). ``tree``: the deployment drafts trees (the
    tree proposer), so the verifier is one of :data:`TREE_VERIFIERS` (default ``"greedy"``).

    Raises:
        ValueError: one line naming the bad value and the fix (unknown key or verifier, bad
            parameters, a ratio that is not a finite number > 0).
    """
    if not additional_config or "specot" not in additional_config:
        return None
    raw = additional_config["specot"]
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"additional_config['specot'] must be a JSON object, got {raw!r}")
    unknown = sorted(set(raw) - set(_KEYS))
    if unknown:
        raise ValueError(f"additional_config['specot'] has unknown keys {unknown}; known: {list(_KEYS)}")
    verifier = raw.get("verifier", "greedy" if tree else "speculative")
    allowed = TREE_VERIFIERS if tree else CHAIN_VERIFIERS
    if verifier not in allowed:
        what = ("specot_vllm.SuffixTreeProposer drafts a tree per request" if tree else
                "vLLM drafts one chain per request; multi-draft verifiers need "
                "speculative_config model 'specot_vllm.SuffixTreeProposer'")
        raise ValueError(f"additional_config['specot']['verifier'] = {verifier!r}; choose one of "
                         f"{list(allowed)} ({what})")
    depth = raw.get("depth")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise ValueError(f"additional_config['specot']['depth'] = {depth!r}; use an integer >= 1")
    params = raw.get("verifier_params") or {}
    suffix = raw.get("suffix") or {}
    for name, val in (("verifier_params", params), ("suffix", suffix)):
        if not isinstance(val, Mapping):
            raise ValueError(f"additional_config['specot']['{name}'] must be a JSON object, got {val!r}")
    ratio = raw.get("q_temperature_ratio")
    if ratio is not None:
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
            raise ValueError(f"additional_config['specot']['q_temperature_ratio'] = {ratio!r}; "
                             "use a finite number > 0 (1 = the head's own law)")
        ratio = float(ratio)
    cfg = SpecotVllmConfig(verifier=verifier, verifier_params=dict(params), q_temperature_ratio=ratio,
                           suffix=dict(suffix), tree=tree, depth=depth)
    if verifier != "vllm":
        v = cfg.build_verifier()
        if not tree and getattr(v, "max_drafts", 1) != 1:  # pragma: no cover - CHAIN_VERIFIERS are single-draft
            raise ValueError(f"verifier {verifier!r} is not a single-draft verifier")
        if tree and not v.lossless:  # pragma: no cover - TREE_VERIFIERS are lossless
            raise ValueError(f"verifier {verifier!r} is lossy; trees take lossless verifiers only")
    return cfg


def tree_config(additional_config: Mapping[str, Any] | None) -> SpecotVllmConfig:
    """:func:`parse_config` for a tree deployment: its settings, or the defaults (the ``greedy``
    verifier) when ``additional_config`` has no ``"specot"`` key.

    Raises:
        ValueError: as :func:`parse_config`.
    """
    return parse_config(additional_config, tree=True) or SpecotVllmConfig(verifier="greedy", tree=True)
