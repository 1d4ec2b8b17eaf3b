"""The SQLite store over shared files: what its layout promises beyond the contract suite
(which runs against it as ``sqlite``) and the equivalence machine
(``test_equivalence.SharedStoresAgree``)."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from pathlib import Path

import apsw
import pytest

from scopemem.core.records import Candidate, Kind
from scopemem.errors import ConfigError, ScopeLimitReached, StoreError
from scopemem.options import IGNORED
from scopemem.stores.base import StoreSettings
from scopemem.stores.sqlite import from_settings as sqlite_store
from scopemem.stores.sqlite_shared import SharedSqliteStore, index, schema
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared.options import USAGE_FLUSH_MS_MAX
from scopemem.stores.sqlite_shared.pools import POOL_THREADS
from tests.conftest import FakeClock
from tests.stores.shared_postings import CONTINUES, scope_documents


def fact(text: str) -> Candidate:
    return Candidate(kind=Kind.FACT, text=text, source_thread_key="slack:C1/1")


def db_files(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".db"))


async def test_every_scope_lives_in_one_of_a_fixed_number_of_files(tmp_path, clock: FakeClock):
    data = tmp_path / "data"
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        assert await store.retrieve("user:slack:U0", "deploy", 5) == []
        assert not data.exists()  # a read never creates a file
        keys = [f"user:slack:U{n:04d}" for n in range(300)]
        for key in keys:
            await store.write(key, [fact(f"deploy notes of {key}")])
        assert len(db_files(data)) == schema.SHARDS
        for key in keys[::37]:
            hits = await store.retrieve(key, "deploy notes", 5)
            assert [r.scope_key for r in hits] == [key]
    finally:
        await store.close()


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
async def test_descriptors_follow_the_shards_not_the_scopes(tmp_path, clock: FakeClock):
    before = open_descriptors()
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off")
    # Each pool thread's connection to a shard holds the database and its WAL; the shared
    # memory is one descriptor per shard for the process.
    bound = schema.SHARDS * (2 * 2 * POOL_THREADS + 1)
    try:
        for n in range(1200):
            key = f"user:slack:U{n:04d}"
            await store.write(key, [fact(f"vpn setup {n}")])
            await store.retrieve(key, "vpn setup", 3)
            if n in (40, 400, 1199):
                assert open_descriptors() - before <= bound, n
    finally:
        await store.close()
    assert open_descriptors() <= before


async def test_scopes_in_one_file_never_see_each_other(tmp_path, clock: FakeClock):
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off", shards=1)
    keys = ["user:a", "user:a'--", "user:a%", "user:a_", "user:a\\", "user:ab", "repo:a/b"]
    try:
        for key in keys:
            await store.write(key, [fact(f"the staging password rotates on monday {key}"),
                                    fact("the staging password rotates on monday")])
        for key in keys:
            hits = await store.retrieve(key, "staging password monday", 10)
            assert {r.scope_key for r in hits} == {key} and len(hits) == 2
            listed = await store.list(key, 10)
            assert {r.scope_key for r in listed} == {key}
        victim = keys[1]
        one = (await store.list(victim, 1))[0]
        assert await store.forget(keys[0], one.id) is False  # another scope's id
        assert await store.forget(victim, one.id) is True
        assert len(await store.list(keys[0], 10)) == 2
    finally:
        await store.close()


async def write_one(data: Path, clock: FakeClock) -> str:
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        await store.write("org:acme", [fact("the deploy runs on tuesdays")])
        return schema.shard_file_name(schema.shard_of("org:acme"))
    finally:
        await store.close()


async def test_a_shard_copied_over_another_shards_name_is_refused(tmp_path, clock: FakeClock):
    data = tmp_path / "data"
    name = await write_one(data, clock)
    index = schema.shard_of("org:acme")
    other_index = (index + 1) % schema.SHARDS
    other_key = next(f"org:k{n}" for n in range(10_000)
                     if schema.shard_of(f"org:k{n}") == other_index)
    shutil.copy(data / name, data / schema.shard_file_name(other_index))
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        with pytest.raises(StoreError, match=f"holds shard {index} of {schema.SHARDS}"):
            await store.retrieve(other_key, "deploy", 3)
        with pytest.raises(StoreError, match="holds shard"):
            await store.write(other_key, [fact("nothing lands here")])
        # Every other shard keeps working.
        assert [r.text for r in await store.retrieve("org:acme", "deploy", 3)] == [
            "the deploy runs on tuesdays"]
    finally:
        await store.close()


async def test_another_applications_database_is_refused_and_kept(tmp_path, clock: FakeClock):
    data = tmp_path / "data"
    data.mkdir()
    path = data / schema.shard_file_name(schema.shard_of("org:acme"))
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
    conn.execute("INSERT INTO invoices (total) VALUES (12.5)")
    conn.close()
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        with pytest.raises(StoreError, match="another application"):
            await store.write("org:acme", [fact("nothing lands here")])
    finally:
        await store.close()
    conn = apsw.Connection(str(path))
    assert conn.execute("SELECT total FROM invoices").fetchall() == [(12.5,)]
    assert conn.execute("SELECT count(*) FROM sqlite_master").fetchall() == [(1,)]
    conn.close()


async def test_a_shard_of_a_newer_schema_is_refused(tmp_path, clock: FakeClock):
    data = tmp_path / "data"
    name = await write_one(data, clock)
    conn = apsw.Connection(str(data / name))
    conn.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    conn.close()
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        with pytest.raises(StoreError, match="newer scopemem"):
            await store.retrieve("org:acme", "deploy", 3)
    finally:
        await store.close()


async def test_concurrent_writers_get_contiguous_ids(tmp_path, clock: FakeClock):
    data = tmp_path / "data"
    first = SharedSqliteStore(data, clock=clock, synchronous="off")
    second = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        await asyncio.gather(*(store.write("org:acme", [fact(f"note {n} of writer {i}")])
                               for n in range(40) for i, store in enumerate((first, second))))
        rows = await first.list("org:acme", 100)
        assert sorted(int(r.id.rsplit(":", 1)[1]) for r in rows) == list(range(1, 81))
    finally:
        await first.close()
        await second.close()


async def test_max_scopes_counts_scopes_across_every_shard(tmp_path, clock: FakeClock):
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off", max_scopes=5)
    try:
        for n in range(5):
            await store.write(f"user:slack:U{n}", [fact("the vpn needs a token")])
        with pytest.raises(ScopeLimitReached, match="max_scopes = 5"):
            await store.write("user:slack:U9", [fact("one scope too many")])
        assert await store.retrieve("user:slack:U9", "scope", 3) == []
        await store.write("user:slack:U0", [fact("existing scopes take writes")])
    finally:
        await store.close()


def settings_with(tmp_path: Path, **options: object) -> StoreSettings:
    return StoreSettings(name="sqlite", options={"path": str(tmp_path / "d"), **options})


async def test_the_layout_option_chooses_the_shared_files(tmp_path, caplog, monkeypatch):
    """``layout = "shared"`` and no ``layout`` open the shared files; ``layout = "file"``,
    the retired layout, is warned about once (not fatal) and opens them all the same."""
    import scopemem.stores.sqlite_shared.options as sqlite_options

    monkeypatch.setattr(sqlite_options, "_warned", set())
    store = sqlite_store(settings_with(tmp_path, layout="shared"))
    try:
        assert isinstance(store, SharedSqliteStore)
        assert store.directory == str(tmp_path / "d")
        await store.write("org:acme", [fact("the deploy checklist lives in the wiki")])
    finally:
        await store.close()
    assert caplog.records == []
    for options in ({}, {"layout": "file"}, {"layout": "file"}):
        store = sqlite_store(settings_with(tmp_path, **options))
        try:
            assert isinstance(store, SharedSqliteStore)
            assert [r.text for r in await store.list("org:acme", 5)] == [
                "the deploy checklist lives in the wiki"]
        finally:
            await store.close()
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warning.getMessage().startswith(
        'memory.stores.sqlite.layout = "file": the file layout (a SQLite file per scope) is'
        " retired")
    with pytest.raises(ConfigError, match=r"memory\.stores\.sqlite\.layout"):
        sqlite_store(settings_with(tmp_path, layout="fast"))
    with pytest.raises(ConfigError, match=r"memory\.stores\.sqlite\.shards"):
        sqlite_store(settings_with(tmp_path, layout="shared", shards=4))


async def test_reads_and_writes_look_up_only_the_rows_they_need(tmp_path, clock: FakeClock):
    """A retrieval's postings and a write's dedup rows are found by key, never by scanning
    every posting or row of the scope (SQLite's own plan, which a bare JOIN or an OR of the
    two lookups turns into such a scan)."""
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off")
    try:
        await store.write("org:acme", [fact("the deploy runs on tuesdays")])
    finally:
        await store.close()
    path = tmp_path / "data" / schema.shard_file_name(schema.shard_of("org:acme"))
    conn = apsw.Connection(str(path))
    try:
        def plan(statement: str) -> list[str]:
            return [row[3] for row in conn.execute(
                "EXPLAIN QUERY PLAN " + statement,
                {"scope": "org:acme", "terms": '["deploy"]', "seqs": "[1]", "norms": '["x"]',
                 "bumps": '[["org:acme", 1, 1, 5]]', "scopes": '["org:acme"]'})]

        # A term's postings are a MATCH of the token index, a term at a time.
        assert "SCAN t VIRTUAL TABLE INDEX 0:M1" in plan(st.STATE_POSTINGS)
        batch = plan(st.BATCH_ROWS)
        assert any("records_active_key (scope_key=? AND <expr>=?)" in step for step in batch)
        assert not any(step.endswith("USING PRIMARY KEY (scope_key=?)") for step in batch)
        # A save of use counts looks up each row it bumps, never every row of the scope.
        bump = plan(st.BUMP)
        assert any("records USING PRIMARY KEY (scope_key=? AND seq=?)" in step for step in bump)
        assert not any(step.endswith("USING PRIMARY KEY (scope_key=?)") for step in bump)
        assert not any(step.startswith("SCAN records") for step in bump)
        # And each scope's counter by its key.
        assert any("scopes USING PRIMARY KEY (scope_key=?)" in step
                   for step in plan(st.NEXT_USES))
    finally:
        conn.close()


async def test_a_change_another_process_commits_is_seen_by_the_next_read_of_a_copy(
        tmp_path, clock: FakeClock):
    """A scope answered from its copy in memory: a write and a forget committed by another
    store on the same directory (its own connections, as another process's) are seen by
    the very next retrieval, which drops the copy it found out of date."""
    data = tmp_path / "data"
    store = SharedSqliteStore(data, clock=clock, synchronous="off", cache_min_postings=0)
    store._copies.interval = 0
    elsewhere = SharedSqliteStore(data, clock=clock, synchronous="off")
    scope = "repo:acme/widgets"

    async def copied() -> None:  # read twice at one counter: copied, then answering
        for _ in range(2):
            await store.retrieve(scope, "runner docker", 5)
        await store._copies.settled()
        assert store._copies.latest(scope) is not None
        answered = store._copies.answered
        await store.retrieve(scope, "runner docker", 5)
        assert store._copies.answered == answered + 1

    try:
        await store.write(scope, [fact(f"the runner {n} caches docker layers")
                                  for n in range(30)])
        await copied()
        await elsewhere.write(scope, [fact("the arm machines run the nightly builds")])
        hits = await store.retrieve(scope, "arm machines nightly", 1)
        assert [r.text for r in hits] == ["the arm machines run the nightly builds"]
        assert store._copies.latest(scope) is None  # found out of date, dropped
        await copied()
        [first] = await store.retrieve(scope, "runner docker", 1)
        assert await elsewhere.forget(scope, first.id)
        assert first.id not in [r.id for r in await store.retrieve(scope, "runner docker", 40)]
    finally:
        await store.close()
        await elsewhere.close()


async def test_every_use_shows_once_while_saves_and_writes_commit_beside_reads(
        tmp_path, clock: FakeClock):
    """Uses saved in the background (at once) and by writes to the same scope and shard,
    on the write pool, while one client retrieves over and over on the read pool: each of
    its answers shows each record's count one above its last answer, never a use missing
    (between leaving the pending set and the save's commit) or counted twice."""
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off", shards=1,
                              usage_flush_ms=0)
    scope = "org:acme"
    try:
        await store.write(scope, [fact(f"the deploy checklist item {n}") for n in range(5)])
        stop = asyncio.Event()

        async def writer() -> None:
            n = 0
            while not stop.is_set():
                await store.write(scope if n % 2 else "org:other",
                                  [fact(f"an unrelated vpn note {n}")])
                n += 1

        task = asyncio.create_task(writer())
        seen: dict[str, int] = {}
        try:
            for _ in range(150):
                for record in await store.retrieve(scope, "deploy checklist item", 5):
                    assert record.use_count == seen.get(record.id, 0) + 1, record
                    seen[record.id] = record.use_count
        finally:
            stop.set()
            await task
        assert len(seen) == 5
        await store.flush()
        listed = {r.id: r.use_count for r in await store.list(scope, 100) if r.id in seen}
        assert listed == seen
    finally:
        await store.close()


async def test_records_in_memory_count_each_use_once_across_a_write_that_changes_them(
        tmp_path, clock: FakeClock):
    """Answers from a scope's copy, a write that deduplicates onto a record retrieved just
    before and answers after it: every answer is the in-process store's, use counts
    included."""
    from scopemem.stores.memory import InMemoryStore

    memory = InMemoryStore(clock=clock)
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off",
                              cache_min_postings=0)
    store._copies.interval = 0
    scope = "org:acme"
    texts = [f"the staging cluster {word} rotates weekly" for word in
             ("vpn", "dns", "ci", "cache", "proxy")]
    try:
        async def both(call):  # type: ignore[no-untyped-def]
            expected = await call(memory)
            assert await call(store) == expected
            return expected

        await both(lambda s: s.write(scope, [fact(text) for text in texts]))
        for round_ in range(4):
            for _ in range(3):
                await both(lambda s: s.retrieve(scope, "staging cluster vpn", 2))
                await store._copies.settled()
            clock.advance(1000)
            # The same text again: a dedup that counts one more use of that record.
            await both(lambda s, r=round_: s.write(scope, [fact(texts[r % 2])]))
            await both(lambda s: s.retrieve(scope, "staging cluster vpn", 3))
        assert store._copies.answered > 5  # from the copies, checked at each write
    finally:
        await memory.close()
        await store.close()


