"""``specot distill``: build a small draft model for the embedded target by distillation.

Sub-commands (run in this order; each is resumable and logs progress):

* ``specot distill prompts --split train|heldout [--n N] --out FILE.jsonl`` — write a prompt set.
* ``specot distill data --out DIR [--split train|heldout|text]`` — sample the target at temperature 1
  on the prompt set (batched, left-padded, KV-cached, float32 by default: no native bf16 here) and
  store token ids and the target's top-k next-token probabilities per position in shards;
  ``--split text`` labels raw text by teacher forcing instead.
* ``specot distill train --data DIR [DIR...] [--val DIR] --out DIR [--export DIR]`` — train a
  ``LlamaForCausalLM`` draft on the soft labels (KL/cross-entropy to the target + CE fallback).
* ``specot distill export --run DIR --out DIR`` — write the checkpoint of a (partial) run as a
  Hugging Face model directory (bf16 safetensors + config + tokenizer).
* ``specot distill eval --draft DIR|distilled`` — held-out α (T = 1 and 0), c (float32 and bf16),
  the Leviathan prediction and the end-to-end speedup over autoregressive decoding.

An EAGLE-3 head for any target (docs/distillation.md), the shipped head's recipe:

* ``specot distill data --target T --prompts FILE.jsonl --top-k 0 --out DIR`` — the target's own
  answers to your prompts (token ids only: the head's training runs the target again for its
  features, so it needs no stored probabilities);
* ``specot distill eagle --target T --data DIR [--text FILE ...] --batch-size 16 --lr 1.5e-4 --out RUN``
  — train on those answers (and raw text, teacher-forced) with the training-time-test unroll;
  ``draft="eagle:RUN/head"`` then drafts with it.

Registering the command imports neither torch nor the distillation code: the handlers' names are
bound when a handler runs (:class:`specot_lab.lazy.LazyNames`), and ``eagle``'s options are added
when it is used (:class:`specot.cli.main.CommandParser`), so ``specot --help`` answers at once.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

from specot.cli.command import MAX_THREADS, count, number, seed_type
from specot.cli.main import CommandParser
from specot.outputs import check_output, dumps, write_json

from .bench.lists import int_list, number_list
from .lazy import LazyNames

__all__ = ["register"]

#: The handlers' names (torch, the core API, the distillation code), bound when a handler runs.
_NAMES = LazyNames(__name__, {
    "torch": "torch", "check_count": "specot._validation", "check_positive_number": "specot._validation",
    "load_target": "specot.api", "resolve_dtype": "specot.models.device",
    "load_embedded_target": "specot.models.embedded",
    **{name: "specot_lab.corpus" for name in ("heldout_prompts", "load_prompts", "raw_texts", "train_prompts",
                                               "write_jsonl")},
    **{name: "specot_lab.distill.data" for name in ("SampleConfig", "generate_shards", "iter_shards",
                                                     "teacher_force_shards")},
    **{name: "specot_lab.distill.eagle" for name in ("TOKEN_LOSSES", "EagleTrainConfig", "train_eagle")},
    "evaluate_draft": "specot_lab.distill.evaluate", "format_report": "specot_lab.distill.evaluate",
    **{name: "specot_lab.distill.train" for name in ("DraftArch", "TrainConfig", "export_draft", "init_draft",
                                                      "train_draft")},
    "load_torch_file": "specot_lab.distill.files",
})
__getattr__ = _NAMES.getattr


def _threads(n: int) -> None:
    if check_count(n, "threads", "--threads", minimum=0):  # 0: torch's default
        torch.set_num_threads(n)


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("distill", help="distil a small draft model from the target (data, train, export, eval)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    dsub = p.add_subparsers(dest="distill_command", metavar="STEP", parser_class=CommandParser)
    dsub.required = True

    _add_prompts(dsub)
    _add_data(dsub)
    _add_train(dsub)
    _add_export(dsub)
    _add_eagle(dsub)
    _add_eval(dsub)


def _add_prompts(dsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pp = dsub.add_parser("prompts", help="write the train or held-out prompt set as JSONL")
    pp.add_argument("--split", choices=("train", "heldout"), default="train")
    pp.add_argument("--n", type=count(1), default=None, help="number of prompts, >= 1 (default: all train / 20 held-out)")
    pp.add_argument("--seed", type=seed_type(), default=0)
    pp.add_argument("--out", type=Path, required=True, help="the JSONL file (an existing file only with --force)")
    pp.add_argument("--force", action="store_true", help="replace an existing --out file")
    pp.set_defaults(func=_run_prompts)


def _add_data(dsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pd = dsub.add_parser("data", help="sample the target into soft-label shards (resumable)")
    pd.add_argument("--out", type=Path, required=True, help="shard directory")
    pd.add_argument("--target", default="smollm2", help="target model directory / hub id (default: the embedded one)")
    pd.add_argument("--split", choices=("train", "heldout", "text"), default="train",
                    help="train prompts (default), held-out prompts, or raw train text by teacher forcing")
    pd.add_argument("--prompts", default=None, help="a JSONL file of {\"prompt\": ...} lines to sample instead of "
                    "the split's prompts (e.g. from benchmarks/training/build_eagle_prompts.py)")
    pd.add_argument("--n-prompts", type=count(1), default=None, help="limit the prompt set (held-out default 40)")
    pd.add_argument("--batch-size", type=count(1), default=48)
    pd.add_argument("--max-new-tokens", type=count(1), default=160)
    pd.add_argument("--temperature", type=number(minimum=0), default=1.0)
    pd.add_argument("--top-k", type=count(0), default=32, help="probabilities stored per position (default 32; 0 keeps "
                    "token ids only, all that `distill eagle` reads)")
    pd.add_argument("--seed", type=seed_type(), default=0)
    pd.add_argument("--max-tokens", type=count(1), default=None, help="stop after this many stored tokens")
    pd.add_argument("--dtype", default="float32", help="target dtype (default float32; bf16 is ~3x slower batched on AVX2-only CPUs)")
    pd.add_argument("--threads", type=count(0, MAX_THREADS), default=0, help="torch threads (0 = default; 1 is faster on a busy CPU)")
    pd.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where the target samples")
    pd.add_argument("--extra-text", action="store_true",
                    help="text split: add the docstrings of specot_lab.corpus.TEXT_MODULES (~3.4 M characters)")
    pd.set_defaults(func=_run_data)


def _add_train(dsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pt = dsub.add_parser("train", help="train the draft on the shards (resumable)")
    pt.add_argument("--data", type=Path, nargs="+", required=True, help="shard directories")
    pt.add_argument("--val", type=Path, nargs="*", default=[], help="held-out shard directories (validation α)")
    pt.add_argument("--out", type=Path, required=True, help="run directory (ckpt.pt, log.jsonl)")
    pt.add_argument("--export", type=Path, default=None, help="write the final model here (HF directory)")
    pt.add_argument("--hidden", type=count(1), default=192)
    pt.add_argument("--layers", type=count(1), default=4)
    pt.add_argument("--heads", type=count(1), default=6)
    pt.add_argument("--kv-heads", type=count(1), default=3)
    pt.add_argument("--intermediate", type=count(1), default=768)
    pt.add_argument("--epochs", type=number(above=0), default=2.0)
    pt.add_argument("--batch-tokens", type=count(1), default=4096)
    pt.add_argument("--max-len", type=count(2), default=640)
    pt.add_argument("--lr", type=number(above=0, maximum=10), default=2e-3)
    pt.add_argument("--warmup", type=count(0), default=50)
    pt.add_argument("--ce-weight", type=number(minimum=0), default=0.1, help="weight of the hard-label CE term (default 0.1)")
    pt.add_argument("--prompt-weight", type=number(minimum=0), default=0.5, help="loss weight of prompt positions (default 0.5)")
    pt.add_argument("--no-pca-init", action="store_true", help="random embedding instead of the target's PCA")
    pt.add_argument("--seed", type=seed_type(), default=0)
    pt.add_argument("--max-steps", type=count(1), default=None, help="stop (resumably) after this many steps")
    pt.add_argument("--eval-every", type=count(1), default=200)
    pt.add_argument("--threads", type=count(0, MAX_THREADS), default=0)
    pt.set_defaults(func=_run_train)


def _add_export(dsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pe = dsub.add_parser("export", help="export a run's checkpoint as a Hugging Face model directory")
    pe.add_argument("--run", type=Path, required=True)
    pe.add_argument("--out", type=Path, required=True)
    pe.add_argument("--dtype", default="bfloat16", help="stored weight dtype (default bfloat16)")
    pe.set_defaults(func=_run_export)


def _add_eagle(dsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    dsub.add_parser("eagle", help="train an EAGLE-3 head on the target's features (resumable; a GPU is advised)",
                    add_arguments=_eagle_arguments)


#: The token losses of ``distill eagle`` (:data:`specot_lab.distill.eagle.TOKEN_LOSSES`, named here so
#: that the sub-command's help imports no torch; a test holds the two equal).
EAGLE_TOKEN_LOSSES = ("fkl", "tvd")


def _eagle_arguments(pg: argparse.ArgumentParser) -> None:
    """The options of ``distill eagle`` (added on first use; they import no torch)."""
    pg.add_argument("--out", type=Path, required=True, help="run directory (ckpt.pt, log.jsonl, head/)")
    pg.add_argument("--target", default="smollm2", help="target model directory / hub id (default: the embedded one)")
    pg.add_argument("--data", type=Path, nargs="*", default=[], help="shard directories of the target's own answers "
                    "(`specot distill data`): their token ids, prompt and answer, are trained on")
    pg.add_argument("--text", type=Path, nargs="*", default=[], help="training text files, teacher-forced (default, "
                    "when neither --data nor --text is given: the distill train texts)")
    pg.add_argument("--draft-vocab", type=count(1), default=None, help="reduced draft vocabulary size (default: full; with "
                    "--init-head, a size above the head's grows its vocabulary, else the head's is kept)")
    pg.add_argument("--layers", default=None, help="feature layers i,j,k (default: 2, L//2, L-3)")
    pg.add_argument("--ttt-steps", type=count(1), default=3, help="training-time-test unroll steps (default 3)")
    pg.add_argument("--feat-weight", type=number(minimum=0), default=0.1, help="weight of the feature regression (default 0.1)")
    pg.add_argument("--token-loss", choices=EAGLE_TOKEN_LOSSES, default="fkl",
                    help="token loss: fkl = KL(p||q) (EAGLE, default), tvd = TV(p, q), one minus the acceptance "
                    "rate at T = 1 (DistillSpec)")
    pg.add_argument("--steps", type=count(1), default=1000)
    pg.add_argument("--max-steps", type=count(1), default=None, help="stop (resumably) after this many steps")
    pg.add_argument("--batch-size", type=count(1), default=1, help="sequences per optimizer step (the shipped head: 16, "
                    "with --lr 1.5e-4)")
    pg.add_argument("--time-budget-min", type=number(above=0), default=None, help="end within this many minutes: --steps is "
                    "shortened from the measured step rate")
    pg.add_argument("--save-every", type=count(1), default=200, help="checkpoint every this many steps (resumable)")
    pg.add_argument("--lr", type=number(above=0, maximum=10), default=1e-4)
    pg.add_argument("--max-len", type=count(2), default=512)
    pg.add_argument("--dtype", default="float32", help="the target's dtype (its features); bfloat16 is 3x faster "
                    "where the CPU has native bf16")
    pg.add_argument("--autocast", action="store_true", help="bf16 autocast of the head's forward/backward "
                    "(float32 weights; 2.2x faster steps where the CPU has native bf16)")
    pg.add_argument("--init-head", type=Path, default=None, help="continue training a head (a directory in the "
                    "published layout, e.g. the shipped one) on new text: its weights, draft vocabulary and layers")
    pg.add_argument("--num-layers", type=count(1), default=None, help="decoder layers of the head (default: the "
                    "initial head's, else 1, as EAGLE-3); above the initial head's adds layers that start as the identity")
    pg.add_argument("--device", default="cpu")
    pg.add_argument("--seed", type=seed_type(), default=0)
    pg.add_argument("--threads", type=count(0, MAX_THREADS), default=0)
    pg.set_defaults(func=_run_eagle)


def _add_eval(dsub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    pv = dsub.add_parser("eval", help="held-out α, c, predicted and measured speedup")
    pv.add_argument("--draft", default="distilled", help="draft directory, or 'distilled' (the shipped one)")
    pv.add_argument("--n-prompts", type=count(1), default=20)
    pv.add_argument("--bench-prompts", type=count(1), default=None, help="prompts of the end-to-end run (default --n-prompts)")
    pv.add_argument("--max-new-tokens", type=count(1), default=96)
    pv.add_argument("--gammas", default="1,2,3,4,5,6")
    pv.add_argument("--temperatures", default="1,0")
    pv.add_argument("--no-bench", action="store_true", help="skip the end-to-end speed run")
    pv.add_argument("--no-bf16", action="store_true", help="skip the bf16 timing")
    pv.add_argument("--seed", type=seed_type(), default=0)
    pv.add_argument("--threads", type=count(0, MAX_THREADS), default=0)
    pv.add_argument("--out", type=Path, default=None, help="write the JSON result here (an existing file only when "
                    "distill eval wrote it, or with --force)")
    pv.add_argument("--force", action="store_true", help="replace an existing --out file")
    pv.set_defaults(func=_run_eval)


def _run_prompts(args: argparse.Namespace) -> int:
    if args.n is not None and args.n < 1:  # a caller's namespace, not the parser's
        raise ValueError(f"--n must be an integer >= 1 (the number of prompts), got {args.n}")
    check_output(args.out, "--out", force=getattr(args, "force", False))  # before the prompts are built
    _NAMES.bind()
    prompts = train_prompts(args.seed, max_prompts=args.n) if args.split == "train" else heldout_prompts(args.n or 20)
    write_jsonl(prompts, args.out)
    print(f"{len(prompts)} {args.split} prompts -> {args.out}")
    return 0


def _run_data(args: argparse.Namespace) -> int:
    _NAMES.bind()
    _threads(args.threads)
    t0 = time.perf_counter()
    # every input error before the load: it costs no model
    if args.prompts is not None and args.split == "text":
        raise ValueError("--prompts names prompts to sample; --split text teacher-forces raw text: pass one of them")
    for name, v in (("n_prompts", args.n_prompts), ("max_tokens", args.max_tokens)):
        if v is not None:
            check_count(v, name, "--" + name.replace("_", "-"))
    cfg = SampleConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                       top_k=args.top_k, seed=args.seed if args.split == "train" else args.seed + 10_000)
    target = load_target(args.target, dtype=args.dtype, device=args.device)
    if args.split == "text":
        texts = raw_texts("train", extra=args.extra_text)
        random.Random(args.seed).shuffle(texts)  # a --max-tokens cut keeps every source represented
        stats = teacher_force_shards(target, texts, args.out, top_k=args.top_k, max_tokens=args.max_tokens)
    else:
        if args.prompts is not None:
            prompts = load_prompts(args.prompts, args.n_prompts or sys.maxsize)
        elif args.split == "train":
            prompts = train_prompts(args.seed, max_prompts=args.n_prompts)
        else:
            prompts = heldout_prompts(args.n_prompts or 40)
        stats = generate_shards(target, prompts, args.out, cfg, max_tokens=args.max_tokens,
                                log=lambda m: print(m, file=sys.stderr, flush=True))
    stats["wall_s"] = time.perf_counter() - t0
    print(dumps(stats, indent=2))
    return 0


def _run_train(args: argparse.Namespace) -> int:
    _NAMES.bind()
    _threads(args.threads)
    t0 = time.perf_counter()
    arch = DraftArch(hidden=args.hidden, layers=args.layers, heads=args.heads, kv_heads=args.kv_heads,
                     intermediate=args.intermediate)
    cfg = TrainConfig(arch=arch, epochs=args.epochs, batch_tokens=args.batch_tokens, max_len=args.max_len, lr=args.lr,
                      warmup=args.warmup, ce_weight=args.ce_weight, prompt_weight=args.prompt_weight, seed=args.seed,
                      eval_every=args.eval_every, pca_init=not args.no_pca_init, threads=args.threads)
    target = load_embedded_target(dtype="float32")
    model = train_draft(target.model, args.data, args.out, cfg, val_dirs=args.val, max_steps=args.max_steps)
    wall = time.perf_counter() - t0
    print(f"trained in {wall:.0f} s -> {args.out}")
    if args.export:
        export_draft(model, args.export, tokenizer=target.tokenizer,
                     meta={"train_config": json.loads((args.out / "train_config.json").read_text()), "wall_s": wall})
        print(f"exported -> {args.export}")
    return 0


def _run_export(args: argparse.Namespace) -> int:
    _NAMES.bind()
    tc = json.loads((args.run / "train_config.json").read_text())
    state = load_torch_file(args.run / "ckpt.pt", "training checkpoint", keys=("model",))["model"]  # before the model
    target = load_embedded_target(dtype="float32")
    model = init_draft(target.model, DraftArch(**tc["arch"]), pca_init=False)
    model.load_state_dict(state)
    steps = sum(1 for _ in open(args.run / "log.jsonl", encoding="utf-8")) if (args.run / "log.jsonl").exists() else None
    export_draft(model.eval(), args.out, tokenizer=target.tokenizer, dtype=resolve_dtype(args.dtype),
                 meta={"train_config": tc, "logged_steps": steps})
    print(f"exported {args.run} -> {args.out}")
    return 0


def _our_eval(path: Path) -> bool:
    """Whether ``path`` holds a result that ``specot distill eval`` wrote (its ``command``)."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(obj, dict) and str(obj.get("command", "")).startswith("specot distill eval")


