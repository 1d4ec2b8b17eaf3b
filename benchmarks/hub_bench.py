"""Page times of the Memory Hub at scale. Prints a table; asserts nothing.

    python benchmarks/hub_bench.py [--store sqlite|memory|postgres] [--scopes 10000]
                                   [--records 10000] [--counter-days 30] [--rounds 15]
                                   [--dsn postgresql://127.0.0.1:5432/test]

Seeds ``--scopes`` scopes of one record each and one repository scope of ``--records``
records (through the store's import, so the seeding is quick), and for every scope the
counters of ``--counter-days`` days (inserted, offered, rejected: the rows the overview's
table and charts sum; PostgreSQL in a schema of its own, dropped after), serves the hub from a real
worker on loopback, logs in, and times each page ``--rounds`` times: the overview (first
page, sorted by key and by last write, filtered to one kind), the big scope's first and
last record pages, a record, a search with its preview. Each figure is the median, beside
the baseline measured in the same run: the store's own listing call for 50 records of the
big scope (``store.list``), the floor any page showing records pays, timed directly on the
store. The ratio says what a page adds to that (HTTP, session, rendering, counters).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, CookieJar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scopemem.config import load_config  # noqa: E402
from scopemem.core.counters import day_of  # noqa: E402
from scopemem.core.records import CountRow, Kind, Record  # noqa: E402
from scopemem.stores.base import wall_clock_ms  # noqa: E402
from scopemem.worker_aiohttp.app import create_app, running  # noqa: E402

HUB_TOKEN = "hub-bench-token-0123456789"
BIG = "repo:acme/big"
WORDS = ("deploy", "tests", "bootstrap", "lint", "cache", "migration", "schema", "token",
         "retry", "timeout", "fixture", "release", "branch", "docker", "queue")


def _record(scope_key: str, seq: int, now: int) -> Record:
    words = " ".join(WORDS[(seq * 7 + i) % len(WORDS)] for i in range(6))
    return Record(id=f"mem:{scope_key}:{seq}", scope_key=scope_key, kind=Kind.FACT,
                  text=f"lesson {seq}: {words} needs care", source_thread_key="bench:1",
                  created_at=now - seq * 1000)


async def _seed(store: Any, scopes: int, records: int, counter_days: int) -> None:
    now = wall_clock_ms()
    today = day_of(now)
    kinds = ("repo", "channel", "user")
    batch: list[Record] = []
    counts: list[CountRow] = []
    for index in range(scopes):
        kind = kinds[index % 3]
        key = f"{kind}:bench:{index:05d}" if kind != "repo" else f"repo:bench/{index:05d}"
        batch.append(_record(key, 1, now))
        for day in range(today - counter_days + 1, today + 1):
            counts.extend((CountRow(key, day, "inserted", 1 + (index + day) % 5),
                           CountRow(key, day, "offered", 6),
                           CountRow(key, day, "rejected", 1 + (index + day) % 2)))
        if len(batch) >= 1000:
            await store.import_records(batch)
            await store.add_counts(counts)
            batch, counts = [], []
    if counts:
        await store.add_counts(counts)
    batch.extend(_record(BIG, seq, now) for seq in range(1, records + 1))
    for start in range(0, len(batch), 1000):
        await store.import_records(batch[start:start + 1000])


async def _median(rounds: int, call: Callable[[], Awaitable[Any]]) -> float:
    await call()  # warm
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _store(args: argparse.Namespace, directory: str) -> Any:
    if args.store == "memory":
        from scopemem.stores.memory import InMemoryStore

        return InMemoryStore(cap=10_000)
    if args.store == "postgres":
        from scopemem.stores.postgres.options import PostgresOptions
        from scopemem.stores.postgres.store import PostgresStore

        schema = f"scopemem_hub_bench_{secrets.token_hex(4)}"
        return PostgresStore(PostgresOptions(dsn=args.dsn, schema=schema, min_pool=2,
                                             max_pool=4), cap=10_000)
    from scopemem.stores.sqlite_shared import SharedSqliteStore

    return SharedSqliteStore(Path(directory) / "data", cap=10_000)


async def _drop(store: Any, dsn: str) -> None:
    """The benchmark's PostgreSQL schema, dropped."""
    import psycopg

    await store.close()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = _store(args, directory)
        try:
            await _bench(args, store)
        finally:
            if args.store == "postgres":
                await _drop(store, args.dsn)


async def _bench(args: argparse.Namespace, store: Any) -> None:
    started = time.perf_counter()
    await _seed(store, args.scopes, args.records, args.counter_days)
    print(f"seeded {args.scopes} scopes ({args.counter_days} days of counters) and"
          f" {args.records} records in {BIG} "
          f"({args.store}) in {time.perf_counter() - started:.1f} s")
    config = load_config({"memory": {"enabled": True, "organization": "acme",
                                     "max_records_per_scope": 10_000}})
    app = create_app(store, "bench-data-token-0123456789", hub_token=HUB_TOKEN,
                     hub_config=config)
    async with running(app, access_log=None) as url, ClientSession(
            cookie_jar=CookieJar(unsafe=True)) as session:
        form = await (await session.get(f"{url}/hub/login")).text()
        nonce = re.search(r'name="nonce" value="([^"]+)"', form)
        assert nonce is not None
        await session.post(f"{url}/hub/login",
                           data={"nonce": nonce.group(1), "token": HUB_TOKEN})
        baseline = await _median(args.rounds, lambda: store.list(BIG, 50))
        last = -(-args.records // 50)
        pages = {
            "overview": "/hub/",
            "overview by last write": "/hub/?sort=last_write&order=desc",
            "overview, kind repo": "/hub/?kind=repo&page=20",
            "scope, first page": f"/hub/scope?key={BIG}",
            "scope, last page": f"/hub/scope?key={BIG}&page={last}",
            "scope, status active": f"/hub/scope?key={BIG}&status=active&page=3",
            "record": f"/hub/record?id=mem:{BIG}:5000",
            "search + preview": "/hub/search?brief=deploy+tests+bootstrap&repo=acme/big",
        }
        print(f"{'page':<26}{'median ms':>10}{'x baseline':>12}")
        print(f"{'baseline store.list(50)':<26}{baseline:>10.2f}{1:>12.1f}")
        for name, path in pages.items():
            async def fetch(path: str = path) -> None:
                answer = await session.get(f"{url}{path}")
                assert answer.status == 200, (path, answer.status)
                await answer.read()

            median = await _median(args.rounds, fetch)
            print(f"{name:<26}{median:>10.2f}{median / baseline:>12.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "memory", "postgres"),
                        default="sqlite")
    parser.add_argument("--scopes", type=int, default=10_000)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--counter-days", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--dsn", default="postgresql://127.0.0.1:5432/test")
    asyncio.run(main(parser.parse_args()))