# Schema version 3's token index: rows of postings, with a large scope's recent changes in
# side tables until merged.
_VERSION_3 = (
    "CREATE TABLE postings (scope_key TEXT NOT NULL, term TEXT NOT NULL, seq INTEGER NOT NULL,"
    " continues INTEGER NOT NULL, PRIMARY KEY (scope_key, term, seq)) WITHOUT ROWID;"
    "CREATE TABLE fresh_postings (scope_key TEXT NOT NULL, seq INTEGER NOT NULL,"
    " term TEXT NOT NULL, continues INTEGER NOT NULL, PRIMARY KEY (scope_key, seq, term))"
    " WITHOUT ROWID;"
    "CREATE TABLE stale_postings (scope_key TEXT NOT NULL, seq INTEGER NOT NULL,"
    " tokens TEXT NOT NULL, PRIMARY KEY (scope_key, seq)) WITHOUT ROWID;"
    "DROP TABLE terms_fts; DROP INDEX scopes_sid; ALTER TABLE scopes DROP COLUMN sid;"
    "ALTER TABLE scopes ADD COLUMN fresh_from INTEGER; PRAGMA user_version = 3;")


async def test_a_version_3_shard_moves_its_postings_into_the_token_index(
        tmp_path, clock: FakeClock):
    """A shard written before the token index: its postings (less the stale rows', with the
    fresh ones) become the documents of the index, each scope under its own id, continuing
    rows marked, and the old tables go; every record stays."""
    data = tmp_path / "data"
    # One shard, so both scopes are in it.
    store = SharedSqliteStore(data, clock=clock, synchronous="off", shards=1)
    scopes = ("org:acme", "repo:acme/widgets")
    try:
        for scope in scopes:
            await store.write(scope, [fact(f"the {word} deploy runs on tuesdays")
                                      for word in ("nightly", "weekly", "hourly", "canary")])
    finally:
        await store.close()
    path = data / schema.shard_file_name(0, 1)
    conn = apsw.Connection(str(path))
    conn.execute(_VERSION_3)
    for scope in scopes:
        rows = dict(conn.execute("SELECT seq, tokens FROM records WHERE scope_key = ?",
                                 (scope,)))
        # The first scope's rows 1-2 merged, row 3 fresh, row 4 evicted while its postings
        # were merged (stale); the other's all merged.
        for seq, tokens in rows.items():
            table = "fresh_postings" if seq == 3 and scope == scopes[0] else "postings"
            conn.executemany(f"INSERT INTO {table} (scope_key, term, seq, continues)"
                             " VALUES (?, ?, ?, ?)",
                             [(scope, term, seq, int(seq > 1)) for term in tokens.split()])
    scope = scopes[0]
    conn.execute("INSERT INTO stale_postings VALUES (?, 4, ?)", (scope, rows[4]))
    conn.execute("UPDATE records SET status = 'evicted', retired_at = 1 WHERE seq = 4"
                 " AND scope_key = ?", (scope,))
    conn.execute("UPDATE scopes SET active = 3, fresh_from = 3 WHERE scope_key = ?", (scope,))
    conn.close()
    again = SharedSqliteStore(data, clock=clock, synchronous="off", shards=1)
    try:
        assert len(await again.retrieve(scopes[1], "canary deploy", 5)) == 4
        hits = await again.retrieve(scope, "canary deploy", 5)
        assert "the canary deploy runs on tuesdays" not in [r.text for r in hits]
        assert {r.text for r in hits} == {f"the {word} deploy runs on tuesdays"
                                          for word in ("nightly", "weekly", "hourly")}
        await again.write(scope, [fact("the build cache lives on the runner")])
        assert [r.text for r in await again.retrieve(scope, "build cache", 5)] == [
            "the build cache lives on the runner"]
    finally:
        await again.close()
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(schema.SCHEMA_VERSION,)]
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert not tables & {"postings", "fresh_postings", "stale_postings"}
        documents = scope_documents(conn, scope)
        active = dict(conn.execute("SELECT seq, tokens FROM records WHERE scope_key = ?"
                                   " AND status = 'active'", (scope,)))
        assert {seq: terms - {CONTINUES} for seq, terms in documents.items()} == {
            seq: set(tokens.split()) for seq, tokens in active.items()}
        # Rows 2 and 3 continued row 1's thread; row 5 continues the evicted row 4's.
        assert {seq for seq, terms in documents.items() if CONTINUES in terms} == {2, 3, 5}
        other = scope_documents(conn, scopes[1])
        assert len(other) == 4 and not other.keys() & {0}
        sids = [sid for (sid,) in conn.execute("SELECT sid FROM scopes ORDER BY sid")]
        assert len(sids) == 2 == len(set(sids)) and all(sid > 0 for sid in sids)
    finally:
        conn.close()


