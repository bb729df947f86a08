"""The lab's one corpus: real text installed with Python, the one train / held-out split, the
benchmark prompt sets (built from it, or hand-written in ``benchmarks/prompts/``) and the
distillation prompt set.

Every set is deterministic (the same on every machine with the same Python version).

**The split.** CPython's ``pydoc_data.topics`` (the language reference's help topics, sorted keys
with more than 200 characters) is split by index: ``index % HELDOUT_MOD == HELDOUT_REM`` is held
out (10 topics), the rest train. Topics overlap (a section can reappear inside a longer topic), so
every training excerpt sharing an 8-word shingle with a held-out topic is dropped. Standard-library
docstrings: :data:`DOC_MODULES` (train prompts), :data:`TEXT_MODULES` (extra raw training text) and
:data:`DOCSTRING_MODULES` (benchmark prompts) are disjoint (tested).

**Benchmark prompt sets** (:func:`load_prompts`):

``pydoc`` (``pydoc:OFFSET``): each prompt asks an instruct model to explain, summarize or give an
example for the opening of one topic (its first ``excerpt_chars`` characters, cut at a word
boundary); topics in sorted order with a fixed stride.
``heldout``: the same templates over the held-out topics only, at several excerpt offsets — the
one held-out prompt set, for benchmarks and the distilled draft's evaluation alike.
``docstrings``: docstrings of public functions and classes of :data:`DOCSTRING_MODULES`, wrapped
in three instructions. ``license``: paragraphs of CPython's ``LICENSE.txt``. ``zen``: the Zen of
Python (the ``this`` module, decoded without printing). ``mixed`` (the default): round-robin over
``heldout``, ``docstrings``, ``license`` and ``zen``.

Hand-written sets, one JSONL file each in ``benchmarks/prompts/`` of the repository
(:data:`PROMPT_DIR`), named by what they hold (:data:`FILE_SETS`): ``code``, ``code_more``,
``chat``, ``general``, ``assorted``, ``tasks``, ``held_out``, ``kinds``, ``languages``, ``repeat``.
``FILE.jsonl``: any other file, one JSON object per line with a ``"prompt"`` field.

**Distillation prompts** (:func:`train_prompts`): each train topic cut into consecutive excerpts
of 200–500 characters, each wrapped in two of :data:`TRAIN_TEMPLATES` (seeded), one direct question
per topic, and stdlib docstrings of :data:`DOC_MODULES` wrapped in :data:`DOC_TEMPLATES`.
:func:`raw_texts` gives raw text chunks for teacher forcing.
"""

from __future__ import annotations

import codecs
import contextlib
import importlib
import inspect
import io
import json
import os
import random
import sysconfig
from pathlib import Path
from typing import Iterable, Sequence

from pydoc_data.topics import topics
from specot._validation import check_count
from specot.outputs import write_text

__all__ = [
    "HELDOUT_MOD", "HELDOUT_REM", "TEMPLATES", "TRAIN_TEMPLATES", "DOC_TEMPLATES", "DOC_MODULES", "TEXT_MODULES",
    "DOCSTRING_MODULES", "PROMPT_SETS", "topic_split", "module_docstrings", "heldout_shingles", "train_prompts",
    "heldout_prompts", "raw_texts", "write_jsonl", "pydoc_prompts", "docstring_prompts", "license_prompts",
    "zen_prompts", "mixed_prompts", "load_prompts", "describe_prompt_set", "PROMPT_DIR", "FILE_SETS",
]

HELDOUT_MOD = 8
HELDOUT_REM = 5

