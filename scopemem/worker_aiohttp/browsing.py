"""The worker's browsing routes (``stores.base.BrowsingStore``, ``core.browse``), what the
worker client's browsing calls (``stores/worker_browse.py``):

``/scope-page {kind?, sort?, descending?, offset?, limit?}``
    scopes holding records → ``{total, scopes: [{scopeKey, kind, active, lastWriteMs?}]}``
``/record-page {scopeKey, kind?, status?, source?, offset?, limit?}``
    a scope's records, newest first, every status → ``{total, records}``
``/record-history {scopeKey, id}``
    → ``{found: false}`` or ``{found: true, record, supersedes, supersededBy?, restatedBy,
    reaches}``
``/count-totals {kind, sinceDay?}``
    the counters of every scope of a kind, summed by day and name → ``{totals: [{day,
    name, total, most}]}``
``/log-reaches {reaches: [{recordId, scopeKey, runId, threadKey, atMs}]}``
    → ``{ok, logged}`` (a client sends each call's ``Idempotency-Key``, so a retry whose
    first answer was lost logs nothing twice)
``/reaches {recordId? | run?, limit?}``
    → ``{reaches}``, newest first

Each body is validated against ``schema.py``; what JSON Schema cannot say (a reach's record
is of its own scope, its time is a time) is checked by the rules every store runs
(``stores.browsing``) before the store is called, so a hostile body is a 400 naming what
was wrong, never a store failure. A store that cannot browse answers 501.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from scopemem.core.browse import (
    PageError,
    reach_from_wire,
    reach_to_wire,
    summary_to_wire,
    total_to_wire,
)
from scopemem.core.records import to_wire
from scopemem.errors import StoreError
from scopemem.stores.base import BrowsingStore
from scopemem.stores.browsing import (
    count_total_args,
    fit_reaches,
    reach_query,
    record_args,
    scope_args,
)
from scopemem.worker_aiohttp.handling import (
    Handler,
    capability_route,
    json_answer,
)

__all__ = ["ROUTES"]

log = logging.getLogger("scopemem.worker")

def _route(path: str, answer: Callable[[BrowsingStore, dict[str, Any]], Awaitable[Any]]
           ) -> Handler:
    """A browsing route: the served store's answer as JSON (``capability_route``)."""

    async def answered(_request: web.Request, store: Any, body: dict[str, Any]
                       ) -> web.StreamResponse:
        return json_answer(await answer(store, body))

    return capability_route(path, BrowsingStore, "this worker's store cannot be browsed",
                            answered, (_Refused,))


class _Refused(Exception):
    """A body the stores' rules refuse (the message says why)."""


def _checked(check: Callable[..., Any], *args: Any) -> Any:
    try:
        return check(*args)
    except (StoreError, PageError) as exc:
        raise _Refused(str(exc)) from None


async def _scope_page(store: BrowsingStore, body: dict[str, Any]) -> dict[str, Any]:
    kind, sort, descending, offset, limit = _checked(
        scope_args, body.get("kind"), body.get("sort", "key"), body.get("descending", False),
        body.get("offset", 0), body.get("limit", 50))
    page = await store.scope_page(kind=kind, sort=sort, descending=descending, offset=offset,
                                  limit=limit)
    return {"total": page.total, "scopes": [summary_to_wire(row) for row in page.rows]}


async def _record_page(store: BrowsingStore, body: dict[str, Any]) -> dict[str, Any]:
    key, kind, status, source, offset, limit = _checked(
        record_args, body["scopeKey"], body.get("kind"), body.get("status"),
        body.get("source"), body.get("offset", 0), body.get("limit", 50))
    page = await store.record_page(key, kind=kind, status=status, source=source,
                                   offset=offset, limit=limit)
    return {"total": page.total, "records": to_wire(list(page.rows))}


async def _record_history(store: BrowsingStore, body: dict[str, Any]) -> dict[str, Any]:
    key, *_rest = _checked(record_args, body["scopeKey"], None, None, None, 0, 1)
    history = await store.record_history(key, body["id"])
    if history is None:
        return {"found": False}
    data: dict[str, Any] = {
        "found": True, "record": to_wire(history.record),
        "supersedes": to_wire(list(history.supersedes)),
        "restatedBy": to_wire(list(history.restated_by)),
        "reaches": [reach_to_wire(reach) for reach in history.reaches]}
    if history.superseded_by is not None:
        data["supersededBy"] = to_wire(history.superseded_by)
    return data


async def _count_totals(store: BrowsingStore, body: dict[str, Any]) -> dict[str, Any]:
    kind, since_day = _checked(count_total_args, body["kind"], body.get("sinceDay", 0))
    totals = await store.read_count_totals(kind, since_day=since_day)
    return {"totals": [total_to_wire(total) for total in totals]}


async def _log_reaches(store: BrowsingStore, body: dict[str, Any]) -> dict[str, Any]:
    reaches = _checked(fit_reaches, [_checked(reach_from_wire, item)
                                     for item in body["reaches"]])
    await store.log_reaches(reaches)
    return {"ok": True, "logged": len(reaches)}


async def _reaches(store: BrowsingStore, body: dict[str, Any]) -> dict[str, Any]:
    record_id, run, limit = _checked(reach_query, body.get("recordId"), body.get("run"),
                                     body.get("limit", 100))
    reaches = await store.read_reaches(record_id=record_id, run=run, limit=limit)
    return {"reaches": [reach_to_wire(reach) for reach in reaches]}


#: The routes, by path, for the application's table of data routes.
ROUTES: dict[str, Handler] = {
    path: _route(path, answer) for path, answer in (
        ("/scope-page", _scope_page), ("/record-page", _record_page),
        ("/record-history", _record_history), ("/count-totals", _count_totals),
        ("/log-reaches", _log_reaches),
        ("/reaches", _reaches))}
