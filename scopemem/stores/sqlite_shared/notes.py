"""Use counts in the shared-file store, on the event loop's side (``usage.py`` holds them
per shard): noting each use counted into the scope's records in memory (``copies.RowCopy``)
and into a log of recent uses that catches up records copied before them, and saving them
in the background, one transaction per shard.

``SharedSqliteStore`` provides the attributes used; these are its methods, kept apart so
each module holds one job.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from scopemem.stores.shared.cache import PostingsCache
from scopemem.stores.sqlite_shared import copies
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.commits import Moves
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["UseNotes"]

log = logging.getLogger("scopemem.stores.sqlite")

T = TypeVar("T")


class UseNotes:
    """The use-count methods of ``SharedSqliteStore``."""

    synchronous: str
    usage_flush_ms: int
    _closed: bool
    _copies: PostingsCache
    _row_copies: dict[str, copies.RowCopy]
    _uses: PendingUses
    _inflight: list[int]
    _adds: list[deque[tuple[int, str, tuple[int, ...], int]]]
    _log_floor: list[int]
    _writing: dict[str, int]
    _moves: Moves
    _shards: Any
    _saver: asyncio.Task[None] | None
    _read: Callable[..., Any]
    _write_moved: Callable[..., Any]

    def _note(self, shard: int, scope_key: str, seqs: Sequence[int], now: int,
              added: int) -> None:
        """Uses counted (numbered ``added``), which the scope's records in memory must
        show, and so must records copied before this and installed after it (the log)."""
        if not added:
            return
        self._note_log(shard, scope_key, seqs, now, added)
        rows = self._row_copies.get(scope_key)
        if rows is None:
            return
        fits = rows.note(seqs, now, added)
        if self._foldable(shard, scope_key):
            # Every use numbered so far has been noted, and no write of the scope has read
            # its rows: they can hold all of them (at once, so a read of a record need not
            # add its kept uses up every time).
            rows.fold(self._uses.mark(shard))
        elif not fits and rows.kept > copies.MAX_KEPT_USES * 16:
            # Never a moment to fold them in: both copies go, to be read afresh.
            self._row_copies.pop(scope_key, None)
            self._copies.discard(scope_key, rows.generation)

    def _note_log(self, shard: int, scope_key: str, seqs: Sequence[int], now: int,
                  added: int) -> None:
        """Log uses numbered ``added`` for records copied before them (``_copy``)."""
        adds = self._adds[shard]
        if len(adds) == adds.maxlen:
            self._log_floor[shard] = max(self._log_floor[shard], adds[0][0])
        adds.append((added, scope_key, tuple(seqs), now))

    def _foldable(self, shard: int, scope_key: str) -> bool:
        """Whether every use of the shard numbered so far has been noted, and no write of
        the scope has read its rows: its records in memory can hold all of them."""
        return not self._inflight[shard] and not self._writing.get(scope_key)

    async def _counting(self, shard: int, fn: Callable[..., T], *args: Any) -> T | None:
        """``_read`` of a call that may count uses on the pool: while it runs, uses of the
        shard may be numbered and not noted yet (``_note``)."""
        self._inflight[shard] += 1
        try:
            done: T | None = await self._read(shard, fn, *args)
            return done
        finally:
            self._inflight[shard] -= 1

    def _schedule_save(self) -> None:
        if self._saver is None or self._saver.done():
            self._saver = asyncio.get_running_loop().create_task(self._save_later())

    async def _save_later(self) -> None:
        await asyncio.sleep(self.usage_flush_ms / 1000)
        await self._save()

    async def _save(self) -> None:
        for shard in self._uses.shards():
            try:
                # Its move, if any, is noted as it commits: the copies hold every use
                # saved (``copies.RowCopy``).
                await self._write_moved(shard, self._uses.save, shard, self.synchronous)
            except Exception as exc:  # kept pending for the next save
                log.warning("sqlite store: %s: use counts not saved yet: %s",
                            self._shards.path(shard), sqlite_sql.describe(exc))
        if len(self._uses) and not self._closed:
            self._schedule_save()

    async def flush(self) -> None:
        """Save the use counts not saved yet, now (``close`` saves them too)."""
        await self._save()

