"""End-to-end speed of speculative decoding vs autoregressive decoding on the embedded target.

Runs both methods on the same prompts in the same process (warm-up excluded), at each
temperature, and reports block efficiency, acceptance, tokens/s and the speedup ratio
(aggregate speculative tokens/s over aggregate autoregressive tokens/s).

    specot bench generate-speed --draft ngram --n-prompts 10 --out gen.json
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
from typing import Any

from tqdm import tqdm
from specot.api import load_drafter, load_target
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate
from specot.sampling import SamplingConfig
from specot.cli.command import count, seed_type
from specot.outputs import check_output, json_has, write_json
from ..corpus import load_prompts
from .lists import int_list, number_list
from .runinfo import run_info

__all__ = ["run_generate_bench", "add_arguments", "run"]


def run_generate_bench(*, target: Any = None, draft: str = "ngram", prompts: list[str], gammas: list[int],
                       temperatures: list[float], max_new_tokens: int, seed: int = 0, dtype: str = "auto",
                       ngram_corpus: str | None = "pydoc", progress: bool = True,
                       gamma_schedule: str = "constant") -> dict[str, Any]:
    """Measure AR and speculative decoding on ``prompts``; returns a JSON-ready dict (schema: see the module docstring)."""

    tgt = load_target(target, dtype=dtype)
    drafter = load_drafter(draft, tgt, dtype=dtype, ngram_corpus=ngram_corpus)
    encoded = [tgt.encode_prompt(p) for p in prompts]
    # warm-up (excluded): one short run of each method
    warm = GenerationConfig(max_new_tokens=8, gamma=max(gammas), sampling=SamplingConfig(1.0), seed=seed)
    autoregressive_generate(tgt, encoded[0], warm)
    speculative_generate(tgt, drafter, encoded[0], warm)

    rows = []
    total = len(temperatures) * len(encoded) * (1 + len(gammas))
    bar = tqdm(total=total, desc="generate bench", disable=not progress, file=sys.stderr)
    for temp in temperatures:
        ar_runs = []
        for i, ids in enumerate(encoded):
            cfg = GenerationConfig(max_new_tokens=max_new_tokens, gamma=1, seed=seed + i,
                                   sampling=SamplingConfig(temperature=temp))
            ar_runs.append(autoregressive_generate(tgt, ids, cfg).stats)
            bar.update()
        ar_tok = sum(s.new_tokens for s in ar_runs)
        ar_time = sum(s.total_time_s for s in ar_runs)
        for gamma in gammas:
            sd_runs = []
            for i, ids in enumerate(encoded):
                cfg = GenerationConfig(max_new_tokens=max_new_tokens, gamma=gamma, seed=seed + i,
                                       sampling=SamplingConfig(temperature=temp), gamma_schedule=gamma_schedule)
                sd_runs.append(speculative_generate(tgt, drafter, ids, cfg).stats)
                bar.update()
            sd_tok = sum(s.new_tokens for s in sd_runs)
            sd_time = sum(s.total_time_s for s in sd_runs)
            drafted = sum(s.drafted for s in sd_runs)
            rows.append({
                "temperature": temp,
                "gamma": gamma,
                "prompts": len(encoded),
                "block_efficiency": sd_tok / sum(s.target_calls for s in sd_runs),
                "block_efficiency_per_prompt_mean": statistics.fmean(s.block_efficiency for s in sd_runs),
                # accepted ÷ drafted tokens (GenerationStats.accepted_per_drafted), not the acceptance rate α
                "accepted_per_drafted": sum(s.accepted for s in sd_runs) / drafted if drafted else 0.0,
                "drafted_per_iteration": drafted / sum(s.iterations for s in sd_runs),
                "spec_tokens": sd_tok,
                "spec_time_s": sd_time,
                "spec_tokens_per_s": sd_tok / sd_time,
                "ar_tokens": ar_tok,
                "ar_time_s": ar_time,
                "ar_tokens_per_s": ar_tok / ar_time,
                "speedup": (sd_tok / sd_time) / (ar_tok / ar_time),
                "spec_target_time_s": sum(s.target_time_s for s in sd_runs),
                "spec_draft_time_s": sum(s.draft_time_s for s in sd_runs),
            })
    bar.close()
    return {
        "benchmark": "generate_speed",
        "target": tgt.name,
        "target_dtype": str(tgt.dtype).replace("torch.", ""),
        "draft": draft,
        "ngram_corpus": ngram_corpus if draft == "ngram" else None,
        "gamma_schedule": gamma_schedule,
        "max_new_tokens": max_new_tokens,
        "prompt_set": "pydoc_data.topics (specot_lab.corpus.pydoc_prompts)",
        "rows": rows,
    }


def _table(result: dict[str, Any]) -> str:
    lines = ["| T | γ | block eff. | accepted/drafted | spec tok/s | AR tok/s | speedup |", "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ratio = r.get("accepted_per_drafted", r.get("acceptance_rate"))  # older results: the older name
        lines.append(f"| {r['temperature']:g} | {r['gamma']} | {r['block_efficiency']:.2f} | {ratio:.2f} | "
                     f"{r['spec_tokens_per_s']:.1f} | {r['ar_tokens_per_s']:.1f} | {r['speedup']:.2f}x |")
    return "\n".join(lines)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    """The options of ``specot bench generate-speed``."""
    ap.add_argument("--target", default=None)
    ap.add_argument("--draft", default="ngram")
    ap.add_argument("--ngram-corpus", default="pydoc")
    ap.add_argument("--prompts", default="pydoc", help="'pydoc', 'pydoc:OFFSET' or a JSONL file with a 'prompt' field")
    ap.add_argument("--n-prompts", type=count(1), default=10)
    ap.add_argument("--gammas", default="2,4")
    ap.add_argument("--gamma-schedule", choices=("constant", "heuristic"), default="constant")
    ap.add_argument("--temperatures", default="0,1")
    ap.add_argument("--max-new-tokens", type=count(1), default=96)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--seed", type=seed_type(), default=0)
    ap.add_argument("--quick", action="store_true", help="2 prompts, 16 tokens: a smoke run")
    ap.add_argument("--out", default=None, help="write the JSON result here")
    ap.add_argument("--force", action="store_true", help="replace an existing --out file this benchmark did not write")


def _command(args: argparse.Namespace) -> str:
    """The ``specot bench generate-speed`` command line of ``args``: the options that differ from their defaults."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    parts = ["specot", "bench", "generate-speed"]
    for dest, default in vars(parser.parse_args([])).items():
        value = getattr(args, dest, default)
        if value == default:
            continue
        flag = "--" + dest.replace("_", "-")
        parts += [flag] if isinstance(value, bool) else [flag, str(value)]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    """``specot bench generate-speed``: AR vs speculative decoding; print the table, write JSON with ``--out``."""
    n = 2 if args.quick else args.n_prompts
    gammas, temperatures = int_list(args.gammas, "--gammas"), number_list(args.temperatures, "--temperatures")
    check_output(args.out, "--out", force=args.force, ours=json_has(benchmark="generate-speed"))
    result = run_generate_bench(
        target=args.target, draft=args.draft, prompts=load_prompts(args.prompts, n),
        gammas=gammas, temperatures=temperatures,
        max_new_tokens=16 if args.quick else args.max_new_tokens, seed=args.seed, dtype=args.dtype,
        ngram_corpus=None if args.ngram_corpus == "none" else args.ngram_corpus, gamma_schedule=args.gamma_schedule,
    )
    result = {"benchmark": "generate-speed", **result, "command": _command(args)}
    print(_table(result))
    if args.out:

        result.setdefault("environment", run_info())
        write_json(args.out, result)
    return 0
