"""The SQLite store's read path: what it hands the engine, concurrent reads, usage bumps.

Retrieval reads without the scope's writer lock, hands the engine every match when there are
at most the candidate cap of them (else the bm25-best cap), and saves the usage bumps of a
scope's retrievals together, a little after them. None of that may change an answer.
"""

from __future__ import annotations

import asyncio

import apsw
import pytest

from scopemem.core import engine
from scopemem.errors import ConfigError
from scopemem.stores.sqlite import SqliteStore, schema
from scopemem.stores.sqlite import reads as sqlite_reads
from scopemem.stores.sqlite import sql as sqlite_sql
from scopemem.stores.sqlite.schema import RECORD_COLUMNS
from scopemem.stores.sqlite.sql import FTS_SEGMENTS_SQL, HITS_SQL, MAX_FTS_SEGMENTS
from tests.conftest import DAY_MS, fact
from tests.stores.conftest import on_every_connection

ORG = "org:acme"


def read_only(path: str) -> apsw.Connection:
    return apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)


def use_counts(path: str) -> dict[int, tuple[int, int | None]]:
    conn = read_only(path)
    try:
        return {seq: (uses, last) for seq, uses, last in conn.execute(
            "SELECT seq, use_count, last_used_at FROM records")}
    finally:
        conn.close()


async def test_use_counts_are_saved_within_usage_flush_ms_without_being_waited_for(
        make, clock):
    store = make(usage_flush_ms=30)
    await store.write(ORG, [fact("deploy with care"), fact("deploy on fridays never")])
    clock.advance(5)
    loop = asyncio.get_running_loop()
    got = await store.retrieve(ORG, "deploy", 5)
    returned = loop.time()
    assert {r.use_count for r in got} == {1}
    # Returned before the save: the file does not have them yet, this store does.
    assert use_counts(store.path_for(ORG)) == {1: (0, None), 2: (0, None)}
    assert {r.use_count for r in await store.list(ORG, 5)} == {1}
    while use_counts(store.path_for(ORG))[1][0] == 0:
        assert loop.time() - returned < 5, "the use counts were never saved"
        await asyncio.sleep(0.005)
    assert loop.time() - returned >= 0.03
    assert use_counts(store.path_for(ORG)) == {1: (1, clock.now), 2: (1, clock.now)}


@pytest.mark.parametrize("save", ["flush", "close"])
async def test_flush_and_close_save_the_use_counts_at_once(make, clock, save):
    store = make(usage_flush_ms=60_000)
    await store.write(ORG, [fact("deploy with care"), fact("rollback plan")])
    clock.advance(5)
    for _ in range(3):
        await store.retrieve(ORG, "deploy", 5)
    assert use_counts(store.path_for(ORG))[1] == (0, None)
    await (store.flush() if save == "flush" else store.close())
    assert use_counts(store.path_for(ORG)) == {1: (3, clock.now), 2: (0, None)}


async def test_a_failed_save_keeps_the_use_counts_for_the_next(make, clock, monkeypatch,
                                                                 caplog):
    store = make(usage_flush_ms=0)
    await store.write(ORG, [fact("deploy with care")])
    apply_bumps = sqlite_sql.apply_bumps

    def failing(conn, pending):  # type: ignore[no-untyped-def]
        raise apsw.IOError("disk I/O error")

    monkeypatch.setattr(sqlite_sql, "apply_bumps", failing)
    clock.advance(5)
    await store.retrieve(ORG, "deploy", 5)
    for _ in range(100):  # the save runs in the background, tries the loop, then the pool
        if "not saved" in caplog.text:
            break
        await asyncio.sleep(0.01)
    assert "use counts of 1 record(s) not saved yet, kept for the next save" in (
        caplog.text)
    assert "deploy with care" not in caplog.text  # counts and paths only, never text
    assert use_counts(store.path_for(ORG)) == {1: (0, None)}
    assert [r.use_count for r in await store.list(ORG, 5)] == [1]  # still counted here
    monkeypatch.setattr(sqlite_sql, "apply_bumps", apply_bumps)
    await store.flush()
    assert use_counts(store.path_for(ORG)) == {1: (1, clock.now)}


