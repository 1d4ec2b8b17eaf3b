"""The browsing contract (``stores.base.BrowsingStore``): every store pages, sorts, filters,
tells a record's history and keeps reaches the same way.

Parametrized over the stores in ``tests/stores/conftest.py``, as ``test_contract.py``.
"""

from __future__ import annotations

import pytest

from scopemem.core.browse import CountTotal, Reach, ScopeSummary
from scopemem.core.records import CountRow, Kind, Source, Status
from scopemem.errors import StoreError
from scopemem.stores.null import NullStore
from tests.conftest import DAY_MS, FakeClock, fact, summary

ORG, REPO, USER = "org:acme", "repo:acme/api", "user:slack:U1"


def ids(page) -> list[str]:
    return [record.id for record in page.rows]


def rid(scope: str, seq: int) -> str:
    return f"mem:{scope}:{seq}"


async def three_scopes(store, clock: FakeClock) -> dict[str, int]:
    """org: 2 active; repo: 3 written, 1 forgotten (2 active); user: 1. Written in the
    order org, repo, user, a second apart; org written again last."""
    times = {}
    await store.write(ORG, [fact("deploys need the vpn")])
    clock.advance(1000)
    await store.write(REPO, [fact("run make lint"), fact("ci uses tox"), fact("pin ruff")])
    times[REPO] = clock.now
    assert await store.forget(REPO, rid(REPO, 2))
    clock.advance(1000)
    await store.write(USER, [fact("I prefer short answers")])
    times[USER] = clock.now
    clock.advance(1000)
    await store.write(ORG, [fact("the wiki lives in notion")])
    times[ORG] = clock.now
    return times


# --- scope pages ------------------------------------------------------------------------------


async def test_scope_page_lists_scopes_with_kind_active_and_last_write(store, clock):
    times = await three_scopes(store, clock)
    page = await store.scope_page()
    assert page.total == 3
    assert page.rows == (
        ScopeSummary(scope_key=ORG, kind="org", active=2, last_write_ms=times[ORG]),
        ScopeSummary(scope_key=REPO, kind="repo", active=2, last_write_ms=times[REPO]),
        ScopeSummary(scope_key=USER, kind="user", active=1, last_write_ms=times[USER]),
    )


async def test_scope_page_sorts_both_ways_with_ties_by_key(store, clock):
    await three_scopes(store, clock)

    async def keys(**kw) -> list[str]:
        return [row.scope_key for row in (await store.scope_page(**kw)).rows]

    assert await keys(descending=True) == [USER, REPO, ORG]
    assert await keys(sort="active") == [USER, ORG, REPO]
    assert await keys(sort="active", descending=True) == [REPO, ORG, USER]
    assert await keys(sort="last_write") == [REPO, USER, ORG]
    assert await keys(sort="last_write", descending=True) == [ORG, USER, REPO]


async def test_scope_page_filters_by_kind_and_pages(store, clock):
    await three_scopes(store, clock)
    await store.write("repo:acme/web", [fact("web deploys on friday are banned")])
    repos = await store.scope_page(kind="repo")
    assert repos.total == 2
    assert [row.scope_key for row in repos.rows] == [REPO, "repo:acme/web"]
    # A kind is the whole part before the colon: "rep" is not "repo".
    assert (await store.scope_page(kind="rep")).total == 0
    second = await store.scope_page(offset=1, limit=2)
    assert second.total == 4
    assert [row.scope_key for row in second.rows] == ["repo:acme/api", "repo:acme/web"]
    beyond = await store.scope_page(offset=10)
    assert beyond.total == 4 and beyond.rows == ()


@pytest.mark.parametrize("args", [
    {"sort": "text"}, {"sort": None}, {"limit": 0}, {"limit": 201}, {"offset": -1},
    {"offset": True}, {"limit": "5"}, {"kind": "re po"}, {"kind": ""}, {"kind": "x" * 65},
    {"descending": "yes"},
])
async def test_scope_page_refuses_bad_arguments(store, args):
    with pytest.raises(StoreError):
        await store.scope_page(**args)


