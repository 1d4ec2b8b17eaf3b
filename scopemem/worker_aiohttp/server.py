"""Running the worker: connections, their deadlines and their number, below the application.

aiohttp's defaults suit a trusted network: an idle connection may stay about an hour, a
request may take as long as it likes to send its header, and there is no bound on how many
connections are open. A shared worker meets clients that are slow on purpose (a thousand
sockets dribbling a byte a minute exhaust the process's file descriptors, and then the
stores cannot open their files either). ``Limits`` bounds all of it:

* ``idle_timeout``: a connection that has not sent a complete request header within this
  many seconds of opening, or of its last answer, is closed. The keep-alive timer of
  aiohttp's protocol is that clock (it fires only while the connection waits for a request,
  and bytes of an incomplete header do not reset it), so one setting is both the header
  deadline and the idle keep-alive timeout.
* ``body_timeout``: the application reads a body within this many seconds or answers 408
  (``handling.read_body``).
* ``max_connections``: at most this many connections at once. A connection beyond it first
  displaces the oldest connection that has never sent a complete request (idle or dribbling
  a header: it has cost the server nothing yet and loses nothing), else the oldest that waits
  for its next request (a client reconnects and loses nothing either); when every connection
  is busy with a request, the newcomer is answered a fixed 503 and closed, without parsing
  anything. The default is what the process's soft open-file limit leaves after the
  store's own descriptors (``stores.base.descriptors_held``), the process's
  (``PROCESS_DESCRIPTORS``) and ``backlog``.
* ``backlog``: the listening socket's queue, which is also how many connections the event
  loop accepts in one turn; 128, less when the open-file limit is small
  (``connection_budget``). An accepted connection holds its descriptor for up to
  ``ACCEPT_TURNS`` turns before a refused one is closed (its accepting task starts, the
  fence admits or refuses it, the refused one's socket closes), and each of those turns may
  accept a backlog more, so the budget sets that many backlogs aside.

A process out of descriptors all the same (a limit too small for the store) cannot accept:
asyncio then stops accepting for a second; that is one warning line, never a traceback.

Everything the HTTP parser refuses is answered in JSON like the application's own refusals
(``{"error": …}``), never echoing the request's bytes, logged as one line without a
traceback. No answer carries aiohttp's version banner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import attrs
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_protocol import RequestHandler

from scopemem.worker_aiohttp.records_json import dumps

__all__ = ["SERVER_NAME", "Limits", "WorkerRunner", "running", "serve_until_signalled"]

log = logging.getLogger("scopemem.worker")

#: What the ``Server`` header says: the product, never a version.
SERVER_NAME = "scopemem"

_BUSY_BODY = b'{"error":"busy: too many connections, retry shortly"}'
# The whole answer to a connection beyond the limit, written before anything is parsed.
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
         b"Retry-After: 1\r\nConnection: close\r\nServer: " + SERVER_NAME.encode()
         + b"\r\nContent-Length: " + str(len(_BUSY_BODY)).encode() + b"\r\n\r\n" + _BUSY_BODY)


#: Descriptors a worker process holds beside its store's and its connections': standard
#: streams, the event loop's, the listening socket, the log, SQLite's temporary files.
PROCESS_DESCRIPTORS = 32
#: Turns of the event loop an accepted connection holds a descriptor before the fence's
#: refusal closes it (see the module docstring); a backlog may be accepted in each.
ACCEPT_TURNS = 3
#: The least and the most ``backlog``; and the fewest connections a worker is given.
MIN_BACKLOG, MAX_BACKLOG = 16, 128
MIN_CONNECTIONS = 16
MAX_CONNECTIONS = 16_384


@attrs.frozen
class Budget:
    """How the open-file limit is shared: ``connections`` at most, accepted ``backlog`` at a
    time; ``short`` when the limit leaves less than that (the process may run out)."""

    connections: int
    backlog: int
    short: bool = False


def connection_budget(reserved: int = 0) -> Budget:
    """The connections and the backlog the soft open-file limit leaves after ``reserved``
    descriptors (the store's, ``stores.base.descriptors_held``) and the process's own: a
    fifth of what is left for the backlog (16 to 128), ``ACCEPT_TURNS`` backlogs set aside
    for connections accepted and not yet admitted or closed, the rest for connections (at
    most 16,384; 4,096 and 128 with no limit)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return Budget(4096, MAX_BACKLOG)
    left = soft - reserved - PROCESS_DESCRIPTORS
    backlog = max(MIN_BACKLOG, min(MAX_BACKLOG, left // 5))
    connections = left - ACCEPT_TURNS * backlog
    if connections < MIN_CONNECTIONS:
        return Budget(MIN_CONNECTIONS, MIN_BACKLOG, short=True)
    return Budget(min(MAX_CONNECTIONS, connections), backlog)


def default_max_connections() -> int:
    """``connection_budget``'s connections for a store that holds no descriptors."""
    return connection_budget().connections


@attrs.frozen
class Limits:
    """The bounds a running worker puts on its connections (see the module docstring)."""

    idle_timeout: float = 10.0
    body_timeout: float = 30.0
    max_connections: int = attrs.field(factory=default_max_connections)
    backlog: int = MAX_BACKLOG

    def __attrs_post_init__(self) -> None:
        for name in ("idle_timeout", "body_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
        for name in ("max_connections", "backlog"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")


#: The longest request line (method, address, version) taken, in bytes. aiohttp's 8,190
#: is too short for the Memory Hub's search, whose address carries a brief of up to 4,000
#: characters that URL-encoding may make twelve bytes each (48,000), and its three inputs.
MAX_REQUEST_LINE = 64 * 1024


def _error(status: int, reason: str) -> web.Response:
    response = web.json_response({"error": reason}, status=status, dumps=dumps)
    response.headers[hdrs.SERVER] = SERVER_NAME
    response.force_close()
    return response


def _parser_refusal(exc: BaseException | None, status: int) -> web.Response:
    """The answer to a request aiohttp's HTTP parser (or protocol) refused: a malformed
    ``Content-Length`` (``0x10``, ``5e2``, ``+5``, non-ASCII digits, duplicated, or beside
    ``Transfer-Encoding``) is the fence's 411 (413 when it overflows); anything else keeps
    its status with a fixed reason. Never the parser's message: it quotes the request."""
    reason = ""
    if isinstance(exc, HttpProcessingError):
        reason = (exc.message or "").split("\n", 1)[0].lower()
    if "content-length" in reason:
        if "overflow" in reason:  # digits, just too many of them
            return _error(413, "the body is too large")
        return _error(411, "Content-Length must be a plain decimal number of bytes")
    if status == 400 and "invalid method" in reason:
        # What follows a body the server never read (a POST without Content-Length whose
        # bytes came in the same packet): the request it belonged to needed a length.
        return _error(411, "a request body needs exactly one Content-Length header")
    if status >= 500:
        return _error(500, "internal error; see the worker's log")
    return _error(status, "malformed HTTP request")


class _FencedRequestHandler(RequestHandler):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        manager = self._manager
        if isinstance(manager, _FencedServer) and not manager.admit(self):
            transport.write(_BUSY)  # type: ignore[attr-defined]
            self.force_close()

    def waiting(self) -> bool:
        """Whether the connection waits for a request (idle, or its header incomplete)."""
        waiter = getattr(self, "_waiter", None)
        return (waiter is not None and not waiter.done()
                and not getattr(self, "_messages", True))

    def proven(self) -> bool:
        """Whether the connection has sent a complete request already (a client keeping
        its connection alive), as opposed to one that never has (idle or dribbling)."""
        return getattr(self, "_request_count", 1) > 0

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        if status >= 500 and exc is not None:
            log.error("[error] the HTTP layer failed: %s: %s", type(exc).__name__, exc)
        else:
            log.info("[refused] malformed HTTP request (%d): %s", status,
                     type(exc).__name__ if exc is not None else message or "-")
        return _parser_refusal(exc, status)


class _FencedServer(web.Server):
    limits: Limits = Limits()

    def __call__(self) -> RequestHandler:
        return _FencedRequestHandler(self, loop=self._loop, **self._kwargs)

    def admit(self, handler: _FencedRequestHandler) -> bool:
        """Make room for ``handler`` (just counted among the connections): True when it may
        stay, having displaced the oldest connection waiting for a request if need be."""
        connections = self._connections
        if len(connections) <= self.limits.max_connections:
            return True
        # Oldest first (insertion order): a connection that never sent a request before one
        # that has and now waits for its next (a client keeping its connection alive).
        fallback = None
        for other in connections:
            if other is handler or not isinstance(other, _FencedRequestHandler) \
                    or not other.waiting():
                continue
            if not other.proven():
                other.force_close()
                return True
            if fallback is None:
                fallback = other
        if fallback is not None:
            fallback.force_close()
            return True
        return False


class ConnectionCount:
    """How many connections the server running an application has open (0 before it runs):
    put one in the application under ``CONNECTIONS`` and ``WorkerRunner`` fills it in."""

    def __init__(self) -> None:
        self.server: web.Server | None = None

    def __call__(self) -> int:
        return 0 if self.server is None else len(self.server.connections)


CONNECTIONS = web.AppKey("scopemem_worker_connections", ConnectionCount)


class WorkerRunner(web.AppRunner):
    """An ``AppRunner`` whose connections keep ``limits`` (see the module docstring).

    aiohttp refuses malformed requests while parsing, before routing and middlewares, and
    offers no public hook for that answer; this runner builds the same server as
    ``AppRunner`` and swaps in a protocol whose ``handle_error`` answers in JSON and knows the
    fence's rule for lengths.

    It also turns off aiohttp's lingering close (``lingering_time=0``): by default a request
    answered without its body being read (411, 413, 401, 404) keeps the connection open for
    up to ten seconds to read and discard that body. Here such a connection is closed right
    after the answer, so a refused body is never read at all."""

    def __init__(self, app: web.Application, *, limits: Limits | None = None,
                 **kwargs: Any) -> None:
        self.limits = limits or Limits()
        kwargs.setdefault("lingering_time", 0)
        kwargs.setdefault("max_line_size", MAX_REQUEST_LINE)
        kwargs.setdefault("keepalive_timeout", self.limits.idle_timeout)
        super().__init__(app, **kwargs)
        # An application served again (a restart in process) is frozen: aiohttp deprecates
        # changing its state, so the timeout is set only when it changes.
        if app.get(BODY_TIMEOUT) != self.limits.body_timeout:
            app[BODY_TIMEOUT] = self.limits.body_timeout

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        if type(server) is web.Server:
            server.__class__ = _FencedServer
            server.limits = self.limits  # type: ignore[attr-defined]
        count = self.app.get(CONNECTIONS)
        if count is not None:
            count.server = server
        return server


def _quiet_accept_failures(loop: asyncio.AbstractEventLoop) -> None:
    """An ``accept`` that fails for want of descriptors (asyncio then pauses accepting for a
    second) is one warning line, not asyncio's error with a traceback; anything else goes
    to the handler there was."""
    previous = loop.get_exception_handler()

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system"):
            log.warning("[busy] cannot accept connections: %s; accepting again shortly",
                        context.get("exception"))
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


#: How long the application waits for a body (set by the runner serving it).
BODY_TIMEOUT = web.AppKey("scopemem_worker_body_timeout", float)


@contextlib.asynccontextmanager
async def running(app: web.Application, host: str = "127.0.0.1", port: int = 0,
                  *, reuse_port: bool = False, **runner_kwargs: Any) -> AsyncIterator[str]:
    """Serve ``app`` on ``host:port`` (0 picks a free port; ``reuse_port``: beside the other
    worker processes' sockets, ``--workers``) and yield its base URL; on exit, shut down
    gracefully (in-flight requests finish, then the store closes)."""
    runner = WorkerRunner(app, **runner_kwargs)
    await runner.setup()
    _quiet_accept_failures(asyncio.get_running_loop())
    backlog = runner.limits.backlog
    try:
        site = web.TCPSite(runner, host, port, backlog=backlog, reuse_port=reuse_port)
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        if ":" in bound_host:
            bound_host = f"[{bound_host}]"
        yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()


async def serve_until_signalled(
    app: web.Application,
    host: str,
    port: int,
    *,
    on_ready: Callable[[str], None] | None = None,
    shutdown_timeout: float = 60.0,
    reuse_port: bool = False,
    **runner_kwargs: Any,
) -> None:
    """Serve until SIGINT or SIGTERM, then shut down gracefully: stop accepting, let
    in-flight requests finish (up to ``shutdown_timeout`` seconds), close the store. A second
    signal during shutdown gets Python's default behaviour (exit at once)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for signum in signals:
        loop.add_signal_handler(signum, stop.set)
    try:
        async with running(app, host, port, reuse_port=reuse_port,
                           shutdown_timeout=shutdown_timeout,
                           **runner_kwargs) as url:
            if on_ready is not None:
                on_ready(url)
            await stop.wait()
            for signum in signals:
                loop.remove_signal_handler(signum)
            log.info("shutting down: finishing in-flight requests, then closing the store")
    finally:
        for signum in signals:
            loop.remove_signal_handler(signum)
