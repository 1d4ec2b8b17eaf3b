"""What does the semantic lane's vector search cost on each store, next to its keyword search?

    python benchmarks/vectors_bench.py [--sizes 500,10000] [--dimensions 384] [--seconds 2]
                                       [--dsn postgresql://127.0.0.1:5432/test]

For each scope size it fills one scope of the in-process store, the SQLite store and (when
the server answers) the PostgreSQL store with the same generated records, puts a seeded
random unit vector of ``--dimensions`` floats on each, and prints medians (milliseconds)
over the same queries of:

* keyword: ``store.search(scope, brief, limit, bump=False)``, what a retrieval costs today;
* vector: ``store.nearest(scope, model, query vector, candidates, floor)``, what the lane adds
  for that scope per ``context_block`` (the embedder's own time not included: it is the
  model's, the same on every store);

and their ratio from the same run. A SQL store keeps a copy of the scope's matrix, read
again after any change to the scope (``stores/shared/nearest.py``): these are the searches
between two changes. The PostgreSQL tables are analyzed once filled, as autovacuum leaves
a database that has been in use (fresh ones, without statistics, get plans that scan the
scope). Nothing here asserts.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

from benchmarks.store_bench import Corpus  # noqa: E402
from scopemem.core import engine  # noqa: E402
from scopemem.core.records import MAX_SCOPE_CAP  # noqa: E402
from scopemem.stores.memory import InMemoryStore  # noqa: E402
from scopemem.stores.shared.vectors import pack  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore  # noqa: E402

SCOPE = "repo:acme/widgets"
MODEL = "bench/random"
DEFAULT_DSN = os.environ.get("SCOPEMEM_TEST_POSTGRES_DSN", "postgresql://127.0.0.1:5432/test")


def unit_vectors(rng: np.random.Generator, n: int, dimensions: int) -> np.ndarray:
    matrix = rng.standard_normal((n, dimensions)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


async def median_ms(fn: Callable[[int], Awaitable[object]], seconds: float) -> float:
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    for i in itertools.count():
        if time.perf_counter() >= deadline or len(samples) >= 2000:
            break
        start = time.perf_counter()
        await fn(i)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000


async def fill(store: Any, corpus: Corpus, size: int, vectors: np.ndarray) -> None:
    for start in range(0, size, 50):
        await store.write(SCOPE, [corpus.candidate() for _ in range(min(50, size - start))])
    ids = [r.id for r in await store.list(SCOPE, limit=MAX_SCOPE_CAP)]
    for start in range(0, len(ids), 500):
        chunk = ids[start:start + 500]
        await store.put_vectors(SCOPE, MODEL, [(record_id, pack(vectors[start + k]))
                                               for k, record_id in enumerate(chunk)])


async def postgres_store(dsn: str) -> Any | None:
    try:
        import psycopg

        from scopemem.stores.postgres import PostgresStore
        from scopemem.stores.postgres.options import PostgresOptions

        await (await psycopg.AsyncConnection.connect(dsn, connect_timeout=3)).close()
    except Exception as error:  # no server, no driver: the other stores are still measured
        print(f"  (PostgreSQL not measured: {error})")
        return None
    schema = f"vectors_bench_{uuid.uuid4().hex[:8]}"
    return PostgresStore(PostgresOptions(dsn=dsn, schema=schema), cap=MAX_SCOPE_CAP)


async def analyze(dsn: str, store: Any) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cursor = await conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s",
                                    (store.schema,))
        for (table,) in await cursor.fetchall():
            await conn.execute(f'ANALYZE "{store.schema}"."{table}"')


async def drop_schema(dsn: str, store: Any) -> None:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{store.schema}" CASCADE')


async def bench_size(size: int, dimensions: int, seconds: float, dsn: str, limit: int) -> None:
    rng = np.random.default_rng(size)
    vectors = unit_vectors(rng, size, dimensions)
    queries = [pack(v) for v in unit_vectors(rng, 50, dimensions)]
    cap = engine.candidate_cap(limit)
    print(f"\n{size:,} records of {dimensions} dimensions ({dimensions * 4:,} bytes a vector),"
          f" nearest {cap} at floor 0.0, keyword limit {limit}")
    print(f"  {'store':<10} {'keyword ms':>11} {'vector ms':>10} {'vector/keyword':>15}")
    with tempfile.TemporaryDirectory(prefix="scopemem-vectors-") as tmp:
        stores: dict[str, Any] = {
            "memory": InMemoryStore(cap=MAX_SCOPE_CAP),
            "sqlite": SharedSqliteStore(os.path.join(tmp, "data"), cap=MAX_SCOPE_CAP),
        }
        postgres = await postgres_store(dsn)
        if postgres is not None:
            stores["postgres"] = postgres
        try:
            for name, store in stores.items():
                corpus = Corpus(seed=size)
                briefs = [corpus.query() for _ in range(50)]
                await fill(store, corpus, size, vectors)
                if store is postgres:
                    await analyze(dsn, store)

                async def keyword(i: int, store: Any = store, briefs: list[str] = briefs
                                  ) -> None:
                    await store.search(SCOPE, briefs[i % len(briefs)], limit, bump=False)

                async def vector(i: int, store: Any = store) -> None:
                    await store.nearest(SCOPE, MODEL, queries[i % len(queries)], cap, 0.0)

                k, v = await median_ms(keyword, seconds), await median_ms(vector, seconds)
                print(f"  {name:<10} {k:11.2f} {v:10.2f} {v / k:14.2f}x")
        finally:
            for store in stores.values():
                await store.close()
            if postgres is not None:
                await drop_schema(dsn, postgres)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,10000")
    parser.add_argument("--dimensions", type=int, default=384)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        parser.error("--sizes takes comma-separated whole numbers")
    if any(s < 1 or s > MAX_SCOPE_CAP for s in sizes) or args.dimensions < 1 \
            or args.seconds <= 0 or args.limit < 1:
        parser.error(f"sizes 1-{MAX_SCOPE_CAP:,}, dimensions, seconds and limit above 0")
    for size in sizes:
        asyncio.run(bench_size(size, args.dimensions, args.seconds, args.dsn, args.limit))


if __name__ == "__main__":
    main()
