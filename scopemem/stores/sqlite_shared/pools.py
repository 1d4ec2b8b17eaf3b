"""Which thread runs a shard's work, on which connection (``docs/storage.md``, "Threads"):
reads on the read pool, a shard's writes on its writing thread, whose connection keeps what
the last write left in its page cache. An apsw error becomes a ``StoreError`` naming the
shard's file.
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
    """The thread pools of ``SharedSqliteStore``."""

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
        """``fn(conn, *args)`` on the shard's writing thread, after its earlier writers:
        one connection, so no write reads again the pages the last one changed (across two
        connections, a write of 50 at the cap of 10,000 took twice as long)."""
        lock = self._writers.get(shard)
        if lock is None:
            lock = self._writers[shard] = asyncio.Lock()
        async with lock:
            pool = self.pool(f"write-{shard % POOL_THREADS}", 1)
            done, due = await asyncio.get_running_loop().run_in_executor(
                pool, functools.partial(self._on_writer, shard, create, fn, *args))
            if due:  # before the next writer, not this caller; a shut pool checkpoints on close
                with contextlib.suppress(RuntimeError):
                    pool.submit(self._checkpoint, shard)
            return done

    def _on_writer(self, shard: int, create: bool, fn: Callable[..., T], *args: Any
                   ) -> tuple[T | None, bool]:
        """``_on_shard``, and whether a commit made a checkpoint due."""
        done = self._on_shard(shard, create, fn, *args)
        return done, self._shards.checkpoint_due(shard)

    def _checkpoint(self, shard: int) -> None:
        """A passive checkpoint, none into a file gone from the shard's path."""
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
