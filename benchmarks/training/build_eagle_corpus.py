"""Build a raw-text corpus for training an EAGLE head: code and documentation installed on this
machine, cut into excerpts, with per-kind quotas (docs/distillation.md, "Training an EAGLE head").

The head learns the target's next-token law from teacher-forced target features, so any real text
works as training input; what matters is volume and variety (EAGLE-1 trained on fixed ShareGPT
text, not on the target's own samples). This script walks the standard library, the virtual
environment's packages and the system's shared docs/sources, and keeps text that looks like code
or prose (printable, short lines, no minified bundles), up to a character quota per kind.

Machine-dependent by design (it reads whatever is installed); deterministic given the same files
and ``--seed``. Held-out text of the benchmark prompt sets is excluded: ``pydoc_data`` (the
``heldout`` topics), the :data:`specot_lab.corpus.DOCSTRING_MODULES` sources (the ``docstrings``
set), ``LICENSE`` files (the ``license`` set), ``this.py`` (``zen``) and this repository.

    python benchmarks/training/build_eagle_corpus.py --out runs/eagle_corpus.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import sysconfig
from pathlib import Path

from specot_lab.corpus import DOCSTRING_MODULES

KINDS = {  # extension -> kind
    ".py": "python", ".js": "javascript", ".mjs": "javascript", ".ts": "javascript",
    ".c": "c", ".h": "c", ".cc": "c", ".cpp": "c", ".hpp": "c", ".rs": "rust", ".sql": "sql",
    ".sh": "shell", ".bash": "shell", ".java": "java", ".go": "go",
    ".md": "markdown", ".rst": "rst", ".txt": "text",
}
# characters per kind (≈ 3.3 characters per SmolLM2 token on this mix)
QUOTAS = {"python": 3_000_000, "javascript": 900_000, "c": 800_000, "rust": 500_000, "sql": 300_000,
          "shell": 200_000, "java": 150_000, "go": 50_000, "markdown": 1_500_000, "rst": 700_000,
          "text": 500_000}
STDLIB = sysconfig.get_paths()["stdlib"]
ROOTS = (STDLIB, sysconfig.get_paths()["purelib"], "/usr/lib/node_modules",
         "/usr/share/doc", "/usr/share/postgresql", "/usr/include", "/root/.rustup/toolchains")


def _excluded(path: str, repo: str) -> bool:
    low = path.lower()
    if path.startswith(repo) or "pydoc_data" in path or "license" in low or low.endswith("/this.py"):
        return True
    if path.startswith(STDLIB):
        rel = os.path.relpath(path, STDLIB).removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        return any(rel == m or rel.startswith(m + ".") for m in DOCSTRING_MODULES)
    return False


def _good(text: str) -> bool:
    lines = text.splitlines()
    if len(lines) < 4:
        return False
    printable = sum(c.isprintable() or c in "\n\t" for c in text) / len(text)
    ascii_frac = sum(ord(c) < 128 for c in text) / len(text)
    longest = max(map(len, lines))
    alnum = sum(c.isalpha() for c in text) / len(text)
    return printable > 0.98 and ascii_frac > 0.95 and longest <= 200 and alnum > 0.35


def _excerpts(text: str, rng: random.Random, size: int, per_file: int) -> list[str]:
    lines = text.splitlines(keepends=True)
    chunks, cur, n = [], [], 0
    for line in lines:
        cur.append(line)
        n += len(line)
        if n >= size:
            chunks.append("".join(cur))
            cur, n = [], 0
    if n >= size // 3:
        chunks.append("".join(cur))
    rng.shuffle(chunks)
    return [c for c in chunks if _good(c)][:per_file]


def build(out: Path, seed: int, size: int, per_file: int, scale: float) -> dict[str, int]:
    repo = str(Path(__file__).resolve().parents[1])
    files: dict[str, list[str]] = {k: [] for k in QUOTAS}
    for root in ROOTS:
        for dirpath, dirnames, names in os.walk(root):
            dirnames.sort()
            for name in sorted(names):
                kind = KINDS.get(os.path.splitext(name)[1])
                path = os.path.join(dirpath, name)
                if kind is not None and not _excluded(path, repo):
                    files[kind].append(path)
    rng = random.Random(seed)
    seen: set[str] = set()
    got = {k: 0 for k in QUOTAS}
    with open(out, "w", encoding="utf-8") as f:
        for kind, paths in files.items():
            rng.shuffle(paths)
            for path in paths:
                if got[kind] >= QUOTAS[kind] * scale:
                    break
                try:
                    with open(path, encoding="utf-8") as fh:
                        text = fh.read(400_000)
                except (OSError, UnicodeDecodeError):
                    continue
                for ex in _excerpts(text, rng, size, per_file):
                    h = hashlib.sha1(ex.encode()).hexdigest()
                    if h in seen:
                        continue
                    seen.add(h)
                    f.write(json.dumps({"kind": kind, "text": ex}) + "\n")
                    got[kind] += len(ex)
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--excerpt-chars", type=int, default=1200)
    ap.add_argument("--per-file", type=int, default=3, help="excerpts kept per file at most")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies every quota")
    args = ap.parse_args(argv)
    got = build(Path(args.out), args.seed, args.excerpt_chars, args.per_file, args.scale)
    print(json.dumps(got), f"total {sum(got.values())} characters", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
