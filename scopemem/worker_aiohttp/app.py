"""The Memory Worker: one aiohttp application serving any ``MemoryStore`` over HTTP.

Routes (bodies are JSON objects, camelCase, times in epoch milliseconds)::

    POST /retrieve  {scopeKey, query, limit, bump?}   -> {records, matches, bumped}
    POST /used      {used: [{scopeKey, ids}]}          -> {ok, marked}
    POST /write     {scopeKey, records, cap?}          -> {ok, inserted, deduped, superseded,
                                                           restated, evicted, cap?}
    POST /list      {scopeKey, limit, query?, kind?}   -> {records}
    POST /forget    {scopeKey, id}                     -> {ok, forgotten}
    POST /sweep     {scopeKey, dryRun?}                -> {ok, swept, ids?}
    POST /scopes    {after?, limit}                    -> {scopes, more}   (scope keys, sorted)
    POST /export    {scopeKey, after?, limit}          -> {records}  (seq > after, seq order)
    POST /import    {records}                          -> {ok, imported, redacted, swept,
                                                           sourceReset}
    POST /counts    {counts: [{scopeKey, day, name, value}]} -> {ok, added}
    POST /scope-page, /record-page, /record-history, /count-totals, /log-reaches,
         /reaches                                      -> browsing (``browsing.py``)
    POST /vectors-missing, /put-vectors, /nearest: the semantic lane (``vectors.py``)
    POST /stats     {scopeKey? | scopeKeys?, prefix?, since} -> {rows, truncated}
    GET  /metrics                                      -> Prometheus text (bearer or the
                                                          metrics token)
    GET  /healthz                                      -> {"ok": true}        (no auth)
    GET  /readyz                                       -> {"ok": true}, or 503 with a reason
                                                          when the store cannot serve (no auth)
    GET  /openapi.json                                 -> the shipped document (no auth)

Any other path is 404 and another method on a known path is 405. Every error body is
``{"error": "<reason>"}``. A write that would create a scope beyond the store's limit on scopes
is 507 (``ScopeLimitReached``); writes to existing scopes go on. The other routes live beside
this module, a group each (``porting``, ``counting`` with /metrics, ``deleting``, ``browsing``,
``vectors``); ``observe.py``'s middleware, the outermost, counts and times every request.

A client's ``cap`` is bounded by the operator: never above the server's cap (``cap``, the
store's default), never below its floor (``min_cap``). A client may lower its scopes' cap down
to the floor, so a token holder cannot retire a scope's records by sending ``cap: 1``. The
answer to a write that sent a ``cap`` carries the cap applied.

A request to a data route passes four gates, in this order; the first two look only at the
headers, so a request they refuse never has its body read and its connection is closed after
the answer:

1. the bearer check: ``Authorization: Bearer <token>``, compared in constant time; an unset or
   empty server token lets nobody in; anything malformed is 401;
2. the length fence: exactly one ``Content-Length`` made of ASCII digits (no
   ``Transfer-Encoding``), else 411; more than ``max_body`` bytes, else 413; a
   ``Content-Encoding`` other than identity is 415 (a compressed body would slip past the
   fence when decompressed);
3. an ``Idempotency-Key`` already answered is answered again from memory, when the body is
   the one it answered (``idempotency.py``), without calling the store;
4. body validation (``validation.py``, against ``schema.py``'s JSON Schema, which the served
   document states): 400 with a reason naming the field.

The token comes first so that a caller without it gets 401 and nothing else from the
application. One exception cannot be helped: aiohttp's own HTTP parser refuses most malformed
lengths (``0x10``, ``5e2``, a duplicated or listed ``Content-Length``, one beside
``Transfer-Encoding``, too many digits) while it reads the headers, before the application
sees them and so before any token can be checked. ``WorkerRunner`` turns those parser
refusals into the fence's 411 (413 for an overflowing number), for every caller; they say
nothing about the data.
"""

from __future__ import annotations

import asyncio
import importlib.resources
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, cast

from aiohttp import hdrs, web

