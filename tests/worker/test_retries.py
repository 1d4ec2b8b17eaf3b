"""The worker client against a real worker that fails on purpose: it retries what is
transient, never applies a write twice (the idempotency key), never follows a redirect,
and stops calling a worker that keeps failing (the breaker) until a cool-down has passed.

The faults come from a middleware put in front of the real application: it drops the
connection after the store committed, answers 503 before the store is called, hangs after
the store committed, or redirects elsewhere, for the requests it is told to. Waits between
attempts are recorded, not slept; every test is bounded by short client timeouts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web

from scopemem.errors import StoreError
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.retrying import Breaker, RetryPolicy, retry_after
from scopemem.stores.worker import WorkerStore, WorkerUnavailable
from scopemem.stores.worker_transport import IDEMPOTENCY_HEADER
from scopemem.worker_aiohttp.app import create_app
from tests.conftest import FakeClock, fact
from tests.worker.conftest import TOKEN

ORG = "org:acme"
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Faults:
    """What the worker does to the next requests of each path: a list of faults, used up
    one per request (``None``: answer normally)."""

    def __init__(self) -> None:
        self.plan: dict[str, list[str | None]] = {}
        self.seen: list[tuple[str, str | None]] = []
        self.elsewhere = ""
        self.release = asyncio.Event()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.seen.append((request.path, request.headers.get(IDEMPOTENCY_HEADER)))
        planned = self.plan.get(request.path) or [None]
        fault = planned.pop(0) if planned else None
        if fault == "503":
            await request.read()
            return web.json_response({"error": "busy"}, status=503,
                                     headers={"Retry-After": "1"})
        if fault == "redirect":
            raise web.HTTPTemporaryRedirect(self.elsewhere + request.path)
        response = await handler(request)  # the store has committed by now
        if fault == "drop":
            assert request.transport is not None
            request.transport.close()
        elif fault == "hang":
            await asyncio.wait_for(self.release.wait(), 30)
        return response


@pytest.fixture
def faults() -> Faults:
    return Faults()


@pytest.fixture
def inner(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock=clock)


@pytest.fixture
async def worker_url(aiohttp_server, faults: Faults, inner: InMemoryStore):
    app = create_app(inner, TOKEN)
    app.middlewares.insert(0, faults.middleware)
    server = await aiohttp_server(app)
    yield str(server.make_url("")).rstrip("/")
    faults.release.set()


class Sleeps:
    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
async def client(worker_url: str, sleeps: Sleeps):
    store = WorkerStore(worker_url, TOKEN, timeout=0.5,
                        retry=RetryPolicy(20, sleep=sleeps))
    yield store
    await store.close()


async def test_a_write_whose_connection_dropped_after_commit_is_applied_once(
        client, faults, inner):
    faults.plan["/write"] = ["drop"]
    counts = await client.write(ORG, [fact("run npm ci before the license check")])
    assert (counts.inserted, counts.deduped) == (1, 0)  # the first answer, replayed
    [record] = await inner.list(ORG, 10)
    assert record.use_count == 0  # a second application would have deduped and bumped it
    keys = [key for path, key in faults.seen if path == "/write"]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0]


async def test_reaches_whose_answer_was_lost_are_logged_once(client, faults, inner, clock):
    from scopemem.core.browse import Reach

    await inner.write(ORG, [fact("run npm ci before the license check")])
    faults.plan["/log-reaches"] = ["drop"]
    await client.log_reaches([Reach(record_id=f"mem:{ORG}:1", scope_key=ORG, run_id="r-1",
                                    thread_key="", at_ms=clock.now)])
    assert len(await inner.read_reaches(run="r-1")) == 1
    keys = [key for path, key in faults.seen if path == "/log-reaches"]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0]


async def test_503_with_retry_after_is_retried_after_the_wait_asked(client, faults, sleeps):
    faults.plan["/write"] = ["503"]
    counts = await client.write(ORG, [fact("pin the node version in CI")])
    assert counts.inserted == 1
    assert sleeps.waits == [1.0]
    faults.plan["/retrieve"] = ["503", "503"]
    assert [r.text for r in await client.retrieve(ORG, "node version", 5)] \
        == ["pin the node version in CI"]
    assert sleeps.waits == [1.0, 1.0, 1.0]


async def test_a_hung_read_times_out_and_is_retried(client, faults, inner):
    await inner.write(ORG, [fact("the staging vpn needs the second profile")])
    faults.plan["/retrieve"] = ["hang"]
    records = await client.retrieve(ORG, "staging vpn", 5)
    assert [r.text for r in records] == ["the staging vpn needs the second profile"]
    assert [path for path, _ in faults.seen].count("/retrieve") == 2


async def test_a_write_that_timed_out_is_retried_with_its_key_and_applied_once(
        client, faults, inner):
    await inner.write(ORG, [fact("the release branch is cut on Thursdays")])
    faults.plan["/write"] = ["hang"]
    counts = await client.write(ORG, [fact("the release branch is cut on Thursdays")])
    assert counts.deduped == 1
    [record] = await inner.list(ORG, 10)
    assert record.use_count == 1  # one dedup, not two
    keys = [key for path, key in faults.seen if path == "/write"]
    assert len(keys) == 2 and keys[0] == keys[1]


async def test_each_write_call_has_its_own_key(client, faults):
    await client.write(ORG, [fact("one lesson about deploys")])
    await client.write(ORG, [fact("another lesson about builds")])
    keys = [key for path, key in faults.seen if path == "/write"]
    assert len(set(keys)) == 2


async def test_a_redirect_to_another_origin_is_not_followed(
        aiohttp_server, client, faults, inner):
    reached: list[str] = []

    async def elsewhere(request: web.Request) -> web.Response:
        reached.append(request.path)
        return web.json_response({"ok": True, "inserted": 1})

    other = web.Application()
    other.router.add_route("*", "/{tail:.*}", elsewhere)
    server = await aiohttp_server(other)
    faults.elsewhere = str(server.make_url("")).rstrip("/")
    faults.plan["/write"] = ["redirect"]
    with pytest.raises(StoreError, match="307"):
        await client.write(ORG, [fact("never saved elsewhere")])
    assert reached == []
    assert await inner.list(ORG, 10) == []


async def test_the_breaker_opens_after_failures_then_tries_again(worker_url, faults, caplog):
    now = [0.0]
    breaker = Breaker(threshold=2, cool_down=30, clock=lambda: now[0])
    store = WorkerStore(worker_url, TOKEN, timeout=0.5, breaker=breaker,
                        retry=RetryPolicy(5, attempts=1))
    try:
        faults.plan["/retrieve"] = ["503", "503"]
        with caplog.at_level(logging.WARNING, logger="scopemem"):
            assert await store.retrieve(ORG, "vpn", 5) == []
            assert await store.retrieve(ORG, "vpn", 5) == []
            assert breaker.is_open
            calls = len(faults.seen)
            assert await store.retrieve(ORG, "vpn", 5) == []  # not sent, not warned
            with pytest.raises(WorkerUnavailable):
                await store.write(ORG, [fact("a lesson while the worker is down")])
        assert len(faults.seen) == calls
        opened = [r for r in caplog.records if "not calling it" in r.getMessage()]
        assert len(opened) == 1
        now[0] = 31.0  # the cool-down has passed: the next call is sent, and succeeds
        counts = await store.write(ORG, [fact("a lesson once the worker is back")])
        assert counts.inserted == 1 and not breaker.is_open and breaker.failures == 0
    finally:
        await store.close()


async def test_replays_are_remembered_per_route_and_bounded(worker_url, faults):
    import aiohttp

    headers = {"Authorization": f"Bearer {TOKEN}", IDEMPOTENCY_HEADER: "k-1"}
    body = {"scopeKey": ORG, "records": [{"kind": "fact", "text": "cache the wheels",
                                          "sourceThreadKey": "slack:C1/1"}]}
    async with aiohttp.ClientSession() as session:
        answers = []
        for _ in range(2):
            async with session.post(worker_url + "/write", json=body, headers=headers) as r:
                answers.append((r.status, await r.json()))
        async with session.post(worker_url + "/write", json=body,
                                headers={**headers, IDEMPOTENCY_HEADER: "bad key"}) as r:
            refused = r.status
    assert answers[0] == answers[1] and answers[0][1]["inserted"] == 1
    assert refused == 400


async def test_a_key_sent_again_with_another_body_is_refused_not_answered_from_memory(
        worker_url, inner):
    """A key names one request: repeated with another body (a careless client reusing its
    keys), the write is refused with 400, never acknowledged with the first body's counts
    while nothing of it was kept; a read of another scope is not answered with the first
    scope's records. The same body again is still the first answer."""
    import aiohttp

    headers = {"Authorization": f"Bearer {TOKEN}", IDEMPOTENCY_HEADER: "k-reused"}

    def write(scope_key: str, text: str) -> dict[str, object]:
        return {"scopeKey": scope_key, "records": [{"kind": "fact", "text": text,
                                                    "sourceThreadKey": "slack:C1/1"}]}

    first = write("user:slack:U1", "alice deploys with the blue green script")
    async with aiohttp.ClientSession() as session:
        async def post(path: str, body: dict[str, object]) -> tuple[int, dict[str, object]]:
            async with session.post(worker_url + path, json=body, headers=headers) as r:
                return r.status, await r.json()

        assert (await post("/write", first))[1]["inserted"] == 1
        assert (await post("/write", first))[1]["inserted"] == 1  # the same answer
        status, answer = await post("/write", write("user:slack:U2", "bob pins numpy"))
        assert status == 400 and "another body" in str(answer["error"])
        query = {"scopeKey": "user:slack:U1", "query": "blue green", "limit": 5}
        assert len((await post("/retrieve", query))[1]["records"]) == 1  # type: ignore[arg-type]
        status, answer = await post("/retrieve", {**query, "scopeKey": "user:slack:U2"})
        assert status == 400 and "records" not in answer
    assert await inner.list("user:slack:U2", 10) == []
    assert len(await inner.list("user:slack:U1", 10)) == 1


