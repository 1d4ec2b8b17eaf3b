"""The embedded durable store on SQLite (``memory.store = "sqlite"``, the default): its
registration. The store is ``scopemem.stores.sqlite_shared.SharedSqliteStore``, every scope
in a few shared files under ``path``; ``docs/sqlite-store.md`` is its guide and
``docs/storage.md`` its design. The retired file layout's directories are migrated when
opened (``sqlite_shared.migrate``).
"""

from __future__ import annotations

from scopemem.plugins.markers import hookimpl
from scopemem.stores.registration import lazy_factory

__all__ = ["from_settings"]

# Imported on first use: loading the plugin list must not load the store (nor apsw).
from_settings = lazy_factory("scopemem.stores.sqlite_shared.store", "SharedSqliteStore")


@hookimpl
def scopemem_register_stores(register) -> None:  # type: ignore[no-untyped-def]
    register("sqlite", from_settings)