def test_usage_flush_ms_is_checked():
    for value in (-1, 60_001, 1.5, True, "50"):
        with pytest.raises(ConfigError, match="usage_flush_ms"):
            SqliteStore("unused", usage_flush_ms=value)  # type: ignore[arg-type]


async def test_retrieval_ranks_on_the_indexed_terms_which_are_the_records(make):
    store = make()
    await store.write(ORG, [
        fact('Le café: NEAR-by OR* "quoted" deploy deploy', keywords=("Big-Deploy", "x  y")),
        fact("deploy\tthe K\u212aelvin build_42 step", keywords=("ünïcode",)),
        fact("deploy nothing else"),
    ])
    conn = read_only(store.path_for(ORG))
    try:
        rows = conn.execute(HITS_SQL, (sqlite_sql.match_expression(["deploy"]),)
                            ).fetchall()
        records = {row[0]: sqlite_sql.record(row) for row in conn.execute(
            f"SELECT {RECORD_COLUMNS} FROM records")}
    finally:
        conn.close()
    entries = sqlite_sql.hit_entries(rows, {})
    assert len(entries) == 3
    for seq, terms, _thread, _last, _item in entries:
        assert terms == engine.record_terms(records[seq], store.analyzer)


async def test_one_save_holds_every_retrieval_of_its_window(make, clock, traced):
    store = make(usage_flush_ms=60_000)
    await store.write(ORG, [fact("deploy with care"), fact("deploy rollback plan")])
    for query in ("deploy", "care", "rollback", "deploy care", "plan"):
        clock.advance(5)
        # A retrieval never waits for the save (a minute away here).
        await asyncio.wait_for(store.retrieve(ORG, query, 5), timeout=5)
    traced.clear()
    await store.flush()
    transactions = [sql for sql, _, _ in traced if sql in ("BEGIN IMMEDIATE", "COMMIT")]
    assert transactions == ["BEGIN IMMEDIATE", "COMMIT"]
    # "deploy with care" was returned 3 times, last at the fourth; the other 4 times.
    assert use_counts(store.path_for(ORG)) == {1: (3, clock.now - 5), 2: (4, clock.now)}


async def test_a_saved_last_use_never_moves_back(make, tmp_path, clock):
    ours = make(tmp_path / "shared", usage_flush_ms=60_000)
    theirs = make(tmp_path / "shared")  # another process on the same directory, in effect
    await ours.write(ORG, [fact("deploy with care")])
    clock.advance(5)
    used_here = clock.now
    await ours.retrieve(ORG, "deploy", 5)  # counted here, not saved yet
    clock.advance(5)
    # Restated elsewhere later, before our count is saved: the later use stands.
    await theirs.write(ORG, [fact("deploy carefully", restates=f"mem:{ORG}:1")])
    assert use_counts(ours.path_for(ORG)) == {1: (1, clock.now)}
    assert [(r.use_count, r.last_used_at) for r in await ours.list(ORG, 5)] == [
        (2, clock.now)]
    await ours.flush()
    assert use_counts(ours.path_for(ORG)) == {1: (2, clock.now)} and clock.now > used_here


async def test_concurrent_retrievals_of_one_scope_count_every_use_in_order(make, clock):
    store = make()
    await store.write(ORG, [fact("the only deploy rule")])
    clock.advance(10)
    got = await asyncio.gather(*(store.retrieve(ORG, "deploy", 5) for _ in range(40)))
    # Each retrieval saw every bump before it: the counts are 1..40, none repeated.
    assert sorted(records[0].use_count for records in got) == list(range(1, 41))
    await store.flush()
    assert use_counts(store.path_for(ORG)) == {1: (40, clock.now)}
    assert [r.use_count for r in await store.list(ORG, 5)] == [40]


