"""Counting from the host's side: the ``CountBuffer`` the read path and reflection add to
(what only the host sees; the store counts its own changes), and ``read_stats``, the one
call every surface reads the counters with. Adding is a dictionary update, so the read path
pays no I/O for it; the sums go to the store in one ``add_counts`` call per ``flush_ms``
and at ``flush`` / ``close``. A failed save costs those counts and one warning, never the run.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Collection, Mapping, Sequence

import attrs

from scopemem.core.counters import (
    INJECTED_KEYWORD,
    INJECTED_WINDOW,
    day_of,
    group_rows,
)
from scopemem.core.records import CountRow, Record
from scopemem.errors import StoreUnsupported
from scopemem.stores.base import Clock, CountingStore, MemoryStore

__all__ = ["DEFAULT_COUNT_FLUSH_MS", "CountBuffer", "Stats", "read_stats"]

log = logging.getLogger("scopemem")

DEFAULT_COUNT_FLUSH_MS = 1000


class CountBuffer:
    """Counts added per (scope, day, name), handed to the store in batches. Without a
    counting store it keeps nothing."""

    def __init__(self, store: MemoryStore, clock: Clock,
                 flush_ms: int = DEFAULT_COUNT_FLUSH_MS) -> None:
        self.store: CountingStore | None = store if isinstance(store, CountingStore) else None
        self.clock = clock
        self.flush_ms = flush_ms
        self._pending: dict[tuple[str, int, str], int] = {}
        self._saver: asyncio.Task[None] | None = None

    def add(self, scope_key: str, deltas: Mapping[str, int]) -> None:
        """Count ``deltas`` for the scope today; saved within ``flush_ms``."""
        if self.store is None:
            return
        day = day_of(self.clock())
        pending = self._pending
        for name, n in deltas.items():
            if n > 0:
                key = (scope_key, day, name)
                pending[key] = pending.get(key, 0) + n
        if pending and (self._saver is None or self._saver.done()):
            self._saver = asyncio.get_running_loop().create_task(self._save_later())

    def count_injected(self, shown: Sequence[Record], window_ids: Collection[str]) -> None:
        """The records one block showed, per scope: the repository window's and the keyword
        hits'."""
        per_scope: defaultdict[str, Counter[str]] = defaultdict(Counter)
        for record in shown:
            per_scope[record.scope_key][INJECTED_WINDOW if record.id in window_ids
                                        else INJECTED_KEYWORD] += 1
        for scope_key, counts in per_scope.items():
            self.add(scope_key, counts)

    async def _save_later(self) -> None:
        await asyncio.sleep(self.flush_ms / 1000)
        await self.flush()

    async def flush(self) -> None:
        """Save everything pending now. Never raises: a failure is one warning."""
        store = self.store
        rows = [CountRow(scope, day, name, n)
                for (scope, day, name), n in sorted(self._pending.items())]
        self._pending = {}
        if store is None or not rows:
            return
        try:
            await store.add_counts(rows)
        except asyncio.CancelledError:
            raise
        except StoreUnsupported as exc:
            self.store = None  # a worker whose store keeps no counters: stop asking
            log.warning("[memory] counters are not kept by this store (%s)", exc)
        except Exception as exc:
            log.warning("[memory] %d counter(s) not saved: %s", len(rows), exc)

    async def close(self) -> None:
        saver, self._saver = self._saver, None
        if saver is not None and not saver.done():
            saver.cancel()
        await self.flush()


@attrs.frozen
class Stats:
    """What ``read_stats`` found. ``counting`` is False when the store keeps no counters
    (a third-party store without ``CountingStore``): then ``rows`` is empty and says
    nothing about what happened."""

    counting: bool
    since_day: int
    rows: tuple[CountRow, ...] = ()

    def by(self, group: str) -> dict[str, dict[str, int]]:
        """Counters summed per ``scope``, ``kind`` or ``day``."""
        return group_rows(self.rows, group)


async def read_stats(store: MemoryStore, *, scope: str | None = None, kind: str | None = None,
                     since_day: int = 0) -> Stats:
    """The counters of one scope (``scope``), of every scope of a kind (``kind``), or of
    all, on ``since_day`` and later. Raises ``StoreError`` when the store cannot answer."""
    if not isinstance(store, CountingStore):
        return Stats(False, since_day)
    try:
        rows = await store.read_counts(None if scope is None else [scope],
                                       prefix=None if kind is None else f"{kind}:",
                                       since_day=since_day)
    except StoreUnsupported:
        return Stats(False, since_day)
    return Stats(True, since_day, tuple(rows))