async def test_a_version_7_shard_keys_its_dedup_index_by_a_prefix_and_dedups_alike(
        tmp_path, clock: FakeClock):
    """A shard of version 7 (its dedup index over the whole normalized text) opens at the
    current version with the index keyed by the text's prefix; a write still finds the
    records it repeats, and two texts sharing a long prefix stay two records."""
    data = tmp_path / "data"
    name = await write_one(data, clock)
    conn = apsw.Connection(str(data / name))
    conn.execute("DROP INDEX records_active_key; CREATE INDEX records_active_norm ON records"
                 " (scope_key, norm) WHERE status = 'active'; PRAGMA user_version = 7;")
    conn.close()
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        repeated = await store.write("org:acme", [fact("The deploy  runs on Tuesdays")])
        assert (repeated.inserted, repeated.deduped) == (0, 1)
        longer = await store.write("org:acme", [fact("the deploy runs on tuesdays at noon")])
        assert (longer.inserted, longer.deduped) == (1, 0)
        again = await store.write("org:acme", [fact("the deploy runs on tuesdays at noon")])
        assert (again.inserted, again.deduped) == (0, 1)
        assert len(await store.retrieve("org:acme", "deploy tuesdays", 5)) == 2
    finally:
        await store.close()
    conn = apsw.Connection(str(data / name))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(schema.SCHEMA_VERSION,)]
        indexes = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "records_active_key" in indexes and "records_active_norm" not in indexes
    finally:
        conn.close()


