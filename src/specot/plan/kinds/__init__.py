"""The built-in drafter kinds, one module each; every module registers its kind at import
(:func:`specot.plan.draft.register_kind`). Adding a kind is adding a module here."""

from __future__ import annotations

import importlib
import pkgutil

__all__: list[str] = []

for _mod in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_mod.name}")
