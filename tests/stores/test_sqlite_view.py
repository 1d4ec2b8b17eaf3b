"""The SQLite store's in-memory views: retrievals answered on the event loop, exactly as SQL
would answer them, never from rows another process (or store) has changed since."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scopemem.core import engine
from scopemem.core.ranking import Ranking
from scopemem.errors import ConfigError
from scopemem.stores.base import StoreSettings
from scopemem.stores.sqlite import SqliteStore, fts_tokens, schema
from scopemem.stores.sqlite import files as sqlite_files
from scopemem.stores.sqlite import sql as sqlite_sql
from scopemem.stores.sqlite.view import ScopeView
from scopemem.stores.sqlite.walheader import WalHeader
from tests.conftest import DAY_MS, fact
from tests.stores.conftest import on_every_connection

ORG = "org:acme"


def prefilters(traced: list[tuple[str, tuple, str]]) -> list[str]:
    """The threads that read a scope through SQL for a retrieval, one per statement: the
    FTS prefilter, or a small scope's one read of its rows."""
    return [thread for sql, _, thread in traced
            if "MATCH" in sql or sql == schema.SMALL_SCOPE_SQL]


def use_counts(store: SqliteStore, scope: str) -> dict[str, int]:
    """What the file says, read by a connection of its own."""
    conn = apsw.Connection(store.path_for(scope), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return dict(conn.execute("SELECT id, use_count FROM records"))
    finally:
        conn.close()


# More than the prefilter's 24 distinct tokens, of several lengths, so a long query has
# tokens the prefilter leaves out.
VOCABULARY = [f"{chr(97 + n)}{chr(122 - n)}{'x' * (n % 4)}" for n in range(26)]
NOW = 1_790_000_000_000


def view_row(seq: int, words: list[str], keywords: list[str], touched: int | None,
             thread: str = "t") -> tuple:
    """A row as the view is built from: RECORD_COLUMNS, then the indexed tokens."""
    return (seq, f"mem:{ORG}:{seq}", ORG, "fact", " ".join(words), json.dumps(keywords),
            thread,
            None, NOW - 10 * DAY_MS, touched, 0, None, None, None, "active", "reflection",
            fts_tokens(" ".join(words), keywords))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=8),
                          st.lists(st.sampled_from(VOCABULARY), max_size=2),
                          st.one_of(st.none(), st.integers(0, 9 * DAY_MS)),
                          st.sampled_from(("t", "u"))), max_size=30),
       st.one_of(st.lists(st.sampled_from(VOCABULARY), max_size=8),
                 st.permutations(VOCABULARY)),  # every word: two beyond the prefilter
       st.integers(1, 12), st.randoms())
def test_a_view_ranks_rows_as_the_engine_ranks_them(records, words, limit, rng):
    rows = [view_row(seq, text, keywords, None if used is None else NOW - used, thread)
            for seq, (text, keywords, used, thread) in enumerate(records, start=1)]
    query = " ".join(words)
    ranking = Ranking()  # weighted, no language: the vocabulary is not English
    terms = engine.query_terms(query, ranking.analyzer)
    view = ScopeView(rows, generation=0)
    # The scope's statistics are what counting the rows gives.
    assert view.stats(terms) == engine.scope_stats(terms, (set(row[16].split())
                                                           for row in rows))
    weights = engine.term_weights(terms, view.stats(terms), ranking)
    hits = view.covered(terms, weights)
    # The rows the prefilter would match: those holding a prefilter term.
    prefiltered = [row for row in rows if set(terms.prefilter) & set(row[16].split())]
    assert sorted(hits) == [row[0] for row in prefiltered]
    want = engine.rank_entries(
        [(row[0], set(row[16].split()), row[6], row[8] if row[9] is None else row[9], row[0])
         for row in rng.sample(rows, len(rows))], terms, view.stats(terms), limit, NOW,
        ranking)
    got = [(row[0], match) for row, match in engine.rank_covered(
        hits, sum(weights), limit, NOW, ranking, view.continues, view.entries)]
    assert got == want


async def warm(store: SqliteStore, scope: str = ORG) -> None:
    """Two retrievals through SQL: the second builds the scope's view (when it may have one)."""
    for _ in range(2):
        await store.retrieve(scope, "warm", 1)


