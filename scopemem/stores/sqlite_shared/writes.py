"""The changes to a scope on one shard (``shared.changes`` over ``SqliteTx``), each one
``BEGIN IMMEDIATE`` transaction on the shard's writing thread, the scope's pending uses saved
first (``transaction``); the day counters, one transaction per shard; ``max_scopes``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from scopemem.core.records import Candidate, CountRow, PurgeResult, Record, SweepResult, WriteCounts
from scopemem.core.scopes import record_seq
from scopemem.core.words import Analyzer
from scopemem.errors import ScopeLimitReached, StoreError
from scopemem.stores.base import Clock, check_scope_key
from scopemem.stores.shared import changes
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.changes import Locked, run_sync
from scopemem.stores.sqlite_shared import index
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses, relaxed

__all__ = ["Counts", "ScopeLimit", "SqliteTx", "add_rows", "delete_scope", "forget", "purge",
           "scrub_provenance", "sweep", "write"]


def add_rows(conn: Any, rows: Sequence[CountRow]) -> None:
    """Add counter rows in the caller's transaction."""
    if rows:
        conn.executemany(st.ADD_COUNT, [(r.scope_key, r.day, r.name, r.value) for r in rows])


@contextlib.contextmanager
def transaction(conn: Any, uses: PendingUses, shard: int, scope_key: str) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` with the scope's pending uses saved first (so the batch's dedup
    and eviction see them, ``usage.py``); rolled back, uses pending again, if the block
    raises."""
    with uses.saving(shard, scope_key) as entries, sqlite_sql.immediate(conn):
        if entries:
            uses.apply(conn, shard, entries)
        yield


class SqliteTx:
    """A shard's transaction on one scope, as ``shared.changes`` runs it: lists bound as
    JSON arrays, the token index FTS5 (``index.py``), keyed by the scope's ``sid``."""

    sql = SQL

    def __init__(self, conn: Any, scope: str, reserve: Callable[[], None] | None = None
                 ) -> None:
        self.conn = conn
        self.scope = scope
        self._reserve = reserve  # counts a new scope against ``max_scopes``
        self.sid: int | None = None

    def ints(self, values: Sequence[int]) -> object:
        return json.dumps(list(values))

    async def lock(self, now: int, create: bool) -> Locked | None:
        row = self.conn.execute(st.LOCK_SCOPE, {"scope": self.scope}).fetchall()
        if not row and create:
            if self._reserve is not None:
                self._reserve()
            self.conn.execute(st.NEW_SCOPE, {"scope": self.scope, "now": now})
            row = self.conn.execute(st.LOCK_SCOPE, {"scope": self.scope}).fetchall()
            if row[0][4] > index.MAX_SID:
                raise StoreError(f"sqlite store: shard of {self.scope!r} has given every id")
        if not row:
            return None
        *locked, self.sid = row[0]
        return locked[0], locked[1], locked[2], locked[3]

    async def rows(self, statement: str, params: dict[str, Any]) -> list[Any]:
        return list(self.conn.execute(statement, params).fetchall())

    async def rows_of(self, *queries: tuple[str, dict[str, Any]]) -> list[list[Any]]:
        return [await self.rows(statement, params) for statement, params in queries]

    async def records(self, statement: str, params: dict[str, Any]) -> list[Record]:
        return [sqlite_sql.record(row) for row in self.conn.execute(statement, params)]

    async def run(self, statement: str, params: dict[str, Any]) -> None:
        self.conn.execute(statement, params)

    async def count(self, statement: str, params: dict[str, Any]) -> int:
        self.conn.execute(statement, params)
        return int(self.conn.changes())

    async def many(self, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(statement, rows)

    async def known(self, norms: list[str], seqs: list[int]) -> list[Record]:
        return await self.records(st.BATCH_ROWS, {
            "scope": self.scope, "norms": json.dumps(norms), "seqs": json.dumps(seqs)})

    async def insert(self, rows: Sequence[tuple[int, Record, list[str]]], now: int) -> None:
        self.conn.execute(st.INSERT_ROWS, {"scope": self.scope, "rows": json.dumps(
            [sqlite_sql.insert_row(seq, r, now, tokens) for seq, r, tokens in rows],
            ensure_ascii=False)})

    async def change(self, rows: Sequence[Record], now: int) -> None:
        self.conn.execute(st.CHANGE_ROWS, {"scope": self.scope, "now": now, "rows": json.dumps(
            [(record_seq(r.id), r.use_count, r.last_used_at, r.confidence, r.status.value)
             for r in rows])})

    async def post(self, posted: Sequence[tuple[int, list[str], bool]]) -> None:
        assert self.sid is not None
        if posted and posted[-1][0] > index.MAX_SEQ:
            raise StoreError(f"sqlite store: scope {self.scope!r} has used every id")
        index.post(self.conn, self.sid, posted)

    async def unpost(self, seqs: Sequence[int]) -> None:
        assert self.sid is not None
        index.unpost(self.conn, self.sid, seqs)

    async def follow(self, seqs: Sequence[int], beside: Mapping[int, Sequence[Any]]) -> None:
        await self.unpost(seqs)  # indexed again, with the marker
        await self.post([(seq, beside[seq][2].split(), True) for seq in seqs])

    async def forget(self, params: dict[str, Any]) -> bool:
        if await self.count(SQL.forget, params) <= 0:
            return False
        # Out of the index, and the index merged: a forgotten record leaves no trace.
        await self.unpost([params["seq"]])
        index.scrub(self.conn)
        return True

    async def drop(self) -> None:
        assert self.sid is not None
        index.unpost_scope(self.conn, self.sid)
        self.conn.execute(st.DELETE_COUNTERS, {"scope": self.scope})

    async def counters(self, rows: Sequence[CountRow]) -> None:
        add_rows(self.conn, rows)


def write(conn: Any, uses: PendingUses, shard: int, analyzer: Analyzer, scope_key: str,
          fitted: Sequence[Candidate], cap: int, now: int, cutoff: int,
          reserve_scope: Callable[[], None]) -> WriteCounts:
    """``changes.write``; ``reserve_scope`` is called before a new scope's row is made."""
    with transaction(conn, uses, shard, scope_key):
        return run_sync(changes.write(SqliteTx(conn, scope_key, reserve_scope), analyzer,
                                      fitted, cap, now, cutoff))


def forget(conn: Any, uses: PendingUses, shard: int, path: str, scope_key: str, seq: int,
           now: int) -> bool:
    """``changes.forget``. ``secure_delete`` zeroes the freed cells, and the WAL of the
    shard file ``path`` is truncated after the commit."""
    with transaction(conn, uses, shard, scope_key):
        done = run_sync(changes.forget(SqliteTx(conn, scope_key), seq, now))
    if done:
        sqlite_sql.truncate_wal(conn, path, "a forget")
    return done


def delete_scope(conn: Any, uses: PendingUses, shard: int, path: str, scope_key: str) -> int:
    """``changes.delete_scope``, then the index merged and the WAL of ``path`` truncated, so
    no trace of its terms stays."""
    with transaction(conn, uses, shard, scope_key):
        tx = SqliteTx(conn, scope_key)
        deleted = run_sync(changes.delete_scope(tx, 0))
        if tx.sid is not None:
            index.scrub(conn)
    sqlite_sql.truncate_wal(conn, path, "deleting a scope")
    return deleted


def scrub_provenance(conn: Any, uses: PendingUses, shard: int, path: str, scope_key: str,
                     person: str) -> int:
    """``changes.scrub_provenance``, then (if a row changed) the WAL of ``path`` truncated."""
    with transaction(conn, uses, shard, scope_key):
        changed = run_sync(changes.scrub_provenance(SqliteTx(conn, scope_key), 0, person))
    if changed:
        sqlite_sql.truncate_wal(conn, path, "scrubbing provenance")
    return changed


def purge(conn: Any, uses: PendingUses, shard: int, scope_key: str, cutoff: int
          ) -> PurgeResult:
    with transaction(conn, uses, shard, scope_key):
        return run_sync(changes.purge(SqliteTx(conn, scope_key), 0, cutoff))


def sweep(conn: Any, uses: PendingUses, shard: int, scope_key: str, now: int, dry_run: bool
          ) -> SweepResult:
    with contextlib.nullcontext() if dry_run else transaction(conn, uses, shard, scope_key):
        return run_sync(changes.sweep(SqliteTx(conn, scope_key), now, dry_run))


class ScopeLimit:
    """``max_scopes``: new scopes counted against it (0: no limit)."""

    def __init__(self, shards: Shards, max_scopes: int, directory: str) -> None:
        self._shards = shards
        self._max = max_scopes
        self._directory = directory

    def reserve(self) -> None:
        """Count a new scope against ``max_scopes`` (on the write pool, inside the new
        scope's write transaction); raise ``ScopeLimitReached`` past it. Counted anew each
        time: the other processes serving the directory (``serve --workers N``) make
        scopes too, so no count of this process's stays true."""
        if not self._max:
            return
        held = sum(self._shards.count_scopes(shard) for shard in range(self._shards.count))
        if held >= self._max:
            raise ScopeLimitReached(
                f"sqlite store: {self._directory} holds {held} scopes, the limit"
                f" (max_scopes = {self._max}); a write to a new scope is refused")


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
                run_sync(SqliteTx(conn, scope_key, self._scopes.reserve).lock(now, True))
            add_rows(conn, rows)

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
