"""What only the SQLite store has: files, schema, the token index, threads, bad files.

The behaviour every store shares is in ``test_contract.py``; this file checks how the SQLite
store gets there (targeted lookups, one batched bump, an index that holds exactly the active
rows) and what it does with the file system.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import os
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import attrs
import pytest

from scopemem.core.records import Kind, Source, Status, WriteCounts
from scopemem.errors import ConfigError, StoreError
from scopemem.stores import sqlite as sqlite_module
from scopemem.stores.base import StoreSettings
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite import (
    SqliteStore,
    default_max_open,
    fts_tokens,
    schema,
    scope_file_name,
)
from scopemem.stores.sqlite import files as sqlite_files
from scopemem.stores.sqlite import reads as sqlite_reads
from scopemem.stores.sqlite import sql as sqlite_sql
from scopemem.stores.sqlite.walheader import WalHeader
from tests.conftest import DAY_MS, FakeClock, fact, summary
from tests.stores.conftest import on_every_connection

ORG = "org:acme"
USER = "user:slack:U2"
NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}-[0-9a-f]{32}\.db$")


@pytest.fixture
async def store(make) -> SqliteStore:
    return make()


def raw(path: str) -> apsw.Connection:
    conn = apsw.Connection(path)
    conn.set_busy_timeout(2000)
    return conn


def query(path: str, sql: str, params: tuple = ()) -> list[tuple]:
    conn = raw(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def fts_rowids(path: str) -> set[int]:
    return {row[0] for row in query(path, "SELECT rowid FROM records_fts")}


def active_seqs(path: str) -> set[int]:
    return {row[0] for row in query(path, "SELECT seq FROM records WHERE status = 'active'")}


def statuses(path: str) -> dict[int, str]:
    return dict(query(path, "SELECT seq, status FROM records"))


@pytest.fixture
def rows_read() -> Iterator[list[int]]:
    """How many result rows the store's connections have handed to Python."""
    count = [0]

    def tracer(_cursor, row):  # type: ignore[no-untyped-def]
        count[0] += 1
        return row

    with on_every_connection(lambda conn: setattr(conn, "row_trace", tracer)):
        yield count


# --- layout ----------------------------------------------------------------------------------


async def test_one_file_per_scope_named_from_the_key(store: SqliteStore, tmp_path: Path):
    await store.write(ORG, [fact("org fact")])
    await store.write(USER, [fact("user fact")])
    files = sorted(p.name for p in (tmp_path / "data").iterdir() if p.suffix == ".db")
    assert files == sorted([scope_file_name(ORG), scope_file_name(USER)])
    assert scope_file_name(ORG).startswith("org_acme-")
    for key in (ORG, USER):
        assert query(store.path_for(key), "SELECT value FROM meta WHERE key = 'scope_key'") \
            == [(key,)]
        assert query(store.path_for(key), "SELECT DISTINCT scope_key FROM records") == [(key,)]


TRICKY_KEYS = [
    "user:../../etc", "../../etc/passwd", "..", ".", "repo:a/b", "repo:a\\b", "repo:a_b",
    "repo:a:b", "/abs/path", "C:\\windows", ".hidden", "user:日本語", "user:日本",
    "channel:" + "x" * 190, "channel:" + "x" * 191, "ORG:ACME", "org:acme",
]


def test_file_names_are_safe_bounded_and_distinct(tmp_path: Path):
    store = SqliteStore(tmp_path / "data")
    names = [scope_file_name(key) for key in TRICKY_KEYS]
    assert len(set(names)) == len(TRICKY_KEYS)
    for key, name in zip(TRICKY_KEYS, names, strict=True):
        assert NAME.match(name), name
        assert len(name) <= 80
        path = store.path_for(key)
        assert os.path.dirname(path) == str(tmp_path / "data")
        assert os.path.basename(path) == name


async def test_tricky_keys_stay_inside_the_directory(make, tmp_path: Path):
    store = make()
    for key in TRICKY_KEYS:
        await store.write(key, [fact(f"note for {key}")])
    inside = sorted(p.name for p in (tmp_path / "data").iterdir() if p.suffix == ".db")
    assert inside == sorted(scope_file_name(key) for key in TRICKY_KEYS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]
    for key in TRICKY_KEYS:
        [record] = await store.list(key, 5)
        assert record.scope_key == key and record.text == f"note for {key}"


