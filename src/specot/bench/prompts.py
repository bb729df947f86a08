"""Prompt sets for benchmarks, built from real text installed with Python, or read from JSONL.

Every set is deterministic (the same on every machine with the same Python version). Sources:

``pydoc`` (``pydoc:OFFSET``): CPython's ``pydoc_data.topics`` — the English prose of the
interpreter's help topics (language reference sections: ``assert``, ``class``, ``for``, ``with``,
...). Each prompt asks an instruct model to explain, summarize or give an example for the opening
of one topic (its first ``excerpt_chars`` characters, cut at a word boundary). Topics are taken in
sorted order with a fixed stride.

``heldout``: the same templates over the pydoc topics that the distilled draft (issue 6,
:mod:`specot.distill.data`) never sees in training — sorted keys with more than 200 characters,
index ``% 8 == 5`` (10 topics) — at several excerpt offsets. Use it to benchmark the distilled
draft without train/test leakage.

``docstrings``: docstrings (``inspect.getdoc``) of public functions and classes of standard-library
modules that are NOT in the distilled draft's training modules (:data:`DOCSTRING_MODULES`: email,
asyncio, tarfile, configparser, ...), wrapped in three instructions.

``license``: paragraphs of CPython's own ``LICENSE.txt`` (``sysconfig`` stdlib directory), wrapped
in "explain / summarize" instructions. ``zen``: the Zen of Python (the ``this`` module, decoded
from its ROT13 source without printing), a few aphorisms per prompt.

``mixed`` (the benchmarks' default): round-robin over ``heldout``, ``docstrings``, ``license`` and
``zen`` (in that order), so a 10-prompt set has 3 held-out pydoc, 3 docstring, 2 licence and 2
zen prompts.

``--prompts FILE.jsonl``: one JSON object per line with a ``"prompt"`` field (string).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["pydoc_prompts", "heldout_prompts", "docstring_prompts", "license_prompts", "zen_prompts",
           "mixed_prompts", "load_prompts", "describe_prompt_set", "PROMPT_SETS", "TEMPLATES", "DOCSTRING_MODULES"]

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
    from pydoc_data.topics import topics

    keys = sorted(k for k, v in topics.items() if len(v) > 200)
    if n < 1 or n > len(keys):
        raise ValueError(f"n must be in [1, {len(keys)}], got {n}")
    stride = max(len(keys) // n, 1)
    out = []
    for i in range(n):
        key = keys[(offset + i * stride) % len(keys)]
        out.append(TEMPLATES[i % len(TEMPLATES)].format(excerpt=_excerpt(topics[key], excerpt_chars)))
    return out


HELDOUT_MOD, HELDOUT_REM = 8, 5  # must match specot.distill.data (tested)

#: Standard-library modules whose docstrings make the ``docstrings`` set (none of them is among the
#: distilled draft's training modules, ``specot.distill.data.DOC_MODULES``).
DOCSTRING_MODULES = (
    "email.message", "asyncio", "tarfile", "configparser", "shlex", "smtplib", "ipaddress", "codecs",
    "weakref", "types", "numbers", "cmath", "zlib", "mimetypes", "graphlib", "sched", "selectors",
    "locale", "gettext", "array", "http.client", "xml.dom.minidom", "wave", "colorsys", "ftplib",
)

DOC_TEMPLATES = (
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
    """``n`` prompts over the pydoc topics held out from the distilled draft's training data:
    topic openings first, then excerpts further into each topic (templates cycle)."""
    from pydoc_data.topics import topics

    keys = sorted(k for k, v in topics.items() if len(v) > 200)
    held = [" ".join(topics[k].split()) for i, k in enumerate(keys) if i % HELDOUT_MOD == HELDOUT_REM]
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
    from ..distill.data import module_docstrings

    docs = module_docstrings(DOCSTRING_MODULES, min_chars=150)
    _check_n(n, len(docs), "docstrings")
    stride = max(len(docs) // n, 1)
    return [DOC_TEMPLATES[i % len(DOC_TEMPLATES)].format(name=docs[i * stride][0], excerpt=_excerpt(docs[i * stride][1], excerpt_chars))
            for i in range(n)]


def license_prompts(n: int = 10, *, excerpt_chars: int = 500) -> list[str]:
    """``n`` prompts over paragraphs (>= 200 characters) of CPython's ``LICENSE.txt``.

    Raises:
        FileNotFoundError: this Python installation ships no ``LICENSE.txt``.
    """
    import sysconfig

    path = Path(sysconfig.get_paths()["stdlib"]) / "LICENSE.txt"
    if not path.exists():
        raise FileNotFoundError(f"no LICENSE.txt in {path.parent}; use another prompt set")
    paras = [" ".join(b.split()) for b in path.read_text(encoding="utf-8", errors="replace").split("\n\n")]
    paras = [b for b in paras if len(b) >= 200]
    _check_n(n, len(paras), "license")
    stride = max(len(paras) // n, 1)
    return [TEXT_TEMPLATES[i % 2].format(excerpt=_excerpt(paras[i * stride], excerpt_chars)) for i in range(n)]


def _zen_lines() -> list[str]:
    import codecs
    import contextlib
    import io

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
    counts = {k: 0 for k in _MIX_ORDER}
    for i in range(n):
        counts[_MIX_ORDER[i % len(_MIX_ORDER)]] += 1
    pools = {k: (_SOURCES[k](c) if c else []) for k, c in counts.items()}
    out, idx = [], {k: 0 for k in _MIX_ORDER}
    for i in range(n):
        k = _MIX_ORDER[i % len(_MIX_ORDER)]
        out.append(pools[k][idx[k]])
        idx[k] += 1
    return out


_SOURCES = {"heldout": heldout_prompts, "docstrings": docstring_prompts, "license": license_prompts, "zen": zen_prompts}

#: Named prompt sets accepted by :func:`load_prompts` (besides ``pydoc:OFFSET`` and JSONL files).
PROMPT_SETS = ("mixed", "pydoc", "heldout", "docstrings", "license", "zen")

_DESCRIPTIONS = {
    "pydoc": "CPython pydoc_data.topics help topics (explain/summarize/example templates)",
    "heldout": "pydoc_data.topics topics held out from the distilled draft's training data (index % 8 == 5)",
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
    return f"JSONL file {spec} ('prompt' field)"


def load_prompts(spec: str, n: int = 10) -> list[str]:
    """Prompts from a named set (:data:`PROMPT_SETS`; ``"pydoc:OFFSET"`` shifts the pydoc topics) or
    from a JSONL file with a ``prompt`` field (the first ``n`` lines).

    Raises:
        FileNotFoundError: a missing file.
        ValueError: a line without a string ``prompt`` field, or an empty file.
    """
    if spec == "pydoc" or spec.startswith("pydoc:"):
        offset = int(spec.split(":", 1)[1]) if ":" in spec else 0
        return pydoc_prompts(n, offset=offset)
    if spec == "mixed":
        return mixed_prompts(n)
    if spec in _SOURCES:
        return _SOURCES[spec](n)
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(f"prompt file {spec!r} does not exist")
    prompts = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        obj = json.loads(line)
        if not isinstance(obj, dict) or not isinstance(obj.get("prompt"), str):
            raise ValueError(f"{spec}:{i}: each line must be a JSON object with a string 'prompt' field")
        prompts.append(obj["prompt"])
    if not prompts:
        raise ValueError(f"{spec} holds no prompts")
    return prompts[:n]