async def test_a_scope_read_twice_is_answered_from_memory_as_sql_answers(make, clock,
                                                                         tmp_path, traced):
    cached = make(tmp_path / "cached")
    plain = make(tmp_path / "plain", cache_rows=0)
    batch = [fact("deploy with the blue script"), fact("the cache is warm"),
             fact("deploy only on fridays"), fact("warm up the deploy cache")]
    for store in (cached, plain):
        await store.write(ORG, batch)
        await warm(store)
    assert cached._handles[ORG].view is not None and plain._handles[ORG].view is None
    traced.clear()
    for query, limit in (("deploy", 2), ("cache deploy", 8), ("fridays", 1), ("nothing", 8),
                         ("deploy", 8)):
        clock.advance(DAY_MS)
        got = await cached.retrieve(ORG, query, limit)
        want = await plain.retrieve(ORG, query, limit)
        assert got == want
    # The plain store's retrievals ran the prefilter on its pool; the cached one's none.
    assert len(prefilters(traced)) == 5
    assert all(thread.startswith("scopemem-sqlite") for thread in prefilters(traced))
    await cached.flush()
    await plain.flush()
    assert use_counts(cached, ORG) == use_counts(plain, ORG)


async def test_uses_counted_in_memory_are_saved_to_the_file(make):
    store, before = await saved_view(make)
    assert store._handles[ORG].view is not None
    [got] = await store.retrieve(ORG, "deploy", 5)
    await store.flush()
    after = use_counts(store, ORG)
    assert after[got.id] == before[got.id] + 1 == got.use_count


async def test_concurrent_retrievals_from_memory_count_every_use(make):
    store = make()
    await store.write(ORG, [fact(f"deploy note {n}") for n in range(6)])
    await warm(store)
    assert store._handles[ORG].view is not None
    await store.flush()
    before = use_counts(store, ORG)
    # Rows returned different numbers of times: one save holds different counts.
    answers = await asyncio.gather(*(store.retrieve(ORG, "deploy note", 3) for _ in range(40)),
                                   *(store.retrieve(ORG, "note 1", 1) for _ in range(20)))
    returned: dict[str, int] = {}
    for records in answers:
        for record in records:
            returned[record.id] = returned.get(record.id, 0) + 1
    await store.flush()
    after = use_counts(store, ORG)
    assert sum(returned.values()) == 140 and len(set(returned.values())) > 1
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == returned


async def saved_view(make, **options) -> tuple[SqliteStore, dict[str, int]]:
    """A store whose scope has two records and a view, every use count saved; and the
    counts in the file."""
    store = make(**options)
    await store.write(ORG, [fact("deploy with the blue script"), fact("rollback plan")])
    await warm(store)
    await store.flush()
    return store, use_counts(store, ORG)


def hold_write_lock(store: SqliteStore) -> apsw.Connection:
    """Another connection (another process, in effect) holding the scope file's write lock
    (until ``COMMIT``)."""
    other = apsw.Connection(store.path_for(ORG))
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_save_waiting_on_another_process_never_holds_the_loop(make, traced):
    store, before = await saved_view(make, busy_timeout_ms=3000, usage_flush_ms=0)
    # Another process holds the file's write lock: the save waits for it on the write pool
    # while the loop goes on serving.
    other = hold_write_lock(store)
    [got] = await asyncio.wait_for(store.retrieve(ORG, "deploy", 5), timeout=1)
    loop = asyncio.get_running_loop()
    longest_tick = 0.0
    for _ in range(10):
        started = loop.time()
        await asyncio.sleep(0.02)
        longest_tick = max(longest_tick, loop.time() - started)
    # Not blocked for the 3 s busy timeout, nor for any part of it worth measuring.
    assert longest_tick < 1.5 and use_counts(store, ORG) == before
    other.execute("COMMIT")
    other.close()
    await store.flush()  # waits for the save under way
    assert use_counts(store, ORG)[got.id] == before[got.id] + 1 == got.use_count
    updates = [thread for sql, _, thread in traced if sql.startswith("UPDATE records")]
    assert updates and all(name.startswith("scopemem-sqlite-write") for name in updates)


async def test_flush_waits_for_a_save_already_under_way_on_the_pool(make):
    release, reached = threading.Event(), threading.Event()

    def tracer(_cursor, sql, _bindings):  # type: ignore[no-untyped-def]
        if sql == sqlite_sql.BUMP_SQL and threading.current_thread() is not main:
            reached.set()
            release.wait(5)  # the save has taken the pending bumps and is writing them
        return True

    main = threading.current_thread()
    with on_every_connection(lambda conn: setattr(conn, "exec_trace", tracer)):
        store, before = await saved_view(make, usage_flush_ms=0)
        other = hold_write_lock(store)  # so the save goes to the pool
        [got] = await store.retrieve(ORG, "deploy", 5)
        await asyncio.sleep(0.05)
        other.execute("COMMIT")
        other.close()
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, reached.wait, 5)
        flushing = asyncio.ensure_future(store.flush())
        await asyncio.sleep(0.05)
        assert not flushing.done()  # nothing is pending, but the save is not committed
        release.set()
        await flushing
        assert use_counts(store, ORG)[got.id] == before[got.id] + 1 == got.use_count


