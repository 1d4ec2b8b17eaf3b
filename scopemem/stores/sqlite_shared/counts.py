"""The shared-file store's counters (``stores.base.CountingStore``, the rules in
``shared/counts.py``): a ``counters`` table in each shard. ``add_counts`` is one
transaction per shard the call touches; ``ScopeLimit`` is ``max_scopes``.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any

from scopemem.core.records import CountRow
from scopemem.errors import ScopeLimitReached
from scopemem.stores.base import Clock, check_scope_key
from scopemem.stores.shared import counts as counting
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared import writes
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import relaxed

__all__ = ["Counts", "ScopeLimit"]


class ScopeLimit:
    """``max_scopes``: new scopes counted against it (0: no limit)."""

    def __init__(self, shards: Shards, max_scopes: int, directory: str) -> None:
        self._shards = shards
        self._max = max_scopes
        self._directory = directory
        self._count: int | None = None  # scopes held, once counted

    def reserve(self) -> None:
        """Count a new scope against ``max_scopes`` (on the write pool, inside the new
        scope's write transaction); raise ``ScopeLimitReached`` past it."""
        if not self._max:
            return
        if self._count is None or self._count >= self._max:
            self._count = self._count_scopes()
        if self._count >= self._max:
            raise ScopeLimitReached(
                f"sqlite store: {self._directory} holds {self._count} scopes, the limit"
                f" (max_scopes = {self._max}); a write to a new scope is refused")
        self._count += 1

    def _count_scopes(self) -> int:
        total = 0
        for index in range(self._shards.count):
            conn = self._shards.connection(index, create=False)
            if conn is not None:
                total += conn.execute(SQL.count_scopes).fetchall()[0][0]
        return total


class Counts:
    """``add_counts`` and ``read_counts`` of ``SharedSqliteStore``."""

    def __init__(self, shards: Shards, pools: ShardPools, scopes: ScopeLimit, clock: Clock, *,
                 synchronous: str) -> None:
        self._shards = shards
        self._pools = pools
        self._scopes = scopes
        self._clock = clock
        self._synchronous = synchronous

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        by_shard: dict[int, builtins.list[CountRow]] = {}
        for row in counting.check_rows(rows):
            by_shard.setdefault(self._shards.of(row.scope_key), []).append(row)
        for shard, group in sorted(by_shard.items()):
            await self._pools.write(shard, self._add_counts, group, create=True)

    def _add_counts(self, conn: Any, rows: Sequence[CountRow]) -> None:
        with relaxed(conn, self._synchronous), sqlite_sql.immediate(conn):
            now = self._clock()
            for scope_key in dict.fromkeys(row.scope_key for row in rows):
                if not conn.execute(st.LOCK_SCOPE, {"scope": scope_key}).fetchall():
                    self._scopes.reserve()
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
            wanted = None if keys is None else [key for key in keys
                                                if self._shards.of(key) == shard]
            found: builtins.list[tuple[Any, ...]] = await self._pools.read(
                shard, _read_counts, since_day, prefix, wanted) or []
            rows.extend(CountRow(*row) for row in found
                        if counting.select_scope(row[0], keys, prefix))
        return sorted(rows, key=lambda r: (r.scope_key, r.day, r.name))


def _read_counts(conn: Any, since_day: int, prefix: str | None,
                 keys: builtins.list[str] | None) -> builtins.list[tuple[Any, ...]]:
    params = {"since": since_day, "prefix": prefix}
    if keys is None:
        return list(conn.execute(SQL.read_counts, params))
    return list(conn.execute(SQL.read_counts_of, {**params, "keys": json.dumps(keys)}))