async def test_a_name_that_would_escape_is_refused(make, tmp_path: Path, monkeypatch):
    store = make()
    monkeypatch.setattr(sqlite_files, "scope_file_name", lambda key: "../escaped.db")
    with pytest.raises(StoreError, match="outside the data directory"):
        await store.write(ORG, [fact("xray")])
    with pytest.raises(StoreError, match="outside the data directory"):
        await store.list(ORG, 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


async def test_reads_of_an_unknown_scope_create_nothing(store: SqliteStore, tmp_path: Path):
    assert await store.retrieve(ORG, "anything", 5) == []
    assert await store.list(ORG, 5) == []
    assert await store.list(ORG, 5, query="anything", kind=Kind.FACT) == []
    assert await store.forget(ORG, f"mem:{ORG}:1") is False
    assert await store.sweep(ORG) == (await InMemoryStore().sweep(ORG))
    assert await store.sweep(ORG, dry_run=True) == (await InMemoryStore().sweep(ORG, True))
    assert await store.write(ORG, []) == WriteCounts()
    assert not (tmp_path / "data").exists()
    await store.write(ORG, [fact("first")])
    assert (tmp_path / "data").is_dir()
    assert await store.list(USER, 5) == []
    assert not os.path.exists(store.path_for(USER))


async def test_deleting_the_file_deletes_the_scope(make, tmp_path: Path):
    store = make()
    await store.write(ORG, [fact("personal data")])
    await store.write(USER, [fact("stays")])
    await store.close()
    for suffix in ("", "-wal", "-shm"):
        path = Path(store.path_for(ORG) + suffix)
        if path.exists():
            path.unlink()
    again = make()
    assert await again.list(ORG, 5) == []
    assert [r.text for r in await again.list(USER, 5)] == ["stays"]


async def test_a_file_of_another_scope_is_refused_and_left_alone(make):
    store = make()
    await store.write(ORG, [fact("org secret")])
    await store.close()
    shutil.copy(store.path_for(ORG), store.path_for(USER))
    before = Path(store.path_for(USER)).read_bytes()
    again = make()
    for call in (again.list(USER, 5), again.write(USER, [fact("xray")]),
                 again.retrieve(USER, "secret", 5)):
        with pytest.raises(StoreError, match="holds scope 'org:acme', not 'user:slack:U2'"):
            await call
    assert Path(store.path_for(USER)).read_bytes() == before
    assert [r.text for r in await again.list(ORG, 5)] == ["org secret"]


async def test_data_persists_across_stores(make, clock: FakeClock):
    store = make()
    await store.write(ORG, [fact("alpha deploy", keywords=("k1", "k2"), confidence=0.7,
                                 source_run_id="r-1"), summary("beta"), fact("gamma")])
    clock.advance(DAY_MS)
    await store.retrieve(ORG, "alpha", 5)
    assert await store.forget(ORG, f"mem:{ORG}:3")
    before = await store.list(ORG, 50)
    await store.close()
    again = make()
    assert await again.list(ORG, 50) == before
    assert before[-1].use_count == 1 and before[-1].keywords == ("k1", "k2")
    assert await again.write(ORG, [fact("delta")]) == WriteCounts(inserted=1)
    assert (await again.list(ORG, 1))[0].id == f"mem:{ORG}:4"


# --- schema ----------------------------------------------------------------------------------


async def test_schema_is_idempotent_and_versioned(make):
    store = make()
    await store.write(ORG, [fact("one")])
    path = store.path_for(ORG)
    await store.close()
    for _ in range(2):
        again = make()
        await again.write(ORG, [fact("another")])
        await again.close()
    migrations = query(path, "SELECT version, name FROM schema_migrations")
    assert migrations == [(m.version, m.name) for m in schema.MIGRATIONS]
    assert query(path, "PRAGMA user_version") == [(schema.SCHEMA_VERSION,)]
    assert query(path, "PRAGMA application_id") == [(schema.APPLICATION_ID,)]
    assert query(path, "PRAGMA journal_mode") == [("wal",)]
    assert query(path, "SELECT count(*) FROM records") == [(2,)]
    # Re-running every statement over live data changes nothing.
    conn = raw(path)
    for statement in schema.statements():
        conn.execute(statement)
    conn.close()
    assert query(path, "SELECT count(*) FROM records") == [(2,)]


LOOKUP_INDEXES = {
    "records_active_norm": [("norm", 0)],
    "records_active_by_seq": [("seq", 1)],
    "records_active_by_use": [("last_used_at", 1), ("created_at", 1)],
}
OLD_INDEXES = ("records_status_norm", "records_active_seq", "records_active_used")


def index_sql(path: str) -> dict[str, str]:
    return dict(query(path, "SELECT name, sql FROM sqlite_master WHERE type = 'index'"
                            " AND sql IS NOT NULL"))


async def test_the_lookup_indexes_hold_only_the_active_rows(store: SqliteStore):
    await store.write(ORG, [fact("xray")])
    path = store.path_for(ORG)
    indexes = index_sql(path)
    for name, columns in LOOKUP_INDEXES.items():
        info = query(path, f"PRAGMA index_xinfo({name})")
        # Key columns only (cid >= -1 and key flag set); name and DESC flag.
        keys = [(row[2] if row[1] != -1 else "seq", row[3]) for row in info if row[5]]
        assert keys == columns, name
        # Partial: an eviction or a supersede only takes the row out of them.
        assert indexes[name].endswith("WHERE status = 'active'"), name
    assert not set(OLD_INDEXES) & indexes.keys()


@pytest.mark.parametrize(("statement", "index"), [
    ("SELECT seq FROM records WHERE status = 'active' AND norm IN ('a', 'b')",
     "records_active_norm"),
    ("SELECT count(*) FROM records WHERE status = 'active'", "records_active_by_seq"),
    ("SELECT seq FROM records WHERE status = 'active' ORDER BY seq DESC LIMIT 5",
     "records_active_by_seq"),
    ("SELECT seq FROM records WHERE status = 'active' AND last_used_at IS NOT NULL"
     " ORDER BY last_used_at, created_at, seq LIMIT 5", "records_active_by_use"),
])
async def test_the_store_s_lookups_use_the_partial_indexes(store: SqliteStore, statement,
                                                           index):
    await store.write(ORG, [fact(f"note {n}") for n in range(30)])
    plan = " ".join(row[3] for row in query(store.path_for(ORG),
                                             f"EXPLAIN QUERY PLAN {statement}"))
    assert index in plan, plan


async def test_an_older_file_trades_its_status_indexes_for_the_partial_ones(make):
    store = make()
    await store.write(ORG, [fact("kept across the upgrade")])
    await store.close()
    path = store.path_for(ORG)
    # The file as version 4 left it: the status-prefixed indexes of every row.
    conn = raw(path)
    for name in LOOKUP_INDEXES:
        conn.execute(f"DROP INDEX {name}")
    conn.execute("CREATE INDEX records_status_norm ON records (status, norm)")
    conn.execute("CREATE INDEX records_active_seq ON records (status, seq DESC)")
    conn.execute("CREATE INDEX records_active_used"
                 " ON records (status, last_used_at DESC, created_at DESC)")
    conn.execute("DROP TABLE counters")
    conn.execute("DELETE FROM schema_migrations WHERE version >= 5")
    conn.execute("PRAGMA user_version = 4")
    conn.close()
    again = make()
    assert [r.text for r in await again.list(ORG, 5)] == ["kept across the upgrade"]
    await again.close()
    indexes = index_sql(path)
    assert set(LOOKUP_INDEXES) <= indexes.keys()
    assert not set(OLD_INDEXES) & indexes.keys()


async def test_a_database_from_a_newer_scopemem_is_refused(make):
    store = make()
    await store.write(ORG, [fact("xray")])
    await store.close()
    conn = raw(store.path_for(ORG))
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreError, match="newer"):
        await make().list(ORG, 5)