async def test_the_answers_remembered_are_bounded_in_bytes(aiohttp_server, inner):
    """A page of records can be a megabyte: 10,000 keyed reads of it were held for ten
    minutes. The answers kept stay within the bound in bytes, the oldest forgotten first
    (its key then runs anew), and one larger than the bound is not kept at all."""
    import aiohttp

    from scopemem.worker_aiohttp.idempotency import REPLAYS, Replays

    await inner.write(ORG, [fact(f"lesson number {n} about the build cache")
                            for n in range(8)])
    app = create_app(inner, TOKEN)
    replays = app[REPLAYS] = Replays(most_bytes=1500)
    server = await aiohttp_server(app)
    url = str(server.make_url("")).rstrip("/")
    sizes = []
    async with aiohttp.ClientSession() as session:
        for n, limit in enumerate((1, 2, 1, 2, 1, 2, 50)):
            headers = {"Authorization": f"Bearer {TOKEN}", IDEMPOTENCY_HEADER: f"k-{n}"}
            async with session.post(url + "/list", json={"scopeKey": ORG, "limit": limit},
                                    headers=headers) as r:
                assert r.status == 200
                sizes.append(len(await r.read()))
            assert replays.bytes <= 1500
    assert sizes[-1] > 1500 and sizes[0] < 500  # the last one was not kept
    assert 0 < len(replays) < 6 and replays.find(("/list", "k-0")) is None
    assert replays.find(("/list", "k-5")) is not None
    assert replays.find(("/list", "k-6")) is None


