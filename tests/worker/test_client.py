"""WorkerStore against a stub server this test controls: what it sends, how it degrades,
when it raises, and how it is built from configuration."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp
import attrs
import pytest
from aiohttp import web

from scopemem.config import load_config
from scopemem.core.hygiene import NO_THREAD_KEY
from scopemem.core.records import (
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    Kind,
    SweepResult,
    WriteCounts,
    to_wire,
)
from scopemem.errors import ConfigError, StoreError, StoreRefused, StoreUnsupported
from scopemem.installation import build_store, in_process_store
from scopemem.plugins.manager import get_plugin_manager
from scopemem.stores.base import StoreSettings
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.retrying import RetryPolicy
from scopemem.stores.worker import WorkerStore
from tests.conftest import START_MS, fact

ORG = "org:acme"
TOKEN = "client-token"


def wire_record(n: int, scope: str = ORG, **fields: Any) -> dict[str, Any]:
    record = {"id": f"mem:{scope}:{n}", "scopeKey": scope, "kind": "fact",
              "text": f"lesson {n}", "keywords": [], "sourceThreadKey": "slack:C1/1",
              "createdAt": START_MS, "useCount": 0, "status": "active"}
    record.update(fields)
    return record


class Stub:
    """Records every request; answers whatever the test put in ``replies[path]``."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.replies: dict[str, Any] = {}
        self.delay = 0.0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append((request.path, dict(request.headers), json.loads(raw)))
        if self.delay:
            await asyncio.sleep(self.delay)
        status, payload = self.replies.get(request.path, (200, {"records": []}))
        if isinstance(payload, bytes):
            return web.Response(status=status, body=payload, content_type="text/plain")
        return web.json_response(payload, status=status)

    def bodies(self) -> list[Any]:
        return [body for _, _, body in self.requests]


@pytest.fixture
def stub() -> Stub:
    return Stub()


@pytest.fixture
async def base_url(aiohttp_server, stub: Stub) -> str:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stub.handle)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


# Calls that fail on purpose still go through the retries, two attempts a few milliseconds
# apart (tests/worker/test_retries.py covers the policy itself).
QUICK = RetryPolicy(attempts=2, change_attempts=2, initial=0.01, most=0.01)


@pytest.fixture
async def store(base_url: str):
    worker = WorkerStore(base_url, TOKEN, retry=QUICK)
    yield worker
    await worker.close()


# --- what goes on the wire ----------------------------------------------------------------------


async def test_retrieve_sends_bearer_and_body_and_parses_records(store, stub):
    stub.replies["/retrieve"] = (200, {"records": [wire_record(1, confidence=0.7)],
                                       "matches": [0.5]})
    [record] = await store.retrieve(ORG, "deploy vpn", 5)
    assert record.id == f"mem:{ORG}:1" and record.confidence == 0.7
    path, headers, body = stub.requests[0]
    assert path == "/retrieve"
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    assert headers["Content-Type"] == "application/json"
    assert body == {"scopeKey": ORG, "query": "deploy vpn", "limit": 5}


async def test_write_sends_candidates_through_the_wire_converter(store, stub):
    stub.replies["/write"] = (200, {"ok": True, "inserted": 1, "deduped": 1, "superseded": 0,
                                    "restated": 0, "evicted": 0})
    batch = [fact("one", keywords=("k",), confidence=0.9), fact("two", restates="mem:x:1")]
    counts = await store.write(ORG, batch)
    assert counts == WriteCounts(inserted=1, deduped=1)
    assert stub.bodies() == [{"scopeKey": ORG, "records": to_wire(batch)}]
    assert "cap" not in stub.bodies()[0]  # not configured → the worker's default


async def test_cap_is_sent_when_configured_or_given(base_url, stub):
    stub.replies["/write"] = (200, {"ok": True, "inserted": 1})
    configured = WorkerStore(base_url, TOKEN, cap=42)
    try:
        await configured.write(ORG, [fact("alpha")])
        await configured.write(ORG, [fact("bravo")], cap=7)
    finally:
        await configured.close()
    assert [body.get("cap") for body in stub.bodies()] == [42, 7]


