"""The shared-file store's counters (``stores.base.CountingStore``): a ``counters`` table in
each shard, keyed by scope, UTC day and name.

A write batch, a forget and a sweep add their counts in their own transaction
(``writes.add_rows``), so the counts and the rows commit together or not at all.
``add_counts`` (the host's counts, already batched by it) is one transaction per shard the
call touches, committed without waiting for the disk: the counts are advisory. A scope
counted before it holds any record is a scope all the same: its row is made, against
``max_scopes`` (``ScopeLimitReached`` past it), as a write would make it.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from scopemem.core.records import CountRow
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared import counts as counting
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared import writes
from scopemem.stores.sqlite_shared.usage import relaxed

__all__ = ["Counts"]


class Counts:
    """``add_counts`` and ``read_counts`` for ``SharedSqliteStore`` (which provides
    ``synchronous``, ``_shards``, ``_read`` and ``_write``)."""

    synchronous: str
    _shards: Any
    _read: Any
    _write: Any
    _clock: Any
    _reserve_scope: Any

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        by_shard: dict[int, builtins.list[CountRow]] = {}
        for row in counting.check_rows(rows):
            by_shard.setdefault(self._shards.of(row.scope_key), []).append(row)
        for shard, group in sorted(by_shard.items()):
            await self._write(shard, self._add_counts, group, create=True)

    def _add_counts(self, conn: Any, rows: Sequence[CountRow]) -> None:
        with relaxed(conn, self.synchronous), sqlite_sql.immediate(conn):
            now = self._clock()
            for scope_key in dict.fromkeys(row.scope_key for row in rows):
                if not conn.execute(st.LOCK_SCOPE, {"scope": scope_key}).fetchall():
                    self._reserve_scope()
                    conn.execute(st.NEW_SCOPE, {"scope": scope_key, "now": now})
            writes.add_rows(conn, rows)

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0
                          ) -> builtins.list[CountRow]:
        keys = None if scope_keys is None else {check_scope_key(k) for k in scope_keys}
        shards = (range(self._shards.count) if keys is None
                  else sorted({self._shards.of(key) for key in keys}))
        rows: builtins.list[CountRow] = []
        for shard in shards:
            found: builtins.list[tuple[Any, ...]] = await self._read(
                shard, _read_counts, since_day) or []
            rows.extend(CountRow(*row) for row in found
                        if counting.select_scope(row[0], keys, prefix))
        return sorted(rows, key=lambda r: (r.scope_key, r.day, r.name))


def _read_counts(conn: Any, since_day: int) -> builtins.list[tuple[Any, ...]]:
    rows: builtins.list[tuple[Any, ...]] = conn.execute(
        st.READ_COUNTS, {"since": since_day}).fetchall()
    return rows
