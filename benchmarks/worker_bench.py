"""Load figures for the Memory Worker on loopback. Prints a table; asserts nothing.

    python benchmarks/worker_bench.py [--clients 32] [--duration 10] [--slices 5]
                                      [--store sqlite|memory] [--tracing]

The servers run as subprocesses, so the load generator never shares their event loop or
their interpreter: ``scopemem serve`` over the chosen store and over the null store, and a
bare aiohttp handler that reads a JSON body, parses it and answers a small JSON object (the
floor any aiohttp route pays). After an unmeasured second of warm-up on each server, each
phase runs for ``--duration`` seconds in all with ``--clients`` concurrent clients, one
keep-alive connection each:

* bare       POST to the bare handler
* retrieve   POST /retrieve: the null store; one seeded scope; eight seeded scopes
             (a few query words, limit 8)
* write      POST /write, one new fact per request, spread over the clients' own scopes,
             each with its own Idempotency-Key (as the worker client sends it)
* reads      half the clients retrieving from seeded scopes, alone ...
* reads+w    ... and again while the other half writes to many other scopes

The bare handler and the three retrieve phases take turns in ``--slices`` rounds (2 s each
by default), so a drift in the machine's speed during the run reaches the baseline and the
ratios alike; each ratio is the median of the rounds' ratios. The last two rows answer "do
writes to many scopes stall reads of other scopes?": compare their read p99. Targets (32
clients, 2 cores): retrieve at least half the bare handler's req/s with p99 under 50 ms,
and read p99 under write load close to read p99 alone.

With ``--tracing`` the workers run with an OpenTelemetry SDK ``TracerProvider`` (a batch
processor handing every span to an exporter that drops it: the cost of recording spans, not
of shipping them); without it they run as a deployment without a provider does, where each
tracing call is the API's no-op (``scopemem.tracing``).

Path measured: the Memory Worker over HTTP on loopback, over one to eight 300-record scopes
(and 64 written ones), with short queries (3-8 words) from a 600-word vocabulary that never
match more than the candidate cap. It does not measure long or common-word briefs, large
scopes, or thousands of scopes; ``load_bench.py`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

TOKEN = "bench-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SYLLABLES = ("ka", "lo", "mi", "nu", "pe", "ri", "so", "ta", "ve", "zu", "de", "gon")


def vocabulary(size: int) -> list[str]:
    """``size`` distinct pseudo-words: records share words the way real lessons do, and a
    query matches a handful of records rather than all of them (or none)."""
    rng = random.Random(7)
    words: dict[str, None] = {}
    while len(words) < size:
        words["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))] = None
    return list(words)


WORDS: list[str] = vocabulary(600)

#: ``scopemem serve`` with an SDK tracer provider whose exporter drops every span.
TRACED_SERVE = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

class Drop(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(Drop()))
trace.set_tracer_provider(provider)
sys.argv[0] = "scopemem"
from scopemem.cli import main
main()
"""

