"""The PostgreSQL store (``memory.store = "postgres"``): every scope in one schema of one
PostgreSQL database, shared by any number of processes.

Modules, one job each:

============== ==============================================================================
``options``    the ``[memory.stores.postgres]`` table
``migrations`` the versioned schema, applied under an advisory lock
``dialect``    PostgreSQL's spelling of the statements both SQL stores run (``shared.sql``)
``statements`` the shared statements in that spelling, and those only this store runs
``reads``      a retrieval's statements in order
``store``      the ``MemoryStore`` methods and the reads, delegating to the parts below
``pool``       the connection pool, opened on first use with the schema migrated
``writes``     every change under a scope's row lock, the day counters, tokens re-derived
``usage``      deferred use-count bumps
``porting``    export and import (every field and status kept)
``browse``     the hub's pages over scopes and records, histories and the reach log
``vectors``    the semantic lane's vectors, kept only for active records
============== ==============================================================================

psycopg is imported only when a store first connects, so listing plugins or running another
store never needs it (from a checkout: ``pip install -e '.[postgres]'``). What a record is
indexed by and ranking's input from its postings (``stores.shared.tokens``), and the copies of
large scopes' postings (``stores.shared.cache``), are shared with the SQLite store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from scopemem.plugins.lazy import exports
from scopemem.plugins.markers import hookimpl
from scopemem.stores.registration import lazy_factory

if TYPE_CHECKING:
    from scopemem.stores.postgres.store import PostgresStore

__all__ = ["PostgresStore", "from_settings"]

# Imported on first use: loading the plugin list must not load the store.
__getattr__ = exports(__name__, {"PostgresStore": "scopemem.stores.postgres.store"})
from_settings = lazy_factory("scopemem.stores.postgres.store", "PostgresStore")


@hookimpl
def scopemem_register_stores(register) -> None:  # type: ignore[no-untyped-def]
    register("postgres", from_settings)
