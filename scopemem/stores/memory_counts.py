"""The in-process store's counters (``stores.base.CountingStore``): a dict of (scope key,
UTC day, name) → value, and their totals per kind, day and name with the largest value one
scope holds (``CountTotals``, what the hub's charts read; the SQL stores keep them in a
table), both changed in the same step.
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


def _kind(scope_key: str) -> str:
    """The kind a reading of count totals finds the key's counters under: '' (no kind a
    reading may name) for a key without a colon, as a kind's range of keys leaves it out."""
    return scope_kind(scope_key) if ":" in scope_key else ""


class CountTotals:
    """The store's counters summed per kind, day and name, with the largest value one scope
    holds, kept as the store changes a counter (the SQL stores keep them in a table)."""

    def __init__(self) -> None:
        self._totals: dict[tuple[str, int, str], tuple[int, int]] = {}

    def added(self, scope_key: str, day: int, name: str, delta: int, value: int) -> None:
        """A scope's counter grew by ``delta`` to ``value``."""
        key = (_kind(scope_key), day, name)
        total, peak = self._totals.get(key, (0, 0))
        self._totals[key] = (total + delta, max(peak, value))

    def deleted(self, gone: Mapping[tuple[str, int, str], int],
                kept: Mapping[tuple[str, int, str], int]) -> None:
        """``gone`` counters (of one scope) were deleted; ``kept`` are the store's others. A
        peak one of them held is found again among ``kept``."""
        for (scope_key, day, name), value in gone.items():
            kind = _kind(scope_key)
            total, peak = self._totals.pop((kind, day, name))
            if peak <= value:
                peak = max((held for (key, d, n), held in kept.items()
                            if d == day and n == name and _kind(key) == kind), default=0)
            if total > value:
                self._totals[(kind, day, name)] = (total - value, peak)

    def read(self, kind: str, since_day: int) -> builtins.list[CountTotal]:
        return [CountTotal(day=day, name=name, total=total, most=peak)
                for (held, day, name), (total, peak) in sorted(self._totals.items())
                if held == kind and day >= since_day]


class InProcessCounts:
    """The counters and their totals."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, int, str], int] = {}
        self.totals = CountTotals()

    def count(self, rows: Sequence[CountRow]) -> None:
        """Add checked ``rows`` (the store's own, or ``add_counts``')."""
        counts = self._counts
        for row in rows:
            key = (row.scope_key, row.day, row.name)
            counts[key] = value = counts.get(key, 0) + row.value
            self.totals.added(row.scope_key, row.day, row.name, row.value, value)

    def drop(self, scope_key: str) -> None:
        """The scope was deleted: its counters go, and their share of the totals."""
        gone = {key: self._counts.pop(key) for key in
                [key for key in self._counts if key[0] == scope_key]}
        self.totals.deleted(gone, self._counts)

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        self.count(counting.check_rows(rows))

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0
                          ) -> builtins.list[CountRow]:
        wanted = None if scope_keys is None else {check_scope_key(k) for k in scope_keys}
        return [CountRow(scope, day, name, value)
                for (scope, day, name), value in sorted(self._counts.items())
                if day >= since_day and counting.select_scope(scope, wanted, prefix)]