# --- record pages -----------------------------------------------------------------------------


async def test_record_page_is_newest_first_over_every_status(store, clock):
    await store.write(ORG, [fact("deploy through the vpn"), summary("a deploy thread"),
                            fact("never deploy on friday", source=Source.HUMAN)])
    await store.write(ORG, [fact("deploy through the new vpn", supersedes=rid(ORG, 1))])
    assert await store.forget(ORG, rid(ORG, 2))
    page = await store.record_page(ORG)
    assert page.total == 4
    assert ids(page) == [rid(ORG, 4), rid(ORG, 3), rid(ORG, 2), rid(ORG, 1)]
    assert [r.status for r in page.rows] == [Status.ACTIVE, Status.ACTIVE, Status.FORGOTTEN,
                                             Status.SUPERSEDED]
    assert page.rows[2].text == ""  # a forgotten record is scrubbed, and shown so


async def test_record_page_filters_by_kind_status_and_source_and_pages(store, clock):
    await store.write(ORG, [fact("deploy through the vpn"), summary("a deploy thread"),
                            fact("never deploy on friday", source=Source.HUMAN)])
    await store.write(ORG, [fact("deploy through the new vpn", supersedes=rid(ORG, 1))])
    assert ids(await store.record_page(ORG, kind=Kind.SUMMARY)) == [rid(ORG, 2)]
    assert ids(await store.record_page(ORG, kind="fact")) == [rid(ORG, 4), rid(ORG, 3),
                                                            rid(ORG, 1)]
    assert ids(await store.record_page(ORG, status="superseded")) == [rid(ORG, 1)]
    assert ids(await store.record_page(ORG, source="human")) == [rid(ORG, 3)]
    both = await store.record_page(ORG, kind="fact", status="active", source="reflection")
    assert both.total == 1 and ids(both) == [rid(ORG, 4)]
    page = await store.record_page(ORG, offset=1, limit=2)
    assert page.total == 4 and ids(page) == [rid(ORG, 3), rid(ORG, 2)]
    filtered = await store.record_page(ORG, kind="fact", offset=2, limit=5)
    assert filtered.total == 3 and ids(filtered) == [rid(ORG, 1)]
    assert (await store.record_page(USER)).total == 0


async def test_record_page_shows_use_counts_as_of_now(store, clock):
    await store.write(ORG, [fact("deploys need the vpn"), fact("lint with ruff")])
    clock.advance(500)
    await store.retrieve(ORG, "vpn deploys", 5)
    rows = {r.id: r for r in (await store.record_page(ORG)).rows}
    assert rows[rid(ORG, 1)].use_count == 1 and rows[rid(ORG, 1)].last_used_at == clock.now
    assert rows[rid(ORG, 2)].use_count == 0


@pytest.mark.parametrize("args", [
    {"status": "gone"}, {"kind": "lesson"}, {"source": "bot"}, {"limit": 0}, {"offset": -3},
])
async def test_record_page_refuses_bad_arguments(store, args):
    with pytest.raises(StoreError):
        await store.record_page(ORG, **args)
    with pytest.raises(StoreError):
        await store.record_page("bad key")


# --- a record's history -----------------------------------------------------------------------


async def test_record_history_follows_the_supersede_chain(store, clock):
    await store.write(ORG, [fact("deploy through the vpn")])
    await store.write(ORG, [fact("deploy through the new vpn", supersedes=rid(ORG, 1))])
    await store.write(ORG, [fact("deploy through wireguard", supersedes=rid(ORG, 2))])
    newest = await store.record_history(ORG, rid(ORG, 3))
    assert newest is not None and newest.record.id == rid(ORG, 3)
    assert [r.id for r in newest.supersedes] == [rid(ORG, 2), rid(ORG, 1)]
    assert newest.superseded_by is None
    middle = await store.record_history(ORG, rid(ORG, 2))
    assert middle.record.status is Status.SUPERSEDED
    assert [r.id for r in middle.supersedes] == [rid(ORG, 1)]
    assert middle.superseded_by is not None and middle.superseded_by.id == rid(ORG, 3)


