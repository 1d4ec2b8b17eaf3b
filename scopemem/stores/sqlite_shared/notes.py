"""Use counts in the shared-file store, on the event loop's side (``usage.py`` holds them
per shard): noting each use counted into the scope's records in memory (``copies.RowCopy``)
and into a log of recent uses that catches up records copied before them, and saving them
in the background, one transaction per shard.

``SharedSqliteStore`` holds one ``UseNotes``, built with the parts it uses.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from scopemem.stores.shared.cache import PostingsCache
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.copies import MAX_KEPT_USES, RowCopy
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["UseNotes"]

log = logging.getLogger("scopemem.stores.sqlite")

#: Uses noted per shard that records copied before them can still be given.
ADD_LOG = 4_096

T = TypeVar("T")


class UseNotes:
    """The use counts of ``SharedSqliteStore`` on the event loop's side: ``row_copies`` and
    ``writing`` are the store's own (mutated there, read here)."""

    def __init__(self, shards: Shards, pools: ShardPools, uses: PendingUses,
                 copies: PostingsCache, row_copies: dict[str, RowCopy],
                 writing: dict[str, int], *, synchronous: str, usage_flush_ms: int) -> None:
        self._shards = shards
        self._pools = pools
        self._uses = uses
        self._copies = copies
        self._row_copies = row_copies
        self._writing = writing
        self._synchronous = synchronous
        self._usage_flush_ms = usage_flush_ms
        # Per shard: calls counting uses on the pool under way; the last uses noted (their
        # number, scope, seqs, time), replayed into records copied before them; the highest
        # number the log has let go of.
        self._inflight = [0] * shards.count
        self._adds: list[deque[tuple[int, str, tuple[int, ...], int]]] = [
            deque(maxlen=ADD_LOG) for _ in range(shards.count)]
        self._log_floor = [0] * shards.count
        self._saver: asyncio.Task[None] | None = None

    def note(self, shard: int, scope_key: str, seqs: Sequence[int], now: int,
             added: int) -> None:
        """Uses counted (numbered ``added``), which the scope's records in memory must
        show, and so must records copied before this and installed after it (the log)."""
        if not added:
            return
        self.note_log(shard, scope_key, seqs, now, added)
        rows = self._row_copies.get(scope_key)
        if rows is None:
            return
        fits = rows.note(seqs, now, added)
        if self.foldable(shard, scope_key):
            # Every use numbered so far has been noted, and no write of the scope has read
            # its rows: they can hold all of them (at once, so a read of a record need not
            # add its kept uses up every time).
            rows.fold(self._uses.mark(shard))
        elif not fits and rows.kept > MAX_KEPT_USES * 16:
            # Never a moment to fold them in: both copies go, to be read afresh.
            self._row_copies.pop(scope_key, None)
            self._copies.discard(scope_key, rows.generation)

    def note_log(self, shard: int, scope_key: str, seqs: Sequence[int], now: int,
                 added: int) -> None:
        """Log uses numbered ``added`` for records copied before them (``HeldRows.copy``)."""
        adds = self._adds[shard]
        if len(adds) == adds.maxlen:
            self._log_floor[shard] = max(self._log_floor[shard], adds[0][0])
        adds.append((added, scope_key, tuple(seqs), now))

    def foldable(self, shard: int, scope_key: str) -> bool:
        """Whether every use of the shard numbered so far has been noted, and no write of
        the scope has read its rows: its records in memory can hold all of them."""
        return not self._inflight[shard] and not self._writing.get(scope_key)

    async def counting(self, shard: int, fn: Callable[..., T], *args: Any) -> T | None:
        """``read`` of a call that may count uses on the pool: while it runs, uses of the
        shard may be numbered and not noted yet (``note``)."""
        self._inflight[shard] += 1
        try:
            done: T | None = await self._pools.read(shard, fn, *args)
            return done
        finally:
            self._inflight[shard] -= 1

    def schedule_save(self) -> None:
        if self._saver is None or self._saver.done():
            self._saver = asyncio.get_running_loop().create_task(self._save_later())

    async def _save_later(self) -> None:
        await asyncio.sleep(self._usage_flush_ms / 1000)
        await self.save()

    async def save(self) -> None:
        for shard in self._uses.shards():
            try:
                # Its move, if any, is noted as it commits: the copies hold every use
                # saved (``copies.RowCopy``).
                await self._pools.write_moved(shard, self._uses.save, shard,
                                               self._synchronous)
            except Exception as exc:  # kept pending for the next save
                log.warning("sqlite store: %s: use counts not saved yet: %s",
                            self._shards.path(shard), sqlite_sql.describe(exc))
        if len(self._uses) and not self._pools.closed:
            self.schedule_save()

    def behind(self, shard: int, rows: RowCopy) -> bool:
        """Whether uses noted since ``rows`` were read can no longer be replayed into them."""
        return self._log_floor[shard] > rows.mark

    def replay(self, shard: int, scope_key: str, rows: RowCopy) -> None:
        """Note in ``rows`` the uses numbered after they were read, noted before they
        arrived."""
        for added, key, seqs, when in self._adds[shard]:
            if key == scope_key:
                rows.note(seqs, when, added)

    def cancel_save(self) -> None:
        """Cancel the save scheduled, if any (``save`` runs at close)."""
        saver, self._saver = self._saver, None
        if saver is not None and not saver.done():
            saver.cancel()

