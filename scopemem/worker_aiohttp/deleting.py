"""The worker's deleting routes, for an operator honouring a request to delete someone's
data (``scopemem delete-scope``, ``forget-person``, ``purge`` through the worker):

``/delete-scope {scopeKey}``
    every record of the scope, whatever its status, with its counters (the store's
    ``delete_scope``); answers ``{ok, deleted}``.
``/scrub-provenance {scopeKey, personKey}``
    the person ``personKey`` names replaced in the scope's thread keys and run ids
    (``core.provenance``; the store's ``scrub_provenance``); answers ``{ok, scrubbed}``.
``/purge {}``
    the retention purge applied to every scope now (the store's ``purge``); answers
    ``{ok, purged, scrubbed}``.

Each is behind the token, carries an ``Idempotency-Key`` like every other route that
changes something, and answers 501 when the served store cannot do it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from scopemem.core.records import to_wire
from scopemem.worker_aiohttp import validation
from scopemem.worker_aiohttp.handling import (
    SERVED,
    data_route,
    error_answer,
    json_answer,
    read_body,
)

__all__ = ["delete_scope", "purge", "scrub_provenance"]

log = logging.getLogger("scopemem.worker")


def _method(request: web.Request, name: str) -> Callable[..., Awaitable[Any]] | None:
    method: Callable[..., Awaitable[Any]] | None = getattr(
        request.app[SERVED].require_store(), name, None)
    return method if callable(method) else None


def _unsupported(name: str) -> web.Response:
    return error_answer(501, f"this worker's store cannot do that (it has no {name})")


def _counting_route(route: str, method_name: str, fields: tuple[str, ...], answer: str
                   ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """A route calling the store's ``method_name`` with the body's ``fields`` and answering
    ``{ok, <answer>: the count it returned}``."""

    @data_route
    async def handler(request: web.Request) -> web.StreamResponse:
        body = await read_body(request)
        validation.check(route, body)
        method = _method(request, method_name)
        if method is None:
            return _unsupported(method_name)
        count = int(await method(*(body[field] for field in fields)))
        log.info("[%s] %s -> %d", route.lstrip("/"), body["scopeKey"], count)
        return json_answer({"ok": True, answer: count})

    return handler


delete_scope = _counting_route("/delete-scope", "delete_scope", ("scopeKey",), "deleted")
scrub_provenance = _counting_route("/scrub-provenance", "scrub_provenance",
                                   ("scopeKey", "personKey"), "scrubbed")


@data_route
async def purge(request: web.Request) -> web.StreamResponse:
    validation.check("/purge", await read_body(request))
    method = _method(request, "purge")
    if method is None:
        return _unsupported("purge")
    result = await method()
    log.info("[purge] %d rows purged, %d scrubbed", result.purged, result.scrubbed)
    return json_answer({"ok": True, **to_wire(result)})
