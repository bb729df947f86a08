"""``specot generate``: speculative decoding of one prompt, streamed, with statistics."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from ..api import GenerationInterrupted, generate
from .main import EXIT_INTERRUPTED, ignore_interrupts

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
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
    p.add_argument("--target", default=None, help="target model: 'smollm2' (embedded default), a local directory or a hub id")
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
                   help="target backend: auto (default: llama.cpp for the embedded target on a CPU when the plan is "
                        "automatic and specot[llamacpp] is installed, else transformers), transformers, llamacpp "
                        "(the embedded GGUF as it ships; n-gram and suffix drafts; docs/llamacpp.md)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="static KV caches with the model passes replayed as CUDA graphs, one per padded width "
                        "(default: on with --device cuda; on an H200 a target pass went from 19 to 4 ms; docs/engine.md)")
    p.add_argument("--baseline", action="store_true",
                   help="also run autoregressive decoding for the same number of tokens and print the measured speedup")
    p.add_argument("--repeats", type=int, default=1,
                   help="with --baseline: repeat the speculative/autoregressive pair N times and print the median "
                        "speedup with its range; when sampling, each pair decodes a fresh answer (default 1)")
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


def _read_prompt(path: Path) -> str:
    if not path.exists():
        raise FileNotFoundError(f"--prompt-file {str(path)!r} does not exist")
    if path.is_dir():
        raise ValueError(f"--prompt-file {str(path)!r} is a directory; name a text file holding the prompt")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--prompt-file {str(path)!r} is not UTF-8 text") from None


def _parse_value(text: str) -> object:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _verifier_params(args: argparse.Namespace) -> dict:
    """The verifier's parameters from --lenience / --verifier-param, refusing misplaced ones."""
    params: dict = {}
    if args.verifier == "lenient" and args.lenience is None:
        raise ValueError("--verifier lenient is lossy and needs its lenience explicitly: --lenience L with L in (0, 1] "
                         "(L = 1 is plain speculative sampling)")
    if args.lenience is not None:
        if args.verifier != "lenient":
            raise ValueError(f"--lenience applies only to --verifier lenient (a lossy verifier); verifier "
                             f"{args.verifier!r} takes no lenience. Drop --lenience, or add --verifier lenient for a "
                             "lossy run")
        params["lenience"] = args.lenience
    for item in args.verifier_param:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--verifier-param expects NAME=VALUE, got {item!r}")
        if name.strip() == "lenience":
            raise ValueError("pass the lenience as --lenience L (with --verifier lenient)")
        params[name.strip()] = _parse_value(value.strip())
    return params


def _verifier_text(report: object) -> str:
    info = report.verifier  # type: ignore[attr-defined]
    params = ", ".join(f"{k}={v}" for k, v in info.get("params", {}).items())
    name = f"{info.get('name')}({params})" if params else str(info.get("name"))
    if info.get("lossless", True):
        return f"verifier {name}: lossless (dtype {report.dtype})"  # type: ignore[attr-defined]
    return f"verifier {name}: LOSSY - the output does not follow the target's distribution"


def _speedup_line(report: object) -> str:
    sp, runs, t = report.speedup, report.speedups, report.timing  # type: ignore[attr-defined]
    if sp is None:
        return "speedup over autoregressive: n/a (no measurable time)"
    if len(runs) > 1:
        what = (f"median of {len(runs)} runs, range {min(runs):.2f}-{max(runs):.2f}x; the two runs of a pair "
                f"decode equally many tokens of the same prompt, a fresh answer per pair when sampling")
    else:
        what = f"one run, one answer; --repeats N for a median; both decode {t.get('tokens')} tokens of the same prompt"
    line = f"speedup over autoregressive: {sp:.2f}x (tokens/s ratio, {what}"
    load = t.get("load_average")
    if load:
        line += f"; load average {load[0]:.2f} on {t.get('cpu_count')} cores"
    line += ")"
    if t.get("busy"):
        line += " -- the machine was busy: timings are unreliable"
    return line