async def test_synchronous_is_configurable_and_restored_after_a_bump(make):
    connections: list[apsw.Connection] = []
    apsw.connection_hooks.append(connections.append)
    try:
        full = make()
        normal = make(synchronous="normal")
        await full.write(ORG, [fact("deploy note")])
        await normal.write(USER, [fact("deploy note")])
        await full.retrieve(ORG, "deploy", 5)
        await normal.retrieve(USER, "deploy", 5)
    finally:
        apsw.connection_hooks.remove(connections.append)
    by_file = {conn.filename: conn for conn in connections}
    assert by_file[full.path_for(ORG)].execute("PRAGMA synchronous").fetchall() == [(2,)]
    assert by_file[normal.path_for(USER)].execute("PRAGMA synchronous").fetchall() == [(1,)]
    assert by_file[full.path_for(ORG)].execute("PRAGMA busy_timeout").fetchall() == [(5000,)]


# --- the token index -------------------------------------------------------------------------


async def test_the_index_holds_the_engines_tokens(store: SqliteStore):
    await store.write(ORG, [fact("Le café: NEAR-by OR* \"quoted\"", keywords=("Big-Deploy",))])
    rows = query(store.path_for(ORG), "SELECT rowid, tokens FROM records_fts")
    # Folded and stemmed (English by default): "quoted" is indexed as its stem; each term
    # once, sorted (the terms both SQL stores index a record by).
    assert rows == [(1, "big by cafe deploy le near or quot")]
    assert rows[0][1] == fts_tokens("Le café: NEAR-by OR* \"quoted\"", ("Big-Deploy",),
                                    store.analyzer)
    # The whole-token gate and the index agree: "caf" is a fragment, "café" folds to "cafe".
    assert await store.retrieve(ORG, "caf", 5) == []
    assert len(await store.retrieve(ORG, "CAFÉ", 5)) == 1


async def test_every_soft_delete_leaves_the_index(make, clock: FakeClock):
    store = make(cap=4)
    path_of = store.path_for
    await store.write(ORG, [fact("alpha one"), fact("beta two"), fact("gamma three"),
                            fact("PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing")])
    path = path_of(ORG)
    assert fts_rowids(path) == active_seqs(path) == {1, 2, 3, 4}

    assert await store.forget(ORG, f"mem:{ORG}:1")
    assert fts_rowids(path) == active_seqs(path) == {2, 3, 4}

    await store.write(ORG, [fact("beta 2", supersedes=f"mem:{ORG}:2")])
    assert statuses(path)[2] == "superseded"
    assert fts_rowids(path) == active_seqs(path) == {3, 4, 5}

    assert (await store.sweep(ORG)).swept == 1
    assert statuses(path)[4] == "swept"
    assert fts_rowids(path) == active_seqs(path) == {3, 5}

    clock.advance(1000)
    counts = await store.write(ORG, [fact("delta"), fact("epsilon"), fact("zeta")])
    assert counts == WriteCounts(inserted=3, evicted=1)
    assert statuses(path)[3] == "evicted"
    assert fts_rowids(path) == active_seqs(path) == {5, 6, 7, 8}
    assert query(path, "INSERT INTO records_fts (records_fts) VALUES ('integrity-check')") == []


