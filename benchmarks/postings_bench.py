"""A large scope's postings in a shard: the rows the shared-file layout keeps, against one
contentless FTS5 table per shard with each term prefixed by its scope's id. Prints figures;
asserts nothing.

    python benchmarks/postings_bench.py [--records 10000] [--batches 100] [--rounds 3]

This measures a design, not the store: it is the evidence for moving a large scope's
postings out of rows of ``postings`` / ``fresh_postings`` / ``stale_postings`` and their
merges (the shared layout's schema version 3, until December 4, 2026) into FTS5, whose
doclists are appended and merged in C (``stores/sqlite_shared/index.py``, schema version 4).
Both sides index the same records, ``--records`` of Zipf text in one scope written by
``SharedSqliteStore`` (``load_bench.Zipf``), each in a database of its own, and apply the
same batches: each one posts 50 new records and takes 50 old ones out, as a write of 50 at
the cap does, in one ``BEGIN IMMEDIATE`` transaction committed with ``synchronous = full``.

* **rows**: version 3's tables and rules, reproduced here (``Rows``): a new row's postings
  appended to ``fresh_postings``, a retired old row marked in ``stale_postings``, and both
  merged into ``postings`` once they pass an eighth of the active rows, so the merges are
  in the figures, amortized over the batches;
* **fts5**: ``CREATE VIRTUAL TABLE ... USING fts5(tokens, tokenize = 'ascii', content = '',
  contentless_delete = 1, detail = none)``, a document per record with rowid
  ``scope id << 32 | seq`` and each term prefixed by the scope's id in eight hex digits (a
  scope's terms are then a range of the vocabulary and no other scope's), loaded with the
  same active records; a batch inserts 50 documents and deletes 50 by rowid.

Then the read side, on the state both reach: a 5-40-word brief's postings (rows: the
store's ``STATE_POSTINGS`` statement; fts5: a ``MATCH`` per term in one join), and a scope's
whole index, as a copy in memory is built from it (rows: ``SCOPE_POSTINGS``; fts5: the
``fts5vocab`` instance table over the scope's range of terms). Each figure is the median over
rounds of the fts5 time and of the rows time, with the per-round ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import apsw  # noqa: E402
from load_bench import SCOPE, Zipf, candidates, p50, p99, ratio_line  # noqa: E402

from scopemem.stores.base import DEFAULT_RANKING  # noqa: E402
from scopemem.stores.shared.tokens import index_tokens  # noqa: E402
from scopemem.stores.sqlite_shared import schema  # noqa: E402
from scopemem.stores.sqlite_shared.store import SharedSqliteStore  # noqa: E402

ANALYZER = DEFAULT_RANKING.analyzer
SID = 7  # the scope's id in the fts5 table
PREFIX = f"{SID:08x}"
FTS_TABLE = ("CREATE VIRTUAL TABLE terms_fts USING fts5(tokens, tokenize = 'ascii',"
             " content = '', contentless_delete = 1, detail = none)")
FTS_POST = ("INSERT INTO terms_fts (rowid, tokens)"
            " SELECT value ->> 0, value ->> 1 FROM json_each(:rows)")
FTS_UNPOST = "DELETE FROM terms_fts WHERE rowid IN (SELECT value FROM json_each(:rowids))"
FTS_TERMS = ("SELECT q.value ->> 0, t.rowid & 4294967295 FROM json_each(:terms) AS q"
             " CROSS JOIN terms_fts AS t WHERE t.terms_fts MATCH q.value ->> 1")
FTS_SCOPE = ("SELECT term, doc & 4294967295 FROM temp.terms_vocab"
             " WHERE term >= :low AND term < :high")


def document(seq: int, terms: list[str]) -> list[Any]:
    return [SID << 32 | seq, " ".join(PREFIX + term for term in terms)]


def connect(path: str) -> Any:
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    return conn


def seed(directory: str, zipf: Zipf, records: int) -> str:
    async def write() -> None:
        store = SharedSqliteStore(directory, cap=records, synchronous="off")
        for _ in range(records // 50):
            await store.write(SCOPE, candidates(zipf, 50))
        await store.close()
    asyncio.run(write())
    return os.path.join(directory, schema.shard_file_name(schema.shard_of(SCOPE)))


def batches(zipf: Zipf, active: dict[int, list[str]], last_seq: int, count: int
            ) -> list[tuple[list[tuple[int, list[str]]], list[tuple[int, list[str]]]]]:
    """``count`` batches of (50 new rows, 50 retired rows), each row ``(seq, terms)``."""
    rng = random.Random(3)
    live = dict(active)
    out = []
    for _ in range(count):
        new = []
        for candidate in candidates(zipf, 50):
            last_seq += 1
            new.append((last_seq, list(dict.fromkeys(index_tokens(candidate.text, (),
                                                                   ANALYZER)))))
        gone = [(seq, live.pop(seq)) for seq in rng.sample(sorted(live), 50)]
        live.update(new)
        out.append((new, gone))
    return out


class Rows:
    """Schema version 3's postings as rows, with a large scope's recent changes apart."""

    TABLES = (
        "CREATE TABLE postings (scope_key TEXT NOT NULL, term TEXT NOT NULL,"
        " seq INTEGER NOT NULL, continues INTEGER NOT NULL,"
        " PRIMARY KEY (scope_key, term, seq)) WITHOUT ROWID",
        "CREATE TABLE fresh_postings (scope_key TEXT NOT NULL, seq INTEGER NOT NULL,"
        " term TEXT NOT NULL, continues INTEGER NOT NULL,"
        " PRIMARY KEY (scope_key, seq, term)) WITHOUT ROWID",
        "CREATE TABLE stale_postings (scope_key TEXT NOT NULL, seq INTEGER NOT NULL,"
        " tokens TEXT NOT NULL, PRIMARY KEY (scope_key, seq)) WITHOUT ROWID")
    POST = ("INSERT OR IGNORE INTO {table} (scope_key, term, seq, continues)"
            " SELECT :scope, value ->> 0, value ->> 1, 1 FROM json_each(:rows)")
    UNPOST_FRESH = ("DELETE FROM fresh_postings WHERE scope_key = :scope"
                    " AND seq IN (SELECT value FROM json_each(:seqs))")
    MARK_STALE = ("INSERT OR IGNORE INTO stale_postings (scope_key, seq, tokens)"
                  " SELECT :scope, value ->> 0, value ->> 1 FROM json_each(:rows)")
    MERGE_FRESH = ("INSERT OR IGNORE INTO postings (scope_key, term, seq, continues)"
                   " SELECT scope_key, term, seq, continues FROM fresh_postings"
                   " WHERE scope_key = :scope ORDER BY term, seq")
    UNPOST = ("DELETE FROM postings WHERE scope_key = :scope AND (term, seq) IN"
              " (SELECT value ->> 0, value ->> 1 FROM json_each(:rows))")
    NOT_STALE = "seq NOT IN (SELECT seq FROM stale_postings WHERE scope_key = :scope)"
    TERMS = ("SELECT p.term, p.seq FROM json_each(:terms) AS q CROSS JOIN postings AS p"
             f" ON p.scope_key = :scope AND p.term = q.value WHERE p.{NOT_STALE}"
             " UNION ALL SELECT term, seq FROM fresh_postings WHERE scope_key = :scope"
             " AND term IN (SELECT value FROM json_each(:terms))")
    SCOPE = (f"SELECT term, seq FROM postings WHERE scope_key = :scope AND {NOT_STALE}"
             " UNION ALL SELECT term, seq FROM fresh_postings WHERE scope_key = :scope")

    @classmethod
    def load(cls, conn: Any, active: dict[int, list[str]]) -> None:
        for statement in cls.TABLES:
            conn.execute(statement)
        conn.execute(cls.POST.format(table="postings"), {"scope": SCOPE, "rows": json.dumps(
            [[term, seq] for seq, terms in active.items() for term in terms])})

    @classmethod
    def run(cls, path: str, work: list[Any], active: int) -> list[float]:
        conn = connect(path)
        scope = {"scope": SCOPE}
        fresh: set[int] = set()  # seqs whose postings are in fresh_postings
        stale = 0
        times = []
        for new, gone in work:
            started = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(cls.POST.format(table="fresh_postings"), {**scope, "rows": json.dumps(
                [[term, seq] for seq, terms in new for term in terms])})
            fresh.update(seq for seq, _terms in new)
            young = [seq for seq, _terms in gone if seq in fresh]
            old = [[seq, " ".join(terms)] for seq, terms in gone if seq not in fresh]
            conn.execute(cls.UNPOST_FRESH, {**scope, "seqs": json.dumps(young)})
            conn.execute(cls.MARK_STALE, {**scope, "rows": json.dumps(old)})
            fresh.difference_update(young)
            stale += len(old)
            if len(fresh) + stale > max(256, active // 8):  # merged
                conn.execute(cls.MERGE_FRESH, scope)
                conn.execute("DELETE FROM fresh_postings WHERE scope_key = :scope", scope)
                marked = conn.execute("SELECT seq, tokens FROM stale_postings"
                                      " WHERE scope_key = :scope", scope).fetchall()
                conn.execute(cls.UNPOST, {**scope, "rows": json.dumps(
                    [[term, seq] for seq, tokens in marked for term in tokens.split()])})
                conn.execute("DELETE FROM stale_postings WHERE scope_key = :scope", scope)
                fresh.clear()
                stale = 0
            conn.execute("COMMIT")
            times.append(time.perf_counter() - started)
        conn.close()
        return times


def run_fts(path: str, work: list[Any]) -> list[float]:
    conn = connect(path)
    times = []
    for new, gone in work:
        started = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(FTS_POST, {"rows": json.dumps([document(seq, terms)
                                                    for seq, terms in new])})
        conn.execute(FTS_UNPOST, {"rowids": json.dumps([SID << 32 | seq for seq, _ in gone])})
        conn.execute("COMMIT")
        times.append(time.perf_counter() - started)
    conn.close()
    return times


def reads(rows_path: str, fts_path: str, briefs: list[list[str]]) -> dict[str, list[float]]:
    rows, fts = connect(rows_path), connect(fts_path)
    fts.execute("CREATE VIRTUAL TABLE temp.terms_vocab USING fts5vocab(main, terms_fts,"
                " 'instance')")
    out: dict[str, list[float]] = {"rows brief": [], "fts brief": [], "rows scope": [],
                                   "fts scope": []}
    found: dict[str, int] = {}
    for terms in briefs:
        started = time.perf_counter()
        found["rows"] = len(rows.execute(Rows.TERMS, {
            "scope": SCOPE, "terms": json.dumps(terms)}).fetchall())
        out["rows brief"].append(time.perf_counter() - started)
        started = time.perf_counter()
        found["fts"] = len(fts.execute(FTS_TERMS, {"terms": json.dumps(
            [[term, f'"{PREFIX}{term}"'] for term in terms])}).fetchall())
        out["fts brief"].append(time.perf_counter() - started)
        if found["rows"] != found["fts"]:
            raise SystemExit(f"the two indexes disagree: {found}")
    for _ in range(3):
        started = time.perf_counter()
        whole = len(rows.execute(Rows.SCOPE, {"scope": SCOPE}).fetchall())
        out["rows scope"].append(time.perf_counter() - started)
        started = time.perf_counter()
        also = len(fts.execute(FTS_SCOPE, {"low": PREFIX, "high": f"{SID + 1:08x}"}
                               ).fetchall())
        out["fts scope"].append(time.perf_counter() - started)
        if whole != also:
            raise SystemExit(f"the two indexes disagree: {whole} against {also} postings")
    rows.close()
    fts.close()
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--batches", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    zipf = Zipf()
    with tempfile.TemporaryDirectory(prefix="scopemem-postings-") as directory:
        started = time.perf_counter()
        shard = seed(os.path.join(directory, "data"), zipf, args.records)
        conn = apsw.Connection(shard)
        active = {seq: tokens.split() for seq, tokens in conn.execute(
            "SELECT seq, tokens FROM records WHERE scope_key = ? AND status = 'active'",
            (SCOPE,))}
        last_seq = int(conn.execute("SELECT last_seq FROM scopes WHERE scope_key = ?",
                                    (SCOPE,)).fetchall()[0][0])
        conn.close()
        rows_path, fts_path = (os.path.join(directory, name) for name in ("rows.db", "fts.db"))
        print(f"postings bench: {len(active):,} active records in one scope, seeded in "
              f"{time.perf_counter() - started:.1f} s; {args.batches} batches of 50 new and 50"
              f" retired records, {args.rounds} rounds (sync full, commit included)")
        work = batches(zipf, active, last_seq, args.batches * args.rounds)
        conn = connect(rows_path)
        conn.execute("BEGIN")
        Rows.load(conn, active)
        conn.execute("COMMIT")
        conn.close()
        conn = connect(fts_path)
        conn.execute("BEGIN")
        conn.execute(FTS_TABLE)
        conn.execute(FTS_POST, {"rows": json.dumps([document(seq, terms)
                                                    for seq, terms in active.items()])})
        conn.execute("COMMIT")
        conn.execute("INSERT INTO terms_fts (terms_fts) VALUES ('optimize')")
        conn.close()
        rounds: dict[str, list[list[float]]] = {"rows": [], "fts": []}
        for n in range(args.rounds):
            part = work[n * args.batches:(n + 1) * args.batches]
            rounds["rows"].append(Rows.run(rows_path, part, len(active)))
            rounds["fts"].append(run_fts(fts_path, part))
        print("\na batch's postings, in its own transaction")
        for name, stat in (("p50", p50), ("p99", p99),
                           ("mean", lambda s: statistics.mean(s) * 1000)):
            ratio_line(f"fts5 {name}", "rows (merges amortized)",
                       [(stat(f), stat(r)) for f, r in zip(rounds["fts"], rounds["rows"],
                                                          strict=True)])
        briefs = [list(dict.fromkeys(index_tokens(zipf.short_brief(), (), ANALYZER)))
                  for _ in range(60)]
        print("\nreading them back (the same postings from both)")
        for case in range(args.rounds):
            times = reads(rows_path, fts_path, briefs[case * 20:(case + 1) * 20])
            rounds.setdefault("brief", []).append([p50(times["fts brief"]),
                                                   p50(times["rows brief"])])
            rounds.setdefault("scope", []).append([p50(times["fts scope"]),
                                                   p50(times["rows scope"])])
        ratio_line("fts5: a brief's postings p50", "rows",
                   [(f, r) for f, r in rounds["brief"]])
        ratio_line("fts5: the scope's whole index p50", "rows",
                   [(f, r) for f, r in rounds["scope"]])


if __name__ == "__main__":
    main()
