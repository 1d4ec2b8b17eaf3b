"""Worker processes: /retrieve req/s with ``--workers 1`` and ``--workers 2``. Prints figures.

    python benchmarks/workers_bench.py [--stores sqlite,postgres] [--clients 32]
                                       [--seconds 3] [--rounds 3] [--records 500]

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

``postgres`` runs against ``SCOPEMEM_TEST_POSTGRES_DSN`` (default
``postgresql://127.0.0.1:5432/test``) in a schema of its own, dropped afterwards; it is
skipped, saying so, when that store is not installed or the server cannot be reached.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

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


def config_for(store: str, tmp: str, schema: str) -> str:
    """A configuration file for ``store`` (the data or the schema of this run)."""
    path = os.path.join(tmp, f"{store}.toml")
    dsn = os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN", DEFAULT_DSN)
    with open(path, "w") as f:
        f.write("[memory]\nenabled = true\norganization = \"bench\"\n")
        if store == "sqlite":
            f.write(f"[memory.stores.sqlite]\npath = \"{os.path.join(tmp, 'data')}\"\n")
        else:
            f.write(f"[memory.stores.postgres]\ndsn = \"{dsn}\"\nschema = \"{schema}\"\n")
    return path


@contextlib.asynccontextmanager
async def server(store: str, config: str, workers: int) -> AsyncIterator[str]:
    port = free_port()
    argv = [sys.executable, "-m", "scopemem", "--config", config, "serve", "--store", store,
            "--port", str(port), "--workers", str(workers), "--no-access-log"]
    env = {**os.environ, "SCOPEMEM_TOKEN": TOKEN}
    async with subprocess_server(argv, port, env=env, cwd=os.path.dirname(config)) as url:
        yield url


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


def retrieve(url: str) -> Any:
    def body(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return url + "/retrieve", {"scopeKey": rng.choice(SCOPES),
                                   "query": sentence(rng, rng.randint(3, 8)), "limit": 8}
    return body


async def req_per_s(store: str, config: str, workers: int, args: argparse.Namespace) -> float:
    async with server(store, config, workers) as url:
        if args.client == "aiohttp":
            connector = aiohttp.TCPConnector(limit=args.clients)
            async with aiohttp.ClientSession(connector=connector) as session:
                await run_clients(session, args.clients, 1.0, retrieve(url))  # warm-up
                latencies, errors = await run_clients(session, args.clients, args.seconds,
                                                      retrieve(url))
        else:
            await raw_clients(url, args.clients, 1.0)  # warm-up
            latencies, errors = await raw_clients(url, args.clients, args.seconds)
    if errors:
        print(f"   ({store}, {workers} processes: {errors} errors)")
    return len(latencies) / args.seconds


async def raw_clients(url: str, clients: int, seconds: float) -> tuple[list[float], int]:
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

    async def client(index: int) -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, int(port))
        n = index
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
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


def ratio_line(label: str, pairs: list[tuple[float, float]], target: str = "") -> None:
    ratios = sorted(m / b for m, b in pairs)
    measured = statistics.median(m for m, _ in pairs)
    base = statistics.median(b for _, b in pairs)
    print(f"   {label:<44} {measured:8.0f} vs {base:8.0f} req/s = "
          f"{statistics.median(ratios):5.2f}x  (rounds {ratios[0]:.2f} / "
          f"{statistics.median(ratios):.2f} / {ratios[-1]:.2f})"
          + (f"  target {target}" if target else ""))


async def main(args: argparse.Namespace) -> None:
    print(f"scopemem workers bench: {args.clients} clients, {len(SCOPES)} scopes x "
          f"{args.records} records, {args.rounds} rounds of {args.seconds:g} s, "
          f"{os.cpu_count()} CPUs")
    figures: dict[str, dict[int, list[float]]] = {}
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
                            await req_per_s(store, config, workers, args))
            finally:
                if store == "postgres":
                    await drop_schema(schema)
    print("\n/retrieve req/s, two worker processes against one:")
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
    parser.add_argument("--client", choices=("raw", "aiohttp"), default="raw",
                        help="the load generator: prepared requests on raw keep-alive sockets"
                             " (default: cheap, so the server gets the cores) or aiohttp's"
                             " client")
    args = parser.parse_args(argv)
    args.stores = [name.strip() for name in args.stores.split(",") if name.strip()]
    if (not args.stores or not set(args.stores) <= {"sqlite", "postgres"}
            or args.clients < 1 or args.seconds <= 0 or args.rounds < 1 or args.records < 1):
        parser.error("--stores names sqlite and/or postgres; counts and seconds above zero")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