async def test_counts_from_an_older_worker_default_to_zero(store, stub):
    stub.replies["/write"] = (200, {"ok": True, "inserted": 2, "deduped": 0, "superseded": 1})
    assert await store.write(ORG, [fact("alpha")]) == WriteCounts(inserted=2, superseded=1)


async def test_an_empty_batch_makes_no_round_trip(store, stub):
    assert await store.write(ORG, []) == WriteCounts()
    assert stub.requests == []


async def test_list_sends_query_and_kind_only_when_given(store, stub):
    stub.replies["/list"] = (200, {"records": [wire_record(2), wire_record(1)]})
    records = await store.list(ORG, 10)
    assert [r.id for r in records] == [f"mem:{ORG}:2", f"mem:{ORG}:1"]
    await store.list(ORG, 5, query="deploy")
    await store.list(ORG, 5, kind=Kind.FACT)
    await store.list(ORG, 5, query="", kind=Kind.SUMMARY)
    assert stub.bodies() == [
        {"scopeKey": ORG, "limit": 10},
        {"scopeKey": ORG, "limit": 5, "query": "deploy"},
        {"scopeKey": ORG, "limit": 5, "kind": "fact"},
        {"scopeKey": ORG, "limit": 5, "query": "", "kind": "summary"},
    ]


async def test_forget_and_sweep(store, stub):
    stub.replies["/forget"] = (200, {"ok": True, "forgotten": True})
    stub.replies["/sweep"] = (200, {"ok": True, "swept": 2, "ids": ["mem:a:1", "mem:a:2"]})
    assert await store.forget(ORG, f"mem:{ORG}:3") is True
    assert await store.sweep(ORG, dry_run=True) == SweepResult(2, ("mem:a:1", "mem:a:2"))
    stub.replies["/sweep"] = (200, {"ok": True, "swept": 2})
    assert await store.sweep(ORG) == SweepResult(2)
    assert stub.bodies() == [{"scopeKey": ORG, "id": f"mem:{ORG}:3"},
                             {"scopeKey": ORG, "dryRun": True}, {"scopeKey": ORG}]


async def test_the_session_is_lazy_and_close_is_idempotent(base_url, stub):
    worker = WorkerStore(base_url + "/", TOKEN)
    assert worker.transport._session is None
    await worker.list(ORG, 1)
    assert stub.requests[0][0] == "/list"  # the trailing slash of the base URL is dropped
    await worker.close()
    await worker.close()
    assert TOKEN not in repr(worker)


async def test_a_closed_client_refuses_calls_and_opens_no_session(base_url, stub,
                                                                   memory_warnings):
    """As the SQLite and PostgreSQL stores do: a call after ``close`` (a reflection still
    running when its memory closed) fails, and never opens a session nobody will close."""
    worker = WorkerStore(base_url, TOKEN, retry=QUICK)
    await worker.list(ORG, 1)
    await worker.close()
    with pytest.raises(StoreError, match="the worker store is closed"):
        await worker.write(ORG, [fact("use the vpn")])
    assert await worker.retrieve(ORG, "vpn", 5) == []
    assert worker.transport._session is None
    assert len(stub.requests) == 1
    assert any("the worker store is closed" in line for line in memory_warnings())


# --- retrieve degrades --------------------------------------------------------------------------


@pytest.mark.parametrize(("reply", "reason"), [
    ((500, {"error": "the store failed"}), "500: the store failed"),
    ((401, {"error": "a valid bearer token is required"}), "401"),
    ((404, b"404: Not Found"), "404: 404: Not Found"),
    ((200, b"<html>proxy error</html>"), "not a JSON object"),
    ((200, [1, 2]), "not a JSON object"),
    ((200, {"items": []}), "'records' list"),
    ((200, {"records": "none"}), "'records' list"),
    ((200, {"records": [], "matches": None}), "'matches' list"),
])
async def test_retrieve_degrades_to_nothing_with_one_warning(store, stub, memory_warnings,
                                                             reply, reason):
    stub.replies["/retrieve"] = reply
    assert await store.retrieve(ORG, "deploy", 5) == []
    [warning] = memory_warnings()
    assert warning.startswith("[memory]") and ORG in warning and reason in warning


