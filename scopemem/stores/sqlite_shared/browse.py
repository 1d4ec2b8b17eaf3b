"""Browsing the shared-file SQLite store (``stores.base.BrowsingStore``), by the statements
both SQL stores share (``shared/sql.py``), and its reaches (``core.browse.Reach``) in one file
of the data directory, ``reaches.db``, beside the shards (``ReachLog``).

A page of scopes asks each shard for the first ``offset + limit`` of its scopes in the
page's order and merges them; a kind's count totals are each shard's, merged. Neither
reads a record.

The reaches are a file of their own, not a table of each shard: a block shows records of
up to four scopes, in as many shards, and a log per block in each would be that many more
commits queued behind the shards' writers. Here a block's reaches are one commit, on the
log's own thread and connection, at ``synchronous = NORMAL`` (a power cut may lose the last
blocks' reaches, never the shards' records), and a run's reaches are one indexed read.

Each row is a reach (scope key, seq, run id, thread key, time); indexed by record, by run
id, by thread key and by time. Every log deletes the reaches past the retention first
(``at <= cutoff``, by the time index), and reads skip them, so what a read answers never
depends on when the last log ran. Deleting a scope deletes its reaches, and scrubbing a
person from a scope's provenance deletes the scope's reaches that name them
(``stores.browsing.names_person``); both then truncate the log's WAL, and ``secure_delete``
zeroes the freed cells, so no copy of a deleted reach stays in the file.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from scopemem.core.browse import (
    HISTORY_REACHES,
    CountTotal,
    Reach,
    RecordHistory,
    RecordPage,
    ScopePage,
    ScopeSummary,
    kind_range,
    merge_totals,
)
from scopemem.core.records import Kind, Record
from scopemem.core.scopes import record_seq, scope_kind
from scopemem.errors import StoreError
from scopemem.stores.base import Clock
from scopemem.stores.browsing import (
    Found,
    count_total_args,
    drive,
    fit_reaches,
    history_from,
    history_reads,
    names_person,
    reach_cutoff,
    reach_query,
    record_args,
    record_params,
    scope_args,
    scope_order,
)
from scopemem.stores.shared.batches import seq_in_scope
from scopemem.stores.shared.sql import reach_read, reaches_of
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.files import OpenedFile
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["FILE_NAME", "Browse", "ReachLog"]

T = TypeVar("T")

FILE_NAME = "reaches.db"
# "ScMr": the reach log of a shared-layout data directory.
APPLICATION_ID = 0x53634D72
VERSION = 1

SCHEMA = (
    """CREATE TABLE IF NOT EXISTS reaches (
        scope_key  TEXT NOT NULL,
        seq        INTEGER NOT NULL,
        run_id     TEXT NOT NULL,
        thread_key TEXT NOT NULL,
        at         INTEGER NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS reaches_by_record ON reaches (scope_key, seq, at)",
    "CREATE INDEX IF NOT EXISTS reaches_by_run ON reaches (run_id, at)",
    "CREATE INDEX IF NOT EXISTS reaches_by_thread ON reaches (thread_key, at)",
    "CREATE INDEX IF NOT EXISTS reaches_by_time ON reaches (at)",
)
INSERT = ("INSERT INTO reaches (scope_key, seq, run_id, thread_key, at) VALUES"
          " (?, ?, ?, ?, ?)")
NAMING = ("SELECT rowid, run_id, thread_key FROM reaches WHERE scope_key = :scope"
          " AND (instr(run_id, :person) > 0 OR instr(thread_key, :person) > 0)")
DELETE = "DELETE FROM reaches WHERE rowid = ?"


