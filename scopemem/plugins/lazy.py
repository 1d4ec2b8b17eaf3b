"""Names a package re-exports, imported on first use (PEP 562).

A plugin module is imported whenever the plugin list is loaded (every command, every hook),
so what it imports at the top is paid by commands that never use it. A package that
re-exports its heavy parts (a store on apsw, numpy or psycopg) hands its names to
``exports`` and imports them when someone asks for one::

    __getattr__ = exports(__name__, {"SharedSqliteStore": "scopemem.stores.sqlite_shared.store"})
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each of ``names`` (name → the module that
    defines it) imported on first access and kept in the package's namespace; any other name
    is an ``AttributeError``, so ``from package import submodule`` still finds submodules."""

    def __getattr__(name: str) -> Any:
        source = names.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
