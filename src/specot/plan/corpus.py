"""Text corpora for the model-free drafters' tables: CPython's ``pydoc_data.topics`` or a file."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ..drafting.ngram import NGramTable
from ..drafting.ngram import NGramCounts

__all__ = ["pydoc_texts", "check_corpus", "ngram_table", "ngram_counts"]


def pydoc_texts() -> list[str]:
    """The English prose of CPython's ``pydoc_data.topics`` (one string per help topic)."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def check_corpus(corpus: str) -> str:
    """``corpus`` if it is ``"pydoc"``, ``"none"`` or an existing text file.

    Raises:
        FileNotFoundError: a path that does not exist or is a directory.
    """
    if not isinstance(corpus, str):
        raise TypeError(f"ngram_corpus must be 'pydoc', 'none' or a file path, got {type(corpus).__name__}")
    if corpus in ("pydoc", "none"):
        return corpus
    f = Path(corpus).expanduser()
    if not f.is_file():
        what = "is a directory" if f.is_dir() else "does not exist"
        raise FileNotFoundError(f"n-gram corpus {corpus!r} {what}; name a text file, 'pydoc' or 'none'")
    return corpus


def _texts(corpus: str) -> list[str]:
    """The corpus's text: pydoc's topics, or the UTF-8 text of the file ``corpus``.

    Raises:
        ValueError: a file that is not UTF-8 text (one line naming it)."""
    if corpus == "pydoc":
        return pydoc_texts()
    try:
        return [Path(corpus).expanduser().read_text(encoding="utf-8")]
    except UnicodeDecodeError as exc:
        raise ValueError(f"n-gram corpus {corpus!r} is not UTF-8 text (byte {exc.start}); save it as UTF-8, or use "
                         "'pydoc' or 'none'") from None


@functools.lru_cache(maxsize=4)
def _cached(kind: str, corpus: str, tokenizer_key: int, n: int, tokenizer: Any) -> Any:
    cls = NGramTable if kind == "table" else NGramCounts
    return cls.from_text(_texts(corpus), tokenizer, n=n)


def ngram_table(corpus: str, tokenizer: Any, n: int) -> NGramTable | None:
    """The n-gram drafter's table over ``corpus`` (``None`` for ``"none"`` or without a tokenizer);
    the pydoc table is built once per tokenizer and order."""
    if corpus == "none" or tokenizer is None:
        return None
    if corpus == "pydoc":
        return _cached("table", corpus, id(tokenizer), n, tokenizer)
    return NGramTable.from_text(_texts(corpus), tokenizer, n=n)


def ngram_counts(corpus: str, tokenizer: Any, n: int) -> NGramCounts | None:
    """The suffix drafter's corpus counts over ``corpus`` (``None`` for ``"none"`` or without a
    tokenizer); the pydoc counts are built once per tokenizer and order."""
    if corpus == "none" or tokenizer is None:
        return None
    if corpus == "pydoc":
        return _cached("counts", corpus, id(tokenizer), n, tokenizer)
    return NGramCounts.from_text(_texts(corpus), tokenizer, n=n)
