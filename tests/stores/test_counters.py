"""Every store counts what it changed, per scope and UTC day, and reads its counters back the
same way (``stores.base.CountingStore``): the contract suite's kinds, then SQLite's upgrade of
a file from before the counters."""

from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from scopemem.core.counters import DAY_MS, day_of
from scopemem.core.records import CountRow
from scopemem.errors import ScopeLimitReached, StoreError
from scopemem.stores.base import CountingStore
from scopemem.stores.null import NullStore
from scopemem.stores.sqlite_shared.store import SharedSqliteStore
from tests.conftest import FakeClock, fact, summary
from tests.stores import pg
from tests.stores.conftest import MakeStore

ORG = "org:acme"
REPO = "repo:acme/app"
TODAY = day_of(1_790_000_000_000)


def by_name(rows: list[CountRow], scope: str = ORG, day: int | None = None) -> dict[str, int]:
    return {row.name: row.value for row in rows
            if row.scope_key == scope and (day is None or row.day == day)}


async def test_writes_are_counted_by_outcome_in_their_scope(make_store: MakeStore):
    store = await make_store(cap=3)
    assert isinstance(store, CountingStore)
    counts = await store.write(ORG, [fact("npm ci before the license check"),
                                     fact("npm ci before the license check"),
                                     summary("looked at the license check")])
    assert (counts.inserted, counts.deduped) == (2, 1)
    [first] = await store.list(ORG, 1, query="npm")
    await store.write(ORG, [fact("the license check needs npm ci", restates=first.id),
                            fact("use npm ci, never npm install", supersedes=first.id),
                            fact("node 20 is pinned in .nvmrc"),
                            fact("the cache lives under ~/.npm")])
    await store.write(REPO, [fact("make bootstrap before pytest")])
    rows = await store.read_counts()
    assert by_name(rows) == {"inserted": 4, "summaries": 1, "deduped": 1, "restated": 1,
                             "superseded": 1, "evicted": 1}
    assert by_name(rows, REPO) == {"inserted": 1}
    assert {row.day for row in rows} == {TODAY}
    assert rows == sorted(rows, key=lambda row: (row.scope_key, row.day, row.name))



@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_counted_scopes_count_against_max_scopes(kind: str, tmp_path: Path,
                                                       clock: FakeClock):
    """A scope that only counted is a scope: /counts cannot grow a store past its limit."""
    lent: list[str] = []
    if kind == "postgres":
        pg.require()
        lent.append(pg.lend_schema())
        store = pg.make(lent[0], clock=clock, max_scopes=2)
    else:
        store = SharedSqliteStore(tmp_path / "data", clock=clock, max_scopes=2)
    try:
        await store.write("org:a", [fact("one")])
        # Counts alone make a scope: the second one is past the limit.
        await store.add_counts([CountRow("made-up:1", TODAY, "offered", 1)])
        with pytest.raises(ScopeLimitReached, match="max_scopes = 2"):
            await store.add_counts([CountRow("made-up:2", TODAY, "offered", 1)])
        with pytest.raises(ScopeLimitReached, match="max_scopes = 2"):
            await store.write("org:c", [fact("three")])
        # Scopes that exist still count.
        await store.add_counts([CountRow("org:a", TODAY, "offered", 1),
                                CountRow("made-up:1", TODAY, "offered", 1)])
        assert sorted((r.scope_key, r.value) for r in await store.read_counts()
                      if r.name == "offered") == [("made-up:1", 2), ("org:a", 1)]
    finally:
        await store.close()
        pg.give_back(*lent)

async def test_forget_and_sweep_are_counted_and_a_no_op_is_not(make_store: MakeStore):
    store = await make_store()
    await store.write(ORG, [fact("PR 1835 was pushed at sha 3f9a2c1 with all tests passing"),
                            fact("run npm ci before the license check")])
    keep = [r for r in await store.list(ORG, 5) if "npm" in r.text][0]
    assert (await store.sweep(ORG, dry_run=True)).swept == 1
    assert (await store.sweep(ORG)).swept == 1
    assert (await store.sweep(ORG)).swept == 0
    assert await store.forget(ORG, keep.id)
    assert not await store.forget(ORG, keep.id)
    assert not await store.forget(ORG, f"mem:{ORG}:99")
    counted = by_name(await store.read_counts([ORG]))
    assert counted["swept"] == 1 and counted["forgotten"] == 1