async def test_one_background_save_commits_the_uses_of_every_scope_read(make, monkeypatch):
    store = make(usage_flush_ms=50)
    scopes = [f"user:slack:U{n}" for n in range(5)]
    for scope in scopes:
        await store.write(scope, [fact("deploy with the blue script")])
    jobs: list[list[str]] = []
    commit_all = SqliteStore._commit_all

    def spy(self, handles, *args):  # type: ignore[no-untyped-def]
        jobs.append(sorted(key for key, _handle in handles))
        return commit_all(self, handles, *args)

    monkeypatch.setattr(SqliteStore, "_commit_all", spy)
    hits = {scope: (await store.retrieve(scope, "deploy", 5))[0] for scope in scopes}
    saver = store._saver
    assert saver is not None
    await saver  # the one save of this window
    assert jobs == [sorted(scopes)]  # one job on the pool for all five scopes
    for scope, hit in hits.items():
        assert use_counts(store, scope)[hit.id] == hit.use_count == 1


async def test_the_wal_is_checkpointed_as_saves_grow_it(make, monkeypatch):
    monkeypatch.setattr(sqlite_files, "WAL_AUTOCHECKPOINT_PAGES", 4)
    store = make(usage_flush_ms=0)  # a save after each retrieval
    await store.write(ORG, [fact(f"deploy note {n} " + "padding " * 400) for n in range(40)])
    await warm(store)
    wal = store.path_for(ORG) + "-wal"
    start = os.path.getsize(wal)
    for n in range(30):
        await store.retrieve(ORG, f"note {n}", 8)
        await store.flush()
    # Each save went past 4 pages and checkpointed (on the write pool, where it commits),
    # so the log kept being reused from its start instead of growing by every save's
    # pages (30 saves of 8 rows would not fit in what the write left).
    assert os.path.getsize(wal) == start