async def test_retrieve_drops_malformed_records_one_by_one(store, stub, memory_warnings):
    stub.replies["/retrieve"] = (200, {"records": [
        wire_record(1),
        {"id": "mem:org:acme:2"},                          # fields missing
        "a string",                                        # not an object
        wire_record(3, useCount="many"),                   # wrong type
        wire_record(4, kind="opinion"),                    # unknown kind
        wire_record(5, scope="user:slack:U9"),             # another scope
        wire_record(6, confidence=3),                      # out of range
        wire_record(7),
    ], "matches": [0.5] * 8})
    records = await store.retrieve(ORG, "lesson", 10)
    assert [r.id for r in records] == [f"mem:{ORG}:1", f"mem:{ORG}:7"]
    [warning] = memory_warnings()
    assert "dropped 6 malformed" in warning


async def test_retrieve_degrades_when_nothing_listens(memory_warnings, refused_port):
    worker = WorkerStore(f"http://127.0.0.1:{refused_port}", TOKEN, timeout=2, retry=QUICK)
    try:
        assert await worker.retrieve(ORG, "deploy", 5) == []
    finally:
        await worker.close()
    [warning] = memory_warnings()
    assert "transport error" in warning


async def test_retrieve_degrades_on_timeout(base_url, stub, memory_warnings):
    stub.delay = 2.0
    worker = WorkerStore(base_url, TOKEN, timeout=0.2, retry=QUICK)
    try:
        assert await worker.retrieve(ORG, "deploy", 5) == []
    finally:
        await worker.close()
    [warning] = memory_warnings()
    assert "timed out after 0.2s" in warning


# --- commands raise -----------------------------------------------------------------------------


COMMANDS = {
    "/write": lambda s: s.write(ORG, [fact("xray")]),
    "/list": lambda s: s.list(ORG, 5),
    "/forget": lambda s: s.forget(ORG, f"mem:{ORG}:1"),
    "/sweep": lambda s: s.sweep(ORG),
}


@pytest.mark.parametrize("route", list(COMMANDS))
@pytest.mark.parametrize(("reply", "expected"), [
    ((400, {"error": "records[0].text must be a non-empty string"}),
     "400: records[0].text must be a non-empty string"),
    ((500, b"Internal Server Error"), "500: Internal Server Error"),
    ((503, b""), "503: no reason given"),
    ((200, b"not json"), "not a JSON object"),
])
async def test_commands_raise_naming_status_and_reason(store, stub, route, reply, expected):
    stub.replies[route] = reply
    with pytest.raises(StoreError) as caught:
        await COMMANDS[route](store)
    assert route in str(caught.value) and expected in str(caught.value)


@pytest.mark.parametrize("route", list(COMMANDS))
async def test_commands_raise_on_transport_errors(route, refused_port):
    worker = WorkerStore(f"http://127.0.0.1:{refused_port}", TOKEN, timeout=2, retry=QUICK)
    try:
        with pytest.raises(StoreError, match="transport error"):
            await COMMANDS[route](worker)
    finally:
        await worker.close()


@pytest.mark.parametrize(("route", "reply"), [
    ("/write", {"ok": True, "inserted": "two"}),
    ("/forget", {"ok": True}),
    ("/sweep", {"ok": True}),
    ("/list", {"ok": True}),
])
async def test_commands_raise_on_malformed_answers(store, stub, route, reply):
    stub.replies[route] = (200, reply)
    with pytest.raises(StoreError, match=route):
        await COMMANDS[route](store)


def history(found: dict[str, Any]) -> dict[str, Any]:
    return {"found": True, "record": wire_record(2), "supersedes": [found], "restatedBy": [],
            "reaches": []}


@pytest.mark.parametrize(("route", "reply", "call"), [
    ("/record-page", lambda found: {"total": 1, "records": [found]},
     lambda s: s.record_page(ORG)),
    ("/record-history", history, lambda s: s.record_history(ORG, f"mem:{ORG}:2")),
    ("/export", lambda found: {"records": [found]}, lambda s: s.export_page(ORG, 0, 10)),
])
async def test_a_record_of_another_scope_in_an_answer_is_never_shown(store, stub, route,
                                                                      reply, call):
    """Browsing and exporting raise where a retrieval drops: a record of another scope can
    only be the server's bug, and what a person reads or moves must not hold it."""
    stub.replies[route] = (200, reply(wire_record(1)))
    await call(store)  # of its own scope: shown
    stub.replies[route] = (200, reply(wire_record(1, scope="user:slack:U9")))
    with pytest.raises(StoreError, match=route):
        await call(store)