async def test_a_write_runs_as_many_statements_whatever_its_size(tmp_path, clock: FakeClock,
                                                                 monkeypatch: pytest.MonkeyPatch):
    """Rows and postings go in as one JSON array a statement: each statement is a moment
    the writing thread gives up the GIL and must win it back from a busy event loop, so a
    statement a row made a write of 50 wait seconds beside busy retrievals."""
    executed: list[str] = []

    def hook(conn: apsw.Connection) -> None:
        def trace(_cursor: object, sql: str, _bindings: object) -> bool:
            executed.append(sql)
            return True
        conn.exec_trace = trace

    monkeypatch.setattr(apsw, "connection_hooks", [*apsw.connection_hooks, hook])
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off", cap=80)
    scope = "repo:acme/widgets"
    try:
        counts = []
        # 50 new rows; the same 50 again (each row restated); 50 more (evicting past the
        # cap); one row.
        for size in (1, 50, 50, 51, 1):
            executed.clear()
            await store.write(scope, [fact(f"runner {size} note {n} caches layers")
                                      for n in range(size)])
            counts.append(len(executed))
        # A few more when a write evicts, never one more a row (the first write also
        # makes the shard's tables).
        assert max(counts[1:]) <= 24, counts
    finally:
        await store.close()


async def test_a_write_leaves_the_checkpoint_it_makes_due_to_its_thread_after_it(
        tmp_path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch):
    """A commit that takes the WAL past its checkpoint threshold does not wait for the
    checkpoint: it runs on the shard's writing thread after the write returned, before the
    shard's next write, and the WAL stays as bounded as with SQLite's own checkpoints."""
    from scopemem.stores.sqlite_shared import pools, writes

    monkeypatch.setattr(apsw, "connection_hooks",
                        [*apsw.connection_hooks, lambda conn: conn.wal_autocheckpoint(8)])
    inside, ran = threading.Event(), []
    write, checkpoint = writes.write, pools.checkpoint

    def watched_write(*args: object, **kwargs: object) -> object:
        inside.set()
        try:
            return write(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            inside.clear()

    def watched_checkpoint(conn: object) -> None:
        ran.append(inside.is_set())
        checkpoint(conn)

    monkeypatch.setattr(writes, "write", watched_write)
    monkeypatch.setattr(pools, "checkpoint", watched_checkpoint)
    data = tmp_path / "data"
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    scope = "repo:acme/widgets"
    wal = data / f"{schema.shard_file_name(schema.shard_of(scope))}-wal"
    sizes = []
    try:
        for n in range(40):
            await store.write(scope, [fact(f"note {n}.{k} on runner pool {k * n}")
                                      for k in range(20)])
            sizes.append(wal.stat().st_size)
    finally:
        await store.close()
    assert len(ran) >= 5 and not any(ran)  # run, and never inside a write
    # The writes append about 240 pages to the log; checkpointed, it is reused from its
    # start, so the file stays at a few commits past the threshold.
    assert max(sizes) <= 100 * 4096


async def test_deleting_a_scope_leaves_nothing_of_it_and_never_gives_its_ids_again(
        tmp_path, clock: FakeClock):
    """``delete_scope``: every record of the scope, active or not, its token index entries
    and its counters go, in one transaction, with no byte of its text left in the shard;
    the other scopes of the shard are untouched; a copy in memory answers nothing after it;
    and the scope's next record gets an id after every one it gave before."""
    data = tmp_path / "data"
    store = SharedSqliteStore(data, clock=clock, synchronous="off", shards=1)
    gone, kept = "user:slack:U0GONE", "user:slack:U0KEPT"
    try:
        await store.write(gone, [fact(f"the quokkaword runner {n} caches layers")
                                 for n in range(30)])
        first = await store.list(gone, 50)
        assert await store.forget(gone, first[0].id)  # a forgotten row goes too
        await store.write(kept, [fact("the deploy runs on tuesdays")])
        for _ in range(3):  # copied into memory
            assert await store.retrieve(gone, "quokkaword runner", 5)
        assert await store.delete_scope(gone) == 30
        assert await store.delete_scope("user:slack:U0NEVER") == 0
        assert await store.retrieve(gone, "quokkaword runner", 5) == []
        assert await store.list(gone, 50) == []
        assert [r.text for r in await store.retrieve(kept, "deploy tuesdays", 5)] == [
            "the deploy runs on tuesdays"]
        await store.write(gone, [fact("a new note on the build cache")])
        (new,) = await store.list(gone, 5)
        assert new.id == f"mem:{gone}:31"
        assert {(row.name, row.value) for row in await store.read_counts([gone])} == {
            ("inserted", 1)}
    finally:
        await store.close()
    path = data / schema.shard_file_name(0, 1)
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("SELECT seq FROM records WHERE scope_key = ?",
                            (gone,)).fetchall() == [(31,)]
        assert set(scope_documents(conn, gone)) == {31}
        assert set(scope_documents(conn, kept)) == {1}
    finally:
        conn.close()
    assert b"quokkaword" not in path.read_bytes()


async def test_the_shared_layout_honours_cache_rows_and_warns_of_the_file_layouts_options(
        tmp_path, caplog, monkeypatch):
    """``cache_rows`` bounds the shared layout's copies in memory too (0: none), at twenty
    postings a row; a mistyped value is an error naming its key. The file layout's own
    options have no effect here: set, each is warned about by its key and ignored (not
    fatal, and not listed among the settings in effect), whatever its value, once a
    process however often the settings are read (a command checks them, then builds)."""
    import scopemem.stores.sqlite_shared.options as sqlite_options

    for rows, budget in ((0, 0), (1_000, 20_000), (None, 1_000_000)):
        options = {"layout": "shared"} if rows is None else {"layout": "shared",
                                                            "cache_rows": rows}
        store = sqlite_store(settings_with(tmp_path, **options))
        try:
            assert isinstance(store, SharedSqliteStore)
            assert store._copies.budget == budget
            assert store._copies.enabled is (budget > 0)
        finally:
            await store.close()
    with pytest.raises(ConfigError, match=r"memory\.stores\.sqlite\.cache_rows"):
        sqlite_store(settings_with(tmp_path, layout="shared", cache_rows=-1))
    for key, value in (("max_open_connections", 0), ("rank_processes", "two"),
                       ("rank_processes", 2)):
        caplog.clear()
        monkeypatch.setattr(sqlite_options, "_warned", set())
        for _ in range(2):
            settings = settings_with(tmp_path, **{key: value})
            store = sqlite_store(settings)
            await store.close()
            assert isinstance(store, SharedSqliteStore)
            assert settings.effective.get(key, IGNORED) is IGNORED  # not in effect
        [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
        assert warning.getMessage().startswith(
            f"memory.stores.sqlite.{key}: has no effect in the shared layout")




def _scope_in(shard: int, avoid: tuple[str, ...] = ()) -> str:
    """A scope key whose records live in ``shard``."""
    return next(key for key in (f"org:s{n}" for n in range(10_000))
                if schema.shard_of(key) == shard and key not in avoid)


async def test_max_scopes_holds_across_processes_sharing_the_directory(tmp_path: Path,
                                                                       clock: FakeClock):
    """``serve --workers N``: every process counts the scopes the others made; a process
    that counted once went on from its own count, so N processes held N times the limit."""
    first = SharedSqliteStore(tmp_path / "data", clock=clock, max_scopes=2)
    second = SharedSqliteStore(tmp_path / "data", clock=clock, max_scopes=2)
    note = [Candidate(kind=Kind.FACT, text="a note", source_thread_key="t")]
    try:
        await first.write("org:a", note)
        await second.write("org:b", note)
        with pytest.raises(ScopeLimitReached, match="holds 2 scopes"):
            await first.write("org:c", note)
        await first.write("org:a", [Candidate(kind=Kind.FACT, text="another note",
                                              source_thread_key="t")])
    finally:
        await first.close()
        await second.close()


async def test_counting_scopes_takes_no_other_shards_write_lock(tmp_path: Path,
                                                                clock: FakeClock):
    """A new scope is counted against ``max_scopes`` inside its shard's write transaction,
    reading every shard. Reading a shard this process had not opened yet took that shard's
    write lock (its schema check): two writers making scopes in two shards waited on each
    other's lock and failed (a 500 from the worker). A shard another writer holds is read,
    not waited for."""
    data = tmp_path / "data"
    maker = SharedSqliteStore(data, clock=clock)
    note = [Candidate(kind=Kind.FACT, text="a note", source_thread_key="t")]
    held_scope = _scope_in(3)
    await maker.write(held_scope, note)  # shard 3 exists, with a scope
    await maker.close()
    store = SharedSqliteStore(data, clock=clock, max_scopes=5, busy_timeout_ms=200)
    holder = apsw.Connection(str(data / "shard-003-of-016.db"))
    holder.execute("BEGIN IMMEDIATE")  # another writer of shard 3, mid-transaction
    try:
        counts = await store.write(_scope_in(7), note)
        assert counts.inserted == 1
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await store.close()


@pytest.mark.parametrize(("column", "value"), [
    ("keywords", "not json"), ("keywords", "123"), ("keywords", '{"a": [1]}'),
    ("keywords", '[["x", 1], null]'), ("keywords", "[" * 5000 + "]" * 5000),
    ("text", b"the deploy runs"), ("created_at", "yesterday"), ("use_count", -7),
    ("last_used_at", -5), ("confidence", "high"), ("id", "mem:repo:evil/other:1"),
])
async def test_a_row_written_into_a_shard_by_hand_is_a_store_error_naming_it(
        tmp_path, clock: FakeClock, column: str, value: object):
    """A shard's row is read as the store wrote it only when it is one: a row another program
    wrote (keywords not a JSON list of words, a value of the wrong type or sign, an id of
    another scope) fails the read with a store error naming the row, never a TypeError, a
    RecursionError or a record of another scope in this one."""
    data = tmp_path / "data"
    name = await write_one(data, clock)
    conn = apsw.Connection(str(data / name))
    conn.execute(f"UPDATE records SET {column} = ? WHERE scope_key = 'org:acme'", (value,))
    conn.close()
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        with pytest.raises(StoreError, match=r"org:acme's row 1 .*\(" + column):
            await store.list("org:acme", limit=10)
        with pytest.raises(StoreError, match="org:acme's row 1"):
            await store.export_page("org:acme", 0, 10)
        with pytest.raises(StoreError, match="org:acme's row 1"):
            await store.retrieve("org:acme", "deploy", 3)
    finally:
        await store.close()



async def test_a_reach_log_path_holding_another_database_is_refused_and_kept(tmp_path: Path,
                                                                             clock: FakeClock):
    from scopemem.core.browse import Reach
    from scopemem.stores.sqlite_shared.browse import FILE_NAME

    tmp_path.mkdir(exist_ok=True)
    other = apsw.Connection(str(tmp_path / FILE_NAME))
    other.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    other.close()
    store = SharedSqliteStore(tmp_path, clock=clock)
    try:
        await store.write("org:acme", [fact("deploys need the vpn")])
        reach = Reach(record_id="mem:org:acme:1", scope_key="org:acme", run_id="r-1",
                      thread_key="slack:C1/9", at_ms=clock.now)
        for _ in range(2):  # the file is not taken over on a second try either
            with pytest.raises(StoreError, match="not a scopemem reach log"):
                await store.log_reaches([reach])
    finally:
        await store.close()
    kept = apsw.Connection(str(tmp_path / FILE_NAME))
    assert [name for (name,) in kept.execute("SELECT name FROM sqlite_master")] == ["invoices"]
    kept.close()


async def test_writes_at_the_cap_and_retrievals_prepare_no_statement_again(
        tmp_path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch):
    """Once their statements are prepared, later writes and retrievals reuse them: SQLite
    prepared again at every run a statement whose plan it fits to the values bound (a
    bound ``LIMIT``, a ``UNION``), five of a write's at the cap and a retrieval's.

    Counted per connection: a read may land on a read thread the pool starts only later
    (whose connection prepares its statements once, as any new one does), but no
    connection that ran the statements before prepares them again."""
    warming = True
    prepared: dict[str, set[int]] = {"before": set(), "after": set()}

    def hook(conn: apsw.Connection) -> None:
        def authorize(*_args: object) -> int:
            # SQLite asks while it prepares a statement, never after.
            prepared["before" if warming else "after"].add(id(conn))
            return apsw.SQLITE_OK
        conn.authorizer = authorize

    monkeypatch.setattr(apsw, "connection_hooks", [*apsw.connection_hooks, hook])
    # No use-count save on its timer mid-test: its statements' first run is not a re-run.
    store = SharedSqliteStore(tmp_path / "data", clock=clock, synchronous="off", cap=20,
                              usage_flush_ms=USAGE_FLUSH_MS_MAX)
    scope = "repo:acme/widgets"
    try:
        for round_ in range(6):
            warming = round_ < 4
            clock.advance(1000)
            counts = await store.write(scope, [fact(f"runner {round_} note {n} caches layers")
                                               for n in range(10)])
            assert round_ < 2 or counts.evicted == 10
            assert len(await store.retrieve(scope, f"runner {round_} caches", 5)) == 5
        assert prepared["before"]
        assert not prepared["before"] & prepared["after"]
    finally:
        await store.close()


async def test_a_shard_of_an_earlier_release_gets_the_token_index_merge_setting(
        tmp_path, clock: FakeClock):
    """FTS5 keeps ``deletemerge`` in the shard's index: a shard written before the store
    set it (FTS5's default) is given it when opened, and its index still answers."""
    data = tmp_path / "data"
    name = await write_one(data, clock)
    conn = apsw.Connection(str(data / name))
    conn.execute("DELETE FROM terms_fts_config WHERE k = 'deletemerge'")
    conn.close()
    store = SharedSqliteStore(data, clock=clock, synchronous="off")
    try:
        assert [r.text for r in await store.retrieve("org:acme", "deploy", 5)] == [
            "the deploy runs on tuesdays"]
    finally:
        await store.close()
    conn = apsw.Connection(str(data / name))
    try:
        assert conn.execute("SELECT v FROM terms_fts_config WHERE k = 'deletemerge'"
                            ).fetchall() == [(index.DELETE_MERGE,)]
    finally:
        conn.close()
