"""Browsing memory from ``Memory`` (the Memory Hub's data): pages of scopes and records, a
record's history, a kind's counters summed by day, the runs a record reached, and the log of
those reaches the read path keeps.

These are the operator's views: they pass no scope gate (the hub that shows them has its own
login) and count nothing as used. A store that cannot browse (a third-party store without
``stores.base.BrowsingStore``'s methods) raises ``StoreUnsupported``; the read path then
logs no reaches.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Coroutine, Sequence

from scopemem.core.browse import CountTotal, Reach, RecordHistory, RecordPage, ScopePage
from scopemem.core.records import Kind, Record
from scopemem.core.requests import Request
from scopemem.errors import StoreUnsupported
from scopemem.stores.base import BrowsingStore, MemoryStore

__all__ = ["Browsing", "reaches_of"]

log = logging.getLogger("scopemem")


def reaches_of(records: Sequence[Record], request: Request, now: int) -> list[Reach]:
    """One reach per record a block showed to ``request``'s run; none when the request
    names no run (no run id, no thread key): a reach names who saw the record."""
    run_id = request.run_id or ""
    thread_key = request.thread_key or ""
    if not run_id and not thread_key:
        return []
    return [Reach(record_id=record.id, scope_key=record.scope_key, run_id=run_id,
                  thread_key=thread_key, at_ms=now) for record in records]


class Browsing:
    """The browsing calls over one store (``Memory.browsing``; ``Memory`` exposes each)."""

    def __init__(self, store: MemoryStore, reach_retention_days: int) -> None:
        self.store: BrowsingStore | None = (store if isinstance(store, BrowsingStore)
                                            else None)
        self._label = type(store).__name__
        self.reach_retention_days = reach_retention_days
        self._keeps_reaches = True  # False once the store said it cannot (an older worker)

    def log_shown(self, records: Sequence[Record], request: Request, now: int
                  ) -> Coroutine[None, None, None] | None:
        """What logs the reaches of a block shown to ``request``'s run, for the caller to
        run in the background (a failure is one warning); None when there is nothing to log
        (no run named, the log off, a store that cannot keep them)."""
        store = self.store
        reaches = reaches_of(records, request, now)
        if (store is None or not self.reach_retention_days or not reaches
                or not self._keeps_reaches):
            return None

        async def save() -> None:
            try:
                await store.log_reaches(reaches)
            except StoreUnsupported as exc:
                if self._keeps_reaches:  # once: asking again will not help
                    self._keeps_reaches = False
                    log.warning("[memory] reaches are not logged by this store (%s)", exc)
            except Exception as exc:
                log.warning("[memory] %d reach(es) not logged: %s", len(reaches), exc)

        return save()

    def _browsable(self) -> BrowsingStore:
        if self.store is None:
            raise StoreUnsupported(f"the store {self._label} cannot be browsed")
        return self.store

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        """Scopes holding records, sorted by key, active records or last write."""
        return await self._browsable().scope_page(kind=kind, sort=sort, descending=descending,
                                                  offset=offset, limit=limit)

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        """A scope's records of every status, newest first."""
        return await self._browsable().record_page(scope_key, kind=kind, status=status,
                                                   source=source, offset=offset, limit=limit)

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        return await self._browsable().record_history(scope_key, record_id)

    async def count_totals(self, kind: str, *, since_day: int = 0
                           ) -> builtins.list[CountTotal]:
        """The counters of every scope of ``kind`` from ``since_day`` on, summed by day and
        name by the store (with the largest one scope counted)."""
        return await self._browsable().read_count_totals(kind, since_day=since_day)

    async def reaches(self, *, record_id: str | None = None, run: str | None = None,
                      limit: int = 100) -> builtins.list[Reach]:
        """Which runs a record reached, or what one run (its id or thread key) was shown."""
        return await self._browsable().read_reaches(record_id=record_id, run=run,
                                                    limit=limit)
