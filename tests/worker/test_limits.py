"""The operator's bounds on what a token holder can do to the disk and to a scope: the floor
and ceiling of a client's ``cap``, and the limit on scopes (507)."""

from __future__ import annotations

import signal
from pathlib import Path

import apsw
import pytest

from scopemem.errors import ScopeLimitReached
from scopemem.stores.sqlite_shared import SharedSqliteStore
from scopemem.stores.worker import WorkerStore
from scopemem.worker_aiohttp.app import create_app, running
from tests.conftest import fact
from tests.worker.conftest import AUTH, ORG, TOKEN, candidate
from tests.worker.test_serve import TOKEN as SERVE_TOKEN
from tests.worker.test_serve import start, stop, wait_healthy


async def post(client, path, body):
    response = await client.post(path, json=body, headers=AUTH)
    return response.status, await response.json()


@pytest.mark.parametrize(("sent", "applied"), [
    (1, 100), (99, 100), (100, 100), (250, 250), (500, 500), (10_000, 500), (None, None)])
async def test_a_clients_cap_may_only_lower_the_servers_down_to_the_floor(
        aiohttp_client, spy, sent, applied):
    client = await aiohttp_client(create_app(spy, TOKEN, cap=500, min_cap=100))
    body = {"scopeKey": ORG, "records": [candidate()]}
    if sent is not None:
        body["cap"] = sent
    status, _answer = await post(client, "/write", body)
    assert status == 200
    assert spy.calls[-1][3] == applied


async def test_cap_one_cannot_retire_a_scope_served_from_sqlite(aiohttp_client, tmp_path,
                                                                clock):
    store = SharedSqliteStore(tmp_path / "data", cap=500, clock=clock)
    client = await aiohttp_client(create_app(store, TOKEN, cap=500, min_cap=3))
    status, body = await post(client, "/write", {
        "scopeKey": ORG, "records": [candidate(f"note number {n}") for n in range(5)]})
    assert status == 200 and body["inserted"] == 5
    status, body = await post(client, "/write", {
        "scopeKey": ORG, "cap": 1, "records": [candidate("one more note")]})
    assert status == 200 and body["evicted"] == 3
    status, body = await post(client, "/list", {"scopeKey": ORG, "limit": 50})
    assert len(body["records"]) == 3


def test_the_bounds_are_checked():
    for kwargs, message in [({"cap": 0}, "cap must be"), ({"min_cap": 10_001}, "min_cap must"),
                            ({"cap": True}, "cap must"),
                            ({"cap": 10, "min_cap": 11}, r"min_cap \(11\) must not be above")]:
        with pytest.raises(ValueError, match=message):
            create_app(object(), TOKEN, **kwargs)  # type: ignore[arg-type]


async def test_a_write_to_a_new_scope_beyond_the_limit_is_507(aiohttp_client, tmp_path, clock,
                                                              caplog):
    store = SharedSqliteStore(tmp_path / "data", clock=clock, max_scopes=1)
    client = await aiohttp_client(create_app(store, TOKEN))
    assert (await post(client, "/write", {"scopeKey": ORG, "records": [candidate()]}))[0] == 200
    status, body = await post(client, "/write", {"scopeKey": "org:other",
                                                 "records": [candidate()]})
    assert status == 507
    assert body == {"error": "the worker's limit on scopes is reached: a write to a new scope"
                             " is refused (existing scopes still take writes)"}
    assert "max_scopes = 1" in caplog.text
    # The scope that exists still takes writes; reads of the other one create nothing.
    status, body = await post(client, "/write", {"scopeKey": ORG,
                                                 "records": [candidate("another note")]})
    assert status == 200 and body["inserted"] == 1
    status, body = await post(client, "/retrieve", {"scopeKey": "org:other",
                                                    "query": "license", "limit": 5})
    assert status == 200 and body["records"] == []
    assert held_scopes(tmp_path / "data") == [ORG]


def held_scopes(directory: Path) -> list[str]:
    """The scopes the shard files in ``directory`` hold."""
    held: list[str] = []
    for path in sorted(directory.glob("shard-*.db")):
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            held += [key for (key,) in conn.execute("SELECT scope_key FROM scopes")]
        finally:
            conn.close()
    return sorted(held)


async def test_the_client_store_raises_the_limit_as_the_embedded_store_would(tmp_path, clock):
    backing = SharedSqliteStore(tmp_path / "data", clock=clock, max_scopes=1)
    async with running(create_app(backing, TOKEN)) as url:
        store = WorkerStore(url, TOKEN)
        try:
            await store.write(ORG, [fact("one note")])
            with pytest.raises(ScopeLimitReached, match="507"):
                await store.write("org:other", [fact("one note")])
        finally:
            await store.close()


async def test_serve_applies_the_configured_floor_and_retention(tmp_path):
    config = tmp_path / "scopemem.toml"
    config.write_text("[memory]\nmax_records_per_scope = 4\nmin_records_per_scope = 2\n"
                      "retention_days = 0\n[memory.stores.sqlite]\nmax_scopes = 1\n")
    data = tmp_path / "data"
    process, url = start(tmp_path, "--data", str(data), "--no-access-log")
    try:
        await wait_healthy(process, url)
        store = WorkerStore(url, SERVE_TOKEN, cap=1)
        try:
            counts = await store.write(ORG, [fact(f"note number {n}") for n in range(3)])
            assert counts.evicted == 1  # cap 1 raised to the floor, 2
            assert len(await store.list(ORG, 10)) == 2
            with pytest.raises(ScopeLimitReached):
                await store.write("org:other", [fact("one note")])
        finally:
            await store.close()
    finally:
        _out, err = stop(process, signal.SIGINT)
    assert "Traceback" not in err
    held = 0
    for path in data.glob("*.db"):  # whatever the layout
        conn = apsw.Connection(str(path))
        try:
            held += conn.execute("SELECT count(*) FROM records").fetchall()[0][0]
        finally:
            conn.close()
    assert held == 2  # retention_days = 0: the evicted row went with the write retiring it
