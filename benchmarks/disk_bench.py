"""How much disk does the SQLite store use, with and without purging dead rows?

    python benchmarks/disk_bench.py [--writes 100000] [--cap 10000] [--seconds 300]
                                    [--scopes 200] [--synchronous normal]

Writes ``--writes`` new facts in batches of 50 to one scope under ``--cap`` (each batch past
the cap evicts 50), on a clock that moves one second per batch, three times over:

* kept: ``retention_days = 30``, which the run never reaches, so every dead row keeps its
  text, as the store did for every dead row before the retention existed;
* purged at once: ``retention_days = 0``, each write purges what it retires;
* one day: ``retention_days = 1`` with the clock moving a minute per batch, so the rows of
  the last day (1,440 batches) are kept and older ones purged.

For each it prints the rows in the file, the file sizes while the store is open (database
plus WAL) and after it closes (the database alone), and the time taken. Then it writes one
record to each of ``--scopes`` scopes and prints the size per scope. Every case is bounded
by ``--seconds`` (a case cut short says how many writes it made). Nothing here asserts: it
prints figures.

Path measured: the SQLite store's write path and files, in process (one scope under its
cap, then one-record scopes). It does not measure reads, read latency, or the worker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import apsw  # noqa: E402

from scopemem.core.records import Candidate, Kind  # noqa: E402
from scopemem.stores.sqlite_shared import SharedSqliteStore  # noqa: E402

SCOPE = "repo:acme/widgets"
BATCH = 50
START_MS = 1_790_000_000_000
WORDS = [f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "po", "ra", "si", "tu", "ve", "zo")
         for b in ("bel", "cor", "dan", "fin", "gar", "hol", "jum", "kip", "lor", "mun",
                   "nep", "pax", "quo", "rin", "sol", "tav", "ulm", "vex", "wyn", "yar")]


class Clock:
    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


def texts(rng: random.Random, count: int, start: int) -> list[Candidate]:
    return [Candidate(kind=Kind.FACT, source_thread_key="slack:C1/100",
                      text=f"note {start + n}: " + " ".join(rng.choices(WORDS, k=12)))
            for n in range(count)]


def sizes(directory: str) -> dict[str, int]:
    out = {"db": 0, "wal": 0, "shm": 0}
    for name in os.listdir(directory):
        size = os.path.getsize(os.path.join(directory, name))
        if name.endswith(".db"):
            out["db"] += size
        elif name.endswith("-wal"):
            out["wal"] += size
        elif name.endswith("-shm"):
            out["shm"] += size
    return out


def mb(size: int) -> str:
    return f"{size / 1e6:7.2f} MB"


async def one_scope(label: str, retention_days: int, step_ms: int, args: argparse.Namespace
                    ) -> None:
    rng = random.Random(7)
    clock = Clock()
    with tempfile.TemporaryDirectory(prefix="scopemem-disk-") as directory:
        store = SharedSqliteStore(directory, cap=args.cap, clock=clock,
                                  retention_days=retention_days, synchronous=args.synchronous)
        started = time.perf_counter()
        written = 0
        while written < args.writes and time.perf_counter() - started < args.seconds:
            count = min(BATCH, args.writes - written)
            await store.write(SCOPE, texts(rng, count, written))
            written += count
            clock.now += step_ms
        elapsed = time.perf_counter() - started
        await store.flush()
        path = store._shards.path(store._shards.of(SCOPE))
        conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
        try:
            counted = dict(conn.execute("SELECT status, count(*) FROM records"
                                        " WHERE scope_key = ? GROUP BY status", (SCOPE,)))
        finally:
            conn.close()
        live = sizes(directory)
        await store.close()
        closed = sizes(directory)
        cut = "" if written == args.writes else f" (cut short at {written} writes)"
        rows = ", ".join(f"{status} {n}" for status, n in sorted(counted.items()))
        print(f"{label:<16} {written} writes in {elapsed:6.1f} s{cut}")
        print(f"{'':<16} rows: {rows}")
        print(f"{'':<16} open: db {mb(live['db'])} + wal {mb(live['wal'])}"
              f" = {mb(live['db'] + live['wal'])};  closed: db {mb(closed['db'])}")


async def many_scopes(args: argparse.Namespace) -> None:
    clock = Clock()
    rng = random.Random(11)
    with tempfile.TemporaryDirectory(prefix="scopemem-scopes-") as directory:
        store = SharedSqliteStore(directory, clock=clock, synchronous=args.synchronous)
        for n in range(args.scopes):
            await store.write(f"org:scope{n}", texts(rng, 1, n))
        await store.flush()
        live = sizes(directory)
        await store.close()
        closed = sizes(directory)
        per = args.scopes or 1
        print(f"{args.scopes} one-record scopes: open db+wal+shm"
              f" {(live['db'] + live['wal'] + live['shm']) / per / 1e3:6.1f} KB per scope"
              f" (db {live['db'] / per / 1e3:.1f}, wal {live['wal'] / per / 1e3:.1f},"
              f" shm {live['shm'] / per / 1e3:.1f});"
              f" closed {closed['db'] / per / 1e3:6.1f} KB per scope")


async def run(args: argparse.Namespace) -> None:
    print(f"{args.writes} writes in batches of {BATCH} to one scope under cap {args.cap},"
          f" synchronous={args.synchronous}")
    await one_scope("kept (30 days)", 30, 1000, args)
    await one_scope("purged at once", 0, 1000, args)
    await one_scope("one day", 1, 60_000, args)
    await many_scopes(args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=100_000)
    parser.add_argument("--cap", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=300.0,
                        help="the longest one case may run")
    parser.add_argument("--scopes", type=int, default=200)
    parser.add_argument("--synchronous", default="normal",
                        choices=("off", "normal", "full", "extra"))
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
