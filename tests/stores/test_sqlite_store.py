"""The SQLite store's options, errors and files, whatever its layout: what a user configures
and what they see when the disk, the directory or another process gets in the way; and its
use counts, saved in the background. (What the shared files promise beyond that is in
``test_sqlite_shared.py``; the behaviour every store shares in ``test_contract.py``.)"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path

import apsw
import attrs
import pytest

from scopemem.errors import ConfigError, StoreError
from scopemem.stores import sqlite as sqlite_module
from scopemem.stores.base import StoreSettings
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import DAY_MS, FakeClock, fact, summary

ORG = "org:acme"
USER = "user:slack:U2"


def shard_path(store: SharedSqliteStore, scope_key: str) -> str:
    """The shard file holding ``scope_key``."""
    return store._shards.path(store._shards.of(scope_key))


def raw(path: str) -> apsw.Connection:
    conn = apsw.Connection(path)
    conn.set_busy_timeout(2000)
    return conn


def use_counts(store: SharedSqliteStore, scope_key: str = ORG
               ) -> dict[int, tuple[int, int | None]]:
    """The scope's use counts as its shard file holds them: seq → (uses, last use)."""
    conn = apsw.Connection(shard_path(store, scope_key), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return {seq: (uses, last) for seq, uses, last in conn.execute(
            "SELECT seq, use_count, last_used_at FROM records WHERE scope_key = ?",
            (scope_key,))}
    finally:
        conn.close()


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
    assert (await again.write(ORG, [fact("delta")])).inserted == 1
    assert (await again.list(ORG, 1))[0].id == f"mem:{ORG}:4"


async def test_field_values_round_trip_exactly(make, clock: FakeClock):
    store, memory = make(), InMemoryStore(clock=clock)
    batch = [fact("one", confidence=1, keywords=("ünï", "x y")),
             fact("two", confidence=0.1 + 0.2, source_run_id="r"), summary("three\x00nul")]
    for target in (store, memory):
        await target.write(ORG, batch)
    got, expected = await store.list(ORG, 10), await memory.list(ORG, 10)
    assert got == expected
    assert [type(r.confidence) for r in got] == [type(r.confidence) for r in expected]


async def test_synchronous_and_the_busy_timeout_are_set_on_every_connection(make):
    connections: list[apsw.Connection] = []
    apsw.connection_hooks.append(connections.append)
    try:
        full = make()
        normal = make(synchronous="normal", directory=full.directory + "-normal")
        await full.write(ORG, [fact("deploy note")])
        await normal.write(USER, [fact("deploy note")])
        await full.retrieve(ORG, "deploy", 5)
        await normal.retrieve(USER, "deploy", 5)
    finally:
        apsw.connection_hooks.remove(connections.append)
    by_file = {conn.filename: conn for conn in connections}
    assert by_file[shard_path(full, ORG)].execute("PRAGMA synchronous").fetchall() == [(2,)]
    assert by_file[shard_path(normal, USER)].execute("PRAGMA synchronous").fetchall() == [
        (1,)]
    assert by_file[shard_path(full, ORG)].execute("PRAGMA busy_timeout").fetchall() == [
        (5000,)]


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
    blocker = raw(shard_path(store, ORG))
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreError, match="BusyError"):
            await store.write(ORG, [fact("yankee")])
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert (await store.write(ORG, [fact("yankee")])).inserted == 1
    assert len(await store.list(ORG, 5)) == 2


async def test_a_file_that_is_not_a_database_is_refused_untouched(make):
    store = make()
    os.makedirs(store.directory)
    junk = b"this is not a database\n" * 300
    Path(shard_path(store, ORG)).write_bytes(junk)
    for call in (store.list(ORG, 5), store.write(ORG, [fact("xray")]),
                 store.retrieve(ORG, "x", 5), store.forget(ORG, f"mem:{ORG}:1"),
                 store.sweep(ORG)):
        with pytest.raises(StoreError):
            await call
    assert Path(shard_path(store, ORG)).read_bytes() == junk