from scopemem.core.records import MAX_SCOPE_CAP, to_wire
from scopemem.core.text import is_bearer_token
from scopemem.errors import (
    ScopeLimitReached,
    StoreBusy,
    StoreError,
    StoreRefused,
    StoreUnreachable,
    StoreUnsupported,
)
from scopemem.stores.base import MemoryStore, check_answer, search_hits, wall_clock_ms
from scopemem.worker_aiohttp import browsing, counting, deleting, porting, validation, vectors
from scopemem.worker_aiohttp.handling import (
    OPENAPI,
    SERVED,
    Served,
    data_route,
    error_answer,
    gate,
    is_data_route,
    json_answer,
    read_body,
    records_answer,
)
from scopemem.worker_aiohttp.idempotency import REPLAYS, Replays, idempotent
from scopemem.worker_aiohttp.observe import (
    INSTRUMENTS,
    Instruments,
    TimedStore,
    observe,
    readyz,
    traced,
)
from scopemem.worker_aiohttp.server import (
    CONNECTIONS,
    SERVER_NAME,
    ConnectionCount,
    Limits,
    WorkerRunner,
    running,
    serve_until_signalled,
)

if TYPE_CHECKING:
    from scopemem.config import MemoryConfig
    from scopemem.plugins.manager import PluginManager

__all__ = [
    "DEFAULT_MAX_BODY",
    "Limits",
    "WorkerRunner",
    "create_app",
    "load_openapi",
    "running",
    "serve_until_signalled",
]

log = logging.getLogger("scopemem.worker")

DEFAULT_MAX_BODY = 512 * 1024

StoreSource = MemoryStore | Callable[[], MemoryStore | Awaitable[MemoryStore]]


@web.middleware
async def _errors(request: web.Request, handler: Callable[..., Awaitable[web.StreamResponse]]
                  ) -> web.StreamResponse:
    """JSON for every refusal; a store failure is a 500 that says nothing about the store."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        headers = ({str(hdrs.ALLOW): exc.headers[hdrs.ALLOW]} if hdrs.ALLOW in exc.headers
                   else None)
        return error_answer(exc.status, exc.reason.lower(), headers)
    except asyncio.CancelledError:
        raise
    except StoreUnreachable as exc:
        log.warning("[unavailable] %s: %s", request.path, exc)
        return error_answer(503, "unavailable: the store cannot reach its database now, retry"
                            " shortly", {hdrs.RETRY_AFTER: "1"})
    except StoreBusy as exc:
        log.warning("[busy] %s: %s", request.path, exc)
        return error_answer(503, "busy: the store cannot take more now, retry shortly",
                      {hdrs.RETRY_AFTER: "1"})
    except ScopeLimitReached as exc:
        log.warning("[error] %s refused: %s", request.path, exc)
        return error_answer(507, "the worker's limit on scopes is reached: a write to a new scope"
                           " is refused (existing scopes still take writes)")
    except StoreRefused as exc:
        log.warning("[error] %s refused by the store: %s", request.path, exc)
        return error_answer(400, "the store refused this input; see the worker's log")
    except StoreUnsupported as exc:
        log.warning("[error] %s: %s", request.path, exc)
        return error_answer(501, "this worker's store cannot do that (it cannot export or import"
                           " records)")
    except StoreError as exc:
        log.error("[error] %s failed in the store: %s", request.path, exc)
        return error_answer(500, "the store failed; see the worker's log")
    except Exception:
        log.exception("[error] %s failed", request.path)
        return error_answer(500, "internal error; see the worker's log")


@web.middleware
async def _gates(request: web.Request, handler: Callable[..., Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    if is_data_route(request):
        refusal = gate(request)
        if refusal is not None:
            return refusal
    return await handler(request)


async def _expect(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: refuse before the client sends the body when a gate would."""
    refusal = gate(request)
    if refusal is not None:
        return refusal
    expect = request.headers.get(hdrs.EXPECT, "")
    if request.version >= (1, 1) and expect.lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None
    return error_answer(417, f"unsupported Expect: {expect}", close=True)