class ReachLog:
    """``reaches.db`` under ``directory``, opened on first use on the log's one thread."""

    def __init__(self, directory: str, clock: Clock, retention_days: int, *,
                 busy_timeout_ms: int = 5000,
                 make_directory: Callable[[], None] | None = None) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        # ``Shards.make_root``: a directory deleted under the process is not made again.
        self._make_directory = make_directory or functools.partial(
            os.makedirs, directory, exist_ok=True)
        self._directory = directory
        self._clock = clock
        self.retention_days = retention_days
        self._busy_timeout_ms = busy_timeout_ms
        self._conn: Any = None
        self._executor: ThreadPoolExecutor | None = None

    async def _run(self, fn: Callable[..., T], *args: Any, create: bool = False
                   ) -> T | None:
        """``fn(conn, *args)`` on the log's thread; None when there is no log file yet and
        ``create`` is false."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="scopemem-reaches")
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, functools.partial(self._on_log, create, fn, *args))

    def _on_log(self, create: bool, fn: Callable[..., T], *args: Any) -> T | None:
        apsw = sqlite_sql.apsw_module()
        try:
            if self._conn is None:
                if not create and not os.path.exists(self.path):
                    return None
                self._conn = self._open()
            return fn(self._conn, *args)
        except apsw.Error as exc:
            raise (sqlite_sql.descriptors_busy(self.path, exc)
                   or StoreError(f"sqlite store: {self.path}: {sqlite_sql.describe(exc)}")
                   ) from exc

    def _open(self) -> Any:
        apsw = sqlite_sql.apsw_module()
        self._make_directory()
        conn, opened = OpenedFile.opening(self.path, lambda: apsw.Connection(self.path))
        try:
            opened.install(conn)  # no commit into a file deleted or replaced since
            conn.set_busy_timeout(self._busy_timeout_ms)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA secure_delete = ON")
            with sqlite_sql.immediate(conn):
                app_id = conn.execute("PRAGMA application_id").fetchall()[0][0]
                tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchall()[0][0]
                if app_id != APPLICATION_ID and (app_id != 0 or tables):
                    raise StoreError(f"sqlite store: {self.path}: not a scopemem reach log")
                for statement in SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {VERSION}")
        except BaseException:
            conn.close()
            raise
        return conn

    async def log(self, reaches: Sequence[Reach]) -> None:
        fitted = fit_reaches(reaches)
        if not self.retention_days or not fitted:
            return
        cutoff = reach_cutoff(self._clock(), self.retention_days)
        rows = [(r.scope_key, record_seq(r.record_id), r.run_id, r.thread_key, r.at_ms)
                for r in fitted if r.at_ms > cutoff]
        await self._run(_log, cutoff, rows, create=True)

    async def read(self, *, record_id: str | None = None, run: str | None = None,
                   limit: int = 100) -> list[Reach]:
        record_id, run, limit = reach_query(record_id, run, limit)
        read = reach_read(SQL, record_id, run, limit,
                          reach_cutoff(self._clock(), self.retention_days))
        if read is None:
            return []
        return reaches_of(await self._run(sqlite_sql.fetch, *read) or ())

    async def drop_scope(self, scope_key: str) -> None:
        """Delete the scope's reaches (the scope itself is being deleted)."""
        await self._run(_drop_scope, scope_key, self.path)

    async def scrub(self, scope_key: str, person: str) -> None:
        """Delete the scope's reaches whose run id or thread key names ``person``."""
        if person:
            await self._run(_scrub, scope_key, person, self.path)

    async def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(executor, self._close)
            executor.shutdown(wait=True)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _log(conn: Any, cutoff: int, rows: list[tuple[str, int, str, str, int]]) -> None:
    with sqlite_sql.immediate(conn):
        conn.execute(SQL.prune_reaches, {"cutoff": cutoff})
        conn.executemany(INSERT, rows)


def _drop_scope(conn: Any, scope_key: str, path: str) -> None:
    with sqlite_sql.immediate(conn):
        conn.execute(SQL.drop_reaches, {"scope": scope_key})
    sqlite_sql.truncate_wal(conn, path, "deleting a scope's reaches")


def _scrub(conn: Any, scope_key: str, person: str, path: str) -> None:
    with sqlite_sql.immediate(conn):
        naming = [(rowid,) for rowid, run_id, thread_key in conn.execute(
            NAMING, {"scope": scope_key, "person": person}).fetchall()
            if names_person(run_id, thread_key, person)]
        conn.executemany(DELETE, naming)
    if naming:
        sqlite_sql.truncate_wal(conn, path, "scrubbing reaches")


