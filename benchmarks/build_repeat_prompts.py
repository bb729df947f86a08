"""Build a prompt set whose answers copy their context, from real text installed with specot.

Speculative decoding on a compute-bound CPU pays where the answer repeats text of its prompt (code
edits, answers quoting their source, structured extraction, chat restating an earlier turn): there
a draft taken from the context is accepted in long runs. This script makes such prompts from text
that exists on every machine with specot's environment, nothing written for the benchmark:

* short top-level functions (8–30 lines) of the Python standard library's source
  (``sysconfig.get_paths()["stdlib"]``; tests, ``site-packages`` and underscore modules skipped),
* the METADATA of packages specot depends on (:data:`DISTS`): its header block and prose
  paragraphs of its description. A package that is not installed is skipped (said on stderr).

Five kinds, ``--per-kind`` prompts each, interleaved (the first five lines hold one of each, so a
benchmark reading the first N prompts sees every kind):

* ``edit-rename``: rename a parameter or local variable of a function; reply with the whole function;
* ``edit-annotate``: add type hints (and a one-line docstring where there is none); the whole function;
* ``quote-summary``: summarize a description paragraph in two sentences, quoting its first verbatim;
* ``extract``: Name, Version, Summary and Requires-Python of a METADATA header block as JSON (the
  block is whole lines of the real header in their order, some lines left out to fit);
* ``chat-repeat``: a two-turn chat in one prompt string (``User:`` / ``Assistant:``), the assistant
  having shown a function; the user asks for it back with one change.

Each line is ``{"prompt", "kind", "source", "version", "quote"}``: ``source`` is the function's file
relative to the stdlib root and its name (``json/decoder.py:py_scanstring``) or ``dist:NAME``;
``version`` the Python or package version it was read from; ``quote`` the real text the prompt
carries (a function, a paragraph, a header excerpt). Deterministic for the same Python, package
versions and ``--seed``; prompts stay under :data:`MAX_CHARS` characters.

    python benchmarks/build_repeat_prompts.py --out benchmarks/prompts/repeat.jsonl
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import platform
import random
import re
import sys
import sysconfig
from pathlib import Path

DISTS = ("numpy", "scipy", "torch", "transformers", "tqdm", "matplotlib", "safetensors")
KINDS = ("edit-rename", "edit-annotate", "quote-summary", "extract", "chat-repeat")
CODE_KINDS = ("edit-rename", "edit-annotate", "chat-repeat")
MAX_CHARS = 1200
MIN_LINES, MAX_LINES = 8, 30
EXTRACT_FIELDS = ("Name", "Version", "Summary", "Requires-Python")
# short names get a descriptive new name; any other name gets a suffix
RENAMES = {"s": "text", "n": "count", "i": "index", "x": "value", "k": "key", "v": "val", "f": "fobj",
           "c": "char", "p": "path", "d": "mapping", "l": "items", "a": "first", "b": "second",
           "e": "exc", "m": "match", "t": "item", "fp": "stream", "fn": "func", "res": "result"}
PROSE_SKIP = re.compile(r"https?://|\]\(|`__|\||Licensed under|WARRANT|Copyright|^\s|^[-*+#>.!<`:=]", re.M)


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path) -> list[str]:
    """Public, non-test ``.py`` files of the standard library, relative to ``root``, sorted."""
    def skip(name: str) -> bool:
        return name.startswith(("_", "test")) or name in ("site-packages", "tests", "idle_test")

    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not skip(d)]
        rel = Path(dirpath).relative_to(root)
        out += [(rel / f).as_posix() for f in filenames if f.endswith(".py") and not skip(f)]
    return sorted(out)


def short_functions(root: Path, rel: str) -> list[tuple[ast.FunctionDef, str]]:
    """Top-level public functions of one file with MIN_LINES..MAX_LINES lines: (node, verbatim text)."""
    try:
        text = (root / rel).read_text(encoding="utf-8")
        tree = ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        n = node.end_lineno - start + 1
        src = "".join(lines[start - 1:node.end_lineno]).rstrip("\n")
        if MIN_LINES <= n <= MAX_LINES and "\t" not in src and len(src) <= MAX_CHARS - 300:
            out.append((node, src))
    return out


def rename_choice(node: ast.FunctionDef, rng: random.Random) -> tuple[str, str] | None:
    """A parameter or local variable of ``node`` and a new name that the function does not use."""
    used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    params = [a.arg for a in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
    params += [a.arg for a in (node.args.vararg, node.args.kwarg) if a is not None]
    used |= set(params)
    shared = {n for g in ast.walk(node) if isinstance(g, (ast.Global, ast.Nonlocal)) for n in g.names}
    stores = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)})
    names = sorted(set(params + stores) - shared - {"self", "cls", "_"})
    rng.shuffle(names)
    for old in names:
        new = RENAMES.get(old, f"{old}_value")
        if new not in used:
            return old, new
    return None


def has_annotations(node: ast.FunctionDef) -> bool:
    args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
    return node.returns is not None or any(a.annotation is not None for a in args)


def code_prompt(kind: str, rel: str, node: ast.FunctionDef, src: str, rng: random.Random) -> str | None:
    """The prompt of one code kind over a function's verbatim ``src``, or None if it does not fit."""
    module = rel[:-3].replace("/", ".").removesuffix(".__init__")
    fenced = f"```python\n{src}\n```"
    if kind == "edit-rename":
        choice = rename_choice(node, rng)
        if choice is None:
            return None
        prompt = (f"In this function from Python's {module} module, rename `{choice[0]}` to `{choice[1]}` "
                  f"everywhere it occurs. Change nothing else and reply with the whole function.\n\n{fenced}")
    elif kind == "edit-annotate":
        if has_annotations(node):
            return None
        what = "type hints" if ast.get_docstring(node) else "a one-line docstring and type hints"
        prompt = (f"Add {what} (parameters and return value) to this function from Python's {module} module. "
                  f"Keep the body as it is and reply with the whole function.\n\n{fenced}")
    else:
        choice = rename_choice(node, rng)
        changes = [f"rename the function to `{node.name}_v2`"]
        if any(isinstance(n, ast.Return) for n in ast.walk(node)):
            changes.append("add a one-line comment above its first return statement")
        if choice is not None:
            changes.append(f"rename `{choice[0]}` to `{choice[1]}`")
        change = changes[rng.randrange(len(changes))]
        prompt = (f"User: Show me the function {node.name} from Python's {module} module.\n\n"
                  f"Assistant: Here it is:\n\n{fenced}\n\n"
                  f"User: Repeat that code back to me exactly, but {change}.")
    return prompt if len(prompt) <= MAX_CHARS else None


