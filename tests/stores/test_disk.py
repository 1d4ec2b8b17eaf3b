"""What keeps a store's disk bounded (issue 14 item 5): dead rows purged after the retention,
forgotten text scrubbed from every file, ids never reused. (The limit on scopes per
directory: ``test_sqlite_shared.py`` and ``tests/worker/test_limits.py``.)"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import apsw
import pytest

from scopemem.core.records import Status, WriteCounts
from scopemem.errors import ConfigError, StoreError
from scopemem.stores.base import StoreSettings
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.shared.batches import PURGE_ROWS
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import DAY_MS, FakeClock, fact
from tests.stores.conftest import on_every_connection

ORG = "org:acme"
SECRET = "Zanzibarquux the vault code is 7310-plover"
SECRET_WORDS = ("zanzibarquux", "Zanzibarquux", "plover", "vault code")

Make = Callable[..., SharedSqliteStore]


def shard_path(store: SharedSqliteStore, scope_key: str = ORG) -> str:
    """The shard file holding ``scope_key`` (every test here writes one scope)."""
    return store._shards.path(store._shards.of(scope_key))


def query(path: str, sql: str, params: tuple = ()) -> list[tuple]:
    conn = apsw.Connection(path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def rows(path: str) -> dict[int, tuple]:
    return {row[0]: row[1:] for row in query(
        path, "SELECT seq, status, retired_at, text FROM records ORDER BY seq")}


def every_file(directory: Path) -> dict[str, bytes]:
    return {entry.name: entry.read_bytes() for entry in directory.iterdir() if entry.is_file()}


# --- forget: the text leaves the files ---------------------------------------------------------


@pytest.mark.parametrize("long_text", [False, True], ids=["short", "overflow-pages"])
async def test_a_forgotten_text_is_in_no_file_of_the_data_directory(
        make: Make, tmp_path: Path, long_text: bool):
    directory = tmp_path / "data"
    store = make(directory)
    text = SECRET + (" and the long tail of the note" * 300 if long_text else "")
    await store.write(ORG, [fact(f"note {n} about the deploy") for n in range(30)])
    await store.write(ORG, [fact(text, keywords=("zanzibarquux-key", "plover"))])
    secret_id = f"mem:{ORG}:31"
    # A retrieval builds the view, as in service.
    for _ in range(3):
        assert [r.id for r in await store.retrieve(ORG, "zanzibarquux plover", 5)] == [secret_id]
    await store.flush()
    found = every_file(directory)
    assert any(b"Zanzibarquux" in data for data in found.values())  # the check can see it
    assert await store.forget(ORG, secret_id)
    # Checked while the store is still open (its WAL and shared memory exist), then closed.
    for _phase in ("open", "closed"):
        found = every_file(directory)
        assert any(name.endswith("-wal") for name in found) or _phase == "closed"
        for name, data in found.items():
            for word in SECRET_WORDS:
                assert word.encode() not in data, (name, word, _phase)
        await store.close()
    again = make(directory)
    assert await again.retrieve(ORG, "zanzibarquux", 5) == []
    assert len(await again.list(ORG, 50)) == 30


async def test_a_forgotten_row_keeps_its_id_status_and_provenance_only(make: Make,
                                                                       clock: FakeClock):
    store = make()
    await store.write(ORG, [fact(SECRET, keywords=("plover",), source_run_id="run-7")])
    clock.advance(5)
    assert await store.forget(ORG, f"mem:{ORG}:1")
    path = shard_path(store)
    assert query(path, "SELECT id, status, text, norm, keywords, source_thread_key,"
                       " source_run_id, retired_at FROM records") == [
        (f"mem:{ORG}:1", "forgotten", "", "", "[]", "slack:C1/100", "run-7", clock.now)]
    assert await store.retrieve(ORG, "plover", 5) == []
    # Forgotten rows are kept past any retention: the audit says who was forgotten when.
    clock.advance(400 * DAY_MS)
    await store.write(ORG, [fact("something else")])
    assert rows(path)[1][0] == "forgotten"


async def test_the_in_process_store_scrubs_a_forgotten_record_too(clock: FakeClock):
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact(SECRET, keywords=("plover",))])
    assert await store.forget(ORG, f"mem:{ORG}:1")
    [row] = store._scopes[ORG]
    assert (row.id, row.status, row.text, row.keywords) == (
        f"mem:{ORG}:1", Status.FORGOTTEN, "", ())
    assert row.source_thread_key == "slack:C1/100"
    assert store._terms == {}


async def test_every_connection_the_store_opens_runs_secure_delete(make: Make):
    first: dict[int, list[str]] = {}

    def hook(conn: apsw.Connection) -> None:
        seen = first.setdefault(id(conn), [])

        def tracer(_cursor, sql, _bindings):  # type: ignore[no-untyped-def]
            seen.append(" ".join(sql.split()))
            return True

        conn.exec_trace = tracer

    with on_every_connection(hook):
        store = make()
        await store.write(ORG, [fact("one note about caching")])
        for _ in range(3):
            await store.retrieve(ORG, "caching", 5)  # the second builds the view
        await store.close()
    assert first
    assert all(seen[0] == "PRAGMA secure_delete = ON" for seen in first.values())


# --- retention --------------------------------------------------------------------------------


async def test_dead_rows_keep_their_text_for_the_retention_then_are_purged(make: Make,
                                                                          clock: FakeClock):
    store = make(cap=2, retention_days=30)
    await store.write(ORG, [fact("first"), fact("second"), fact("third")])  # first evicted
    await store.write(ORG, [fact("second, restated", supersedes=f"mem:{ORG}:2")])
    path = shard_path(store)
    born = clock.now
    assert rows(path) == {1: ("evicted", born, "first"), 2: ("superseded", born, "second"),
                          3: ("active", None, "third"), 4: ("active", None, "second, restated")}
    clock.advance(30 * DAY_MS - 1)
    await store.write(ORG, [fact("fifth")])  # evicts 3; nothing old enough yet
    assert {seq for seq, (status, _, _) in rows(path).items() if status != "active"} == {
        1, 2, 3}
    clock.advance(1)
    counts = await store.write(ORG, [fact("sixth")])  # evicts 4; purges 1 and 2
    assert counts == WriteCounts(inserted=1, evicted=1)
    assert sorted(rows(path)) == [3, 4, 5, 6]
    assert [r.text for r in await store.list(ORG, 10)] == ["sixth", "fifth"]


async def test_retention_zero_purges_with_the_write_that_retires(make: Make):
    store = make(cap=1, retention_days=0)
    await store.write(ORG, [fact("alpha"), fact("beta")])
    path = shard_path(store)
    assert rows(path) == {2: ("active", None, "beta")}
    await store.write(ORG, [fact("gamma")])
    assert rows(path) == {3: ("active", None, "gamma")}


async def test_purging_the_newest_rows_never_reuses_their_ids(make: Make, clock: FakeClock):
    store = make(retention_days=0)
    await store.write(ORG, [fact("alpha"), fact("beta")])
    await store.close()
    path = shard_path(store)
    # Both rows died long ago (as corrections could leave them): the next write purges
    # them, the highest seq with them.
    conn = apsw.Connection(path)
    conn.execute("UPDATE records SET status = 'superseded', retired_at = 0")
    conn.close()
    again = make(retention_days=0)
    await again.write(ORG, [fact("gamma")])
    assert rows(path) == {3: ("active", None, "gamma")}
    await again.write(ORG, [fact("delta")])
    assert [r.id for r in await again.list(ORG, 5)] == [f"mem:{ORG}:4", f"mem:{ORG}:3"]
    assert query(path, "SELECT last_seq FROM scopes WHERE scope_key = ?", (ORG,)) == [(4,)]


async def test_a_write_purges_a_bounded_number_of_dead_rows(make: Make, clock: FakeClock):
    store = make(cap=10_000, retention_days=1)
    await store.write(ORG, [fact(f"note {n}") for n in range(50)])
    for start in range(50, 450, 50):
        await store.write(ORG, [fact(f"note {n}") for n in range(start, start + 50)])
    await store.close()
    path = shard_path(store)
    conn = apsw.Connection(path)
    conn.execute("UPDATE records SET status = 'evicted', retired_at = ?", (clock.now,))
    conn.close()
    clock.advance(DAY_MS)
    again = make(cap=10_000, retention_days=1)
    await again.write(ORG, [fact("a new note")])
    assert len(rows(path)) == 451 - PURGE_ROWS
    await again.write(ORG, [fact("another note")])
    await again.write(ORG, [fact("a third note")])
    assert sorted(rows(path)) == [451, 452, 453]


async def test_the_in_process_store_purges_by_the_same_rule(clock: FakeClock):
    store = InMemoryStore(cap=1, clock=clock, retention_days=2)
    await store.write(ORG, [fact("alpha"), fact("beta")])
    await store.write(ORG, [fact("beta, corrected", supersedes=f"mem:{ORG}:2")])
    assert [r.status for r in store._scopes[ORG]] == [
        Status.EVICTED, Status.SUPERSEDED, Status.ACTIVE]
    clock.advance(2 * DAY_MS)
    await store.write(ORG, [fact("gamma")])
    assert [(r.id, r.status) for r in store._scopes[ORG]] == [
        (f"mem:{ORG}:3", Status.EVICTED), (f"mem:{ORG}:4", Status.ACTIVE)]
    assert set(store._died) == {f"mem:{ORG}:3"}


def test_retention_days_is_validated_and_reaches_the_stores():
    with pytest.raises(StoreError, match="retention_days"):
        SharedSqliteStore("x", retention_days=-1)
    with pytest.raises(StoreError, match="retention_days"):
        InMemoryStore(retention_days=True)
    settings = StoreSettings(name="sqlite", options={"path": "x", "max_scopes": 7},
                             retention_days=3)
    built = SharedSqliteStore.from_settings(settings)
    assert (built.retention_days, built.max_scopes) == (3, 7)
    assert InMemoryStore.from_settings(StoreSettings(name="memory", retention_days=0,
                                                     validate_only=True)).retention_days == 0
    with pytest.raises(ConfigError, match=r"memory\.stores\.sqlite\.max_scopes"):
        SharedSqliteStore.from_settings(StoreSettings(name="sqlite", options={"max_scopes": -1}))


async def test_a_reader_holding_a_snapshot_costs_the_wal_truncation_not_the_forget(
        make: Make, caplog: pytest.LogCaptureFixture):
    store = make(busy_timeout_ms=0)
    await store.write(ORG, [fact(SECRET), fact("another note")])
    reader = apsw.Connection(shard_path(store))
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM records").fetchall()
        assert await store.forget(ORG, f"mem:{ORG}:1")
    finally:
        reader.close()
    assert "the WAL could not be truncated after a forget" in caplog.text
    assert [r.text for r in await store.list(ORG, 5)] == ["another note"]
