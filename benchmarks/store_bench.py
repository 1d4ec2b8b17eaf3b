"""How fast is the SQLite store, next to the database work it issues and the in-process store?

    python benchmarks/store_bench.py [--sizes 500,10000] [--limit 8] [--seconds 1.5]

For each scope size it fills one SharedSqliteStore scope, its raw FTS5 baseline
(``raw_fts.py``) and one InMemoryStore scope with the same
generated records, then prints medians (milliseconds) of:

* retrieve: ``SharedSqliteStore.retrieve`` (copies or SQL, engine ranking, use counts),
  the raw FTS5 candidate query run directly with apsw on the baseline's file (same
  records), and ``InMemoryStore.retrieve`` (target: at most twice the SQLite store's, i.e.
  ``store / in-memory`` at least 0.5);
* write: a batch of 50 new candidates through ``SharedSqliteStore.write`` (with the scope
  under its cap, so no eviction), as many rows inserted raw (records + token index, one
  ``BEGIN IMMEDIATE`` transaction, same ``synchronous``) in the baseline, the same batch
  through ``InMemoryStore.write``, and, separately, a batch into a scope at its cap (each
  batch evicts 50).

Texts come from a seeded Zipf-like vocabulary so common words match many records, as in
real briefs. Every case runs for a bounded time (``--seconds``), so a full run takes well
under a minute. Nothing here asserts: it prints figures.

Path measured: one scope, in process (``SharedSqliteStore`` called directly, no HTTP, no
``Memory``). It does not measure many scopes, concurrent clients, the worker, or the per-turn
read over several scopes; ``load_bench.py`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.raw_fts import (  # noqa: E402
    ANALYZER,
    RAW_FTS_SQL,
    match_expression,
    raw_connection,
    raw_insert,
)
from scopemem.core import engine  # noqa: E402
from scopemem.core.records import MAX_SCOPE_CAP, Candidate, Kind  # noqa: E402
from scopemem.stores.memory import InMemoryStore  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore  # noqa: E402

SCOPE = "repo:acme/widgets"
BATCH = 50


class Corpus:
    def __init__(self, seed: int = 7, words: int = 4000) -> None:
        self.rng = random.Random(seed)
        letters = "abcdefghijklmnopqrstuvwxyz"
        vocab: list[str] = []
        seen: set[str] = set()
        while len(vocab) < words:
            word = "".join(self.rng.choice(letters) for _ in range(self.rng.randint(2, 10)))
            if word not in seen:
                seen.add(word)
                vocab.append(word)
        self.vocab = vocab
        self.weights = list(itertools.accumulate(1 / (rank + 1) for rank in range(words)))
        self.serial = itertools.count()

    def words(self, n: int) -> list[str]:
        return self.rng.choices(self.vocab, cum_weights=self.weights, k=n)

    def candidate(self) -> Candidate:
        text = " ".join(self.words(self.rng.randint(8, 28))) + f" n{next(self.serial)}"
        keywords = tuple(self.words(self.rng.randint(0, 3))) or None
        return Candidate(kind=Kind.FACT, text=text, source_thread_key="slack:C1/1",
                         keywords=keywords, confidence=0.8)

    def query(self) -> str:
        """A brief-like query: common words included, so it matches most of the scope."""
        return " ".join(self.words(self.rng.randint(6, 16)))

    def selective_query(self) -> str:
        """A few words from the vocabulary's long tail, so it matches a few dozen records."""
        return " ".join(self.rng.choices(self.vocab[300:], k=self.rng.randint(2, 4)))


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def timed(fn: Callable[[], Awaitable[object]], seconds: float, max_runs: int = 2000
                ) -> list[float]:
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline and len(samples) < max_runs:
        start = time.perf_counter()
        await fn()
        samples.append(time.perf_counter() - start)
    return samples


def prefilter(query: str) -> list[str]:
    return list(engine.query_terms(query, ANALYZER).prefilter_stems)