TRAIN_TEMPLATES = (
    # the three benchmark TEMPLATES (same wording, other topics)
    "Explain the following passage from the Python documentation in simple terms:\n\n{excerpt}",
    "Summarize this part of the Python reference in three sentences:\n\n{excerpt}",
    "Write a short Python example that illustrates this documentation:\n\n{excerpt}",
    "What are the key points of this text? Answer as a bulleted list.\n\n{excerpt}",
    "Rewrite this passage for a beginner programmer:\n\n{excerpt}",
    "Write two quiz questions, with answers, about this text:\n\n{excerpt}",
    "Read this documentation and explain when a programmer would use it:\n\n{excerpt}",
    "Give a one-paragraph summary of the following:\n\n{excerpt}",
    "{excerpt}\n\nWhat does this mean? Explain it briefly.",
    "Explain this to a student who knows another programming language but not Python:\n\n{excerpt}",
    "List common mistakes related to the following documentation and how to avoid them:\n\n{excerpt}",
    "Translate this technical description into plain English:\n\n{excerpt}",
)

TOPIC_QUESTIONS = (
    "Explain the Python `{name}` topic with an example.",
    "What is `{name}` in Python and how is it used?",
)

DOC_TEMPLATES = (
    "Explain what the Python function or class `{name}` does, based on its documentation:\n\n{excerpt}",
    "Write a short example that uses `{name}`. Its documentation says:\n\n{excerpt}",
    "Summarize the documentation of `{name}` in two sentences:\n\n{excerpt}",
)

DOC_MODULES = (
    "os", "os.path", "sys", "re", "json", "math", "random", "itertools", "functools", "collections",
    "pathlib", "string", "textwrap", "datetime", "time", "heapq", "bisect", "statistics", "shutil",
    "csv", "argparse", "logging", "subprocess", "threading", "queue", "copy", "pprint", "enum",
    "dataclasses", "typing", "contextlib", "operator", "fractions", "decimal", "hashlib", "base64",
    "glob", "fnmatch", "tempfile", "zipfile", "gzip", "pickle", "struct", "urllib.parse", "html",
    "difflib", "inspect", "abc", "io", "unittest", "sqlite3", "uuid", "secrets", "socket", "calendar",
)


#: Further modules whose docstrings are raw text for teacher forcing (``raw_texts(extra=True)``):
#: more of the standard library, plus numpy and scipy when installed. Disjoint from the benchmarks'
#: :data:`DOCSTRING_MODULES` (tested), so those prompts stay held out.
TEXT_MODULES = (
    "email.utils", "email.parser", "http.server", "http.cookies", "http.cookiejar", "urllib.request",
    "urllib.robotparser", "xml.etree.ElementTree", "xml.sax", "html.parser", "multiprocessing",
    "concurrent.futures", "importlib", "importlib.resources", "pkgutil", "ast", "dis", "tokenize",
    "traceback", "warnings", "signal", "mmap", "select", "ssl", "optparse", "getopt", "cmd", "code",
    "timeit", "trace", "pstats", "cProfile", "platform", "sysconfig", "lzma", "bz2", "zipapp", "netrc",
    "plistlib", "hmac", "binascii", "quopri", "shelve", "dbm", "copyreg", "marshal", "reprlib",
    "unicodedata", "collections.abc", "filecmp", "stat", "linecache", "fileinput", "getpass",
    "logging.handlers", "logging.config", "socketserver", "xmlrpc.client", "webbrowser",
    "wsgiref.simple_server", "mailbox", "imaplib", "poplib", "doctest", "unittest.mock", "pdb",
    "tracemalloc", "gc", "atexit", "faulthandler", "contextvars", "numpy", "numpy.linalg", "numpy.random",
    "numpy.fft", "numpy.ma", "scipy.optimize", "scipy.linalg", "scipy.signal", "scipy.special", "scipy.stats",
)



def _norm(text: str) -> str:
    return " ".join(text.split())


def topic_split() -> tuple[list[str], list[str]]:
    """``(train_keys, heldout_keys)`` of ``pydoc_data.topics`` (sorted keys with > 200 characters)."""
    keys = sorted(k for k, v in topics.items() if len(v) > 200)
    held = [k for i, k in enumerate(keys) if i % HELDOUT_MOD == HELDOUT_REM]
    train = [k for i, k in enumerate(keys) if i % HELDOUT_MOD != HELDOUT_REM]
    return train, held


