"""``specot generate``: speculative decoding of one prompt, streamed, with statistics.

Its options; the handler, which imports torch and transformers, is :func:`specot.cli.generate_run.run`
(loaded when the command runs, so that ``specot generate --help`` answers at once)."""

from __future__ import annotations

import argparse
from pathlib import Path

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
    p.add_argument("--target", default=None,
                   help="target model: 'smollm2' (embedded default), a local directory, a hub id, or a .gguf file "
                        "(the llama.cpp backend)")
    p.add_argument("--draft", default="auto",
                   help="'auto' (default: the fastest plan measured: for the embedded target on a CPU 'suffix+eagle' "
                        "trees, 2 children x depth 3 (3 x 6 at temperature 0); elsewhere 'ngram'), "
                        "'eagle' (the shipped EAGLE-3 "
                        "head of the embedded target), 'eagle:PATH', 'distilled', "
                        "'ngram', 'suffix' (suffix decoding: model-free draft trees from every earlier occurrence of "
                        "the current suffix, verified by the greedy verifier), 'suffix+MODEL' (suffix trees where the "
                        "text repeats, the draft model MODEL elsewhere, e.g. 'suffix+eagle'), or a draft model "
                        "directory / hub id sharing the target's tokenizer")
    p.add_argument("--ngram-n", type=int, default=3, help="longest n-gram matched by the n-gram drafter (default 3)")
    p.add_argument("--ngram-corpus", default="pydoc",
                   help="text for the n-gram drafter's table: 'pydoc' (default, pydoc_data.topics), a file, or 'none'")
    p.add_argument("--gamma", type=int, default=None,
                   help="draft length γ (default 4): the chain length, or the depth of a draft tree "
                        "(a --tree with expansion factors sets it)")
    p.add_argument("--gamma-schedule", choices=("constant", "heuristic"), default="constant",
                   help="constant γ, or heuristic: +2 after a fully accepted block, -1 otherwise, within [1, 2γ]")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 = greedy (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="top-k filter (default off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (default 1 = off)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="exact cap on new tokens (default 128)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--verifier", default="speculative",
                   help="verifier name (default speculative, lossless; a tree without one gets its law's: greedy, rrs_wor or kseq); lenient is LOSSY (needs --lenience); with "
                        "--drafts/--tree any verifier valid for the construction: kseq, rrs, rrs_wor, greedy, spechub. "
                        "otm is the exact LP optimum, a reference for tiny vocabularies (tests, specot theory "
                        "alpha --verifiers): it is refused for real vocabularies (e.g. 49152 tokens) unless "
                        "--top-k bounds the draft support")
    p.add_argument("--lenience", type=float, default=None,
                   help="lenience l in (0, 1], required by and only allowed with --verifier lenient (lossy: "
                        "pi(y) <= p(y)/l)")
    p.add_argument("--verifier-param", action="append", default=[], metavar="NAME=VALUE",
                   help="another parameter of the chosen verifier (repeatable), e.g. --verifier mentored "
                        "--verifier-param D=0.1; parameters the verifier does not take are refused")
    p.add_argument("--drafts", type=int, default=None, help="multi-draft: K draft sequences per step (tree decoding)")
    p.add_argument("--tree", default=None,
                   help="draft tree construction: iid | wor | greedy | spechub | prefix:2,2,1 | LAW:k1,..,kL | "
                        "topology:FILE.json | eagle (default: K sequences under the verifier's draft law)")
    p.add_argument("--tree-law", default=None, help="draft law of a topology/eagle tree: iid, wor, greedy, spechub")
    p.add_argument("--raw", action="store_true", help="send the prompt as raw text, without the chat template")
    p.add_argument("--dtype", default="auto",
                   help="auto (default: bfloat16 with native bf16 matmuls, else float32), float32, bfloat16, float16; "
                        "greedy output equals autoregressive decoding token for token in float32 (bf16/fp16: up to "
                        "near-ties)")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda, cuda:N")
    p.add_argument("--backend", default="auto",
                   help="target backend: auto (default: llama.cpp for a .gguf target, and for the embedded target "
                        "on a CPU when the plan is automatic and specot[llamacpp] is installed; else transformers), "
                        "transformers, llamacpp (a .gguf file, or the embedded GGUF as it ships, run in its own "
                        "weights: greedy equals autoregressive up to near-ties; n-gram and suffix drafts; "
                        "docs/llamacpp.md)")
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
