"""How the worker client talks to the Memory Worker: one POST of a JSON object, one JSON
object back or an exception saying why not, and the checks of what comes back. Nothing here
knows what a route means. Retries, idempotency keys, the breaker, no redirect followed and
the reply's cap: ``docs/worker.md`` ("Retries and the idempotency key").
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from scopemem import tracing
from scopemem.core.records import Record, WireError, from_wire
from scopemem.core.text import is_bearer_token
from scopemem.errors import ScopeLimitReached, StoreError, StoreRefused, StoreUnsupported
from scopemem.stores.retrying import (
    TRANSIENT_STATUSES,
    Breaker,
    BreakerOpen,
    RetryPolicy,
    Transient,
    retry_after,
)

if TYPE_CHECKING:
    import aiohttp

__all__ = ["Command", "CallFailed", "WorkerTransport", "WorkerUnavailable", "in_scope",
           "listed", "parsed", "url_problem", "whole_number"]

T = TypeVar("T")

log = logging.getLogger("scopemem")

DEFAULT_TIMEOUT = 5.0
# The largest reply read: 50 records of 4000 characters are well under it.
MAX_REPLY_BYTES = 8 * 1024 * 1024
#: The header naming one call across its retries; the worker answers a replay with the
#: first answer (``worker_aiohttp.idempotency``).
IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The routes that change something: each call carries an idempotency key.
KEYED_ROUTES = frozenset({"/write", "/used", "/forget", "/sweep", "/import", "/counts",
                          "/delete-scope", "/scrub-provenance", "/purge", "/log-reaches"})
# Answers that refuse the body itself: sending it again would be refused again.
_REFUSED_BODY = (400, 413)

#: ``WorkerTransport.command``: what the store's parts are given to reach the worker.
Command = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class WorkerUnavailable(StoreError):
    """The client's breaker is open: the worker failed too often lately; nothing was sent."""