async def test_added_counts_add_up_by_scope_day_and_name(make_store: MakeStore):
    store = await make_store()
    await store.add_counts([CountRow(ORG, TODAY, "offered", 3),
                            CountRow(ORG, TODAY, "offered", 2),
                            CountRow(ORG, TODAY, "rejected:commit_sha", 1),
                            CountRow(ORG, TODAY - 3, "injected_window", 7),
                            CountRow(REPO, TODAY, "reflections_run", 1)])
    rows = await store.read_counts()
    assert by_name(rows, day=TODAY) == {"offered": 5, "rejected:commit_sha": 1}
    assert by_name(rows, day=TODAY - 3) == {"injected_window": 7}
    # Readings select by scope, by key prefix (a kind) and by first day.
    assert {r.scope_key for r in await store.read_counts([REPO])} == {REPO}
    assert {r.scope_key for r in await store.read_counts(prefix="repo:")} == {REPO}
    assert await store.read_counts(["user:slack:U1"]) == []
    recent = await store.read_counts(since_day=TODAY)
    assert {r.day for r in recent} == {TODAY} and len(recent) == 3


@pytest.mark.parametrize("bad", [
    CountRow(ORG, TODAY, "made_up", 1),
    CountRow(ORG, TODAY, "rejected:has space", 1),
    CountRow(ORG, TODAY, "offered", 0),
    CountRow(ORG, TODAY, "offered", 10**9),
    CountRow(ORG, -1, "offered", 1),
    CountRow("org:a b", TODAY, "offered", 1),
])
async def test_a_row_a_store_must_not_keep_refuses_the_whole_call(make_store: MakeStore, bad):
    store = await make_store()
    with pytest.raises(StoreError):
        await store.add_counts([CountRow(ORG, TODAY, "offered", 1), bad])
    assert await store.read_counts() == []


async def test_counts_of_one_scope_never_show_in_another(make_store: MakeStore):
    store = await make_store()
    for n, key in enumerate(["org:a", "org:a:1", "org:%", "org:a_b"]):
        await store.write(key, [fact(f"lesson number {n} about the deploy")] * (n + 1))
    rows = await store.read_counts(["org:a"])
    assert by_name(rows, "org:a") == {"inserted": 1} and {r.scope_key for r in rows} == {"org:a"}
    assert {r.scope_key for r in await store.read_counts(prefix="org:a_")} == {"org:a_b"}
    # No scope key holds a NUL or a space: such a prefix selects nothing, on every store.
    for prefix in ("org:a\x00", "org a", "o" * 201):
        assert await store.read_counts(prefix=prefix) == []


async def test_the_day_is_the_writes_utc_day(make_store: MakeStore, clock: FakeClock):
    store = await make_store()
    await store.write(ORG, [fact("first day lesson")])
    clock.advance(DAY_MS)
    await store.write(ORG, [fact("second day lesson")])
    days = {row.day: row.value for row in await store.read_counts()}
    assert days == {TODAY: 1, TODAY + 1: 1}


async def test_the_null_store_counts_nothing():
    store = NullStore()
    await store.add_counts([CountRow(ORG, TODAY, "offered", 1)])
    assert await store.read_counts() == []


async def test_a_sqlite_file_from_before_the_counters_is_migrated_and_counts(
        tmp_path: Path, clock: FakeClock):
    # A scope file from before the counters (schema 3): migrated into the shared layout, its
    # rows stay and its next write is counted.
    source = Path(__file__).parents[1] / "fixtures" / "sqlite-before-folding"
    directory = tmp_path / "old"
    shutil.copytree(source, directory)
    [path] = sorted(directory.glob("*.db"))
    conn = apsw.Connection(str(path))
    assert not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'counters'").fetchall()
    before = conn.execute("SELECT count(*) FROM records").fetchall()[0][0]
    conn.close()
    store = SharedSqliteStore(directory, clock=clock)
    try:
        [scope] = await store.export_scopes()
        assert len(await store.export_page(scope, 0, 100)) == before
        await store.write(scope, [fact("a lesson written after the upgrade")])
        assert by_name(await store.read_counts(), scope) == {"inserted": 1}
    finally:
        await store.close()
