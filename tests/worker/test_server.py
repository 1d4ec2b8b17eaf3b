"""The server as a whole: concurrent writers, the store's lifecycle, graceful shutdown."""

from __future__ import annotations

import asyncio

import aiohttp
import apsw

from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared import SharedSqliteStore
from scopemem.worker_aiohttp.app import create_app, running
from tests.worker.conftest import AUTH, ORG, TOKEN, SpyStore, candidate


async def test_concurrent_write_batches_to_one_scope_lose_nothing(tmp_path):
    store = SharedSqliteStore(tmp_path / "data")
    batches = [[candidate(f"batch {b} lesson {n}") for n in range(5)] for b in range(8)]
    async with running(create_app(store, TOKEN)) as url, \
            aiohttp.ClientSession(headers=AUTH) as session:

        async def send(batch):
            async with session.post(url + "/write", json={"scopeKey": ORG,
                                                          "records": batch}) as response:
                return response.status, await response.json()

        results = await asyncio.gather(*(send(batch) for batch in batches))
        assert all(status == 200 and body["inserted"] == 5 for status, body in results)
        async with session.post(url + "/list", json={"scopeKey": ORG, "limit": 50}) as response:
            records = (await response.json())["records"]
    assert len(records) == 40
    assert len({record["id"] for record in records}) == 40
    assert {record["text"] for record in records} == {
        c["text"] for batch in batches for c in batch}


async def test_a_store_factory_is_opened_at_startup_and_closed_at_shutdown(clock):
    opened: list[SpyStore] = []

    async def factory() -> SpyStore:
        opened.append(SpyStore(clock))
        return opened[-1]

    app = create_app(factory, TOKEN)
    assert opened == []
    async with running(app) as url, aiohttp.ClientSession(headers=AUTH) as session:
        assert len(opened) == 1 and not opened[0].closed
        async with session.post(url + "/list", json={"scopeKey": ORG, "limit": 1}) as response:
            assert response.status == 200
    assert opened[0].closed and len(opened[0].calls) == 1


async def test_a_plain_factory_works_too():
    async with running(create_app(InMemoryStore, TOKEN)) as url, \
            aiohttp.ClientSession(headers=AUTH) as session, \
            session.post(url + "/list", json={"scopeKey": ORG, "limit": 1}) as response:
        assert response.status == 200


async def test_shutdown_lets_in_flight_requests_finish_then_closes_the_store(spy):
    spy.hold = asyncio.Event()
    server = running(create_app(spy, TOKEN))
    url = await server.__aenter__()
    async with aiohttp.ClientSession(headers=AUTH) as session:
        in_flight = asyncio.create_task(session.post(
            url + "/write", json={"scopeKey": ORG, "records": [candidate("kept on shutdown")]}))
        await asyncio.wait_for(spy.entered.wait(), 5)
        shutdown = asyncio.create_task(server.__aexit__(None, None, None))
        await asyncio.sleep(0.2)
        assert not shutdown.done() and not spy.closed  # waiting for the write
        spy.hold.set()
        response = await asyncio.wait_for(in_flight, 5)
        assert response.status == 200 and (await response.json())["inserted"] == 1
        await asyncio.wait_for(shutdown, 5)
    assert spy.closed
    assert [r.text for r in await spy.inner.list(ORG, 5)] == ["kept on shutdown"]


async def test_use_counts_counted_before_shutdown_are_in_the_files_after_it(tmp_path):
    # Saved a minute after the retrievals, so only the shutdown can have saved them.
    store = SharedSqliteStore(tmp_path / "data", usage_flush_ms=60_000)
    async with running(create_app(store, TOKEN)) as url, \
            aiohttp.ClientSession(headers=AUTH) as session:
        async with session.post(url + "/write", json={
                "scopeKey": ORG, "records": [candidate("deploy with care")]}) as response:
            assert response.status == 200
        for uses in (1, 2, 3):
            async with session.post(url + "/retrieve", json={
                    "scopeKey": ORG, "query": "deploy", "limit": 5}) as response:
                assert [r["useCount"] for r in (await response.json())["records"]] == [uses]
    conn = apsw.Connection(store._shards.path(store._shards.of(ORG)),
                           flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("SELECT use_count FROM records").fetchall() == [(3,)]
    finally:
        conn.close()