async def test_reconciliation_repairs_the_index_on_open(make):
    store = make()
    await store.write(ORG, [fact("kept alpha"), fact("dropped beta"), fact("lost gamma")])
    assert await store.forget(ORG, f"mem:{ORG}:2")
    path = store.path_for(ORG)
    await store.close()
    conn = raw(path)
    with conn:  # plant a dead row's entry back, and lose an active row's entry
        conn.execute("INSERT INTO records_fts (rowid, tokens) VALUES (2, 'dropped beta')")
        conn.execute("INSERT INTO records_fts (rowid, tokens) VALUES (99, 'ghost')")
        conn.execute("DELETE FROM records_fts WHERE rowid = 3")
    conn.close()
    assert fts_rowids(path) == {1, 2, 99}

    again = make()
    assert [r.id for r in await again.retrieve(ORG, "beta gamma ghost", 5)] == [f"mem:{ORG}:3"]
    assert fts_rowids(path) == active_seqs(path) == {1, 3}
    assert query(path, "SELECT tokens FROM records_fts WHERE rowid = 3") == [("gamma lost",)]


# --- how the work is done --------------------------------------------------------------------


@pytest.mark.parametrize("small_rows", [sqlite_reads.SMALL_SCOPE_ROWS, 0])
async def test_retrieve_bumps_in_one_batched_update(store: SqliteStore, traced, clock,
                                                    monkeypatch, small_rows: int):
    monkeypatch.setattr(sqlite_reads, "SMALL_SCOPE_ROWS", small_rows)
    await store.write(ORG, [fact(f"cache rule {n}") for n in range(6)] + [fact("unrelated")])
    traced.clear()
    clock.advance(5)
    got = await store.retrieve(ORG, "cache rule", 4)
    assert len(got) == 4
    await store.flush()
    updates = [(sql, args) for sql, args, _ in traced if sql.startswith("UPDATE")]
    assert len(updates) == 1
    sql, (bumps,) = updates[0]
    assert "FROM json_each(?)" in sql
    assert sorted(json.loads(bumps)) == sorted(
        [int(r.id.rsplit(":", 1)[1]), 1, clock.now] for r in got)
    reads = [(sql, args) for sql, args, _ in traced
             if "MATCH" in sql or sql == schema.SMALL_SCOPE_SQL]
    if small_rows:
        # A small scope is read whole, in one statement, and ranked in memory.
        assert reads == [(schema.SMALL_SCOPE_SQL, (small_rows + 1,))]
    else:
        # The prefilter is the documented statement, bound to the quoted (stemmed) terms.
        assert [args for _sql, args in reads] == [('"cach" OR "rule"',)]


async def test_the_batched_bump_takes_the_largest_limit_in_one_statement(make, traced):
    store = make(cache_rows=0)
    await store.write(ORG, [fact(f"cache rule {n}") for n in range(60)])
    traced.clear()
    got = await store.retrieve(ORG, "cache", 50)
    assert len(got) == 50
    await store.flush()
    [(_, (bumps,))] = [(sql, args) for sql, args, _ in traced if sql.startswith("UPDATE")]
    assert sorted(seq for seq, _, _ in json.loads(bumps)) == sorted(
        int(r.id.rsplit(":", 1)[1]) for r in got)
    counts = dict(apsw.Connection(store.path_for(ORG)).execute(
        "SELECT id, use_count FROM records"))
    assert sorted(counts.values()) == [0] * 10 + [1] * 50


@pytest.mark.parametrize("header", [True, False])
async def test_database_work_runs_off_the_event_loop_but_for_the_views_check(
        store: SqliteStore, traced, monkeypatch, header):
    if not header:  # the WAL-index header cannot be mapped: the check reads the file
        monkeypatch.setattr(WalHeader, "open", classmethod(lambda cls, conn, **_: None))
    await store.write(ORG, [fact("deploy")])
    for _ in range(3):  # the third is answered from the scope's view
        await store.retrieve(ORG, "deploy", 5)
    await store.flush()
    await store.list(ORG, 5, query="deploy")
    await store.forget(ORG, f"mem:{ORG}:1")
    await store.sweep(ORG)
    threads = {thread for _, _, thread in traced}
    assert any(name.startswith("scopemem-sqlite") for name in threads)
    # What the loop runs: nothing when the view is checked from the WAL-index header in
    # memory; else the check of the scope's change counter, one cached row.
    on_loop = [sql for sql, _, thread in traced if not thread.startswith("scopemem-sqlite")]
    assert on_loop == ([] if header else [schema.GENERATION_SQL])
    # The use counts are saved on the write pool, unsynced (NORMAL under FULL).
    saves = [index for index, (sql, _, _) in enumerate(traced) if sql == sqlite_sql.BUMP_SQL]
    assert saves and all(traced[index][2].startswith("scopemem-sqlite-write")
                         for index in saves)
    assert [sql for sql, _, _ in traced[saves[0] - 2:saves[0] + 3]] == [
        "PRAGMA synchronous = NORMAL", "BEGIN IMMEDIATE", sqlite_sql.BUMP_SQL, "COMMIT",
        "PRAGMA synchronous = FULL"]


async def test_writes_use_targeted_lookups_under_the_cap(make, rows_read, traced):
    store = make(cap=500)
    for start in range(0, 300, 50):
        await store.write(ORG, [fact(f"note number {n}") for n in range(start, start + 50)])
    rows_read[0] = 0
    traced.clear()
    counts = await store.write(ORG, [
        fact("note number 7"),                                     # dedup: one norm hit
        fact("fresh", supersedes=f"mem:{ORG}:9"),                  # one id lookup
        fact("again", restates=f"mem:{ORG}:10"),                   # one id lookup
        fact("bogus", supersedes="mem:org:acme:999999"),           # no row
        fact("brand new text"),                                    # no norm hit
    ])
    assert counts == WriteCounts(inserted=3, deduped=1, superseded=1, restated=1)
    # The seq base, the active count, the three rows the plan needs and the page count the
    # commit checkpoints by; nothing scanned.
    assert rows_read[0] <= 7
    selects = [sql for sql, _, _ in traced if sql.startswith("SELECT")]
    assert all(("WHERE" in sql) or ("MAX(seq)" in sql) for sql in selects), selects


