"""The embedded durable store on SQLite (``memory.store = "sqlite"``, the default): its
registration. The store is ``scopemem.stores.sqlite_shared.SharedSqliteStore``, every scope
in a few shared files under ``path``; ``docs/sqlite-store.md`` is its guide and
``docs/storage.md`` its design.

``layout = "file"`` names the retired layout (a SQLite file per scope): it is warned about,
and a directory of that layout is migrated into the shared layout when the store opens it
(``sqlite_shared.migrate``), as it is without the setting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scopemem.plugins.lazy import exports
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.stores.base import StoreSettings
    from scopemem.stores.sqlite_shared.options import DEFAULT_PATH, SYNCHRONOUS_LEVELS
    from scopemem.stores.sqlite_shared.store import SharedSqliteStore

__all__ = ["DEFAULT_PATH", "SYNCHRONOUS_LEVELS", "SharedSqliteStore", "from_settings"]

# Imported on first use: loading the plugin list must not load the store (nor apsw).
__getattr__ = exports(__name__, {
    "DEFAULT_PATH": "scopemem.stores.sqlite_shared.options",
    "SYNCHRONOUS_LEVELS": "scopemem.stores.sqlite_shared.options",
    "SharedSqliteStore": "scopemem.stores.sqlite_shared.store",
})


def from_settings(settings: StoreSettings) -> SharedSqliteStore:
    """The store ``[memory.stores.sqlite]`` describes: ``SharedSqliteStore``. With
    ``layout = "file"`` (the retired layout) it logs a warning, once, and opens the shared
    layout all the same."""
    from scopemem.stores.sqlite_shared.options import LAYOUTS, warn_retired
    from scopemem.stores.sqlite_shared.store import SharedSqliteStore

    named = settings.named("sqlite")
    if named.choice_option("layout", "shared", LAYOUTS) == "file":
        key = named.option_key("layout")
        warn_retired(key, f'{key} = "file": the file layout (a SQLite file per scope) is'
                     " retired; the shared layout is used, and a data directory of the file"
                     " layout is migrated into it when opened (docs/sqlite-store.md,"
                     ' "Migration from the file layout"). Remove the setting')
    return SharedSqliteStore.from_settings(settings)


@hookimpl
def scopemem_register_stores(register) -> None:  # type: ignore[no-untyped-def]
    register("sqlite", from_settings)