@data_route
async def retrieve(request: web.Request) -> web.StreamResponse:
    args = validation.retrieve_args(await read_body(request))
    store = request.app[SERVED].require_store()
    hits = await search_hits(store, args.scope_key, args.query, args.limit, bump=args.bump)
    # The seed's clients read only ``records``, and bump by default; a newer client asks not
    # to (``bump: false``), reads each record's match, and marks what it showed (/used).
    # A finite float's repr is its JSON (matches are in [0, 1]).
    extra = (',"matches":[' + ",".join([repr(hit.match) for hit in hits])
             + '],"bumped":' + ("true" if args.bump else "false"))
    return records_answer(request, [hit.record for hit in hits], extra)


@data_route
async def used(request: web.Request) -> web.StreamResponse:
    args = validation.used_args(await read_body(request))
    store = request.app[SERVED].require_store()
    mark = getattr(store, "mark_used", None)
    marked = await mark(args.used) if mark is not None else 0
    return json_answer({"ok": True, "marked": marked})


@data_route
async def write(request: web.Request) -> web.StreamResponse:
    args = validation.write_args(await read_body(request))
    served = request.app[SERVED]
    store = served.require_store()
    cap = served.bounded_cap(args.cap)
    counts = check_answer("write", await store.write(args.scope_key, args.candidates, cap))
    if counts.evicted:
        log.info("[write] %s <- %d candidates (evicted %d)",
                 args.scope_key, len(args.candidates), counts.evicted)
    # The cap the write ran under, when the client asked for one: the client can tell when
    # the operator's bounds changed it.
    applied = {} if cap is None else {"cap": cap}
    return json_answer({"ok": True, **to_wire(counts), **applied})


@data_route
async def list_records(request: web.Request) -> web.StreamResponse:
    args = validation.list_args(await read_body(request))
    store = request.app[SERVED].require_store()
    records = await store.list(args.scope_key, args.limit, query=args.query, kind=args.kind)
    log.info("[list] %s -> %d", args.scope_key, len(records))
    return records_answer(request, records)


@data_route
async def forget(request: web.Request) -> web.StreamResponse:
    args = validation.forget_args(await read_body(request))
    store = request.app[SERVED].require_store()
    forgotten = check_answer("forget", await store.forget(args.scope_key, args.record_id))
    log.info("[forget] %s %s -> %s", args.scope_key, args.record_id, str(forgotten).lower())
    return json_answer({"ok": True, "forgotten": forgotten})


@data_route
async def sweep(request: web.Request) -> web.StreamResponse:
    args = validation.sweep_args(await read_body(request))
    store = request.app[SERVED].require_store()
    result = check_answer("sweep", await store.sweep(args.scope_key, dry_run=args.dry_run))
    log.info("[sweep] %s -> %d%s", args.scope_key, result.swept,
             " (dry run)" if args.dry_run else "")
    return json_answer({"ok": True, **to_wire(result)})


async def healthz(_request: web.Request) -> web.StreamResponse:
    return json_answer({"ok": True})


async def openapi(request: web.Request) -> web.StreamResponse:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


DATA_ROUTES: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "/retrieve": retrieve,
    "/write": write,
    "/list": list_records,
    "/forget": forget,
    "/sweep": sweep,
    "/used": used,
    **porting.ROUTES,
    **counting.ROUTES,
    "/delete-scope": deleting.delete_scope,
    "/scrub-provenance": deleting.scrub_provenance,
    "/purge": deleting.purge,
    **browsing.ROUTES,
    **vectors.ROUTES,
}


# --- the application ----------------------------------------------------------------------------


def load_openapi() -> bytes:
    """The OpenAPI document shipped with the package (checked to be a JSON object)."""
    data = importlib.resources.files("scopemem.worker_aiohttp").joinpath("openapi.json")
    raw = data.read_bytes()
    if not isinstance(json.loads(raw), dict):
        raise ValueError("openapi.json is not a JSON object")
    return raw


def _check_token(token: str | None) -> bytes:
    if not token:
        return b""
    if not is_bearer_token(token):
        raise ValueError("the bearer token must be printable ASCII without spaces")
    return token.encode("ascii")


