"""Saving use counts in the background: one commit for many retrievals.

A retrieval (from a view or through SQL) returns as soon as its bumps are pending; the
first bump of a scope schedules a save ``usage_flush_ms`` later (a second by default), which
commits every bump pending by then in one transaction and one ``UPDATE`` (on the event loop
when it can and the save is small, else on the write pool). Nothing in the store reads
around them: every retrieval and listing applies the pending bumps to the rows it reads,
and a write, forget or sweep commits them at the start of its own transaction. ``flush``
saves them at once, ``close`` saves them too. Saves are committed at NORMAL when the store
runs at FULL or EXTRA: a process killed outright loses the use counts of its last
``usage_flush_ms``, never a record.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from scopemem.errors import StoreError
from scopemem.stores.sqlite import files, sql
from scopemem.stores.sqlite.base import StoreBase
from scopemem.stores.sqlite.handles import Handle

log = logging.getLogger("scopemem.stores.sqlite")

# How long a bump commit keeps trying the event loop while a pool thread holds the scope's
# connection (a retrieval through SQL takes a millisecond or two) before queuing on the pool.
_LOOP_COMMIT_PATIENCE = 0.05
# The most rows a save updates on the event loop (about 4 ms of it); a larger one runs on
# the write pool, so a big scope read hard never stalls the loop for long.
_LOOP_SAVE_ROWS = 400
# How long after a retrieval its usage bumps are saved, at most. A save costs about 10 us
# per row it updates, and a row retrieved many times in one window is updated once. Under
# 32 concurrent clients over eight scopes of 300 records, saving every 50 ms served about
# half again as many retrievals as a commit per retrieval that the retrieval waited for,
# and saving every second about a fifth more than that. What it risks is only that: a
# process killed outright loses the use counts of its last second (never a record).
DEFAULT_USAGE_FLUSH_MS = 1000
USAGE_FLUSH_MS_MAX = 60_000


class Usage(StoreBase):
    """The background saves of the pending usage bumps, and the checkpoints they queue."""

    def _commit_pending(self, handle: Handle) -> None:
        """Commit the handle's pending bumps, if any (a closed handle committed its own)."""
        with handle.lock:
            if handle.closed or not handle.pending:
                return
            try:
                with self._transaction(handle.conn, relaxed=True, bumps=handle):
                    pass
            except sql.apsw_module().Error as exc:
                raise StoreError(f"sqlite store: {handle.path}: {sql.describe(exc)}") from exc

    def _flush_soon(self, scope_key: str, handle: Handle) -> None:
        """Have the handle's pending bumps saved within ``usage_flush_ms``, unless a save is
        scheduled already (it will take these bumps too)."""
        loop = asyncio.get_running_loop()
        flush = handle.flush
        if flush is None or flush.get_loop() is not loop:
            handle.flush = loop.create_task(self._flush(scope_key, handle))

    async def _flush(self, scope_key: str, handle: Handle) -> None:
        """Wait ``usage_flush_ms``, then save every bump pending by then: one commit for all
        the retrievals of the scope in that time."""
        try:
            await asyncio.sleep(self.usage_flush_ms / 1000)
            await self._save_bumps(scope_key, handle)
        except Exception as exc:
            if not (self._closed or handle.closed):  # closing saves them
                log.warning("sqlite store: %s: use counts of %d record(s) not saved"
                            " yet, kept for the next save: %s", handle.path, len(handle.pending),
                            sql.describe(exc))
            return
        finally:
            if handle.flush is asyncio.current_task():
                handle.flush = None
        if handle.pending and not handle.closed:  # counted during a save on the pool
            self._flush_soon(scope_key, handle)

    async def _save_bumps(self, scope_key: str, handle: Handle) -> None:
        """Commit the handle's pending bumps: on the event loop when that needs no waiting,
        else on the write pool. Returns once every bump pending when it was called is
        committed, including those a commit already under way on the pool has taken."""
        if handle.closed:
            return
        entry = self._writers.get(scope_key)
        # A write, or a save on the pool, under way or queued: commit behind it, even with
        # nothing pending now (it may have taken the bumps and not committed them yet).
        writing = entry is not None and entry[0].locked()
        if not (writing or handle.pending):
            return
        outcome: bool | None = False
        if not writing and len(handle.pending) <= _LOOP_SAVE_ROWS:
            loop = asyncio.get_running_loop()
            give_up = loop.time() + _LOOP_COMMIT_PATIENCE
            outcome = self._commit_on_loop(scope_key, handle)
            while outcome is None and loop.time() < give_up:
                # A pool thread holds the connection for a moment (a retrieval through SQL,
                # a view being built): try again shortly rather than queue a thread behind.
                await asyncio.sleep(0.001)
                outcome = self._commit_on_loop(scope_key, handle)
        if not outcome:
            async with self._writer(scope_key):
                await self._run("write", self._commit_pending, handle)

    def _commit_on_loop(self, scope_key: str, handle: Handle) -> bool | None:
        """Commit the pending bumps right here on the event loop when that needs no waiting
        at all: nobody holds the connection or is queued to write to the scope, and no other
        connection holds the file's write lock. True when committed; None when a pool thread
        holds the connection right now (the caller may try again); False otherwise: the
        caller commits on the write pool.

        A save writes to the WAL without syncing it: about 10 us of SQLite work per row, at
        most ``_LOOP_SAVE_ROWS`` rows here; handing it to a thread costs more than that in
        GIL hand-offs, each of which can wait for the event loop's switch interval. The one
        slow part a commit can bring, the WAL checkpoint (which syncs), is moved off the
        loop: the commit runs with a WAL hook of its own (which turns SQLite's
        auto-checkpoint off for it), and when the log has reached the auto-checkpoint size a
        checkpoint is queued on the pool."""
        entry = self._writers.get(scope_key)
        if entry is not None and entry[0].locked():
            return False
        if not handle.lock.acquire(blocking=False):
            return None
        try:
            conn = handle.conn
            if handle.closed or conn is None:
                return False
            apsw = sql.apsw_module()
            wal_pages = 0

            def note_wal_pages(_conn: Any, _name: str, pages: int) -> int:
                nonlocal wal_pages
                wal_pages = pages
                return apsw.SQLITE_OK

            conn.set_busy_timeout(0)
            conn.set_wal_hook(note_wal_pages)
            try:
                with self._transaction(conn, relaxed=True, bumps=handle):
                    pass
            except apsw.Error:  # busy, or a real failure the pool's attempt will report
                return False
            finally:
                conn.wal_autocheckpoint(files.WAL_AUTOCHECKPOINT_PAGES)
                conn.set_busy_timeout(self.busy_timeout_ms)
        finally:
            handle.lock.release()
        if wal_pages >= files.WAL_AUTOCHECKPOINT_PAGES:
            self._checkpoint_soon(handle)
        return True

    def _checkpoint_soon(self, handle: Handle) -> None:
        """Checkpoint the scope's WAL on the write pool, as SQLite's auto-checkpoint would
        have done after the commit (a passive one), unless one is queued already."""
        if handle.checkpoint is not None:
            return
        handle.checkpoint = asyncio.get_running_loop().create_task(self._checkpoint(handle))

    async def _checkpoint(self, handle: Handle) -> None:
        try:
            await self._run("write", self._checkpoint_now, handle.path)
        except Exception as exc:  # the next commit's checkpoint tries again
            if not self._closed:  # closing checkpoints the log anyway
                log.warning("sqlite store: %s: WAL checkpoint failed: %s", handle.path,
                            sql.describe(exc))
        finally:
            handle.checkpoint = None

    @staticmethod
    def _checkpoint_now(path: str) -> None:
        """A passive checkpoint on a connection of its own: it neither holds the scope's
        connection nor blocks its writers, so bump commits go on while it syncs the file."""
        conn = files.connect(path)
        try:
            # A connection learns the file is in WAL mode from its first read; until then
            # a checkpoint does nothing.
            conn.execute("PRAGMA schema_version").fetchall()
            conn.wal_checkpoint()
        finally:
            conn.close()
