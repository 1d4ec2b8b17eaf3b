"""The store of memory switched off: reads find nothing, writes keep nothing."""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence

from scopemem.core.records import Candidate, CountRow, Kind, Record, SweepResult, WriteCounts
from scopemem.stores.base import Hit, StoreSettings


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

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> NullStore:
        settings.unknown_options(())
        return cls()
