"""What a request costs SQLite itself in two file layouts, over 10 and over 10,000 scopes.

    python benchmarks/layout_bench.py [--scopes 10,10000] [--rounds 3] [--seconds 2]
                                      [--shards 16] [--max-open N]

This measures raw SQLite through apsw, with no scopemem code: the floor under what any
store built on each layout can serve. It is the evidence behind the SQLite store's shared
layout (``docs/storage.md``; the dated figures are in CHANGELOG.md), and it measures nothing
the store does itself.

Each scope holds 20 records of 8-40 Zipf words (``load_bench.Zipf``). One thread runs the
request mix of ``load_bench.py``'s figure 1: nine requests in ten read a scope chosen at
random (its active rows, at most 128 of the newest, as the store reads a small scope) and
count a use of 8 of them; one in ten inserts a record and its tokens and commits with
``synchronous = FULL``. Use
counts are saved as the store saves them: gathered, then committed every 1,000 requests
(about a second of the worker's load) without waiting for the disk.

- **file per scope**: one database per scope (a records table, its FTS5 index and the
  lookup indexes the store keeps), in WAL mode, at most ``--max-open`` open (the store's
  default, a sixth of the open-file limit), least recently used closed first and its
  pending uses committed as it closes; a use-count save is a transaction per scope.
- **shared files**: ``--shards`` databases, each scope's rows in the one its key hashes to,
  keyed by (scope, seq), with a (scope, token, seq) postings table in place of FTS5; a
  use-count save is a transaction per shard.

It prints requests per second for each layout and scope count, per round min/median/max,
and the ratio of the largest scope count to the first, which is what ``load_bench.py``'s
figure 1 holds the store to (at least 0.5x).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections import OrderedDict
from typing import Any

import apsw

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.load_bench import Zipf  # noqa: E402

RECORDS = 20
SAVE_EVERY = 1000

PER_FILE_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    seq INTEGER PRIMARY KEY, text TEXT NOT NULL, tokens TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active', created_at INTEGER NOT NULL,
    use_count INTEGER NOT NULL DEFAULT 0, last_used_at INTEGER);
CREATE INDEX IF NOT EXISTS records_newest ON records (seq DESC) WHERE status = 'active';
CREATE INDEX IF NOT EXISTS records_lru ON records (last_used_at, seq) WHERE status = 'active';
CREATE VIRTUAL TABLE IF NOT EXISTS records_fts USING fts5(tokens, content='');
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
SHARED_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    scope TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL, tokens TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'active', created_at INTEGER NOT NULL,
    use_count INTEGER NOT NULL DEFAULT 0, last_used_at INTEGER,
    PRIMARY KEY (scope, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS postings (
    scope TEXT NOT NULL, token TEXT NOT NULL, seq INTEGER NOT NULL,
    PRIMARY KEY (scope, token, seq)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# The newest active rows, at most the store's small-scope read (a scope the 10-scope case's
# writes have grown is not read whole: the store's prefilter would pick its rows).
READ_ONE = ("SELECT seq, tokens, use_count FROM records WHERE status = 'active'"
            " ORDER BY seq DESC LIMIT 128")
READ_SHARED = ("SELECT seq, tokens, use_count FROM records WHERE scope = ? AND status = 'active'"
               " ORDER BY seq DESC LIMIT 128")


def connect(path: str, schema: str) -> Any:
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.setbusytimeout(5000)
    conn.execute(schema)
    return conn


def scope_key(n: int) -> str:
    return f"channel:load:C{n:05d}"


class PerFile:
    """One database per scope, a bounded LRU of open connections."""

    def __init__(self, root: str, max_open: int) -> None:
        self.root, self.max_open = root, max_open
        self.open: OrderedDict[str, Any] = OrderedDict()
        self.pending: dict[str, dict[int, int]] = {}

    def path(self, key: str) -> str:
        return os.path.join(self.root, hashlib.sha256(key.encode()).hexdigest()[:32] + ".db")

    def seed(self, keys: list[str], rows: list[tuple[str, str]], now: int) -> None:
        for key in keys:
            conn = connect(self.path(key), PER_FILE_SCHEMA)
            conn.execute("PRAGMA synchronous = OFF")
            with conn:
                for text, tokens in rows:
                    seq = conn.execute("INSERT INTO records (text, tokens, created_at) "
                                       "VALUES (?, ?, ?) RETURNING seq",
                                       (text, tokens, now)).fetchall()[0][0]
                    conn.execute("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)",
                                 (seq, tokens))
            conn.close()

    def conn(self, key: str) -> Any:
        conn = self.open.get(key)
        if conn is not None:
            self.open.move_to_end(key)
            return conn
        conn = self.open[key] = connect(self.path(key), PER_FILE_SCHEMA)
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)  # as the store: keep the WAL
        while len(self.open) > self.max_open:
            old_key, old = self.open.popitem(last=False)
            self.save_one(old_key, old)
            old.close()
        return conn

    def read(self, key: str, now: int) -> None:
        rows = self.conn(key).execute(READ_ONE).fetchall()
        bumps = self.pending.setdefault(key, {})
        for seq, _tokens, _uses in rows[:8]:
            bumps[seq] = now

    def write(self, key: str, text: str, tokens: str, now: int) -> None:
        conn = self.conn(key)
        self.save_one(key, conn, commit=False)
        with conn:
            seq = conn.execute("INSERT INTO records (text, tokens, created_at) VALUES (?, ?, ?)"
                               " RETURNING seq", (text, tokens, now)).fetchall()[0][0]
            conn.execute("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)", (seq, tokens))

    def save_one(self, key: str, conn: Any, commit: bool = True) -> None:
        bumps = self.pending.pop(key, None)
        if not bumps:
            return
        conn.execute("PRAGMA synchronous = NORMAL")
        with conn:
            conn.executemany("UPDATE records SET use_count = use_count + 1, last_used_at = ?"
                             " WHERE seq = ?", [(t, s) for s, t in bumps.items()])
        conn.execute("PRAGMA synchronous = FULL")

    def save(self) -> None:
        for key in list(self.pending):
            self.save_one(key, self.conn(key))

    def close(self) -> None:
        self.save()
        for conn in self.open.values():
            conn.close()
        self.open.clear()


class Shared:
    """``shards`` databases holding every scope, keyed by (scope, seq)."""

    def __init__(self, root: str, shards: int) -> None:
        self.conns = [connect(os.path.join(root, f"shard-{i:03d}.db"), SHARED_SCHEMA)
                      for i in range(shards)]
        self.pending: dict[int, dict[tuple[str, int], int]] = {}
        self.next_seq: dict[str, int] = {}

    def shard(self, key: str) -> int:
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") % len(self.conns)

    def seed(self, keys: list[str], rows: list[tuple[str, str]], now: int) -> None:
        for conn in self.conns:
            conn.execute("PRAGMA synchronous = OFF")
            conn.execute("BEGIN")
        for key in keys:
            conn = self.conns[self.shard(key)]
            for seq, (text, tokens) in enumerate(rows, 1):
                self.insert(conn, key, seq, text, tokens, now)
            self.next_seq[key] = len(rows) + 1
        for conn in self.conns:
            conn.execute("COMMIT")
            conn.execute("PRAGMA synchronous = FULL")

    @staticmethod
    def insert(conn: Any, key: str, seq: int, text: str, tokens: str, now: int) -> None:
        conn.execute("INSERT INTO records (scope, seq, text, tokens, created_at) "
                     "VALUES (?, ?, ?, ?, ?)", (key, seq, text, tokens, now))
        conn.executemany("INSERT OR IGNORE INTO postings (scope, token, seq) VALUES (?, ?, ?)",
                         [(key, token, seq) for token in set(tokens.split())])

    def read(self, key: str, now: int) -> None:
        shard = self.shard(key)
        rows = self.conns[shard].execute(READ_SHARED, (key,)).fetchall()
        bumps = self.pending.setdefault(shard, {})
        for seq, _tokens, _uses in rows[:8]:
            bumps[key, seq] = now

    def write(self, key: str, text: str, tokens: str, now: int) -> None:
        shard = self.shard(key)
        conn = self.conns[shard]
        seq = self.next_seq[key]
        self.next_seq[key] = seq + 1
        with conn:
            self.insert(conn, key, seq, text, tokens, now)

    def save(self) -> None:
        for shard, bumps in self.pending.items():
            conn = self.conns[shard]
            conn.execute("PRAGMA synchronous = NORMAL")
            with conn:
                conn.executemany("UPDATE records SET use_count = use_count + 1, "
                                 "last_used_at = ? WHERE scope = ? AND seq = ?",
                                 [(t, k, s) for (k, s), t in bumps.items()])
            conn.execute("PRAGMA synchronous = FULL")
        self.pending.clear()

    def close(self) -> None:
        self.save()
        for conn in self.conns:
            conn.close()


def run(layout: PerFile | Shared, keys: list[str], texts: list[tuple[str, str]],
        seconds: float, rng: random.Random) -> float:
    """Requests per second of the mix over ``keys`` for ``seconds``."""
    done = 0
    now = int(time.time() * 1000)
    started = time.perf_counter()
    deadline = started + seconds
    while True:
        for _ in range(100):
            key = keys[rng.randrange(len(keys))]
            if rng.random() < 0.1:
                layout.write(key, *texts[rng.randrange(len(texts))], now)
            else:
                layout.read(key, now)
        done += 100
        if done % SAVE_EVERY == 0:
            layout.save()
        if time.perf_counter() >= deadline:
            break
    return done / (time.perf_counter() - started)


def main() -> None:
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scopes", default="10,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--shards", type=int, default=16)
    parser.add_argument("--max-open", type=int, default=max(16, min(8192, soft // 6)))
    args = parser.parse_args()
    counts = [int(n) for n in args.scopes.split(",")]
    if args.rounds < 1 or args.seconds <= 0 or args.shards < 1 or args.max_open < 1 or \
            not counts or min(counts) < 1:
        parser.error("rounds, seconds, shards, --max-open and scope counts must be positive")
    zipf = Zipf()
    def row() -> tuple[str, str]:
        text = zipf.record()
        return text, " ".join(sorted(set(text.split())))
    rows = [row() for _ in range(RECORDS)]
    texts = [row() for _ in range(2000)]
    now = int(time.time() * 1000)
    print(f"layout bench: raw SQLite {apsw.sqlite_lib_version()}, {RECORDS} records a scope, "
          f"{args.rounds} rounds of {args.seconds:g} s, one thread; file per scope keeps "
          f"{args.max_open:,} open; shared files: {args.shards}")
    with tempfile.TemporaryDirectory(prefix="scopemem-layout-") as tmp:
        layouts: dict[tuple[str, int], PerFile | Shared] = {}
        for n in counts:
            keys = [scope_key(i) for i in range(n)]
            for name in ("file per scope", "shared files"):
                root = os.path.join(tmp, f"{name.split()[0]}-{n}")
                os.makedirs(root)
                started = time.perf_counter()
                layout: PerFile | Shared = (PerFile(root, args.max_open) if name[0] == "f"
                                            else Shared(root, args.shards))
                layout.seed(keys, rows, now)
                layouts[name, n] = layout
                print(f"   seeded {name}, {n:,} scopes: {time.perf_counter() - started:.1f} s")
        rates: dict[tuple[str, int], list[float]] = {key: [] for key in layouts}
        rng = random.Random(15)
        for _ in range(args.rounds):
            for (name, n), layout in layouts.items():
                keys = [scope_key(i) for i in range(n)]
                run(layout, keys, texts, min(1.0, args.seconds / 2), rng)  # warm
                rates[name, n].append(run(layout, keys, texts, args.seconds, rng))
        for layout in layouts.values():
            layout.close()
        shutil.rmtree(tmp, ignore_errors=True)
    base = counts[0]
    for name in ("file per scope", "shared files"):
        for n in counts:
            print(f"{name:>15}, {n:>6,} scopes: {statistics.median(rates[name, n]):8,.0f} req/s")
        for n in counts[1:]:
            ratios = sorted(m / b for m, b in zip(rates[name, n], rates[name, base], strict=True))
            print(f"{name:>15}: {n:,} scopes against {base:,}: ratio min {ratios[0]:.2f}x "
                  f"median {statistics.median(ratios):.2f}x max {ratios[-1]:.2f}x")


if __name__ == "__main__":
    main()
