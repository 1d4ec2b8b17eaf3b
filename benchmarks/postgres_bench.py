"""How fast is the PostgreSQL store, next to the SQLite store, in the same run?

    python benchmarks/postgres_bench.py [--sizes 500,10000] [--limit 8] [--seconds 3]
                                        [--rounds 3]
                                        [--dsn postgresql://127.0.0.1:5432/test]

For each scope size it fills one scope of a PostgresStore (in a schema of its own, dropped
afterwards) and one of a SharedSqliteStore (in a temporary directory) with the same generated
records, copies the store's active rows into a plain table with a ``tsvector`` of the
engine's terms and a GIN index on it (the baseline: ``GIN_SQL``, the best
``candidate_cap(limit)`` rows by ``ts_rank`` for the query's prefilter terms, read in full,
as ``raw_fts.RAW_FTS_SQL`` is SQLite's), then prints, for each and the ratios (Postgres /
SQLite, Postgres / GIN):

* retrieve p50 and p99 (milliseconds) of ``retrieve`` (limit 8, usage bumps on) for
  brief-like queries (6-16 words, common ones included, so they match much of the scope)
  and for selective ones (2-4 rare words), the median over ``--rounds`` rounds and each
  ratio's min / median / max over them;
* write p50: a batch of 50 new candidates through ``write`` (at 10,000 records the scope is
  at the largest cap, so every batch also evicts 50).

The contenders are measured in alternating blocks of ten calls on the same queries, so drift
and neighbours on a shared machine hit them alike. Both are called directly in process (no
HTTP, no ``Memory``); the server runs on the same machine (a socket round trip of about
0.1 ms). Default durability on both: SQLite ``synchronous = full``, PostgreSQL's own
``synchronous_commit``. Target: Postgres retrieve within 3x SQLite's at 10,000 records.
With ``--curve 1,10,40`` it also fills one table with that many scopes of 500 records and
prints retrieve p50 on one of them at each count: what sharing one table costs a scope.
Before measuring, the tables are vacuumed and analyzed, as autovacuum would have done by
then (fresh planner statistics, the visibility map that lets postings be read index-only).
Then (``--workers on``, the default) ``workers_bench.py``'s figures: worker ``/retrieve``
req/s, 32 clients, with one and two worker processes over Postgres, and over SQLite with
one (target: two processes at least 1.6x one, on two cores).
Nothing here asserts: it prints figures.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import workers_bench  # noqa: E402
from benchmarks.store_bench import Corpus  # noqa: E402
from scopemem.core import engine  # noqa: E402
from scopemem.core.ranking import candidate_cap  # noqa: E402
from scopemem.core.records import MAX_SCOPE_CAP  # noqa: E402
from scopemem.stores.postgres import PostgresStore  # noqa: E402
from scopemem.stores.postgres.options import PostgresOptions  # noqa: E402
from scopemem.stores.postgres.statements import COLUMNS  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore  # noqa: E402

SCOPE = "repo:acme/widgets"
BATCH = 50
DEFAULT_DSN = os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN", "postgresql://127.0.0.1:5432/test")


def percentile_ms(samples: list[float], share: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] * 1000


async def alternate(calls: dict[str, Callable[[int], Awaitable[object]]], seconds: float,
                    max_runs: int = 3000) -> dict[str, list[float]]:
    """Each named call run in turn, in blocks of ten, for about ``seconds`` in all."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    deadline = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < deadline and n < max_runs:
        for name, call in calls.items():
            for i in range(n, n + 10):
                start = time.perf_counter()
                await call(i)
                samples[name].append(time.perf_counter() - start)
        n += 10
    return samples


# The plain tsvector + GIN query on the same rows: the best ``cap`` rows by ts_rank for the
# query's prefilter terms (an OR query), read in full.
GIN_SQL = ("SELECT {columns} FROM {table} WHERE tsv @@ %(q)s::tsquery"
           " ORDER BY ts_rank(tsv, %(q)s::tsquery) DESC, seq DESC LIMIT %(cap)s")


def row(label: str, pg: float, sqlite: float) -> str:
    return f"  {label:<28} {pg:>9.2f} {sqlite:>9.2f} {pg / sqlite:>8.2f}x"


def spread(ratios: list[float]) -> str:
    ordered = sorted(ratios)
    return f"{ordered[0]:.2f}/{statistics.median(ordered):.2f}/{ordered[-1]:.2f}"


