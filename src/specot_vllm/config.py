"""The integration's settings, read from vLLM's own ``additional_config`` (key ``"specot"``).

A deployment chooses them where it chooses everything else::

    vllm serve MODEL --speculative-config '{"method": "eagle3", "model": HEAD, "num_speculative_tokens": 4,
                                            "draft_sample_method": "probabilistic"}' \\
                     --additional-config '{"specot": {"verifier": "mentored", "verifier_params": {"D": 0.1}}}'

or ``LLM(..., additional_config={"specot": {...}})``. Keys:

* ``verifier``: a chain verifier of :mod:`specot.verifiers` — ``"speculative"`` (lossless
  speculative sampling, Leviathan et al. 2023), ``"lenient"`` (lossy, App. A.5), ``"mentored"``
  (lossy, KL-bounded, Tran-Thien 2023) — or ``"vllm"`` (vLLM's own rejection sampler, with the
  CPU defect fixed). Unset: the chains' own, ``"speculative"`` (:data:`CHAIN_SHAPE`).
* ``verifier_params``: keyword arguments of the verifier (``{"lenience": 0.5}``, ``{"D": 0.1}``).
  A lossy verifier runs only with its parameter stated (``lenient``: ``lenience``; ``mentored``:
  ``D``): its default is never taken silently, and the value is in the log line and the
  ``specot_verifier_info`` metric.
* ``q_temperature_ratio``: r > 0, the draft-law calibration of an EAGLE head drafting
  probabilistically: ``q = softmax(z / (r·T))`` (default: the head's ``specot_q_temperature_ratio``
  from its ``config.json``, else 1).
* ``suffix``: keyword arguments of :class:`specot.drafting.SuffixDrafter` for the
  ``specot_vllm.SuffixProposer`` / ``specot_vllm.SuffixTreeProposer`` custom-class proposers.
* ``depth``: the deepest node of a draft tree (``SuffixTreeProposer``; default: the node budget
  ``num_speculative_tokens``).
* ``draft_max_batch``: the largest number of requests in a step after which specot's proposers
  still draft (an integer >= 1); after a step of more requests they propose nothing, so the next
  step is a plain decoding step. Default (:func:`default_draft_max_batch`): on the CPU, the largest
  batch whose drafted pass stays within :data:`CPU_FLAT_TOKENS` tokens (γ = 4: 3; trees of 12
  nodes: 1); on other devices none (drafts at every batch size). With vLLM's own ``ngram`` method
  the same value becomes vLLM's batch-size schedule (:func:`ngram_schedule`).

:func:`parse_config` checks every key, nested ones included, when vLLM builds the engine
configuration (before any engine process starts); a bad one is a :class:`SpecotConfigError` (a
``ValueError``) whose message is one line naming it and the accepted values.

With the tree proposer (``"model": "specot_vllm.SuffixTreeProposer"``, a draft TREE of at most
``num_speculative_tokens`` nodes per request) ``verifier`` is a multi-draft verifier of
:func:`tree_verifiers` (unset: the trees' own, ``"greedy"``, :data:`TREE_SHAPE`): ``greedy`` verifies the suffix drafter's own trees
(GREEDY law: its distinct children, deterministic); the others verify trees whose children are
redrawn from the drafter's q under their law (``kseq``, ``rrs``, ``importance``, ``traversal``,
``ot``: i.i.d.; ``rrs_wor``: without replacement). Both lists come from specot's verifier registry
(:func:`chain_verifiers`, :func:`tree_verifiers`), and whether a verifier is lossless from the
verifier itself.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields
from typing import Any, Mapping, Sequence

from specot.plan.verify import VerifierSpec, build_verifier, check_otm_size, verifier_info
from specot.sampling import SamplingConfig
from specot.drafting.suffix import SuffixSettings
from specot.drafting.tree import TreeBudget, TreeSpec
from specot.verifiers import LAW_VERIFIERS, DraftLaw, Verifier, available_verifiers, get_verifier

__all__ = ["SpecotVllmConfig", "SpecotConfigError", "CHAIN_VERIFIERS", "TREE_VERIFIERS", "chain_verifiers",
           "tree_verifiers", "parse_config", "tree_config", "checkpoint_ratio", "q_temperature_ratio",
           "CPU_FLAT_TOKENS", "default_draft_max_batch", "draft_max_batch", "ngram_schedule"]

#: The draft laws of the tree proposer's trees: its own (GREEDY) and its redraws (IID, WOR).
TREE_LAWS = (DraftLaw.GREEDY, DraftLaw.IID, DraftLaw.WOR)
#: The shape of vLLM's chains (one draft per position): an unset verifier is its default
#: (:attr:`specot.drafting.TreeSpec.default_verifier`), as specot's plan would name it.
CHAIN_SHAPE = TreeSpec.sequences(1, 1)
#: The tree proposer's budget (:class:`specot_vllm.SuffixTreeProposer`: the suffix drafter's GREEDY
#: trees within ``children`` per node; its depth is the deployment's): an unset verifier is its default.
TREE_SHAPE = TreeBudget(SuffixSettings().children, 1, DraftLaw.GREEDY)
_KEYS = ("verifier", "verifier_params", "q_temperature_ratio", "suffix", "depth", "draft_max_batch")


def chain_verifiers() -> tuple[str, ...]:
    """The verifiers of specot's registry that verify vLLM's chains: token-level verifiers of one
    draft per position (``max_drafts == 1``), the default (:data:`CHAIN_SHAPE`'s) first, then
    ``"vllm"`` (vLLM's own rejection sampler)."""
    default = CHAIN_SHAPE.default_verifier
    names = [n for n in available_verifiers()
             if isinstance(v := get_verifier(n), Verifier) and v.max_drafts == 1]
    return tuple(sorted(names, key=lambda n: (n != default, n))) + ("vllm",)


def tree_verifiers(vocab: int | None = None) -> tuple[str, ...]:
    """The verifiers of specot's registry that verify the tree proposer's trees: lossless,
    several drafts per node, valid for one of :data:`TREE_LAWS`, and able to run at the model's
    vocabulary ``vocab`` where known (:func:`specot.plan.verify.check_otm_size`). The laws' own
    verifiers (:data:`specot.verifiers.LAW_VERIFIERS`) first — the default (:data:`TREE_SHAPE`'s,
    the GREEDY law's) at the head — then the others by name."""
    def serves(name: str) -> bool:
        v = get_verifier(name)
        if not v.lossless or (v.max_drafts is not None and v.max_drafts < 2) or getattr(v, "chains_only", False):
            return False
        if not set(v.valid_laws) & set(TREE_LAWS):
            return False
        try:
            check_otm_size(v, vocab, SamplingConfig(temperature=1.0))
        except ValueError:
            return False
        return True

    first = [TREE_SHAPE.default_verifier] + [LAW_VERIFIERS[law] for law in TREE_LAWS]
    names = [n for n in available_verifiers() if serves(n)]
    return tuple(sorted(names, key=lambda n: (first.index(n) if n in first else len(first), n)))


#: Verifiers the integration runs on vLLM's single-chain drafts (:func:`chain_verifiers`).
CHAIN_VERIFIERS = chain_verifiers()
#: Multi-draft verifiers the integration runs on draft trees (:func:`tree_verifiers`, any vocabulary).
TREE_VERIFIERS = tree_verifiers()


@dataclass(frozen=True)
class SpecotVllmConfig:
    """The integration's settings (module docstring).

    Attributes:
        verifier: one of :func:`chain_verifiers` (chains) or :func:`tree_verifiers` (trees);
            ``None`` (not named): the shape's own (:data:`CHAIN_SHAPE`, :data:`TREE_SHAPE`).
        verifier_params: keyword arguments of the verifier.
        q_temperature_ratio: the EAGLE draft-law calibration r, or ``None`` (the head's own).
        suffix: keyword arguments of the suffix drafter.
        tree: draft trees (the tree proposer) rather than chains.
        depth: the deepest tree node, or ``None`` (the node budget).
        draft_max_batch: the largest batch after whose steps the proposers draft, or ``None``
            (:func:`default_draft_max_batch`).
    """

    verifier: str | None = None
    verifier_params: Mapping[str, Any] = field(default_factory=dict)
    q_temperature_ratio: float | None = None
    suffix: Mapping[str, Any] = field(default_factory=dict)
    tree: bool = False
    depth: int | None = None
    draft_max_batch: int | None = None

    def __post_init__(self) -> None:
        if self.verifier is None:
            object.__setattr__(self, "verifier", (TREE_SHAPE if self.tree else CHAIN_SHAPE).default_verifier)

    def build_verifier(self):
        """The :class:`specot.verifiers.Verifier` instance, or ``None`` for ``"vllm"``.

        Raises:
            ValueError: invalid verifier parameters (the verifier's own message).
        """
        if self.verifier == "vllm":
            return None
        return self.spec().build()

    def spec(self) -> VerifierSpec:
        """specot's :class:`specot.plan.verify.VerifierSpec` of the chosen verifier (not ``"vllm"``)."""
        return VerifierSpec(self.verifier, tuple(sorted(self.verifier_params.items())))

    @property
    def lossless(self) -> bool:
        """Whether the chosen verifier keeps the target's output law, as specot's verifier says
        (:attr:`specot.plan.verify.VerifierSpec.lossless`); ``vllm`` (vLLM's sampler, fixed): yes."""
        return True if self.verifier == "vllm" else self.spec().lossless

    def label(self) -> str:
        """A one-line description for logs and metrics, e.g. ``mentored(D=0.1) LOSSY``."""
        params = ",".join(f"{k}={v}" for k, v in sorted(self.verifier_params.items()))
        return f"{self.verifier}({params}) {'lossless' if self.lossless else 'LOSSY'}"


class SpecotConfigError(ValueError):
    """A bad ``additional_config["specot"]``: its message is one line naming the value and the fix."""


def _where(*keys: str) -> str:
    return "additional_config['specot']" + "".join(f"[{k!r}]" for k in keys)


def _check_keys(raw: Mapping[str, Any], accepted: Sequence[str], *keys: str) -> None:
    """Refuse the keys of ``raw`` outside ``accepted`` (one line naming them and the accepted ones)."""
    unknown = sorted(set(raw) - set(accepted), key=str)
    if unknown:
        raise SpecotConfigError(f"{_where(*keys)} has unknown keys {unknown}; accepted: {list(accepted)}")


def _mapping(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    val = raw.get(key)
    if val is None:
        return {}
    if not isinstance(val, Mapping):
        raise SpecotConfigError(f"{_where(key)} must be a JSON object, got {val!r}")
    return dict(val)


def _verifier_name(raw: Mapping[str, Any], tree: bool, vocab: int | None) -> str:
    allowed = tree_verifiers(vocab) if tree else CHAIN_VERIFIERS
    verifier = raw.get("verifier")
    if verifier is None:
        return (TREE_SHAPE if tree else CHAIN_SHAPE).default_verifier
    if verifier not in allowed:
        what = ("specot_vllm.SuffixTreeProposer drafts a tree per request" if tree else
                "vLLM drafts one chain per request; multi-draft verifiers need "
                "speculative_config model 'specot_vllm.SuffixTreeProposer'")
        raise SpecotConfigError(f"{_where('verifier')} = {verifier!r}; choose one of {list(allowed)} ({what})")
    return verifier


def _check_verifier_params(name: str, params: Mapping[str, Any]) -> None:
    """The verifier's parameters, checked by specot's own rules (:func:`specot.plan.build_verifier`:
    no silently lossy run) and phrased for ``additional_config``: a lossy verifier runs only with
    its first parameter (the one that sets how lossy it is: ``lenience``, ``D``) stated."""
    if name == "vllm":
        if params:
            raise SpecotConfigError(f"{_where('verifier_params')} = {dict(params)!r}; verifier 'vllm' (vLLM's own "
                                    "rejection sampler) takes no parameters: drop verifier_params")
        return
    defaults = verifier_info(get_verifier(name))
    _check_keys(params, list(defaults["params"]), "verifier_params")
    if name == "speculative" and params.get("lenience", 1) != 1:
        raise SpecotConfigError(f"{_where('verifier_params', 'lenience')} = {params['lenience']!r}; 'speculative' is "
                                "the lossless verifier (lenience 1 only); for a lossy run name the lossy one: "
                                "{\"verifier\": \"lenient\", \"verifier_params\": {\"lenience\": L}}")
    try:
        ver = get_verifier(name, **params)
    except (TypeError, ValueError) as e:
        raise SpecotConfigError(f"{_where('verifier_params')} = {dict(params)!r}: {e}") from None
    first = next(iter(defaults["params"]), None)
    if not ver.lossless and first is not None and first not in params:
        raise SpecotConfigError(
            f"verifier {name!r} is lossy and runs only with its {first} stated (default {defaults['params'][first]!r} "
            f"is not taken silently): add \"verifier_params\": {{\"{first}\": ...}} to {_where()}")
    try:
        build_verifier(name, params)  # specot's own rules, whatever they add
    except ValueError as e:
        raise SpecotConfigError(f"{_where('verifier_params')} = {dict(params)!r}: {e}") from None


def _suffix_keys() -> dict[str, Any]:
    """The drafter options ``suffix`` may set, with their defaults: :class:`specot.drafting.suffix.SuffixSettings`
    (the suffix drafter's JSON-valued settings; not its corpus, an object)."""
    defaults = SuffixSettings()
    return {f.name: getattr(defaults, f.name) for f in fields(SuffixSettings) if not f.name.startswith("corpus")}


def _check_suffix(suffix: Mapping[str, Any]) -> None:
    """The suffix drafter's options: known keys, values of the defaults' types, the drafter's own checks."""
    if not suffix:
        return
    defaults = _suffix_keys()
    _check_keys(suffix, list(defaults), "suffix")
    for key, val in suffix.items():
        d = defaults[key]
        ok = (isinstance(val, bool) if isinstance(d, bool) else
              isinstance(val, int) and not isinstance(val, bool) if isinstance(d, int) else
              isinstance(val, (int, float)) and not isinstance(val, bool) and math.isfinite(val))
        if not ok:
            kind = "true or false" if isinstance(d, bool) else "an integer" if isinstance(d, int) else "a finite number"
            raise SpecotConfigError(f"{_where('suffix', key)} = {val!r}; use {kind} (default {json.dumps(d)})")
    from specot.drafting import SuffixDrafter

    try:
        SuffixDrafter(None, **suffix)
    except (TypeError, ValueError) as e:
        raise SpecotConfigError(f"{_where('suffix')} = {dict(suffix)!r}: {e}") from None


def _check_draft_max_batch(raw: Mapping[str, Any]) -> int | None:
    """``draft_max_batch``, checked: absent or an integer >= 1."""
    m = raw.get("draft_max_batch")
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise SpecotConfigError(f"{_where('draft_max_batch')} = {m!r}; use an integer >= 1 (the largest number of "
                                "requests in a step after which the proposers still draft), or leave it out for "
                                "the device's default")
    return m


def _scalars(raw: Mapping[str, Any], tree: bool) -> tuple[int | None, float | None]:
    """(``depth``, ``q_temperature_ratio``), checked."""
    depth = raw.get("depth")
    if depth is not None and not tree:
        raise SpecotConfigError(f"{_where('depth')} = {depth!r} applies to draft trees only (speculative_config "
                                "model 'specot_vllm.SuffixTreeProposer'); drop it for chains")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 1):
        raise SpecotConfigError(f"{_where('depth')} = {depth!r}; use an integer >= 1")
    ratio = raw.get("q_temperature_ratio")
    if ratio is not None:
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) or ratio <= 0:
            raise SpecotConfigError(f"{_where('q_temperature_ratio')} = {ratio!r}; "
                                    "use a finite number > 0 (1 = the head's own law)")
        ratio = float(ratio)
    return depth, ratio


def parse_config(additional_config: Mapping[str, Any] | None, *, tree: bool = False,
                 nodes: int | None = None, vocab: int | None = None) -> SpecotVllmConfig | None:
    """The settings under ``additional_config["specot"]``; ``None`` when the key is absent
    (vLLM runs unchanged apart from the CPU fix). ``tree``: the deployment drafts trees (the
    tree proposer), so the verifier is one of :func:`tree_verifiers` (default ``"greedy"``).
    ``nodes``: the tree's node budget ``num_speculative_tokens`` where known, which
    ``suffix.max_nodes`` may not exceed. ``vocab``: the model's vocabulary where known (a tree
    verifier must run at it, :func:`tree_verifiers`).

    Every key the plugin reads is checked here, nested ones included (``verifier_params``:
    the verifier's parameters; ``suffix``: the drafter's options), so a deployment fails before
    any engine process starts.

    Raises:
        SpecotConfigError: a :class:`ValueError` whose message is one line naming the bad value and
            the fix (an unknown key at any level or verifier, bad parameters, a lossy verifier
            without its parameter stated, a ratio that is not a finite number > 0, a
            ``draft_max_batch`` that is not an integer >= 1).
    """
    if not additional_config or "specot" not in additional_config:
        return None
    raw = additional_config["specot"]
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise SpecotConfigError(f"{_where()} must be a JSON object, got {raw!r}")
    _check_keys(raw, _KEYS)
    verifier = _verifier_name(raw, tree, vocab)
    params, suffix = _mapping(raw, "verifier_params"), _mapping(raw, "suffix")
    depth, ratio = _scalars(raw, tree)
    _check_verifier_params(verifier, params)
    _check_suffix(suffix)
    max_batch = _check_draft_max_batch(raw)
    if tree and nodes is not None and suffix.get("max_nodes", 0) > nodes:
        raise SpecotConfigError(f"{_where('suffix', 'max_nodes')} = {suffix['max_nodes']} exceeds "
                                f"num_speculative_tokens = {nodes}; raise num_speculative_tokens")
    return SpecotVllmConfig(verifier=verifier, verifier_params=params, q_temperature_ratio=ratio,
                            suffix=suffix, tree=tree, depth=depth, draft_max_batch=max_batch)


def tree_config(additional_config: Mapping[str, Any] | None, vocab: int | None = None) -> SpecotVllmConfig:
    """:func:`parse_config` for a tree deployment: its settings, or the defaults (the verifier
    :data:`TREE_SHAPE`'s, ``greedy``) when ``additional_config`` has no ``"specot"`` key.

    Raises:
        ValueError: as :func:`parse_config`.
    """
    return (parse_config(additional_config, tree=True, vocab=vocab)
            or SpecotVllmConfig(tree=True))


def checkpoint_ratio(draft_model_config: Any) -> float | None:
    """``specot_q_temperature_ratio`` of an EAGLE draft checkpoint: on vLLM's config object (or the
    model config its EAGLE wrapper holds), else read from the checkpoint's ``config.json``;
    ``None`` when it has none."""
    hf = getattr(draft_model_config, "hf_config", None)
    for obj in (hf, getattr(hf, "model", None)):
        r = getattr(obj, "specot_q_temperature_ratio", None)
        if r is not None:
            return float(r)
    path = getattr(draft_model_config, "model", None)
    if isinstance(path, str) and os.path.isfile(os.path.join(path, "config.json")):
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            r = json.load(fh).get("specot_q_temperature_ratio")
        return None if r is None else float(r)
    return None


def q_temperature_ratio(cfg: SpecotVllmConfig | None, draft_model_config: Any) -> float:
    """r of an EAGLE head drafting probabilistically (``q = softmax(z / (r·T))``): the deployment's
    ``q_temperature_ratio``, else the head's ``specot_q_temperature_ratio`` (:func:`checkpoint_ratio`),
    else 1."""
    r = cfg.q_temperature_ratio if cfg is not None else None
    if r is None:
        r = checkpoint_ratio(draft_model_config)
    return float(r) if r else 1.0


#: On the CPU, the pass width (tokens) up to which a pass of the target costs about one of one
#: token. From vLLM's plain decoding in the quiet run of 2026-11-26 (docs/results.md, 2-core AMD
#: EPYC, bf16, SmolLM2-135M): a step of 8 requests took 38 ms against 37 ms for one, a step of 32
#: took 78 ms; 16 tokens is where the line between them reaches about 1.35 of one pass, the block
#: efficiency specot's suffix chains reach at T = 1 (1.36).
CPU_FLAT_TOKENS = 16


def default_draft_max_batch(gamma: int, cpu: bool) -> int | None:
    """The default ``draft_max_batch`` (a documented constant, not measured at start): on the CPU
    the largest batch B whose drafted pass, ``B · (1 + γ)`` tokens, stays within
    :data:`CPU_FLAT_TOKENS` (at least 1: drafts at batch 1 always); elsewhere ``None`` (no
    gate: no device but this CPU was measured).

    Args:
        gamma: the draft length γ (chains) or node budget N (trees), ``num_speculative_tokens``.
        cpu: the deployment runs on the CPU.
    """
    return max(1, CPU_FLAT_TOKENS // (1 + max(0, int(gamma)))) if cpu else None


def draft_max_batch(cfg: SpecotVllmConfig | None, gamma: int, cpu: bool) -> tuple[int | None, str]:
    """(the ``draft_max_batch`` in force, where it came from: ``"set"`` or ``"default"``);
    ``None``: drafts at every batch size."""
    if cfg is not None and cfg.draft_max_batch is not None:
        return cfg.draft_max_batch, "set"
    return default_draft_max_batch(gamma, cpu), "default"


def ngram_schedule(max_batch: int, gamma: int, max_num_seqs: int) -> list[tuple[int, int, int]] | None:
    """vLLM's own batch-size schedule (``speculative_config.num_speculative_tokens_per_batch_size``,
    ``(first batch, last batch, γ)`` ranges) that drafts γ tokens after steps of at most
    ``max_batch`` requests and none after larger ones; ``None`` when no batch exceeds it."""
    if max_batch >= max_num_seqs:
        return None
    return [(1, max_batch, gamma), (max_batch + 1, max_num_seqs, 0)]