async def test_a_small_scopes_wal_stays_about_the_size_of_its_database(make):
    """Saves of use counts add pages to the WAL, which a file closed to make room keeps: a
    small scope's log is checkpointed once it holds as many pages as the database (at least
    WAL_MIN_CHECKPOINT_PAGES), not at SQLite's 1,000 pages (4 MB beside a 64 KB scope)."""
    store = make(usage_flush_ms=0, max_open=1)
    await store.write(ORG, [fact(f"deploy note {n}") for n in range(20)])
    wal = store.path_for(ORG) + "-wal"
    page = 4096 + 24  # a WAL frame: a page and its header
    returned = 0
    for n in range(200):
        returned += len(await store.retrieve(ORG, f"deploy note {n % 20}", 8))
        await store.flush()
        if n % 2:
            await store.retrieve("org:other", "deploy", 1)  # closes ORG's file, WAL kept
    limit = sqlite_files.checkpoint_pages(os.path.getsize(store.path_for(ORG)) // 4096)
    assert limit == sqlite_files.WAL_MIN_CHECKPOINT_PAGES
    # Past the limit by at most the one commit that crossed it.
    assert os.path.getsize(wal) <= (limit + 8) * page + 32
    assert sum(r.use_count for r in await store.list(ORG, 20)) == returned  # every use saved


async def test_a_change_made_by_another_store_is_never_answered_from_memory(make, tmp_path):
    ours = make(tmp_path / "shared")
    theirs = make(tmp_path / "shared")  # another process on the same directory, in effect
    await ours.write(ORG, [fact("deploy with the blue script"), fact("deploy on fridays")])
    await warm(ours)
    assert ours._handles[ORG].view is not None
    assert {r.text for r in await ours.retrieve(ORG, "deploy", 8)} == {
        "deploy with the blue script", "deploy on fridays"}

    assert await theirs.forget(ORG, f"mem:{ORG}:1")
    assert {r.text for r in await ours.retrieve(ORG, "deploy", 8)} == {"deploy on fridays"}

    await warm(ours)
    await theirs.write(ORG, [fact("deploy from main only")])
    assert {r.text for r in await ours.retrieve(ORG, "deploy", 8)} == {
        "deploy on fridays", "deploy from main only"}

    await warm(ours)
    await theirs.write(ORG, [fact("pushed at sha 3f9a2c1, all 12 tests passing deploy")])
    await warm(ours)
    assert (await theirs.sweep(ORG)).swept == 1
    assert "pushed" not in " ".join(r.text for r in await ours.retrieve(ORG, "deploy", 8))


async def test_our_own_changes_replace_the_view(make, tmp_path):
    store = make()
    plain = make(tmp_path / "plain", cache_rows=0)
    for each in (store, plain):
        await each.write(ORG, [fact("deploy with the blue script")])
    await warm(store)
    before = store._handles[ORG].view
    for each in (store, plain):
        await each.write(ORG, [fact("deploy from main only"), fact("deploy with the blue script")])
    # The write carried the view on (changed in place: nothing else read it), and it
    # answers exactly as SQL over the same rows does.
    after = store._handles[ORG].view
    assert after is before and len(after) == 2
    assert await store.search(ORG, "deploy blue", 8, bump=False) == await plain.search(
        ORG, "deploy blue", 8, bump=False)
    assert len(await store.retrieve(ORG, "deploy", 8)) == 2
    await warm(store)
    assert await store.forget(ORG, f"mem:{ORG}:1")
    assert [r.text for r in await store.retrieve(ORG, "deploy", 8)] == ["deploy from main only"]


async def test_forgetting_nothing_keeps_the_view(make):
    store = make()
    await store.write(ORG, [fact("deploy with care"), fact("deploy on fridays")])
    await warm(store)
    view = store._handles[ORG].view
    assert view is not None
    for missing in (f"mem:{ORG}:9", f"mem:{ORG}:1x", "mem:org:other:1"):
        assert await store.forget(ORG, missing) is False
    assert store._handles[ORG].view is view
    assert await store.forget(ORG, f"mem:{ORG}:1") is True
    assert await store.forget(ORG, f"mem:{ORG}:1") is False  # forgotten already
    assert [r.text for r in await store.retrieve(ORG, "deploy", 8)] == ["deploy on fridays"]


async def test_a_dry_run_sweep_keeps_the_view_and_a_real_one_drops_it(make):
    store = make()
    await store.write(ORG, [fact("deploy with care"),
                            fact("pushed at sha 3f9a2c1, all 12 tests passing deploy")])
    await warm(store)
    view = store._handles[ORG].view
    assert view is not None
    assert (await store.sweep(ORG, dry_run=True)).swept == 1
    assert store._handles[ORG].view is view
    assert len(await store.retrieve(ORG, "deploy", 8)) == 2  # answered from it, still right
    assert (await store.sweep(ORG)).swept == 1
    assert store._handles[ORG].view is None
    assert [r.text for r in await store.retrieve(ORG, "deploy", 8)] == ["deploy with care"]


async def test_cache_rows_bounds_the_rows_held(make, tmp_path):
    store = make(cache_rows=5)
    await store.write(ORG, [fact(f"deploy note {n}") for n in range(6)])
    for _ in range(3):
        await store.retrieve(ORG, "deploy", 2)
    assert store._handles[ORG].view is None  # 6 active rows never fit in 5

    await store.write("org:small", [fact(f"deploy a{n}") for n in range(3)])
    await store.write("org:other", [fact(f"deploy b{n}") for n in range(3)])
    await warm(store, "org:small")
    await warm(store, "org:other")  # 3 + 3 > 5: the least recently used view goes
    assert store._handles["org:small"].view is None
    assert store._handles["org:other"].view is not None
    assert store._cached_rows == 3


async def test_the_view_dropped_for_room_is_the_least_recently_read(make):
    store = make(cache_rows=5)  # room for two views of two rows
    for scope in ("org:a", "org:b", "org:c"):
        await store.write(scope, [fact("deploy one"), fact("deploy two")])
    await warm(store, "org:a")
    await warm(store, "org:b")
    await store.retrieve("org:a", "deploy", 1)  # answered from a's view: a is the newer
    await warm(store, "org:c")
    views = {scope: store._handles[scope].view is not None for scope in ("org:a", "org:b",
                                                                           "org:c")}
    assert views == {"org:a": True, "org:b": False, "org:c": True}
    assert store._cached_rows == 4
    assert set(store._viewed) == {store._handles["org:a"], store._handles["org:c"]}


async def test_room_for_a_view_drops_the_least_recently_read_until_it_fits_and_no_more(make):
    store = make(cache_rows=6)  # room for three views of two rows
    for scope in ("org:a", "org:b", "org:c"):
        await store.write(scope, [fact("deploy one"), fact("deploy two")])
        await warm(store, scope)
    await store.write("org:d", [fact(f"deploy note {n}") for n in range(4)])
    await warm(store, "org:d")  # 4 rows: a's and b's views go, c's stays
    views = {scope: store._handles[scope].view is not None
             for scope in ("org:a", "org:b", "org:c", "org:d")}
    assert views == {"org:a": False, "org:b": False, "org:c": True, "org:d": True}
    assert store._cached_rows == 6
    assert list(store._viewed) == [store._handles["org:c"], store._handles["org:d"]]


async def test_cache_rows_zero_keeps_every_retrieval_in_sql(make, traced):
    store = make(cache_rows=0)
    await store.write(ORG, [fact("deploy")])
    for _ in range(4):
        await store.retrieve(ORG, "deploy", 1)
    assert len(prefilters(traced)) == 4
    assert store._handles[ORG].view is None


async def test_closing_drops_every_view(make):
    store = make()
    await store.write(ORG, [fact("deploy")])
    await warm(store)
    await store.close()
    assert store._cached_rows == 0


def test_cache_rows_is_a_checked_option(tmp_path, clock):
    def settings(value: object) -> StoreSettings:
        return StoreSettings(name="sqlite", options={"path": str(tmp_path), "cache_rows": value},
                             clock=clock)

    assert SqliteStore.from_settings(settings(0)).cache_rows == 0
    assert SqliteStore.from_settings(settings(1000)).cache_rows == 1000
    for bad in (-1, "many", 1.5, True):
        with pytest.raises(ConfigError, match=r"memory\.stores\.sqlite\.cache_rows"):
            SqliteStore.from_settings(settings(bad))


async def test_every_change_to_the_rows_counts_a_generation_and_a_retrieval_does_not(make):
    store = make()

    def generation() -> int:
        conn = apsw.Connection(store.path_for(ORG), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            return conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
        finally:
            conn.close()

    await store.write(ORG, [fact("deploy with the blue script"), fact("rollback plan"),
                            fact("pushed at sha 3f9a2c1, all 12 tests passing")])
    seen = generation()
    for _ in range(3):
        await store.retrieve(ORG, "deploy", 5)  # usage bumps only
    assert generation() == seen
    for change in (store.write(ORG, [fact("deploy from main only")]),
                   store.forget(ORG, f"mem:{ORG}:2"),
                   store.sweep(ORG)):
        assert await change
        assert generation() == seen + 1
        seen += 1


async def test_a_heavy_query_is_ranked_off_the_event_loop_with_the_same_answer(
        make, monkeypatch):
    import threading

    from scopemem.stores.sqlite import views as sqlite_views

    store = make()
    await store.write(ORG, [fact(f"deploy cache rule {n}") for n in range(40)])
    await warm(store)
    assert store._handles[ORG].view is not None
    threads: list[str] = []
    rank = SqliteStore._rank_view

    def spying(self, *args):
        threads.append(threading.current_thread().name)
        return rank(self, *args)

    monkeypatch.setattr(SqliteStore, "_rank_view", spying)
    light = await store.search(ORG, "deploy cache", 5, bump=False)
    monkeypatch.setattr(sqlite_views, "LOOP_WORK", 10)  # every query is heavy now
    heavy = await store.search(ORG, "deploy cache", 5, bump=False)
    assert heavy == light
    assert threads[0] == threading.current_thread().name  # light: on the loop's thread
    assert len(threads) == 2  # heavy: ranked once, on the read pool
    assert threads[1].startswith("scopemem-sqlite-read")


WORDS = ("deploy", "cache", "vpn", "blue", "green", "lint", "tests", "staging")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(
    st.lists(st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4),
                       st.sampled_from(("t", "u")), st.integers(0, 12),
                       st.sampled_from(("", "supersedes", "restates"))),
             min_size=1, max_size=6),
    st.lists(st.sampled_from(WORDS), min_size=1, max_size=3)), min_size=1, max_size=8))
