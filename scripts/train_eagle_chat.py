"""Train an EAGLE-3 head for the embedded SmolLM2-135M on the target's OWN chat responses (the
recipe of EAGLE: features of the target's generations, not raw text).

1. The target samples responses to the corpus's training prompts (chat template, resumable shards,
   :func:`specot_lab.distill.data.generate_shards`).
2. The head trains on prompt + response token sequences with the training-time-test unroll
   (:func:`specot_lab.distill.eagle.train_eagle`); the draft vocabulary is the most frequent tokens
   of those sequences.

    python scripts/train_eagle_chat.py --data runs/eagle_data --out runs/eagle_b --max-tokens 250000 --steps 3000
"""

from __future__ import annotations

import argparse
import sys

import torch

from specot.api import load_target
from specot_lab.corpus import raw_texts, train_prompts
from specot_lab.distill.data import SampleConfig, generate_shards, iter_shards
from specot_lab.distill.eagle import EagleTrainConfig, train_eagle


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-tokens", type=int, default=250_000, help="tokens of sampled data (prompt + response)")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--draft-vocab", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--max-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-data", action="store_true")
    ap.add_argument("--with-text", action="store_true", help="also train on the raw distill train texts")
    ap.add_argument("--init-from-target", action="store_true",
                    help="start the output layer and final norm from the target's (attempt 3)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tgt = load_target(None, dtype="float32")
    if not args.skip_data:
        cfg = SampleConfig(batch_size=16, max_new_tokens=128, temperature=args.temperature, top_k=1)
        print(generate_shards(tgt, train_prompts(0), args.data, cfg, max_tokens=args.max_tokens), file=sys.stderr)
    seqs = [s["ids"].tolist() for s in iter_shards(args.data)]
    if args.with_text:
        seqs += [tgt.tokenizer(t, add_special_tokens=False)["input_ids"] for t in raw_texts("train")]
    print(f"{len(seqs)} sequences, {sum(map(len, seqs))} tokens", file=sys.stderr)
    tc = EagleTrainConfig(draft_vocab_size=args.draft_vocab, steps=args.steps, lr=args.lr, max_len=args.max_len,
                          init_from_target=args.init_from_target)
    train_eagle(tgt, seqs, args.out, tc, max_steps=args.max_steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
