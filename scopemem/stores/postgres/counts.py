"""The PostgreSQL store's counters (``stores.base.CountingStore``, the rules in
``shared/counts.py``): one ``counters`` table (migration 3). ``add_counts`` is one
statement for every scope of the call; a server crash may lose the last fraction of a
second of them, as it may lose use counts, never a record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scopemem.core.records import CountRow
from scopemem.stores.base import Clock, check_scope_key
from scopemem.stores.postgres.locking import ScopeLock
from scopemem.stores.postgres.pool import Connect
from scopemem.stores.postgres.statements import Statements
from scopemem.stores.shared import counts as counting

__all__ = ["Counts", "add_rows"]


async def add_rows(conn: Any, sql: Statements, rows: Sequence[CountRow]) -> None:
    """Add ``rows`` in the caller's transaction (sorted, as ``merge_rows`` leaves them)."""
    if rows:
        await conn.execute(sql.add_counts, {
            "scopes": [row.scope_key for row in rows], "days": [row.day for row in rows],
            "names": [row.name for row in rows], "values": [row.value for row in rows]})


class Counts:
    """``add_counts`` and ``read_counts`` over ``connect``."""

    def __init__(self, sql: Statements, connect: Connect, clock: Clock,
                 lock_scope: ScopeLock) -> None:
        self.sql = sql
        self._connection = connect
        self._clock = clock
        self._lock_scope = lock_scope

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        checked = counting.check_rows(rows)
        if not checked:
            return
        now = self._clock()
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL synchronous_commit = off")
            for scope_key in sorted({row.scope_key for row in checked}):  # one lock order
                await self._lock_scope(conn, scope_key, now, create=True)
            await add_rows(conn, self.sql, checked)

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[CountRow]:
        keys = None if scope_keys is None else sorted({check_scope_key(k) for k in scope_keys})
        if counting.no_scope_starts(prefix):
            return []
        async with self._connection() as conn:
            statement = self.sql.read_counts if keys is None else self.sql.read_counts_of
            cursor = await conn.execute(statement, {
                "since": since_day, "keys": keys, "prefix": prefix})
            return [CountRow(scope, day, name, value)
                    for scope, day, name, value in await cursor.fetchall()]
