"""What :func:`specot.generate` returns (:class:`GenerateReport`) or raises on Ctrl-C
(:class:`GenerationInterrupted`), and the text stream of a generation (:class:`TokenStream`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from .engine.types import GenerationResult

__all__ = ["EXACTNESS", "GenerateReport", "GenerationInterrupted", "TokenStream"]

#: The exactness contract, in one line (README, ``specot generate --help``, the report's "exactness").
EXACTNESS = ("lossless in distribution given the target's logits; greedy = autoregressive in float32; "
             "in bf16/fp16 equal up to near-ties (kernel rounding)")


@dataclass(frozen=True)
class GenerateReport:
    """What :func:`specot.generate` returns.

    Attributes:
        result: the speculative generation (text, tokens, statistics).
        baseline: the autoregressive generation on the same prompt, when asked for.
        prompt_tokens: length of the encoded prompt.
        verifier: ``{"name", "params", "lossless"}`` of the verifier that ran.
        dtype: the target's dtype (greedy equality with autoregressive decoding is guaranteed in
            float32 only), or the weight type of a backend that runs its file's own weights (e.g.
            ``"Q4_1"`` on llama.cpp: :attr:`specot.plan.Backend.weights`).
        speedups: speculative / autoregressive tokens/s of each repeat (a fresh sample each at
            T > 0), both runs of a repeat producing the same number of tokens.
        timing: ``{"tokens", "repeats", "load_average", "cpu_count", "busy"}`` of the speedup
            measurement (``busy``: the 1-minute load average exceeded the core count).
        draft: the draft and shape that ran, e.g. ``"suffix+eagle, tree 2x3"`` (what ``"auto"``
            resolved to; :meth:`specot.plan.DecodingPlan.describe`).
        cuda_graphs: whether the target's passes ran padded as CUDA graphs.
        backend: the target backend that ran (``"transformers"``, ``"llamacpp"``, ...).
        pass_cost: the measured pass-cost curve that priced the drafter's budget
            (:meth:`specot.calibration.PassCostCurve.to_dict`: widths, t_ms, ratios, the key it was
            measured under), or ``None`` when none did (a linear model or no budget).
        exactness: the exactness contract of that backend with a lossless verifier, in one line
            (:data:`EXACTNESS` on transformers; :attr:`specot.plan.Backend.exactness`).
    """

    result: GenerationResult
    baseline: GenerationResult | None = None
    prompt_tokens: int = 0
    verifier: dict[str, Any] = field(default_factory=dict)
    dtype: str = ""
    speedups: tuple[float, ...] = ()
    timing: dict[str, Any] = field(default_factory=dict)
    draft: str = ""
    cuda_graphs: bool = False
    backend: str = "transformers"
    pass_cost: dict[str, Any] | None = None
    exactness: str = EXACTNESS

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
        """The report as JSON-ready data (what ``specot generate --json`` prints)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "speculative": self.result.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "speedup": self.speedup,
            "speedups": list(self.speedups),
            "draft": self.draft,
            "backend": self.backend,
            "pass_cost": self.pass_cost,
            "cuda_graphs": self.cuda_graphs,
            "timing": self.timing,
            "verifier": self.verifier.get("name"),
            "verifier_params": self.verifier.get("params", {}),
            "lossless": self.lossless,
            "dtype": self.dtype,
            "exactness": (self.exactness if self.lossless
                          else "lossy: the output does NOT follow the target's distribution"),
        }


class GenerationInterrupted(KeyboardInterrupt):
    """Raised by :func:`specot.generate` on Ctrl-C (a :class:`KeyboardInterrupt`): what was generated so far.

    Attributes:
        tokens: the token ids committed before the interrupt (as streamed by the engine).
        text: their decoded text.
        elapsed_s: wall time of the interrupted decoding, seconds.
        phase: ``"speculative"`` or ``"baseline"`` (an autoregressive run after it).
        report: the finished speculative report when a baseline run was interrupted, else ``None``.
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


class TokenStream:
    """The tokens of one run as the engine commits them (``on_tokens``), and their text handed to
    ``on_text`` piece by piece (a partial multi-byte character is held back)."""

    def __init__(self, decode: Callable[[list[int]], str], on_text: Callable[[str], None] | None = None) -> None:
        self.decode, self.on_text = decode, on_text
        self.tokens: list[int] = []
        self._printed = ""

    def __call__(self, tokens: list[int]) -> None:
        self.tokens.extend(tokens)
        if self.on_text is None:
            return
        text = self.decode(self.tokens).rstrip("\ufffd")
        if text.startswith(self._printed) and len(text) > len(self._printed):
            self.on_text(text[len(self._printed):])
            self._printed = text

    def restart(self) -> "TokenStream":
        """A new run: forget the tokens, stream nothing more (repeats are not shown)."""
        self.tokens, self.on_text, self._printed = [], None, ""
        return self

    def interrupted(self, elapsed_s: float, phase: str, report: GenerateReport | None = None) -> GenerationInterrupted:
        return GenerationInterrupted(list(self.tokens), self.decode(self.tokens), elapsed_s, phase, report)
