"""The entry points of the stores that live in one module each: ``null``, ``memory`` and
``worker`` name the plugins here, which register each store's factory and import the store's
module when a configuration first builds one. Loading the plugin list (every command, every
hook) so pays for none of them; ``sqlite`` and ``postgres`` are packages that do the same in
their ``__init__``."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.stores.base import MemoryStore, StoreSettings

    Factory = Callable[[StoreSettings], MemoryStore]


def null_store(settings: StoreSettings) -> MemoryStore:
    from scopemem.stores.null import NullStore

    return NullStore.from_settings(settings)


def memory_store(settings: StoreSettings) -> MemoryStore:
    from scopemem.stores.memory import InMemoryStore

    return InMemoryStore.from_settings(settings)


def worker_store(settings: StoreSettings) -> MemoryStore:
    from scopemem.stores.worker import WorkerStore

    return WorkerStore.from_settings(settings)


class StorePlugin:
    """One entry point's plugin: registers ``factory`` as the store ``name``."""

    def __init__(self, name: str, factory: Factory) -> None:
        self.name = name
        self.factory = factory

    def __repr__(self) -> str:
        return f"StorePlugin({self.name!r})"

    @hookimpl
    def scopemem_register_stores(self, register: Callable[[str, Factory], None]) -> None:
        register(self.name, self.factory)


null = StorePlugin("null", null_store)
memory = StorePlugin("memory", memory_store)
worker = StorePlugin("worker", worker_store)
