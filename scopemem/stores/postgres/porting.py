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
from scopemem.stores.porting import group_import, import_threads
from scopemem.stores.postgres.pool import Connect
from scopemem.stores.postgres.statements import Statements, insert_row, record_of
from scopemem.stores.postgres.usage import DeferredUsage
from scopemem.stores.postgres.writes import ScopeLock
from scopemem.stores.shared.tokens import record_tokens

__all__ = ["Porting"]


class Porting:
    """Export and import over ``connect``, the uses pending in ``usage`` saved first."""

    def __init__(self, sql: Statements, analyzer: Analyzer, usage: DeferredUsage,
                 connect: Connect, clock: Clock, lock_scope: ScopeLock) -> None:
        self.sql = sql
        self.analyzer = analyzer
        self._usage = usage
        self._connection = connect
        self._clock = clock
        self._lock_scope = lock_scope

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
        groups = group_import(records, now)
        added = 0
        for scope_key, batch in groups.items():
            added += await self._import_scope(scope_key, batch, now)
        return added

    async def _import_scope(self, scope_key: str, batch: list[tuple[int, Record]],
                            now: int) -> int:
        async with self._connection() as conn, conn.transaction():
            last_seq, _active, _thread, _last = await self._lock_scope(
                conn, scope_key, now, create=True)
            seqs = [seq for seq, _record in batch]
            cursor = await conn.execute(self.sql.held_seqs, {"scope": scope_key, "seqs": seqs})
            held = {seq for (seq,) in await cursor.fetchall()}
            fresh = [item for item in batch if item[0] not in held]  # in seq order
            if not fresh:
                return 0
            tokens = {seq: record_tokens(r, self.analyzer) if r.is_active else []
                      for seq, r in fresh}
            async with conn.cursor() as rows:
                await rows.executemany(self.sql.insert, [
                    insert_row(scope_key, seq, r, now, tokens[seq]) for seq, r in fresh])
            # Each record's neighbours, from the table (which now holds the imported rows).
            around = sorted({n for seq, _r in fresh for n in (seq - 1, seq + 1)})
            cursor = await conn.execute(self.sql.neighbours,
                                        {"scope": scope_key, "seqs": around})
            continues, follows = import_threads(
                fresh, {seq: row for seq, *row in await cursor.fetchall()})
            if any(tokens[seq] for seq in continues):
                await conn.execute(self.sql.post, {
                    "scope": scope_key,
                    "terms": [term for seq in continues for term in tokens[seq]],
                    "seqs": [seq for seq in continues for _term in tokens[seq]],
                    "continues": [flag for seq, flag in continues.items()
                                  for _term in tokens[seq]]})
            if follows:
                await conn.execute(self.sql.mark_continues,
                                   {"scope": scope_key, "seqs": follows})
            await conn.execute(self.sql.import_counts, {
                "scope": scope_key, "last": max(last_seq, fresh[-1][0]),
                "added": len(continues)})
        return len(fresh)