def test_a_view_carried_across_our_writes_answers_as_sql_does(tmp_path_factory, steps):
    """Writes at a small cap (evictions), supersedes, restates and dedups, each followed by
    a search: the store whose view each write carries on answers exactly like a store that
    reads through SQL, hits and matches alike."""

    async def run() -> None:
        base = tmp_path_factory.mktemp("carried")
        now = [NOW]
        viewed = SqliteStore(base / "viewed", cap=12, clock=lambda: now[0])
        plain = SqliteStore(base / "plain", cap=12, cache_rows=0, clock=lambda: now[0])
        try:
            for batch, query in steps:
                now[0] += 60_000
                for store in (viewed, plain):
                    await warm(store)
                    candidates = []
                    for words, thread, target, pointer in batch:
                        extra = {pointer: f"mem:{ORG}:{target + 1}"} if pointer else {}
                        candidates.append(fact(" ".join(words), source_thread_key=thread,
                                               **extra))
                    await store.write(ORG, candidates)
                got = await viewed.search(ORG, " ".join(query), 8, bump=False)
                want = await plain.search(ORG, " ".join(query), 8, bump=False)
                assert got == want
        finally:
            await viewed.close()
            await plain.close()

    asyncio.run(run())


async def test_a_view_read_on_a_pool_thread_is_carried_on_as_a_copy(make):
    store = make()
    await store.write(ORG, [fact("deploy with the blue script")])
    await warm(store)
    before = store._handles[ORG].view
    before.readers += 1  # as while a heavy ranking reads it on the read pool
    entries = dict(before.entries)
    await store.write(ORG, [fact("deploy from main only")])
    after = store._handles[ORG].view
    assert after is not before and len(after) == 2
    assert before.entries == entries  # the reader's view did not change under it
    before.readers -= 1


