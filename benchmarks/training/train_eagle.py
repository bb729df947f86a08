"""Train an EAGLE-3 head for the embedded SmolLM2-135M on the target's own chat responses and/or
raw text (docs/distillation.md, "Training an EAGLE head"; `specot distill data` and `specot distill eagle` run the same recipe).

1. (unless ``--skip-data``) The target samples responses to the corpus's training prompts (chat
   template, resumable shards, :func:`specot_lab.distill.data.generate_shards`).
2. ``--corpus FILE.jsonl`` (from ``benchmarks/training/build_eagle_corpus.py``) adds raw code and prose
   excerpts; a ``--chat-fraction`` of them is cut in two and wrapped in the chat template (the
   first part as the user's request, the rest as the assistant's answer), so the head also sees
   the target's features inside chat turns.
3. The head trains on the token sequences with the training-time-test unroll
   (:func:`specot_lab.distill.eagle.train_eagle`); the draft vocabulary is the most frequent tokens
   of those sequences.

    python benchmarks/training/train_eagle.py --data runs/eagle_data --out runs/eagle_b --max-tokens 250000 --steps 3000
    python benchmarks/training/train_eagle.py --data runs/eagle_data --skip-data --with-text --corpus runs/eagle_corpus.jsonl \
        --dtype bfloat16 --autocast --steps 10000 --out runs/eagle_d
"""

from __future__ import annotations

import argparse
import json
import random
import sys

import torch

from specot.api import load_target
from specot_lab.corpus import raw_texts, train_prompts
from specot_lab.distill.data import SampleConfig, generate_shards, iter_shards
from specot_lab.distill.eagle import TOKEN_LOSSES, EagleTrainConfig, train_eagle


CHAT_TEMPLATES = {
    "code": ("Complete this {lang} code:\n\n{head}", "Continue the following {lang} file:\n\n{head}",
             "Here is the start of a {lang} file. Write what comes next.\n\n{head}"),
    "prose": ("Continue this text:\n\n{head}", "Write the next part of this document:\n\n{head}",
              "{head}\n\nGo on."),
}
PROSE = {"markdown", "rst", "text"}


def corpus_ids(tokenizer, row: dict, rng: random.Random, chat_fraction: float) -> list[int]:
    """Token ids of one corpus excerpt: raw, or (with probability ``chat_fraction``) cut at a line
    boundary and wrapped as a user request and the assistant's answer in the chat template."""
    text = row["text"]
    lines = text.splitlines(keepends=True)
    if rng.random() >= chat_fraction or len(lines) < 4:
        return tokenizer(text, add_special_tokens=False)["input_ids"]
    cut = rng.randint(len(lines) // 4, len(lines) // 2)
    kind = "prose" if row["kind"] in PROSE else "code"
    user = rng.choice(CHAT_TEMPLATES[kind]).format(lang=row["kind"].capitalize(), head="".join(lines[:cut]))
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": "".join(lines[cut:])}]
    ids = tokenizer.apply_chat_template(msgs, tokenize=True)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # a BatchEncoding or a list


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, action="append",
                    help="sampled-response shards (repeatable; the first is where new samples go)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-tokens", type=int, default=250_000, help="tokens of sampled data (prompt + response)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--prompts", action="append", default=[],
                    help="JSONL of {prompt} to sample (benchmarks/training/build_eagle_prompts.py; repeatable); default: the "
                    "distill train prompts")
    ap.add_argument("--samples-per-prompt", type=int, default=1, help="responses sampled per prompt")
    ap.add_argument("--batch-size", type=int, default=16, help="prompts per sampling batch")
    ap.add_argument("--max-new-tokens", type=int, default=128, help="response cap when sampling")
    ap.add_argument("--sample-only", action="store_true", help="stop after sampling")
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--draft-vocab", type=int, default=8192,
                    help="draft vocabulary size; with --init-head, a size above the head's grows its vocabulary")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N: where the target samples and the head trains")
    ap.add_argument("--train-batch-size", type=int, default=1,
                    help="sequences per optimizer step (16 for the shipped head, with --lr 1.5e-4)")
    ap.add_argument("--save-every", type=int, default=200, help="checkpoint every this many steps")
    ap.add_argument("--time-budget-min", type=float, default=None,
                    help="end training within this many minutes: --steps is shortened from the measured step rate")
    ap.add_argument("--skip-data", action="store_true")
    ap.add_argument("--with-text", action="store_true", help="also train on the raw distill train texts")
    ap.add_argument("--init-from-target", action="store_true",
                    help="start the output layer and final norm from the target's (tried once: it did not speed up convergence)")
    ap.add_argument("--corpus", action="append", default=[], help="raw-text JSONL ({kind, text} per line)")
    ap.add_argument("--chat-fraction", type=float, default=0.4, help="corpus excerpts wrapped as chat turns")
    ap.add_argument("--dtype", default="float32", help="the target's dtype for the teacher-forced features")
    ap.add_argument("--autocast", action="store_true", help="bf16 autocast of the head's forward/backward")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init-head", default=None, help="continue from a trained head (a directory in the published layout)")
    ap.add_argument("--token-loss", default="fkl", choices=TOKEN_LOSSES,
                    help="KL(p||q) (EAGLE) or TV(p, q) = one minus the acceptance rate at T = 1 (DistillSpec)")
    ap.add_argument("--num-layers", type=int, default=None,
                    help="decoder layers of the head (default: the initial head's, else 1); above the initial "
                    "head's adds layers that start as the identity")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tgt = load_target(None, dtype=args.dtype, device=args.device)
    if not args.skip_data:
        cfg = SampleConfig(batch_size=args.batch_size, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature, top_k=0)
        prompts = []
        for path in args.prompts:
            with open(path, encoding="utf-8") as f:
                prompts += [json.loads(line)["prompt"] for line in f]
        prompts = (prompts or train_prompts(0)) * args.samples_per_prompt
        print(generate_shards(tgt, prompts, args.data[0], cfg, max_tokens=args.max_tokens), file=sys.stderr)
        if args.sample_only:
            return 0
    seqs = [s["ids"].tolist() for d in args.data for s in iter_shards(d)]
    if args.with_text:
        seqs += [tgt.tokenizer(t, add_special_tokens=False)["input_ids"] for t in raw_texts("train")]
    rng = random.Random(args.seed)
    for path in args.corpus:
        with open(path, encoding="utf-8") as f:
            seqs += [corpus_ids(tgt.tokenizer, json.loads(line), rng, args.chat_fraction) for line in f]
    print(f"{len(seqs)} sequences, {sum(map(len, seqs))} tokens", file=sys.stderr)
    tc = EagleTrainConfig(draft_vocab_size=args.draft_vocab, steps=args.steps, lr=args.lr, max_len=args.max_len,
                          init_from_target=args.init_from_target, autocast=args.autocast, seed=args.seed,
                          init_head=args.init_head, num_layers=args.num_layers, batch_size=args.train_batch_size,
                          save_every=args.save_every, token_loss=args.token_loss,
                          time_budget_s=args.time_budget_min * 60 if args.time_budget_min else None)
    train_eagle(tgt, seqs, args.out, tc, max_steps=args.max_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
