"""Tracing with OpenTelemetry, when it is installed (the ``otel`` extra).

Every call here is a no-op unless the host process set a ``TracerProvider`` (the SDK's,
with an exporter), which takes the ``opentelemetry-api`` package: without one, no span is
made and no ``traceparent`` sent, for the cost of one check, and nothing here ever imports
the API (a process that has not imported it has set no provider).

The spans (tracer ``scopemem``):

``context_block``
    one per-turn read (``Memory.context``), with a ``scope_read`` child per scope read.
``reflection``
    one per reflection, with children ``reflection.model`` (the model call),
    ``reflection.gate`` (the write gate) and ``reflection.write`` (one per scope written).
``memory.<operation>``
    each human operation of the typed API (remember, list, forget, sweep, search, export,
    stats).
``POST /<route>``
    the worker client's requests (kind CLIENT, one per attempt), which carry the W3C trace
    context (``traceparent``) to the worker; the worker's spans (kind SERVER, named by the
    matched route) continue it.

Attributes carry scope kinds (``scope.kind = "user"``), counts and outcomes, never a
record's text, and a scope's key (which may name a person) only when the configuration
asks for it (``memory.tracing.scope_keys``).
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import AsyncGenerator, Callable, Coroutine, Iterator, Mapping, MutableMapping
from typing import Any, ParamSpec, TypeVar

from scopemem.core.scopes import scope_kind

__all__ = ["current_trace_id", "inject", "scope_attributes", "span", "traced",
           "traced_stream"]

P = ParamSpec("P")
T = TypeVar("T")

TRACER = "scopemem"
_propagate: Any = None  # ``opentelemetry.propagate``, once a span is recorded


class _NoSpan:
    """What ``span`` gives when nothing is recorded: a context manager that takes
    attributes and keeps none."""

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *_exc: object) -> None:
        pass

    def set_attribute(self, key: str, value: object) -> None:
        pass

    def set_attributes(self, attributes: Mapping[str, object]) -> None:
        pass

    def is_recording(self) -> bool:
        return False


NO_SPAN = _NoSpan()


def _api() -> Any:
    """The ``opentelemetry.trace`` module when a tracer provider is set, else None. A process
    that never imported the API has set no provider, so this never imports it; nor does it
    trace without a provider (the API's own tracer would drop every span)."""
    global _propagate
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None or isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return None
    if _propagate is None:
        from opentelemetry import propagate

        _propagate = propagate
    return trace


def span(name: str, attributes: Mapping[str, Any] | None = None, *, kind: str = "internal",
         carrier: Mapping[str, str] | None = None) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name``, current inside the block (so tasks started there are its
    children). ``kind``: internal, client or server; ``carrier``: the headers of a request
    whose trace context (``traceparent``) is the parent. An exception leaves through the
    span, which records its type (``error.type``) and an error status, never its message
    (which may quote a record). With nothing recorded, a no-op costing a function call."""
    trace = _api()
    if trace is None:
        return NO_SPAN
    return _recorded(trace, name, attributes, kind, carrier)


@contextlib.contextmanager
def _recorded(trace: Any, name: str, attributes: Mapping[str, Any] | None, kind: str,
              carrier: Mapping[str, str] | None) -> Iterator[Any]:
    context = _propagate.extract(carrier) if carrier is not None else None
    with trace.get_tracer(TRACER).start_as_current_span(
            name, context=context, kind=getattr(trace.SpanKind, kind.upper()),
            attributes=attributes, record_exception=False,
            set_status_on_exception=False) as current:
        try:
            yield current
        except BaseException as exc:
            current.set_attribute("error.type", type(exc).__name__)
            current.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
            raise


def inject(headers: MutableMapping[str, str]) -> None:
    """Put the current trace context (``traceparent``) into ``headers``, when a provider
    is set."""
    if _api() is not None:
        _propagate.inject(headers)


def current_trace_id() -> str | None:
    """The current span's trace id (32 hex digits), or None when no span this process
    records is current (no provider configured: a trace context a request carried is not
    enough). Never imports the API: a process that has not imported it has no span."""
    trace = _api()
    if trace is None:
        return None
    current = trace.get_current_span()
    context = current.get_span_context()
    if not current.is_recording() or not context.is_valid:
        return None
    return f"{context.trace_id:032x}"


def scope_attributes(key: str, with_key: bool = False) -> dict[str, str]:
    """What a span says about a scope: its kind; its key (which may name a person) only
    ``with_key`` (``memory.tracing.scope_keys``)."""
    if with_key:
        return {"scope.kind": scope_kind(key), "scope.key": key}
    return {"scope.kind": scope_kind(key)}


def traced(name: str) -> Callable[[Callable[P, Coroutine[Any, Any, T]]],
                                  Callable[P, Coroutine[Any, Any, T]]]:
    """An async function run in a span named ``name`` (``outcome`` ok, or the error's type)."""

    def wrap(function: Callable[P, Coroutine[Any, Any, T]]
             ) -> Callable[P, Coroutine[Any, Any, T]]:
        @functools.wraps(function)
        async def call(*args: P.args, **kwargs: P.kwargs) -> T:
            with span(name) as current:
                result = await function(*args, **kwargs)
                current.set_attribute("outcome", "ok")
                return result

        return call

    return wrap


def traced_stream(name: str) -> Callable[[Callable[P, AsyncGenerator[T, None]]],
                                         Callable[P, AsyncGenerator[T, None]]]:
    """An async generator in a span named ``name``, from its first item asked to its end,
    counting the items (``records``). The span is not made current: a generator's context
    is its consumer's, between items."""

    def wrap(function: Callable[P, AsyncGenerator[T, None]]
             ) -> Callable[P, AsyncGenerator[T, None]]:
        @functools.wraps(function)
        async def call(*args: P.args, **kwargs: P.kwargs) -> AsyncGenerator[T, None]:
            trace = _api()
            items = function(*args, **kwargs)
            if trace is None:
                async with contextlib.aclosing(items):
                    async for item in items:
                        yield item
                return
            current = trace.get_tracer(TRACER).start_span(name)
            count = 0
            outcome = "ok"
            try:
                async with contextlib.aclosing(items):
                    async for item in items:
                        count += 1
                        yield item
            except GeneratorExit:
                outcome = "closed"  # the consumer stopped early
                raise
            except BaseException as exc:
                outcome = "failed"
                current.set_attribute("error.type", type(exc).__name__)
                current.set_status(trace.Status(trace.StatusCode.ERROR, type(exc).__name__))
                raise
            finally:
                current.set_attributes({"records": count, "outcome": outcome})
                current.end()

        return call

    return wrap
