"""The worker's routes for the served store's counters (``stores.base.CountingStore``,
``core.counters``):

``/counts {counts: [{scopeKey, day, name, value}]}``
    adds what a client's host counted → ``{ok, added}``
``/stats {scopeKey? | scopeKeys?, prefix?, since}``
    rows per scope and day → ``{rows, truncated}``
``GET /metrics``
    the counters summed per scope kind for Prometheus (``metrics.py``), then the worker's
    own request, store-call and process series (``observe.py``); open to the data bearer
    or the metrics token

A store that keeps no counters answers 501 on the first two; /metrics then gives the
worker's own series only, as it does when the store fails to read them (one warning).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

from scopemem.core.counters import day_of
from scopemem.core.records import to_wire
from scopemem.errors import StoreError, StoreUnsupported
from scopemem.stores.base import CountingStore
from scopemem.worker_aiohttp import validation
from scopemem.worker_aiohttp.handling import (
    SERVED,
    bearer_matches,
    data_route,
    error_answer,
    json_answer,
    read_body,
)
from scopemem.worker_aiohttp.observe import INSTRUMENTS

__all__ = ["MAX_STATS_ROWS", "ROUTES", "metrics"]

log = logging.getLogger("scopemem.worker")


#: The most counter rows one /stats answer carries (``truncated`` says when there were more:
#: ask for fewer scopes or days).
MAX_STATS_ROWS = 50_000


def _counting(request: web.Request) -> CountingStore | None:
    store = request.app[SERVED].require_store()
    return store if isinstance(store, CountingStore) else None


def _no_counters() -> web.Response:
    return error_answer(501, "this worker's store keeps no counters")


@data_route
async def counts(request: web.Request) -> web.StreamResponse:
    args = validation.counts_args(await read_body(request))
    store = _counting(request)
    if store is None:
        return _no_counters()
    await store.add_counts(args.rows)
    return json_answer({"ok": True, "added": len(args.rows)})


@data_route
async def stats(request: web.Request) -> web.StreamResponse:
    args = validation.stats_args(await read_body(request))
    store = _counting(request)
    if store is None:
        return _no_counters()
    rows = await store.read_counts(args.scope_keys, prefix=args.prefix,
                                   since_day=day_of(args.since))
    return json_answer({"rows": to_wire(rows[:MAX_STATS_ROWS]),
                        "truncated": len(rows) > MAX_STATS_ROWS})


async def metrics(request: web.Request) -> web.StreamResponse:
    """Either bearer opens it; the scrape reads the store now (``metrics.py``)."""
    served = request.app[SERVED]
    given = request.headers.getall(hdrs.AUTHORIZATION, [])
    if not (bearer_matches(given, served.token)
            or bearer_matches(given, served.metrics_token)):
        return error_answer(401, "a valid bearer token is required",
                            headers={hdrs.WWW_AUTHENTICATE: "Bearer"})
    from scopemem.worker_aiohttp import metrics as exposition

    # The store's counters when it keeps any, then the requests, the store's calls and the
    # process (``observe.py``).
    store = _counting(request)
    rows = None
    if store is not None:
        try:
            rows = await store.read_counts()
        except StoreUnsupported:
            raise  # the store cannot: 501, as documented
        except StoreError as exc:
            # The worker's own series still go out, the failed read_counts among them: a
            # scrape that failed whole would hide the failures the alert rules watch.
            log.warning("[metrics] the store's counters cannot be read, so the scrape has"
                        " the worker's own series only: %s", exc)
    body = exposition.render(rows, exposition.Labels(kinds=served.scope_kinds),
                             request.app[INSTRUMENTS].registry)
    return web.Response(body=body, headers={hdrs.CONTENT_TYPE: exposition.CONTENT_TYPE})


ROUTES: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "/counts": counts,
    "/stats": stats,
}
