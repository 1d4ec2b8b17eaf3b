"""The SQLite store: every scope in a few shard files under ``path`` (registered as
``memory.store = "sqlite"`` by ``scopemem.stores.sqlite``; ``docs/storage.md`` explains the
design). Modules, one job each:

============== ==============================================================================
``store``      ``SharedSqliteStore``: configuration and the ``MemoryStore`` methods
``options``    the ``[memory.stores.sqlite]`` table: options, defaults, checks
``schema``     the shard files' tables and their migrations
``shards``     opening a shard file (checked, terms re-derived when the analyzer changed)
``files``      a shard file as opened: no commit once it is gone from its path
``dialect``    SQLite's spelling of the statements both SQL stores run (``shared.sql``)
``statements`` the statements only this store runs, scope-keyed
``sql``        rows to records, transactions, apsw errors
``index``      the token index (FTS5) of the active records
``pools``      the read and write threads, one writer per shard
``reads``      a retrieval's reads through SQL
``writes``     write batches, forget, sweep, retention purge, the day counters, ``max_scopes``
``usage``      pending use counts, saved in the background
``porting``    export and import (every field and status kept)
``vectors``    the semantic lane's vectors, kept only for active records
``browse``     the hub's pages over scopes and records, histories, the reach log (a file)
``migrate``    moving a directory of the retired file layout into shard files, once
``legacy``     reading the file layout's scope files, for the migration
============== ==============================================================================
"""

from scopemem.stores.sqlite_shared.store import SharedSqliteStore

__all__ = ["SharedSqliteStore"]
