"""The worker client's browsing (``stores.base.BrowsingStore``): ``/scope-page``,
``/record-page``, ``/record-history``, ``/count-totals``, ``/log-reaches`` and ``/reaches``
(``worker_aiohttp/browsing.py``).

Arguments are checked here first, by the rules every store runs (``stores.browsing``), so
nothing is sent that the worker would refuse; answers are checked too: a record of another
scope, or anything not well formed, is a ``StoreError``, never shown. A worker whose store
cannot browse answers 501, raised as ``StoreUnsupported``.
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
    """The records of ``scope_key``, or ``StoreError`` for one that is not valid."""
    return tuple(parsed(route, "a record", in_scope(scope_key), items))


class WorkerBrowsing:
    """The browsing calls, sent through the transport's ``command``."""

    def __init__(self, command: Command) -> None:
        self._command = command

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        kind, sort, descending, offset, limit = scope_args(kind, sort, descending, offset,
                                                           limit)
        payload: dict[str, Any] = {"sort": sort, "descending": descending, "offset": offset,
                                   "limit": limit}
        if kind is not None:
            payload["kind"] = kind
        route = "/scope-page"
        data = await self._command(route, payload)
        return ScopePage(total=whole_number(data, route, "total"), rows=tuple(parsed(
            route, "a scope", summary_from_wire, listed(data, route, "scopes"))))

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        key, kind_, status_, source_, offset, limit = record_args(
            scope_key, kind, status, source, offset, limit)
        payload: dict[str, Any] = {"scopeKey": key, "offset": offset, "limit": limit}
        for name, value in (("kind", kind_), ("status", status_), ("source", source_)):
            if value is not None:
                payload[name] = value.value
        route = "/record-page"
        data = await self._command(route, payload)
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
        payload: dict[str, Any] = {"limit": limit}
        if record_id is not None:
            payload["recordId"] = record_id
        if run is not None:
            payload["run"] = run
        data = await self._command("/reaches", payload)
        return parsed("/reaches", "a reach", reach_from_wire, listed(data, "/reaches", "reaches"))