async def test_bad_scope_keys_and_caps_are_refused_locally(store, stub):
    with pytest.raises(StoreError):
        await store.write("has space", [fact("xray")])
    with pytest.raises(StoreError):
        await store.write(ORG, [fact("xray")], cap=0)
    with pytest.raises(StoreError):
        await store.list("", 5)
    assert stub.requests == []


# --- construction and configuration -------------------------------------------------------------


@pytest.mark.parametrize(("args", "message"), [
    (("ftp://host", TOKEN), "http:// or https://"),
    (("http://", TOKEN), "http:// or https://"),
    (("http://h:99999", TOKEN), "not a valid URL"),
    (("http://h?x=1", TOKEN), "query"),
    (("http://h", ""), "bearer token"),
    (("http://h", "two words"), "bearer token"),
])
def test_constructor_refuses_bad_arguments(args, message):
    with pytest.raises(ValueError, match=message):
        WorkerStore(*args)


def settings(environ: dict[str, str] | None = None, **options: Any) -> StoreSettings:
    return StoreSettings(name="worker", options=options, cap=321, retention_days=9,
                         environ=environ if environ is not None else {"MEMORY_TOKEN": "t0k"},
                         stand_in=in_process_store)


def test_from_settings_builds_a_worker_store():
    store = WorkerStore.from_settings(settings(base_url="https://memory.example:8443/base",
                                               timeout_seconds=2.5))
    assert isinstance(store, WorkerStore)
    assert store.transport.base_url == "https://memory.example:8443/base"
    assert store.cap == 321 and store.transport.timeout == 2.5
    custom = WorkerStore.from_settings(settings({"MY_TOKEN": "abc"}, base_url="http://h",
                                                token_env="MY_TOKEN"))
    assert isinstance(custom, WorkerStore) and custom.transport.timeout == 5.0
    assert custom.transport.retry.deadline == 10.0
    patient = WorkerStore.from_settings(settings(base_url="http://h", retry_deadline_seconds=30))
    assert isinstance(patient, WorkerStore) and patient.transport.retry.deadline == 30.0


@pytest.mark.parametrize("environ", [{}, {"MEMORY_TOKEN": ""}, {"OTHER": "x"}])
def test_a_missing_token_falls_back_to_the_in_process_store(environ, memory_warnings):
    store = WorkerStore.from_settings(settings(environ, base_url="http://127.0.0.1:8787"))
    assert isinstance(store, InMemoryStore) and store.cap == 321
    assert store.retention_days == 9
    [warning] = memory_warnings()
    assert "$MEMORY_TOKEN" in warning and "lost on restart" in warning
    assert "memory.stores.worker.base_url" in warning


def test_the_fallback_names_a_custom_token_env(memory_warnings):
    store = WorkerStore.from_settings(settings({"MEMORY_TOKEN": "x"}, base_url="http://h",
                                               token_env="TEAM_MEMORY_TOKEN"))
    assert isinstance(store, InMemoryStore)
    assert "$TEAM_MEMORY_TOKEN" in memory_warnings()[0]


