"""Build instruction prompts for sampling the target's own chat responses (EAGLE's recipe:
the head trains on the target's answers to a broad instruction set; attempt 7 in
docs/distillation.md).

No instruction dataset can be fetched here, so the prompts are made from text already on the
machine, in four kinds:

* short questions about public names of the modules in ``DOC_MODULES`` and ``TEXT_MODULES``
  (never the benchmark's ``DOCSTRING_MODULES``);
* "explain / review / document this code" over code excerpts of a corpus from
  ``scripts/build_eagle_corpus.py`` (held-out sources are already excluded there);
* "summarize / explain / rewrite" over prose excerpts of that corpus;
* open requests about a topic word taken from markdown headings of that corpus.

    python scripts/build_eagle_prompts.py --corpus runs/eagle_corpus_s0.jsonl --out runs/eagle_prompts.jsonl
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import re
import sys

from specot_lab.corpus import DOC_MODULES, DOCSTRING_MODULES, TEXT_MODULES

NAME_Q = (
    "What does {name} do in Python? Answer briefly with a small example.",
    "Explain {name} to a beginner.",
    "When should I use {name}? Give one example.",
    "Show a short example that uses {name} and explain it.",
)
CODE_Q = (
    "Explain what this {lang} code does:\n\n{text}",
    "Review this {lang} code and suggest one improvement:\n\n{text}",
    "Write a short comment describing this {lang} code:\n\n{text}",
    "Is there a bug in this {lang} code? Explain.\n\n{text}",
)
PROSE_Q = (
    "Summarize this text in a few sentences:\n\n{text}",
    "Explain the main point of this passage in simple words:\n\n{text}",
    "Rewrite this more clearly:\n\n{text}",
    "What questions could a reader ask about this text? List three.\n\n{text}",
)
TOPIC_Q = (
    "Write a short paragraph about {topic}.",
    "Give me three tips about {topic}.",
    "Explain {topic} in two or three sentences.",
    "What are common mistakes with {topic}?",
)
PROSE = {"markdown", "rst", "text"}


def _public_names(modules, rng: random.Random, per_module: int) -> list[str]:
    out = []
    for m in modules:
        if any(m == d or m.startswith(d + ".") for d in DOCSTRING_MODULES):
            continue
        try:
            mod = importlib.import_module(m)
        except Exception:  # noqa: BLE001 - optional modules may be missing
            continue
        names = sorted(n for n in dir(mod) if not n.startswith("_") and callable(getattr(mod, n, None)))
        out += [f"{m}.{n}" for n in rng.sample(names, min(per_module, len(names)))]
    return out


def _excerpt(text: str, rng: random.Random, chars: int) -> str:
    lines = text.splitlines()
    start = rng.randint(0, max(0, len(lines) // 2))
    out = "\n".join(lines[start:])[:chars]
    return out[: out.rfind("\n")] if "\n" in out else out


def build(corpus: list[dict], rng: random.Random, *, per_module: int = 6, n_code: int = 900,
          n_prose: int = 900, n_topic: int = 600) -> list[str]:
    prompts = [rng.choice(NAME_Q).format(name=f"`{n}`")
               for n in _public_names(DOC_MODULES + TEXT_MODULES, rng, per_module)]
    code = [r for r in corpus if r["kind"] not in PROSE]
    prose = [r for r in corpus if r["kind"] in PROSE]
    for r in rng.sample(code, min(n_code, len(code))):
        prompts.append(rng.choice(CODE_Q).format(lang=r["kind"].capitalize(), text=_excerpt(r["text"], rng, 500)))
    for r in rng.sample(prose, min(n_prose, len(prose))):
        prompts.append(rng.choice(PROSE_Q).format(text=_excerpt(r["text"], rng, 600)))
    heads = sorted({m.group(1).strip().strip("`*").lower() for r in prose if r["kind"] == "markdown"
                    for m in re.finditer(r"^#{1,3} +([A-Za-z][A-Za-z ]{3,40})$", r["text"], re.M)})
    for t in rng.sample(heads, min(n_topic, len(heads))):
        prompts.append(rng.choice(TOPIC_Q).format(topic=t))
    rng.shuffle(prompts)
    return prompts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    with open(args.corpus, encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f]
    prompts = build(corpus, random.Random(args.seed))
    with open(args.out, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    print(f"{len(prompts)} prompts -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
