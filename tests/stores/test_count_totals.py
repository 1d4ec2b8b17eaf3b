"""Count totals (``stores.base.BrowsingStore.read_count_totals``) are kept with the counters:
every store answers what summing its counters answers, through writes, forgets, sweeps,
counters added by the host, the retention purge and deleting scopes; and a data directory or
schema from before the totals has them filled when it is opened.
"""

from __future__ import annotations

import apsw

from scopemem.core.browse import CountTotal, merge_totals
from scopemem.core.counters import DAY_MS, day_of
from scopemem.core.records import CountRow
from tests.conftest import FakeClock, fact
from tests.stores import pg
from tests.stores.conftest import MakeStore

ONE, TWO, ORG = "repo:a/one", "repo:a/two", "org:acme"


async def summed(store, kind: str) -> list[CountTotal]:
    """The totals as summing every counter of the kind answers them."""
    rows = await store.read_counts(prefix=f"{kind}:")
    return merge_totals(CountTotal(day=row.day, name=row.name, total=row.value,
                                   most=row.value) for row in rows)


async def agree(store) -> list[CountTotal]:
    for kind in ("org", "repo"):
        assert await store.read_count_totals(kind) == await summed(store, kind), kind
    return await store.read_count_totals("repo")


def on(totals: list[CountTotal], day: int, name: str) -> tuple[int, int] | None:
    found = [(t.total, t.most) for t in totals if t.day == day and t.name == name]
    return found[0] if found else None


async def test_totals_follow_every_change_of_the_counters(make_store: MakeStore,
                                                          clock: FakeClock):
    store = await make_store(cap=2, retention_days=1)
    today = day_of(clock.now)
    await store.write(ONE, [fact("run make lint"), fact("ci uses tox"), fact("pin ruff")])
    await store.write(TWO, [fact("deploys need the vpn")])
    assert await store.forget(TWO, f"mem:{TWO}:1")
    await store.write(ORG, [fact("the wiki lives in notion")])
    await store.add_counts([CountRow(ONE, today, "offered", 40),
                            CountRow(TWO, today, "offered", 7),
                            CountRow(TWO, today - 3, "rejected", 3),
                            CountRow("repo", today, "offered", 99)])  # no kind: not "repo"
    await store.add_counts([CountRow(ONE, today, "offered", 2)])  # a counter grows
    totals = await agree(store)
    assert on(totals, today, "offered") == (49, 42)
    assert on(totals, today, "inserted") == (4, 3)

    clock.advance(2 * DAY_MS)
    await store.write(ONE, [fact("the release branch is cut on monday")])  # evicts, purges
    await store.purge()
    await agree(store)

    # ONE held the peak of every counter it shares with TWO: the peaks come from TWO now.
    await store.delete_scope(ONE)
    totals = await agree(store)
    assert on(totals, today, "offered") == (7, 7)
    assert on(totals, today, "inserted") == (1, 1)
    assert on(totals, day_of(clock.now), "inserted") is None
    await store.delete_scope(TWO)
    assert await agree(store) == []
    assert await store.read_count_totals("org") != []
    await store.add_counts([CountRow(TWO, today, "offered", 5)])  # a deleted scope again
    assert on(await agree(store), today, "offered") == (5, 5)


async def test_a_shard_of_schema_6_gets_its_count_totals_on_open(tmp_path, clock):
    from scopemem.stores.sqlite_shared import SharedSqliteStore, schema

    store = SharedSqliteStore(tmp_path, clock=clock)
    today = day_of(clock.now)
    many = [CountRow(f"repo:m/{n}", today, "offered", n) for n in range(1, 40)]
    await store.add_counts([*many, CountRow(ORG, today, "offered", 50)])
    await store.write(ONE, [fact("run make lint")])
    before = await agree(store)
    await store.close()
    # As schema 6 left every shard: no count totals, nor the triggers keeping them.
    for index in range(schema.SHARDS):
        path = tmp_path / schema.shard_file_name(index)
        if not path.exists():
            continue
        conn = apsw.Connection(str(path))
        for statement in ("DROP TRIGGER counters_total_added", "DROP TRIGGER counters_total_grown",
                          "DROP TRIGGER counters_total_deleted", "DROP TABLE count_totals",
                          "PRAGMA user_version = 6"):
            conn.execute(statement)
        conn.close()
    reopened = SharedSqliteStore(tmp_path, clock=clock)
    try:
        assert await agree(reopened) == before
        assert on(before, today, "offered") == (sum(range(1, 40)), 39)
        await reopened.add_counts([CountRow("repo:m/1", today, "offered", 100)])
        assert on(await agree(reopened), today, "offered") == (sum(range(1, 40)) + 100, 101)
    finally:
        await reopened.close()


async def test_a_postgres_schema_of_version_6_gets_its_count_totals(clock):
    import psycopg

    pg.require()
    store = pg.make(clock=clock)
    schema = store.schema
    today = day_of(clock.now)
    try:
        await store.add_counts([CountRow(ONE, today, "offered", 4),
                                CountRow(TWO, today, "offered", 9),
                                CountRow(ORG, today, "offered", 50)])
        await store.write(ONE, [fact("run make lint")])
        before = await agree(store)
        await store.close()
        # As version 6 left it: no count totals, and no record of migration 7.
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            for statement in ("DROP TABLE {s}.count_totals",
                              "DROP FUNCTION {s}.scope_kind(text)",
                              "DELETE FROM {s}.schema_migrations WHERE version = 7"):
                conn.execute(statement.format(s=f'"{schema}"'))
        store = pg.make(schema, clock=clock)
        assert await agree(store) == before
        assert on(before, today, "offered") == (13, 9)
        await store.delete_scope(TWO)
        assert on(await agree(store), today, "offered") == (4, 4)
    finally:
        await store.close()
        pg.drop_schemas(schema)
