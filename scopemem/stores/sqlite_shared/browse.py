"""Browsing the shared-file SQLite store: ``stores.browsing.SqlBrowse`` over the shards
(a page of scopes or a kind's totals merges every shard's), and the reaches in a file of
their own, ``reaches.db`` (``ReachLog``).

The reaches are not a table of each shard: a block shows records of up to four scopes, and
a log in each shard would be that many more commits queued behind its writers. Here a
block's reaches are one commit on the log's own thread, at ``synchronous = NORMAL`` (a power
cut may lose the last blocks' reaches, never a shard's records). Deleting a scope or
scrubbing a person deletes reaches, then truncates the WAL; ``secure_delete`` zeroes the
freed cells, so no copy of a deleted reach stays in the file.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from scopemem.core.browse import Reach, names_person
from scopemem.errors import StoreError
from scopemem.stores.base import Clock
from scopemem.stores.browsing import Plan, SqlBrowse, kept_reaches, reach_read, reaches_of
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
        kept = kept_reaches(reaches, self._clock, self.retention_days)
        if kept is not None:
            await self._run(_log, *kept, create=True)

    async def read(self, *, record_id: str | None = None, run: str | None = None,
                   limit: int = 100) -> list[Reach]:
        read = reach_read(SQL, self._clock, self.retention_days, record_id, run, limit)
        return [] if read is None else reaches_of(
            await self._run(sqlite_sql.fetch, *read) or ())

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


class Browse(SqlBrowse):
    """The store's browsing over its shards' pools and pending uses, and its reach log."""

    def __init__(self, shards: int, of: Callable[[str], int], pools: ShardPools,
                 uses: PendingUses, reaches: ReachLog) -> None:
        super().__init__(SQL, sqlite_sql.record, reaches.read, shards, of)
        self._pools = pools
        self._uses = uses
        self.reaches = reaches

    async def read(self, part: int, plan: Plan[T], uses: str | None = None) -> T | None:
        return await self._pools.read(part, _read, self._uses, part, plan)

    async def fetch(self, part: int, statement: str, params: dict[str, Any]
                    ) -> list[Any] | None:
        return await self._pools.read(part, sqlite_sql.fetch, statement, params)


def _read(conn: Any, uses: PendingUses, shard: int, plan: Plan[T]) -> T:
    def run(statement: str, params: dict[str, Any], records: bool) -> Any:
        if not records:
            return conn.execute(statement, params).fetchall()
        # With the uses not saved yet; a list (of seqs) is bound as a JSON array.
        params = {name: json.dumps(value) if isinstance(value, list) else value
                  for name, value in params.items()}
        return uses.rows(conn, shard, params["scope"], statement, params)[1]

    with sqlite_sql.snapshot(conn):
        try:
            step = next(plan)
            while True:
                step = plan.send(run(*step))
        except StopIteration as done:
            answer: T = done.value
            return answer
