"""Worker processes: /retrieve req/s with ``--workers 1`` and ``--workers 2``. Prints figures.

    python benchmarks/workers_bench.py [--stores sqlite,postgres] [--clients 32]
                                       [--seconds 3] [--rounds 3] [--records 500]
                                       [--write-every 10]

Path measured: ``scopemem serve`` subprocesses on loopback, ``--clients`` clients with one
keep-alive connection each (prepared requests on raw sockets by default, ``--client
aiohttp`` for aiohttp's client, which costs the shared cores several times more) sending
``/retrieve`` (3-8-word queries from a 600-word
vocabulary, limit 8) over eight scopes of ``--records`` records. Each store is seeded once
through a one-process worker; then, in ``--rounds`` rounds, a one-process and a two-process
worker over the same data take turns (``--seconds`` each, after a second of unmeasured
warm-up), so a drift in the machine's speed reaches both. Each line prints the median
req/s of the rounds and the ratio's per-round min / median / max: two processes against
one of the same store (target 1.6x on two cores, issue 16), and each store's one-process
figure against SQLite's.

With ``--write-every N`` every Nth request is a ``/write`` of one new record instead (10:
the 9:1 read:write mix). Each line also prints the CPU time a request cost, in
milliseconds, over the measured seconds: the worker processes' (``/proc/<pid>/stat`` user +
system time of the server and its children) and, for ``postgres``, the database server's
(the backends this run's connections opened, found in ``pg_stat_activity`` by their
``application_name``; the server's shared background processes are not counted).

``postgres`` runs against ``SCOPEMEM_TEST_POSTGRES_DSN`` (default
``postgresql://127.0.0.1:5432/test``) in a schema of its own, dropped afterwards; it is
skipped, saying so, when that store is not installed or the server cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import attrs

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.worker_bench import (  # noqa: E402
    AUTH,
    TOKEN,
    free_port,
    run_clients,
    sentence,
    subprocess_server,
)

SCOPES = [f"org:bench{n}" for n in range(8)]
DEFAULT_DSN = "postgresql://127.0.0.1:5432/test"
POSTGRES_OPTIONS: list[str] = []  # ``--postgres-option``: TOML lines for the store's table


def config_for(store: str, tmp: str, schema: str) -> str:
    """A configuration file for ``store`` (the data or the schema of this run; the
    server's connections carry the schema's name as their ``application_name``)."""
    path = os.path.join(tmp, f"{store}.toml")
    dsn = os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN", DEFAULT_DSN)
    dsn += ("&" if "?" in dsn else "?") + f"application_name={schema}"
    with open(path, "w") as f:
        f.write("[memory]\nenabled = true\norganization = \"bench\"\n")
        if store == "sqlite":
            f.write(f"[memory.stores.sqlite]\npath = \"{os.path.join(tmp, 'data')}\"\n")
        else:
            f.write(f"[memory.stores.postgres]\ndsn = \"{dsn}\"\nschema = \"{schema}\"\n")
            for option in POSTGRES_OPTIONS:
                f.write(f"{option}\n")
    return path


@contextlib.asynccontextmanager
async def server(store: str, config: str, workers: int,
                 started: list[subprocess.Popen[bytes]] | None = None) -> AsyncIterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "scopemem", "--config", config, "serve", "--store", store,
            "--port", str(port), "--workers", str(workers), "--no-access-log"]
    env = {**os.environ, "SCOPEMEM_TOKEN": TOKEN}
    async with subprocess_server(argv, port, env=env, cwd=os.path.dirname(config),
                                 started=started) as url:
        yield url


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and its children (the worker processes ``--workers`` forks)."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    children.append(int(entry))
    return [pid, *children]


async def backends(schema: str) -> list[int]:
    """The database server's processes serving this run's connections."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(
            os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN", DEFAULT_DSN), autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (schema,))
        return [pid for (pid,) in await cursor.fetchall()]


class CpuMeter:
    """CPU seconds spent by the worker processes and by the database server's backends
    between ``start`` and ``stop``."""

    def __init__(self, server_pid: int, schema: str | None) -> None:
        self.server_pid, self.schema = server_pid, schema
        self.worker = self.database = 0.0

    async def _now(self) -> tuple[dict[int, float], dict[int, float]]:
        workers = {pid: cpu_seconds(pid) for pid in tree(self.server_pid)}
        pids = await backends(self.schema) if self.schema else []
        return workers, {pid: cpu_seconds(pid) for pid in pids}

    async def start(self) -> None:
        self._start = await self._now()

    async def stop(self) -> None:
        end = await self._now()
        # A process that started meanwhile counts from 0.
        self.worker = sum(t - self._start[0].get(p, 0.0) for p, t in end[0].items())
        self.database = sum(t - self._start[1].get(p, 0.0) for p, t in end[1].items())


