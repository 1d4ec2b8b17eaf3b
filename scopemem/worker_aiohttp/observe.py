"""What an operator watches: request and store metrics, and readiness.

``GET /readyz`` (no token, like ``/healthz``) asks the store whether it can serve
(``stores.health.store_ready``: a read of the reserved readiness scope, or the store's own
check, PostgreSQL's pool): ``200 {"ok": true}``, or ``503 {"ok": false, "error": <short
reason>}`` (the store's own message goes to the log only). ``/healthz`` stays static, for
liveness: a process that answers it is alive even while its store is down.

Each application holds its own ``Instruments``: a prometheus-client registry (never the
process-global one) with the series below and the client's own process, platform and GC
collectors. ``GET /metrics`` renders it after the store's counters (``metrics.py``).

``scopemem_worker_requests_total{route, status}``
    answers, by route and status.
``scopemem_worker_request_duration_seconds{route}``
    a histogram of the time from routing to the answer.
``scopemem_worker_requests_in_flight`` / ``scopemem_worker_open_connections``
    requests being answered, connections open (the latter under ``WorkerRunner`` only).
``scopemem_worker_store_operation_duration_seconds{operation}``
    a histogram of each store call's time, by store method.
``scopemem_worker_store_failures_total{operation}``
    store calls that failed (busy, or an error of the store), by store method; a refusal of
    the input (400, 507, 501) is not a failure of the store.

Every label value comes from a fixed set, so no client can add series: ``route`` is the
matched route's path, or ``other`` for anything unrouted (404, 405); ``status`` is the code
when it is one the worker answers (``STATUSES``), else its class (``4xx``); a request whose
client went away before the answer counts as ``499``; ``operation`` is a store method name
(``OPERATIONS``).

With ``serve --workers N`` each process keeps its own request and process series: a scrape
reads the process that answered it (the store's counters are the same from any).

``traced``, the next middleware in, gives each request a server span (kind SERVER, named
``<method> <route>`` with the same bounded route label) that continues the trace context
the request's ``traceparent`` carries; without OpenTelemetry it costs a function call.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from scopemem import tracing
from scopemem.errors import ScopeLimitReached, StoreRefused, StoreUnsupported
from scopemem.stores.base import MemoryStore
from scopemem.stores.health import store_ready
from scopemem.worker_aiohttp.handling import SERVED, json_answer

__all__ = ["INSTRUMENTS", "OPERATIONS", "STATUSES", "Instruments", "TimedStore", "observe",
           "readyz", "traced"]

#: The route label of a request no route matched.
OTHER = "other"
#: The status codes labelled as themselves; any other is labelled by its class.
STATUSES = frozenset({200, 400, 401, 404, 405, 408, 411, 413, 415, 417, 429, 499, 500, 501,
                      503, 507})
#: The store methods timed (those a worker route calls); a store lacking one keeps lacking it.
OPERATIONS = ("retrieve", "search", "mark_used", "write", "list", "forget", "sweep",
              "export_scopes", "export_page", "import_records", "add_counts", "read_counts",
              "ready", "delete_scope", "scrub_provenance", "purge", "scope_page",
              "record_page", "record_history", "read_count_totals", "log_reaches",
              "read_reaches", "vectors_missing", "put_vectors", "nearest")
#: Refusals of the input, not failures of the store.
_REFUSALS = (StoreRefused, ScopeLimitReached, StoreUnsupported)

_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def status_label(status: int) -> str:
    return str(status) if status in STATUSES else f"{status // 100}xx"


class Instruments:
    """One application's series, on its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        self.requests = Counter("scopemem_worker_requests", "Requests answered, by route and"
                                " status.", ("route", "status"), registry=self.registry)
        self.duration = Histogram("scopemem_worker_request_duration_seconds",
                                  "Time to answer a request, by route.", ("route",),
                                  buckets=_BUCKETS, registry=self.registry)
        self.in_flight = Gauge("scopemem_worker_requests_in_flight",
                               "Requests being answered now.", registry=self.registry)
        self.connections: Callable[[], int] = lambda: 0
        Gauge("scopemem_worker_open_connections", "Connections open now.",
              registry=self.registry).set_function(lambda: self.connections())
        self.store_duration = Histogram("scopemem_worker_store_operation_duration_seconds",
                                        "Time of each store call, by store method.",
                                        ("operation",), buckets=_BUCKETS,
                                        registry=self.registry)
        self.store_failures = Counter("scopemem_worker_store_failures",
                                      "Store calls that failed (busy or an error of the "
                                      "store), by store method.", ("operation",),
                                      registry=self.registry)
        for operation in OPERATIONS:  # every series present from the first scrape
            self.store_duration.labels(operation)
            self.store_failures.labels(operation)
        # Children resolved once: the per-request cost is two dict reads.
        self._answers: dict[tuple[str, int], Any] = {}
        self._durations: dict[str, Any] = {}

    def answered(self, route: str, status: int, seconds: float) -> None:
        child = self._answers.get((route, status))
        if child is None:
            child = self._answers[(route, status)] = self.requests.labels(
                route, status_label(status))
        child.inc()
        timer = self._durations.get(route)
        if timer is None:
            timer = self._durations[route] = self.duration.labels(route)
        timer.observe(seconds)

    def timed(self, operation: str, method: Callable[..., Awaitable[Any]]
              ) -> Callable[..., Awaitable[Any]]:
        timer = self.store_duration.labels(operation)
        failures = self.store_failures.labels(operation)

        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return await method(*args, **kwargs)
            except (asyncio.CancelledError, *_REFUSALS):
                raise
            except Exception:
                failures.inc()
                raise
            finally:
                timer.observe(time.perf_counter() - start)

        return call


class TimedStore:
    """``store`` with each of its ``OPERATIONS`` timed; every other attribute is the
    store's own (a method it lacks stays missing, so optional protocols still tell)."""

    def __init__(self, store: MemoryStore, instruments: Instruments) -> None:
        self.inner = store
        for operation in OPERATIONS:
            method = getattr(store, operation, None)
            if method is not None:
                setattr(self, operation, instruments.timed(operation, method))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return repr(self.inner)


INSTRUMENTS = web.AppKey("scopemem_worker_instruments", Instruments)


def route_label(request: web.Request) -> str:
    match = request.match_info
    resource = match.route.resource
    if resource is None or match.http_exception is not None:
        return OTHER
    return resource.canonical


@web.middleware
async def observe(request: web.Request,
                  handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                  ) -> web.StreamResponse:
    """Count and time every answer, outside every other middleware (it sees the final
    status, refusals included)."""
    instruments = request.app[INSTRUMENTS]
    start = time.perf_counter()
    status = 500
    instruments.in_flight.inc()
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except asyncio.CancelledError:
        status = 499
        raise
    finally:
        instruments.in_flight.dec()
        instruments.answered(route_label(request), status, time.perf_counter() - start)


@web.middleware
async def traced(request: web.Request,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    """A server span per request (``scopemem.tracing``; a no-op without OpenTelemetry),
    continuing the trace context the request carries, named by the matched route (the same
    bounded label as the metrics)."""
    route = route_label(request)
    with tracing.span(f"{request.method} {route}",
                      {"http.request.method": request.method, "http.route": route},
                      kind="server", carrier=request.headers) as span:
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            span.set_attribute("http.response.status_code", exc.status)
            raise
        span.set_attribute("http.response.status_code", response.status)
        return response


async def readyz(request: web.Request) -> web.StreamResponse:
    reason = await store_ready(request.app[SERVED].require_store())
    if reason is not None:
        return json_answer({"ok": False, "error": reason}, status=503)
    return json_answer({"ok": True})