BARE_SERVER = """
import sys, json
from aiohttp import web

async def handle(request):
    json.loads(await request.read())
    return web.json_response({"records": []})

app = web.Application()
app.router.add_post("/bare", handle)
app.router.add_get("/healthz", lambda request: web.json_response({"ok": True}))
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def subprocess_server(argv: list[str], port: int, env: dict[str, str] | None = None,
                            cwd: str | None = None,
                            started: list[subprocess.Popen[bytes]] | None = None
                            ) -> AsyncIterator[str]:
    """The server ``argv`` runs, healthy, as its URL (its process appended to ``started``)."""
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, cwd=cwd)
    if started is not None:
        started.append(process)
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            deadline = time.monotonic() + 30
            while True:
                if process.poll() is not None:
                    raise SystemExit(f"server exited early: {argv}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(url + "/healthz") as response:
                        if response.status == 200:
                            break
                if time.monotonic() > deadline:
                    raise SystemExit(f"server never became healthy: {argv}")
                await asyncio.sleep(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


async def seed(session: aiohttp.ClientSession, url: str, scope: str, count: int) -> None:
    rng = random.Random(scope)
    for start in range(0, count, 50):
        records = [{"kind": "fact", "sourceThreadKey": "bench:1",
                    "text": f"{sentence(rng, 12)} #{start + n}"}
                   for n in range(min(50, count - start))]
        async with session.post(url + "/write", json={"scopeKey": scope, "records": records},
                                headers=AUTH) as response:
            if response.status != 200:
                raise SystemExit(f"seeding failed: {response.status} {await response.text()}")


Body = Callable[[int, random.Random], tuple[str, dict[str, Any]]]


# How many times ``run_clients`` has run in this process: part of each client's seed.
_runs = itertools.count()


async def run_clients(session: aiohttp.ClientSession, clients: int, duration: float,
                      body: Body, first_client: int = 0) -> tuple[list[float], int]:
    """``clients`` loops posting until the deadline; every latency (s) and the error count.

    Each client draws from its own generator, seeded by its index and by how many times
    this ran before: a run never replays an earlier run's draws (the same scopes in the same
    order would find them warm), and a whole benchmark run draws the same as the last."""
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + duration
    run = next(_runs)

    async def client(index: int) -> None:
        nonlocal errors
        rng = random.Random(f"{run}:{index}")
        while time.perf_counter() < deadline:
            route, payload = body(index, rng)
            data = json.dumps(payload).encode()
            headers = {**AUTH, "Content-Type": "application/json"}
            if route.endswith("/write"):  # as the worker client sends every write
                headers["Idempotency-Key"] = f"{rng.getrandbits(128):032x}"
            started = time.perf_counter()
            try:
                async with session.post(route, data=data, headers=headers) as response:
                    await response.read()
                    ok = response.status == 200
            except aiohttp.ClientError:
                ok = False
            latencies.append(time.perf_counter() - started)
            errors += not ok

    await asyncio.gather(*(client(first_client + n) for n in range(clients)))
    return latencies, errors


def row(name: str, clients: str, latencies: list[float], errors: int, duration: float
        ) -> dict[str, Any]:
    ordered = sorted(latencies) or [0.0]

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000

    return {"phase": name, "clients": clients, "requests": len(latencies), "errors": errors,
            "rps": len(latencies) / duration, "p50": statistics.median(ordered) * 1000,
            "p99": pct(0.99), "max": ordered[-1] * 1000}


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (f"{'phase':<26}{'clients':>9}{'requests':>10}{'errors':>8}{'req/s':>9}"
              f"{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['phase']:<26}{r['clients']:>9}{r['requests']:>10}{r['errors']:>8}"
              f"{r['rps']:>9.0f}{r['p50']:>9.1f}{r['p99']:>9.1f}{r['max']:>9.1f}")


READ_SCOPES = 8


async def main(args: argparse.Namespace) -> None:
    clients, duration = args.clients, args.duration
    ports = [free_port() for _ in range(3)]
    with tempfile.TemporaryDirectory(prefix="scopemem-bench-") as data:
        env = {**os.environ, "SCOPEMEM_TOKEN": TOKEN}
        env.pop("SCOPEMEM_CONFIG", None)
        # The SQLite layout under measurement, named (not left to the default).
        config = os.path.join(data, "layout.toml")
        with open(config, "w", encoding="utf-8") as f:
            f.write(f'[memory.stores.sqlite]\nlayout = "{args.layout}"\n')
        env["SCOPEMEM_CONFIG"] = config

        def worker_argv(store: str, port: int) -> list[str]:
            serve = ["-c", TRACED_SERVE] if args.tracing else ["-m", "scopemem"]
            return [sys.executable, *serve, "serve", "--port", str(port),
                    "--store", store, "--data", data, "--no-access-log"]

        async with subprocess_server([sys.executable, "-c", BARE_SERVER, str(ports[0])],
                                     ports[0]) as bare, \
                subprocess_server(worker_argv("null", ports[1]), ports[1], env) as null, \
                subprocess_server(worker_argv(args.store, ports[2]), ports[2], env) as worker:
            connector = aiohttp.TCPConnector(limit=clients * 2)
            timeout = aiohttp.ClientTimeout(total=60)
            async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
                await seed(session, worker, "org:bench", args.records)
                for n in range(READ_SCOPES):
                    await seed(session, worker, f"channel:bench:read-{n}", args.records)
                rows = await phases(session, bare, null, worker, clients, duration,
                                    args.scopes, args.slices)
    print(f"\nscopemem worker, store={args.store}, {clients} clients, {duration:g} s per phase"
          f" (the first four in {args.slices} interleaved rounds),"
          f" {args.records} records per read scope, {len(WORDS)}-word vocabulary,"
          f" {os.cpu_count()} CPUs, loopback,"
          f" tracing {'on (SDK provider)' if args.tracing else 'off'}\n")
    print_table(rows)
    verdicts(rows)


async def phases(session: aiohttp.ClientSession, bare: str, null: str, worker: str,
                 clients: int, duration: float, scopes: int, slices: int
                 ) -> list[dict[str, Any]]:
    rows = []
    counter = iter(range(10**9))

    def query(rng: random.Random) -> str:
        return sentence(rng, rng.randint(3, 8))

    def bare_body(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return bare + "/bare", {"scopeKey": "org:bench", "query": query(rng), "limit": 8}

    def null_body(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return null + "/retrieve", {"scopeKey": "org:bench", "query": query(rng), "limit": 8}

    def hot_body(_i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return worker + "/retrieve", {"scopeKey": "org:bench", "query": query(rng), "limit": 8}

    def read_body(i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return worker + "/retrieve", {"scopeKey": f"channel:bench:read-{i % READ_SCOPES}",
                                      "query": query(rng), "limit": 8}

    def write_body(i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        return worker + "/write", {"scopeKey": f"repo:bench/w{i % scopes}", "records": [
            {"kind": "fact", "sourceThreadKey": "bench:2",
             "text": f"{sentence(rng, 10)} {next(counter)}"}]}

    # Unmeasured warm-up of every server and of the client, so the first phase measured
    # (the bare handler, the baseline of every ratio) is not the one that pays for it.
    for body in (bare_body, null_body, hot_body, read_body):
        await run_clients(session, clients, min(1.0, duration), body)

    # The baseline and the phases compared with it take turns, a slice at a time.
    compared: list[tuple[str, Body]] = [
        ("bare aiohttp JSON", bare_body), ("/retrieve, null store", null_body),
        ("/retrieve, 1 hot scope", hot_body), (f"/retrieve, {READ_SCOPES} scopes", read_body)]
    part = duration / slices
    pooled: dict[str, tuple[list[float], list[int], list[float]]] = {
        name: ([], [], []) for name, _ in compared}  # latencies, errors, req/s per slice
    for _ in range(slices):
        for name, body in compared:
            latencies, errors = await run_clients(session, clients, part, body)
            pooled[name][0].extend(latencies)
            pooled[name][1].append(errors)
            pooled[name][2].append(len(latencies) / part)
    bare_rates = pooled["bare aiohttp JSON"][2]
    for name, _ in compared:
        latencies, errors, rates = pooled[name]
        rows.append({**row(name, str(clients), latencies, sum(errors), duration),
                     "ratios": [rate / (base or 1.0) for rate, base in zip(
                         rates, bare_rates, strict=True)]})

    latencies, errors = await run_clients(session, clients, duration, write_body)
    rows.append(row(f"/write, {scopes} scopes", str(clients), latencies, errors, duration))

    readers = max(1, clients // 2)
    writers = max(1, clients - readers)
    latencies, errors = await run_clients(session, readers, duration, read_body)
    rows.append(row("reads alone", str(readers), latencies, errors, duration))
    (read_lat, read_err), (write_lat, write_err) = await asyncio.gather(
        run_clients(session, readers, duration, read_body),
        run_clients(session, writers, duration, write_body, first_client=readers),
    )
    rows.append(row("reads + writes elsewhere", str(readers), read_lat, read_err, duration))
    rows.append(row("  (the writes meanwhile)", str(writers), write_lat, write_err, duration))
    return rows


def verdicts(rows: list[dict[str, Any]]) -> None:
    by = {r["phase"]: r for r in rows}
    print()
    for name in ("/retrieve, null store", "/retrieve, 1 hot scope",
                 f"/retrieve, {READ_SCOPES} scopes"):
        r = by[name]
        ratios = r["ratios"]
        ratio = statistics.median(ratios)
        print(f"{name:<24} {ratio:4.2f} x bare req/s ({'met' if ratio >= 0.5 else 'NOT met'}"
              f" >= 0.50; rounds {min(ratios):.2f}-{max(ratios):.2f}),"
              f" p99 {r['p99']:.1f} ms ({'met' if r['p99'] < 50 else 'NOT met'} < 50 ms)")
    alone, loaded = by["reads alone"], by["reads + writes elsewhere"]
    print(f"read p99 alone {alone['p99']:.1f} ms; with writes to other scopes "
          f"{loaded['p99']:.1f} ms (max {loaded['max']:.1f} ms)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0,
                        help="seconds per phase (default 10; 1-2 for a smoke run)")
    parser.add_argument("--slices", type=int, default=5,
                        help="rounds the bare handler and the retrieve phases take turns in")
    parser.add_argument("--store", default="sqlite", help="store the worker serves")
    parser.add_argument("--layout", choices=("file", "shared"), default="shared",
                        help="the SQLite store's layout (memory.stores.sqlite.layout;"
                             " default shared, the default of a new directory)")
    parser.add_argument("--scopes", type=int, default=64,
                        help="distinct scopes the write phases spread over")
    parser.add_argument("--tracing", action="store_true",
                        help="run the workers with an OpenTelemetry SDK tracer provider")
    parser.add_argument("--records", type=int, default=300,
                        help="records seeded into each scope the reads use")
    args = parser.parse_args(argv)
    for name in ("clients", "duration", "slices", "scopes", "records"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name} must be above zero")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