async def _open_store(app: web.Application) -> AsyncIterator[None]:
    served = app[SERVED]
    source = served.source
    # A store class passes the protocol's isinstance check too; a class is a factory.
    if isinstance(source, MemoryStore) and not isinstance(source, type):
        store = source
    else:
        store = source()
        if inspect.isawaitable(store):
            store = await store
    served.store = cast(MemoryStore, TimedStore(store, app[INSTRUMENTS]))
    try:
        yield
    finally:
        served.store = None
        await store.close()


async def _no_banner(_request: web.Request, response: web.StreamResponse) -> None:
    response.headers[hdrs.SERVER] = SERVER_NAME  # the product, never its version


def create_app(
    store: StoreSource,
    token: str | None,
    *,
    max_body: int = DEFAULT_MAX_BODY,
    cap: int | None = None,
    min_cap: int | None = None,
    metrics_token: str | None = None,
    scope_kinds: Iterable[str] | None = None,
    hub_token: str | None = None,
    hub_config: MemoryConfig | None = None,
    plugin_manager: PluginManager | None = None,
) -> web.Application:
    """The worker application serving ``store``.

    :param store: a ``MemoryStore``, or a factory (sync or async) called at startup. Either
        way the store is closed when the application shuts down, after in-flight requests.
    :param token: the bearer every data route requires; ``None`` or ``""`` refuses everyone.
    :param max_body: the largest request body accepted, in bytes (413 above it).
    :param cap: the most a client's ``cap`` may be (the store's default cap); None: no bound.
    :param min_cap: the least a client's ``cap`` may be; None: no floor.
    :param metrics_token: a second bearer that opens ``GET /metrics`` and nothing else
        (the data token opens it too); None or ``""``: only the data token.
    :param scope_kinds: the scope kinds ``/metrics`` labels by name (the registered ones);
        the rows of any other kind are summed under ``other``. None: the built-in kinds.
    :param hub_token: the Memory Hub's token (``scopemem.hub``): the hub is mounted under
        ``/hub/`` only when one is given; None or ``""``: every ``/hub`` path is a 404.
    :param hub_config: the configuration the hub's memory runs with (its scope kinds,
        organisation, admins, read path); None: the defaults.
    :param plugin_manager: the plugins the hub's memory uses; None: the installed ones.
    """
    if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 1:
        raise ValueError(f"max_body must be a positive integer, got {max_body!r}")
    for name, value in (("cap", cap), ("min_cap", min_cap)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or not 1 <= value <= MAX_SCOPE_CAP):
            raise ValueError(f"{name} must be an integer from 1 to {MAX_SCOPE_CAP},"
                             f" got {value!r}")
    if cap is not None and min_cap is not None and min_cap > cap:
        raise ValueError(f"min_cap ({min_cap}) must not be above cap ({cap})")
    app = web.Application(middlewares=[observe, traced, _errors, _gates, idempotent],
                          client_max_size=max_body)
    app[REPLAYS] = Replays()  # answers to Idempotency-Key replays (idempotency.py)
    app[INSTRUMENTS] = instruments = Instruments()
    app[CONNECTIONS] = instruments.connections = ConnectionCount()
    app[SERVED] = Served(source=store, token=_check_token(token), max_body=max_body,
                          cap=cap, min_cap=min_cap, metrics_token=_check_token(metrics_token))
    if scope_kinds is not None:
        app[SERVED].scope_kinds = frozenset(scope_kinds)
    app[OPENAPI] = load_openapi()
    app.cleanup_ctx.append(_open_store)
    app.on_response_prepare.append(_no_banner)
    for path, handler in DATA_ROUTES.items():
        app.router.add_post(path, handler, expect_handler=_expect)
    app.router.add_get("/metrics", counting.metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/openapi.json", openapi)
    if hub_token:
        # Only here: a worker without the hub never imports it, nor its extra's packages.
        from scopemem.hub.app import install_hub
        from scopemem.hub.shared import memory_over, warn_without_organisation

        warn_without_organisation(hub_config)
        served = app[SERVED]
        install_hub(app, hub_token,
                    lambda: memory_over(served.require_store(), hub_config, plugin_manager),
                    clock=wall_clock_ms)
    return app


