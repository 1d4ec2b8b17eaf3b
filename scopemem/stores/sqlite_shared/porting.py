"""Moving records in and out of the shared-file SQLite store (``stores.porting``: what an
export and an import promise; ``import_threads``: the postings' ``continues`` flags).

``export_page`` reads rows with the pending use counts applied, so an export shows the
counts as of now. ``import_records`` writes each scope's records in one ``BEGIN IMMEDIATE``
transaction behind the shard's writers, as a write.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from scopemem.core.records import Record
from scopemem.core.words import Analyzer
from scopemem.stores.base import Clock, check_scope_key
from scopemem.stores.porting import group_import, import_by_scope
from scopemem.stores.shared import changes
from scopemem.stores.shared.changes import run_sync
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses
from scopemem.stores.sqlite_shared.writes import ScopeLimit, SqliteTx, transaction

__all__ = ["Porting", "export_page", "import_scope", "scope_keys"]

def scope_keys(conn: Any) -> list[str]:
    return [key for (key,) in conn.execute(SQL.export_scopes)]


def export_page(conn: Any, uses: PendingUses, shard: int, scope_key: str, after: int,
                limit: int) -> list[Record]:
    _lead, rows = uses.rows(conn, shard, scope_key, SQL.export_page,
                            {"scope": scope_key, "after": after, "limit": limit})
    return [sqlite_sql.record(row) for row in rows]


def import_scope(conn: Any, uses: PendingUses, shard: int, analyzer: Analyzer, scope_key: str,
                 batch: list[tuple[int, Record]], now: int,
                 reserve: Callable[[], None] | None = None) -> int:
    """``changes.import_scope`` in one transaction; ``reserve`` counts a new scope against
    ``max_scopes``."""
    with transaction(conn, uses, shard, scope_key):
        tx = SqliteTx(conn, scope_key, reserve)
        return run_sync(changes.import_scope(tx, analyzer, batch, now))


class Porting:
    """Export and import of ``SharedSqliteStore``."""

    def __init__(self, shards: Shards, pools: ShardPools, uses: PendingUses,
                 scopes: ScopeLimit, clock: Clock, analyzer: Analyzer) -> None:
        self._shards = shards
        self._pools = pools
        self._uses = uses
        self._scopes = scopes
        self._clock = clock
        self._analyzer = analyzer

    async def export_scopes(self) -> list[str]:
        keys: list[str] = []
        for shard in range(self._shards.count):
            keys.extend(await self._pools.read(shard, scope_keys) or [])
        return sorted(keys)

    async def export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        check_scope_key(scope_key)
        if limit <= 0:
            return []
        shard = self._shards.of(scope_key)
        found: list[Record] = await self._pools.read(shard, export_page, self._uses, shard,
                                                     scope_key, after, limit) or []
        return found

    async def import_records(self, records: Sequence[Record]) -> int:
        now = self._clock()

        async def one_scope(scope_key: str, batch: list[tuple[int, Record]]) -> int:
            shard = self._shards.of(scope_key)
            return await self._pools.write(shard, import_scope, self._uses, shard,
                                           self._analyzer, scope_key, batch, now,
                                           self._scopes.reserve, create=True) or 0

        return await import_by_scope(group_import(records, now), one_scope)