async def test_record_history_stops_at_a_superseded_record_the_retention_purged(store, clock):
    await store.write(ORG, [fact("deploy through the vpn")])
    await store.write(ORG, [fact("deploy through the new vpn", supersedes=rid(ORG, 1))])
    clock.advance(31 * DAY_MS)
    await store.purge()
    assert await store.record_history(ORG, rid(ORG, 1)) is None
    newest = await store.record_history(ORG, rid(ORG, 2))
    assert newest is not None and newest.supersedes == ()


async def test_record_history_names_restatements_and_uses(store, clock):
    await store.write(ORG, [fact("deploy through the vpn"), fact("lint with ruff")])
    clock.advance(1000)
    # A restatement of an active record strengthens it: a use, no record.
    await store.write(ORG, [fact("deploys use the vpn", restates=rid(ORG, 1))])
    assert await store.forget(ORG, rid(ORG, 2))
    # One of a record no longer active is kept as a record of its own, naming it.
    await store.write(ORG, [fact("lint with ruff and mypy", restates=rid(ORG, 2))])
    first = await store.record_history(ORG, rid(ORG, 1))
    assert first.record.use_count == 1 and first.record.last_used_at == clock.now
    assert first.restated_by == () and first.supersedes == ()
    second = await store.record_history(ORG, rid(ORG, 2))
    assert [r.id for r in second.restated_by] == [rid(ORG, 3)]
    assert await store.record_history(ORG, rid(ORG, 9)) is None
    assert await store.record_history(ORG, "not an id") is None
    assert await store.record_history(USER, rid(ORG, 1)) is None


# --- reaches ----------------------------------------------------------------------------------


def reach(scope: str, seq: int, run: str, at: int, thread: str = "slack:C1/9") -> Reach:
    return Reach(record_id=rid(scope, seq), scope_key=scope, run_id=run, thread_key=thread,
                 at_ms=at)


async def test_reaches_are_read_by_record_and_by_run(store, clock):
    await store.write(ORG, [fact("deploy through the vpn"), fact("lint with ruff")])
    await store.write(REPO, [fact("run make lint")])
    first = [reach(ORG, 1, "r-1", clock.now), reach(REPO, 1, "r-1", clock.now)]
    await store.log_reaches(first)
    clock.advance(1000)
    second = [reach(ORG, 1, "r-2", clock.now, thread="slack:C2/1"),
              reach(ORG, 2, "r-2", clock.now, thread="slack:C2/1")]
    await store.log_reaches(second)
    assert await store.read_reaches(record_id=rid(ORG, 1)) == [second[0], first[0]]
    assert await store.read_reaches(run="r-1") == [first[1], first[0]]
    assert await store.read_reaches(run="slack:C2/1") == [second[1], second[0]]
    assert await store.read_reaches(run="r-2", limit=1) == [second[1]]
    assert await store.read_reaches(run="r-3") == []
    assert len(await store.read_reaches()) == 4
    history = await store.record_history(ORG, rid(ORG, 1))
    assert history.reaches == (second[0], first[0])


async def test_reaches_past_the_retention_are_pruned_by_the_next_log(store, clock):
    await store.write(ORG, [fact("deploy through the vpn")])
    old = reach(ORG, 1, "r-old", clock.now)
    await store.log_reaches([old])
    clock.advance(29 * DAY_MS)
    recent = reach(ORG, 1, "r-recent", clock.now)
    await store.log_reaches([recent])
    assert await store.read_reaches(record_id=rid(ORG, 1)) == [recent, old]
    clock.advance(2 * DAY_MS)  # the first is 31 days old, the second 2
    new = reach(ORG, 1, "r-new", clock.now)
    await store.log_reaches([new])
    assert await store.read_reaches(record_id=rid(ORG, 1)) == [new, recent]