async def test_reads_during_a_write_see_all_of_a_batch_or_none(make, clock):
    store = make(cap=1000)
    await store.write(ORG, [fact(f"alpha old {n}") for n in range(10)])
    batch = [fact(f"alpha new {n}") for n in range(40)]

    async def reads() -> list[int]:
        sizes = []
        for _ in range(30):
            sizes.append(len(await store.retrieve(ORG, "alpha", 50)))
            sizes.append(len(await store.list(ORG, 100, query="alpha")))
            await asyncio.sleep(0)
        return sizes

    readers = [asyncio.create_task(reads()) for _ in range(4)]
    await asyncio.sleep(0)
    await store.write(ORG, batch)
    sizes = [size for task in readers for size in await task]
    assert set(sizes) <= {10, 50}
    assert len(await store.retrieve(ORG, "alpha", 50)) == 50


async def test_writes_see_the_bumps_of_earlier_retrievals(make, clock):
    store = make(cap=2)
    await store.write(ORG, [fact("first cache note"), fact("second note")])
    clock.advance(1000)
    await store.retrieve(ORG, "cache", 5)  # seq 1 is now the most recently used
    clock.advance(1000)
    await store.write(ORG, [fact("third note")])  # evicts the least recently used: seq 2
    assert [r.id for r in await store.list(ORG, 5)] == [f"mem:{ORG}:3", f"mem:{ORG}:1"]


async def test_a_cancelled_retrieval_leaves_no_bump_pending(make, clock):
    store = make()
    await store.write(ORG, [fact("deploy rule")])
    task = asyncio.create_task(store.retrieve(ORG, "deploy", 5))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.05)  # let the thread finish if it had started
    await store.close()
    uses = use_counts(store.path_for(ORG))[1][0]
    assert uses in (0, 1)  # either it never ran or its bump was committed at close


async def test_handles_evicted_from_the_cache_keep_their_counts(make, clock):
    store = make(max_open=1, usage_flush_ms=60_000)  # no save but the handles' own
    scopes = [f"user:slack:U{n}" for n in range(3)]
    for scope in scopes:
        await store.write(scope, [fact("shared rule")])
    for round_ in range(1, 4):
        got = await asyncio.gather(*(store.retrieve(scope, "rule", 5) for scope in scopes))
        assert [records[0].use_count for records in got] == [round_] * 3
    await store.close()
    for scope in scopes:
        assert use_counts(store.path_for(scope))[1][0] == 3


async def test_the_token_index_is_kept_in_few_segments(make):
    store = make(cap=1000)
    for n in range(40):
        await store.write(ORG, [fact(f"note {n} about caching")])
        if n % 7 == 0:
            await store.forget(ORG, f"mem:{ORG}:{n + 1}")
    conn = read_only(store.path_for(ORG))
    try:
        assert conn.execute(FTS_SEGMENTS_SQL).fetchall()[0][0] <= MAX_FTS_SEGMENTS
    finally:
        conn.close()
    conn = apsw.Connection(store.path_for(ORG))
    try:
        conn.execute("INSERT INTO records_fts (records_fts, rank)"
                     " VALUES ('integrity-check', 1)")
    finally:
        conn.close()
    assert len(await store.retrieve(ORG, "caching", 50)) == 34


async def test_a_large_index_is_left_to_fts5s_own_merging(make, monkeypatch):
    """Past SMALL_INDEX_ROWS a write never rebuilds the whole index (which rewrote every
    page of it every few writes); FTS5's leveled merging keeps the segments few."""
    monkeypatch.setattr(sqlite_sql, "SMALL_INDEX_ROWS", 30)
    store = make(cap=1000)
    optimized: list[int] = []

    def tracer(_cursor, statement, _bindings):  # type: ignore[no-untyped-def]
        if "'optimize'" in statement:
            optimized.append(len(optimized))
        return True

    with on_every_connection(lambda conn: setattr(conn, "exec_trace", tracer)):
        for n in range(30):  # up to the threshold: rebuilt into one segment now and then
            await store.write(ORG, [fact(f"note {n} about caching")])
        small = len(optimized)
        for n in range(30, 90):  # past it: never rebuilt by a write
            await store.write(ORG, [fact(f"note {n} about caching")])
    assert small > 0 and len(optimized) == small
    conn = read_only(store.path_for(ORG))
    try:
        assert conn.execute(FTS_SEGMENTS_SQL).fetchall()[0][0] <= 16  # FTS5's crisis merge
    finally:
        conn.close()
    # And every answer is the same: the index still holds exactly the active rows.
    assert [r.text for r in await store.retrieve(ORG, "note 77", 1)] == ["note 77 about caching"]


