"""Keyword arguments and attributes renamed in this release: the old name keeps working, with a
:class:`DeprecationWarning`, until the next release removes it."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["renamed_keyword", "renamed_attribute"]


def renamed_keyword(new_value: Any, old_value: Any, *, old: str, new: str, where: str) -> Any:
    """The value of keyword ``new``, taken from the deprecated keyword ``old`` where only that was given.

    Args:
        new_value: the value passed as ``new`` (``None``: not given).
        old_value: the value passed as ``old`` (``None``: not given).
        old, new: the two keyword names; ``where``: the callable's name (for the messages).

    Returns:
        ``new_value``, else ``old_value``.

    Raises:
        TypeError: both keywords given.

    Warns:
        DeprecationWarning: ``old`` given.
    """
    if old_value is None:
        return new_value
    if new_value is not None:
        raise TypeError(f"{where}() got both {new}= and its deprecated name {old}=; pass {new}= only")
    warnings.warn(f"{where}({old}=...) is deprecated and will be removed in the next release; use {new}=",
                  DeprecationWarning, stacklevel=3)
    return old_value


def renamed_attribute(new: str, *, old: str, owner: str, why: str = "") -> property:
    """A read-only property ``old`` that returns attribute ``new`` with a :class:`DeprecationWarning`
    (``owner``: the class's name for the message; ``why``: what the old name got wrong, if anything).

    Warns:
        DeprecationWarning: on every read.
    """
    reason = f" ({why})" if why else ""

    def get(self: Any) -> Any:
        warnings.warn(f"{owner}.{old} is deprecated{reason} and will be removed in the next release; read "
                      f"{owner}.{new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(get, doc=f"Deprecated name of :attr:`{new}`{reason}.")
