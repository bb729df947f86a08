"""``specot generate``: speculative decoding of one prompt, streamed, with statistics."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "generate",
        help="speculative decoding of a prompt with a target and a draft",
        description="Generate text with speculative decoding; the output follows the target's distribution exactly.",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", help="prompt text")
    src.add_argument("--prompt-file", type=Path, help="file holding the prompt text")
    p.add_argument("--target", default=None, help="target model: 'smollm2' (embedded default), a local directory or a hub id")
    p.add_argument("--draft", default="auto",
                   help="'auto' (default: the shipped distilled draft for the embedded target, else 'ngram'), 'distilled', "
                        "'ngram', or a draft model directory / hub id sharing the target's tokenizer")
    p.add_argument("--ngram-n", type=int, default=3, help="longest n-gram matched by the n-gram drafter (default 3)")
    p.add_argument("--ngram-corpus", default="pydoc",
                   help="text for the n-gram drafter's table: 'pydoc' (default, pydoc_data.topics), a file, or 'none'")
    p.add_argument("--gamma", type=int, default=4, help="draft length γ (default 4)")
    p.add_argument("--gamma-schedule", choices=("constant", "heuristic"), default="constant",
                   help="constant γ, or heuristic: +2 after a fully accepted block, -1 otherwise, within [1, 2γ]")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 = greedy (default 1)")
    p.add_argument("--top-k", type=int, default=None, help="top-k filter (default off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (default 1 = off)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="exact cap on new tokens (default 128)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--verifier", default="speculative",
                   help="verifier name (default speculative); with --drafts/--tree any verifier valid for the "
                        "construction: kseq, rrs, rrs_wor, greedy, spechub, otm, ...")
    p.add_argument("--lenience", type=float, default=None, help="lenience l in (0, 1] for --verifier lenient")
    p.add_argument("--drafts", type=int, default=None, help="multi-draft: K draft sequences per step (tree decoding)")
    p.add_argument("--draft-len", type=int, default=None, help="multi-draft: draft length L (default --gamma)")
    p.add_argument("--tree", default=None,
                   help="draft tree construction: iid | wor | greedy | spechub | prefix:2,2,1 | LAW:k1,..,kL | "
                        "topology:FILE.json | eagle (default: K sequences under the verifier's draft law)")
    p.add_argument("--tree-law", default=None, help="draft law of a topology/eagle tree: iid, wor, greedy, spechub")
    p.add_argument("--raw", action="store_true", help="send the prompt as raw text, without the chat template")
    p.add_argument("--dtype", default="auto", help="auto (default), float32, bfloat16, float16")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--baseline", action="store_true", help="also run autoregressive decoding and print the measured speedup")
    p.add_argument("--json", action="store_true", help="print one JSON object (text, tokens, statistics) instead of streaming")
    p.set_defaults(func=run)


def _fmt_stats(title: str, st: dict) -> str:
    acc = ", ".join(f"{a:.2f}" for a in st["acceptance_per_position"]) or "-"
    return (
        f"[{title}] {st['new_tokens']} tokens in {st['total_time_s']:.2f} s = {st['tokens_per_s']:.1f} tokens/s | "
        f"target calls {st['target_calls']} | block efficiency {st['block_efficiency']:.2f} | "
        f"acceptance {st['acceptance_rate']:.2f} (per position: {acc}) | "
        f"draft {st['draft_time_s']:.2f} s, target {st['target_time_s']:.2f} s"
    )


def run(args: argparse.Namespace) -> int:
    from ..api import generate

    prompt = args.prompt if args.prompt is not None else args.prompt_file.read_text(encoding="utf-8")
    params = {"lenience": args.lenience} if args.lenience is not None else {}
    if args.ngram_n < 1:
        raise ValueError(f"--ngram-n must be >= 1, got {args.ngram_n}")
    if args.draft == "auto":  # the distilled draft for the embedded target, else the n-gram drafter
        from ..models.embedded import embedded_draft_dir

        embedded = args.target in (None, "smollm2") and (embedded_draft_dir() / "config.json").exists()
        args.draft = "distilled" if embedded else "ngram"
    draft: object = args.draft
    if args.draft == "ngram":
        from ..api import load_drafter, load_target

        target = load_target(args.target, dtype=args.dtype, device=args.device)
        corpus = None if args.ngram_corpus == "none" else args.ngram_corpus
        draft = load_drafter("ngram", target, ngram_n=args.ngram_n, ngram_corpus=corpus)
    else:
        target = args.target
    stream = None if args.json else (lambda s: (sys.stdout.write(s), sys.stdout.flush()))
    report = generate(
        prompt, target=target, draft=draft, gamma=args.gamma, gamma_schedule=args.gamma_schedule, temperature=args.temperature, top_k=args.top_k,
        top_p=args.top_p, max_new_tokens=args.max_new_tokens, seed=args.seed, verifier=args.verifier,
        verifier_params=params, baseline=args.baseline, chat=False if args.raw else None, dtype=args.dtype,
        device=args.device, on_text=stream, drafts=args.drafts, draft_len=args.draft_len, tree=args.tree,
        tree_law=args.tree_law,
    )
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print("\n")
    st = report.result.stats.to_dict()
    print(_fmt_stats(report.result.method if report.result.method == "tree" else "speculative", st))
    if report.result.method == "tree":
        print(f"[tree] mean tree size {st['mean_tree_size']:.1f} nodes | mean accepted length "
              f"{st['mean_accepted_length']:.2f} | time outside forward passes {100 * st['overhead_share']:.1f}%")
    if report.baseline is not None:
        print(_fmt_stats("autoregressive", report.baseline.stats.to_dict()))
        print(f"speedup over autoregressive: {report.speedup:.2f}x (tokens/s ratio, same prompt, same run)")
    return 0
