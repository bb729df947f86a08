"""The handler of ``specot audit`` (:mod:`specot.cli.audit`): builds the adapters (imports torch,
transformers and, for those engines, llama-cpp-python) and prints the table or the JSON."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Callable

from ..api import load_drafter, load_target
from ..audit.adapters import Adapter, HFAdapter, LlamaCppPythonAdapter, ServerAdapter, SpecotAdapter
from ..audit.run import (AuditRow, audit_greedy, audit_sampling, harness_table, recheck_json, render_table,
                         rows_to_json)
from ..models.embedded import embedded_gguf
from ..outputs import check_output, json_has, write_text
from ..plan import parse_draft
from ..sampling import SamplingConfig

__all__ = ["cmd_audit", "AUDIT_PROMPT", "GREEDY_PROMPTS"]

#: The sampled settings' prompt: a repetitive list, so that prompt lookup has something to draft.
AUDIT_PROMPT = "Repeat this list three times: apple, banana, cherry, apple, banana, cherry."
#: Greedy settings: token equality of the first tokens after each of these prompts.
GREEDY_PROMPTS = ("Repeat this list three times: apple, banana, cherry, apple, banana, cherry.",
                  "Write a haiku about autumn.", "What is a Python generator?")
#: Default samples per setting, per engine (what fits a few minutes on 2 busy cores).
SAMPLES = {"specot[llamacpp]": 2000, "specot[transformers]": 300, "hf": 150, "llamacpp": 800, "server": 400,
           "vllm": 2000}
METHODS = {"specot": ["speculative"], "hf": ["assisted", "prompt-lookup"], "llamacpp": ["prompt-lookup"],
           "server": ["speculative"], "vllm": ["ngram", "ngram-stock"]}
GREEDY_TOKENS = 16


@dataclass(frozen=True)
class Job:
    """One engine × method of a run: how to build its adapter and its plain reference."""

    make: Callable[[], Adapter]
    plain: Callable[[], Adapter]
    samples: int
    law_from_plain: bool  # the plain adapter exposes the exact law
    text_prompt: bool = False  # a server gets the prompt's text (no chat template), not token ids


class _Models:
    """Loaded models, shared by the jobs of one run."""

    def __init__(self, target: str | None = None) -> None:
        self.cache: dict[str, Any] = {}
        self.spec = target  # --target (None: the embedded model)

    def get(self, key: str, build: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = build()
        return self.cache[key]

    def target(self, backend: str) -> Any:
        return self.get(f"target-{backend}", lambda: load_target(self.spec, backend=backend,
                                                                  **({"dtype": "float32"} if backend == "transformers"
                                                                     else {})))

    def drafter(self, backend: str, draft: str = "distilled") -> Any:
        return self.get(f"draft-{backend}-{draft}", lambda: load_drafter(draft, self.target(backend), dtype="float32"))


def _jobs(engine: str, methods: list[str], args: argparse.Namespace, models: _Models) -> list[Job]:
    """The jobs of ``--engine`` with its ``--method`` list (one-line errors for unknown names)."""
    jobs = []
    for m in methods:
        if engine == "specot":
            b, memo = args.backend, not args.no_memo
            n = args.samples or SAMPLES[f"specot[{b}]"]
            d = getattr(args, "draft", None) or "distilled"
            parse_draft(d)  # a malformed name: one line before any model loads
            jobs.append(Job(lambda m=m, b=b, d=d: SpecotAdapter(models.target(b), models.drafter(b, d), m, memo=memo,
                                                               backend=b),
                            lambda b=b: SpecotAdapter(models.target(b), None, "plain", memo=memo, backend=b), n, True))
        elif engine == "hf":
            if m not in ("assisted", "prompt-lookup"):
                raise ValueError(f"unknown hf method {m!r}; choose assisted or prompt-lookup")
            hf = lambda: models.target("transformers").model  # noqa: E731
            eos = lambda: min(models.target("transformers").eos_token_ids)  # noqa: E731
            kw = (lambda: dict(assistant=models.drafter("transformers").model.model)) if m == "assisted" else (
                lambda: dict(prompt_lookup=3))
            jobs.append(Job(lambda kw=kw: HFAdapter(hf(), eos_token_id=eos(), **kw()),
                            lambda: HFAdapter(hf(), eos_token_id=eos()), args.samples or SAMPLES["hf"], True))
        elif engine == "llamacpp":
            if m != "prompt-lookup":
                raise ValueError(f"unknown llamacpp method {m!r}; choose prompt-lookup")
            path = str(Path(*embedded_gguf()))
            jobs.append(Job(lambda: models.get("lcp-pl", lambda: LlamaCppPythonAdapter(path, prompt_lookup=3)),
                            lambda: models.get("lcp-plain", lambda: LlamaCppPythonAdapter(path)),
                            args.samples or SAMPLES["llamacpp"], False))
        elif engine == "vllm":  # specot_vllm's adapter, found by its entry point (the core never imports it)
            found = [ep for ep in entry_points(group="specot.audit_engines") if ep.name == "vllm"]
            try:
                vllm_adapter = found[0].load()
            except (IndexError, ImportError):
                raise ImportError("--engine vllm needs vLLM and specot-vllm: run it with .venv-vllm/bin/specot audit "
                                  "--engine vllm ...") from None
            if m not in vllm_adapter.METHODS:
                raise ValueError(f"unknown vllm method {m!r}; choose from {' '.join(vllm_adapter.METHODS)}")
            jobs.append(Job(lambda m=m, a=vllm_adapter: a(m),
                            lambda a=vllm_adapter: models.get("vllm-plain", lambda: a("plain")),
                            args.samples or SAMPLES["vllm"], False, text_prompt=True))
        else:
            if not args.server or not args.reference:
                raise ValueError("--engine server needs --server URL (speculative) and --reference URL (plain)")
            vocab: dict[str, int] = {}
            jobs.append(Job(lambda: ServerAdapter(args.server, method=m, vocab=vocab),
                            lambda: ServerAdapter(args.reference, method="plain", vocab=vocab),
                            args.samples or SAMPLES["server"], False, text_prompt=True))
    return jobs


def _settings(args: argparse.Namespace) -> list[SamplingConfig]:
    out = []
    for t in args.temperature:
        out.append(SamplingConfig(0.0) if t == 0 else SamplingConfig(t, top_k=args.top_k, top_p=args.top_p))
    return out


def _prompt_ids(models: _Models, text: str) -> list[int]:
    if models.spec is not None:  # a named target: its own tokenizer and chat template
        loaded = [models.cache[k] for k in ("target-llamacpp", "target-transformers") if k in models.cache]
        return models.get(f"prompt-{text}", lambda: (loaded[0] if loaded else models.target("llamacpp")).encode_prompt(text))
    return models.get(f"prompt-{text}", lambda: load_target(None, dtype="float32").encode_prompt(text)
                      if "target-transformers" not in models.cache else models.target("transformers").encode_prompt(text))


def _sizing(args: argparse.Namespace, job: Job, note: str) -> dict[str, Any]:
    """The keyword arguments of :func:`audit_sampling` that size and seed a sampled setting."""
    return dict(k=args.k, samples=job.samples, alpha=args.alpha, seed=args.seed, note=note,
                target_tv=getattr(args, "tv", None), max_seconds=getattr(args, "max_seconds", None))


def _run_jobs(jobs: list[Job], settings: list[SamplingConfig], args: argparse.Namespace, models: _Models,
              note: str) -> list[AuditRow]:
    rows = []
    for job in jobs:
        ad = job.make()
        text = args.prompt or AUDIT_PROMPT
        # a server continues raw text (no chat template): the default prompts end in a newline,
        # after which SmolLM2 answers instead of ending at once
        raw = (lambda p: p if args.prompt else p + "\n")  # noqa: E731
        prompt: Any = raw(text) if job.text_prompt else _prompt_ids(models, text)
        for s in settings:
            if s.greedy:
                prompts = [raw(p) if job.text_prompt else _prompt_ids(models, p) for p in GREEDY_PROMPTS]
                row = audit_greedy(ad, job.plain(), prompts, tokens=GREEDY_TOKENS, note=note)
            elif job.law_from_plain:
                row = audit_sampling(ad, s, prompt, law_from=job.plain(), **_sizing(args, job, note))
            else:
                row = audit_sampling(ad, s, prompt, reference=job.plain(), **_sizing(args, job, note))
            print(f"specot audit: {row.engine} {row.method} {row.setting}: {row.label} ({row.seconds:.0f} s)",
                  file=sys.stderr, flush=True)
            rows.append(row)
            if getattr(args, "partial", None) is not None:  # what was measured survives an interrupted run
                args.partial.append(row)
                if args.out:
                    _write(args.out, rows_to_json(args.partial, dict(partial=True)))
    return rows


def _all(args: argparse.Namespace, models: _Models, note: str) -> list[AuditRow]:
    """The audit set of docs/exactness.md; ``--samples`` (default 500) sizes its main settings, the
    slower engines get a fraction of it (sized for 2 busy cores)."""
    rows: list[AuditRow] = []
    base = {k: v for k, v in vars(args).items() if k != "partial"}

    def run(engine: str, methods: list[str], temps: list[float], samples: int | None, **kw: Any) -> None:
        ns = argparse.Namespace(**dict(base, temperature=temps, samples=samples, partial=args.partial, **kw))
        rows.extend(_run_jobs(_jobs(engine, methods, ns, models), _settings(ns), ns, models, note))

    scale = args.samples or 500  # samples of the main setting; the others a fraction of it
    run("specot", ["speculative"], [0.6, 1.0, 0.0], scale, backend="llamacpp")
    run("specot", ["speculative", "kseq"], [0.6, 1.0], scale // 2, backend="llamacpp", top_p=0.9, top_k=50)
    run("specot", ["kseq", "rrs", "importance", "greedy"], [1.0], scale // 2, backend="llamacpp")
    run("llamacpp", ["prompt-lookup"], [1.0, 0.0], scale // 2)
    run("hf", ["assisted", "prompt-lookup"], [1.0, 0.0], max(scale // 10, 20))
    run("specot", ["speculative"], [1.0, 0.0], max(scale // 6, 20), backend="transformers")
    return rows


def _write(path: str, text: str) -> None:
    write_text(path, text + "\n")


def _read(path: str, flag: str) -> str:
    """The text of the file ``flag`` names.

    Raises:
        FileNotFoundError / ValueError: a missing file, a directory, one that is not UTF-8 text (one
            line naming it)."""
    f = Path(path)
    if not f.exists():
        raise FileNotFoundError(f"{flag} {path!r} does not exist; name a saved audit JSON file")
    if f.is_dir():
        raise ValueError(f"{flag} {path!r} is a directory; name a saved audit JSON file")
    try:
        return f.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{flag} {path!r} is not UTF-8 text (byte {exc.start}); name a saved audit JSON file") from None


def cmd_audit(args: argparse.Namespace) -> int:
    """Run the audit (or ``--recheck`` a saved one); print the table or the JSON. Exit 0 when every
    verdict is exact or near-tie, 3 when one is NOT EXACT (1 / 2: errors, as every command).

    Raises:
        ValueError: a bad combination of options, a saved file that is not an audit.
    """
    if getattr(args, "vllm_harness", None):
        try:
            data = json.loads(_read(args.vllm_harness, "--vllm-harness"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"--vllm-harness {args.vllm_harness!r} is not JSON: {exc}") from None
        table = harness_table(data, args.alpha)
        print(table)
        return 0 if "NOT EXACT" not in table else 3
    if args.recheck:
        try:
            meta, rows, changed = recheck_json(_read(args.recheck, "--recheck"))
        except ValueError as exc:
            raise ValueError(f"--recheck {args.recheck!r}: {exc}") from None
        for line in changed:
            print(f"specot audit: warning: {line}", file=sys.stderr)
    else:
        if args.out:  # before any model loads; the partial results then rewrite the file this run wrote
            check_output(args.out, "--out", force=getattr(args, "force", False), ours=json_has(meta=..., rows=...))
        note = f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        meta = dict(command="specot " + " ".join(sys.argv[1:]), machine=platform.machine(), cpus=os.cpu_count(),
                    load_before=os.getloadavg()[0], started=time.strftime("%Y-%m-%d %H:%M:%S"))
        if getattr(args, "target", None) is not None and (args.engine != "specot" or args.all):
            raise ValueError(f"--target {args.target!r} names specot's target: use it with --engine specot, without --all")
        models = _Models(getattr(args, "target", None))
        args.partial = []
        if args.all:
            rows = _all(args, models, note)
        else:
            methods = args.method or METHODS[args.engine]
            if args.engine == "specot":
                bad = [m for m in methods if m not in ("speculative", "kseq", "rrs", "importance", "greedy")]
                if bad:
                    raise ValueError(f"unknown specot method {bad[0]!r}; choose speculative kseq rrs importance greedy")
            rows = _run_jobs(_jobs(args.engine, methods, args, models), _settings(args), args, models, note)
        meta["load_after"] = os.getloadavg()[0]
    text = rows_to_json(rows, meta)
    if args.out and not args.recheck:
        _write(args.out, text)
    print(text if args.json else render_table(rows, markdown=bool(getattr(args, "markdown", False))))
    return 0 if all(r.verdict.exact for r in rows) else 3