def _excerpts(text: str, rng: random.Random, lo: int = 200, hi: int = 500) -> list[str]:
    """Consecutive excerpts of ``lo``–``hi`` characters, cut at word boundaries."""
    words = _norm(text).split(" ")
    out, cur, size, want = [], [], 0, rng.randint(lo, hi)
    for w in words:
        cur.append(w)
        size += len(w) + 1
        if size >= want:
            out.append(" ".join(cur))
            cur, size, want = [], 0, rng.randint(lo, hi)
    if size >= lo // 2:
        out.append(" ".join(cur))
    return out


def module_docstrings(modules: Sequence[str] = DOC_MODULES, min_chars: int = 120) -> list[tuple[str, str]]:
    """``(qualified name, docstring)`` of public functions/classes of ``modules`` (sorted, deduped)."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for modname in modules:
        try:
            mod = importlib.import_module(modname)
        except Exception:  # pragma: no cover - optional stdlib modules
            continue
        for name in sorted(getattr(mod, "__all__", None) or dir(mod)):
            if name.startswith("_"):
                continue
            obj = getattr(mod, name, None)
            if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.isbuiltin(obj)):
                continue
            doc = inspect.getdoc(obj) or ""
            doc = doc.strip()
            if len(doc) < min_chars or doc in seen:
                continue
            seen.add(doc)
            out.append((f"{modname}.{name}", doc))
    return out


def _shingles(text: str, n: int = 8) -> set[str]:
    words = _norm(text).split(" ")
    return {" ".join(words[i:i + n]) for i in range(max(len(words) - n + 1, 1))}


def heldout_shingles() -> set[str]:
    """8-word shingles of the held-out topics: pydoc topics overlap (a section can appear inside
    another topic), so any training excerpt sharing one of them is dropped."""
    _, held = topic_split()
    out: set[str] = set()
    for k in held:
        out |= _shingles(topics[k])
    return out


def train_prompts(seed: int = 0, *, templates_per_excerpt: int = 2, docstrings: bool = True,
                  max_prompts: int | None = None) -> list[str]:
    """The training prompt set (see module docstring), shuffled with ``seed``. Excerpts sharing an
    8-word shingle with a held-out topic are dropped (no held-out text is ever trained on)."""
    rng = random.Random(seed)
    train_keys, _ = topic_split()
    held = heldout_shingles()
    prompts: list[str] = []
    for key in train_keys:
        for ex in _excerpts(topics[key], rng):
            if _shingles(ex) & held:
                continue
            for t in rng.sample(range(len(TRAIN_TEMPLATES)), templates_per_excerpt):
                prompts.append(TRAIN_TEMPLATES[t].format(excerpt=ex))
        prompts.append(rng.choice(TOPIC_QUESTIONS).format(name=key))
    if docstrings:
        for name, doc in module_docstrings():
            if _shingles(doc) & held:
                continue
            ex = doc[:600]
            ex = ex[: ex.rfind(" ")] if len(doc) > 600 and " " in ex else ex
            prompts.append(rng.choice(DOC_TEMPLATES).format(name=name, excerpt=ex))
    rng.shuffle(prompts)
    return prompts[:max_prompts] if max_prompts else prompts


def raw_texts(split: str = "train", chunk_chars: int = 1200, *, extra: bool = False) -> list[str]:
    """Raw text chunks (for teacher forcing): the ``split`` topics of ``pydoc_data.topics`` in
    ``chunk_chars`` pieces, plus (train only) the docstrings of :data:`DOC_MODULES` and, with
    ``extra``, of :data:`TEXT_MODULES` (train: ~0.59 M characters; with ``extra``: see docs/distillation.md)."""
    train_keys, held = topic_split()
    keys = train_keys if split == "train" else held
    out = []
    held_sh = heldout_shingles() if split == "train" else set()
    for key in keys:
        text = topics[key]
        for i in range(0, len(text), chunk_chars):
            piece = text[i:i + chunk_chars]
            if len(piece.strip()) > 100 and not (_shingles(piece) & held_sh):
                out.append(piece)
    if split == "train":
        out.extend(f"{name}\n\n{doc}" for name, doc in module_docstrings())
        if extra:
            out.extend(f"{name}\n\n{doc}" for name, doc in module_docstrings(TEXT_MODULES)
                       if not (_shingles(doc) & held_sh))
    return out



def write_jsonl(prompts: Iterable[str], path: str | os.PathLike[str]) -> None:
    """Write prompts as JSONL lines ``{"prompt": ...}`` (the format of ``specot bench --prompts``),
    atomically (:func:`specot.outputs.write_text`: a unique temporary file renamed over ``path``)."""
    write_text(path, "".join(json.dumps({"prompt": p}) + "\n" for p in prompts))


# ----------------------------------------------------------------------------------- sampling


TEMPLATES = (
    "Explain the following passage from the Python documentation in simple terms:\n\n{excerpt}",
    "Summarize this part of the Python reference in three sentences:\n\n{excerpt}",
    "Write a short Python example that illustrates this documentation:\n\n{excerpt}",
)


def _excerpt(text: str, chars: int) -> str:
    text = " ".join(text.split())
    if len(text) <= chars:
        return text
    cut = text[:chars]
    return cut[: cut.rfind(" ")] if " " in cut else cut


def pydoc_prompts(n: int = 10, *, offset: int = 0, excerpt_chars: int = 500) -> list[str]:
    """``n`` prompts over ``pydoc_data.topics`` (see module docstring); ``offset`` shifts the
    topic selection (use a different offset for held-out prompts).

    Raises:
        ValueError: ``n < 1`` or more prompts than topics.
    """
    keys = sorted(k for k, v in topics.items() if len(v) > 200)
    if n < 1 or n > len(keys):
        raise ValueError(f"n must be in [1, {len(keys)}], got {n}")
    stride = max(len(keys) // n, 1)
    out = []
    for i in range(n):
        key = keys[(offset + i * stride) % len(keys)]
        out.append(TEMPLATES[i % len(TEMPLATES)].format(excerpt=_excerpt(topics[key], excerpt_chars)))
    return out


#: Standard-library modules whose docstrings make the ``docstrings`` set (none of them is among the
#: distilled draft's training modules, ``specot_lab.corpus.DOC_MODULES``).
DOCSTRING_MODULES = (
    "email.message", "asyncio", "tarfile", "configparser", "shlex", "smtplib", "ipaddress", "codecs",
    "weakref", "types", "numbers", "cmath", "zlib", "mimetypes", "graphlib", "sched", "selectors",
    "locale", "gettext", "array", "http.client", "xml.dom.minidom", "wave", "colorsys", "ftplib",
)

BENCH_DOC_TEMPLATES = (
    "Explain what `{name}` does, based on its documentation:\n\n{excerpt}",
    "Summarize the documentation of `{name}` in two sentences:\n\n{excerpt}",
    "Write a short Python example that uses `{name}`. Its documentation says:\n\n{excerpt}",
)

TEXT_TEMPLATES = (
    "Explain the following text in simple terms:\n\n{excerpt}",
    "Summarize this text in three sentences:\n\n{excerpt}",
)


def _check_n(n: int, available: int, name: str) -> None:
    if n < 1 or n > available:
        raise ValueError(f"the {name!r} prompt set has {available} prompts; n must be in [1, {available}], got {n}")


def heldout_prompts(n: int = 10, *, excerpt_chars: int = 500) -> list[str]:
    """``n`` prompts over the held-out pydoc topics (:func:`topic_split`): topic openings first,
    then excerpts further into each topic (templates cycle). The one held-out prompt set.

    Raises:
        ValueError: ``n`` outside ``[1, available]``.
    """
    held = [_norm(topics[k]) for k in topic_split()[1]]
    pool: list[str] = []
    for rnd in range(8):
        for text in held:
            start = rnd * excerpt_chars
            if start >= len(text) - 100:
                continue
            if start:
                start = text.find(" ", start) + 1
            pool.append(TEMPLATES[len(pool) % len(TEMPLATES)].format(excerpt=_excerpt(text[start:], excerpt_chars)))
    _check_n(n, len(pool), "heldout")
    return pool[:n]


def docstring_prompts(n: int = 10, *, excerpt_chars: int = 500) -> list[str]:
    """``n`` prompts over stdlib docstrings (:data:`DOCSTRING_MODULES`), spread by a fixed stride."""
    docs = module_docstrings(DOCSTRING_MODULES, min_chars=150)
    _check_n(n, len(docs), "docstrings")
    stride = max(len(docs) // n, 1)
    return [BENCH_DOC_TEMPLATES[i % len(BENCH_DOC_TEMPLATES)].format(name=docs[i * stride][0], excerpt=_excerpt(docs[i * stride][1], excerpt_chars))
            for i in range(n)]


def license_prompts(n: int = 10, *, excerpt_chars: int = 500) -> list[str]:
    """``n`` prompts over paragraphs (>= 200 characters) of CPython's ``LICENSE.txt``.

    Raises:
        FileNotFoundError: this Python installation ships no ``LICENSE.txt``.
    """
    path = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    if not path.exists():
        raise FileNotFoundError(f"no LICENSE.txt in {path.parent}; use another prompt set")
    paras = [" ".join(b.split()) for b in path.read_text(encoding="utf-8", errors="replace").split("\n\n")]
    paras = [b for b in paras if len(b) >= 200]
    _check_n(n, len(paras), "license")
    stride = max(len(paras) // n, 1)
    return [TEXT_TEMPLATES[i % 2].format(excerpt=_excerpt(paras[i * stride], excerpt_chars)) for i in range(n)]


def _zen_lines() -> list[str]:
    with contextlib.redirect_stdout(io.StringIO()):
        import this  # noqa: F401  (prints the Zen on first import)
    text = codecs.decode(this.s, "rot13")
    return [ln for ln in text.splitlines()[2:] if ln.strip()]


def zen_prompts(n: int = 4) -> list[str]:
    """``n`` prompts over the Zen of Python (groups of ~5 aphorisms, shifted per prompt)."""
    lines = _zen_lines()
    avail = len(lines) - 4
    _check_n(n, avail, "zen")
    qs = ("Explain what these lines of the Zen of Python mean for everyday coding:\n\n{excerpt}",
          "Give a Python example for each of these principles:\n\n{excerpt}")
    stride = max(avail // n, 1)
    return [qs[i % 2].format(excerpt="\n".join(lines[i * stride:i * stride + 5])) for i in range(n)]


_MIX_ORDER = ("heldout", "docstrings", "license", "zen")


def mixed_prompts(n: int = 10) -> list[str]:
    """Round-robin over :data:`_MIX_ORDER` sources (see module docstring)."""
    check_count(n, "the number of prompts")
    m = len(_MIX_ORDER)  # the counts in closed form: a huge n is refused by a source, not counted to
    counts = {k: n // m + (1 if i < n % m else 0) for i, k in enumerate(_MIX_ORDER)}
    pools = {k: (_SOURCES[k](c) if c else []) for k, c in counts.items()}
    out, idx = [], {k: 0 for k in _MIX_ORDER}
    for i in range(n):
        k = _MIX_ORDER[i % len(_MIX_ORDER)]
        out.append(pools[k][idx[k]])
        idx[k] += 1
    return out


_SOURCES = {"heldout": heldout_prompts, "docstrings": docstring_prompts, "license": license_prompts, "zen": zen_prompts}

#: The folder of the hand-written prompt sets (in the repository, beside ``src/``).
PROMPT_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "prompts"

#: The hand-written prompt sets (``PROMPT_DIR/<name>.jsonl``) and what each holds.
FILE_SETS: dict[str, str] = {
    "code": "6 programming requests: complete, fix or write Python, JavaScript, SQL, bash and C",
    "code_more": "12 programming requests in more languages: Rust, Go, TypeScript, Java, HTML/CSS, SQL, C, a "
                 "Dockerfile, a regular expression",
    "chat": "6 short technical questions, the kind of `make demo`'s",
    "general": "12 everyday requests: a recipe, a summary, an email, a story, advice, a packing list",
    "assorted": "12 mixed requests: an explanation for a child, SQL, bash, tips, history, Rust, a haiku, a class",
    "tasks": "12 small tasks: arithmetic, translation, bash, JSON, a regular expression, YAML, a poem, an email",
    "held_out": "12 requests of every kind, written after the default plan was tuned and never used to tune it",
    "kinds": "9 kinds no other set holds: a long document to summarise, raw prose, Python and JavaScript to "
             "continue, French, arithmetic, SQL, C++, a list",
    "languages": "`make demo`'s question in German, Spanish, Chinese and Russian",
    "repeat": "20 prompts whose answers copy their context, built from stdlib functions and the dependencies' "
              "METADATA by benchmarks/build_repeat_prompts.py: edits, quoting summaries, extraction, a chat restating code",
}

#: Named prompt sets accepted by :func:`load_prompts` (besides ``pydoc:OFFSET`` and JSONL files).
PROMPT_SETS = ("mixed", "pydoc", "heldout", "docstrings", "license", "zen", *FILE_SETS)

_DESCRIPTIONS = {
    "pydoc": "CPython pydoc_data.topics help topics (explain/summarize/example templates)",
    "heldout": "pydoc_data.topics topics held out from every training set (index % 8 == 5)",
    "docstrings": "docstrings of stdlib modules outside the distilled draft's training set (inspect.getdoc)",
    "license": "paragraphs of CPython's LICENSE.txt",
    "zen": "the Zen of Python (module `this`)",
    "mixed": "round-robin: heldout pydoc topics, stdlib docstrings, CPython LICENSE.txt, Zen of Python",
}


def describe_prompt_set(spec: str) -> str:
    """One line describing the prompt set ``spec`` (for reports)."""
    name = spec.split(":", 1)[0]
    if name in _DESCRIPTIONS:
        return _DESCRIPTIONS[name]
    if spec in FILE_SETS:
        return FILE_SETS[spec]
    return f"JSONL file {spec} ('prompt' field)"


def load_prompts(spec: str, n: int = 10) -> list[str]:
    """Prompts from a named set (:data:`PROMPT_SETS`: built from installed text, or a file of
    :data:`FILE_SETS`; ``"pydoc:OFFSET"`` shifts the pydoc topics) or from a JSONL file with a
    ``prompt`` field (the first ``n`` lines).

    Raises:
        FileNotFoundError: a missing file.
        ValueError: a line without a string ``prompt`` field, an empty file, or ``n < 1``.
    """
    check_count(n, "the number of prompts")
    if spec == "pydoc" or spec.startswith("pydoc:"):
        offset = int(spec.split(":", 1)[1]) if ":" in spec else 0
        return pydoc_prompts(n, offset=offset)
    if spec == "mixed":
        return mixed_prompts(n)
    if spec in _SOURCES:
        return _SOURCES[spec](n)
    path = PROMPT_DIR / f"{spec}.jsonl" if spec in FILE_SETS else Path(spec)
    if not path.exists():
        if spec in FILE_SETS:
            raise FileNotFoundError(f"the prompt set {spec!r} is {path}, which is missing: it ships with the "
                                    f"repository, not with an installed package; give the file's path")
        raise FileNotFoundError(f"prompt file {spec!r} does not exist (named sets: {', '.join(PROMPT_SETS)})")
    prompts = []
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"prompt file {spec} is not UTF-8 text; save it as UTF-8 JSONL") from None
    except OSError as exc:
        raise ValueError(f"prompt file {spec} cannot be read ({(exc.strerror or type(exc).__name__).lower()}); name "
                         "a readable JSONL file") from None
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{spec}:{i}: not valid JSON ({getattr(exc, 'msg', exc)}); each line must be a JSON "
                             "object with a string 'prompt' field") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            raise ValueError(f"{spec}:{i}: each line must be a JSON object with a string 'prompt' field")
        prompts.append(obj["prompt"])
    if not prompts:
        raise ValueError(f"{spec} holds no prompts")
    return prompts[:n]
