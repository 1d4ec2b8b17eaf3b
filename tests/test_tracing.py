"""Tracing with OpenTelemetry: the spans of the read path, reflection and the human
operations, and one trace from ``context_block`` through the worker client to the worker's
own span; attributes never carry a record's text or a key that names a person; without the
API every call is a no-op. Spans are read from the SDK's in-memory exporter."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp import web
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from scopemem import Caller, ConfigError, Memory, MemoryConfig, Request, tracing
from scopemem.config import config_from_mapping
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.retrying import RetryPolicy
from scopemem.stores.worker import WorkerStore
from scopemem.worker_aiohttp.app import create_app
from scopemem.worker_aiohttp.logs import JsonFormatter
from tests.api.test_memory_write import Scripted, lesson, make_memory, reflect, run
from tests.conftest import fact

TOKEN = "s3cret-token"
ORG, USER = "org:acme", "user:slack:UA"
#: What no attribute may carry: the person's id and the records' text.
PRIVATE = ("UA", "make deploy-fast", "staging cluster", "pytest with -p")


class _Switched(SimpleSpanProcessor):
    """Exports only while a test of this module runs (the provider is process-wide)."""

    active = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.active:
            super().on_end(span)


_EXPORTER = InMemorySpanExporter()
_PROCESSOR = _Switched(_EXPORTER)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if _PROCESSOR not in provider._active_span_processor._span_processors:
        provider.add_span_processor(_PROCESSOR)
    _EXPORTER.clear()
    _PROCESSOR.active = True
    yield _EXPORTER
    _PROCESSOR.active = False
    _EXPORTER.clear()


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def assert_private(spans: InMemorySpanExporter) -> None:
    for span in spans.get_finished_spans():
        for value in (span.attributes or {}).values():
            for secret in PRIVATE:
                assert secret not in str(value), (span.name, value)


async def test_a_context_block_through_the_worker_is_one_trace(aiohttp_server, clock, spans):
    backing = InMemoryStore(clock=clock)
    await backing.write(ORG, [fact("deploys go to the staging cluster first")])
    await backing.write(USER, [fact("this user deploys with make deploy-fast")])
    server = await aiohttp_server(create_app(backing, TOKEN))
    worker = WorkerStore(str(server.make_url("")), TOKEN)
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory"), worker)
    try:
        block = await memory.context_block(Request(text="how do deploys work",
                                                   user_id="slack:UA"))
        await memory.marks_saved()  # the hits shown are marked used, in the same trace
    finally:
        await memory.close()
    assert "make deploy-fast" in block and "staging cluster" in block

    [root] = named(spans, "context_block")
    assert root.parent is None and root.attributes["scopes.read"] == 2
    reads = named(spans, "scope_read")
    assert sorted(span.attributes["scope.kind"] for span in reads) == ["org", "user"]
    assert all(span.parent.span_id == root.context.span_id for span in reads)
    clients = [span for span in named(spans, "POST /retrieve")
               if span.kind == trace.SpanKind.CLIENT]
    servers = [span for span in named(spans, "POST /retrieve")
               if span.kind == trace.SpanKind.SERVER]
    assert len(clients) == len(servers) == 2
    by_id = {span.context.span_id: span for span in clients}
    for client in clients:  # each scope's request is a child of that scope's read
        assert client.parent.span_id in {span.context.span_id for span in reads}
        assert client.attributes["http.response.status_code"] == 200
    for server in servers:  # the worker continues the client's context
        assert server.context.trace_id == root.context.trace_id
        assert server.parent.span_id in by_id and server.parent.is_remote
        assert server.attributes["http.route"] == "/retrieve"
    # The block's own work is one trace (the use counts of the hits shown included); the
    # counters flushed at close are not part of it.
    assert {span.name for span in spans.get_finished_spans()
            if span.context.trace_id != root.context.trace_id} <= {"POST /counts"}
    assert {span.context.trace_id for span in named(spans, "POST /used")} == {
        root.context.trace_id}
    assert_private(spans)


async def test_the_worker_continues_the_trace_context_a_request_carries(aiohttp_server, clock,
                                                                       spans):
    server = await aiohttp_server(create_app(InMemoryStore(clock=clock), TOKEN))
    trace_id, parent_id = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    headers = {"Authorization": f"Bearer {TOKEN}",
               "traceparent": f"00-{trace_id}-{parent_id}-01"}
    async with aiohttp.ClientSession() as session:
        async with session.post(server.make_url("/list"), headers=headers,
                                json={"scopeKey": USER, "limit": 5}) as response:
            assert response.status == 200
        async with session.get(server.make_url("/no/such/route/UA")) as response:
            assert response.status == 404
    [listed] = named(spans, "POST /list")
    assert listed.kind == trace.SpanKind.SERVER
    assert f"{listed.context.trace_id:032x}" == trace_id
    assert f"{listed.parent.span_id:016x}" == parent_id
    # An unrouted path is named by the bounded label, never by what the client sent.
    [other] = named(spans, "GET other")
    assert other.attributes["http.response.status_code"] == 404
    assert_private(spans)


async def test_each_attempt_of_a_retried_write_is_a_client_span(aiohttp_server, spans):
    answers = iter([web.json_response({"error": "busy"}, status=503,
                                      headers={"Retry-After": "0"}),
                    web.json_response({"ok": True, "inserted": 1})])
    seen: list[str | None] = []

    async def write(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("traceparent"))
        return next(answers)

    app = web.Application()
    app.router.add_post("/write", write)
    server = await aiohttp_server(app)
    worker = WorkerStore(str(server.make_url("")), TOKEN,
                         retry=RetryPolicy(attempts=2, change_attempts=2, initial=0.01,
                                           most=0.01))
    try:
        with tracing.span("a bot's turn") as turn:
            await worker.write(ORG, [fact("deploys go to the staging cluster first")])
    finally:
        await worker.close()
    attempts = named(spans, "POST /write")
    assert [span.attributes["http.response.status_code"] for span in attempts] == [503, 200]
    assert all(span.parent.span_id == turn.get_span_context().span_id for span in attempts)
    # Each attempt sends its own span as the parent, in the same trace.
    assert [header.split("-")[1:3] for header in seen if header] == [
        [f"{span.context.trace_id:032x}", f"{span.context.span_id:016x}"] for span in attempts]
    assert_private(spans)


async def test_reflection_traces_the_model_the_gate_and_each_write(clock, spans):
    scripted = Scripted()
    memory = make_memory(InMemoryStore(clock=clock), clock, scripted)
    scripted.replies = [{"facts": [lesson("this user runs pytest with -p no:cacheprovider",
                                          audience="user"),
                                   lesson("the build runs on the shared runners")],
                         "summary": "a pytest question"}]
    await reflect(memory, run())
    [root] = named(spans, "reflection")
    assert root.attributes["outcome"] == "reflected"
    assert root.attributes["records.inserted"] == 3
    [model] = named(spans, "reflection.model")
    [gate] = named(spans, "reflection.gate")
    writes = named(spans, "reflection.write")
    assert gate.attributes["candidates"] == 3
    assert sorted(span.attributes["scope.kind"] for span in writes) == ["org", "user"]
    for child in (model, gate, *writes):
        assert child.parent.span_id == root.context.span_id
    assert_private(spans)


async def test_a_noise_summary_is_a_rejected_candidate_not_a_rejected_fact(clock, spans):
    scripted = Scripted()
    memory = make_memory(InMemoryStore(clock=clock), clock, scripted)
    scripted.replies = [{"facts": [lesson("the build runs on the shared runners")],
                         "summary": "ok"}]
    await reflect(memory, run())
    [root] = named(spans, "reflection")
    [gate] = named(spans, "reflection.gate")
    assert (root.attributes["facts.offered"], root.attributes["facts.rejected"]) == (1, 0)
    assert (gate.attributes["candidates"], gate.attributes["candidates.rejected"]) == (2, 1)


async def test_each_human_operation_is_a_span(clock, spans):
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory"),
                    InMemoryStore(clock=clock), clock=clock)
    alice = Caller(user_key=USER, channel_id="slack:C1")
    await memory.remember(alice, "this user deploys with make deploy-fast")
    await memory.list(alice)
    await memory.search(alice, "deploy")
    [record async for record in memory.export(alice)]
    await memory.stats(alice)
    for name in ("remember", "list", "search", "export", "stats"):
        [span] = named(spans, f"memory.{name}")
        assert span.attributes["outcome"] == "ok", name
    assert named(spans, "memory.export")[0].attributes["records"] == 1
    assert_private(spans)


async def test_the_workers_json_lines_carry_the_trace_id_of_the_request(aiohttp_server, clock,
                                                                      spans):
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("scopemem.worker")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    server = await aiohttp_server(create_app(InMemoryStore(clock=clock), TOKEN))
    worker = WorkerStore(str(server.make_url("")), TOKEN, cap=2)
    try:
        with tracing.span("a bot's turn") as turn:  # a write that evicts is logged
            await worker.write(ORG, [fact(f"lesson number {n}") for n in range(3)])
    finally:
        await worker.close()
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    [written] = [json.loads(line) for line in lines if "[write]" in line]
    assert written["trace_id"] == f"{turn.get_span_context().trace_id:032x}"
    assert_private(spans)


async def test_scope_keys_are_traced_only_when_configured(clock, spans):
    store = InMemoryStore(clock=clock)
    await store.write(USER, [fact("this user deploys with make deploy-fast")])
    config = config_from_mapping({"memory": {"enabled": True, "organization": "acme",
                                             "store": "memory",
                                             "tracing": {"scope_keys": True}}})
    memory = Memory(config, store, clock=clock)
    await memory.context_block(Request(text="deploys", user_id="slack:UA"))
    assert sorted(span.attributes["scope.key"] for span in named(spans, "scope_read")) == [
        ORG, USER]


@pytest.mark.parametrize(("tracing", "message"), [
    ({"scope_keys": "yes"}, "memory.tracing.scope_keys"),
    ({"keys": True}, "unknown key(s): keys"),
    ("on", "memory.tracing must be a table"),
])
def test_a_bad_tracing_table_is_a_config_error_naming_the_key(tracing, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_mapping({"memory": {"tracing": tracing}})


def test_json_log_lines_carry_the_current_trace_id(spans):
    formatter = JsonFormatter()
    line = logging.LogRecord("scopemem.worker", logging.INFO, __file__, 1, "[write] %s", (ORG,),
                             None)
    assert "trace_id" not in json.loads(formatter.format(line))
    with tracing.span("a request") as span:
        entry = json.loads(formatter.format(line))
    assert entry["trace_id"] == f"{span.get_span_context().trace_id:032x}"


@pytest.mark.parametrize("missing", ["the API", "a provider"])
async def test_without_the_api_or_a_provider_every_call_is_a_no_op(monkeypatch, clock, spans,
                                                                   missing):
    if missing == "the API":  # as when opentelemetry is not installed, or not imported
        monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    else:
        monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    headers: dict[str, str] = {}
    tracing.inject(headers)
    assert headers == {}
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory"),
                    InMemoryStore(clock=clock), clock=clock)
    await memory.context_block(Request(text="deploys", user_id="slack:UA"))
    with tracing.span("nothing", {"a": 1}) as span:
        span.set_attribute("b", 2)
    assert spans.get_finished_spans() == ()
