"""``specot audit``: an end-to-end exactness audit of speculative decoding as engines run it.

* ``specot audit --engine specot|hf|llamacpp|server [--method M ...] [--temperature 0.6 1.0 0]
  [--top-p P] [--top-k K] [--k 3] [--samples N] [--tv 0.02 [--max-seconds S]] [--alpha 0.001] [--json]
  [--out FILE]``
* ``specot audit --all --out docs/bench/audit.json`` — the set of docs/exactness.md;
* ``specot audit --recheck FILE.json`` — recompute every verdict from the saved counts;
* ``specot audit --vllm-harness FILE.json`` — the verdicts of vLLM's sampler from the harness's
  JSON (``.venv-vllm/bin/python -m specot_vllm.harness > FILE.json``).

The statistics and the adapters: :mod:`specot.audit`; the handler (imports torch) is
:mod:`specot.cli.audit_run`.
"""

from __future__ import annotations

import argparse

from . import catalog
from .command import DeferredHandler, count, number, seed_type
from .theory import _pos_int

__all__ = ["register"]

ENGINES = ("specot", "hf", "llamacpp", "server", "vllm")


def _unit_open(x: str) -> float:
    v = float(x)
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in (0, 1), got {x}")
    return v


def _k(x: str) -> int:
    v = int(x)
    if not 1 <= v <= 8:
        raise argparse.ArgumentTypeError(f"must lie in [1, 8], got {x}")
    return v


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=ENGINES, default="specot", help="the engine audited (default specot)")
    p.add_argument("--backend", choices=catalog.backend_names(), default="llamacpp",
                   help="specot's backend (default llamacpp)")
    p.add_argument("--method", nargs="+", default=None,
                   help="specot: speculative kseq rrs importance greedy; hf: assisted prompt-lookup; "
                        "llamacpp: prompt-lookup; vllm: ngram ngram-stock plain (in .venv-vllm) "
                        "(default: the engine's speculative methods)")
    p.add_argument("--target", default=None, help="specot's target, as --target of specot generate (default: the "
                   "embedded SmolLM2; e.g. qwen2.5-coder-1.5b with --draft xvocab-slem:SMOLLM2.gguf)")
    p.add_argument("--draft", default="distilled", help="specot's drafter, as --draft of specot generate (default "
                   "distilled; e.g. xvocab:gemma3-270m for a draft with another tokenizer)")
    p.add_argument("--temperature", type=float, nargs="+", default=[0.6, 1.0, 0.0],
                   help="settings to audit; 0 = greedy token equality (default 0.6 1.0 0)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass (default 1: off)")
    p.add_argument("--top-k", type=count(0), default=None, help="top-k (default off)")
    p.add_argument("--k", type=_k, default=3, help="tokens per sample (default 3)")
    p.add_argument("--samples", type=_pos_int, default=None, help="samples per setting (default: per engine; "
                   "with --tv the pilot's size)")
    p.add_argument("--tv", type=_unit_open, default=None, metavar="TV",
                   help="size each setting for this detectable TV at every position (e.g. 0.02): --samples "
                   "become a pilot run, set aside, that predicts the size")
    p.add_argument("--max-seconds", type=number(above=0), default=None, metavar="S",
                   help="with --tv: the most seconds a setting may take (the size is cut to fit)")
    p.add_argument("--alpha", type=_unit_open, default=1e-3, help="family-wise false-failure rate (default 0.001)")
    p.add_argument("--prompt", default=None, help="the prompt (chat-templated; default: the audit's prompt)")
    p.add_argument("--seed", type=seed_type(), default=0)
    p.add_argument("--no-memo", action="store_true", help="run the real models on every sample (covers the "
                   "KV rollback; slower)")
    p.add_argument("--server", default=None, help="OpenAI-compatible server running speculative decoding (URL)")
    p.add_argument("--reference", default=None, help="the same target served with plain decoding (URL)")
    p.add_argument("--all", action="store_true", help="the audit set of docs/exactness.md")
    p.add_argument("--recheck", default=None, metavar="FILE", help="recompute the verdicts of a saved --out JSON")
    p.add_argument("--vllm-harness", default=None, metavar="FILE",
                   help="print the verdicts of a saved `python -m specot_vllm.harness` JSON (vLLM's sampler)")
    p.add_argument("--json", action="store_true", help="print the run as one JSON object")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown (docs/exactness.md)")
    p.add_argument("--out", default=None, help="also write the run's JSON to this file (an existing file only when "
                   "it holds an audit, or with --force)")
    p.add_argument("--force", action="store_true", help="replace an existing --out file that is not an audit")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``specot audit``."""
    p = sub.add_parser("audit", help="exactness audit of speculative decoding engines",
                       description=__doc__.split("\n\n")[0])
    _add_arguments(p)
    p.set_defaults(func=DeferredHandler("specot.cli.audit_run", "cmd_audit"))
