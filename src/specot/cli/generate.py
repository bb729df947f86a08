"""``specot generate``: speculative decoding of one prompt, streamed, with statistics.

Its options; the handler, which imports torch and transformers, is :func:`specot.cli.generate_run.run`
(loaded when the command runs, so that ``specot generate --help`` answers at once)."""

from __future__ import annotations

import argparse
from pathlib import Path

from . import catalog
from .command import DeferredHandler

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``specot generate`` to the CLI."""
    p = sub.add_parser(
        "generate",
        help="speculative decoding of a prompt with a target and a draft",
        description="Generate text with speculative decoding. With a lossless verifier (the default) the output is "
                    "lossless in distribution given the target's logits; greedy (--temperature 0) equals "
                    "autoregressive decoding in float32, and in bf16/fp16 up to near-ties (a multi-token and a "
                    "one-token forward pass round differently; use --dtype float32 to compare). Lossy verifiers "
                    "(lenient) need their parameters explicitly and are reported as lossy.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", type=Path, help="file holding the prompt text")
    packaged = "; ".join(f"'{name}' ({summary})" for name, summary in catalog.TARGETS)
    p.add_argument("--target", default=None,
                   help="target model: 'smollm2' (embedded default), a local directory, a hub id, a .gguf file "
                        f"(the llama.cpp backend), or a packaged model, assembled once into specot's cache: {packaged}")
    kinds = "; ".join(f"'{syntax}' ({summary})" for syntax, summary in catalog.DRAFTS)
    added = [n for n in catalog.draft_names() if n not in {s for s, _ in catalog.DRAFTS}]
    p.add_argument("--draft", default="auto",
                   help="'auto' (default: the fastest plan measured: for the embedded target on a CPU 'suffix+eagle' "
                        "trees, 2 children x depth 3 (3 x 6 at temperature 0); elsewhere 'ngram'), 'none' "
                        f"(autoregressive), or: {kinds}" + (f"; installed: {', '.join(added)}" if added else ""))
    for name, (flag, default, text) in catalog.DRAFT_FLAGS.items():  # the drafter options, as their kinds declare
        p.add_argument(flag, dest=name, type=type(default) if isinstance(default, int) else str, default=None,
                       help=f"{text} (default {default})")
    p.add_argument("--gamma", type=int, default=None,
                   help="draft length γ (default 4): the chain length, or the depth of a draft tree "
                        "(a --tree with expansion factors sets it)")
    p.add_argument("--gamma-schedule", choices=catalog.SCHEDULES, default="constant",
                   help="constant γ, or heuristic: +2 after a fully accepted block, -1 otherwise, within [1, 2γ]")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 = greedy (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="top-k filter (default off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (default 1 = off)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="exact cap on new tokens (default 128)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    law_verifiers = ", ".join(f"{v} ({law})" for law, v in catalog.LAW_VERIFIERS.items())
    p.add_argument("--verifier", default=None,
                   help=f"verifier: {', '.join(catalog.VERIFIERS)}. Default: the draft shape's own (lossless): "
                        f"speculative for chains, a tree's law's optimal one: {law_verifiers}. With --drafts/--tree "
                        f"any verifier valid for the construction. LOSSY: {', '.join(catalog.LOSSY_VERIFIERS)} (their "
                        "parameters given explicitly: --lenience, --verifier-param). otm is the exact LP optimum, a "
                        "reference for tiny vocabularies (tests, specot theory alpha --verifiers): it is refused for "
                        "real vocabularies (e.g. 49152 tokens) unless --top-k bounds the draft support")
    p.add_argument("--lenience", type=float, default=None,
                   help="lenience l in (0, 1], required by and only allowed with --verifier lenient (lossy: "
                        "pi(y) <= p(y)/l)")
    p.add_argument("--verifier-param", action="append", default=[], metavar="NAME=VALUE",
                   help="another parameter of the chosen verifier (repeatable), e.g. --verifier mentored "
                        "--verifier-param D=0.1; parameters the verifier does not take are refused")
    laws = ", ".join(catalog.LAW_VERIFIERS)
    p.add_argument("--drafts", type=int, default=None,
                   help="multi-draft tree decoding, one number n whose meaning is the drafter's: a draft model "
                        "(a directory, distilled, xvocab) draws the fixed tree of --tree: n drafts at the root, each "
                        "continued to a sequence of length --gamma (with factors, n = k1*..*kL); eagle's dynamic "
                        "trees take n children per node, depth --gamma, at most n*gamma nodes; suffix builds its own "
                        "trees within a budget of n children per node and depth --gamma; suffix+MODEL: both readings, "
                        "GREEDY law. n-gram drafts chains only")
    p.add_argument("--tree", default=None,
                   help=f"draft tree construction: {' | '.join(catalog.LAW_VERIFIERS)} | prefix:2,2,1 | LAW:k1,..,kL | "
                        "topology:FILE.json | eagle (default: n sequences under the verifier's draft law)")
    p.add_argument("--tree-law", default=None, help=f"draft law of a topology/eagle tree: {laws}")
    p.add_argument("--raw", action="store_true", help="send the prompt as raw text, without the chat template")
    p.add_argument("--dtype", default="auto",
                   help="auto (default: bfloat16 with native bf16 matmuls, else float32), float32, bfloat16, float16; "
                        "greedy output equals autoregressive decoding token for token in float32 (bf16/fp16: up to "
                        "near-ties)")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, cuda:N")
    p.add_argument("--backend", default="auto",
                   help="target backend: auto (default: the backend that loads the target's kind of file, llama.cpp "
                        "for a .gguf file; for the embedded target on a CPU when the plan is automatic, an installed "
                        f"backend marked for it, llama.cpp; else transformers), or one of: "
                        f"{', '.join(catalog.backend_names())} (llamacpp comes with specot[llamacpp]: docs/llamacpp.md)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="static KV caches with the model passes replayed as CUDA graphs, one per padded width "
                        "(default: on with --device cuda: a small target's pass is bound by kernel launches; docs/engine.md)")
    p.add_argument("--baseline", action="store_true",
                   help="also run autoregressive decoding for the same number of tokens and print the measured speedup")
    p.add_argument("--repeats", type=int, default=1,
                   help="with --baseline: repeat the speculative/autoregressive pair N times and print the median "
                        "speedup with its range; when sampling, each pair decodes a fresh answer (default 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object (text, tokens, statistics) instead of streaming")
    p.set_defaults(func=DeferredHandler("specot.cli.generate_run", "run"))