def tsquery(terms: Sequence[str]) -> str:
    """An OR tsquery of ``terms``, each a quoted lexeme (no parser stems or drops them)."""
    return " | ".join("'" + term.replace("\\", "\\\\").replace("'", "''") + "'"
                      for term in terms)


class GinBaseline:
    """The baseline's table, filled from a store's active rows of one scope, and its query."""

    def __init__(self, store: PostgresStore, conn: Any, limit: int) -> None:
        self.analyzer = store.analyzer
        self.conn = conn
        self.statement = GIN_SQL.format(columns=COLUMNS, table=f'"{store.schema}".raw_gin')
        self.cap = candidate_cap(limit)

    @classmethod
    async def fill(cls, store: PostgresStore, dsn: str, scope: str, limit: int
                   ) -> GinBaseline:
        import psycopg

        table = f'"{store.schema}".raw_gin'
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
        await conn.execute(f"CREATE TABLE {table} AS SELECT {COLUMNS},"
                           f" array_to_tsvector(tokens) AS tsv FROM \"{store.schema}\".records"
                           " WHERE scope_key = %s AND status = 'active'", (scope,))
        await conn.execute(f"CREATE INDEX ON {table} USING gin (tsv)")
        await conn.execute(f"VACUUM ANALYZE {table}")
        return cls(store, conn, limit)

    async def __call__(self, text: str) -> object:
        terms = engine.query_terms(text, self.analyzer).prefilter_stems
        cursor = await self.conn.execute(self.statement, {"q": tsquery(terms),
                                                          "cap": self.cap})
        return await cursor.fetchall()

    async def close(self) -> None:
        await self.conn.close()


