"""``eagle`` (the shipped EAGLE-3 head of the embedded target) and ``eagle:PATH`` (any EAGLE-3
head: trained by ``specot distill eagle``, or published in EAGLE-3's or vLLM speculators' layout):
a feature-level drafter on the target's hidden states (:class:`~specot.drafting.EagleDrafter`;
Li et al., EAGLE-3, 2025); trees of any draft law."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from ...drafting.eagle import EagleDrafter
from ...models.embedded import EMBEDDED_EAGLE, embedded_eagle_dir, is_embedded_target
from ..backends import backend_of, capabilities_for
from ..draft import DraftKind, DraftSpec, Option, register_kind

EAGLE_PREFIX = "eagle:"


def _check_min_confidence(v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < float(v) < 1.0:
        raise ValueError(f"min_confidence must be a number in (0, 1) or None, got {v!r}")
    return float(v)


class EagleKind(DraftKind):
    name = "eagle"
    syntax = "eagle | eagle:PATH"
    summary = "the shipped EAGLE-3 head of the embedded target, or one at PATH (reads the target's hidden states)"
    classes = (EagleDrafter,)
    hidden_states = True
    #: τ of the head's confidence gate: a node is expanded only while its path's cumulative draft
    #: probability is at least τ (None: off).
    options = {"min_confidence": Option(None, _check_min_confidence)}

    def parse(self, text: str, options: Mapping[str, Any]) -> DraftSpec | None:
        if text == EMBEDDED_EAGLE:
            return DraftSpec(self.name, text, source=None, options=self.fill(options))
        if text.startswith(EAGLE_PREFIX):
            return DraftSpec(self.name, text, source=text[len(EAGLE_PREFIX):], options=self.fill(options))
        return None

    def check(self, spec: DraftSpec) -> None:
        if spec.obj is not None:
            return
        if spec.source is None:
            if not (embedded_eagle_dir() / "config.json").exists():
                raise FileNotFoundError(f"no EAGLE head in {embedded_eagle_dir()}; reinstall specot or use draft "
                                        "'ngram'")
            return
        where = spec.source
        hub_id = where.count("/") == 1 and not where.startswith(("/", ".", "~"))
        if not (Path(where).expanduser() / "config.json").is_file() and not hub_id:
            raise FileNotFoundError(f"EAGLE head {where!r}: no config.json there")

    def load(self, spec: DraftSpec, target: Any, *, dtype: Any, device: str) -> EagleDrafter:
        gate = {} if spec.option("min_confidence") is None else {"min_confidence": spec.option("min_confidence")}
        backend = backend_of(target)
        capabilities_for(target, backend).check_hidden_states(f"draft {spec.name!r}", backend)
        if spec.source is not None:
            return EagleDrafter.from_pretrained(spec.source, target, **gate)
        if not is_embedded_target(target):
            raise ValueError(f"draft 'eagle' is the shipped head of the embedded target; for {target.name!r} "
                             "use 'eagle:PATH' (a head trained for that target)")
        return EagleDrafter.from_pretrained(embedded_eagle_dir(), target, **gate)


KIND = register_kind(EagleKind())
