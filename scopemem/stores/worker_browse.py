"""The worker client's browsing, by the worker's routes (``worker_aiohttp/browsing.py``).
Arguments are checked first, by every store's rules, so nothing is sent the worker would
refuse; an answer not well formed, or with a record of another scope, is a ``StoreError``.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from scopemem.core.browse import (
    CountTotal,
    Reach,
    RecordHistory,
    RecordPage,
    ScopePage,
    reach_from_wire,
    reach_to_wire,
    summary_from_wire,
    total_from_wire,
)
from scopemem.core.records import Kind, Record
from scopemem.errors import StoreError
from scopemem.stores.browsing import (
    count_total_args,
    fit_reaches,
    reach_query,
    record_args,
    scope_args,
)
from scopemem.stores.worker_transport import Command, in_scope, listed, parsed, whole_number

__all__ = ["WorkerBrowsing"]


def _records(items: Sequence[Any], scope_key: str, route: str) -> tuple[Record, ...]:
    return tuple(parsed(route, "a record", in_scope(scope_key), items))


def _given(**values: Any) -> dict[str, Any]:
    """A request's body: the values given (an enum's as its value), None left out."""
    return {name: getattr(value, "value", value) for name, value in values.items()
            if value is not None}


class WorkerBrowsing:
    """The browsing calls, sent through the transport's ``command``."""

    def __init__(self, command: Command) -> None:
        self._command = command

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        kind, sort, descending, offset, limit = scope_args(kind, sort, descending, offset,
                                                           limit)
        route = "/scope-page"
        data = await self._command(route, _given(kind=kind, sort=sort, descending=descending,
                                                 offset=offset, limit=limit))
        return ScopePage(total=whole_number(data, route, "total"), rows=tuple(parsed(
            route, "a scope", summary_from_wire, listed(data, route, "scopes"))))

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        key, kind_, status_, source_, offset, limit = record_args(
            scope_key, kind, status, source, offset, limit)
        route = "/record-page"
        data = await self._command(route, _given(scopeKey=key, kind=kind_, status=status_,
                                                 source=source_, offset=offset, limit=limit))
        return RecordPage(total=whole_number(data, route, "total"),
                          rows=_records(listed(data, route, "records"), key, route))

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        key, *_rest = record_args(scope_key, None, None, None, 0, 1)
        if not isinstance(record_id, str) or not record_id.startswith(f"mem:{key}:"):
            return None  # never an id of this scope: nothing to ask
        route = "/record-history"
        data = await self._command(route, {"scopeKey": key, "id": record_id})
        if data.get("found") is not True:
            return None
        record, *chain = _records([data.get("record"), *listed(data, route, "supersedes")],
                                  key, route)
        if record.id != record_id:
            raise StoreError(f"memory worker {route} answered another record")
        by = data.get("supersededBy")
        return RecordHistory(
            record=record, supersedes=tuple(chain),
            superseded_by=None if by is None else _records([by], key, route)[0],
            restated_by=_records(listed(data, route, "restatedBy"), key, route),
            reaches=tuple(parsed(route, "a reach", reach_from_wire,
                                 listed(data, route, "reaches"))))

    async def read_count_totals(self, kind: str, *, since_day: int = 0
                                ) -> builtins.list[CountTotal]:
        kind, since_day = count_total_args(kind, since_day)
        route = "/count-totals"
        data = await self._command(route, {"kind": kind, "sinceDay": since_day})
        totals = parsed(route, "a total", total_from_wire, listed(data, route, "totals"))
        if any(total.day < since_day for total in totals):
            raise StoreError(f"memory worker {route} answered a day it was not asked for")
        return totals

    async def log_reaches(self, reaches: Sequence[Reach]) -> None:
        fitted = fit_reaches(reaches)
        if fitted:
            await self._command("/log-reaches",
                                {"reaches": [reach_to_wire(reach) for reach in fitted]})

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> builtins.list[Reach]:
        record_id, run, limit = reach_query(record_id, run, limit)
        data = await self._command("/reaches", _given(recordId=record_id, run=run, limit=limit))
        return parsed("/reaches", "a reach", reach_from_wire, listed(data, "/reaches", "reaches"))
