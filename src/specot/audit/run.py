"""One audit of an engine × method × setting (:func:`audit_sampling`, :func:`audit_greedy`), the
table of a run (:func:`render_table`) and its JSON (:func:`rows_to_json`, :func:`recheck_json`).

Reference: a sampled setting is tested against the exact law when an adapter exposes the
target's logits (``law_from``, the audited adapter itself by default when it has them), else
against a sample of plain decoding of the same engine (``reference``, two-sample test).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..outputs import dumps, strict
from ..sampling import SamplingConfig
from .adapters import Adapter
from .stats import (GreedyVerdict, SamplingVerdict, audit_exact_law, audit_two_sample, compare_greedy, holm,
                    samples_for_tv, verdict_from_dict)

__all__ = ["AuditRow", "audit_sampling", "audit_greedy", "render_table", "rows_to_json", "recheck_json",
           "setting_label", "harness_table"]


def setting_label(sampling: SamplingConfig) -> str:
    """``"T=0.6"``, ``"T=1 top-p=0.9 top-k=20"``: the setting column of the table."""
    text = f"T={sampling.temperature:g}"
    if sampling.top_p < 1:
        text += f" top-p={sampling.top_p:g}"
    if sampling.top_k:
        text += f" top-k={sampling.top_k}"
    return text


@dataclass(frozen=True)
class AuditRow:
    """One line of the audit table.

    Attributes:
        engine, method, setting: what was audited (``setting``: :func:`setting_label`).
        sampling: temperature, top_p, top_k.
        verdict: :class:`SamplingVerdict` (T > 0) or :class:`GreedyVerdict` (T = 0).
        reference: ``"exact law"``, ``"plain sample"`` or ``"plain decoding"`` (greedy).
        seconds: wall time of sampling and testing.
        prompt: the prompt's token ids (its text for a server).
        note: free text (e.g. the machine's load).
        pilot_samples: samples of a pilot run that sized this one (``target_tv``), set aside.
    """

    engine: str
    method: str
    setting: str
    sampling: dict[str, Any]
    verdict: SamplingVerdict | GreedyVerdict
    reference: str
    seconds: float
    prompt: tuple[int, ...] | str = ()
    note: str = ""
    pilot_samples: int = 0

    @property
    def label(self) -> str:
        return self.verdict.label

    def to_dict(self) -> dict[str, Any]:
        return dict(engine=self.engine, method=self.method, setting=self.setting, sampling=self.sampling,
                    reference=self.reference, seconds=self.seconds,
                    prompt=self.prompt if isinstance(self.prompt, str) else list(self.prompt), note=self.note,
                    pilot_samples=self.pilot_samples, label=self.label, verdict=self.verdict.to_dict())

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AuditRow":
        """A saved row with its verdict recomputed from the saved counts (:func:`stats.recheck`)."""
        return cls(engine=d["engine"], method=d["method"], setting=d["setting"], sampling=d["sampling"],
                   verdict=verdict_from_dict(d["verdict"]), reference=d["reference"], seconds=float(d["seconds"]),
                   prompt=_prompt_record(d.get("prompt", ())), note=d.get("note", ""),
                   pilot_samples=int(d.get("pilot_samples", 0)))


def audit_sampling(adapter: Adapter, sampling: SamplingConfig, prompt_ids: Sequence[int], *, k: int = 3,
                   samples: int = 2000, alpha: float = 1e-3, seed: int = 0, law_from: Adapter | None = None,
                   reference: Adapter | None = None, reference_samples: int | None = None,
                   min_prefix: int = 50, note: str = "", target_tv: float | None = None,
                   max_samples: int = 200_000, max_seconds: float | None = None) -> AuditRow:
    """Audit one sampled setting (T > 0) of ``adapter``: ``samples`` runs of ``k`` tokens.

    Args:
        law_from: the adapter whose ``target_law`` is the reference (default: ``adapter`` when it
            has one).
        reference: else, a plain-decoding adapter sampled ``reference_samples`` times (default
            ``samples``) with another seed.
        min_prefix: the fewest samples behind a tested prefix (:func:`stats.audit_exact_law`).
        target_tv: size the audit for this detectable TV at every position: ``samples`` become a
            pilot run (another seed, set aside) whose verdict predicts the size
            (:func:`stats.samples_for_tv`), at most ``max_samples`` and what fits in
            ``max_seconds`` at the pilot's pace (the reference sample is as large).

    Raises:
        ValueError: a greedy ``sampling`` (use :func:`audit_greedy`), no reference at all.
    """
    if sampling.greedy:
        raise ValueError("temperature 0 is audited by audit_greedy (token equality), not by sampling")
    law = law_from if law_from is not None else (adapter if adapter.has_law else None)
    if law is None and reference is None:
        raise ValueError(f"{adapter.engine} exposes no target law: give a plain-decoding reference")
    t0 = time.perf_counter()
    pilot = 0
    if target_tv is not None:
        pilot = samples
        pv = _verdict(adapter, sampling, prompt_ids, k, samples, alpha, seed + 7_919, law, reference,
                      reference_samples, min_prefix)
        pace = (time.perf_counter() - t0) / samples
        samples = min(samples_for_tv(pv, target_tv), max_samples)
        if max_seconds is not None:
            samples = max(pilot, min(samples, int((max_seconds - (time.perf_counter() - t0)) / pace)))
        reference_samples = samples
    verdict = _verdict(adapter, sampling, prompt_ids, k, samples, alpha, seed, law, reference, reference_samples,
                       min_prefix)
    return AuditRow(engine=adapter.engine, method=adapter.method, setting=setting_label(sampling),
                    sampling=_sampling_dict(sampling), verdict=verdict,
                    reference="exact law" if law is not None else "plain sample",
                    seconds=time.perf_counter() - t0, prompt=_prompt_record(prompt_ids), note=note,
                    pilot_samples=pilot)


def _verdict(adapter: Adapter, sampling: SamplingConfig, prompt_ids: Sequence[int], k: int, samples: int,
             alpha: float, seed: int, law: Adapter | None, reference: Adapter | None,
             reference_samples: int | None, min_prefix: int) -> SamplingVerdict:
    """Sample ``samples`` runs and test them (:func:`audit_sampling`)."""
    got = adapter.sample_first_tokens(prompt_ids, k, samples, sampling, seed)
    if law is not None:
        return audit_exact_law(got, lambda pre: law.target_law(prompt_ids, pre, sampling), alpha=alpha,
                               min_prefix=min_prefix, seed=seed)
    assert reference is not None
    other = reference.sample_first_tokens(prompt_ids, k, reference_samples or samples, sampling, seed + 1_000_003)
    return audit_two_sample(got, other, alpha=alpha, min_prefix=min_prefix, seed=seed)


def _sampling_dict(s: SamplingConfig) -> dict[str, Any]:
    return dict(temperature=s.temperature, top_p=s.top_p, top_k=s.top_k)


def audit_greedy(adapter: Adapter, plain: Adapter, prompts: Sequence[Sequence[int]], *, tokens: int = 24,
                 tolerance: float | None = None, note: str = "") -> AuditRow:
    """Audit temperature 0: the first ``tokens`` tokens of ``adapter`` and of ``plain`` for every
    prompt must be equal; a difference is a near-tie when the target's logit gap there is at most
    ``tolerance`` (default: the adapter's ``near_tie``), read from ``adapter.logit_gap``."""
    t0 = time.perf_counter()
    tol = adapter.near_tie if tolerance is None else tolerance
    spec = [adapter.greedy_tokens(p, tokens) for p in prompts]
    base = [plain.greedy_tokens(p, tokens) for p in prompts]
    gap = (lambda i, prefix, a, b: adapter.logit_gap(prompts[i], prefix, a, b)) if adapter.has_law else None
    verdict = compare_greedy(spec, base, gap, tol)
    return AuditRow(engine=adapter.engine, method=adapter.method, setting="T=0", sampling=_sampling_dict(
        SamplingConfig(0.0)), verdict=verdict, reference="plain decoding", seconds=time.perf_counter() - t0,
        prompt=_prompt_record(prompts[0]) if prompts else (), note=note)


def _prompt_record(prompt: Any) -> Any:
    """The prompt as saved: its text (a server's prompt) or its token ids."""
    return prompt if isinstance(prompt, str) else tuple(int(t) for t in prompt)


def _fmt_positions(v: SamplingVerdict) -> str:
    """``"0.018 / 0.021 / 0.024 (cov. 0.97)"``: each position's detectable TV, and the lowest
    coverage of a position test below 1."""
    tvs = " / ".join(f"{s.detectable_tv:.3f}" if s.tests else "-" for s in v.positions)
    cov = min((s.coverage for s in v.positions if s.tests), default=1.0)
    return tvs + (f" (cov. {cov:.2f})" if cov < 0.995 else "")


def _fmt_p(x: float) -> str:
    return f"{x:.2g}" if x >= 1e-300 else "0"


def render_table(rows: Sequence[AuditRow], markdown: bool = True) -> str:
    """The audit table: engine, method, setting, verdict, Holm-adjusted p-value, the TV estimate of
    the position with the smallest adjusted p-value (among those with more than one cell) with its
    95 % interval and null level, the detectable TV of the least powered position, samples, seconds."""
    head = ["engine", "method", "setting", "verdict", "p (Holm)", "TV [95% CI] (null95)", "detectable TV per position",
            "samples", "reference", "s"]
    lines = []
    for r in rows:
        v = r.verdict
        if isinstance(v, SamplingVerdict):
            tested = [s for s in v.positions if s.tests and s.tv_high > 0] or [s for s in v.positions if s.tests]
            worst = min(tested, key=lambda s: (s.min_adjusted_pvalue, -(s.tv - s.tv_null95))) if tested else None
            tv = (f"pos {worst.position}: {worst.tv:.3f} [{worst.tv_low:.3f}, {worst.tv_high:.3f}] "
                  f"({worst.tv_null95:.3f})" if worst is not None else "-")
            cells = [_fmt_p(v.min_adjusted_pvalue), tv, _fmt_positions(v), f"{v.n}" + (
                f"+{v.n_ref}" if v.n_ref else "")]
        else:
            first = v.differences[0] if v.differences else None
            gap = "no logits" if first is None or first["gap"] is None else f"{first['gap']:.3g}"
            diff = "-" if first is None else f"first diff at token {first['position']}, logit gap {gap}"
            cells = ["-", diff, "-", f"{v.prompts}×{v.tokens} tok"]
        lines.append([r.engine, r.method, r.setting, r.label] + cells + [r.reference, f"{r.seconds:.0f}"])
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out)
    widths = [max(len(h), *(len(line[i]) for line in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*line) for line in lines])


def rows_to_json(rows: Sequence[AuditRow], meta: dict[str, Any] | None = None) -> str:
    """The run as JSON: ``{"meta": ..., "rows": [AuditRow.to_dict(), ...]}`` (every count a
    verdict needs: :func:`recheck_json` recomputes them)."""
    return dumps({"meta": meta or {}, "rows": [r.to_dict() for r in rows]}, indent=1,
                 default=lambda x: strict(_json_default(x)))  # strict JSON: a non-finite number is null, noted


def _json_default(x: Any) -> Any:
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"not JSON serializable: {type(x).__name__}")