def code_rows(per_kind: int, rng: random.Random) -> list[dict]:
    """``per_kind`` prompts of each code kind over distinct functions of distinct stdlib files."""
    root, version = stdlib_root(), platform.python_version()
    files = stdlib_files(root)
    rng.shuffle(files)
    rows: list[dict] = []
    need = {k: per_kind for k in CODE_KINDS}
    seen: set[str] = set()  # function names and top-level packages already used: one of each
    for rel in files:
        if not any(need.values()):
            break
        package = rel.split("/")[0] if "/" in rel else None
        funcs = [f for f in short_functions(root, rel) if f[0].name not in seen]
        if not funcs or package in seen:
            continue
        node, src = funcs[rng.randrange(len(funcs))]
        seen |= {node.name} | ({package} if package else set())
        for kind in CODE_KINDS:
            prompt = code_prompt(kind, rel, node, src, rng) if need[kind] else None
            if prompt is not None:
                need[kind] -= 1
                rows.append({"prompt": prompt, "kind": kind, "source": f"{rel}:{node.name}",
                             "version": version, "quote": src})
                break
    if any(need.values()):
        print(f"build_repeat_prompts: the standard library gave fewer functions than asked: short by {need}",
              file=sys.stderr)
    return rows


def read_metadata(name: str) -> tuple[str, str] | None:
    """(version, METADATA text) of an installed distribution, or None (said on stderr)."""
    try:
        dist = importlib.metadata.distribution(name)
        text = dist.read_text("METADATA")
    except importlib.metadata.PackageNotFoundError:
        text = None
    if not text:
        print(f"build_repeat_prompts: skipping {name}: not installed (or no METADATA)", file=sys.stderr)
        return None
    return dist.version, text


def split_metadata(text: str) -> tuple[list[str], str]:
    """The header's lines (up to the first empty line) and the description body after it."""
    lines = text.split("\n")
    end = lines.index("") if "" in lines else len(lines)
    return lines[:end], "\n".join(lines[end + 1:])