async def test_a_write_that_fails_carries_nothing_into_the_view(make, monkeypatch):
    """A batch that fails midway commits nothing, and its rows reach no view: the view is
    carried on only from a committed write."""
    store = make()
    await store.write(ORG, [fact("deploy with the blue script")])
    await warm(store)
    assert store._handles[ORG].view is not None
    insert = SqliteStore._insert_many

    def failing(self, conn, rows, *rest):  # the first row written, then the disk goes
        insert(self, conn, rows[:1], *rest)
        raise apsw.IOError("disk gone mid-batch")

    monkeypatch.setattr(SqliteStore, "_insert_many", failing)
    with pytest.raises(Exception, match="disk gone"):
        await store.write(ORG, [fact("deploy from main only"), fact("deploy on fridays")])
    monkeypatch.setattr(SqliteStore, "_insert_many", insert)
    assert store._handles[ORG].carry is None
    hits = await store.search(ORG, "deploy", 8, bump=False)
    assert [hit.record.text for hit in hits] == ["deploy with the blue script"]
    # And a later committed write is carried on as usual.
    await warm(store)
    await store.write(ORG, [fact("deploy on fridays")])
    assert sorted(h.record.text for h in await store.search(ORG, "deploy", 8, bump=False)) == [
        "deploy on fridays", "deploy with the blue script"]


async def test_a_connection_held_by_a_pool_thread_is_waited_for_on_the_pool(make, traced,
                                                                           monkeypatch):
    """Without the WAL-index header, the view's check reads the scope's own connection only
    when nobody holds it, never waiting on the loop; when a pool thread holds it (a save of
    use counts, say), the check waits behind it on the read pool, and the view still
    answers: no read through SQL."""
    monkeypatch.setattr(WalHeader, "open", classmethod(lambda cls, conn, **_: None))
    store = make()
    await store.write(ORG, [fact("deploy with the blue script"), fact("rollback plan")])
    await warm(store)
    expected = await store.retrieve(ORG, "deploy", 5)
    handle = store._handles[ORG]
    await asyncio.sleep(0)  # a new loop iteration: the view is checked again
    handle.lock.acquire()  # as a pool thread saving use counts holds it
    asyncio.get_running_loop().call_later(0.05, handle.lock.release)
    traced.clear()
    got = await store.retrieve(ORG, "deploy", 5)
    assert [r.id for r in got] == [r.id for r in expected]
    assert prefilters(traced) == []  # from the view
    checks = [thread for sql, _, thread in traced if sql == schema.GENERATION_SQL]
    assert checks and all(name.startswith("scopemem-sqlite-read") for name in checks)
    await asyncio.sleep(0)
    traced.clear()
    await store.retrieve(ORG, "deploy", 5)  # free again: checked on the loop itself
    checks = [thread for sql, _, thread in traced if sql == schema.GENERATION_SQL]
    assert checks == [threading.current_thread().name] and prefilters(traced) == []