class CallFailed(Exception):
    """A call without a usable JSON object: ``status`` is the worker's (None: no answer),
    ``transient`` whether a later call may succeed."""

    def __init__(self, message: str, status: int | None = None, *,
                 transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


def url_problem(base_url: object) -> str | None:
    """What is wrong with ``base_url`` as the worker's address, or None."""
    if not isinstance(base_url, str) or not base_url:
        return "must be a non-empty string"
    try:
        parts = urlsplit(base_url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"must be an http:// or https:// URL with a host, got {base_url!r}"
    if parts.query or parts.fragment:
        return "must not have a query or a fragment"
    return None


def whole_number(data: Mapping[str, Any], route: str, name: str) -> int:
    """The whole number ``name`` of a worker's answer, or ``StoreError``."""
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreError(f"memory worker {route} answered without a whole number {name!r}")
    return value


def listed(data: Mapping[str, Any], route: str, name: str) -> list[Any]:
    """The list ``name`` of a worker's answer, or ``StoreError``."""
    items = data.get(name)
    if not isinstance(items, list):
        raise StoreError(f"memory worker {route} answered without a '{name}' list")
    return items


def parsed(route: str, what: str, parse: Callable[[Any], T], items: Iterable[Any]
           ) -> list[T]:
    """Each of ``items`` parsed, or ``StoreError`` naming the first ``parse`` refuses."""
    done = []
    for n, item in enumerate(items):
        try:
            done.append(parse(item))
        except ValueError as exc:
            raise StoreError(f"memory worker {route} answered {what} that is not valid"
                             f" ([{n}]: {exc})") from None
    return done


def in_scope(scope_key: str, parse: Callable[[Any], Record] | None = None
             ) -> Callable[[Any], Record]:
    """A parser (``parse``, else the wire's) of a record of ``scope_key``: ``WireError`` for
    one of another scope, which can only be a server's bug."""
    def record(item: Any) -> Record:
        if not isinstance(item, dict):
            raise WireError("a record must be a JSON object")
        found = from_wire(item, Record) if parse is None else parse(item)
        if found.scope_key != scope_key:
            raise WireError(f"a record of {found.scope_key!r}, not of {scope_key!r}")
        return found
    return record


class WorkerTransport:
    """One ``aiohttp.ClientSession`` per event loop it is used on (a session cannot cross
    loops). Each attempt has at most ``timeout`` seconds, a call's attempts fit in ``retry``'s
    deadline. After ``close`` every call fails, as a closed SQL store's does."""

    def __init__(self, base_url: str, token: str, *, timeout: float = DEFAULT_TIMEOUT,
                 retry: RetryPolicy | None = None, breaker: Breaker | None = None,
                 token_source: str | None = None) -> None:
        problem = url_problem(base_url)
        if problem is not None:
            raise ValueError(f"base_url {problem}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if not is_bearer_token(token):
            raise ValueError("the bearer token must be non-empty printable ASCII without spaces")
        self.base_url = base_url.rstrip("/")
        self._token = token
        # Where the token was read from (``$MEMORY_TOKEN (memory.stores.worker.token_env)``),
        # named when the worker refuses it.
        self.token_source = token_source
        self.timeout = float(timeout)
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or Breaker()
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def check_reachable(self) -> None:
        """``StoreError`` unless ``GET /healthz`` answers 200 (``memory.fallback =
        "refuse"``). Blocking on purpose: it runs once, at startup, before any loop."""
        import http.client

        parts = urlsplit(self.base_url)
        connection = (http.client.HTTPSConnection if parts.scheme == "https"
                      else http.client.HTTPConnection)(parts.netloc, timeout=self.timeout)
        try:
            connection.request("GET", parts.path + "/healthz")
            status = connection.getresponse().status
        except (OSError, http.client.HTTPException) as exc:
            raise StoreError(f"memory worker {self.base_url} is not reachable: "
                             f"{type(exc).__name__}: {exc}") from None
        finally:
            connection.close()
        if status != 200:
            raise StoreError(f"memory worker {self.base_url} answered {status} to /healthz")

    def _session_for_loop(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._session_loop is not loop:
            self._session = aiohttp.ClientSession(
                headers={"Authorization": f"Bearer {self._token}"},
                timeout=aiohttp.ClientTimeout(total=self.timeout),
            )
            self._session_loop = loop
        return self._session

    async def command(self, route: str, payload: dict[str, Any]) -> dict[str, Any]:
        """``call``, its failure raised as the ``StoreError`` the worker's status means."""
        try:
            return await self.call(route, payload)
        except CallFailed as exc:
            error = (StoreRefused if exc.status in _REFUSED_BODY
                     else ScopeLimitReached if exc.status == 507
                     else StoreUnsupported if exc.status in (404, 501) else StoreError)
            raise error(f"memory worker {route} failed: {exc}") from None

    async def call(self, route: str, payload: dict[str, Any]) -> dict[str, Any]:
        """POST ``payload`` to ``route``, retried within the deadline: the reply's JSON
        object, or ``CallFailed`` (``WorkerUnavailable`` while the breaker is open)."""
        if self._closed:
            raise CallFailed("the worker store is closed")
        try:
            self.breaker.check()
        except BreakerOpen as exc:
            raise WorkerUnavailable(f"memory worker {route} skipped: {exc}") from None
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if route in KEYED_ROUTES:
            headers[IDEMPOTENCY_HEADER] = uuid.uuid4().hex
        try:
            # A change (keyed, so safe to send again) is tried until the deadline: a worker
            # restarting takes longer than the attempts a read makes, and the change, a
            # run's lessons, would be lost.
            data = await self.retry.run(
                lambda budget: self._attempt(route, body, headers, budget),
                change=route in KEYED_ROUTES)
        except CallFailed as exc:
            if exc.transient and self.breaker.failed():
                log.warning("[memory] worker %s failed %d times in a row (last: %s); not"
                            " calling it for %gs", self.base_url, self.breaker.threshold,
                            exc, self.breaker.cool_down)
            raise
        self.breaker.succeeded()
        return data

    async def _attempt(self, route: str, body: bytes, headers: dict[str, str],
                       budget: float) -> dict[str, Any]:
        """One round trip within ``min(timeout, budget)`` seconds; ``Transient`` wraps a
        failure worth another attempt."""
        import aiohttp

        session = self._session_for_loop()
        timeout = min(self.timeout, budget)
        try:
            with tracing.span(f"POST {route}", {"http.request.method": "POST",
                                                "url.path": route},
                              kind="client") as span:
                sent = dict(headers)
                tracing.inject(sent)  # the W3C trace context, for the worker's span
                async with session.post(self.base_url + route, data=body, headers=sent,
                                        allow_redirects=False,
                                        timeout=aiohttp.ClientTimeout(total=timeout)
                                        ) as response:
                    status = response.status
                    span.set_attribute("http.response.status_code", status)
                    wait = retry_after(response.headers.get("Retry-After"))
                    raw = await _read_capped(response)
        except TimeoutError:
            raise Transient(CallFailed(f"timed out after {timeout:g}s", transient=True))\
                from None
        except aiohttp.ClientError as exc:
            failure = CallFailed(f"transport error: {type(exc).__name__}: {exc}",
                                 transient=True)
            if isinstance(exc, aiohttp.ClientConnectorError) and route not in KEYED_ROUTES:
                # Nobody listens: a read (the per-turn block, a listing) degrades at once
                # rather than hold the turn through the backoff; a write, which would be
                # lost, waits for a worker that may be restarting. Either counts toward the
                # breaker.
                raise failure from None
            raise Transient(failure) from None
        data = _json_object(raw)
        if not 200 <= status < 300:
            reason = data.get("error") if isinstance(data, dict) else None
            if not isinstance(reason, str):
                reason = raw[:200].decode("utf-8", "replace").strip() or "no reason given"
            if status == 401 and self.token_source:
                reason += (f"; the token sent was read from {self.token_source}, and the "
                           "worker was started with another")
            if status == 404:  # the worker routes every path it serves
                reason += (f"; this worker serves no {route} (a release older than this"
                           " client: upgrade the worker, or base_url names another path)")
            failure = CallFailed(f"answered {status}: {reason}", status,
                                 transient=status in TRANSIENT_STATUSES)
            if failure.transient:
                raise Transient(failure, wait)
            raise failure
        if data is None:
            raise CallFailed(f"answered {status} with a body that is not a JSON object")
        return data

    async def probe(self, route: str) -> tuple[int, dict[str, Any] | None]:
        """One ``GET route`` (no retry, no breaker: how the worker is now): its status and
        JSON object (None when the body is not one)."""
        session = self._session_for_loop()
        async with session.get(self.base_url + route, allow_redirects=False) as response:
            return response.status, _json_object(await _read_capped(response))

    async def close(self) -> None:
        self._closed = True
        session, self._session, self._session_loop = self._session, None, None
        if session is not None and not session.closed:
            await session.close()


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise CallFailed(f"answered more than {MAX_REPLY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