@pytest.mark.parametrize(("options", "key"), [
    ({"base_url": "http://h", "bogus": 1}, "memory.stores.worker.bogus"),
    ({}, "memory.stores.worker.base_url"),
    ({"base_url": 8787}, "memory.stores.worker.base_url"),
    ({"base_url": "localhost:8787"}, "memory.stores.worker.base_url"),
    ({"base_url": "http://h", "token_env": ""}, "memory.stores.worker.token_env"),
    ({"base_url": "http://h", "token_env": 5}, "memory.stores.worker.token_env"),
    ({"base_url": "http://h", "timeout_seconds": 0}, "memory.stores.worker.timeout_seconds"),
    ({"base_url": "http://h", "timeout_seconds": "5"}, "memory.stores.worker.timeout_seconds"),
    ({"base_url": "http://h", "timeout_seconds": True}, "memory.stores.worker.timeout_seconds"),
    ({"base_url": "http://h", "retry_deadline_seconds": 0},
     "memory.stores.worker.retry_deadline_seconds"),
    ({"base_url": "http://h", "retry_deadline_seconds": 601},
     "memory.stores.worker.retry_deadline_seconds"),
])
def test_bad_options_name_their_key(options, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        WorkerStore.from_settings(settings(**options))


@pytest.mark.parametrize("validate_only", [False, True])
def test_a_token_pasted_as_token_env_is_refused_without_repeating_it(validate_only):
    # The usual slip: the token itself where the variable's name goes. Saying "$<token> is
    # not set" would print the token into every log that shows the error.
    pasted = "dev-token-change-me-0001"
    with pytest.raises(ConfigError) as refused:
        WorkerStore.from_settings(attrs.evolve(
            settings(base_url="http://h", token_env=pasted), validate_only=validate_only))
    message = str(refused.value)
    assert message.startswith("memory.stores.worker.token_env: ")
    assert "name of an environment variable" in message and pasted not in message


def test_a_token_that_cannot_be_a_header_names_the_env_var():
    with pytest.raises(ConfigError, match=r"\$MEMORY_TOKEN"):
        WorkerStore.from_settings(settings({"MEMORY_TOKEN": "has space"}, base_url="http://h"))


def test_the_registry_builds_it_from_configuration(memory_warnings):
    config = load_config({"memory": {
        "enabled": True, "organization": "acme", "store": "worker",
        "max_records_per_scope": 77,
        "stores": {"worker": {"base_url": "http://127.0.0.1:8787"}}}})
    pm = get_plugin_manager()
    with_token = build_store(config, pm, environ={"MEMORY_TOKEN": "t"})
    assert isinstance(with_token, WorkerStore) and with_token.cap == 77
    without = build_store(config, pm, environ={})
    assert isinstance(without, InMemoryStore) and without.cap == 77
    assert len(memory_warnings()) == 1


async def test_a_round_trip_through_the_real_server(aiohttp_server, clock, caplog):
    from scopemem.worker_aiohttp.app import create_app

    caplog.set_level(logging.INFO, logger="scopemem.worker")
    backing = InMemoryStore(clock=clock)
    server = await aiohttp_server(create_app(backing, TOKEN))
    worker = WorkerStore(str(server.make_url("")), TOKEN, cap=2)
    try:
        counts = await worker.write(ORG, [fact("alpha lesson"), fact("beta lesson"),
                                          fact("gamma lesson")])
        assert counts == WriteCounts(inserted=3, evicted=1)
        assert len(await worker.retrieve(ORG, "lesson", 10)) == 2
        assert [r.text for r in await worker.list(ORG, 10, kind=Kind.FACT)] == [
            "gamma lesson", "beta lesson"]
    finally:
        await worker.close()
    assert caplog.text.count("[write]") == 1
    assert f"[write] {ORG} <- 3 candidates (evicted 1)" in caplog.text


async def test_a_cap_raised_by_the_worker_is_answered_and_warned_once(aiohttp_server, clock,
                                                                         caplog):
    from scopemem.worker_aiohttp.app import create_app

    backing = InMemoryStore(clock=clock)
    server = await aiohttp_server(create_app(backing, TOKEN, cap=500, min_cap=3))
    url = str(server.make_url(""))
    asks_below = WorkerStore(url, TOKEN, cap=2)
    asks_within = WorkerStore(url, TOKEN, cap=4)
    caplog.set_level(logging.WARNING, logger="scopemem")
    try:
        for n in range(4):
            await asks_below.write(ORG, [fact(f"lesson number {n}")])
            await asks_below.write("repo:acme/api", [fact(f"lesson number {n}")])
        # The floor is kept: three records stay, not the two asked for.
        assert len(await asks_below.list(ORG, 10)) == 3
        await asks_within.write(ORG, [fact("a lesson within the bounds")])
    finally:
        await asks_below.close()
        await asks_within.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "keeps 3 records per scope, not the 2 asked" in warnings[0]


async def test_the_write_answer_names_the_cap_applied(aiohttp_server, clock):
    from scopemem.worker_aiohttp.app import create_app

    server = await aiohttp_server(create_app(InMemoryStore(clock=clock), TOKEN, cap=50,
                                             min_cap=10))
    url = str(server.make_url("/write"))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    body = {"scopeKey": ORG, "records": to_wire([fact("a lesson")])}
    async with aiohttp.ClientSession() as session:
        answers = []
        for extra in ({"cap": 2}, {"cap": 20}, {"cap": 900}, {}):
            async with session.post(url, json={**body, **extra}, headers=headers) as response:
                assert response.status == 200
                answers.append((await response.json()).get("cap"))
    assert answers == [10, 20, 50, None]


# --- issue 12: what the client sends fits the wire; what it keeps is what was asked ----------


async def test_a_long_query_goes_as_its_distinct_tokens(store, stub):
    brief = "[ok] step 7 took 40 ms\n" * 1000 + "why do the integration tests fail"
    assert len(brief) > MAX_QUERY_CHARS
    await store.retrieve(ORG, brief, 5)
    await store.list(ORG, 5, query=brief)
    # Its distinct content words (function words dropped, as the worker would drop them).
    for body in stub.bodies():
        assert body["query"] == "ok step 7 took 40 ms integration tests fail"
    await store.retrieve(ORG, "short query", 5)
    assert stub.bodies()[-1]["query"] == "short query"


async def test_a_window_keeps_only_facts_whatever_an_older_worker_returns(
        store, stub, memory_warnings):
    stub.replies["/list"] = (200, {"records": [
        wire_record(3), wire_record(2, kind="summary", text="a thread summary"),
        wire_record(1)]})
    records = await store.list(ORG, 24, kind=Kind.FACT)
    assert [r.id for r in records] == [f"mem:{ORG}:3", f"mem:{ORG}:1"]
    assert any("another kind" in w for w in memory_warnings())
    # Through the read path too: the repository window never shows the summary.
    from scopemem import Memory, MemoryConfig, Request

    repo = "repo:acme/api"
    stub.replies["/list"] = (200, {"records": [
        wire_record(2, repo, text="lesson 3"),
        wire_record(1, repo, kind="summary", text="a thread summary")]})
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory"), store)
    block = await memory.context_block(Request(text="x", repo="acme/api"))
    assert "lesson 3" in block and "a thread summary" not in block


async def test_candidates_are_fitted_before_they_leave_the_process(store, stub):
    stub.replies["/write"] = (200, {"ok": True, "inserted": 1})
    await store.write(ORG, [fact("x " * 3000, keywords=("k" * 70, "ok"), source_thread_key="")])
    [sent] = stub.bodies()[-1]["records"]
    assert len(sent["text"]) <= MAX_TEXT_CHARS and sent["keywords"] == ["ok"]
    assert sent["sourceThreadKey"] == NO_THREAD_KEY


async def test_a_refused_body_raises_store_refused(store, stub):
    stub.replies["/write"] = (400, {"error": "records[0].text must be at most 4000"})
    with pytest.raises(StoreRefused, match="answered 400"):
        await store.write(ORG, [fact("xray")])
    stub.replies["/write"] = (503, {"error": "busy"})
    with pytest.raises(StoreError) as info:
        await store.write(ORG, [fact("xray")])
    assert not isinstance(info.value, StoreRefused)


def test_a_one_shot_command_never_falls_back_to_the_in_process_store(memory_warnings):
    settings = StoreSettings(name="worker", options={"base_url": "http://127.0.0.1:9"},
                             environ={}, allow_fallback=False)
    with pytest.raises(ConfigError, match=r"\$MEMORY_TOKEN is not set"):
        WorkerStore.from_settings(settings)
    assert memory_warnings() == []


async def test_a_new_client_asks_not_to_bump_and_reports_what_it_showed(store, stub):
    stub.replies["/retrieve"] = (200, {"records": [wire_record(1)], "matches": [0.75],
                                       "bumped": False})
    stub.replies["/used"] = (200, {"ok": True, "marked": 1})
    [hit] = await store.search(ORG, "deploy vpn", 5, bump=False)
    assert hit.match == 0.75
    assert stub.bodies()[0]["bump"] is False
    assert await store.mark_used({ORG: [hit.record.id]}) == 1
    assert stub.requests[-1][0] == "/used"
    assert stub.bodies()[-1] == {"used": [{"scopeKey": ORG, "ids": [hit.record.id]}]}


async def test_a_retrieval_answered_without_matches_is_a_failed_read(store, stub,
                                                                     memory_warnings):
    # Every released worker ranks and answers each record's match; a reply without them is
    # not scored by the client as a guess, it is a read that failed.
    stub.replies["/retrieve"] = (200, {"records": [wire_record(1, text="deploy needs vpn")]})
    assert await store.search(ORG, "deploy vpn", 5, bump=False) == []
    with pytest.raises(StoreError, match="matches"):
        await store.search_strict(ORG, "deploy vpn", 5, bump=False)
    assert any("matches" in warning for warning in memory_warnings())


async def test_a_failed_used_call_is_warned_about_and_the_next_one_is_still_sent(
        store, stub, memory_warnings):
    stub.replies["/used"] = (404, {"error": "not found"})
    assert await store.mark_used({ORG: [f"mem:{ORG}:1"]}) == 0
    stub.replies["/used"] = (200, {"ok": True, "marked": 1})
    assert await store.mark_used({ORG: [f"mem:{ORG}:1"]}) == 1
    assert sum(1 for path, _h, _b in stub.requests if path == "/used") == 2
    assert any("/used failed" in warning for warning in memory_warnings())


async def test_many_marks_go_in_requests_within_the_wire_caps(store, stub):
    stub.replies["/retrieve"] = (200, {"records": [], "matches": [], "bumped": False})
    await store.search(ORG, "deploy", 5, bump=False)
    stub.replies["/used"] = (200, {"ok": True, "marked": 0})
    used = {f"user:slack:U{n}": [f"mem:user:slack:U{n}:{m}" for m in range(10)]
            for n in range(40)}
    await store.mark_used(used)
    batches = [body["used"] for path, _h, body in stub.requests if path == "/used"]
    assert all(len(batch) <= 32 and sum(len(item["ids"]) for item in batch) <= 256
               for batch in batches)
    sent = {(item["scopeKey"], record_id) for batch in batches for item in batch
            for record_id in item["ids"]}
    assert sent == {(key, record_id) for key, ids in used.items() for record_id in ids}


# --- a worker of an older release -------------------------------------------------------------


@pytest.mark.parametrize(("route", "call"), [
    ("/purge", lambda store: store.purge()),
    ("/delete-scope", lambda store: store.delete_scope(ORG)),
    ("/scope-page", lambda store: store.scope_page()),
])
async def test_a_route_the_worker_does_not_serve_is_unsupported_and_says_why(store, stub,
                                                                           route, call):
    # What a worker of 0.1.0 answers for a route it predates.
    stub.replies[route] = (404, {"error": "not found"})
    with pytest.raises(StoreUnsupported) as raised:
        await call(store)
    assert str(raised.value) == (
        f"memory worker {route} failed: answered 404: not found; this worker serves no"
        f" {route} (a release older than this client: upgrade the worker, or base_url names"
        " another path)")


@pytest.mark.parametrize("token_env", [None, "ACME_MEMORY_TOKEN"])
async def test_a_wrong_token_names_the_variable_it_was_read_from(aiohttp_server, clock,
                                                                  token_env):
    from scopemem import Caller, Memory, MemoryRefused
    from scopemem.worker_aiohttp.app import create_app

    server = await aiohttp_server(create_app(InMemoryStore(clock=clock), "the-right-token"))
    variable = token_env or "MEMORY_TOKEN"
    worker = {"base_url": str(server.make_url("")), "retry_deadline_seconds": 1,
              **({"token_env": token_env} if token_env else {})}
    memory = Memory.from_config(
        {"memory": {"enabled": True, "organization": "acme", "store": "worker",
                    "stores": {"worker": worker}}},
        environ={variable: "a-wrong-token"}, allow_fallback=False)
    try:
        with pytest.raises((StoreError, MemoryRefused)) as caught:
            await memory.remember(Caller(user_key="user:slack:U1"), "run npm ci first")
        message = str(caught.value)
        assert "401" in message and f"${variable}" in message, message
        assert "memory.stores.worker.token_env" in message
    finally:
        await memory.close()
