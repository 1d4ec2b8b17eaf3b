"""The store of memory switched off: reads find nothing, writes keep nothing."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence

from scopemem.core.browse import CountTotal, Reach, RecordHistory, RecordPage, ScopePage
from scopemem.core.records import Candidate, CountRow, Kind, Record, SweepResult, WriteCounts
from scopemem.stores.base import Hit, StoreSettings
from scopemem.stores.browsing import (
    count_total_args,
    fit_reaches,
    reach_query,
    record_args,
    scope_args,
)


class NullStore:
    durable = False  # keeps nothing at all

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return []

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        return []

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        return 0

    async def write(
        self, scope_key: str, candidates: Sequence[Candidate], cap: int | None = None
    ) -> WriteCounts:
        return WriteCounts()

    async def list(
        self, scope_key: str, limit: int, query: str | None = None, kind: Kind | None = None
    ) -> list[Record]:
        return []

    async def forget(self, scope_key: str, record_id: str) -> bool:
        return False

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        return SweepResult(swept=0, ids=() if dry_run else None)

    async def close(self) -> None:
        return None

    # Memory off counts nothing, and says so by having nothing to read.
    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        return None

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0
                          ) -> builtins.list[CountRow]:
        return []

    # Browsing: nothing to show, nothing kept; the arguments are checked as everywhere.
    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        scope_args(kind, sort, descending, offset, limit)
        return ScopePage(total=0, rows=())

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        record_args(scope_key, kind, status, source, offset, limit)
        return RecordPage(total=0, rows=())

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        record_args(scope_key, None, None, None, 0, 1)
        return None

    async def read_count_totals(self, kind: str, *, since_day: int = 0
                                ) -> builtins.list[CountTotal]:
        count_total_args(kind, since_day)
        return []

    async def log_reaches(self, reaches: Sequence[Reach]) -> None:
        fit_reaches(reaches)

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> builtins.list[Reach]:
        reach_query(record_id, run, limit)
        return []

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> NullStore:
        settings.unknown_options(())
        return cls()