async def test_reaches_are_redacted_and_checked(store, clock):
    secret = "ghp_" + "a1B2" * 9
    await store.log_reaches([reach(ORG, 1, f"run-{secret}", clock.now)])
    [kept] = await store.read_reaches(record_id=rid(ORG, 1))
    assert secret not in kept.run_id
    for bad in (reach(ORG, 1, "r", -1),
                Reach(record_id=rid(REPO, 1), scope_key=ORG, run_id="r", thread_key="",
                      at_ms=1),
                Reach(record_id="nope", scope_key=ORG, run_id="r", thread_key="", at_ms=1)):
        with pytest.raises(StoreError):
            await store.log_reaches([bad])
    for args in ({"limit": 0}, {"limit": 501}, {"run": ""}, {"record_id": rid(ORG, 1),
                                                             "run": "r"}):
        with pytest.raises(StoreError):
            await store.read_reaches(**args)


async def test_scrubbing_a_person_deletes_the_scopes_reaches_that_name_them(store, clock):
    await store.write(REPO, [fact("run make lint")])
    await store.write(ORG, [fact("deploy through the vpn")])
    named = [reach(REPO, 1, "run-U1-7", clock.now, thread="slack:C1/9"),
             reach(REPO, 1, "r-2", clock.now, thread="slack:D1:U1")]
    kept = [reach(REPO, 1, "r-3", clock.now, thread="slack:C1:U12"),  # another person
            reach(ORG, 1, "run-U1-8", clock.now)]  # another scope, scrubbed on its own
    await store.log_reaches([*named, *kept])
    await store.scrub_provenance(REPO, "user:slack:U1")
    assert await store.read_reaches(record_id=rid(REPO, 1)) == [kept[0]]
    assert await store.read_reaches(record_id=rid(ORG, 1)) == [kept[1]]


async def test_deleting_a_scope_deletes_its_reaches(store, clock):
    await store.write(REPO, [fact("run make lint")])
    await store.write(ORG, [fact("deploy through the vpn")])
    kept = reach(ORG, 1, "r-1", clock.now)
    await store.log_reaches([reach(REPO, 1, "r-1", clock.now), kept])
    assert await store.delete_scope(REPO) == 1
    assert await store.read_reaches(record_id=rid(REPO, 1)) == []
    assert await store.read_reaches(run="r-1") == [kept]


# --- count totals -------------------------------------------------------------------------------


async def test_count_totals_sum_a_kinds_counters_by_day_and_name(store):
    # 17 scopes: more than the SQLite store's shards, so two share one and its sum of them
    # is not the largest one scope counted.
    many = [CountRow(f"repo:m/{n}", 12, "inserted", n) for n in range(1, 18)]
    await store.add_counts([*many,
                            CountRow("repo:a/b", 10, "inserted", 2),
                            CountRow("repo:a/c", 10, "inserted", 5),
                            CountRow("repo:a/c", 10, "offered", 9),
                            CountRow("repo:a/b", 11, "rejected", 1),
                            CountRow("repo:a/b", 9, "inserted", 50),  # before since_day
                            CountRow("org:acme", 10, "inserted", 40),  # another kind
                            CountRow("repos:x", 10, "inserted", 30)])  # a longer kind name
    totals = await store.read_count_totals("repo", since_day=10)
    assert totals == [CountTotal(day=10, name="inserted", total=7, most=5),
                      CountTotal(day=10, name="offered", total=9, most=9),
                      CountTotal(day=11, name="rejected", total=1, most=1),
                      CountTotal(day=12, name="inserted", total=153, most=17)]
    assert await store.read_count_totals("channel") == []
    for kind, since in ((None, 0), ("re po", 0), ("repo", -1), ("repo", "1")):
        with pytest.raises(StoreError):
            await store.read_count_totals(kind, since_day=since)


# --- the null store ---------------------------------------------------------------------------


