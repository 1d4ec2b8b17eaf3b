"""Saving use counts in the background: one pass on the write pool for many retrievals.

A retrieval (from a view or through SQL) returns as soon as its bumps are pending and its
scope is marked dirty. The first dirty scope schedules a save ``usage_flush_ms`` later (a
second by default): one job on the write pool that commits, scope by scope, every bump
pending by then, in one transaction and one ``UPDATE`` per scope. Nothing in the store
reads around them: every retrieval and listing applies the pending bumps to the rows it
reads, and a write, forget or sweep commits them at the start of its own transaction.
``flush`` saves them at once, ``close`` saves them too.

Why one job on the pool, and never a commit on the event loop: a commit can wait for the
disk even when it does not sync the records. The first commit into a fresh or fully
checkpointed WAL syncs the log's header (and, for a new log file, its directory), and a
commit that fills the log to its checkpoint size runs a checkpoint, which syncs the database
file. When thousands of scopes take turns, nearly every save is such a first commit: on the
loop, those syncs held every client (a third of the requests per second over 1,000 scopes
than over 10). On a pool thread they hold only that thread: SQLite runs without the GIL. One
job for every dirty scope of the window costs one hand-off to the pool, however many scopes
it saves.

Saves are committed at NORMAL when the store runs at FULL or EXTRA: a process killed
outright loses the use counts of its last ``usage_flush_ms``, never a record.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from scopemem.errors import StoreError
from scopemem.stores.sqlite import sql
from scopemem.stores.sqlite.base import StoreBase
from scopemem.stores.sqlite.handles import Handle

log = logging.getLogger("scopemem.stores.sqlite")

# How long after a retrieval its usage bumps are saved, at most. A save costs about 10 us
# per row it updates, and a row retrieved many times in one window is updated once. Under
# 32 concurrent clients over eight scopes of 300 records, saving every 50 ms served about
# half again as many retrievals as a commit per retrieval that the retrieval waited for,
# and saving every second about a fifth more than that. What it risks is only that: a
# process killed outright loses the use counts of its last second (never a record).
DEFAULT_USAGE_FLUSH_MS = 1000
USAGE_FLUSH_MS_MAX = 60_000


class Usage(StoreBase):
    """The background saves of the pending usage bumps."""

    # Scopes with bumps the next background save commits (scope key → its handle).
    _dirty: dict[str, Handle]
    _saver: asyncio.Task[None] | None  # the background save scheduled or under way

    def _flush_soon(self, scope_key: str, handle: Handle) -> None:
        """Have the handle's pending bumps saved within ``usage_flush_ms``: by the save
        scheduled already, or by one scheduled now."""
        self._dirty[scope_key] = handle
        loop = asyncio.get_running_loop()
        saver = self._saver
        if saver is None or saver.done() or saver.get_loop() is not loop:
            self._saver = loop.create_task(self._save_in_background())

    async def _save_in_background(self) -> None:
        """Every ``usage_flush_ms`` while scopes are dirty: save them all in one job on the
        write pool. A scope whose save failed (another process held its write lock past
        ``busy_timeout_ms``, say) keeps its bumps for the next round."""
        try:
            while self._dirty:
                await asyncio.sleep(self.usage_flush_ms / 1000)
                dirty, self._dirty = self._dirty, {}
                try:
                    failed = await self._run("write", self._commit_all, list(dirty.items()),
                                             True)
                except Exception as exc:
                    if self._closed:
                        return  # closing saves them
                    failed = [(key, handle, sql.describe(exc)) for key, handle in dirty.items()]
                for scope_key, handle, reason in failed:
                    if not reason:  # a write's carry is on its way: saved next round
                        self._dirty.setdefault(scope_key, handle)
                        continue
                    log.warning("sqlite store: %s: use counts of %d record(s) not saved yet,"
                                " kept for the next save: %s", handle.path,
                                len(handle.pending), reason)
                    self._dirty.setdefault(scope_key, handle)
        finally:
            if self._saver is asyncio.current_task():
                self._saver = None

    def _commit_all(self, handles: Sequence[tuple[str, Handle]], later: bool = False
                    ) -> list[tuple[str, Handle, str]]:
        """On the write pool: commit each scope's pending bumps in a transaction of its own
        (waiting for whatever holds its connection now). The scopes whose commit failed,
        with why; their bumps are pending again. With ``later``, a scope whose view a write
        is carrying on is left for the next round (reason ""): the carry applies the
        pending bumps to the rows it read back, which must still be pending then."""
        failed: list[tuple[str, Handle, str]] = []
        for scope_key, handle in handles:
            with handle.lock:
                if handle.closed or not handle.pending:
                    continue  # a closed handle committed its own; a write took them
                if later and handle.carry is not None:
                    failed.append((scope_key, handle, ""))
                    continue
                try:
                    with self._transaction(handle.conn, relaxed=True, bumps=handle):
                        pass
                except sql.apsw_module().Error as exc:
                    failed.append((scope_key, handle, sql.describe(exc)))
        return failed

    async def _save_all_now(self) -> None:
        """``flush``: commit every open scope's pending bumps now, on the write pool. Returns
        once every bump pending when it was called is committed, including those a save
        under way had taken (its commit holds the scope's connection until it is done)."""
        with self._cache_lock:
            handles = list(self._handles.items())
        failed = await self._run("write", self._commit_all, handles)
        if failed:
            _scope_key, handle, reason = failed[0]
            raise StoreError(f"sqlite store: {handle.path}: {reason}")