async def seed(url: str, records: int) -> None:
    rng = random.Random(3)
    async with aiohttp.ClientSession() as session:
        for scope in SCOPES:
            for start in range(0, records, 50):
                batch = [{"kind": "fact", "sourceThreadKey": "bench:1",
                          "text": f"{sentence(rng, 12)} #{start + n}"}
                         for n in range(min(50, records - start))]
                async with session.post(url + "/write", headers=AUTH, json={
                        "scopeKey": scope, "records": batch}) as response:
                    if response.status != 200:
                        raise SystemExit(f"seeding failed: {response.status}"
                                         f" {await response.text()}")


def write_request(n: int) -> bytes:
    """A prepared ``/write`` of one new record (``n`` keeps its text new)."""
    rng = random.Random(n)
    body = json.dumps({"scopeKey": rng.choice(SCOPES), "records": [{
        "kind": "fact", "sourceThreadKey": "bench:2",
        "text": f"{sentence(rng, 12)} w{n}"}]}).encode()
    return (b"POST /write HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer "
            + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def retrieve(url: str) -> Any:
    def body(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return url + "/retrieve", {"scopeKey": rng.choice(SCOPES),
                                   "query": sentence(rng, rng.randint(3, 8)), "limit": 8}
    return body


@attrs.frozen
class Run:
    req_per_s: float
    worker_ms: float  # CPU milliseconds a request, worker processes
    database_ms: float  # and database server backends


async def measure(store: str, config: str, workers: int, args: argparse.Namespace,
                  schema: str) -> Run:
    started: list[subprocess.Popen[bytes]] = []
    async with server(store, config, workers, started) as url:
        meter = CpuMeter(started[0].pid, schema if store == "postgres" else None)
        if args.client == "aiohttp":
            connector = aiohttp.TCPConnector(limit=args.clients)
            async with aiohttp.ClientSession(connector=connector) as session:
                await run_clients(session, args.clients, 1.0, retrieve(url))  # warm-up
                await meter.start()
                latencies, errors = await run_clients(session, args.clients, args.seconds,
                                                      retrieve(url))
                await meter.stop()
        else:
            await raw_clients(url, args.clients, 1.0, args.write_every)  # warm-up
            await meter.start()
            latencies, errors = await raw_clients(url, args.clients, args.seconds,
                                                  args.write_every)
            await meter.stop()
    if errors:
        print(f"   ({store}, {workers} processes: {errors} errors)")
    done = max(len(latencies), 1)
    return Run(len(latencies) / args.seconds, 1000 * meter.worker / done,
               1000 * meter.database / done)


async def raw_clients(url: str, clients: int, seconds: float, write_every: int = 0
                      ) -> tuple[list[float], int]:
    """``clients`` keep-alive connections, each sending prepared ``/retrieve`` requests
    back to back and reading each answer by its Content-Length: a load generator that costs
    a fraction of aiohttp's client per request, so on a machine whose cores it shares with
    the server it leaves them to the server (the figure of interest: how the server scales
    with its processes, not how fast the client is)."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    rng = random.Random(11)
    requests = []
    for _ in range(200):
        body = json.dumps({"scopeKey": rng.choice(SCOPES), "query": sentence(
            rng, rng.randint(3, 8)), "limit": 8}).encode()
        requests.append(b"POST /retrieve HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer "
                        + TOKEN.encode() + b"\r\nContent-Type: application/json\r\n"
                        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    written = itertools.count(int(time.time() * 1000))  # new texts in every run
    sent = itertools.count()  # every client's requests, so one in ``write_every`` writes

    async def client(index: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        n = index
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                if write_every and next(sent) % write_every == write_every - 1:
                    writer.write(write_request(next(written)))
                else:
                    writer.write(requests[n % len(requests)])
                n += clients
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - started)
                errors += not head.startswith(b"HTTP/1.1 200")
        finally:
            writer.close()

    await asyncio.gather(*(client(n) for n in range(clients)))
    return latencies, errors


async def postgres_reachable() -> str | None:
    """Why the postgres case cannot run, or None."""
    try:
        import psycopg  # noqa: F401

        from scopemem.installation import store_registry
        from scopemem.plugins.manager import new_plugin_manager
    except ImportError as exc:
        return f"not installed ({exc})"
    if "postgres" not in store_registry(new_plugin_manager()).names():
        return "the postgres store is not installed"
    try:
        conn = await psycopg.AsyncConnection.connect(
            os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN", DEFAULT_DSN), connect_timeout=3)
        await conn.close()
    except Exception as exc:  # any failure to connect: say it and skip
        return f"no server ({exc})"
    return None


async def drop_schema(schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(
            os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN", DEFAULT_DSN), autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def ratio_line(label: str, pairs: list[tuple[Run, Run]], target: str = "") -> None:
    ratios = sorted(m.req_per_s / b.req_per_s for m, b in pairs)
    measured = statistics.median(m.req_per_s for m, _ in pairs)
    base = statistics.median(b.req_per_s for _, b in pairs)
    print(f"   {label:<44} {measured:8.0f} vs {base:8.0f} req/s = "
          f"{statistics.median(ratios):5.2f}x  (rounds {ratios[0]:.2f} / "
          f"{statistics.median(ratios):.2f} / {ratios[-1]:.2f})"
          + (f"  target {target}" if target else ""))


def cpu_line(label: str, runs: list[Run]) -> None:
    worker = statistics.median(run.worker_ms for run in runs)
    database = statistics.median(run.database_ms for run in runs)
    print(f"   {label:<44} {statistics.median(run.req_per_s for run in runs):8.0f} req/s,"
          f" CPU a request: worker {worker:.2f} ms, database {database:.2f} ms")


async def main(args: argparse.Namespace) -> None:
    mix = f", a write every {args.write_every} requests" if args.write_every else ""
    print(f"scopemem workers bench: {args.clients} clients, {len(SCOPES)} scopes x "
          f"{args.records} records{mix}, {args.rounds} rounds of {args.seconds:g} s, "
          f"{os.cpu_count()} CPUs")
    figures: dict[str, dict[int, list[Run]]] = {}
    schema = f"scopemem_bench_{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="scopemem-workers-") as tmp:
        for store in args.stores:
            if store == "postgres":
                why = await postgres_reachable()
                if why is not None:
                    print(f"   postgres: skipped: {why}")
                    continue
            config = config_for(store, tmp, schema)
            try:
                async with server(store, config, 1) as url:
                    await seed(url, args.records)
                figures[store] = {1: [], 2: []}
                for _ in range(args.rounds):
                    for workers in (1, 2):
                        figures[store][workers].append(
                            await measure(store, config, workers, args, schema))
            finally:
                if store == "postgres":
                    await drop_schema(schema)
    print("\nmedians over the rounds:")
    for store, runs in figures.items():
        for workers in (1, 2):
            cpu_line(f"{store} --workers {workers}", runs[workers])
    print("\nreq/s, two worker processes against one:")
    for store, runs in figures.items():
        ratio_line(f"{store}: --workers 2 vs --workers 1", list(zip(runs[2], runs[1],
                                                                    strict=True)), "1.6x")
    if "sqlite" in figures:
        for store, runs in figures.items():
            if store != "sqlite":
                ratio_line(f"{store} --workers 1 vs sqlite --workers 1",
                           list(zip(runs[1], figures["sqlite"][1], strict=True)))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--write-every", type=int, default=0,
                        help="every Nth request a /write of one new record (10: a 9:1"
                             " read:write mix; 0: reads only)")
    parser.add_argument("--client", choices=("raw", "aiohttp"), default="raw",
                        help="the load generator: prepared requests on raw keep-alive sockets"
                             " (default: cheap, so the server gets the cores) or aiohttp's"
                             " client")
    parser.add_argument("--postgres-option", action="append", default=[],
                        metavar="KEY=VALUE", help="a line for [memory.stores.postgres], e.g."
                        " postings_cache=0 to measure without copies (repeatable)")
    args = parser.parse_args(argv)
    POSTGRES_OPTIONS[:] = args.postgres_option
    args.stores = [name.strip() for name in args.stores.split(",") if name.strip()]
    if (not args.stores or not set(args.stores) <= {"sqlite", "postgres"}
            or args.clients < 1 or args.seconds <= 0 or args.rounds < 1 or args.records < 1
            or args.write_every < 0):
        parser.error("--stores names sqlite and/or postgres; counts and seconds above zero")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
