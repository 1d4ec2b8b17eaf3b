"""The Memory Worker: one aiohttp application serving any ``MemoryStore`` over HTTP.

Routes (bodies are JSON objects, camelCase, times in epoch milliseconds)::

    POST /retrieve  {scopeKey, query, limit, bump?}   -> {records, matches, bumped}
    POST /used      {used: [{scopeKey, ids}]}          -> {ok, marked}
    POST /write     {scopeKey, records, cap?}          -> {ok, inserted, deduped, superseded,
                                                           restated, evicted}
    POST /list      {scopeKey, limit, query?, kind?}   -> {records}
    POST /forget    {scopeKey, id}                     -> {ok, forgotten}
    POST /sweep     {scopeKey, dryRun?}                -> {ok, swept, ids?}
    POST /scopes    {after?, limit}                    -> {scopes, more}   (scope keys, sorted)
    POST /export    {scopeKey, after?, limit}          -> {records}  (seq > after, seq order)
    POST /import    {records}                          -> {ok, imported}
    POST /counts    {counts: [{scopeKey, day, name, value}]} -> {ok, added}
    POST /stats     {scopeKey? | scopeKeys?, prefix?, since} -> {rows, truncated}
    GET  /metrics                                      -> Prometheus text (bearer or the
                                                          metrics token)
    GET  /healthz                                      -> {"ok": true}        (no auth)
    GET  /openapi.json                                 -> the shipped document (no auth)

Any other path is 404 and another method on a known path is 405. Every error body is
``{"error": "<reason>"}``. A write that would create a scope beyond the store's limit on scopes
is 507 (``ScopeLimitReached``); writes to existing scopes go on. /scopes, /export and /import
move records between stores (``stores.porting``): a store that cannot answers 501. /counts,
/stats and /metrics serve the store's counters (``stores.base.CountingStore``; a store
without them answers 501): /counts adds what a client's host counted, /stats reads rows per
scope and day, /metrics sums them per scope kind for Prometheus (``metrics.py``).

A client's ``cap`` is bounded by the operator: never above the server's cap (``cap``, the
store's default), never below its floor (``min_cap``). A client may lower its scopes' cap down
to the floor, so a token holder cannot retire a scope's records by sending ``cap: 1``.

A request to a data route passes three gates, in this order; the first two look only at the
headers, so a request they refuse never has its body read and its connection is closed after
the answer:

1. the bearer check: ``Authorization: Bearer <token>``, compared in constant time; an unset or
   empty server token lets nobody in; anything malformed is 401;
2. the length fence: exactly one ``Content-Length`` made of ASCII digits (no
   ``Transfer-Encoding``), else 411; more than ``max_body`` bytes, else 413; a
   ``Content-Encoding`` other than identity is 415 (a compressed body would slip past the
   fence when decompressed);
3. body validation (``validation.py``): 400 with a reason naming the field.

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
import bisect
import functools
import hmac
import importlib.resources
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
from aiohttp import ClientConnectionResetError, hdrs, web
from aiohttp.http_exceptions import ContentLengthError
from multidict import CIMultiDictProxy

from scopemem.core.counters import day_of
from scopemem.core.records import MAX_SCOPE_CAP, Record, to_wire
from scopemem.errors import (
    ScopeLimitReached,
    StoreBusy,
    StoreError,
    StoreRefused,
    StoreUnsupported,
)
from scopemem.stores.base import CountingStore, MemoryStore, search_hits
from scopemem.stores.porting import PortableStore, portable
from scopemem.worker_aiohttp import validation
from scopemem.worker_aiohttp.records_json import RecordsJson, dumps
from scopemem.worker_aiohttp.server import (
    BODY_TIMEOUT,
    SERVER_NAME,
    Limits,
    WorkerRunner,
    running,
    serve_until_signalled,
)

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
DEFAULT_BODY_TIMEOUT = Limits().body_timeout

StoreSource = MemoryStore | Callable[[], MemoryStore | Awaitable[MemoryStore]]


@attrs.define
class _Served:
    """What one application serves. A holder, so the store can be opened at startup without
    mutating the (by then frozen) application."""

    source: Any
    token: bytes
    max_body: int
    cap: int | None = None
    min_cap: int | None = None
    store: MemoryStore | None = None
    records_json: RecordsJson = attrs.field(factory=RecordsJson)
    # A second bearer that opens /metrics only (a scraper need not hold the data token).
    metrics_token: bytes = b""

    def bounded_cap(self, requested: int | None) -> int | None:
        """The cap a write runs under for a client's ``requested`` one: at most the server's
        cap, at least its floor; None (the store's default) when the client sent none."""
        if requested is None:
            return None
        if self.cap is not None:
            requested = min(requested, self.cap)
        if self.min_cap is not None:
            requested = max(requested, self.min_cap)
        return requested

    def require_store(self) -> MemoryStore:
        if self.store is None:
            raise RuntimeError("the store is not open (the application has not started)")
        return self.store


SERVED = web.AppKey("scopemem_worker_served", _Served)
OPENAPI = web.AppKey("scopemem_worker_openapi", bytes)


def _json(data: Any, status: int = 200, headers: Mapping[str, str] | None = None
          ) -> web.Response:
    return web.json_response(data, status=status, headers=headers, dumps=dumps)


def _records(request: web.Request, records: Sequence[Record], extra: str = ""
             ) -> web.Response:
    """``{"records": [...]}``, as ``_json`` would write it (see ``records_json``), with
    ``extra`` fields after the list."""
    text = request.app[SERVED].records_json.encode(records, extra)
    return web.Response(text=text, content_type="application/json")


def _error(status: int, reason: str, headers: Mapping[str, str] | None = None,
           *, close: bool = False) -> web.Response:
    response = _json({"error": reason}, status=status, headers=headers)
    if close:
        # The body was not read: the connection cannot carry another request after it.
        response.force_close()
    return response


# --- the gates ----------------------------------------------------------------------------------


def length_problem(headers: CIMultiDictProxy[str], max_body: int) -> web.Response | None:
    """The fence's refusal for these request headers, or None when the body may be read."""
    lengths = headers.getall(hdrs.CONTENT_LENGTH, [])
    if hdrs.TRANSFER_ENCODING in headers or len(lengths) != 1:
        return _error(411, "a request body needs exactly one Content-Length header "
                           "(chunked or unsized bodies are refused)", close=True)
    raw = lengths[0]
    if not (raw.isascii() and raw.isdigit()):
        return _error(411, "Content-Length must be a plain decimal number of bytes", close=True)
    digits = raw.lstrip("0") or "0"
    if len(digits) > 12 or int(digits) > max_body:
        return _error(413, f"the body must be at most {max_body} bytes", close=True)
    # Every Content-Encoding header, and every coding each one lists: a second header or a
    # list ("identity, gzip") must not slip a compressed body past the fence.
    codings = [coding.strip().lower() for value in headers.getall(hdrs.CONTENT_ENCODING, [])
               for coding in value.split(",")]
    if any(coding not in ("", "identity") for coding in codings):
        return _error(415, "Content-Encoding is not supported; send the body uncompressed",
                      close=True)
    return None


def bearer_problem(headers: CIMultiDictProxy[str], token: bytes) -> web.Response | None:
    """The 401 for a request without the right bearer, or None when it may proceed.

    The connection is closed after it, as after a fence refusal: the body is not read, and
    bytes left unread (an unsized body, say) must never be parsed as the next request."""
    if _bearer_matches(headers.getall(hdrs.AUTHORIZATION, []), token):
        return None
    return _error(401, "a valid bearer token is required",
                  headers={hdrs.WWW_AUTHENTICATE: "Bearer"}, close=True)


def _bearer_matches(values: list[str], token: bytes) -> bool:
    if not token or len(values) != 1:
        return False
    # aiohttp hands header bytes over as str (UTF-8, undecodable bytes escaped): anything
    # outside ASCII cannot be a token we issued.
    try:
        value = values[0].encode("ascii")
    except UnicodeEncodeError:
        return False
    scheme, _, credentials = value.strip().partition(b" ")
    if scheme.lower() != b"bearer":
        return False
    return hmac.compare_digest(credentials.strip(b" "), token)


def _is_data_route(request: web.Request) -> bool:
    match_info = request.match_info
    return match_info.http_exception is None and getattr(
        match_info.handler, "_scopemem_data_route", False)


def _gate(request: web.Request) -> web.Response | None:
    # The token first: a caller without it learns nothing from us, not even a size verdict.
    served = request.app[SERVED]
    return (bearer_problem(request.headers, served.token)
            or length_problem(request.headers, served.max_body))


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
        return _error(exc.status, exc.reason.lower(), headers)
    except asyncio.CancelledError:
        raise
    except StoreBusy as exc:
        log.warning("[busy] %s: %s", request.path, exc)
        return _error(503, "busy: the store cannot take more now, retry shortly",
                      {hdrs.RETRY_AFTER: "1"})
    except ScopeLimitReached as exc:
        log.warning("[error] %s refused: %s", request.path, exc)
        return _error(507, "the worker's limit on scopes is reached: a write to a new scope"
                           " is refused (existing scopes still take writes)")
    except StoreUnsupported as exc:
        log.warning("[error] %s: %s", request.path, exc)
        return _error(501, "this worker's store cannot do that (it cannot export or import"
                           " records)")
    except StoreError as exc:
        log.error("[error] %s failed in the store: %s", request.path, exc)
        return _error(500, "the store failed; see the worker's log")
    except Exception:
        log.exception("[error] %s failed", request.path)
        return _error(500, "internal error; see the worker's log")


@web.middleware
async def _gates(request: web.Request, handler: Callable[..., Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    if _is_data_route(request):
        refusal = _gate(request)
        if refusal is not None:
            return refusal
    return await handler(request)


async def _expect(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue``: refuse before the client sends the body when a gate would."""
    refusal = _gate(request)
    if refusal is not None:
        return refusal
    expect = request.headers.get(hdrs.EXPECT, "")
    if request.version >= (1, 1) and expect.lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
        return None
    return _error(417, f"unsupported Expect: {expect}", close=True)


# --- the handlers -------------------------------------------------------------------------------


async def _body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, read within the body deadline (408 past it); a client
    that goes away mid-body ends the request quietly (``_ClientGone``)."""
    try:
        async with asyncio.timeout(request.app.get(BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT)):
            raw = await request.read()
    except TimeoutError:
        raise _SlowBody() from None
    except (ConnectionError, ClientConnectionResetError, ContentLengthError):
        raise _ClientGone() from None
    try:
        return validation.parse_body(raw)
    except validation.BodyError as exc:
        raise _BadRequest(str(exc)) from None


class _BadRequest(Exception):
    pass


class _SlowBody(Exception):
    """The body did not arrive within the deadline."""


class _ClientGone(Exception):
    """The client closed the connection before its body was complete."""


def _data_route(func: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Mark a handler as a data route (gated) and turn body errors into 400s."""

    @functools.wraps(func)
    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return await func(request)
        except (_BadRequest, validation.BodyError) as exc:
            return _error(400, str(exc))
        except _SlowBody:
            log.info("[refused] %s: the body did not arrive within the deadline",
                     request.path)
            return _error(408, "the body did not arrive in time", close=True)
        except _ClientGone:
            log.info("[gone] %s: the client closed the connection mid-body", request.path)
            return _error(400, "the body was cut short", close=True)

    handler._scopemem_data_route = True  # type: ignore[attr-defined]
    return handler


@_data_route
async def retrieve(request: web.Request) -> web.StreamResponse:
    args = validation.retrieve_args(await _body(request))
    store = request.app[SERVED].require_store()
    hits = await search_hits(store, args.scope_key, args.query, args.limit, bump=args.bump)
    # The seed's clients read only ``records``, and bump by default; a newer client asks not
    # to (``bump: false``), reads each record's match, and marks what it showed (/used).
    # A finite float's repr is its JSON (matches are in [0, 1]).
    extra = (',"matches":[' + ",".join([repr(hit.match) for hit in hits])
             + '],"bumped":' + ("true" if args.bump else "false"))
    return _records(request, [hit.record for hit in hits], extra)


@_data_route
async def used(request: web.Request) -> web.StreamResponse:
    args = validation.used_args(await _body(request))
    store = request.app[SERVED].require_store()
    mark = getattr(store, "mark_used", None)
    marked = await mark(args.used) if mark is not None else 0
    return _json({"ok": True, "marked": marked})


@_data_route
async def write(request: web.Request) -> web.StreamResponse:
    args = validation.write_args(await _body(request))
    served = request.app[SERVED]
    store = served.require_store()
    counts = await store.write(args.scope_key, args.candidates, served.bounded_cap(args.cap))
    if counts.evicted:
        log.info("[write] %s <- %d candidates (evicted %d)",
                 args.scope_key, len(args.candidates), counts.evicted)
    return _json({"ok": True, **to_wire(counts)})


@_data_route
async def list_records(request: web.Request) -> web.StreamResponse:
    args = validation.list_args(await _body(request))
    store = request.app[SERVED].require_store()
    records = await store.list(args.scope_key, args.limit, query=args.query, kind=args.kind)
    log.info("[list] %s -> %d", args.scope_key, len(records))
    return _records(request, records)


@_data_route
async def forget(request: web.Request) -> web.StreamResponse:
    args = validation.forget_args(await _body(request))
    store = request.app[SERVED].require_store()
    forgotten = await store.forget(args.scope_key, args.record_id)
    log.info("[forget] %s %s -> %s", args.scope_key, args.record_id, str(forgotten).lower())
    return _json({"ok": True, "forgotten": forgotten})


@_data_route
async def sweep(request: web.Request) -> web.StreamResponse:
    args = validation.sweep_args(await _body(request))
    store = request.app[SERVED].require_store()
    result = await store.sweep(args.scope_key, dry_run=args.dry_run)
    log.info("[sweep] %s -> %d%s", args.scope_key, result.swept,
             " (dry run)" if args.dry_run else "")
    return _json({"ok": True, **to_wire(result)})


def _portable(request: web.Request) -> PortableStore:
    """The served store as a ``PortableStore`` (``StoreUnsupported``, a 501, otherwise)."""
    return portable(request.app[SERVED].require_store())


@_data_route
async def scopes(request: web.Request) -> web.StreamResponse:
    args = validation.scopes_args(await _body(request))
    keys = await _portable(request).export_scopes()
    start = 0 if args.after is None else bisect.bisect_right(keys, args.after)
    page = keys[start:start + args.limit]
    return _json({"scopes": page, "more": start + len(page) < len(keys)})


@_data_route
async def export(request: web.Request) -> web.StreamResponse:
    args = validation.export_args(await _body(request))
    records = await _portable(request).export_page(args.scope_key, args.after, args.limit)
    return _records(request, records)


@_data_route
async def import_records(request: web.Request) -> web.StreamResponse:
    args = validation.import_args(await _body(request))
    try:
        imported = await _portable(request).import_records(args.records)
    except StoreRefused as exc:
        return _error(400, str(exc))
    log.info("[import] %d of %d records added", imported, len(args.records))
    return _json({"ok": True, "imported": imported})


#: The most counter rows one /stats answer carries (``truncated`` says when there were more:
#: ask for fewer scopes or days).
MAX_STATS_ROWS = 50_000


def _counting(request: web.Request) -> CountingStore | None:
    store = request.app[SERVED].require_store()
    return store if isinstance(store, CountingStore) else None


def _no_counters() -> web.Response:
    return _error(501, "this worker's store keeps no counters")


@_data_route
async def counts(request: web.Request) -> web.StreamResponse:
    args = validation.counts_args(await _body(request))
    store = _counting(request)
    if store is None:
        return _no_counters()
    await store.add_counts(args.rows)
    return _json({"ok": True, "added": len(args.rows)})


@_data_route
async def stats(request: web.Request) -> web.StreamResponse:
    args = validation.stats_args(await _body(request))
    store = _counting(request)
    if store is None:
        return _no_counters()
    rows = await store.read_counts(args.scope_keys, prefix=args.prefix,
                                   since_day=day_of(args.since))
    return _json({"rows": to_wire(rows[:MAX_STATS_ROWS]),
                  "truncated": len(rows) > MAX_STATS_ROWS})


async def metrics(request: web.Request) -> web.StreamResponse:
    """Either bearer opens it; the scrape reads the store now (``metrics.py``)."""
    served = request.app[SERVED]
    given = request.headers.getall(hdrs.AUTHORIZATION, [])
    if not (_bearer_matches(given, served.token)
            or _bearer_matches(given, served.metrics_token)):
        return _error(401, "a valid bearer token is required",
                      headers={hdrs.WWW_AUTHENTICATE: "Bearer"})
    store = _counting(request)
    if store is None:
        return _no_counters()
    from scopemem.worker_aiohttp import metrics as exposition  # prometheus-client: here only

    body = exposition.render(await store.read_counts())
    return web.Response(body=body, headers={hdrs.CONTENT_TYPE: exposition.CONTENT_TYPE})


async def healthz(_request: web.Request) -> web.StreamResponse:
    return _json({"ok": True})


async def openapi(request: web.Request) -> web.StreamResponse:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")


DATA_ROUTES: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
    "/retrieve": retrieve,
    "/write": write,
    "/list": list_records,
    "/forget": forget,
    "/sweep": sweep,
    "/used": used,
    "/scopes": scopes,
    "/export": export,
    "/import": import_records,
    "/counts": counts,
    "/stats": stats,
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
    if not all(0x21 <= ord(char) <= 0x7E for char in token):
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
    served.store = store
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
    app = web.Application(middlewares=[_errors, _gates], client_max_size=max_body)
    app[SERVED] = _Served(source=store, token=_check_token(token), max_body=max_body,
                          cap=cap, min_cap=min_cap, metrics_token=_check_token(metrics_token))
    app[OPENAPI] = load_openapi()
    app.cleanup_ctx.append(_open_store)
    app.on_response_prepare.append(_no_banner)
    for path, handler in DATA_ROUTES.items():
        app.router.add_post(path, handler, expect_handler=_expect)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/openapi.json", openapi)
    return app