def hold_writes(monkeypatch):  # type: ignore[no-untyped-def]
    """Stop every write inside its transaction (its rows not written yet) until released:
    (set once a write is held, the release, the unpatched ``_write_rows``)."""
    inside, release = threading.Event(), threading.Event()
    write_rows = SqliteStore._write_rows

    def held(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        inside.set()
        if not release.wait(30):
            raise AssertionError("never released")
        return write_rows(self, *args, **kwargs)

    monkeypatch.setattr(SqliteStore, "_write_rows", held)
    return inside, release, write_rows


async def test_retrievals_during_our_own_write_are_answered_from_the_view(make, tmp_path,
                                                                          monkeypatch, traced):
    """While this store's write holds the scope's file (its transaction open, the file's
    write lock taken, so nobody else can commit), retrievals are answered from the view,
    as the committed rows stand, without waiting for the write; the uses they count are
    counted once, in the carried view and in the file alike; once the write has returned,
    its rows are in every answer."""
    store = make()
    plain = make(tmp_path / "plain", cache_rows=0)
    for each in (store, plain):
        await each.write(ORG, [fact("deploy with the blue script"), fact("rollback plan")])
    await warm(store)
    inside, release, write_rows = hold_writes(monkeypatch)
    writing = asyncio.ensure_future(store.write(ORG, [fact("deploy from main only")]))
    try:
        while not inside.is_set():
            await asyncio.sleep(0.005)
        traced.clear()
        during = []
        for _ in range(3):  # a new loop iteration each: the view is checked every time
            during.append(await asyncio.wait_for(store.search(ORG, "deploy", 8), 10))
            await asyncio.sleep(0)
        assert not writing.done()  # answered while the write still held the file
        assert prefilters(traced) == []  # from the view, no SQL
        for hits in during:
            assert sorted(hit.record.text for hit in hits) == [
                "deploy with the blue script"]
    finally:
        release.set()
    await writing
    monkeypatch.setattr(SqliteStore, "_write_rows", write_rows)
    for _ in range(3):  # the same retrievals, before the same write, through SQL
        await plain.search(ORG, "deploy", 8)
    await plain.write(ORG, [fact("deploy from main only")])
    after = await store.search(ORG, "deploy", 8)
    expected = await plain.search(ORG, "deploy", 8)
    assert [(hit.record.id, hit.record.use_count) for hit in after] == [
        (hit.record.id, hit.record.use_count) for hit in expected]
    blue = next(hit.record for hit in after if "blue" in hit.record.text)
    assert blue.use_count == 4  # three during the write, one now: each once
    await store.flush()
    assert use_counts(store, ORG)[blue.id] == 4


async def test_a_write_cancelled_while_its_thread_runs_still_carries_the_view_on(
        make, monkeypatch, traced):
    """A write whose caller went away (its request cancelled) still finishes on its thread;
    the view it carries on is installed all the same, so the scope's use counts keep being
    saved in the background rather than held back for a carry nobody applies."""
    store = make(usage_flush_ms=20)
    await store.write(ORG, [fact("deploy with the blue script")])
    await warm(store)
    inside, release, _write_rows = hold_writes(monkeypatch)
    writing = asyncio.ensure_future(store.write(ORG, [fact("deploy from main only")]))
    while not inside.is_set():
        await asyncio.sleep(0.005)
    writing.cancel()
    release.set()
    handle = store._handles[ORG]
    for _ in range(2000):  # bounded by a count: the thread commits, then hands the carry on
        if not handle.lock.locked() and handle.carry is None and handle.view is not None:
            break
        await asyncio.sleep(0.005)
    assert handle.carry is None and handle.view is not None
    traced.clear()
    hits = await store.search(ORG, "deploy", 8)
    assert sorted(hit.record.text for hit in hits) == [
        "deploy from main only", "deploy with the blue script"]
    assert prefilters(traced) == []  # from the carried view
    saver = store._saver
    assert saver is not None
    await saver
    assert all(use_counts(store, ORG)[hit.record.id] == 1 for hit in hits)


async def test_a_view_is_checked_from_the_wal_header_and_sees_every_commit(make, tmp_path,
                                                                           traced):
    """While nobody commits, a view answers with no call into SQLite at all (its check reads
    the WAL-index header from memory); any commit by another store on the same files moves
    the header, and the next retrieval checks the file: a change of rows is answered through
    SQL, a save of use counts only (rows unchanged) from the view again."""
    ours = make(tmp_path / "shared")
    theirs = make(tmp_path / "shared")  # another process on the same directory, in effect
    await ours.write(ORG, [fact("deploy with the blue script"), fact("deploy on fridays")])
    await warm(ours)
    await ours.retrieve(ORG, "deploy", 8)
    await asyncio.sleep(0)
    traced.clear()
    assert len(await ours.retrieve(ORG, "deploy", 8)) == 2
    assert traced == []  # not one statement: checked from the header, ranked from the view

    await theirs.write(ORG, [fact("deploy from main only")])
    await asyncio.sleep(0)
    assert {r.text for r in await ours.retrieve(ORG, "deploy", 8)} == {
        "deploy with the blue script", "deploy on fridays", "deploy from main only"}

    await warm(ours)
    await ours.retrieve(ORG, "deploy", 8)
    await theirs.retrieve(ORG, "deploy", 8)  # their use counts, saved: rows unchanged
    await theirs.flush()
    await asyncio.sleep(0)
    traced.clear()
    assert len(await ours.retrieve(ORG, "deploy", 8)) == 3
    assert prefilters(traced) == []  # the view still answers
    assert [sql for sql, _, _ in traced] == [schema.GENERATION_SQL]  # after one check
    await asyncio.sleep(0)
    traced.clear()
    assert len(await ours.retrieve(ORG, "deploy", 8)) == 3
    assert traced == []  # and the header it checked at is kept


def test_the_wal_header_moves_with_every_commit_and_only_then(tmp_path):
    path = str(tmp_path / "x.db")
    writer = apsw.Connection(path)
    writer.execute("CREATE TABLE t (v)")
    assert WalHeader.open(writer) is None  # not in WAL mode: no wal-index
    assert not os.path.exists(path + "-shm")  # and none made by asking
    writer.execute("PRAGMA journal_mode = WAL").fetchall()
    writer.execute("INSERT INTO t VALUES (0)")
    header = WalHeader.open(writer)
    assert header is not None
    before = header.read()
    assert before is not None and header.read() == before
    reader = apsw.Connection(path)
    assert reader.execute("SELECT count(*) FROM t").fetchall() == [(1,)]
    assert header.read() == before  # a read commits nothing
    seen = {before}
    for n in range(5):
        reader.execute("INSERT INTO t VALUES (?)", (n,))  # another connection's commits too
        now = header.read()
        assert now is not None and now not in seen  # each commit, a header never seen
        seen.add(now)
    writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    writer.execute("INSERT INTO t VALUES (9)")  # the WAL restarts from its start
    assert header.read() not in seen
    header.close()
    assert header.read() is None  # closed: unknown, so the caller probes
    reader.close()
    writer.close()


LOCK_PROBE = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.set_busy_timeout(0)
try:
    conn.execute("BEGIN IMMEDIATE")
except apsw.BusyError:
    print("busy")
else:
    print("began")
"""


# Another process asks whether it could take the -shm file's "dead man switch" byte (128 in
# SQLite's unix VFS) for itself, as the first connection to a file does before it truncates
# and rebuilds the shared memory: it may not while any process has the file open.
DMS_PROBE = r"""
import fcntl, os, struct, sys
fd = os.open(sys.argv[1] + "-shm", os.O_RDONLY)
fmt = "hhqqi"  # struct flock: type, whence, start, length, pid
asked = struct.pack(fmt, fcntl.F_WRLCK, os.SEEK_SET, 128, 1, 0).ljust(32, b"\0")
kind = struct.unpack(fmt, fcntl.fcntl(fd, fcntl.F_GETLK, asked)[:struct.calcsize(fmt)])[0]
print("free" if kind == fcntl.F_UNLCK else "held")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="struct flock as on Linux")
async def test_a_scope_checked_from_its_wal_header_keeps_its_shared_memory_claimed(make):
    """While a store has a scope open, and checks its view from the WAL-index header, the
    process keeps SQLite's shared lock on the -shm file: another process opening the file
    must not take it for the first opener and rebuild the shared memory under it (SQLite's
    own pages there would be truncated away)."""
    store = make()
    await store.write(ORG, [fact("deploy with the blue script")])
    await warm(store)
    handle = store._handles[ORG]
    assert handle.wal is not None and handle.view is not None
    assert len(await store.retrieve(ORG, "deploy", 5)) == 1
    other = subprocess.run([sys.executable, "-c", DMS_PROBE, handle.path],
                           capture_output=True, text=True, timeout=60)
    assert other.stdout.strip() == "held", other.stderr
    await store.close()