class Browse:
    """The store's browsing, over its shards' pools and pending uses and its reach log."""

    def __init__(self, shards: int, of: Any, pools: ShardPools, uses: PendingUses,
                 reaches: ReachLog) -> None:
        self._shards = shards
        self._of = of  # scope key → its shard
        self._pools = pools
        self._uses = uses
        self.reaches = reaches

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        kind, sort, descending, offset, limit = scope_args(kind, sort, descending, offset,
                                                           limit)
        low, high = kind_range(kind) if kind is not None else (None, None)
        # Each shard's first ``offset + limit``, merged.
        params = {"low": low, "high": high, "limit": offset + limit, "offset": 0}
        statement = SQL.scope_page(sort, descending)
        answers = await asyncio.gather(*(self._pools.read(shard, _scopes, statement, params)
                                         for shard in range(self._shards)))
        found = [answer for answer in answers if answer is not None]
        merged = heapq.merge(*(rows for _total, rows in found), key=scope_order(sort),
                             reverse=descending)
        rows = [row for _n, row in zip(range(offset + limit), merged, strict=False)]
        return ScopePage(total=sum(total for total, _rows in found),
                         rows=tuple(rows[offset:]))

    async def read_count_totals(self, kind: str, *, since_day: int = 0) -> list[CountTotal]:
        kind, since_day = count_total_args(kind, since_day)
        params = {"kind": kind, "since": since_day}
        answers = await asyncio.gather(*(self._pools.read(shard, _count_totals, params)
                                         for shard in range(self._shards)))
        return merge_totals(total for answer in answers for total in answer or ())

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        params = record_params(scope_key, kind, status, source, offset, limit)
        shard = self._of(params["scope"])
        done = await self._pools.read(shard, _record_page, self._uses, shard, params)
        total, rows = done if done is not None else (0, [])
        return RecordPage(total=total, rows=tuple(rows))

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        key, *_rest = record_args(scope_key, None, None, None, 0, 1)
        seq = seq_in_scope(key, record_id)
        if seq is None:
            return None
        shard = self._of(key)
        found = await self._pools.read(shard, _history, self._uses, shard, key, record_id,
                                       seq)
        if found is None:
            return None
        return history_from(found, await self.reaches.read(record_id=record_id,
                                                           limit=HISTORY_REACHES))


def _scopes(conn: Any, statement: str, params: dict[str, Any]
            ) -> tuple[int, list[ScopeSummary]]:
    with sqlite_sql.snapshot(conn):
        total = conn.execute(SQL.count_held, params).fetchall()[0][0]
        rows = conn.execute(statement, params).fetchall()
    return total, [ScopeSummary(scope_key=key, kind=scope_kind(key), active=active,
                                last_write_ms=last_write) for key, active, last_write in rows]


def _count_totals(conn: Any, params: dict[str, Any]) -> list[CountTotal]:
    return [CountTotal(day=day, name=name, total=total, most=most)
            for day, name, total, most in conn.execute(SQL.count_totals, params).fetchall()]


def _record_page(conn: Any, uses: PendingUses, shard: int, params: dict[str, Any]
                 ) -> tuple[int, list[Record]]:
    with sqlite_sql.snapshot(conn):
        total = conn.execute(SQL.count_records, params).fetchall()[0][0]
        _lead, rows = uses.rows(conn, shard, params["scope"], SQL.record_page, params)
    return total, [sqlite_sql.record(row) for row in rows]


def _history(conn: Any, uses: PendingUses, shard: int, scope_key: str, record_id: str,
             seq: int) -> Found | None:
    def run(name: str, params: dict[str, Any]) -> Any:
        if name == "rows":  # with the uses not saved yet
            return uses.rows(conn, shard, scope_key, SQL.rows,
                             {**params, "seqs": json.dumps(params["seqs"])})[1]
        return conn.execute(getattr(SQL, name), params).fetchall()

    with sqlite_sql.snapshot(conn):
        return drive(history_reads(scope_key, record_id, seq, sqlite_sql.record), run)
