"""The store's plumbing: thread pools, writer locks, the cache of open files, transactions.

apsw releases the GIL while SQLite works, so database calls run on thread pools owned by
the store and the event loop never waits on disk: one pool for reads, one for writes, so
writes waiting on the disk never hold the threads reads of other scopes need. An apsw
connection may move between threads but must not be used by two at once: each open
connection (``handles.Handle``) has its own ``threading.Lock``, held for a whole operation;
its pending bumps and its view have a second lock, held only for dictionary updates.

Open connections live in a bounded LRU cache (``max_open``); an evicted one is closed
(committing any pending bumps) once its current user is done, and the scope is not reopened
before that. Writers to one scope also queue on a per-scope ``asyncio.Lock``, so a burst of
writes waits on the loop rather than parking pool threads; those locks are dropped when
nobody holds them, so memory follows the cache size, not the number of scopes ever touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from scopemem.core.ranking import Ranking
from scopemem.errors import StoreError
from scopemem.stores.sqlite import schema, sql
from scopemem.stores.sqlite.files import Files
from scopemem.stores.sqlite.handles import Handle
from scopemem.stores.sqlite.view import ScopeView

log = logging.getLogger("scopemem.stores.sqlite")

T = TypeVar("T")

# Threads per pool (one pool for reads, one for writes). More threads than cores only adds
# GIL hand-offs (apsw releases the GIL on every row): on two cores, two read threads served
# 14-24% more worker reads than four did.
_POOL_THREADS = max(2, min(4, os.cpu_count() or 2))


class StoreBase(Files):
    """What every part of the store shares (``store.SqliteStore.__init__`` sets it up)."""

    cap: int
    retention_days: int
    ranking: Ranking
    max_open: int
    cache_rows: int
    usage_flush_ms: int
    _cached_rows: int  # rows held by views, across scopes (guarded by _cache_lock)
    # The handles holding (or about to hold) views, least recently used first.
    _viewed: OrderedDict[Handle, None]
    _handles: OrderedDict[str, Handle]
    _closing: dict[str, Handle]  # evicted from the cache, not closed yet
    _cache_lock: threading.Lock
    _writers: dict[str, list[Any]]  # scope → [asyncio.Lock, holders+waiters]
    _executors: dict[str, ThreadPoolExecutor]  # "read" / "write" pools
    _closed: bool

    async def _run(self, pool: str, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn`` on the ``"read"`` or the ``"write"`` pool. Two pools, so a burst of
        writes waiting on the disk never holds the threads reads of other scopes need."""
        loop = asyncio.get_running_loop()
        with self._cache_lock:
            if self._closed:
                raise StoreError("the sqlite store is closed")
            executor = self._executors.get(pool)
            if executor is None:
                executor = self._executors[pool] = ThreadPoolExecutor(
                    _POOL_THREADS, thread_name_prefix=f"scopemem-sqlite-{pool}")
        return await loop.run_in_executor(executor, functools.partial(fn, *args))

    @contextlib.asynccontextmanager
    async def _writer(self, scope_key: str) -> Any:
        entry = self._writers.get(scope_key)
        if entry is None:
            entry = self._writers[scope_key] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._writers[scope_key]

    @contextlib.contextmanager
    def _connection(self, scope_key: str, *, create: bool) -> Iterator[Any]:
        """The scope's handle (its open connection and pending bumps), held exclusively for
        the block; None (only when not ``create``) if the scope has no database file yet."""
        handle = self._acquire(scope_key, create=create)
        if handle is None:
            yield None
            return
        try:
            yield handle
        except StoreError:
            raise
        except sql.apsw_module().Error as exc:
            raise StoreError(f"sqlite store: {handle.path}: {sql.describe(exc)}") from exc
        finally:
            handle.lock.release()

    def _acquire(self, scope_key: str, *, create: bool) -> Handle | None:
        while True:
            doomed: list[tuple[str, Handle]] = []
            with self._cache_lock:
                if self._closed:
                    raise StoreError("the sqlite store is closed")
                handle = self._handles.get(scope_key)
                if handle is None:
                    # An evicted handle of this scope still closing may hold usage bumps
                    # not yet committed: finish closing it (that commits them) first, so
                    # two handles of one scope never disagree about a use count.
                    closing = self._closing.get(scope_key)
                    if closing is not None:
                        doomed.append((scope_key, closing))
                    else:
                        path = self.path_for(scope_key)
                        if (not create or self.max_scopes) and not os.path.exists(path):
                            if not create:
                                return None
                            self._reserve_scope(path)
                        handle = self._handles[scope_key] = Handle(path)
                        while len(self._handles) > self.max_open:
                            doomed.append(self._handles.popitem(last=False))
                        self._closing.update(doomed)
                else:
                    self._handles.move_to_end(scope_key)
            for key, old in doomed:
                self._close_handle(old)
                with self._cache_lock:
                    if self._closing.get(key) is old:
                        del self._closing[key]
            if handle is None:
                continue
            handle.lock.acquire()
            if handle.closed:  # evicted or closed while we waited: start over
                handle.lock.release()
                continue
            if handle.conn is None:
                try:
                    handle.conn = self._open(handle.path, scope_key)
                except BaseException:
                    handle.closed = True
                    with self._cache_lock:
                        if self._handles.get(scope_key) is handle:
                            del self._handles[scope_key]
                    handle.lock.release()
                    raise
            return handle

    def _close_handle(self, handle: Handle, *, final: bool = False) -> None:
        """Close a handle's connections, committing its pending usage bumps. ``final`` (the
        store closing) also checkpoints the WAL into the database file and removes it, so a
        store that was closed leaves each scope one self-contained file; an eviction from
        the cache does not (see ``_connect``)."""
        with handle.lock:
            if handle.closed:
                return
            with handle.bump_lock:  # no retrieval adds bumps to a closed handle
                handle.closed = True
            self._release_view(handle)
            handle.close_wal()
            conn, handle.conn = handle.conn, None
            if conn is not None and handle.pending:
                try:
                    with self._transaction(conn, relaxed=True, bumps=handle):
                        pass
                except Exception as exc:
                    log.warning("sqlite store: %s: %d usage counts were not committed: %s",
                                handle.path, len(handle.pending), sql.describe(exc))
            if conn is not None:
                try:
                    if final:
                        conn.config(sql.apsw_module().SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0)
                    conn.close()
                except Exception:  # pragma: no cover - closing never fails in practice
                    log.warning("sqlite store: closing %s failed", handle.path, exc_info=True)

    @contextlib.contextmanager
    def _transaction(self, conn: Any, *, relaxed: bool = False,
                     bumps: Handle | None = None, changes_rows: bool = True,
                     applied: set[int] | None = None, vouch: ScopeView | None = None
                     ) -> Iterator[None]:
        """One ``BEGIN IMMEDIATE`` transaction: committed if the block finishes, rolled back
        if it raises. ``relaxed`` commits without waiting for the disk (usage bumps only).
        The pending usage bumps of the handle ``bumps`` (held by the caller) are applied
        first, so the block reads rows with them; they are pending again if the transaction
        does not commit (``applied``, when given, gathers their seqs). A transaction that is
        not ``relaxed`` on a handle changes rows (unless ``changes_rows`` says it never
        does): it counts a generation and drops the scope's view, as it begins; with
        ``vouch`` (the scope's view as the transaction began), only once committed: the
        transaction reads the generation as soon as it holds the file's write lock, and when
        it is the view's, vouches for the view (``Handle.live``) until the commit."""
        relax = relaxed and self.synchronous in ("full", "extra")
        changes_rows = changes_rows and bumps is not None and not relaxed
        if changes_rows and bumps is not None:
            bumps.view_refused = False
            if vouch is None:
                # Nothing vouches for the view while this transaction holds the file (a
                # forget, a sweep, an import): it leaves use now, so no retrieval is answered
                # from it in the moment after the commit.
                self._release_view(bumps)
        if relax:
            conn.execute("PRAGMA synchronous = NORMAL")
        batch: dict[int, list[int]] = {}
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                if vouch is not None and changes_rows and bumps is not None and \
                        conn.execute(schema.GENERATION_SQL).fetchall()[0][0] == vouch.generation:
                    bumps.live = vouch  # no other process can commit before we do
                if bumps is not None:
                    batch = bumps.take_batch()
                    if batch:
                        sql.apply_bumps(conn, batch)
                        if applied is not None:
                            applied.update(batch)
                yield
                if changes_rows:
                    conn.execute(schema.NEXT_GENERATION_SQL)
            except BaseException:
                if not conn.getautocommit():
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")
                raise
            try:
                conn.execute("COMMIT")
            except BaseException:
                if not conn.getautocommit():
                    with contextlib.suppress(Exception):
                        conn.execute("ROLLBACK")
                raise
            batch = {}
            if changes_rows and bumps is not None:
                # The rows changed: from here on no retrieval is answered from the view.
                # Until this commit it was the committed state (a retrieval answered from it
                # meanwhile is concurrent with the write, which nobody has been told of).
                self._release_view(bumps)
        finally:
            if bumps is not None:
                bumps.live = None  # after the view left use: nothing vouches for it now
            if batch and bumps is not None:
                bumps.return_batch(batch)
            if relax:
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")

    def _has_room(self, count: int) -> bool:
        """Whether a view of ``count`` rows fits in the budget without dropping another."""
        with self._cache_lock:
            return self._cached_rows + count <= self.cache_rows

    def _reserve_rows(self, handle: Handle, count: int) -> bool:
        """Make room for a view of ``count`` rows, dropping the views of the least recently
        used scopes if need be; False when it cannot fit. Only the scopes holding views are
        looked at (``_viewed``), so this costs the views it drops, not the open files."""
        with self._cache_lock:
            if count > self.cache_rows:
                return False
            viewed = self._viewed
            while self._cached_rows + count > self.cache_rows:
                # Only as many of the least recently used as cover the shortfall: the
                # budget is full in the steady state, and copying every viewed handle on
                # each reservation cost a twelfth of the worker's time over 10,000 scopes.
                short = self._cached_rows + count - self.cache_rows
                victims: list[Handle] = []
                for other in viewed:
                    if other is not handle:
                        victims.append(other)
                        view = other.view
                        short -= len(view) if view is not None else 0
                        if short <= 0:
                            break
                freed = 0
                for other in victims:
                    dropped = other.drop_view()
                    if dropped is not None:
                        freed += len(dropped)
                        del viewed[other]
                self._cached_rows -= freed
                if not freed:
                    break  # what is left holds no view yet (being built): nothing to drop
            if self._cached_rows + count > self.cache_rows:
                return False
            self._cached_rows += count
            viewed[handle] = None
            viewed.move_to_end(handle)
            return True

    def _unreserve_rows(self, handle: Handle, count: int) -> None:
        """Give back rows reserved for a view that was not installed after all."""
        with self._cache_lock:
            self._cached_rows -= count
            if handle.view is None:
                self._viewed.pop(handle, None)

    def _release_view(self, handle: Handle, view: ScopeView | None = None) -> None:
        dropped = handle.drop_view(view)
        if dropped is not None:
            with self._cache_lock:
                self._cached_rows -= len(dropped)
                if handle.view is None:
                    self._viewed.pop(handle, None)