def header_excerpt(header: list[str], rng: random.Random, budget: int = 700) -> str | None:
    """Whole single-line fields of ``header`` in their order: Metadata-Version and the EXTRACT_FIELDS
    always, other fields drawn by ``rng`` while they fit ``budget`` characters; None without them."""
    single = [ln for i, ln in enumerate(header) if ln and not ln[0].isspace()
              and not (i + 1 < len(header) and header[i + 1][:1].isspace())]
    keys = {ln.split(":", 1)[0]: i for i, ln in reversed(list(enumerate(single)))}
    if any(k not in keys for k in EXTRACT_FIELDS):
        return None
    keep = {keys[k] for k in EXTRACT_FIELDS + ("Metadata-Version",) if k in keys}
    others = sorted(set(range(len(single))) - keep)
    rng.shuffle(others)
    size = sum(len(single[i]) + 1 for i in keep)
    for i in others:
        if size + len(single[i]) + 1 <= budget:
            keep.add(i)
            size += len(single[i]) + 1
    return "\n".join(single[i] for i in sorted(keep))


def prose_paragraphs(body: str) -> list[str]:
    """Paragraphs of plain prose (no links, markup, lists or code) of 150–700 characters, two sentences at least."""
    out = []
    for para in re.split(r"\n[ \t]*\n", body):
        para = para.strip("\n")
        if 150 <= len(para) <= 700 and para[:1].isupper() and not PROSE_SKIP.search(para):
            if re.search(r"[.!?]\s+[A-Z]", para) and para.rstrip()[-1:] in ".!?":
                out.append(para)
    return out


def metadata_rows(per_kind: int, rng: random.Random) -> list[dict]:
    """``per_kind`` quote-summary and extract prompts, spread over the installed :data:`DISTS`."""
    paragraphs, headers = [], []
    for name in DISTS:
        got = read_metadata(name)
        if got is None:
            continue
        version, text = got
        header, body = split_metadata(text)
        paragraphs += [(name, version, p) for p in prose_paragraphs(body)]
        excerpt = header_excerpt(header, rng)
        if excerpt is not None:
            headers.append((name, version, excerpt))
    rows = []
    for name, version, para in spread(paragraphs, per_kind, rng):
        prompt = (f"Here is a paragraph from the description of the Python package {name}:\n\n{para}\n\n"
                  "Summarize it in two sentences, quoting its first sentence verbatim.")
        rows.append({"prompt": prompt, "kind": "quote-summary", "source": f"dist:{name}", "version": version,
                     "quote": para})
    for name, version, block in spread(headers, per_kind, rng):
        prompt = (f"Here is the header of a Python package's METADATA file:\n\n{block}\n\n"
                  "Return its Name, Version, Summary and Requires-Python as a JSON object.")
        rows.append({"prompt": prompt, "kind": "extract", "source": f"dist:{name}", "version": version,
                     "quote": block})
    for kind, got in (("quote-summary", paragraphs), ("extract", headers)):
        if len(got) < per_kind:
            print(f"build_repeat_prompts: only {len(got)} {kind} sources for {per_kind} prompts", file=sys.stderr)
    return rows


def spread(items: list[tuple], n: int, rng: random.Random) -> list[tuple]:
    """``n`` items drawn by ``rng``, as many distinct packages (first field) as there are first."""
    pool = list(items)
    rng.shuffle(pool)
    chosen: list[tuple] = []
    while pool and len(chosen) < n:
        names = {c[0] for c in chosen}
        pick = next((it for it in pool if it[0] not in names), pool[0])
        pool.remove(pick)
        chosen.append(pick)
    return chosen


def build(seed: int = 0, per_kind: int = 4) -> list[dict]:
    """All prompts, interleaved kind by kind (line 5·i + k is the i-th prompt of KINDS[k])."""
    rng = random.Random(seed)
    rows = code_rows(per_kind, rng) + metadata_rows(per_kind, rng)
    by_kind = {k: [r for r in rows if r["kind"] == k] for k in KINDS}
    out = []
    for i in range(per_kind):
        out += [by_kind[k][i] for k in KINDS if i < len(by_kind[k])]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="benchmarks/prompts/repeat.jsonl", help="JSONL file to write")
    ap.add_argument("--seed", type=int, default=0, help="seed of every choice (default 0)")
    ap.add_argument("--per-kind", type=int, default=4, help="prompts per kind (default 4)")
    args = ap.parse_args(argv)
    if args.per_kind < 1:
        ap.error("--per-kind must be at least 1")
    rows = build(args.seed, args.per_kind)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    counts = {k: sum(r["kind"] == k for r in rows) for k in KINDS}
    print(f"build_repeat_prompts: wrote {len(rows)} prompts to {out} ({counts})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
