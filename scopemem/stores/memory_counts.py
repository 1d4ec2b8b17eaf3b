"""The in-process store's counters (``stores.base.CountingStore``): a dict of (scope key,
UTC day, name) → value, and their totals per kind, day and name (``CountTotals``, what the
hub's charts read), summed from it when read: the SQL stores keep them in a table.
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence

from scopemem.core.browse import CountTotal
from scopemem.core.records import CountRow
from scopemem.core.scopes import scope_kind
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared import counts as counting

__all__ = ["CountTotals", "InProcessCounts"]


class CountTotals:
    """The counters summed per kind, day and name, with the largest value one scope holds."""

    def __init__(self, counts: Mapping[tuple[str, int, str], int]) -> None:
        self._counts = counts

    def read(self, kind: str, since_day: int) -> builtins.list[CountTotal]:
        totals: dict[tuple[int, str], tuple[int, int]] = {}
        for (scope_key, day, name), value in self._counts.items():
            # A key without a colon is of no kind a reading may name, as a kind's range of
            # keys leaves it out.
            if day >= since_day and ":" in scope_key and scope_kind(scope_key) == kind:
                total, peak = totals.get((day, name), (0, 0))
                totals[(day, name)] = (total + value, max(peak, value))
        return [CountTotal(day=day, name=name, total=total, most=peak)
                for (day, name), (total, peak) in sorted(totals.items())]


class InProcessCounts:
    """The counters and their totals."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int, str], int] = {}
        self.totals = CountTotals(self._counts)

    def count(self, rows: Sequence[CountRow]) -> None:
        """Add checked ``rows`` (the store's own, or ``add_counts``')."""
        for row in rows:
            key = (row.scope_key, row.day, row.name)
            self._counts[key] = self._counts.get(key, 0) + row.value

    def drop(self, scope_key: str) -> None:
        """The scope was deleted: its counters go."""
        for key in [key for key in self._counts if key[0] == scope_key]:
            del self._counts[key]

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        self.count(counting.check_rows(rows))

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0
                          ) -> builtins.list[CountRow]:
        wanted = None if scope_keys is None else {check_scope_key(k) for k in scope_keys}
        return [CountRow(scope, day, name, value)
                for (scope, day, name), value in sorted(self._counts.items())
                if day >= since_day and counting.select_scope(scope, wanted, prefix)]