async def test_eviction_reads_only_the_least_recently_used(make, rows_read, clock):
    store = make(cap=200)
    for start in range(0, 200, 50):
        clock.advance(1000)
        await store.write(ORG, [fact(f"note number {n}") for n in range(start, start + 50)])
    await store.retrieve(ORG, "1", 5)
    rows_read[0] = 0
    clock.advance(1000)
    counts = await store.write(ORG, [fact(f"newer {n}") for n in range(5)])
    assert counts == WriteCounts(inserted=5, evicted=5)
    # The seq base, the count, two short LRU lists (5 + 1) and the 6 rows they name.
    assert rows_read[0] <= 2 + 2 * 5 + 2 * 5
    evicted = [seq for seq, status in statuses(store.path_for(ORG)).items()
               if status == "evicted"]
    assert evicted == [1, 3, 4, 5, 6]  # "note number 1" (seq 2) was just used


async def test_eviction_tells_old_uses_from_newer_creations(make, clock: FakeClock):
    # Six records used long ago, four created after those uses: the two least recently
    # touched are the first two used ones, not the never-used ones.
    sqlite, memory = make(cap=100), InMemoryStore(cap=100, clock=clock)
    for n in range(6):
        clock.advance(1000)
        for store in (sqlite, memory):
            await store.write(ORG, [fact(f"used{n} item")])
    for n in range(6):
        clock.advance(1000)
        for store in (sqlite, memory):
            await store.retrieve(ORG, f"used{n}", 1)
    for n in range(4):
        clock.advance(1000)
        for store in (sqlite, memory):
            await store.write(ORG, [fact(f"fresh{n} item")])
    clock.advance(1000)
    counts = [await store.write(ORG, [fact("newest item")], cap=9) for store in (sqlite, memory)]
    assert counts[0] == counts[1] == WriteCounts(inserted=1, evicted=2)
    assert await sqlite.list(ORG, 50) == await memory.list(ORG, 50)
    assert [r.text for r in await sqlite.list(ORG, 50) if r.text.startswith("used")] == [
        "used5 item", "used4 item", "used3 item", "used2 item"]


async def test_bm25_rescues_a_relevant_old_record(make, clock: FakeClock):
    store = make(cap=1000)
    await store.write(ORG, [fact("zebra crossing deploy checklist")])
    for start in range(0, 600, 50):
        clock.advance(DAY_MS)
        await store.write(ORG, [fact(f"deploy note {n} for the week") for n in
                                range(start, start + 50)])
    got = await store.retrieve(ORG, "zebra deploy", 3)
    assert got[0].id == f"mem:{ORG}:1"
    # A recency-ordered prefilter would have handed the engine only the newest 50.
    newest = await store.list(ORG, 50, query="zebra deploy")
    assert f"mem:{ORG}:1" not in {r.id for r in newest}


async def test_the_candidate_floor_hands_a_small_scope_to_the_engine(make, clock: FakeClock):
    sqlite = make()
    memory = InMemoryStore(clock=clock)
    # 50 records match "alpha"; the newest is also the longest, so bm25 ranks it last while
    # the engine (equal keyword match, newer wins) ranks it first.
    for n in range(49):
        clock.advance(1000)
        batch = [fact(f"alpha {n}")]
        await sqlite.write(ORG, batch)
        await memory.write(ORG, batch)
    clock.advance(1000)
    long_text = "alpha " + " ".join(f"filler{n}" for n in range(200))
    await sqlite.write(ORG, [fact(long_text)])
    await memory.write(ORG, [fact(long_text)])
    clock.advance(1000)
    got = await sqlite.retrieve(ORG, "alpha", 1)
    assert got == await memory.retrieve(ORG, "alpha", 1)
    assert got[0].text == long_text


# --- connections, threads, closing -----------------------------------------------------------


async def test_the_connection_cache_is_bounded(make):
    connections: list[apsw.Connection] = []
    apsw.connection_hooks.append(connections.append)
    try:
        store = make(max_open=2)
        keys = [f"user:slack:U{n}" for n in range(6)]
        for key in keys:
            await store.write(key, [fact(f"note {key}")])
        assert len(store._handles) == 2
        assert list(store._handles) == keys[-2:]
        assert store._writers == {}
        open_connections = 0
        for conn in connections:
            try:
                conn.execute("SELECT 1")
                open_connections += 1
            except apsw.ConnectionClosedError:
                pass
        assert open_connections == 2
        # Evicted scopes reopen on demand.
        for key in keys:
            assert [r.text for r in await store.list(key, 5)] == [f"note {key}"]
    finally:
        apsw.connection_hooks.remove(connections.append)