def run(args: argparse.Namespace) -> int:
    if args.cuda_graphs and not str(args.device).startswith("cuda"):
        raise ValueError(f"--cuda-graphs needs --device cuda (on {args.device} the padded passes would only run "
                         "slower); drop it or pass --device cuda")
    prompt = args.prompt if args.prompt is not None else _read_prompt(args.prompt_file)
    params = _verifier_params(args)
    corpus = None if args.ngram_corpus == "none" else args.ngram_corpus
    stream = None if args.json else (lambda s: (sys.stdout.write(s), sys.stdout.flush()))
    kwargs = dict(
        target=args.target, draft=args.draft, gamma=args.gamma, gamma_schedule=args.gamma_schedule,
        temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
        seed=args.seed, verifier=args.verifier, verifier_params=params, baseline=args.baseline,
        chat=False if args.raw else None, dtype=args.dtype, device=args.device, backend=args.backend, cuda_graphs=args.cuda_graphs, on_text=stream, drafts=args.drafts,
        tree=args.tree, tree_law=args.tree_law, ngram_n=args.ngram_n, ngram_corpus=corpus,
        repeats=args.repeats,
    )
    try:
        report = generate(prompt, **kwargs)
    except GenerationInterrupted as stop:
        return _interrupted(stop, args.json)
    except KeyboardInterrupt:  # before decoding: loading the models, encoding the prompt
        ignore_interrupts()
        if args.json:
            print(json.dumps({"interrupted": True, "phase": "loading", "text": "", "tokens": [], "new_tokens": 0,
                              "report": None}, indent=2), flush=True)
        print("\nspecot: interrupted before decoding started (loading the models)", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0
    print("\n")
    _print_report(report)
    return 0


def _print_report(report: object, *, baseline: bool = True) -> None:
    """The statistics lines of a finished run (text mode): the speculative run, the tree line, and
    (with ``baseline``) the autoregressive run and the speedup when there was one."""
    result = report.result  # type: ignore[attr-defined]
    st = result.stats.to_dict()
    print(_fmt_stats(result.method if result.method == "tree" else "speculative", st)
          + f" | draft {report.draft}{', CUDA graphs' if report.cuda_graphs else ''} | "  # type: ignore[attr-defined]
          + f"backend {report.backend} | "  # type: ignore[attr-defined]
          + _verifier_text(report))
    if result.method == "tree":
        print(f"[tree] mean tree size {st['mean_tree_size']:.1f} nodes | mean accepted length "
              f"{st['mean_accepted_length']:.2f} | time outside forward passes {100 * st['overhead_share']:.1f}%")
    if baseline and report.baseline is not None:  # type: ignore[attr-defined]
        print(_fmt_stats("autoregressive", report.baseline.stats.to_dict()))  # type: ignore[attr-defined]
        print(_speedup_line(report))


def _interrupted(stop: GenerationInterrupted, as_json: bool) -> int:
    """Ctrl-C during decoding: with ``--json`` the one object (what was generated, and the finished
    speculative report when the baseline was interrupted); in text mode the streamed text stays on
    screen, followed by the finished speculative run's statistics when the baseline was the run
    interrupted. Then one line on stderr."""
    ignore_interrupts()
    if as_json:
        print(json.dumps(stop.to_dict(), indent=2), flush=True)
    elif stop.report is not None:  # the speculative run finished: its statistics still count
        print("\n")
        _print_report(stop.report, baseline=False)
        sys.stdout.flush()
    what = ("" if as_json else "; the statistics above are the finished speculative run's" if stop.report is not None
            else "; the text above is all that was generated")
    print(f"\nspecot: interrupted during the {stop.phase} run after {len(stop.tokens)} tokens in "
          f"{stop.elapsed_s:.2f} s ({stop.tokens_per_s:.1f} tokens/s){what}", file=sys.stderr)
    return EXIT_INTERRUPTED
