"""High-level Python API: ``specot.generate(...)`` — the same job as ``specot generate``.

Example::

    import specot
    report = specot.generate("What is a Python generator?", draft="ngram", gamma=4,
                             temperature=0.0, max_new_tokens=64, baseline=True)
    print(report.result.text, report.result.stats.block_efficiency, report.speedup)

What "exact" means here. With a lossless verifier (``report.lossless``) the output is lossless *in
distribution given the target's logits*: each token follows the standardized target distribution
p computed from the logits the target returns. Greedy decoding (temperature 0) is token-for-token
identical to autoregressive decoding in float32. In bfloat16/float16 the two may differ at
near-ties: the verification pass scores several tokens in one forward pass and autoregressive
decoding one token per pass, and these are different kernels whose logits round differently, so
an argmax between two almost equal logits can flip. Use ``dtype="float32"`` to compare outputs.
Lossy verifiers (``lenient``, ``mentored`` with D > 0) must be asked for with explicit parameters
and are reported as ``"lossless": false``.
"""

from __future__ import annotations

import enum
import functools
import inspect
import dataclasses
import json
import operator
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .drafting.base import Drafter
from .drafting.eagle import EagleDrafter
from .drafting.hybrid import HybridDrafter
from .drafting.model import ModelDrafter, check_vocab_compatible
from .drafting.ngram import NGramDrafter, NGramTable
from .drafting.suffix import NGramCounts, SuffixDrafter
from .drafting.tree import TreeSpec, default_law_for, parse_tree_spec
from .engine.generate import autoregressive_generate, speculative_generate, tree_generate
from .engine.loop import make_generator
from .engine.types import GenerationConfig, GenerationResult
from .models.embedded import (EMBEDDED_DRAFT, EMBEDDED_EAGLE, EMBEDDED_TARGET, embedded_draft_dir, embedded_eagle_dir, is_embedded_target, load_embedded_draft,
                              load_embedded_target)
from ._validation import check_count, check_device, check_generator
from .laws import DraftLaw
from .models.device import prepacking_available, resolve_dtype
from .models.hf import GRAPH_WIDTHS, CausalLM
from .models.loading import check_model_source, load_model
from .sampling import SamplingConfig
from .verifiers.base import available_verifiers, get_verifier
from .verifiers.otm import MAX_OTM_SETS

__all__ = ["GenerateReport", "GenerationInterrupted", "generate", "load_target", "load_drafter", "pydoc_ngram_table",
           "pydoc_texts", "resolve_tree_spec", "build_verifier", "verifier_info", "decoding_plan", "auto_plan",
           "AutoPlan"]

#: The exactness contract, in one line (README, ``specot generate --help``, the report's "exactness").
EXACTNESS = ("lossless in distribution given the target's logits; greedy = autoregressive in float32; "
             "in bf16/fp16 equal up to near-ties (kernel rounding)")


@dataclass
class GenerateReport:
    """What :func:`generate` returns.

    Attributes:
        result: the speculative generation (text, tokens, statistics).
        baseline: the autoregressive generation on the same prompt, when asked for.
        prompt_tokens: length of the encoded prompt.
        verifier: ``{"name", "params", "lossless"}`` of the verifier that ran (see :func:`verifier_info`).
        dtype: the target's dtype (greedy equality with autoregressive decoding is guaranteed in
            float32 only; see the module docstring).
        speedups: speculative / autoregressive tokens/s of each repeat (``repeats`` of
            :func:`generate`; a fresh sample each at T > 0), both runs of a repeat producing the
            same number of tokens.
        timing: ``{"tokens", "repeats", "load_average", "cpu_count", "busy"}`` of the speedup
            measurement (``tokens``: the first pair's length; ``busy``: the 1-minute load average
            exceeded the core count).
        draft: the drafter and draft shape that ran, e.g. ``"suffix+eagle, tree 2x3"`` (what
            ``"auto"`` resolved to).
        cuda_graphs: whether the target's passes ran padded as CUDA graphs (``cuda_graphs`` of
            :func:`generate`, or a target already set up by an earlier call; ``False`` after a
            failed capture).
    """

    result: GenerationResult
    baseline: GenerationResult | None = None
    prompt_tokens: int = 0
    verifier: dict[str, Any] = field(default_factory=dict)
    dtype: str = ""
    speedups: list[float] = field(default_factory=list)
    timing: dict[str, Any] = field(default_factory=dict)
    draft: str = ""
    cuda_graphs: bool = False

    @property
    def lossless(self) -> bool:
        """True when the verifier is lossless (the output follows the target's distribution)."""
        return bool(self.verifier.get("lossless", True))

    @property
    def speedup(self) -> float | None:
        """Speculative tokens/s divided by autoregressive tokens/s over the same number of tokens
        (the median over repeats; ``None`` without a baseline)."""
        if self.speedups:
            return float(statistics.median(self.speedups))
        if self.baseline is None or self.baseline.stats.tokens_per_s == 0:
            return None
        return self.result.stats.tokens_per_s / self.baseline.stats.tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "speculative": self.result.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup": self.speedup,
            "speedups": self.speedups,
            "draft": self.draft,
            "cuda_graphs": self.cuda_graphs,
            "timing": self.timing,
            "verifier": self.verifier.get("name"),
            "verifier_params": self.verifier.get("params", {}),
            "lossless": self.lossless,
            "dtype": self.dtype,
            "exactness": EXACTNESS if self.lossless else "lossy: the output does NOT follow the target's distribution",
        }


class GenerationInterrupted(KeyboardInterrupt):
    """Raised by :func:`generate` on Ctrl-C (a :class:`KeyboardInterrupt`): what was generated so far.

    Attributes:
        tokens: the token ids committed before the interrupt (as streamed by the engine).
        text: their decoded text.
        elapsed_s: wall time of the interrupted decoding, seconds.
        phase: ``"speculative"`` or ``"baseline"`` (the autoregressive run after it).
        report: the finished speculative report when the baseline was interrupted, else ``None``.
    """

    def __init__(self, tokens: list[int], text: str, elapsed_s: float, phase: str,
                 report: GenerateReport | None = None) -> None:
        super().__init__(f"interrupted after {len(tokens)} tokens ({phase})")
        self.tokens, self.text, self.elapsed_s, self.phase, self.report = tokens, text, elapsed_s, phase, report

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"interrupted": True, "phase": self.phase, "text": self.text, "tokens": self.tokens,
                "new_tokens": len(self.tokens), "elapsed_s": self.elapsed_s, "tokens_per_s": self.tokens_per_s,
                "report": self.report.to_dict() if self.report is not None else None}