async def test_concurrent_work_across_more_scopes_than_connections(make):
    store = make(max_open=2, synchronous="normal")
    keys = [f"channel:slack:C{n}" for n in range(5)]

    async def worker(key: str, n: int) -> None:
        await store.write(key, [fact(f"item {n} a"), fact(f"item {n} b")])
        await store.retrieve(key, f"item {n}", 3)
        await store.list(key, 10, query="item")

    await asyncio.gather(*(worker(key, n) for n in range(8) for key in keys))
    for key in keys:
        records = await store.list(key, 50)
        assert len(records) == 16 and len({r.id for r in records}) == 16
    assert len(store._handles) <= 2 and store._writers == {}


async def test_close_is_idempotent_and_final(make):
    store = make()
    await store.write(ORG, [fact("xray")])
    await store.close()
    await store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.list(ORG, 5)
    with pytest.raises(StoreError, match="closed"):
        await store.write(ORG, [fact("yankee")])
    never_used = make()
    await never_used.close()


async def test_a_busy_database_is_a_store_error(make):
    store = make(busy_timeout_ms=50)
    await store.write(ORG, [fact("xray")])
    blocker = raw(store.path_for(ORG))
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="BusyError"):
            await store.write(ORG, [fact("yankee")])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert await store.write(ORG, [fact("yankee")]) == WriteCounts(inserted=1)
    assert len(await store.list(ORG, 5)) == 2


# --- bad files, bad directories, bad options -------------------------------------------------


async def test_a_file_that_is_not_a_database_is_refused_untouched(make, tmp_path: Path):
    store = make()
    os.makedirs(store.directory)
    junk = b"this is not a database\n" * 300
    Path(store.path_for(ORG)).write_bytes(junk)
    for call in (store.list(ORG, 5), store.write(ORG, [fact("xray")]),
                 store.retrieve(ORG, "x", 5), store.forget(ORG, f"mem:{ORG}:1"),
                 store.sweep(ORG)):
        with pytest.raises(StoreError, match="not a SQLite database or is corrupt"):
            await call
    assert Path(store.path_for(ORG)).read_bytes() == junk
    assert sorted(os.listdir(store.directory)) == [scope_file_name(ORG)]
    # Other scopes are unaffected.
    assert await store.write(USER, [fact("fine")]) == WriteCounts(inserted=1)


async def test_a_database_of_another_application_is_refused_untouched(make):
    store = make()
    os.makedirs(store.directory)
    conn = raw(store.path_for(ORG))
    conn.execute("CREATE TABLE invoices (n INTEGER); INSERT INTO invoices VALUES (42)")
    conn.close()
    before = Path(store.path_for(ORG)).read_bytes()
    with pytest.raises(StoreError, match="another application"):
        await store.write(ORG, [fact("xray")])
    assert Path(store.path_for(ORG)).read_bytes() == before
    assert query(store.path_for(ORG), "SELECT name FROM sqlite_master") == [("invoices",)]