async def test_the_null_store_browses_nothing_and_checks_like_the_others():
    store = NullStore()
    assert (await store.scope_page()).total == 0
    assert (await store.record_page(ORG)).rows == ()
    assert await store.record_history(ORG, rid(ORG, 1)) is None
    await store.log_reaches([reach(ORG, 1, "r", 5)])
    assert await store.read_reaches(run="r") == []
    assert await store.read_count_totals("repo") == []
    with pytest.raises(StoreError):
        await store.scope_page(sort="nope")



async def test_a_shard_of_schema_4_gets_last_writes_and_browses_on_open(tmp_path, clock):
    import apsw

    from scopemem.stores.sqlite_shared import SharedSqliteStore, schema

    store = SharedSqliteStore(tmp_path, clock=clock)
    await store.write(ORG, [fact("deploys need the vpn")])
    written = clock.now
    await store.close()
    # As schema 4 left it: no last write, none of browsing's indexes or trigger.
    path = tmp_path / schema.shard_file_name(schema.shard_of(ORG))
    conn = apsw.Connection(str(path))
    for statement in ("DROP TRIGGER records_last_write", "DROP INDEX scopes_by_active",
                      "DROP INDEX scopes_by_last_write", "DROP INDEX records_browse",
                      "DROP INDEX records_supersedes", "DROP INDEX records_restates",
                      "ALTER TABLE scopes DROP COLUMN last_write", "PRAGMA user_version = 4"):
        conn.execute(statement)
    conn.close()
    clock.advance(1000)
    reopened = SharedSqliteStore(tmp_path, clock=clock)
    try:
        page = await reopened.scope_page()
        assert page.rows == (ScopeSummary(scope_key=ORG, kind="org", active=1,
                                          last_write_ms=written),)
        assert ids(await reopened.record_page(ORG, status="active")) == [rid(ORG, 1)]
    finally:
        await reopened.close()


async def test_a_postgres_schema_of_version_4_is_migrated_to_browse(clock):
    import psycopg

    from tests.stores import pg

    pg.require()
    store = pg.make(clock=clock)
    schema = store.schema
    try:
        await store.write(ORG, [fact("deploys need the vpn")])
        clock.advance(1000)
        await store.write(REPO, [fact("run make lint"), fact("ci uses tox")])
        written = {ORG: clock.now - 1000, REPO: clock.now}
        await store.close()
        # As version 4 left it: no last write, none of migration 5's indexes, trigger or
        # reach log, and no record of migration 5.
        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            for statement in (
                    "DROP TRIGGER records_last_write ON {s}.records",
                    "DROP FUNCTION {s}.records_last_write()", "DROP TABLE {s}.reaches",
                    "DROP INDEX {s}.scopes_by_key", "DROP INDEX {s}.scopes_by_active",
                    "DROP INDEX {s}.scopes_by_last_write", "DROP INDEX {s}.records_browse",
                    "DROP INDEX {s}.records_supersedes", "DROP INDEX {s}.records_restates",
                    "ALTER TABLE {s}.scopes DROP COLUMN last_write",
                    "DELETE FROM {s}.schema_migrations WHERE version = 5"):
                conn.execute(statement.format(s=f'"{schema}"'))
        clock.advance(1000)
        store = pg.make(schema, clock=clock)
        page = await store.scope_page()
        assert page.rows == (
            ScopeSummary(scope_key=ORG, kind="org", active=1, last_write_ms=written[ORG]),
            ScopeSummary(scope_key=REPO, kind="repo", active=2, last_write_ms=written[REPO]))
        assert ids(await store.record_page(REPO, status="active")) == [rid(REPO, 2),
                                                                      rid(REPO, 1)]
        await store.write(ORG, [fact("the wiki lives in notion")])  # the trigger is back
        assert (await store.scope_page(sort="last_write", descending=True)).rows[0] == \
            ScopeSummary(scope_key=ORG, kind="org", active=2, last_write_ms=clock.now)
        shown = reach(ORG, 1, "r-1", clock.now)
        await store.log_reaches([shown])
        assert await store.read_reaches(run="r-1") == [shown]
    finally:
        await store.close()
        pg.drop_schemas(schema)
