"""What every route of the Memory Worker shares: the store it serves, JSON answers, the
header gates (bearer, length fence) and reading a body within its deadline.

``app.py`` holds the routes and builds the application; the gates are applied there by a
middleware to every handler this module's ``data_route`` marks (see ``app.py`` for the order
and the reasons).
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import attrs
from aiohttp import ClientConnectionResetError, hdrs, web
from aiohttp.http_exceptions import ContentLengthError
from multidict import CIMultiDictProxy

from scopemem.core.commands import BUILTIN_KINDS
from scopemem.core.records import Record
from scopemem.stores.base import MemoryStore
from scopemem.worker_aiohttp import validation
from scopemem.worker_aiohttp.records_json import RecordsJson, dumps
from scopemem.worker_aiohttp.server import BODY_TIMEOUT, Limits

log = logging.getLogger("scopemem.worker")

DEFAULT_BODY_TIMEOUT = Limits().body_timeout


@attrs.define
class Served:
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
    # The scope kinds /metrics names; any other kind is summed under "other".
    scope_kinds: frozenset[str] = frozenset(BUILTIN_KINDS)

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


SERVED = web.AppKey("scopemem_worker_served", Served)
OPENAPI = web.AppKey("scopemem_worker_openapi", bytes)


def json_answer(data: Any, status: int = 200, headers: Mapping[str, str] | None = None
          ) -> web.Response:
    return web.json_response(data, status=status, headers=headers, dumps=dumps)


def records_answer(request: web.Request, records: Sequence[Record], extra: str = ""
             ) -> web.Response:
    """``{"records": [...]}``, as ``_json`` would write it (see ``records_json``), with
    ``extra`` fields after the list."""
    text = request.app[SERVED].records_json.encode(records, extra)
    return web.Response(text=text, content_type="application/json")


def error_answer(status: int, reason: str, headers: Mapping[str, str] | None = None,
           *, close: bool = False) -> web.Response:
    response = json_answer({"error": reason}, status=status, headers=headers)
    if close:
        # The body was not read: the connection cannot carry another request after it.
        response.force_close()
    return response


# --- the gates ----------------------------------------------------------------------------------


def length_problem(headers: CIMultiDictProxy[str], max_body: int) -> web.Response | None:
    """The fence's refusal for these request headers, or None when the body may be read."""
    lengths = headers.getall(hdrs.CONTENT_LENGTH, [])
    if hdrs.TRANSFER_ENCODING in headers or len(lengths) != 1:
        return error_answer(411, "a request body needs exactly one Content-Length header "
                           "(chunked or unsized bodies are refused)", close=True)
    raw = lengths[0]
    if not (raw.isascii() and raw.isdigit()):
        return error_answer(411, "Content-Length must be a plain decimal number of bytes",
                            close=True)
    digits = raw.lstrip("0") or "0"
    if len(digits) > 12 or int(digits) > max_body:
        return error_answer(413, f"the body must be at most {max_body} bytes", close=True)
    # Every Content-Encoding header, and every coding each one lists: a second header or a
    # list ("identity, gzip") must not slip a compressed body past the fence.
    codings = [coding.strip().lower() for value in headers.getall(hdrs.CONTENT_ENCODING, [])
               for coding in value.split(",")]
    if any(coding not in ("", "identity") for coding in codings):
        return error_answer(415, "Content-Encoding is not supported; send the body uncompressed",
                      close=True)
    return None


def bearer_problem(headers: CIMultiDictProxy[str], token: bytes) -> web.Response | None:
    """The 401 for a request without the right bearer, or None when it may proceed.

    The connection is closed after it, as after a fence refusal: the body is not read, and
    bytes left unread (an unsized body, say) must never be parsed as the next request."""
    if bearer_matches(headers.getall(hdrs.AUTHORIZATION, []), token):
        return None
    return error_answer(401, "a valid bearer token is required",
                  headers={hdrs.WWW_AUTHENTICATE: "Bearer"}, close=True)


def bearer_matches(values: list[str], token: bytes) -> bool:
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


def is_data_route(request: web.Request) -> bool:
    match_info = request.match_info
    return match_info.http_exception is None and getattr(
        match_info.handler, "_scopemem_data_route", False)


def gate(request: web.Request) -> web.Response | None:
    # The token first: a caller without it learns nothing from us, not even a size verdict.
    served = request.app[SERVED]
    return (bearer_problem(request.headers, served.token)
            or length_problem(request.headers, served.max_body))


# --- reading a body ----------------------------------------------------------------------------


async def read_raw(request: web.Request) -> bytes:
    """The request's bytes, read within the body deadline (``_SlowBody`` past it); a client
    that goes away mid-body is ``_ClientGone``. ``unread_answer`` words both."""
    try:
        async with asyncio.timeout(request.app.get(BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT)):
            return await request.read()
    except TimeoutError:
        raise _SlowBody() from None
    except (ConnectionError, ClientConnectionResetError, ContentLengthError):
        raise _ClientGone() from None


async def read_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, read within the body deadline (408 past it); a client
    that goes away mid-body ends the request quietly (``_ClientGone``)."""
    raw = await read_raw(request)
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


#: What ``read_raw`` raises when the body did not arrive whole.
UNREAD = (_SlowBody, _ClientGone)


def unread_answer(request: web.Request, exc: Exception) -> web.Response:
    """The answer to a body that did not arrive whole (one of ``UNREAD``)."""
    if isinstance(exc, _SlowBody):
        log.info("[refused] %s: the body did not arrive within the deadline", request.path)
        return error_answer(408, "the body did not arrive in time", close=True)
    log.info("[gone] %s: the client closed the connection mid-body", request.path)
    return error_answer(400, "the body was cut short", close=True)


def data_route(func: Callable[[web.Request], Awaitable[web.StreamResponse]]
                ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Mark a handler as a data route (gated) and turn body errors into 400s."""

    @functools.wraps(func)
    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return await func(request)
        except (_BadRequest, validation.BodyError) as exc:
            return error_answer(400, str(exc))
        except UNREAD as exc:
            return unread_answer(request, exc)

    handler._scopemem_data_route = True  # type: ignore[attr-defined]
    return handler




Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: What a capability route answers with: the request, the served store (which has the
#: capability) and the checked body.
CapabilityAnswer = Callable[[web.Request, Any, dict[str, Any]], Awaitable[web.StreamResponse]]


def capability_route(path: str, capability: type, missing: str, answer: CapabilityAnswer,
                     refused: tuple[type[Exception], ...]) -> Handler:
    """A route only some stores can answer (browsing, vectors): the body checked against the
    schema (``validation``), a 501 saying ``missing`` when the served store lacks
    ``capability`` (a runtime-checkable protocol), and an exception of ``refused`` (the
    stores' own rules refusing the body) a 400 with its reason."""

    @data_route
    async def handler(request: web.Request) -> web.StreamResponse:
        body = await read_body(request)
        validation.check(path, body)
        store = request.app[SERVED].require_store()
        if not isinstance(store, capability):
            return error_answer(501, missing)
        try:
            return await answer(request, store, body)
        except refused as exc:
            return error_answer(400, str(exc))

    return handler