async def test_reading_the_wal_header_leaves_sqlites_locks_in_place(make):
    """Finding a scope's WAL-index header opens and closes no descriptor of its -shm file:
    closing one would drop every POSIX lock the process holds on that file, the write lock
    among them, and another process could begin writing while this one commits."""
    store = make()
    await store.write(ORG, [fact("deploy with the blue script")])
    with store._connection(ORG, create=False) as handle:
        assert handle.wal is None  # not found yet
        handle.conn.execute("BEGIN IMMEDIATE")  # this process holds the write lock
        try:
            assert handle.wal_header(held=True) is not None
            other = subprocess.run([sys.executable, "-c", LOCK_PROBE, handle.path],
                                   capture_output=True, text=True, timeout=60)
        finally:
            handle.conn.execute("ROLLBACK")
    assert other.stdout.strip() == "busy", other.stderr
    await store.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
async def test_the_wal_header_maps_hold_no_file_descriptor(make, tmp_path, monkeypatch):
    """An open scope holds three descriptors (database, WAL, shared memory), which the
    open-file budget counts on; checking its views from the WAL-index header adds none."""
    scopes = [f"user:slack:U{n}" for n in range(12)]

    async def descriptors(store: SqliteStore) -> int:
        for scope in scopes:
            await store.write(scope, [fact("deploy with the blue script")])
            await warm(store, scope)
            await store.retrieve(scope, "deploy", 5)
        return len(os.listdir("/proc/self/fd"))

    before = len(os.listdir("/proc/self/fd"))
    mapped = make(tmp_path / "mapped")
    with_maps = await descriptors(mapped) - before
    assert all(mapped._handles[scope].wal is not None for scope in scopes)
    await mapped.close()
    monkeypatch.setattr(WalHeader, "open", classmethod(lambda cls, conn, **_: None))
    before = len(os.listdir("/proc/self/fd"))
    plain = make(tmp_path / "plain")
    without = await descriptors(plain) - before
    assert all(plain._handles[scope].wal is None for scope in scopes)
    await plain.close()
    assert with_maps == without


async def test_a_small_scopes_first_retrieval_builds_its_view_while_the_budget_has_room(make):
    """Read whole through SQL, a small scope gets its view from its first retrieval while
    the budget has room for it unused; when it would have to drop another scope's view, it
    waits for its second retrieval, as a scope read through the prefilter does."""
    store = make(cache_rows=5)
    await store.write("org:a", [fact(f"deploy note {n}") for n in range(3)])
    await store.write("org:b", [fact(f"deploy memo {n}") for n in range(3)])
    assert len(await store.retrieve("org:a", "deploy", 5)) == 3
    assert store._handles["org:a"].view is not None
    assert len(await store.retrieve("org:b", "deploy", 5)) == 3
    assert store._handles["org:b"].view is None
    assert store._handles["org:a"].view is not None
    assert len(await store.retrieve("org:b", "deploy", 5)) == 3
    assert store._handles["org:b"].view is not None
    assert store._handles["org:a"].view is None
