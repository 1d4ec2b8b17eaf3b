"""The embedded durable store on SQLite, through apsw: every scope in a few shared files
(``scopemem.stores.sqlite_shared``); this package is the deprecated other layout, one
database file per scope key, and the ``from_settings`` that chooses between them.

What it decides is decided by ``scopemem.core.engine``, exactly as in the in-process store;
this package only finds the rows the engine asks for and persists what it answers.
``docs/storage.md`` explains the design for newcomers; each part here has
one job:

============  ==============================================================================
``store``     ``SqliteStore``: configuration and the ``MemoryStore`` methods
``layouts``   which layout a data directory holds
``files``     which file holds a scope; opening it (identity, schema, reindexing)
``base``      thread pools, writer locks, the cache of open files, transactions
``handles``   one open scope file: connection, lock, pending use counts, view
``views``     answering retrievals from a scope's rows held in memory, kept current
``view``      ``ScopeView``: those rows and their term index
``walheader`` seeing that nobody committed to a file, from its WAL-index header
``ranker``    heavy rankings in a process of their own
``reads``     retrieval, usage marks and listings through SQL
``writes``    write batches, forget, sweep, retention purge
``usage``     saving use counts in the background
``counts``    the per-scope day counters
``porting``   export and import (every field and status kept)
``sql``       the SQL the parts share; rows to records and back
``schema``    the tables, migrations and bookkeeping of a scope file
============  ==============================================================================

Durability: WAL journal, ``synchronous`` FULL by default. A write batch, a forget and a sweep
are each one ``BEGIN IMMEDIATE`` transaction: all of it commits or none of it does. Usage
bumps are saved within ``usage_flush_ms`` of their retrieval; a process killed outright
loses at most those use counts, never a record.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from scopemem.plugins.lazy import exports
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.stores.base import MemoryStore, StoreSettings
    from scopemem.stores.sqlite.files import default_max_open, scope_file_name
    from scopemem.stores.sqlite.sql import fts_tokens
    from scopemem.stores.sqlite.store import DEFAULT_PATH, SYNCHRONOUS_LEVELS, SqliteStore

__all__ = ["DEFAULT_PATH", "SYNCHRONOUS_LEVELS", "SqliteStore", "default_max_open",
           "from_settings", "fts_tokens", "scope_file_name"]

# Imported on first use: loading the plugin list must not load the store (nor apsw).
__getattr__ = exports(__name__, {
    "DEFAULT_PATH": "scopemem.stores.sqlite.store",
    "SYNCHRONOUS_LEVELS": "scopemem.stores.sqlite.store",
    "SqliteStore": "scopemem.stores.sqlite.store",
    "default_max_open": "scopemem.stores.sqlite.files",
    "fts_tokens": "scopemem.stores.sqlite.sql",
    "scope_file_name": "scopemem.stores.sqlite.files",
})


def from_settings(settings: StoreSettings) -> MemoryStore:
    """The store ``[memory.stores.sqlite]`` describes: ``SharedSqliteStore`` (every scope in
    a few shared files, the default; a directory of the file layout is migrated into it when
    opened, ``sqlite_shared.migrate``), or ``SqliteStore`` (a file per scope) with
    ``layout = "file"``, deprecated: it logs a warning, once."""
    from scopemem.stores.sqlite.layouts import LAYOUTS
    from scopemem.stores.sqlite.store import SqliteStore

    named = settings.named("sqlite")
    if named.choice_option("layout", "shared", LAYOUTS) == "shared":
        from scopemem.stores.sqlite_shared import SharedSqliteStore

        return SharedSqliteStore.from_settings(settings)
    _warn_file_layout(named.option_key("layout"))
    return SqliteStore.from_settings(settings)


_warned: list[bool] = []


def _warn_file_layout(key: str) -> None:
    if not _warned:
        _warned.append(True)
        logging.getLogger("scopemem.stores.sqlite").warning(
            '%s = "file" is deprecated: the file layout (a SQLite file per scope) will be'
            " removed in the next release. Remove the setting to use the shared layout;"
            " the data directory is migrated into it when next opened (docs/sqlite-store.md,"
            ' "Migration from the file layout")', key)


@hookimpl
def scopemem_register_stores(register) -> None:  # type: ignore[no-untyped-def]
    register("sqlite", from_settings)
