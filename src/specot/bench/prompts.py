"""Prompt sets for benchmarks, built from real text installed with Python, or read from JSONL.

``pydoc``: CPython's ``pydoc_data.topics`` — the English prose of the interpreter's help topics
(language reference sections: ``assert``, ``class``, ``for``, ``with``, ...). Each prompt asks an
instruct model to explain, summarize or give an example for the opening of one topic (its first
``excerpt_chars`` characters, cut at a word boundary). Topics are taken in sorted order with a
fixed stride, so a set is the same on every machine with the same Python version.

``--prompts FILE.jsonl``: one JSON object per line with a ``"prompt"`` field (string).
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["pydoc_prompts", "load_prompts", "TEMPLATES"]

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


def load_prompts(spec: str, n: int = 10) -> list[str]:
    """Prompts from ``"pydoc"`` (or ``"pydoc:OFFSET"``) or from a JSONL file with a ``prompt`` field.

    Raises:
        FileNotFoundError: a missing file.
        ValueError: a line without a string ``prompt`` field, or an empty file.
    """
    if spec == "pydoc" or spec.startswith("pydoc:"):
        offset = int(spec.split(":", 1)[1]) if ":" in spec else 0
        return pydoc_prompts(n, offset=offset)
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