async def bench_size(size: int, limit: int, seconds: float, synchronous: str) -> None:
    corpus = Corpus(seed=size)
    now = 1_790_000_000_000
    clock = itertools.count(now, 1000).__next__  # a second passes at every call
    cap = engine.candidate_cap(limit)
    queries = [corpus.query() for _ in range(40)]
    with tempfile.TemporaryDirectory(prefix="scopemem-bench-") as tmp:
        sqlite = SharedSqliteStore(os.path.join(tmp, "data"), cap=MAX_SCOPE_CAP, clock=clock,
                                   synchronous=synchronous)
        raw = raw_connection(os.path.join(tmp, "raw.db"), synchronous)
        fill = time.perf_counter()
        written: list[Candidate] = []
        for _ in range(size // BATCH):
            batch = [corpus.candidate() for _ in range(BATCH)]
            await sqlite.write(SCOPE, batch)
            written.extend(batch)
        fill = time.perf_counter() - fill
        for start in range(0, len(written), BATCH):
            raw_insert(raw, written[start:start + BATCH], clock(), SCOPE)
        matched = [raw.execute("SELECT count(*) FROM records_fts WHERE records_fts MATCH ?",
                               (match_expression(prefilter(q)),)
                               ).fetchall()[0][0] for q in queries]
        cycle = itertools.cycle(queries)

        async def measure(batch: list[str]) -> tuple[list[float], list[float]]:
            """SharedSqliteStore.retrieve and the raw candidate query on the same queries, in
            alternating blocks of ten so drift and neighbours on a shared machine hit both
            alike. (Each retrieve commits a usage bump, which empties the raw connection's
            page cache; only the first raw query of a block pays for that, and the median
            does not see it.)"""
            store_times: list[float] = []
            raw_times: list[float] = []
            for query in batch[:2]:
                await sqlite.retrieve(SCOPE, query, limit)
            deadline = time.perf_counter() + seconds
            block = 0
            while time.perf_counter() < deadline and len(store_times) < 2000:
                queries_now = [batch[(block * 10 + i) % len(batch)] for i in range(10)]
                block += 1
                for query in queries_now:
                    start = time.perf_counter()
                    expression = match_expression(prefilter(query))
                    raw.execute(RAW_FTS_SQL, (expression, cap)).fetchall()
                    raw_times.append(time.perf_counter() - start)
                for query in queries_now:
                    start = time.perf_counter()
                    await sqlite.retrieve(SCOPE, query, limit)
                    store_times.append(time.perf_counter() - start)
            return store_times, raw_times

        retrieve: dict[str, list[float]] = {"memory": []}
        retrieve["store"], retrieve["raw"] = await measure(queries)
        selective_queries = [corpus.selective_query() for _ in range(40)]
        selective_matched = [raw.execute(
            "SELECT count(*) FROM records_fts WHERE records_fts MATCH ?",
            (match_expression(prefilter(q)),)).fetchall()[0][0]
            for q in selective_queries]
        selective_store, selective_raw = await measure(selective_queries)

        # Writes, with the scope under its cap (the cap is lifted past the configurable
        # maximum for this measurement only), so the figure is the write itself.
        sqlite.cap = 10 * MAX_SCOPE_CAP
        writes: dict[str, list[float]] = {"store": [], "raw": [], "memory": []}
        deadline = time.perf_counter() + seconds * 2
        while time.perf_counter() < deadline and len(writes["store"]) < 40:
            batch = [corpus.candidate() for _ in range(BATCH)]
            start = time.perf_counter()
            await sqlite.write(SCOPE, batch)
            writes["store"].append(time.perf_counter() - start)
            batch = [corpus.candidate() for _ in range(BATCH)]
            start = time.perf_counter()
            raw_insert(raw, batch, clock(), SCOPE)
            writes["raw"].append(time.perf_counter() - start)

        # At the cap: every batch evicts as many records as it inserts.
        active = len(written) + BATCH * len(writes["store"])
        sqlite.cap = active
        at_cap: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline and len(at_cap) < 20:
            batch = [corpus.candidate() for _ in range(BATCH)]
            start = time.perf_counter()
            counts = await sqlite.write(SCOPE, batch)
            at_cap.append(time.perf_counter() - start)
            assert counts.evicted == BATCH, counts
        raw.close()
        await sqlite.close()

    # The in-process store holds the same records, written through the same batches (its
    # index is kept by its writes).
    memory = InMemoryStore(cap=MAX_SCOPE_CAP, clock=clock)
    for start in range(0, len(written), BATCH):
        await memory.write(SCOPE, written[start:start + BATCH])
    await memory.retrieve(SCOPE, queries[0], limit)
    retrieve["memory"] = await timed(lambda: memory.retrieve(SCOPE, next(cycle), limit),
                                     seconds, max_runs=100)
    memory.cap = 10 * MAX_SCOPE_CAP
    writes["memory"] = await timed(
        lambda: memory.write(SCOPE, [corpus.candidate() for _ in range(BATCH)]),
        seconds, max_runs=40)

    r_store, r_raw, r_mem = (median_ms(retrieve[k]) for k in ("store", "raw", "memory"))
    w_store, w_raw, w_mem = (median_ms(writes[k]) for k in ("store", "raw", "memory"))
    print(f"\n== scope of {size:,} records (limit {limit}, candidate cap {cap},"
          f" synchronous={synchronous}; filled in {fill:.1f} s;"
          f" a query matches {int(statistics.median(matched))} records (median))")
    print(f"retrieve  SQLite store {r_store:8.3f} ms   raw FTS5 query {r_raw:8.3f} ms"
          f"   InMemoryStore {r_mem:9.3f} ms")
    print(f"          store / raw = {r_store / r_raw:5.2f}x (target <= 1.5x)"
          f"   store / in-memory = {r_store / r_mem:5.2f}x (target >= 0.5x)"
          f"   n = {len(retrieve['store'])} / {len(retrieve['raw'])} / {len(retrieve['memory'])}")
    s_store, s_raw = median_ms(selective_store), median_ms(selective_raw)
    print(f"selective query (matches {int(statistics.median(selective_matched))} records,"
          f" median): SQLite store {s_store:.3f} ms, raw FTS5 query {s_raw:.3f} ms,"
          f" store / raw = {s_store / s_raw:.2f}x")
    print(f"write 50  SQLite store {w_store:8.3f} ms   raw insert     {w_raw:8.3f} ms"
          f"   InMemoryStore {w_mem:9.3f} ms")
    print(f"          store / raw = {w_store / w_raw:5.2f}x (target <= 3x)"
          f"   n = {len(writes['store'])} / {len(writes['raw'])} / {len(writes['memory'])}")
    print(f"write 50 at the cap (evicts 50 of {active:,} active): {median_ms(at_cap):8.3f} ms"
          f" = {median_ms(at_cap) / w_raw:5.2f}x raw insert   n = {len(at_cap)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,10000")
    parser.add_argument("--limit", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=1.5,
                        help="time budget per measured case")
    parser.add_argument("--synchronous", default="full", choices=("off", "normal", "full",
                                                                 "extra"))
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        asyncio.run(bench_size(size, args.limit, args.seconds, args.synchronous))


if __name__ == "__main__":
    main()
