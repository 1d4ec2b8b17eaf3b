"""The shared-file store's plumbing: which thread runs a shard's work, on which connection
(``docs/storage.md``, "The shared SQLite layout", "Threads"). A shard's writes share its
writing thread's connection and page cache; a passive checkpoint a commit made due runs on
that thread right after it (``shards.DueCheckpoint``). An apsw error becomes a
``StoreError`` naming the shard's file.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from scopemem.errors import StoreError
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.shards import Shards, checkpoint

__all__ = ["POOL_THREADS", "ShardPools"]

T = TypeVar("T")

#: Threads of the read pool, and writing threads the shards share.
POOL_THREADS = max(2, min(4, os.cpu_count() or 2))


class ShardPools:
    """The thread pools of ``SharedSqliteStore``: each shard's work run on its
    connection."""

    def __init__(self, shards: Shards) -> None:
        self._shards = shards
        self._executors: dict[str, ThreadPoolExecutor] = {}
        self._writers: dict[int, asyncio.Lock] = {}
        self.closed = False

    def pool(self, name: str, threads: int = POOL_THREADS) -> ThreadPoolExecutor:
        if self.closed:
            raise StoreError("the sqlite store is closed")
        executor = self._executors.get(name)
        if executor is None:
            executor = self._executors[name] = ThreadPoolExecutor(
                threads, thread_name_prefix=f"scopemem-sqlite-{name}")
        return executor

    def close(self) -> None:
        """Refuse new work, and stop every thread once its work is done."""
        self.closed = True
        for executor in self._executors.values():
            executor.shutdown(wait=True)

    async def read(self, shard: int, fn: Callable[..., T], *args: Any) -> T | None:
        """``fn(conn, *args)`` on the read pool; None when the shard has no file yet."""
        return await asyncio.get_running_loop().run_in_executor(
            self.pool("read"), functools.partial(self._on_shard, shard, False, fn, *args))

    async def write(self, shard: int, fn: Callable[..., T], *args: Any,
                     create: bool = False) -> T | None:
        """``fn(conn, *args)`` on the shard's writing thread, after its earlier writers.

        A shard's writes are one at a time anyway; each on the same thread, they all use
        one connection, whose page cache holds what the last write left. Across two
        connections each write would read again every page the other's last write
        changed (after retrievals, a write of 50 at the cap of 10,000 took twice as long).
        """
        lock = self._writers.get(shard)
        if lock is None:
            lock = self._writers[shard] = asyncio.Lock()
        async with lock:
            pool = self.pool(f"write-{shard % POOL_THREADS}", 1)
            done, due = await asyncio.get_running_loop().run_in_executor(
                pool, functools.partial(self._on_writer, shard, create, fn, *args))
            if due:
                # Queued before the shard's next writer can be: that one waits for the
                # checkpoint, the caller of this one does not (``shards.DueCheckpoint``).
                # A pool shut down meanwhile (``close``) closes the shard, which
                # checkpoints it.
                with contextlib.suppress(RuntimeError):
                    pool.submit(self._checkpoint, shard)
            return done

    def _on_writer(self, shard: int, create: bool, fn: Callable[..., T], *args: Any
                   ) -> tuple[T | None, bool]:
        """``_on_shard`` on the shard's writing thread, and whether a commit of its
        connection made a checkpoint due (a job that raises leaves it due for the next)."""
        done = self._on_shard(shard, create, fn, *args)
        return done, self._shards.checkpoint_due(shard)

    def _checkpoint(self, shard: int) -> None:
        """A passive checkpoint of the shard, on its writing thread; none into a file no
        longer at the shard's path (``files.OpenedFile``)."""
        conn = self._shards.connection(shard, create=False)
        opened = self._shards.opened(shard)
        if conn is not None and opened is not None and opened.problem() is None:
            checkpoint(conn)

    def _on_shard(self, shard: int, create: bool, fn: Callable[..., T], *args: Any
                  ) -> T | None:
        conn = self._shards.connection(shard, create=create)
        if conn is None:
            return None
        try:
            return fn(conn, *args)
        except StoreError:
            raise
        except sqlite_sql.apsw_module().Error as exc:
            raise StoreError(f"sqlite store: {self._shards.path(shard)}: "
                             f"{sqlite_sql.describe(exc)}") from exc