async def test_an_unusable_directory_is_a_store_error(make, tmp_path: Path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the data directory should be")
    store = make(blocker)
    with pytest.raises(StoreError, match="cannot create"):
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
        SharedSqliteStore("somewhere", cap=10_001)
    for bad in ({"synchronous": "fast"}, {"busy_timeout_ms": -1}, {"shards": 0},
                *({"usage_flush_ms": value} for value in (-1, 60_001, 1.5, True, "50"))):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            SharedSqliteStore("somewhere", **bad)  # type: ignore[arg-type]
    assert await store.forget(ORG, "not-an-id") is False
    assert await store.forget(ORG, f"mem:{ORG}:{'9' * 40}") is False


def settings(**options: object) -> StoreSettings:
    return StoreSettings(options=options, cap=42, name="sqlite")


async def test_from_settings_reads_its_table(tmp_path: Path, monkeypatch):
    store = sqlite_module.from_settings(settings(
        path=str(tmp_path / "d"), synchronous="NORMAL", busy_timeout_ms=10, usage_flush_ms=0))
    await store.close()
    assert (store.directory, store.synchronous, store._shards.busy_timeout_ms,
            store.usage_flush_ms, store.cap) == (str(tmp_path / "d"), "normal", 10, 0, 42)
    monkeypatch.chdir(tmp_path)
    default = sqlite_module.from_settings(StoreSettings())
    await default.close()
    assert default.directory == str(tmp_path / "scopemem-data")
    assert default.synchronous == "full" and default._shards.busy_timeout_ms == 5000
    assert default.usage_flush_ms == 1000


@pytest.mark.parametrize(("options", "key"), [
    ({"paht": "x"}, "paht"),
    ({"path": 3}, "path"),
    ({"path": ""}, "path"),
    ({"synchronous": "fast"}, "synchronous"),
    ({"synchronous": 2}, "synchronous"),
    ({"busy_timeout_ms": "5000"}, "busy_timeout_ms"),
    ({"busy_timeout_ms": True}, "busy_timeout_ms"),
    ({"cache_rows": -1}, "cache_rows"),
    ({"usage_flush_ms": 60_001}, "usage_flush_ms"),
    ({"usage_flush_ms": -1}, "usage_flush_ms"),
    ({"layout": "files"}, "layout"),
])
def test_from_settings_names_the_bad_key(options, key):
    with pytest.raises(ConfigError, match=rf"^memory\.stores\.sqlite\.{key}: "):
        sqlite_module.from_settings(settings(**options))
    unnamed = attrs.evolve(settings(**options), name="")
    with pytest.raises(ConfigError, match=rf"^memory\.stores\.sqlite\.{key}: "):
        sqlite_module.from_settings(unnamed)


def test_registered_as_the_sqlite_store():
    found: dict[str, Callable] = {}
    sqlite_module.scopemem_register_stores(register=found.__setitem__)
    assert found == {"sqlite": sqlite_module.from_settings}
    points = {e.name: e.value for e in importlib.metadata.entry_points(group="scopemem")}
    assert points.get("sqlite") == "scopemem.stores.sqlite"


def test_importing_the_plugin_does_not_load_apsw():
    import subprocess
    import sys

    code = "import sys, scopemem.stores.sqlite; print('apsw' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


# --- use counts, saved in the background ----------------------------------------------------


@pytest.mark.parametrize("save", ["flush", "close"])
async def test_flush_and_close_save_the_use_counts_at_once(make, clock, save):
    store = make(usage_flush_ms=60_000)
    await store.write(ORG, [fact("deploy with care"), fact("rollback plan")])
    clock.advance(5)
    for _ in range(3):
        await store.retrieve(ORG, "deploy", 5)
    assert use_counts(store)[1] == (0, None)
    await (store.flush() if save == "flush" else store.close())
    assert use_counts(store) == {1: (3, clock.now), 2: (0, None)}


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
    assert use_counts(ours) == {1: (1, clock.now)}
    assert [(r.use_count, r.last_used_at) for r in await ours.list(ORG, 5)] == [
        (2, clock.now)]
    await ours.flush()
    assert use_counts(ours) == {1: (2, clock.now)} and clock.now > used_here


async def test_concurrent_retrievals_of_one_scope_count_every_use(make, clock):
    store = make()
    await store.write(ORG, [fact("the only deploy rule")])
    clock.advance(10)
    got = await asyncio.gather(*(store.retrieve(ORG, "deploy", 5) for _ in range(40)))
    # Each retrieval counts its own use (retrievals read on pool threads at once may show
    # the same count: each sees the uses saved or noted before it read).
    assert {records[0].use_count for records in got} <= set(range(1, 41))
    await store.flush()
    assert use_counts(store) == {1: (40, clock.now)}
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


async def test_writes_see_the_uses_of_earlier_retrievals(make, clock):
    store = make(cap=2)
    await store.write(ORG, [fact("first cache note"), fact("second note")])
    clock.advance(1000)
    await store.retrieve(ORG, "cache", 5)  # seq 1 is now the most recently used
    clock.advance(1000)
    await store.write(ORG, [fact("third note")])  # evicts the least recently used: seq 2
    assert [r.id for r in await store.list(ORG, 5)] == [f"mem:{ORG}:3", f"mem:{ORG}:1"]


async def test_a_cancelled_retrieval_leaves_no_use_pending(make, clock):
    store = make()
    await store.write(ORG, [fact("deploy rule")])
    task = asyncio.create_task(store.retrieve(ORG, "deploy", 5))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await store.close()
    assert use_counts(store)[1][0] in (0, 1)  # it never ran, or its use was saved at close