async def test_an_unusable_directory_is_a_store_error(make, tmp_path: Path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data directory should be")
    store = make(blocker)
    with pytest.raises(StoreError, match="cannot create the data directory"):
        await store.write(ORG, [fact("xray")])
    assert await store.list(ORG, 5) == []
    assert blocker.read_text() == "a file where the data directory should be"


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
async def test_a_read_only_directory_is_a_store_error(make, tmp_path: Path):
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        with pytest.raises(StoreError):
            await make(directory).write(ORG, [fact("xray")])
    finally:
        directory.chmod(0o700)


async def test_bad_arguments_are_refused(make):
    store = make()
    with pytest.raises(StoreError):
        await store.write("has space", [fact("xray")])
    with pytest.raises(StoreError):
        await store.retrieve("", "x", 5)
    with pytest.raises(StoreError):
        await store.sweep("a\nb")
    with pytest.raises(StoreError):
        await store.write(ORG, [fact("xray")], cap=0)
    with pytest.raises(StoreError):
        SqliteStore("somewhere", cap=10_001)
    for bad in ({"synchronous": "fast"}, {"busy_timeout_ms": -1}, {"max_open": 0}):
        with pytest.raises(ConfigError):
            SqliteStore("somewhere", **bad)
    assert await store.forget(ORG, "not-an-id") is False
    assert await store.forget(ORG, f"mem:{ORG}:{'9' * 40}") is False


def settings(**options) -> StoreSettings:
    return StoreSettings(options=options, cap=42, name="sqlite")


def test_from_settings_reads_its_table(tmp_path: Path, monkeypatch):
    store = SqliteStore.from_settings(settings(
        path=str(tmp_path / "d"), synchronous="NORMAL", busy_timeout_ms=10,
        max_open_connections=3, usage_flush_ms=0))
    assert (store.directory, store.synchronous, store.busy_timeout_ms, store.max_open,
            store.usage_flush_ms, store.cap) == (str(tmp_path / "d"), "normal", 10, 3, 0, 42)
    monkeypatch.chdir(tmp_path)
    default = SqliteStore.from_settings(StoreSettings())
    assert default.directory == str(tmp_path / "scopemem-data")
    assert default.synchronous == "full" and default.busy_timeout_ms == 5000
    assert default.max_open == default_max_open() and default.usage_flush_ms == 1000


@pytest.mark.parametrize(("options", "key"), [
    ({"paht": "x"}, "paht"),
    ({"path": 3}, "path"),
    ({"path": ""}, "path"),
    ({"synchronous": "fast"}, "synchronous"),
    ({"synchronous": 2}, "synchronous"),
    ({"busy_timeout_ms": "5000"}, "busy_timeout_ms"),
    ({"busy_timeout_ms": True}, "busy_timeout_ms"),
    ({"max_open_connections": 0}, "max_open_connections"),
    ({"usage_flush_ms": 60_001}, "usage_flush_ms"),
    ({"usage_flush_ms": -1}, "usage_flush_ms"),
])
def test_from_settings_names_the_bad_key(options, key):
    with pytest.raises(ConfigError, match=rf"^memory\.stores\.sqlite\.{key}: "):
        SqliteStore.from_settings(settings(**options))
    unnamed = attrs.evolve(settings(**options), name="")
    with pytest.raises(ConfigError, match=rf"^memory\.stores\.sqlite\.{key}: "):
        SqliteStore.from_settings(unnamed)


def test_registered_as_the_sqlite_store():
    found: dict[str, Callable] = {}
    sqlite_module.scopemem_register_stores(register=found.__setitem__)
    assert found == {"sqlite": sqlite_module.from_settings}
    points = {e.name: e.value for e in importlib.metadata.entry_points(group="scopemem")}
    assert points.get("sqlite") == "scopemem.stores.sqlite"


def test_importing_the_plugin_does_not_load_apsw():
    import subprocess
    import sys

    code = ("import sys, scopemem.stores.sqlite as s; s.SqliteStore('x');"
            " print('apsw' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


async def test_field_values_round_trip_exactly(store: SqliteStore, clock: FakeClock):
    memory = InMemoryStore(clock=clock)
    batch = [fact("one", confidence=1, keywords=("ünï", "x y")),
             fact("two", confidence=0.1 + 0.2, source_run_id="r"), summary("three\x00nul")]
    for target in (store, memory):
        await target.write(ORG, batch)
    got, expected = await store.list(ORG, 10), await memory.list(ORG, 10)
    assert got == expected
    assert [type(r.confidence) for r in got] == [type(r.confidence) for r in expected]


async def test_statuses_round_trip(store: SqliteStore):
    await store.write(ORG, [fact("alpha"), fact("bravo")])
    await store.forget(ORG, f"mem:{ORG}:1")
    assert statuses(store.path_for(ORG)) == {1: Status.FORGOTTEN.value, 2: Status.ACTIVE.value}


async def test_a_file_from_before_sources_gains_the_column_and_reads_as_reflection(make):
    store = make()
    await store.write(ORG, [fact("an old lesson")])
    await store.close()
    path = store.path_for(ORG)
    # Back to schema version 2: the table as it was, without the source column.
    conn = raw(path)
    conn.execute("ALTER TABLE records DROP COLUMN source")
    conn.execute("DELETE FROM schema_migrations WHERE version = 3")
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    assert "source" not in {row[1] for row in query(path, "PRAGMA table_info(records)")}
    again = make()
    [old] = await again.list(ORG, 10)
    assert old.text == "an old lesson" and old.source is Source.REFLECTION
    await again.write(ORG, [fact("a person said so", source=Source.HUMAN)])
    assert query(path, "SELECT seq, source FROM records ORDER BY seq") == [
        (1, "reflection"), (2, "human")]
    assert query(path, "PRAGMA user_version") == [(schema.SCHEMA_VERSION,)]
    with pytest.raises(apsw.ConstraintError):
        query(path, "UPDATE records SET source = 'oracle' WHERE seq = 1")


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sqlite-before-folding"


async def test_a_file_from_before_unicode_folding_is_reindexed_once_and_loses_nothing(
        make, tmp_path: Path, caplog):
    """The fixture was written by the release before Unicode folding: its index holds
    "caf" for "café" and no token at all for Greek, Cyrillic or Japanese text."""
    import unicodedata

    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    directory = tmp_path / "data"
    shutil.copytree(FIXTURE, directory)
    [path] = directory.glob("*.db")
    before = query(str(path), "SELECT seq, id, status, use_count, text FROM records ORDER BY seq")
    assert query(str(path), "SELECT tokens FROM records_fts WHERE rowid = 1") == [
        ("le caf est ferm le lundi",)]
    store = make(directory)
    found = [r.text for r in await store.retrieve(ORG, "cafe FERME", 5)]
    assert found == ["Le café est fermé le lundi", "a thread about the café hours"]
    assert [r.text for r in await store.retrieve(ORG, "rich", 5)] == [
        "the rich text editor drops tables on paste"]
    for query_text, text in [("zurich", "Das Büro in Zürich öffnet um acht"),
                             ("ΚΛΕΙΔΙ", "Το κλειδί είναι στο συρτάρι του γραφείου"),
                             ("ключ", "Ключ от сервера лежит в ящике"),
                             ("デプロイ", "デプロイ前にテストを実行する"),
                             ("istanbul", "İstanbul ofisi cumartesi kapalı"),
                             ("buro", "Das Büro in Zürich öffnet um acht")]:
        assert [r.text for r in await store.retrieve(ORG, query_text, 5)] == [text], query_text
    # The dedup keys were re-derived too: the same text in NFD strengthens the old row.
    counts = await store.write(ORG, [fact(unicodedata.normalize("NFD",
                                                                "Le café est fermé le lundi"))])
    assert counts == WriteCounts(deduped=1)
    await store.close()
    # Nothing lost: every row, id, status and use count as it was (the retrievals above
    # added their uses), but the forgotten row's text, which the upgrade scrubs.
    after = query(str(path), "SELECT seq, id, status, text FROM records ORDER BY seq")
    assert after == [(seq, id_, status, "" if status == "forgotten" else text)
                     for seq, id_, status, _uses, text in before]
    assert dict(query(str(path), "SELECT seq, status FROM records"))[11] == "forgotten"
    assert before[10][4] == "an old note to forget"
    assert fts_rowids(str(path)) == active_seqs(str(path))
    reindexed = [r for r in caplog.records if "re-derived" in r.getMessage()]
    assert len(reindexed) == 1
    # Once only: the file now says which rules its tokens follow.
    again = make(directory)
    assert len(await again.retrieve(ORG, "cafe", 5)) == 2
    assert len([r for r in caplog.records if "re-derived" in r.getMessage()]) == 1
    assert query(str(path), "SELECT value FROM meta WHERE key = 'folding'") == [
        ("unicode-2;english",)]


async def test_a_file_opened_under_other_languages_is_reindexed_once(tmp_path, make, caplog):
    from scopemem.core.ranking import Ranking
    from scopemem.languages import analyzer_for

    caplog.set_level(logging.INFO, logger="scopemem.stores.sqlite")
    english = make(tmp_path / "data")
    await english.write(ORG, [fact("Die Häuser am Fluss"), fact("deploys run nightly")])
    # English stems Latin words; "hauser" stays as it is.
    assert await english.retrieve(ORG, "haus", 5) == []
    await english.close()
    german = make(tmp_path / "data", ranking=Ranking(analyzer_for(("german", "english"))))
    assert [r.text for r in await german.retrieve(ORG, "haus", 5)] == ["Die Häuser am Fluss"]
    [path] = (tmp_path / "data").glob("*.db")
    assert query(str(path), "SELECT value FROM meta WHERE key = 'folding'") == [
        ("unicode-2;german+english",)]
    assert len([r for r in caplog.records if "re-derived" in r.getMessage()]) == 1
    # Nothing was lost, and ids and use counts are the file's own.
    assert [r.id for r in await german.list(ORG, 10)] == [f"mem:{ORG}:2", f"mem:{ORG}:1"]


def test_the_open_file_bound_follows_the_process_limit(monkeypatch):
    import resource

    for soft, expected in ((1024, 170), (256, 42), (60, 16), (120_000, 8192)):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, soft=soft: (soft, soft))
        assert default_max_open() == expected


async def test_a_file_closed_to_make_room_is_not_checkpointed_but_a_closed_store_is(make):
    """Eviction from the cache of open files keeps the WAL (no sync, no unlink on the read
    path); closing the store checkpoints the files it closes and removes their WAL."""
    store = make(max_open=1)
    await store.write(ORG, [fact("org lesson")])
    await store.write(USER, [fact("user lesson")])  # evicts the org file from the cache
    assert os.path.exists(store.path_for(ORG) + "-wal")
    await store.close()
    # The file open at the end is one self-contained file again; the one evicted earlier
    # keeps its WAL, and its records are all there.
    assert not os.path.exists(store.path_for(USER) + "-wal")
    again = make()
    assert [r.text for r in await again.list(ORG, 5)] == ["org lesson"]
    assert [r.text for r in await again.list(USER, 5)] == ["user lesson"]


async def test_reopening_a_current_file_reads_each_identity_fact_once(make, traced):
    """A scope coming back into the cache of open files pays for its open on the read path:
    a file of this scope, at this schema, under these rules reads its id, its schema version
    and its scope once each, counts no tables and writes nothing."""
    store = make(max_open=16)
    await store.write(ORG, [fact("deploy with the blue script")])
    for n in range(16):  # ORG's file is closed to make room (its first open reconciled it)
        await store.write(f"user:slack:U{n}", [fact("xray")])
    assert ORG not in store._handles
    traced.clear()
    assert len(await store.retrieve(ORG, "deploy", 5)) == 1
    opening = [sql for sql, _, _ in traced]
    assert opening.count("PRAGMA application_id") == 1
    assert opening.count("PRAGMA user_version") == 1
    assert opening.count("SELECT count(*) FROM sqlite_master") == 0
    assert sum(1 for sql, bound, _ in traced if sql == "SELECT value FROM meta WHERE key = ?"
               and bound == (schema.META_SCOPE_KEY,)) == 1
    # (The retrieval's own read snapshot is a plain BEGIN.)
    assert not any(sql.startswith(("BEGIN IMMEDIATE", "INSERT", "UPDATE", "DELETE"))
                   for sql in opening)
    # A small scope's retrieval needs no FTS5 vocabulary table: none is made.
    assert sqlite_sql.VOCAB_TABLE_SQL not in opening


async def test_a_file_of_ours_at_this_version_without_its_meta_table_is_claimed(make):
    """A file that carries our id and schema version but no ``meta`` table (cut short
    before its first transaction) is set up and claimed like a new one, not refused."""
    store = make()
    path = store.path_for(ORG)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    conn = apsw.Connection(path)
    conn.execute(f"PRAGMA application_id = {schema.APPLICATION_ID}")
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
    conn.close()
    await store.write(ORG, [fact("deploy with the blue script")])
    assert [r.text for r in await store.retrieve(ORG, "deploy", 5)] == [
        "deploy with the blue script"]
    assert query(path, "SELECT value FROM meta WHERE key = 'scope_key'") == [(ORG,)]
