"""``scopemem serve`` under a small open-file limit: its connections leave the store the
descriptors the store holds, so a crowd of clients is answered (or refused 503 by the fence)
and the store never fails to open a file."""

from __future__ import annotations

import asyncio
import os
import resource
import signal
import subprocess
import sys

import aiohttp
import pytest

from scopemem.errors import StoreError
from scopemem.stores.base import descriptors_held
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.postgres import PostgresStore
from scopemem.stores.postgres.options import PostgresOptions
from scopemem.stores.sqlite_shared import SharedSqliteStore
from scopemem.worker_aiohttp.server import (
    ACCEPT_TURNS,
    PROCESS_DESCRIPTORS,
    connection_budget,
)
from tests.worker.test_serve import TOKEN, listening, stop, wait_healthy

#: More clients at once than the limit leaves connections for (46 on two cores, checked
#: in the test), so the fence refuses some, and they are tried again.
CLIENTS = 150
#: Tries per request: a connection the fence refuses (503, or closed before the client's
#: body went out) is tried again, as a client of a busy worker would.
TRIES = 200


async def _answered(session: aiohttp.ClientSession, url: str, body: dict[str, object],
                    statuses: list[int]) -> int:
    for _ in range(TRIES):
        try:
            async with session.post(url, json=body,
                                    headers={"Authorization": f"Bearer {TOKEN}"}) as response:
                await response.read()
                statuses.append(response.status)
                if response.status != 503:
                    return response.status
        except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
            pass  # refused by the fence before the answer could be read
        await asyncio.sleep(0.02)
    return 0


async def test_a_crowd_at_a_small_descriptor_limit_is_answered_without_a_traceback(tmp_path):
    # The limit leaves the shared SQLite store its descriptors and about a hundred more
    # (256 on two cores): half of it for connections, as before, starved the store.
    needed = descriptors_held(SharedSqliteStore(tmp_path / "probe"))
    soft = needed + PROCESS_DESCRIPTORS + 112
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < soft:
        pytest.skip(f"the hard open-file limit ({hard}) is below {soft}")
    # More clients than the connections that limit leaves (at most what is left beside the
    # store and the process, less three backlogs of at least 16): the fence refuses some.
    assert soft - needed - PROCESS_DESCRIPTORS - ACCEPT_TURNS * 16 < CLIENTS

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    env = {key: value for key, value in os.environ.items() if key != "SCOPEMEM_CONFIG"}
    env["SCOPEMEM_TOKEN"] = TOKEN
    process = subprocess.Popen(
        [sys.executable, "-m", "scopemem", "serve", "--port", "0", "--data",
         str(tmp_path / "data"), "--no-access-log"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=limit_files)
    statuses: list[int] = []
    try:
        url, _banner = listening(process)
        await wait_healthy(process, url)
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector) as session:
            async def client(n: int) -> tuple[int, int]:
                scope = f"user:test:{n}"
                wrote = await _answered(session, url + "/write", {
                    "scopeKey": scope, "records": [{"kind": "fact", "sourceThreadKey": "t",
                                                    "text": f"lesson {n}: deploy with make"}]},
                    statuses)
                read = await _answered(session, url + "/retrieve", {
                    "scopeKey": scope, "query": "deploy", "limit": 5}, statuses)
                return wrote, read

            answers = await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    finally:
        _out, err = stop(process, signal.SIGTERM)
    assert answers == [(200, 200)] * CLIENTS
    assert set(statuses) <= {200, 503}
    assert "Traceback" not in err
    assert " ERROR " not in err, err
    # The process never ran out of descriptors: every accept succeeded.
    assert "cannot accept" not in err, err


def test_the_connections_are_what_the_limit_leaves_beside_the_store(tmp_path):
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    store = SharedSqliteStore(tmp_path)
    held = descriptors_held(store)
    budget = connection_budget(held)
    if soft != resource.RLIM_INFINITY and not budget.short:
        # Connections, and a backlog accepted in each turn before the fence closes a refusal.
        in_flight = budget.connections + ACCEPT_TURNS * budget.backlog
        assert in_flight + held + PROCESS_DESCRIPTORS <= soft
    assert descriptors_held(InMemoryStore()) == 0  # a store that holds none says nothing


def test_a_postgres_store_holds_a_socket_per_connection_of_its_pool():
    store = PostgresStore(PostgresOptions(dsn="postgresql://nowhere/db", max_pool=7))
    assert descriptors_held(store) == 7  # never connected: the pool's bound is enough


@pytest.mark.parametrize("answer", [-1, True, 2.5, "3", None])
def test_a_store_plugins_wrong_count_of_descriptors_is_a_store_error(answer):
    class Plugin:
        def max_descriptors(self) -> object:
            return answer

    with pytest.raises(StoreError, match="max_descriptors"):
        descriptors_held(Plugin())


def test_a_shard_that_cannot_be_opened_for_want_of_descriptors_is_busy(tmp_path):
    # In a process of its own, every descriptor taken: the shared layout's next shard file
    # cannot be opened, which is StoreBusy (503, try again), not a StoreError (500).
    code = f"""
import asyncio, os, resource
from scopemem.core.records import Candidate, Kind
from scopemem.errors import StoreBusy
from scopemem.stores.sqlite_shared import SharedSqliteStore, schema

resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
store = SharedSqliteStore({str(tmp_path / "data")!r})
other = next(f"org:x{{n}}" for n in range(100)
             if schema.shard_of(f"org:x{{n}}", 16) != schema.shard_of("org:acme", 16))

def fact(text):
    return [Candidate(kind=Kind.FACT, text=text, source_thread_key="t")]

async def main():
    await store.write("org:acme", fact("the first shard is open"))
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    try:
        await store.write(other, fact("another shard cannot be opened"))
    except StoreBusy:
        print("busy")
    finally:
        for fd in held:
            os.close(fd)
        await store.close()

asyncio.run(main())
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=False, cwd=tmp_path)
    assert result.stdout.strip() == "busy", result.stderr
