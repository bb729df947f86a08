"""Names a lab command module binds on first use, so that registering its command (``specot
--help``, a usage error) imports neither torch nor the benchmarks.

A module lists the names its handlers use and where they live, sets ``__getattr__ =
names.getattr`` (PEP 562: ``module.name`` imports it on first access, so tests can stand in for
it), and calls :meth:`LazyNames.bind` at the start of each handler: every name not bound yet is
imported into the module's globals; a name already bound (a stand-in) is kept.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Mapping

__all__ = ["LazyNames"]


class LazyNames:
    """The names of module ``module`` imported on first use.

    Args:
        module: the ``__name__`` of the module that uses them.
        table: name → the module it comes from; a name equal to that module's last component is
            the module itself (``"torch": "torch"``, ``"suite": "specot_lab.bench.suite"``).
    """

    def __init__(self, module: str, table: Mapping[str, str]) -> None:
        self.module, self.table = module, dict(table)

    def _load(self, name: str) -> Any:
        source = importlib.import_module(self.table[name])
        return source if self.table[name].rsplit(".", 1)[-1] == name else getattr(source, name)

    def getattr(self, name: str) -> Any:
        """The module's ``__getattr__``: a listed name, imported and bound.

        Raises:
            AttributeError: a name that is not listed.
        """
        if name not in self.table:
            raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
        value = sys.modules[self.module].__dict__.setdefault(name, self._load(name))
        return value

    def bind(self) -> None:
        """Import every listed name that the module has not bound yet into its globals."""
        scope = sys.modules[self.module].__dict__
        for name in self.table:
            if name not in scope:
                scope[name] = self._load(name)
