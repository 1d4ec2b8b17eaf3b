"""The worker's routes for moving records between stores (``stores.porting``,
``scopemem export`` / ``import`` through the worker; the client is
``stores/worker_calls.py``):

``/scopes {after?, limit}``
    the scope keys the store holds, sorted, a page after ``after`` → ``{scopes, more}``
``/export {scopeKey, after?, limit}``
    a scope's records with seq > ``after``, in seq order → ``{records}``
``/import {records}``
    → ``{ok, imported, redacted, swept, sourceReset}``

A store that cannot move records answers 501. What /import takes from any token holder is
screened as a /write is, and nobody here can vouch for a ``human`` source.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from scopemem.core.porting import reflection_sourced
from scopemem.errors import StoreRefused
from scopemem.stores.base import wall_clock_ms
from scopemem.stores.porting import PortableStore, portable, screen_import
from scopemem.worker_aiohttp import validation
from scopemem.worker_aiohttp.handling import (
    SERVED,
    data_route,
    error_answer,
    json_answer,
    read_body,
    records_answer,
)

__all__ = ["ROUTES"]

log = logging.getLogger("scopemem.worker")


def _portable(request: web.Request) -> PortableStore:
    """The served store as a ``PortableStore`` (``StoreUnsupported``, a 501, otherwise)."""
    return portable(request.app[SERVED].require_store())


@data_route
async def scopes(request: web.Request) -> web.StreamResponse:
    args = validation.scopes_args(await read_body(request))
    keys = await _portable(request).export_scopes()
    start = 0 if args.after is None else bisect.bisect_right(keys, args.after)
    page = keys[start:start + args.limit]
    return json_answer({"scopes": page, "more": start + len(page) < len(keys)})


@data_route
async def export(request: web.Request) -> web.StreamResponse:
    args = validation.export_args(await read_body(request))
    records = await _portable(request).export_page(args.scope_key, args.after, args.limit)
    return records_answer(request, records)


@data_route
async def import_records(request: web.Request) -> web.StreamResponse:
    """Records from any token holder: each is screened as a /write is (``screen_import``:
    redaction, caps, the status gate, times and use counts bounded) and becomes
    reflection-sourced, since nobody here can vouch for ``human``. The answer counts what
    the screen changed."""
    now = wall_clock_ms()
    args = validation.import_args(await read_body(request), now)
    store = _portable(request)
    records = [reflection_sourced(record) for record in args.records]
    reset = sum(new is not old for new, old in zip(records, args.records, strict=True))
    try:
        screen = screen_import(records, now)
        imported = await store.import_records(screen.records)
    except StoreRefused as exc:
        return error_answer(400, str(exc))
    log.info("[import] %d of %d records added (%d redacted, %d swept, %d source reset)",
             imported, len(args.records), screen.redacted, screen.swept, reset)
    return json_answer({"ok": True, "imported": imported, "redacted": screen.redacted,
                        "swept": screen.swept, "sourceReset": reset})


ROUTES: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "/scopes": scopes,
    "/export": export,
    "/import": import_records,
}
