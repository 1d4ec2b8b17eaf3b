"""The in-process store's browsing: pages of its dict of scopes (the very objects it
writes) and its reaches in a list, pruned past the retention as calls log more. The store
tells it when a scope's newest record was written (``wrote``) and when a scope is deleted
(``dropped``).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence

from scopemem.core.browse import (
    HISTORY_REACHES,
    CountTotal,
    Reach,
    RecordHistory,
    RecordPage,
    ScopePage,
    history_of,
    names_person,
    scope_order,
    select_reaches,
    summaries,
)
from scopemem.core.records import Kind, Record
from scopemem.stores.base import Clock, retention_cutoff
from scopemem.stores.browsing import (
    check_reach_retention_days,
    count_total_args,
    fit_reaches,
    reach_query,
    record_args,
    scope_args,
)
from scopemem.stores.memory_counts import CountTotals

__all__ = ["InProcessBrowsing"]


class InProcessBrowsing:
    """Browsing over ``scopes`` (scope key → rows in seq order, the store's own dict)."""

    def __init__(self, scopes: Mapping[str, Sequence[Record]], totals: CountTotals,
                 clock: Clock, reach_retention_days: int) -> None:
        self._scopes = scopes
        self._totals = totals
        self._clock = clock
        self.reach_retention_days = check_reach_retention_days(reach_retention_days)
        # When each scope's newest record was written (the highest creation time of the
        # records written or imported into it), as the SQL stores keep it per scope.
        self._last_write: dict[str, int] = {}
        self._reaches: list[Reach] = []  # in the order logged, so oldest first

    def wrote(self, scope_key: str, created_at: int) -> None:
        held = self._last_write.get(scope_key)
        if held is None or created_at > held:
            self._last_write[scope_key] = created_at

    def last_write(self, scope_key: str) -> int | None:
        """The scope's newest record's creation time (None: no record)."""
        return self._last_write.get(scope_key)

    def dropped(self, scope_key: str) -> None:
        """The scope was deleted: its last write and its reaches go with its records."""
        self._last_write.pop(scope_key, None)
        self._reaches = [reach for reach in self._reaches if reach.scope_key != scope_key]

    def scrub(self, scope_key: str, person: str) -> None:
        """Delete the scope's reaches that name ``person`` (``names_person``)."""
        self._reaches = [reach for reach in self._reaches
                         if reach.scope_key != scope_key
                         or not names_person(reach.run_id, reach.thread_key, person)]

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        kind, sort, descending, offset, limit = scope_args(kind, sort, descending, offset,
                                                           limit)
        rows = summaries(self._scopes, self._last_write, kind)
        rows.sort(key=scope_order(sort), reverse=descending)
        return ScopePage(total=len(rows), rows=tuple(rows[offset:offset + limit]))

    async def read_count_totals(self, kind: str, *, since_day: int = 0
                                ) -> builtins.list[CountTotal]:
        kind, since_day = count_total_args(kind, since_day)
        return self._totals.read(kind, since_day)

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        key, kind_, status_, source_, offset, limit = record_args(
            scope_key, kind, status, source, offset, limit)
        chosen = [record for record in reversed(self._scopes.get(key, ()))
                  if (kind_ is None or record.kind == kind_)
                  and (status_ is None or record.status == status_)
                  and (source_ is None or record.source == source_)]
        return RecordPage(total=len(chosen), rows=tuple(chosen[offset:offset + limit]))

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        key, *_rest = record_args(scope_key, None, None, None, 0, 1)
        rows = self._scopes.get(key, ())
        record = next((row for row in rows if row.id == record_id), None)
        if record is None:
            return None
        reaches = await self.read_reaches(record_id=record_id, limit=HISTORY_REACHES)
        return history_of(record, rows, reaches)

    async def log_reaches(self, reaches: Sequence[Reach]) -> None:
        fitted = fit_reaches(reaches)
        if self.reach_retention_days == 0:
            return
        kept = self._reaches
        kept.extend(fitted)
        cutoff = retention_cutoff(self._clock(), self.reach_retention_days)
        if kept and kept[0].at_ms <= cutoff:
            # The oldest is first (logged in time order), so most calls look at one reach.
            self._reaches = [reach for reach in kept if reach.at_ms > cutoff]

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> builtins.list[Reach]:
        record_id, run, limit = reach_query(record_id, run, limit)
        after = retention_cutoff(self._clock(), self.reach_retention_days)
        return select_reaches(self._reaches, record_id, run, limit, after)