async def bench_size(size: int, limit: int, seconds: float, dsn: str, rounds: int) -> None:
    corpus = Corpus(seed=size)
    clock = itertools.count(1_790_000_000_000, 1000).__next__
    schema = f"scopemem_bench_{secrets.token_hex(4)}"
    postgres = PostgresStore(PostgresOptions(dsn=dsn, schema=schema, min_pool=2, max_pool=4),
                             cap=MAX_SCOPE_CAP, clock=clock)
    with tempfile.TemporaryDirectory(prefix="scopemem-pgbench-") as tmp:
        sqlite = SharedSqliteStore(tmp, cap=MAX_SCOPE_CAP, clock=clock)
        stores = {"postgres": postgres, "sqlite": sqlite}
        try:
            fill = {name: 0.0 for name in stores}
            for _ in range(size // BATCH):
                batch = [corpus.candidate() for _ in range(BATCH)]
                for name, store in stores.items():
                    start = time.perf_counter()
                    await store.write(SCOPE, batch)
                    fill[name] += time.perf_counter() - start
            await postgres_analyze(postgres, dsn)
            gin = await GinBaseline.fill(postgres, dsn, SCOPE, limit)
            print(f"\n{size} records per scope (filled in {fill['postgres']:.1f} s on Postgres,"
                  f" {fill['sqlite']:.1f} s on SQLite); medians of {rounds} rounds, ratios"
                  " min/median/max")
            print(f"  {'':<28} {'postgres':>9} {'sqlite':>9} {'gin':>9} {'pg/sqlite':>15}"
                  f" {'pg/gin':>15}")
            try:
                for kind, make in (("brief", corpus.query),
                                   ("selective", corpus.selective_query)):
                    await retrieve_rounds(kind, [make() for _ in range(40)], stores, gin,
                                          limit, seconds, rounds)
            finally:
                await gin.close()
            batches = [[corpus.candidate() for _ in range(BATCH)] for _ in range(20)]
            samples = await alternate({
                name: (lambda i, store=store: store.write(SCOPE, batches[i % len(batches)]))
                for name, store in stores.items()}, seconds, max_runs=20)
            print(row("write batch of 50 p50 (ms)",
                      statistics.median(samples["postgres"]) * 1000,
                      statistics.median(samples["sqlite"]) * 1000))
        finally:
            await sqlite.close()
            await postgres.close()
            await drop(dsn, schema)


async def retrieve_rounds(kind: str, queries: list[str], stores: dict[str, Any],
                          gin: GinBaseline, limit: int,
                          seconds: float, rounds: int) -> None:
    """Retrieve p50 and p99 of each contender, ``rounds`` rounds of alternating blocks."""
    calls: dict[str, Callable[[int], Awaitable[object]]] = {
        name: (lambda i, store=store: store.retrieve(SCOPE, queries[i % len(queries)], limit))
        for name, store in stores.items()}
    calls["gin"] = lambda i: gin(queries[i % len(queries)])
    for call in calls.values():  # warm: SQLite builds its copy, PG prepares
        for i in range(8):
            await call(i)
    figures: dict[tuple[str, float], list[float]] = {}
    for _ in range(rounds):
        samples = await alternate(calls, seconds / rounds)
        for name, taken in samples.items():
            for share in (0.5, 0.99):
                figures.setdefault((name, share), []).append(percentile_ms(taken, share))
    for share, label in ((0.5, "p50"), (0.99, "p99")):
        pg, sqlite, raw = (figures[(name, share)] for name in ("postgres", "sqlite", "gin"))
        print(f"  {f'retrieve {kind} {label} (ms)':<28} {statistics.median(pg):>9.2f}"
              f" {statistics.median(sqlite):>9.2f} {statistics.median(raw):>9.2f}"
              f" {spread([p / q for p, q in zip(pg, sqlite, strict=True)]):>15}"
              f" {spread([p / q for p, q in zip(pg, raw, strict=True)]):>15}")


async def bench_curve(counts: list[int], size: int, limit: int, seconds: float, dsn: str
                      ) -> None:
    """Retrieve p50 on one scope of ``size`` records as the table fills with other scopes
    of the same size: what one table keyed by scope costs a scope as the server fills."""
    corpus = Corpus(seed=size + 1)
    clock = itertools.count(1_790_000_000_000, 1000).__next__
    schema = f"scopemem_bench_{secrets.token_hex(4)}"
    store = PostgresStore(PostgresOptions(dsn=dsn, schema=schema, min_pool=2, max_pool=4),
                          cap=MAX_SCOPE_CAP, clock=clock)
    print(f"\none scope of {size} records among others of the same size (Postgres)")
    print(f"  {'scopes':>7} {'rows':>9} {'brief p50':>10} {'selective p50':>14}  (ms)")
    brief = [corpus.query() for _ in range(40)]
    selective = [corpus.selective_query() for _ in range(40)]
    filled = 0
    try:
        for count in counts:
            while filled < count:
                for _ in range(size // BATCH):
                    await store.write(f"org:tenant{filled}",
                                      [corpus.candidate() for _ in range(BATCH)])
                filled += 1
            await postgres_analyze(store, dsn)
            figures = []
            for queries in (brief, selective):
                samples = await alternate({"q": lambda i, queries=queries: store.retrieve(
                    "org:tenant0", queries[i % len(queries)], limit)}, seconds)
                figures.append(percentile_ms(samples["q"], 0.5))
            print(f"  {count:>7} {count * size:>9} {figures[0]:>10.2f} {figures[1]:>14.2f}")
    finally:
        await store.close()
        await drop(dsn, schema)


async def postgres_analyze(store: PostgresStore, dsn: str) -> None:
    """Fresh planner statistics and visibility map, as autovacuum would have by now."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'VACUUM ANALYZE "{store.schema}".records')
        await conn.execute(f'VACUUM ANALYZE "{store.schema}".postings')


async def drop(dsn: str, schema: str) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,10000")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds the retrieve figures are measured in (--seconds in all)")
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--workers", choices=("on", "off"), default="on",
                        help="also the worker figures: /retrieve req/s with 1 and 2 worker"
                             " processes over Postgres, and over SQLite with 1"
                             " (benchmarks/workers_bench.py)")
    parser.add_argument("--curve", default="",
                        help="also: scope counts (e.g. 1,10,40) of 500-record scopes, retrieve"
                             " p50 on one of them as the table fills")
    args = parser.parse_args()
    print(f"PostgresStore vs SharedSqliteStore, limit {args.limit}, {os.cpu_count()} cores")
    for size in (int(s) for s in args.sizes.split(",") if s):
        await bench_size(size, args.limit, args.seconds, args.dsn, args.rounds)
    if args.curve:
        await bench_curve([int(n) for n in args.curve.split(",")], 500, args.limit,
                          args.seconds, args.dsn)
    if args.workers == "on":
        os.environ.setdefault("SCOPEMEM_TEST_POSTGRES_DSN", args.dsn)
        print()
        await workers_bench.main(workers_bench.parse_args([]))


if __name__ == "__main__":
    asyncio.run(main())