def _run_eval(args: argparse.Namespace) -> int:
    gammas, temperatures = int_list(args.gammas, "--gammas"), number_list(args.temperatures, "--temperatures")
    check_output(args.out, "--out", force=getattr(args, "force", False), ours=_our_eval)  # before the models load
    _NAMES.bind()
    _threads(args.threads)
    res = evaluate_draft(args.draft, n_prompts=args.n_prompts, max_new_tokens=args.max_new_tokens,
                         gammas=gammas, temperatures=temperatures,
                         bench_prompts=args.bench_prompts, seed=args.seed,
                         cost_dtypes=("float32",) if args.no_bf16 else ("float32", "bfloat16"), run_bench=not args.no_bench)
    res["command"] = "specot distill eval " + " ".join(sys.argv[3:] if len(sys.argv) > 3 else [])
    print(format_report(res))
    if args.out:
        write_json(args.out, res)
    return 0


def _run_eagle(args: argparse.Namespace) -> int:
    _NAMES.bind()
    _threads(args.threads)
    for d in args.data:
        if not any(d.glob("shard_*.pt")):
            raise ValueError(f"--data {d}: no shard_*.pt files there; sample them with `specot distill data --out {d}`")
    try:
        layers = tuple(int(i) for i in args.layers.split(",")) if args.layers else None
    except ValueError:
        raise ValueError(f"--layers takes comma-separated target layer indices like 2,15,27; got {args.layers!r}") from None
    if args.max_steps is not None:
        check_count(args.max_steps, "max_steps", "--max-steps")
    if args.time_budget_min is not None:
        check_positive_number(args.time_budget_min, "time_budget_min", "--time-budget-min")
    cfg = EagleTrainConfig(draft_vocab_size=args.draft_vocab, layers=layers, ttt_steps=args.ttt_steps,
                           feat_weight=args.feat_weight, lr=args.lr, steps=args.steps, max_len=args.max_len,
                           seed=args.seed, autocast=args.autocast, token_loss=args.token_loss,
                           init_head=str(args.init_head) if args.init_head else None, num_layers=args.num_layers,
                           batch_size=args.batch_size, save_every=args.save_every,
                           time_budget_s=None if args.time_budget_min is None else args.time_budget_min * 60)
    target = load_target(args.target, dtype=args.dtype, device=args.device)
    seqs = [s["ids"].tolist() for s in iter_shards(*args.data)]  # the target's answers, prompt included
    texts = [f.read_text(encoding="utf-8") for f in args.text] if args.text or args.data else raw_texts("train")
    if texts and target.tokenizer is None:
        raise ValueError(f"target {args.target!r} has no tokenizer to encode the training text")
    seqs += [target.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    print(f"{len(seqs)} training sequences, {sum(map(len, seqs))} tokens", file=sys.stderr)
    train_eagle(target, seqs, args.out, cfg, max_steps=args.max_steps)
    print(f"EAGLE head -> {args.out / 'head'} (use it with draft='eagle:{args.out / 'head'}')")
    return 0