async def test_a_small_scope_is_read_whole_and_answers_as_the_prefilter_does(
        make, tmp_path, clock, traced, monkeypatch):
    """Through SQL, a scope of at most ``SMALL_SCOPE_ROWS`` active rows is read in one
    statement and ranked in memory; the answers (records, use counts, matches) are those of
    the FTS prefilter's path, with the use counts of earlier retrievals still pending."""
    def reads() -> list[str]:
        return ["small" if sql == schema.SMALL_SCOPE_SQL else "prefilter"
                for sql, _, _ in traced if sql == schema.SMALL_SCOPE_SQL or "MATCH" in sql]

    texts = ("deploy with the blue script", "the cache is warm", "deploy only on fridays",
             "warm up the deploy cache", "unrelated words here")
    small, indexed = (make(tmp_path / name, cache_rows=0) for name in ("small", "indexed"))
    for store in (small, indexed):
        await store.write(ORG, [fact(text) for text in texts])
    for query, limit in (("deploy", 2), ("cache deploy", 8), ("fridays", 1), ("nothing", 8),
                         ("deploy warm", 3), ("deploy", 8)):
        clock.advance(DAY_MS)
        answers, paths = [], []
        for store, most in ((small, 6), (indexed, 0)):
            monkeypatch.setattr(sqlite_reads, "SMALL_SCOPE_ROWS", most)
            traced.clear()
            answers.append(await store.search(ORG, query, limit))
            paths.append(reads())
        assert answers[0] == answers[1]
        assert paths == [["small"], ["prefilter"]]
    await small.flush()
    await indexed.flush()
    assert use_counts(small.path_for(ORG)) == use_counts(indexed.path_for(ORG))

    # Grown past the limit, the scope goes through the prefilter from its next read on.
    monkeypatch.setattr(sqlite_reads, "SMALL_SCOPE_ROWS", 6)
    await small.write(ORG, [fact("deploy twice"), fact("deploy thrice")])
    traced.clear()
    assert [hit.record.text for hit in await small.search(ORG, "deploy", 8)][:2] == [
        "deploy thrice", "deploy twice"]
    traced_once = reads()
    await small.search(ORG, "deploy", 8)
    assert traced_once == ["small", "prefilter"] and reads() == ["small", "prefilter",
                                                                 "prefilter"]


async def test_the_vocabulary_table_is_made_once_by_the_first_read_through_the_prefilter(
        make, tmp_path, traced, monkeypatch):
    """A connection makes its FTS5 vocabulary table when a retrieval first counts the
    statistics from it, and only then; what it counts ranks as the rows' own tokens do."""
    texts = ("deploy the blue script", "deploy on fridays", "the cache is warm")
    store, whole = make(tmp_path / "a", cache_rows=0), make(tmp_path / "b", cache_rows=0)
    for each in (store, whole):
        await each.write(ORG, [fact(text) for text in texts])
    traced.clear()
    monkeypatch.setattr(sqlite_reads, "SMALL_SCOPE_ROWS", 0)
    answers = [await store.search(ORG, "deploy cache", 5, bump=False) for _ in range(3)]
    assert [sql for sql, _, _ in traced if sql == sqlite_sql.VOCAB_TABLE_SQL] == [
        sqlite_sql.VOCAB_TABLE_SQL]
    monkeypatch.setattr(sqlite_reads, "SMALL_SCOPE_ROWS", 128)
    assert answers == [await whole.search(ORG, "deploy cache", 5, bump=False)] * 3