def test_retry_after_reads_seconds_and_dates():
    assert retry_after("3") == 3.0
    assert retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=lambda: 1445412480.0) == 10.0


def test_replays_forget_the_oldest_and_the_expired():
    from scopemem.worker_aiohttp.idempotency import Replays

    now = [0.0]

    async def scenario() -> None:
        replays = Replays(seconds=60, most=2, clock=lambda: now[0])
        for n in range(3):
            replays.start(("/write", str(n)))
        assert len(replays) == 2 and replays.find(("/write", "0")) is None
        now[0] = 61.0
        assert replays.find(("/write", "2")) is None

    asyncio.run(scenario())


def test_the_document_states_the_key_the_worker_checks():
    import json

    from scopemem.worker_aiohttp.app import load_openapi
    from scopemem.worker_aiohttp.idempotency import HEADER, KEY_PATTERN

    doc = json.loads(load_openapi())
    parameter = doc["components"]["parameters"]["IdempotencyKey"]
    assert (parameter["name"], parameter["schema"]["pattern"]) == (HEADER, KEY_PATTERN)
    for path in ("/write", "/used", "/forget", "/sweep", "/import", "/counts",
                 "/log-reaches"):
        assert {"$ref": "#/components/parameters/IdempotencyKey"} \
            in doc["paths"][path]["post"]["parameters"]


async def test_a_wait_that_would_end_past_the_deadline_is_not_made(worker_url, faults, sleeps):
    store = WorkerStore(worker_url, TOKEN, timeout=0.5, retry=RetryPolicy(0.5, sleep=sleeps))
    try:
        faults.plan["/write"] = ["503"]  # Retry-After: 1, past the half-second deadline
        with pytest.raises(StoreError, match="503"):
            await store.write(ORG, [fact("a lesson the busy worker never took")])
        assert sleeps.waits == [] and [p for p, _ in faults.seen].count("/write") == 1
    finally:
        await store.close()


async def test_a_write_is_retried_until_the_deadline_a_read_gives_up_sooner(client, faults,
                                                                            sleeps):
    # A worker restarting, or busy, for longer than five attempts take: a write (a run's
    # lessons) waits for it within retry_deadline_seconds; a read (a turn waits on it) does
    # not hold the turn that long.
    faults.plan["/write"] = ["503"] * 8
    counts = await client.write(ORG, [fact("pin the node version in CI")])
    assert counts.inserted == 1 and len(sleeps.waits) == 8
    faults.plan["/list"] = ["503"] * 8
    with pytest.raises(StoreError, match="503"):
        await client.list(ORG, 5)
    assert [p for p, _ in faults.seen].count("/list") == 5
