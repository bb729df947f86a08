"""Build instruction prompts for sampling the target's own chat responses (EAGLE's recipe:
the head trains on the target's answers to a broad instruction set; docs/distillation.md,
"Training an EAGLE head").

No instruction dataset can be fetched here, so the prompts are made from text already on the
machine, in four kinds:

* short questions about public names of the modules in ``DOC_MODULES`` and ``TEXT_MODULES``
  (never the benchmark's ``DOCSTRING_MODULES``);
* "explain / review / document this code" over code excerpts of a corpus from
  ``benchmarks/training/build_eagle_corpus.py`` (held-out sources are already excluded there);
* "summarize / explain / rewrite" over prose excerpts of that corpus;
* open requests about a topic word taken from markdown headings of that corpus;
* everyday requests (stories, letters, plans, explanations, lists) over ``EVERYDAY_SUBJECTS``,
  a hand-written list that leaves out every subject of the held-out ``general`` prompt set.

``--exclude`` drops prompts an earlier run already sampled, so a second run adds new answers.

    python benchmarks/training/build_eagle_prompts.py --corpus runs/eagle_corpus.jsonl --out runs/eagle_prompts.jsonl
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
EVERYDAY_Q = (
    "Write a short story about {s}.",
    "Write a friendly email to a colleague about {s}.",
    "Give me a simple step-by-step plan for {s}.",
    "Explain {s} to a ten-year-old.",
    "List five facts about {s}.",
    "Write a short poem about {s}.",
    "What are the pros and cons of {s}?",
    "Describe {s} in one paragraph.",
    "I am new to {s}. Where should I start?",
    "Write a short blog post introduction about {s}.",
    "What is the history of {s}? Keep it short.",
    "Answer as a helpful assistant: how can I get better at {s}?",
)
EVERYDAY_SUBJECTS = (
    "baking bread", "growing tomatoes", "keeping a houseplant alive", "training a puppy",
    "running a first marathon", "learning to swim", "saving money on groceries", "moving to a new city",
    "a rainy day in a small town", "a robot that learns to paint", "a dragon afraid of fire",
    "the moon landing", "the printing press", "ancient Egypt", "the Roman Empire", "the Silk Road",
    "volcanoes", "earthquakes", "the water cycle", "black holes", "electric cars", "solar panels",
    "recycling plastic", "honey bees", "whales", "coral reefs", "the human heart", "drinking enough water",
    "writing a cover letter", "preparing for a job interview", "giving a short speech", "public libraries",
    "board games", "playing the guitar", "chess openings", "photography for beginners", "knitting",
    "planning a birthday party", "a trip to Japan", "camping with children", "cycling to work",
    "time management", "working from home", "learning a second language", "reading more books",
    "meditation", "a healthy breakfast", "cooking rice", "making pancakes", "a picnic in the park",
    "the Olympic Games", "football", "climate change", "the internet", "smartphones", "video games",
    "a friendly neighbour", "a lost cat finding its way home", "winter in the mountains", "the ocean at night",
    "budgeting for a holiday", "buying a used car", "opening a small cafe", "volunteering",
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
          n_prose: int = 900, n_topic: int = 600, n_everyday: int = 0) -> list[str]:
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
    pairs = [(q, s) for q in EVERYDAY_Q for s in EVERYDAY_SUBJECTS]
    prompts += [q.format(s=s) for q, s in rng.sample(pairs, min(n_everyday, len(pairs)))]
    rng.shuffle(prompts)
    return prompts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--everyday", type=int, default=0, help="how many everyday requests to add (the shipped head's data: 500 to 1500 per draw)")
    ap.add_argument("--exclude", default=None, help="a prompts JSONL whose prompts are left out")
    ap.add_argument("--per-module", type=int, default=6, help="public names asked about per documented module")
    ap.add_argument("--code", type=int, default=900, help="code excerpts asked about (at most the corpus's)")
    ap.add_argument("--prose", type=int, default=900, help="prose excerpts asked about (at most the corpus's)")
    ap.add_argument("--topics", type=int, default=600, help="markdown-heading topics asked about")
    args = ap.parse_args(argv)
    with open(args.corpus, encoding="utf-8") as f:
        corpus = [json.loads(line) for line in f]
    prompts = build(corpus, random.Random(args.seed), per_module=args.per_module, n_code=args.code,
                    n_prose=args.prose, n_topic=args.topics, n_everyday=args.everyday)
    if args.exclude:
        with open(args.exclude, encoding="utf-8") as f:
            seen = {json.loads(line)["prompt"] for line in f}
        prompts = [p for p in prompts if p not in seen]
    with open(args.out, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(json.dumps({"prompt": p}) + "\n")
    print(f"{len(prompts)} prompts -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
