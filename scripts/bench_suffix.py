"""Block efficiency of the suffix drafter vs the n-gram drafter vs autoregressive decoding (issue 14).

Timing-free: block efficiency (tokens per target pass) and acceptance only. Loads the embedded
target (SmolLM2-135M-Instruct) ONCE in float32 and reuses it. Writes
``docs/bench/suffix_block_efficiency.json``.

    .venv/bin/python scripts/bench_suffix.py [--quick]
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import textwrap
from pathlib import Path

import torch

from specot.api import load_drafter, load_target
from specot_lab.corpus import mixed_prompts
from specot.drafting import SuffixDrafter, TreeSpec
from specot.engine import GenerationConfig, autoregressive_generate, speculative_generate, tree_generate
from specot.laws import DraftLaw
from specot.sampling import SamplingConfig

ROOT = Path(__file__).resolve().parents[1]


def _source_head(obj, frac: float = 0.6, max_lines: int = 40) -> str:
    lines = textwrap.dedent(inspect.getsource(obj)).splitlines()
    return "\n".join(lines[: max(4, min(max_lines, int(len(lines) * frac)))])


def code_prompts() -> list[str]:
    """6 code-completion prompts: the first ~60% of stdlib functions, to be completed."""
    import calendar
    import difflib
    import json.encoder
    import shlex
    import textwrap as tw
    import string

    objs = [tw.TextWrapper._wrap_chunks, json.encoder.py_encode_basestring_ascii, shlex.shlex.read_token,
            difflib.SequenceMatcher.get_opcodes, calendar.TextCalendar.formatmonth, string.Formatter._vformat]
    return [f"Complete the following Python code:\n\n```python\n{_source_head(o)}\n```" for o in objs]


OWN_CODE = [
    # 1. an edit task: the answer copies the input with small changes (rename)
    "Rename the variable `tmp` to `total` everywhere in this function and return the full function:\n\n"
    "```python\ndef summarize(values):\n    tmp = 0\n    for v in values:\n        if v is None:\n            continue\n"
    "        tmp += v\n    if tmp < 0:\n        tmp = 0\n    print('total:', tmp)\n    return tmp\n```",
    # 2. repetitive structured data to continue
    "Continue this SQL script with five more INSERT statements in the same format:\n\n"
    "INSERT INTO users (id, name, email, age) VALUES (1, 'alice', 'alice@example.com', 31);\n"
    "INSERT INTO users (id, name, email, age) VALUES (2, 'bob', 'bob@example.com', 27);\n"
    "INSERT INTO users (id, name, email, age) VALUES (3, 'carol', 'carol@example.com', 45);\n"
    "INSERT INTO users (id, name, email, age) VALUES (4, 'dave', 'dave@example.com', 38);\n",
    # 3. unit tests for a given function (names and calls repeat)
    "Write pytest unit tests for this function:\n\n```python\ndef clamp(x, lo, hi):\n"
    "    \"\"\"Return x limited to the interval [lo, hi].\"\"\"\n    if lo > hi:\n        raise ValueError('lo > hi')\n"
    "    return max(lo, min(x, hi))\n```",
]


def run_one(target, method, ids, temp, seed, n_new, gamma, corpus_drafter):
    cfg = GenerationConfig(max_new_tokens=n_new, gamma=gamma, seed=seed, sampling=SamplingConfig(temperature=temp))
    if method == "ar":
        return autoregressive_generate(target, ids, cfg), None
    if method == "ngram":
        return speculative_generate(target, load_drafter("ngram", target), ids, cfg), None
    kw = dict(vocab_size=target.vocab_size, corpus=corpus_drafter.corpus)
    if method == "suffix":  # the defaults of load_drafter("suffix")
        d = SuffixDrafter(**kw)
    elif method == "suffix-fixed24":
        d = SuffixDrafter(adaptive=False, min_score=0.0, **kw)
    elif method == "suffix-fixed24-g8":
        d = SuffixDrafter(adaptive=False, min_score=0.0, **kw)
        gamma = 8
    elif method == "suffix-nocorpus-fixed24":
        d = SuffixDrafter(vocab_size=target.vocab_size, adaptive=False, min_score=0.0)
    else:
        raise ValueError(method)
    spec = TreeSpec.sequences(d.max_children, gamma, DraftLaw.GREEDY)
    return tree_generate(target, d, ids, spec, cfg, verifier="greedy"), d


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "docs/bench/suffix_block_efficiency.json"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    target = load_target(dtype="float32")
    sets = {"code": code_prompts(), "prose": mixed_prompts(6), "own_code": OWN_CODE}
    if args.quick:
        sets = {k: v[:1] for k, v in sets.items()}
    methods = ["ngram", "suffix", "suffix-fixed24", "suffix-fixed24-g8", "suffix-nocorpus-fixed24"]
    ref = load_drafter("suffix", target)  # builds the pydoc corpus table once
    runs = []
    for set_name, prompts in sets.items():
        for pi, prompt in enumerate(prompts):
            ids = target.encode_prompt(prompt)
            for temp, seeds in ((0.0, [0]), (1.0, [0, 1])):
                for seed in seeds:
                    ar_tokens = None
                    if temp == 0.0:
                        ar_tokens = run_one(target, "ar", ids, temp, seed, args.new, 4, ref)[0].tokens
                    for m in methods:
                        res, d = run_one(target, m, ids, temp, seed, args.new, 4, ref)
                        st = res.stats
                        row = dict(set=set_name, prompt=pi, prompt_tokens=len(ids), temperature=temp, seed=seed,
                                   method=m, new_tokens=st.new_tokens, target_calls=st.target_calls,
                                   block_efficiency=st.block_efficiency, drafted=st.drafted, accepted=st.accepted,
                                   mean_tree_size=st.drafted / max(1, st.iterations),
                                   equals_autoregressive=(res.tokens == ar_tokens) if ar_tokens is not None else None)
                        if d is not None:
                            row["calibration_final"] = d.calibration
                        runs.append(row)
                        print(json.dumps(row), flush=True)
    summary = {}
    for set_name in sets:
        for temp in (0.0, 1.0):
            for m in ["ar"] + methods:
                if m == "ar":
                    summary[f"{set_name}/T={temp:g}/ar"] = {"block_efficiency": 1.0}
                    continue
                rs = [r for r in runs if r["set"] == set_name and r["temperature"] == temp and r["method"] == m]
                toks, calls = sum(r["new_tokens"] for r in rs), sum(r["target_calls"] for r in rs)
                summary[f"{set_name}/T={temp:g}/{m}"] = {
                    "block_efficiency": toks / calls,
                    "mean_of_prompts": sum(r["block_efficiency"] for r in rs) / len(rs),
                    "accepted_per_drafted": sum(r["accepted"] for r in rs) / max(1, sum(r["drafted"] for r in rs)),
                    "mean_tree_size": sum(r["drafted"] for r in rs) / calls,
                    "runs": len(rs),
                    "all_equal_autoregressive": all(r["equals_autoregressive"] for r in rs) if temp == 0 else None,
                }
    out = {
        "description": "block efficiency (new tokens / target passes) of suffix decoding vs n-gram prompt lookup vs "
                       "autoregressive (=1), SmolLM2-135M-Instruct float32, 64 new tokens, gamma/depth 4 (-g8: 8); "
                       "T=1 pooled over seeds 0 and 1. No timing (shared machine).",
        "target": target.name, "dtype": "float32", "max_new_tokens": args.new,
        "methods": {"ngram": "NGramDrafter n=3 + pydoc table, one chain of gamma=4, speculative verifier",
                    "suffix": "load_drafter('suffix') defaults: SuffixDrafter max_nodes 24, width 4, adaptive budget "
                              "(cost model c=0.01, min_score 0.01), pydoc NGramCounts corpus gated by measured "
                              "acceptance; depth 4, greedy verifier",
                    "suffix-fixed24": "as suffix, fixed budget: the 24 best-scored nodes (adaptive off, min_score 0)",
                    "suffix-fixed24-g8": "as suffix-fixed24, depth 8",
                    "suffix-nocorpus-fixed24": "as suffix-fixed24 without the corpus (context only)"},
        "prompt_sets": {"code": "6 chat prompts 'Complete the following Python code' over the first ~60% of stdlib "
                                "functions (textwrap, json.encoder, shlex, difflib, calendar, string)",
                        "prose": "specot_lab.corpus.mixed_prompts(6)",
                        "own_code": "3 code prompts of other kinds: a rename edit, SQL INSERT rows, pytest tests"},
        "summary": summary, "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    for k, v in summary.items():
        print(k, {kk: (round(vv, 3) if isinstance(vv, float) else vv) for kk, vv in v.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