def verifier_info(ver: Any) -> dict[str, Any]:
    """``{"name", "params", "lossless"}`` of a built verifier: its constructor parameters as set."""
    params: dict[str, Any] = {}
    try:
        sig = None if type(ver).__init__ is object.__init__ else inspect.signature(type(ver).__init__)
    except (TypeError, ValueError):
        sig = None
    for name, par in (sig.parameters.items() if sig else ()):
        if name == "self" or par.kind in (par.VAR_POSITIONAL, par.VAR_KEYWORD) or not hasattr(ver, name):
            continue
        val = getattr(ver, name)
        params[name] = val.value if isinstance(val, enum.Enum) else val
    return {"name": getattr(ver, "name", type(ver).__name__), "params": params,
            "lossless": bool(getattr(ver, "lossless", True))}


def build_verifier(name: str, params: dict[str, Any] | None = None) -> Any:
    """The verifier ``name`` with ``params``, refusing what would silently change the output law.

    Raises:
        ValueError: an unknown name; a parameter the verifier does not take; ``lenience`` with
            ``"speculative"`` (the lossless verifier; use ``"lenient"``); a lossy verifier
            (``lenient``, ``mentored``) without its parameters given explicitly.
    """
    params = dict(params or {})
    if not isinstance(name, str) or name not in available_verifiers():
        raise ValueError(f"unknown verifier {name!r}; available: {', '.join(available_verifiers())}")
    try:
        cls = type(get_verifier(name))
        if cls.__init__ is object.__init__:  # no constructor: no parameters
            open_kw, takes = False, []
        else:
            sig = inspect.signature(cls.__init__)
            open_kw = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
            takes = [k for k, p in sig.parameters.items()
                     if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        open_kw, takes = True, []
    unknown = sorted(set(params) - set(takes)) if not open_kw else []
    if unknown:
        have = ", ".join(takes) if takes else "none"
        raise ValueError(f"verifier {name!r} does not take {', '.join(map(repr, unknown))} (its parameters: {have})"
                         + ("; lenience is a parameter of --verifier lenient only" if "lenience" in unknown else ""))
    if name == "speculative" and "lenience" in params and params["lenience"] != 1:
        raise ValueError("verifier 'speculative' is the lossless one and takes no lenience; for a lossy run with "
                         "lenience l < 1 ask for it: verifier 'lenient' with lenience=l (CLI: --verifier lenient "
                         "--lenience L)")
    ver = get_verifier(name, **params)
    if not getattr(ver, "lossless", True) and not params:
        info = verifier_info(ver)["params"]
        shown = ", ".join(f"{k}={v}" for k, v in info.items())
        raise ValueError(f"verifier {name!r} is lossy (its defaults: {shown}); give its parameters explicitly to "
                         f"run it (CLI: " + ("--lenience L" if "lenience" in info else
                                              " ".join(f"--verifier-param {k}=..." for k in info))
                         + f"; Python: verifier_params={info!r})")
    return ver


def load_target(spec: str | CausalLM | None = None, *, dtype: str | torch.dtype = "auto", device: str = "cpu") -> CausalLM:
    """The target model: ``None`` or ``"smollm2"`` for the embedded SmolLM2-135M-Instruct, else a
    local directory or Hugging Face hub id (see :func:`specot.models.load_model`)."""
    if isinstance(spec, CausalLM):
        return spec
    if spec is not None and not isinstance(spec, (str, Path)):
        raise TypeError(f"target must be None, 'smollm2', a model directory / hub id or a CausalLM, "
                        f"got {type(spec).__name__}")
    if spec is None or spec == EMBEDDED_TARGET:
        return load_embedded_target(dtype=dtype, device=device)
    return load_model(spec, dtype=dtype, device=device)


def pydoc_texts() -> list[str]:
    """The English prose of CPython's ``pydoc_data.topics`` (one string per help topic)."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


@functools.lru_cache(maxsize=4)
def _pydoc_table(tokenizer_key: int, n: int, tokenizer: Any) -> NGramTable:
    return NGramTable.from_text(pydoc_texts(), tokenizer, n=n)


@functools.lru_cache(maxsize=4)
def _pydoc_counts(tokenizer_key: int, n: int, tokenizer: Any) -> NGramCounts:
    return NGramCounts.from_text(pydoc_texts(), tokenizer, n=n)


def pydoc_ngram_table(tokenizer: Any, n: int = 3) -> NGramTable:
    """An :class:`NGramTable` over ``pydoc_data.topics`` tokenized with ``tokenizer`` (cached)."""
    return _pydoc_table(id(tokenizer), n, tokenizer)


def load_drafter(spec: str | Drafter | CausalLM, target: CausalLM, *, dtype: str | torch.dtype = "auto",
                 device: str = "cpu", ngram_n: int = 3, ngram_corpus: str | None = "pydoc",
                 min_confidence: float | None = None) -> Drafter:
    """Build the drafter named by ``spec``.

    Args:
        spec: ``"auto"`` (the drafter of :func:`auto_plan`: ``"suffix+eagle"`` for the embedded
            target on a CPU in bf16 or float32, else ``"ngram"``),
            ``"eagle"`` (the shipped EAGLE-3 head of the embedded target, ``specot/data/eagle``),
            ``"distilled"`` (the draft distilled from SmolLM2, ``specot/data/draft``), ``"ngram"``
            (prompt lookup + an n-gram table), ``"suffix"`` (suffix decoding: draft trees from every
            earlier occurrence of the current suffix, :class:`~specot.drafting.SuffixDrafter`),
            ``"eagle:PATH"`` (an EAGLE-3 head on the target's features,
            :meth:`~specot.drafting.EagleDrafter.from_pretrained`), ``"suffix+MODEL"`` (suffix trees
            where the text repeats, the draft model ``MODEL`` — any of the model names here —
            elsewhere: :class:`~specot.drafting.HybridDrafter`), a local directory / hub id of a draft
            causal LM, a :class:`CausalLM`, or a ready :class:`Drafter`.
        target: the target (its tokenizer builds the n-gram table; the draft must match it).
        ngram_corpus: ``"pydoc"`` (``pydoc_data.topics``), a text file path, or ``None``
            (prompt lookup only).
        min_confidence: τ in (0, 1) of an EAGLE head's confidence gate (``"eagle"``, ``"eagle:PATH"``
            and hybrids over them; :class:`~specot.drafting.EagleDrafter`): a node is expanded only
            while its path's cumulative draft probability is at least τ. ``None``: off.

    Raises:
        ValueError: the draft model's vocabulary or tokenizer differs from the target's;
            ``min_confidence`` outside (0, 1) or given for a draft without an EAGLE head.
        FileNotFoundError: a path that does not exist.
    """
    if min_confidence is not None:
        _check_min_confidence(spec, target, min_confidence)
    if isinstance(spec, Drafter):
        return spec
    spec = _resolve_draft_name(spec, target)  # "auto": one rule (auto_plan), shared with generate()
    gate = {} if min_confidence is None else {"min_confidence": float(min_confidence)}
    if isinstance(spec, str) and spec.startswith(HYBRID_PREFIX):  # suffix trees where text repeats, a model elsewhere
        model = load_drafter(spec[len(HYBRID_PREFIX):], target, dtype=dtype, device=device, ngram_n=ngram_n,
                             ngram_corpus=ngram_corpus, min_confidence=min_confidence)
        if isinstance(model, (NGramDrafter, SuffixDrafter, HybridDrafter)):
            raise ValueError(f"draft {spec!r}: after 'suffix+' name a draft MODEL ('eagle', 'eagle:PATH', "
                             "'distilled' or a directory), not a model-free drafter")
        return HybridDrafter(load_drafter("suffix", target, ngram_n=ngram_n, ngram_corpus=ngram_corpus), model)
    if isinstance(spec, str) and spec == "ngram":
        table = None
        if ngram_corpus and target.tokenizer is not None:
            if ngram_corpus == "pydoc":
                table = pydoc_ngram_table(target.tokenizer, ngram_n)
            else:
                text = Path(ngram_corpus).read_text(encoding="utf-8")
                table = NGramTable.from_text([text], target.tokenizer, n=ngram_n)
        return NGramDrafter(n=ngram_n, table=table)
    if isinstance(spec, str) and spec == "suffix":  # suffix decoding: draft trees, corpus gated by score
        corpus = None
        if ngram_corpus and target.tokenizer is not None:
            corpus = _pydoc_counts(id(target.tokenizer), ngram_n, target.tokenizer) if ngram_corpus == "pydoc" else \
                NGramCounts.from_text([Path(ngram_corpus).read_text(encoding="utf-8")], target.tokenizer, n=ngram_n)
        return SuffixDrafter(vocab_size=target.vocab_size, corpus=corpus)
    if isinstance(spec, str) and spec.startswith("eagle:"):  # an EAGLE-3 head on the target's features
        return EagleDrafter.from_pretrained(spec[len("eagle:"):], target, **gate)
    if isinstance(spec, str) and spec == EMBEDDED_EAGLE:  # the shipped head: the embedded target's only
        if not is_embedded_target(target):
            raise ValueError(f"draft 'eagle' is the shipped head of the embedded target; for {target.name!r} "
                             "use 'eagle:PATH' (a head trained for that target)")
        return EagleDrafter.from_pretrained(embedded_eagle_dir(), target, **gate)
    if isinstance(spec, str) and spec == EMBEDDED_DRAFT:
        spec = load_embedded_draft(dtype=dtype, device=device)
    draft = spec if isinstance(spec, CausalLM) else load_model(spec, dtype=dtype, device=device)
    if draft is target:
        raise ValueError("the draft wrapper must not be the target's own CausalLM (they would share a KV cache)")
    check_vocab_compatible(target, draft)
    return ModelDrafter(draft)


def _check_min_confidence(spec: Any, target: Any, min_confidence: Any) -> None:
    """``min_confidence`` of :func:`load_drafter`: a number in (0, 1), for a draft with an EAGLE head."""
    if isinstance(min_confidence, bool) or not isinstance(min_confidence, (int, float)) or \
            not 0.0 < float(min_confidence) < 1.0:
        raise ValueError(f"min_confidence must be a number in (0, 1) or None, got {min_confidence!r}")
    name = _resolve_draft_name(spec, target) if not isinstance(spec, (Drafter, CausalLM)) else None
    if isinstance(name, str) and name.startswith(HYBRID_PREFIX):
        name = name[len(HYBRID_PREFIX):]
    if not (isinstance(name, str) and (name == EMBEDDED_EAGLE or name.startswith("eagle:"))):
        raise ValueError(f"min_confidence gates an EAGLE head's drafts: draft {spec!r} has none; name 'eagle', "
                         "'eagle:PATH' or 'suffix+eagle', or set EagleDrafter.min_confidence on your own drafter")


DEFAULT_GAMMA = GenerationConfig.gamma  # γ when the caller names none: the engine's default (4)


def resolve_tree_spec(tree: str | TreeSpec | None, *, drafts: int | None, gamma: int | None,
                      verifier: Any, tree_law: str | None = None) -> TreeSpec:
    """The :class:`TreeSpec` for the tree options of :func:`generate` / ``specot generate``.

    ``tree`` is a :class:`TreeSpec` or a CLI form (see :func:`specot.drafting.tree.parse_tree_spec`);
    ``None`` means K = ``drafts`` sequences of draft length γ = ``gamma``. Where the form does not name
    the law (``None``, ``topology:FILE`` without one, ``eagle``), it is ``tree_law`` or else the
    verifier's own (:func:`default_law_for`: kseq/rrs → iid, rrs_wor → wor, greedy → greedy, ...).
    Forms without expansion factors take γ = ``gamma``, else the default γ (4); forms with factors
    take γ from them (a ``gamma`` that differs is refused).
    """
    if isinstance(tree, TreeSpec):
        return tree
    kind = (tree or "").partition(":")[0].strip().lower()
    names_law = kind not in ("", "topology", "eagle")
    law = tree_law if (tree_law or names_law) else default_law_for(verifier).value
    has_factors = ":" in (tree or "") and kind != "topology"
    if gamma is None and not has_factors:
        gamma = DEFAULT_GAMMA
    return parse_tree_spec(tree, drafts=drafts, gamma=gamma, law=law)


def _use_cuda_graphs(asked: bool | None, model: CausalLM) -> bool:
    """Whether :func:`generate` replays ``model``'s passes as CUDA graphs: as ``asked``, or by
    default (``None``) when the model is on CUDA and transformers marks its architecture as
    supporting static caches (``_can_compile_fullgraph``; an architecture without them keeps its
    own cache and eager passes)."""
    if asked is not None:
        return bool(asked)
    return model.device.type == "cuda" and bool(getattr(model.model, "_can_compile_fullgraph", False))


def generate(
    prompt: str | Sequence[int],
    *,
    target: str | CausalLM | None = None,
    draft: str | Drafter | CausalLM = "auto",
    gamma: int | None = None,
    gamma_schedule: str = "constant",
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    max_new_tokens: int = 128,
    seed: int | None = 0,
    verifier: str = "speculative",
    verifier_params: dict[str, Any] | None = None,
    baseline: bool = False,
    chat: bool | None = None,
    dtype: str | torch.dtype = "auto",
    device: str = "cpu",
    on_text: Callable[[str], None] | None = None,
    drafts: int | None = None,
    tree: str | TreeSpec | None = None,
    tree_law: str | None = None,
    ngram_n: int = 3,
    ngram_corpus: str | None = "pydoc",
    repeats: int = 1,
    generator: torch.Generator | None = None,
    cuda_graphs: bool | None = None,
) -> GenerateReport:
    """Speculative decoding of ``prompt`` with ``target`` and ``draft`` (see ``specot generate``).

    Args:
        prompt: text (chat-templated for instruct models unless ``chat=False``) or token ids.
        target: ``None``/``"smollm2"`` (embedded default), a path, a hub id or a :class:`CausalLM`.
            A name loads the model on every call (about 1 s for the embedded target from specot's
            cache, 13 s the first time: :mod:`specot.models.embedded`); pass
            ``specot.load_target(...)`` to load it once for many calls.
        draft: ``"auto"`` (default: the fastest plan measured, :func:`auto_plan` — suffix decoding
            with the shipped EAGLE head as draft trees for the embedded target on a CPU (bf16
            or float32), at temperature 0 pruned by the head's confidence,
            else ``"ngram"``), ``"eagle"`` (the shipped EAGLE-3 head of the embedded target),
            ``"distilled"``, ``"ngram"``, ``"suffix"`` (model-free draft trees, decoded by
            :func:`tree_generate` under the GREEDY law with the ``greedy`` verifier, depth ``gamma``,
            ``drafts`` children per node at most, default 4), a path / hub id of a
            draft model, a :class:`CausalLM` or a :class:`Drafter`.
        gamma: draft length γ >= 1 (default 4): the chain length, or the depth of a draft tree; a
            tree given by expansion factors (``prefix:2,2,1``) takes γ from them.
        gamma_schedule: ``"constant"`` or ``"heuristic"`` (adaptive γ; see :class:`GenerationConfig`).
        temperature, top_k, top_p: the standardized-sampling transform (temperature 0 = greedy).
        max_new_tokens: exact cap on new tokens.
        seed: seed of every random decision; ``None`` for a random seed.
        verifier: a single-draft verifier name (``"speculative"``, ``"lenient"``, ...).
        verifier_params: parameters of the verifier (e.g. ``{"lenience": 0.5}``). Parameters the
            verifier does not take are refused, and a lossy verifier (``lenient``, ``mentored``)
            needs its parameters given explicitly; ``report.lossless`` says which kind ran.
        baseline: also run autoregressive decoding on the same prompt (for ``report.speedup``),
            for exactly as many tokens as the speculative run produced (``stop_at_eos=False``), so
            the two rates are over equal lengths.
        repeats: with ``baseline``, run the (speculative, autoregressive) pair this many times
            (the first speculative run is the streamed one); ``report.speedup`` is the median
            ratio and ``report.speedups`` holds each. Pair r runs with ``seed + r`` (a given
            ``generator`` runs on), so at a temperature > 0 every pair decodes a fresh sample and
            the median is over answers (one answer's speedup varies far more than its timing:
            1.10-1.48x over seeds 0-5 of ``make demo``, docs/results.md); at temperature 0 every
            pair decodes the same text. The two runs of a pair decode equally many tokens.
        generator: a ``torch.Generator`` behind every random decision (overrides ``seed``).
        on_text: called with each newly decoded piece of text, for streaming.
        drafts, tree, tree_law: multi-draft tree decoding (``specot generate --drafts K --gamma L
            --tree ...``): K drafts of draft length ``gamma``, the
            construction (``iid | wor | greedy | spechub | prefix:k1,..,kL | topology:FILE | eagle``
            or a :class:`TreeSpec`; default K sequences under the verifier's law) and the law of a
            topology. The draft must be a model. When ``drafts`` and ``tree`` are both ``None`` the
            single-draft engine runs, unchanged.
        ngram_n, ngram_corpus: the n-gram drafter's order and table text (``"pydoc"``, a text
            file, or ``None`` for prompt lookup only), when the draft is ``"ngram"``.
        cuda_graphs: decode over static KV caches with the target's (and a draft model's) passes
            of up to 64 new tokens padded to a few widths and replayed as CUDA graphs
            (:meth:`CausalLM.use_static_cache`; each width is captured at its first use, well under
            0.1 s). ``None`` (default): on when the target is on CUDA and its architecture supports static
            caches (transformers' ``_can_compile_fullgraph``). On an H200 it cut a
            pass of the 135 M embedded target from 19 ms to 4 ms and made every decoding method
            2.3-4.3x faster, autoregressive decoding included (docs/engine.md); the outputs keep the
            exactness contract (greedy equal to autoregressive decoding in float32, checked on the
            GPU). Off CUDA, ``True`` runs the same padded passes eagerly (slower: the tests use it).
            A loaded target keeps its static cache and graphs for later calls.

    Exactness: with a lossless verifier the output is lossless in distribution given the target's
    logits; greedy (temperature 0) equals autoregressive decoding token for token in float32, and
    in bfloat16/float16 up to near-ties (multi-token and one-token passes round differently).

    Everything that does not need the model (sampling parameters, lengths, the verifier and its
    parameters, the tree construction, paths, dtype and device) is checked before any model is
    loaded.

    Returns:
        :class:`GenerateReport`.

    Raises:
        ValueError: invalid sampling parameters, γ or lengths, unknown verifier or a parameter it
            does not take, an unusable device, vocabulary mismatch, an empty prompt, prompt too
            long for the target's context.
        TypeError: an argument of the wrong type (e.g. ``target=123``).
        FileNotFoundError / OSError: a model path that does not exist or cannot be loaded.
        GenerationInterrupted: Ctrl-C during decoding (a ``KeyboardInterrupt`` holding the tokens
            generated so far).
    """
    # ---- everything that does not need the model, before the load
    if isinstance(seed, bool) or not (seed is None or isinstance(seed, int)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}; pass a torch.Generator to "
                        "specot.speculative_generate(generator=...) instead")
    min_confidence = None
    if _is_auto(draft):  # the fastest measured plan for this target and device (one rule: auto_plan)
        plan = auto_plan(target, device, dtype=dtype, temperature=temperature, drafts=drafts, gamma=gamma, tree=tree,
                         verifier=verifier, verifier_params=verifier_params)
        draft, drafts, gamma, min_confidence = plan.draft, plan.drafts, plan.gamma, plan.min_confidence
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, gamma=DEFAULT_GAMMA if gamma is None else gamma, seed=seed,
                           gamma_schedule=gamma_schedule,
                           sampling=SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p))
    if not isinstance(prompt, str):
        try:
            if isinstance(prompt, (bytes, bytearray)) or any(isinstance(t, bool) for t in prompt):
                raise TypeError
            prompt = [operator.index(t) for t in prompt]  # ints, numpy ints, integer tensors
        except TypeError:
            raise TypeError(f"prompt must be text or a sequence of token ids (ints), got {type(prompt).__name__}") \
                from None
        if len(prompt) == 0:
            raise ValueError("the prompt is empty: pass at least one token id")
    elif chat is False and not prompt.strip():
        raise ValueError("the prompt is empty: a raw prompt (no chat template) needs some text")
    check_generator(generator)
    check_count(repeats, "repeats")
    ver = build_verifier(verifier, verifier_params)
    resolve_dtype(dtype, device)
    check_device(device)
    target_src = _check_target_source(target)
    draft = _resolve_draft_name(draft, target)
    _check_draft_source(draft, ngram_n=ngram_n, ngram_corpus=ngram_corpus)
    spec, ver = decoding_plan(draft, ver, verifier=verifier, verifier_params=verifier_params, gamma=gamma,
                              drafts=drafts, tree=tree, tree_law=tree_law)
    vocab, context = _peek_vocab_and_context(target_src)
    if context and max_new_tokens >= context:
        raise ValueError(f"max_new_tokens {max_new_tokens} does not fit the target's context of {context} positions "
                         f"(prompt included); use at most {context - 1}")
    _check_otm_size(ver, vocab, cfg.sampling)

    # ---- load the models
    tgt = load_target(target, dtype=dtype, device=device)
    _check_otm_size(ver, tgt.vocab_size, cfg.sampling)
    drafter = load_drafter(draft, tgt, dtype=dtype, device=device, ngram_n=ngram_n, ngram_corpus=ngram_corpus,
                           min_confidence=min_confidence)
    if spec is not None and not isinstance(drafter, (ModelDrafter, SuffixDrafter, EagleDrafter, HybridDrafter)):
        raise ValueError("multi-draft tree decoding needs a draft MODEL (draft=PATH or a CausalLM), not an n-gram drafter")
    ids = tgt.encode_prompt(prompt, chat=chat) if isinstance(prompt, str) else [int(t) for t in prompt]
    if not ids:
        raise ValueError("the prompt is empty after tokenization: pass some text (or use the chat template)")
    models = [tgt, drafter.model] if isinstance(drafter, ModelDrafter) else [tgt]
    graphs = _use_cuda_graphs(cuda_graphs, tgt)
    if graphs:
        # room for the prompt, the output, one draft tree (a chain may grow to 2γ) and the padding of a pass
        span = (len(ids) + max_new_tokens + (spec.num_slots if spec is not None else 2 * cfg.gamma) + 8
                + GRAPH_WIDTHS[-1])
        for m in models:
            if not _use_cuda_graphs(cuda_graphs, m):
                continue
            if m.static_cache_len is None or m.static_cache_len < min(span, m.max_context):
                m.use_static_cache(min(span, m.max_context), cuda_graphs=True)
        drafter.use_static_cache(min(span, tgt.max_context), cuda_graphs=True)  # EAGLE's temperature-0 trees

    streamed: list[int] = []
    printed = [""]

    def stream(tokens: list[int]) -> None:
        streamed.extend(tokens)
        if on_text is None:
            return
        text = tgt.decode(streamed).rstrip("\ufffd")  # hold back a partial multi-byte character
        if text.startswith(printed[0]) and len(text) > len(printed[0]):
            on_text(text[len(printed[0]):])
            printed[0] = text

    info = verifier_info(ver)
    dtype_name = str(tgt.dtype).removeprefix("torch.")
    if graphs and baseline:
        # capture the CUDA graphs that the plan meets before timing it, as the benchmarks' warm-up runs do:
        # the first speculative run would pay every capture and the baseline none (on an H200 a first
        # pair measured 0.26x against 0.95x for the next four). Its own generator: the user's is untouched.
        warm = dataclasses.replace(cfg, max_new_tokens=min(cfg.max_new_tokens, 16))
        g_warm = make_generator(0, tgt.device)
        if spec is None:
            speculative_generate(tgt, drafter, ids, warm, verifier=ver, generator=g_warm)
        else:
            tree_generate(tgt, drafter, ids, spec, warm, verifier=ver, generator=g_warm)
        autoregressive_generate(tgt, ids, dataclasses.replace(warm, max_new_tokens=2), generator=g_warm)
    t0 = time.perf_counter()
    try:
        if spec is None:
            result = speculative_generate(tgt, drafter, ids, cfg, verifier=ver, generator=generator, on_tokens=stream)
        else:
            result = tree_generate(tgt, drafter, ids, spec, cfg, verifier=ver, generator=generator, on_tokens=stream)
    except KeyboardInterrupt:
        raise GenerationInterrupted(list(streamed), tgt.decode(streamed), time.perf_counter() - t0,
                                    "speculative") from None
    shape = "chain" if spec is None else f"tree {spec.max_drafts_per_node()}x{spec.depth}"
    if min_confidence is not None:
        shape += f", min_confidence {min_confidence:g}"
    report = GenerateReport(result=result, prompt_tokens=len(ids), verifier=info, dtype=dtype_name,
                            draft=f"{draft if isinstance(draft, str) else drafter.name}, {shape}",
                            cuda_graphs=tgt.cuda_graphs)
    if baseline:
        try:
            for r in range(repeats):
                # pair r runs with seed + r (a given generator runs on): a fresh answer at T > 0
                run_cfg = cfg if r == 0 or cfg.seed is None else dataclasses.replace(cfg, seed=cfg.seed + r)
                if r:
                    phase = "speculative"
                    streamed.clear()
                    t0 = time.perf_counter()
                    again = (speculative_generate(tgt, drafter, ids, run_cfg, verifier=ver, generator=generator,
                                                  on_tokens=streamed.extend) if spec is None else
                             tree_generate(tgt, drafter, ids, spec, run_cfg, verifier=ver, generator=generator,
                                           on_tokens=streamed.extend))
                else:
                    again = result
                phase = "baseline"
                streamed.clear()
                # equal lengths: the baseline decodes exactly as many tokens as this pair's speculative run
                base_cfg = dataclasses.replace(run_cfg, max_new_tokens=max(1, len(again.tokens)), stop_at_eos=False)
                t0 = time.perf_counter()
                base = autoregressive_generate(tgt, ids, base_cfg, generator=generator, on_tokens=streamed.extend)
                report.baseline = report.baseline or base
                if base.stats.tokens_per_s > 0:
                    report.speedups.append(again.stats.tokens_per_s / base.stats.tokens_per_s)
        except KeyboardInterrupt:
            raise GenerationInterrupted(list(streamed), tgt.decode(streamed), time.perf_counter() - t0, phase,
                                        report) from None
        try:
            load = [round(x, 2) for x in os.getloadavg()]
        except (OSError, AttributeError):
            load = None
        cores = os.cpu_count()
        report.timing = {"tokens": report.baseline.stats.new_tokens, "repeats": repeats, "load_average": load,
                         "cpu_count": cores, "busy": bool(load and cores and load[0] > cores)}
    return report


#: The verifier a draft tree gets when none is named (``verifier="speculative"``, the default, takes
#: one draft): the optimal one for the GREEDY law (Hu et al. 2025, Sec. 5) and for SpecHub's, RRS
#: without replacement for WOR (Jeon et al. 2024), k-Seq for IID (SpecTr, Sun et al. 2023).
TREE_VERIFIERS = {DraftLaw.GREEDY: "greedy", DraftLaw.WOR: "rrs_wor", DraftLaw.IID: "kseq", DraftLaw.SPECHUB: "spechub"}


def decoding_plan(draft: Any, ver: Any, *, verifier: str = "speculative", verifier_params: dict[str, Any] | None = None,
                  gamma: int | None = None, drafts: int | None = None,
                  tree: str | TreeSpec | None = None, tree_law: str | None = None) -> tuple[TreeSpec | None, Any]:
    """The draft-tree shape and the verifier for a draft (a name or a drafter) and the tree options —
    the one place where :func:`generate` and the benchmarks decide how a drafter decodes.

    * ``"suffix"`` (or a :class:`SuffixDrafter`): model-free draft trees whose children are
      deterministic distinct tokens, i.e. the GREEDY law with q on the children; ``greedy`` (which
      then accepts with probability p(children), the optimum) replaces the default verifier.
    * ``"suffix+MODEL"`` (or a :class:`HybridDrafter`) with ``drafts`` / ``tree``: GREEDY-law trees
      from both drafters, verified by ``greedy``; without them, chains (any single-draft verifier).
    * ``drafts`` / ``tree``: a draft tree from a draft model or an EAGLE head
      (:func:`resolve_tree_spec`); ``otm`` gets the tree's own law, and the default ``speculative``
      (one draft only) is replaced by the tree law's verifier (:data:`TREE_VERIFIERS`).
    * otherwise one draft chain of γ tokens (``spec`` is ``None``).

    Returns:
        ``(spec or None, verifier)``, the verifier checked valid for the construction.

    Raises:
        ValueError: a tree option the draft cannot take, or a verifier not valid for the construction.
    """
    if drafts is not None:  # drafts per node of a draft tree; unset: a chain, or auto's tree
        check_count(drafts, "drafts", "--drafts")
    spec: TreeSpec | None = None
    if isinstance(draft, str) and draft == "suffix" or isinstance(draft, SuffixDrafter):
        # model-free draft TREES: deterministic distinct children = the GREEDY law (q over the children)
        if tree is not None:
            raise ValueError("the suffix drafter builds its own draft trees; use drafts=K (children per node) and "
                             "gamma (depth), not tree=")
        if verifier == "speculative" and not verifier_params:
            ver = build_verifier(TREE_VERIFIERS[DraftLaw.GREEDY])  # optimal: accepts with probability p(children)
        width = drafts if drafts is not None else (draft.max_children if isinstance(draft, SuffixDrafter) else 4)
        spec = TreeSpec.sequences(width, DEFAULT_GAMMA if gamma is None else gamma, DraftLaw.GREEDY)
        spec.check_verifier(ver)
    elif drafts is not None or tree is not None:
        hybrid = _is_hybrid(draft)
        if hybrid:  # suffix trees are GREEDY-law trees, so the model drafter's must be too (one verifier for both)
            if tree is not None and not _names_greedy_tree(tree):
                raise ValueError(f"a suffix+MODEL draft drafts GREEDY-law trees; use tree='greedy' or drafts=K, "
                                 f"not {tree!r}")
            tree, drafts, tree_law = tree or "greedy", drafts or 2, DraftLaw.GREEDY.value
        elif isinstance(draft, str) and draft == "ngram" or isinstance(draft, Drafter) \
                and not isinstance(draft, (ModelDrafter, EagleDrafter)):
            raise ValueError("multi-draft tree decoding (drafts / tree) needs a draft MODEL (a directory, 'distilled' "
                             "or a CausalLM), not an n-gram drafter")
        spec = resolve_tree_spec(tree, drafts=drafts, gamma=gamma, verifier=ver, tree_law=tree_law)
        if verifier == "speculative" and not verifier_params and (hybrid or spec.max_drafts_per_node() > 1):
            ver = build_verifier(TREE_VERIFIERS[spec.law])  # the default verifier cannot take n > 1 drafts
        if verifier == "otm" and "law" not in (verifier_params or {}):
            ver = get_verifier("otm", law=spec.law)  # the exact OT plan for the tree's own law
        spec.check_verifier(ver)
    else:
        ver.check_construction(DraftLaw.IID, 1)
    return spec, ver


#: ``draft="suffix+MODEL"``: suffix decoding combined with the draft model MODEL (:class:`HybridDrafter`).
HYBRID_PREFIX = "suffix+"


def _names_greedy_tree(tree: Any) -> bool:
    """Whether a ``tree`` option names a GREEDY-law tree (``"greedy"``, ``"greedy:k1,..."`` or an
    empty law): the only trees a ``suffix+MODEL`` draft drafts."""
    return str(tree).partition(":")[0].strip().lower() in ("", "greedy")


def _is_hybrid(draft: Any) -> bool:
    return isinstance(draft, HybridDrafter) or isinstance(draft, str) and draft.startswith(HYBRID_PREFIX)


def _check_target_source(target: Any) -> Any:
    """Type and path checks of ``target`` before loading (see :func:`load_target`)."""
    if target is None or isinstance(target, CausalLM):
        return target
    if isinstance(target, Path):
        target = str(target)
    if not isinstance(target, str):
        raise TypeError(f"target must be None, 'smollm2', a model directory / hub id or a CausalLM, "
                        f"got {type(target).__name__}")
    if target != EMBEDDED_TARGET:
        check_model_source(target)
    return target


#: ``draft="auto"`` on the embedded target on a CPU (bfloat16, or float32 where oneDNN prepacks the
#: head's layers): suffix decoding with the shipped
#: EAGLE head (:class:`HybridDrafter`), drafting GREEDY-law trees of ``(children per node, depth)``:
#: :data:`AUTO_TREE` at temperatures > 0, :data:`AUTO_TREE_GREEDY` at temperature 0 — the fastest
#: plans measured on held-out prompt sets (docs/results.md "Session 16 runs": at T = 0 the 3 x 6
#: tree gained 4 % on the mean of eight sets, on six of them, from a re-ranked tree that prunes
#: itself; at T = 1 it lost on all three sets measured, and 2 x 3 has stayed the fastest shape
#: there since session 9). In float32 (CPUs without native bf16) the same plan beat n-gram drafting
#: in every cell of six sets once the head ran prepacked (docs/results.md "Session 23 runs"; with
#: int8 weights it had lost). Elsewhere ``"ngram"``. On CUDA, where ``generate`` replays the passes
#: as CUDA graphs by default, n-gram drafting won every cell on an H200 (session 28, docs/engine.md;
#: code / chat prompts, T = 0 / 1: 1.54x / 1.28x / 1.22x / 0.92x against 1.19x / 0.84x / 0.73x / 0.62x
#: for the 2 x 3 EAGLE tree): a graphed target pass costs 4-5 ms and the eager EAGLE draft 3.5-9 ms.
#: Eagerly the 3 x 6 EAGLE tree led at T = 0 on code (1.96x against 1.53x).
AUTO_HYBRID = "suffix+eagle"
AUTO_TREE = (2, 3)
AUTO_TREE_GREEDY = (3, 6)
#: τ of the head's confidence gate in ``auto``'s trees at temperature 0
#: (:class:`~specot.drafting.EagleDrafter` ``min_confidence``: a node is expanded only while its path's
#: cumulative draft probability is at least τ). It prunes the expansions the 3 x 6 tree wastes on
#: everyday requests: +4.5 % on the mean of eight prompt sets and +9 % on held-out prompts, same runs
#: (docs/results.md "Session 17 runs"). Above temperature 0 the gate is off: on 2 x 3 trees at T = 1
#: it lost 2 % on the mean of the eight sets.
AUTO_MIN_CONFIDENCE_GREEDY = 0.1


@dataclass(frozen=True)
class AutoPlan:
    """What ``draft="auto"`` decodes with (:func:`auto_plan`)."""

    draft: str  # the drafter, named as load_drafter() takes it
    drafts: int | None  # children per node of the draft tree; None: a chain, or the caller's tree options
    gamma: int | None  # draft length γ (the depth of a tree); None: the engine's default
    min_confidence: float | None = None  # τ of the EAGLE head's confidence gate; None: off


def _is_auto(draft: Any) -> bool:
    return isinstance(draft, str) and draft == "auto"


def auto_plan(target: Any, device: str = "cpu", *, dtype: str | torch.dtype = "auto", temperature: float = 1.0,
              drafts: int | None = None, gamma: int | None = None, tree: Any = None, verifier: str = "speculative",
              verifier_params: dict[str, Any] | None = None) -> AutoPlan:
    """What ``draft="auto"`` decodes with: an :class:`AutoPlan` (draft name, drafts, γ, confidence gate).

    * The embedded target (``None``, ``"smollm2"`` or its loaded :class:`CausalLM`) on a CPU, in
      bfloat16, or in float32 where oneDNN prepacks the head's layers (``dtype``, or the loaded
      target's; ``"auto"`` is bf16 where matmuls are native, else float32):
      ``"suffix+eagle"``. With no tree options and the default verifier, as draft trees of
      :data:`AUTO_TREE` — 2 children per node, depth 3 — at ``temperature`` > 0 and of
      :data:`AUTO_TREE_GREEDY` — 3 children per node, depth 6 — at temperature 0 (``gamma`` given:
      that depth), where the head's confidence gate τ = :data:`AUTO_MIN_CONFIDENCE_GREEDY` prunes
      the tree; with another verifier, as chains. With tree options (``drafts`` / ``tree``):
      GREEDY-law trees of ``"suffix+eagle"`` as given, and for any other tree law or verifier
      ``"eagle"``, whose trees take every draft law.
    * Anything else: ``"ngram"`` (prompt lookup + an n-gram table), the options unchanged.
    """
    embedded = target is None or (isinstance(target, str) and target == EMBEDDED_TARGET) or (
        isinstance(target, CausalLM) and is_embedded_target(target))
    loaded = isinstance(target, CausalLM)
    on_cpu = str(target.device if loaded else device).startswith("cpu")
    dt = target.dtype if loaded else resolve_dtype(dtype, device)
    if not (embedded and on_cpu and (dt == torch.bfloat16 or dt == torch.float32 and prepacking_available(dt))):
        return AutoPlan("ngram", drafts, gamma)
    if drafts is None and tree is None:
        if verifier == "speculative" and not verifier_params:  # auto's own tree
            greedy = temperature == 0
            drafts, depth = AUTO_TREE_GREEDY if greedy else AUTO_TREE
            return AutoPlan(AUTO_HYBRID, drafts, depth if gamma is None else gamma,
                            AUTO_MIN_CONFIDENCE_GREEDY if greedy else None)
        return AutoPlan(AUTO_HYBRID, drafts, gamma)  # chains under the caller's verifier
    greedy_tree = tree is None or (isinstance(tree, str) and _names_greedy_tree(tree))
    if greedy_tree and verifier in ("speculative", "greedy") and not verifier_params:
        return AutoPlan(AUTO_HYBRID, drafts, gamma)  # the hybrid's trees are GREEDY-law trees
    return AutoPlan(EMBEDDED_EAGLE, drafts, gamma)


def _resolve_draft_name(draft: Any, target: Any = None) -> Any:
    """``"auto"`` → the drafter :func:`auto_plan` picks for ``target`` (a loaded :class:`CausalLM`)."""
    if isinstance(draft, Path):
        draft = str(draft)
    if _is_auto(draft):
        return auto_plan(target).draft
    return draft


def _check_draft_source(draft: Any, *, ngram_n: int, ngram_corpus: str | None) -> None:
    if isinstance(draft, (Drafter, CausalLM)):
        return
    if not isinstance(draft, str):
        raise TypeError(f"draft must be 'auto', 'distilled', 'ngram', a model directory / hub id, a CausalLM or a "
                        f"Drafter, got {type(draft).__name__}")
    if draft.startswith(HYBRID_PREFIX):
        model = draft[len(HYBRID_PREFIX):]
        if model in ("", "auto", "ngram", "suffix") or model.startswith(HYBRID_PREFIX):
            raise ValueError(f"draft {draft!r}: after 'suffix+' name a draft MODEL ('eagle', 'eagle:PATH', 'distilled' "
                             "or a directory)")
        _check_draft_source("suffix", ngram_n=ngram_n, ngram_corpus=ngram_corpus)
        _check_draft_source(model, ngram_n=ngram_n, ngram_corpus=ngram_corpus)
    elif draft in ("ngram", "suffix"):
        check_count(ngram_n, "ngram_n", "--ngram-n")
        if ngram_corpus and ngram_corpus != "pydoc":
            f = Path(ngram_corpus).expanduser()
            if not f.is_file():
                what = "is a directory" if f.is_dir() else "does not exist"
                raise FileNotFoundError(f"n-gram corpus {ngram_corpus!r} {what}; name a text file, 'pydoc' or 'none'")
    elif draft.startswith("eagle:"):
        where = draft[len("eagle:"):]
        hub_id = where.count("/") == 1 and not where.startswith(("/", ".", "~"))
        if not (Path(where).expanduser() / "config.json").is_file() and not hub_id:
            raise FileNotFoundError(f"EAGLE head {where!r}: no config.json there")
    elif draft == EMBEDDED_EAGLE:
        if not (embedded_eagle_dir() / "config.json").exists():
            raise FileNotFoundError(f"no EAGLE head in {embedded_eagle_dir()}; reinstall specot or use draft 'ngram'")
    elif draft == EMBEDDED_DRAFT:
        if not (embedded_draft_dir() / "config.json").exists():
            raise FileNotFoundError(f"no distilled draft checkpoint in {embedded_draft_dir()}; reinstall specot or "
                                    "use draft 'ngram'")
    else:
        check_model_source(draft)


def _peek_vocab_and_context(target: Any) -> tuple[int | None, int | None]:
    """(vocabulary size, context length) of the target without loading it, where known."""
    if isinstance(target, CausalLM):
        return target.vocab_size, target.max_context
    if target is None or target == EMBEDDED_TARGET:
        return 49152, 8192  # SmolLM2-135M-Instruct
    cfg = Path(str(target)).expanduser() / "config.json"
    if cfg.is_file():
        try:
            obj = json.loads(cfg.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            return None, None
        vocab, ctx = obj.get("vocab_size"), obj.get("max_position_embeddings")
        return (vocab if isinstance(vocab, int) else None), (ctx if isinstance(ctx, int) else None)
    return None, None


def _check_otm_size(ver: Any, vocab: int | None, sampling: SamplingConfig) -> None:
    """Refuse the OTM verifier where its exact LP cannot be built (non-tiny vocabularies)."""
    if getattr(ver, "name", "") != "otm" or not vocab:
        return

    support = 1 if sampling.greedy else min(vocab, sampling.top_k or vocab)
    if support > MAX_OTM_SETS:
        raise ValueError(
            f"verifier 'otm' cannot run here: it solves an exact linear program over every set of distinct drafts, "
            f"and a draft support of {support} tokens (vocabulary {vocab}"
            + ("" if sampling.top_k else ", no top-k") + f") gives at least {support} sets, above its limit of "
            f"{MAX_OTM_SETS}. OTM is the reference optimum for tiny vocabularies (tests, specot theory alpha "
            "--verifiers); decode with speculative, kseq, rrs, rrs_wor, greedy or spechub, or bound the support "
            f"with top_k <= {MAX_OTM_SETS}")