def recheck_json(text: str) -> tuple[dict[str, Any], list[AuditRow], list[str]]:
    """Recompute every verdict of a saved run: ``(meta, rows, changed)`` where ``changed`` names
    the rows whose recomputed label differs from the saved one.

    Raises:
        ValueError: text that is not a saved audit (JSON with ``rows``).
    """
    try:
        data = json.loads(text)
        saved = data["rows"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"not a saved specot audit (JSON with 'rows'): {exc}") from None
    rows, changed = [], []
    for d in saved:
        row = AuditRow.from_dict(d)
        rows.append(row)
        if row.label != d.get("label"):
            changed.append(f"{row.engine} {row.method} {row.setting}: saved {d.get('label')}, recomputed {row.label}")
    return data.get("meta", {}), rows, changed


def harness_table(data: dict[str, Any], alpha: float = 1e-3) -> str:
    """The verdicts of ``python -m specot_vllm.harness`` (its JSON: per sampler × draft, the
    chi-square p-values of the first and the second token) as a Markdown table, Holm-adjusted over
    the two checks of each row at family-wise rate ``alpha``.

    Raises:
        ValueError: ``data`` is not the harness's output (no ``results``).
    """
    try:
        results, n, temp = data["results"], data["n"], data["temperature"]
    except (KeyError, TypeError):
        raise ValueError("not the JSON of python -m specot_vllm.harness (no 'results')") from None
    lines = ["| sampler / draft | verdict | p (Holm) | first draft accepted | requests | T |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        adj = min(holm([float(r["first"][0]), float(r["second"][0])]))
        label = "exact" if adj >= alpha else "NOT EXACT"
        lines.append(f"| {name} | {label} | {_fmt_p(adj)} | {float(r['accepted_first']):.4g} | {n} | {temp:g} |")
    return "\n".join(lines)
