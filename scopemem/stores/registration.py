"""The entry points of the built-in stores: each registers a factory that imports its store's
module on first use, so loading the plugin list (every command, every hook) pays for none of
them. ``null``, ``memory`` and ``worker`` are plugins here; ``sqlite`` and ``postgres`` are
packages whose ``__init__`` registers the same way."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.stores.base import MemoryStore, StoreSettings

    Factory = Callable[[StoreSettings], MemoryStore]


def lazy_factory(module: str, name: str) -> Factory:
    """``module.name.from_settings``, with ``module`` imported on the first call."""

    def from_settings(settings: StoreSettings) -> MemoryStore:
        store: MemoryStore = getattr(importlib.import_module(module), name).from_settings(
            settings)
        return store

    return from_settings


class StorePlugin:
    """One entry point's plugin: registers ``factory`` as the store ``name``."""

    def __init__(self, name: str, factory: Factory) -> None:
        self.name = name
        self.factory = factory

    @hookimpl
    def scopemem_register_stores(self, register: Callable[[str, Factory], None]) -> None:
        register(self.name, self.factory)


null = StorePlugin("null", lazy_factory("scopemem.stores.null", "NullStore"))
memory = StorePlugin("memory", lazy_factory("scopemem.stores.memory", "InMemoryStore"))
worker = StorePlugin("worker", lazy_factory("scopemem.stores.worker", "WorkerStore"))
