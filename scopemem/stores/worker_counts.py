"""The worker client's counters (``stores.base.CountingStore``): ``/counts`` and ``/stats``.

The store a worker serves counts its own writes, forgets and sweeps in their transactions;
what the client's host counted (reflection's offers and rejections, the records a prompt
showed) is sent to ``/counts``, already batched by the host (``stores.counting.CountBuffer``),
in bodies of at most ``MAX_COUNT_ROWS`` rows. ``read_counts`` is one ``/stats`` call. A
worker whose store keeps no counters answers 501, raised as ``StoreUnsupported``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scopemem.core.counters import DAY_MS, counter_name_problem
from scopemem.core.records import (
    MAX_COUNT_ROWS,
    MAX_STATS_SCOPES,
    CountRow,
    WireError,
    from_wire,
    to_wire,
)
from scopemem.core.scopes import scope_key_problem
from scopemem.errors import StoreError
from scopemem.stores.base import check_scope_key
from scopemem.stores.shared import counts as counting
from scopemem.stores.worker_transport import Command, listed, parsed

__all__ = ["WorkerCounts"]


class WorkerCounts:
    """``add_counts`` and ``read_counts``, sent through the transport's ``command``."""

    def __init__(self, command: Command) -> None:
        self._command = command

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        # Checked here first, so nothing is sent when one row would be refused.
        checked = counting.check_rows(rows)
        for start in range(0, len(checked), MAX_COUNT_ROWS):
            await self._command("/counts",
                                {"counts": to_wire(checked[start:start + MAX_COUNT_ROWS])})

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[CountRow]:
        if counting.no_scope_starts(prefix):
            return []
        payloads: list[dict[str, Any]] = []
        base: dict[str, Any] = {"since": max(since_day, 0) * DAY_MS}
        if prefix is not None:
            base["prefix"] = prefix
        keys: list[str] = []
        if scope_keys is None:
            payloads.append(base)
        else:
            keys = sorted({check_scope_key(key) for key in scope_keys})
            payloads.extend({**base, "scopeKeys": keys[start:start + MAX_STATS_SCOPES]}
                            for start in range(0, len(keys), MAX_STATS_SCOPES))

        def asked(item: Any) -> CountRow:
            # What this client shows a person: never a name or key it would refuse to send,
            # nor a scope it did not ask for.
            row = from_wire(item, CountRow)
            if (scope_key_problem(row.scope_key) or counter_name_problem(row.name)
                    or row.value < 0 or not counting.select_scope(
                        row.scope_key, None if scope_keys is None else keys, prefix)):
                raise WireError("a row it was not asked for or that is not valid")
            return row

        rows: list[CountRow] = []
        for payload in payloads:
            data = await self._command("/stats", payload)
            rows += parsed("/stats", "a row", asked, listed(data, "/stats", "rows"))
            if data.get("truncated") is True:
                raise StoreError("memory worker /stats: more rows than one answer carries;"
                                 " ask for fewer scopes or a later --since")
        return sorted(rows, key=lambda row: (row.scope_key, row.day, row.name))
