"""Moving records in and out of the PostgreSQL store (``stores.porting``: what an export and
an import promise; ``import_threads``: the postings' ``continues`` flags).

``export_page`` saves the scope's use counts not saved yet first, so an export shows the
counts as of now. ``import_records`` writes each scope's records in one transaction, the
scope's row taken ``FOR UPDATE`` as every write takes it.
"""

from __future__ import annotations

from collections.abc import Sequence

from scopemem.core.records import Record
from scopemem.core.words import Analyzer
from scopemem.stores.base import Clock
from scopemem.stores.porting import group_import, import_by_scope
from scopemem.stores.postgres.options import PostgresOptions
from scopemem.stores.postgres.pool import Connect
from scopemem.stores.postgres.statements import Statements, record_of
from scopemem.stores.postgres.usage import DeferredUsage
from scopemem.stores.postgres.writes import PgTx
from scopemem.stores.shared import changes

__all__ = ["Porting"]


class Porting:
    """Export and import over ``connect``, the uses pending in ``usage`` saved first."""

    def __init__(self, sql: Statements, analyzer: Analyzer, usage: DeferredUsage,
                 connect: Connect, clock: Clock, options: PostgresOptions) -> None:
        self.sql = sql
        self.analyzer = analyzer
        self._usage = usage
        self._connection = connect
        self._clock = clock
        self._options = options

    async def export_scopes(self) -> list[str]:
        async with self._connection() as conn:
            cursor = await conn.execute(self.sql.export_scopes)
            return [key for (key,) in await cursor.fetchall()]

    async def export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        if limit <= 0:
            return []
        await self._usage.save(scope_key)
        async with self._connection() as conn:
            cursor = await conn.execute(self.sql.export_page,
                                        {"scope": scope_key, "after": after, "limit": limit})
            return [record_of(row) for row in await cursor.fetchall()]

    async def import_records(self, records: Sequence[Record]) -> int:
        now = self._clock()

        async def one_scope(scope_key: str, batch: list[tuple[int, Record]]) -> int:
            async with self._connection() as conn, conn.transaction():
                tx = PgTx(conn, self.sql, scope_key, self._options)
                return await changes.import_scope(tx, self.analyzer, batch, now)

        return await import_by_scope(group_import(records, now), one_scope)
