"""``scopemem serve --workers N``: N processes on one port, any of them killed at any moment.

The crash test kills one of two worker processes 30 times at random moments while eight
clients write batches. What a client was told is written must be in the store afterwards,
every batch must be there whole or not at all, and no id may appear twice."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import apsw
import pytest

from scopemem.worker_aiohttp.workers import reserved_port
from tests.stores import pg
from tests.stores.shared_postings import scope_postings
from tests.worker.test_serve import TOKEN, stop, wait_healthy

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.exists("/proc"),
                                reason="--workers needs fork(); the test reads /proc")

SCOPES = ("org:acme", "repo:acme/widgets")
AUTH = {"Authorization": f"Bearer {TOKEN}"}
STDERR = "workers.stderr"


def start_workers(tmp_path: Path, data: Path, workers: int, schema: str | None = None
                  ) -> tuple[subprocess.Popen, str]:
    """``scopemem serve --workers N`` over SQLite files in ``data``, or over the PostgreSQL
    store in ``schema`` when given."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("SCOPEMEM_CONFIG", "SCOPEMEM_TOKEN")}
    env["SCOPEMEM_TOKEN"] = TOKEN
    store: list[str] = ["--data", str(data)]
    config: Path | None = None
    if schema is not None:
        config = tmp_path / "postgres.toml"
        config.write_text(f'[memory.stores.postgres]\ndsn = "{pg.dsn()}"\n'
                          f'schema = "{schema}"\n')
        store = ["--store", "postgres"]
    else:
        config = tmp_path / "sqlite.toml"
        config.write_text("[memory.stores.sqlite]\n")
    # The log goes to a file, not a pipe: eight writers make the workers log thousands of
    # lines, and a pipe nobody reads while they run fills up and blocks every process
    # writing to it.
    with (tmp_path / STDERR).open("w") as errors:
        process = subprocess.Popen(
            [sys.executable, "-m", "scopemem", *(["--config", str(config)] if config else []),
             "serve", "--port", "0", "--workers", str(workers), *store, "--no-access-log"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=errors, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()  # printed once every worker process is forked
    assert "listening on http://" in line and f"{workers} worker processes" in line, (
        line, logged(tmp_path))
    url = line.split("listening on ", 1)[1].split()[0]
    return process, url


def logged(tmp_path: Path) -> str:
    """What the workers started by ``start_workers`` wrote to stderr so far."""
    return (tmp_path / STDERR).read_text()


def stored_rows(data: Path, schema: str | None) -> list[tuple[str, str]]:
    """(id, text) of every row of ``SCOPES``, read past the store: the SQLite shard files
    (each checked whole first, its token index too, and each scope's documents against its
    active rows), or the PostgreSQL schema (dropped afterwards)."""
    rows: list[tuple[str, str]] = []
    if schema is None:
        for path in sorted(data.glob("shard-*.db")):
            conn = apsw.Connection(str(path))
            try:
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                conn.execute("INSERT INTO terms_fts (terms_fts, rank)"
                             " VALUES ('integrity-check', 0)")
                for scope in SCOPES:
                    held = conn.execute("SELECT id, text, seq, status, tokens FROM records"
                                        " WHERE scope_key = ?", (scope,)).fetchall()
                    rows += [(record_id, text) for record_id, text, *_ in held]
                    assert scope_postings(conn, scope) == {
                        (term, seq) for _i, _t, seq, status, tokens in held
                        if status == "active" for term in tokens.split()}
            finally:
                conn.close()
        return rows
    import psycopg

    try:
        with psycopg.connect(pg.dsn()) as conn:
            rows += conn.execute(f'SELECT id, text FROM "{schema}".records'
                                 " WHERE scope_key = ANY(%s)", (list(SCOPES),)).fetchall()
    finally:
        pg.drop_schemas(schema)
    return rows


def worker_pids(parent: int) -> list[int]:
    with open(f"/proc/{parent}/task/{parent}/children") as f:
        return [int(pid) for pid in f.read().split()]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (not gone, not a zombie waiting to be reaped)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return "zombie" not in f.read().lower()
    except FileNotFoundError:
        return False


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    # Bounded by a count, never by a margin on the clock: up to 50 s, which only a failure
    # uses up (a loaded CI machine may take seconds to fork and start a worker).
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"never: {what}")


async def test_every_worker_answers_every_scope_and_a_killed_one_is_replaced(tmp_path):
    process, url = start_workers(tmp_path, tmp_path / "data", 2)
    try:
        await wait_healthy(process, url)
        await until(lambda: len(worker_pids(process.pid)) == 2, "two workers")
        first = worker_pids(process.pid)
        async with aiohttp.ClientSession() as session:
            for n in range(20):  # new connections each time: both workers get some
                async with session.post(url + "/write", headers={**AUTH, "Connection": "close"},
                                        json={"scopeKey": SCOPES[n % 2], "records": [{
                                            "kind": "fact", "sourceThreadKey": "t:1",
                                            "text": f"note number {n}"}]}) as response:
                    assert response.status == 200
            os.kill(first[0], signal.SIGKILL)
            await until(lambda: len(worker_pids(process.pid)) == 2
                        and first[0] not in worker_pids(process.pid), "a replacement")
            for scope in SCOPES:  # whichever worker answers sees every other one's writes
                async with session.post(url + "/list", headers=AUTH,
                                        json={"scopeKey": scope, "limit": 50}) as response:
                    assert len((await response.json())["records"]) == 10
    finally:
        out, _err = stop(process, signal.SIGTERM)
    err = logged(tmp_path)
    assert "stopped" in out
    assert "ended (signal SIGKILL); starting another" in err
    assert "Traceback" not in err


def sockets_on(port: int, state: str) -> set[str]:
    """The inodes of the sockets on local port ``port`` in ``state`` (the kernel's TCP
    table: "01" established, "0A" listening)."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == state:
                    found.add(fields[9])
    return found


def established_by_worker(parent: int, port: int) -> dict[int, int]:
    """How many established connections to ``port`` each worker process of ``parent``
    holds: its sockets (``/proc/<pid>/fd``) among the established ones."""
    established = sockets_on(port, "01")
    held: dict[int, int] = {}
    for pid in worker_pids(parent):
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        held[pid] = sum(link[len("socket:["):-1] in established
                        for link in links if link.startswith("socket:["))
    return held


async def test_a_burst_of_keep_alive_clients_is_spread_over_the_workers(tmp_path):
    """32 clients connecting at once, each keeping its connection (as the bots sharing a
    worker do): both processes get some, so both cores answer. One listening socket shared
    by the processes let the first to wake accept the whole burst. And the port answers as
    soon as serve says it listens, without a retry."""
    process, url = start_workers(tmp_path, tmp_path / "data", 2)
    port = int(url.rsplit(":", 1)[1])
    try:
        first = socket.create_connection(("127.0.0.1", port), timeout=20)  # no retry
        first.close()
        await until(lambda: len(worker_pids(process.pid)) == 2, "two workers")
        await until(lambda: len(sockets_on(port, "0A")) == 2, "two workers listening")
        await wait_healthy(process, url)
        request = (f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").encode()

        def burst() -> list[socket.socket]:
            clients = [socket.create_connection(("127.0.0.1", port), timeout=20)
                       for _ in range(32)]
            for client in clients:
                client.sendall(request)
            for client in clients:  # answered: each is accepted and kept open
                assert client.recv(4096).startswith(b"HTTP/1.1 200")
            return clients

        clients = await asyncio.to_thread(burst)
        try:
            held = established_by_worker(process.pid, port)
            assert sum(held.values()) == 32, held
            assert all(held.values()), held  # no process left without a client
        finally:
            for client in clients:
                client.close()
        # The workers' sockets share the port with each other, never with a second server.
        with pytest.raises(OSError):
            reserved_port("127.0.0.1", port)
    finally:
        stop(process, signal.SIGTERM)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
async def test_thirty_kills_while_eight_writers_write_lose_nothing_acknowledged(tmp_path,
                                                                                store):
    """Two workers on one data directory, eight clients writing and four retrieving, and
    thirty SIGKILLs of either worker: every acknowledged batch is there whole (and, on
    SQLite, every shard's token index holds exactly its scopes' active rows)."""
    data = tmp_path / "data"
    schema = None
    if store == "postgres":
        pg.require()
        schema = pg.new_schema()
    process, url = start_workers(tmp_path, data, 2, schema)
    acknowledged: set[str] = set()  # batch names a 200 answered
    sent: set[str] = set()
    stop_writing = asyncio.Event()

    async def writer(index: int, session: aiohttp.ClientSession) -> None:
        rng = random.Random(index)
        batch = 0
        while not stop_writing.is_set():
            name = f"w{index}b{batch}"
            batch += 1
            sent.add(name)
            records = [{"kind": "fact", "sourceThreadKey": f"t:{index}",
                        "text": f"{name} part {part} of the batch"} for part in range(3)]
            try:
                async with session.post(url + "/write", headers=AUTH, json={
                        "scopeKey": rng.choice(SCOPES), "records": records}) as response:
                    if response.status == 200:
                        acknowledged.add(name)
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.01)  # that worker died mid-answer: not acknowledged

    async def reader(index: int, session: aiohttp.ClientSession) -> None:
        # Retrievals beside the writes: each worker keeps the scopes open, answers from
        # its copies in memory and saves use counts while the other process writes.
        rng = random.Random(100 + index)
        while not stop_writing.is_set():
            try:
                async with session.post(url + "/retrieve", headers=AUTH, json={
                        "scopeKey": rng.choice(SCOPES), "query": "part of the batch",
                        "limit": 5}) as response:
                    await response.read()
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.01)

    try:
        await wait_healthy(process, url)
        await until(lambda: len(worker_pids(process.pid)) == 2, "two workers")
        timeout = aiohttp.ClientTimeout(total=20)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            writers = [asyncio.ensure_future(writer(n, session)) for n in range(8)]
            writers += [asyncio.ensure_future(reader(n, session)) for n in range(4)]
            # The kills start once a write got through: the store is set up (on PostgreSQL,
            # its schema migrated), so a loaded machine cannot see every first connection
            # killed before it finishes and leave nothing to check.
            await until(lambda: bool(acknowledged), "a first acknowledged write")
            rng = random.Random(30)
            deadline = time.monotonic() + 120  # a bound; 30 kills take some seconds
            kills = 0
            while kills < 30 and time.monotonic() < deadline:
                # One of the two, after both are up and a random few more batches were
                # acknowledged: each kill lands while writes go through, however fast the
                # machine is, and waits no longer than they take.
                await until(lambda: len(worker_pids(process.pid)) == 2, "two workers")
                wanted = len(acknowledged) + rng.randint(1, 8)
                await until(lambda wanted=wanted: len(acknowledged) >= wanted,
                            "more acknowledged batches")
                os.kill(rng.choice(worker_pids(process.pid)), signal.SIGKILL)
                kills += 1
            await until(lambda: len(worker_pids(process.pid)) == 2, "two workers again")
            stop_writing.set()
            await asyncio.gather(*writers)
        assert kills == 30
    finally:
        stop(process, signal.SIGTERM)

    # Every row the store holds, whatever its status (the cap evicts the oldest as they
    # grow: an evicted row keeps its text for the retention).
    rows = stored_rows(data, schema)
    ids = [record_id for record_id, _text in rows]
    assert len(ids) == len(set(ids))  # no id twice
    parts: dict[str, int] = {}
    for _id, text in rows:
        parts[text.split()[0]] = parts.get(text.split()[0], 0) + 1
    assert all(count == 3 for count in parts.values()), {  # no batch half-applied
        name: count for name, count in parts.items() if count != 3}
    assert acknowledged <= set(parts)  # nothing acknowledged lost
    assert set(parts) <= sent
    assert acknowledged  # the writers got through between the kills


async def test_a_parent_killed_outright_takes_its_workers_with_it(tmp_path):
    process, url = start_workers(tmp_path, tmp_path / "data", 2)
    try:
        await wait_healthy(process, url)
        await until(lambda: len(worker_pids(process.pid)) == 2, "two workers")
        workers = worker_pids(process.pid)
        process.kill()  # SIGKILL: the parent cannot pass anything on
        process.wait(timeout=20)
        await until(lambda: not any(map(alive, workers)), "the workers gone")
    finally:
        if process.poll() is None:
            process.kill()
