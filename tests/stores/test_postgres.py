"""What only the PostgreSQL store has: its options, its schema and migrations, scope
isolation under hostile scope keys, many processes on one schema, bumps that never wait.

The contract suite (``test_contract``, kind ``postgres``) and the equivalence tests cover
what every store does; these need the real server too (see ``tests/stores/pg.py``)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import attrs
import pytest

from scopemem.core.records import Status, WriteCounts
from scopemem.core.scopes import record_seq
from scopemem.errors import (
    ConfigError,
    ScopeLimitReached,
    StoreBusy,
    StoreError,
    StoreRefused,
)
from scopemem.stores import postgres as postgres_plugin
from scopemem.stores.base import StoreSettings
from scopemem.stores.postgres import PostgresStore, migrations
from scopemem.stores.postgres.statements import Statements
from scopemem.stores.shared.cache import READS_BEFORE_COPY, PostingsCache, ScopeCopy
from tests.conftest import FakeClock, fact, summary
from tests.stores import pg

ROOT = Path(__file__).resolve().parents[2]
ORG = "org:acme"
TEAM = "channel:acme-team"


def settings(**options: object) -> StoreSettings:
    return StoreSettings(options=options, name="postgres", environ={"PG_URL": "postgresql://h/db"})


# --- options, registration, imports (no server needed) -----------------------------------

def test_from_settings_reads_its_table():
    store = PostgresStore.from_settings(settings(dsn_env="PG_URL", schema="tenant_7",
                                                 min_pool=2, max_pool=3,
                                                 statement_timeout_ms=250, max_scopes=9))
    assert (store.options.dsn, store.schema, store.options.min_pool, store.options.max_pool,
            store.options.statement_timeout_ms, store.options.max_scopes) == (
        "postgresql://h/db", "tenant_7", 2, 3, 250, 9)
    assert "postgresql://" not in repr(store) and "postgresql://" not in repr(store.options)
    default = PostgresStore.from_settings(settings(dsn="postgresql://x/y"))
    assert default.schema == "scopemem"


@pytest.mark.parametrize(("options", "key", "says"), [
    ({}, "dsn", "exactly one of dsn and dsn_env"),
    ({"dsn": "postgresql://x", "dsn_env": "PG_URL"}, "dsn", "exactly one"),
    ({"dsn_env": "NOT_SET"}, "dsn_env", r"\$NOT_SET is not set"),
    ({"dsn": ""}, "dsn", "must not be empty"),
    ({"dsn": "postgresql://x", "schema": "Bad-Name"}, "schema", "lower-case identifier"),
    ({"dsn": "postgresql://x", "schema": 'x"; DROP'}, "schema", "lower-case identifier"),
    ({"dsn": "postgresql://x", "schema": "pg_mine"}, "schema", "not starting with .* pg_"),
    ({"dsn": "postgresql://x", "min_pool": 5, "max_pool": 2}, "max_pool", "at least min_pool"),
    ({"dsn": "postgresql://x", "max_pool": 0}, "max_pool", "whole number"),
    ({"dsn": "postgresql://x", "statement_timeout_ms": -1}, "statement_timeout_ms", "whole"),
    ({"dsn": "postgresql://x", "pool": 3}, "pool", "unknown option"),
    ({"dsn": "postgresql://x", "postings_cache": -1}, "postings_cache", "whole number"),
    ({"dsn": "postgresql://x", "cache_min_postings": "x"}, "cache_min_postings", "whole"),
    ({"dsn": "postgresql://x", "usage_flush_ms": -1}, "usage_flush_ms", "whole"),
])
def test_from_settings_names_the_bad_key(options, key, says):
    with pytest.raises(ConfigError, match=rf"^memory\.stores\.postgres\.{key}: .*{says}"):
        PostgresStore.from_settings(settings(**options))


@pytest.mark.parametrize("validate_only", [False, True])
def test_a_dsn_pasted_as_dsn_env_is_refused_without_repeating_it(validate_only):
    # A connection string where the variable's name goes must not be echoed: it may hold a
    # password, and "$<dsn> is not set" would print it.
    pasted = "postgresql://app:s3cretpw@db.internal/app"
    with pytest.raises(ConfigError) as refused:
        PostgresStore.from_settings(attrs.evolve(settings(dsn_env=pasted),
                                                 validate_only=validate_only))
    message = str(refused.value)
    assert message.startswith("memory.stores.postgres.dsn_env: ")
    assert "name of an environment variable" in message
    assert "s3cretpw" not in message and "db.internal" not in message


def test_registered_as_the_postgres_store_with_an_extra():
    found: dict = {}
    postgres_plugin.scopemem_register_stores(register=found.__setitem__)
    assert found == {"postgres": postgres_plugin.from_settings}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["scopemem"]["postgres"] == "scopemem.stores.postgres"
    extra = project["optional-dependencies"]["postgres"]
    assert any(dep.startswith("psycopg[binary,pool]") for dep in extra)
    assert set(extra) <= set(project["optional-dependencies"]["test"])


def test_the_plugin_loads_and_builds_without_psycopg():
    code = ("import sys; sys.modules['psycopg'] = None; sys.modules['psycopg_pool'] = None;"
            " import scopemem.stores.postgres as p;"
            " from scopemem.stores.base import StoreSettings as S;"
            " p.PostgresStore.from_settings(S(options={'dsn': 'postgresql://x'}));"
            " print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "ok"


def test_every_statement_on_records_is_keyed_by_scope():
    # Each mention of a scope's table (a read, a change, a subquery) has a scope condition
    # of its own; an insert names its scope as a value. Only the re-derivation of every
    # row's tokens when the analyzer changes (at startup, under the migration lock) reads
    # across scopes, and it answers nothing.
    rederive = {"all_rows", "unpost_all", "post_all"}
    sql = Statements("s")
    checked = 0
    for name, statement in vars(sql).items():
        if not isinstance(statement, str):
            continue
        mentions = statement.count(".records") + statement.count(".postings")
        if not mentions or name in rederive:
            continue
        checked += 1
        keyed = statement.count("scope_key = %(scope)s") + statement.count("scope_key = %s")
        if statement.startswith("INSERT"):
            assert "(scope_key, seq," in statement or "SELECT %(scope)s," in statement, name
            keyed += 1
        assert keyed >= mentions, name
    assert checked >= 20


def test_a_skip_is_a_failure_under_ci(monkeypatch):
    monkeypatch.setattr(pg, "unavailable", lambda: "no server here")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        pg.require()
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="no server here"):
        pg.require()


async def test_an_unreachable_server_is_a_store_error(clock: FakeClock):
    pytest.importorskip("psycopg")
    from scopemem.stores.postgres.options import PostgresOptions

    store = PostgresStore(PostgresOptions(dsn="postgresql://127.0.0.1:1/none?connect_timeout=2",
                                          min_pool=0), clock=clock)
    # Busy (503, retried) as once the pool is open: the same outage, the same answer, from a
    # worker process that has not connected yet as from one that has.
    with pytest.raises(StoreBusy, match="postgres store: cannot connect to the server:"
                                        " .*Connection refused"):
        await store.write(ORG, [fact("anything")])
    await store.close()


@pytest.mark.parametrize("dsn", [
    "host=127.0.0.1 password=my S3cretPW dbname=test",  # a space in a key/value password
    "postgresql://bob:S3cret%zzPW@127.0.0.1:1/test",  # a bad percent-encoding
    "postgresql://bob:S3cretPW@[127.0.0.1:1/test",  # an unclosed IPv6 bracket
    "postgresql://bob:S3cretPW@127.0.0.1:1/test?S3cretPW",  # a query without '='
    "postgresql://bob:S3cret@PW@127.0.0.1:1/test",  # an '@' not written %40
    "postgresql://bob:S3cret/PW@127.0.0.1:1/test",  # a '/' not written %2F
])
async def test_a_malformed_dsn_is_named_and_never_quoted(clock: FakeClock, dsn: str):
    pytest.importorskip("psycopg")
    from scopemem.stores.postgres.options import PostgresOptions

    store = PostgresStore(PostgresOptions(dsn=dsn, min_pool=0), clock=clock)
    with pytest.raises(StoreError) as raised:
        await store.write(ORG, [fact("anything")])
    await store.close()
    said = "".join(str(error) for error in (raised.value, raised.value.__cause__,
                                             raised.value.__context__) if error is not None)
    assert "postgres store: dsn: libpq cannot read the connection string" in said
    assert "S3cret" not in said and "PW" not in said


@pytest.mark.parametrize("dsn", [
    "host=@no_such_abstract_socket port=5432,5433 dbname=none connect_timeout=2",
    "postgresql://bob:pw@127.0.0.1:1,127.0.0.1:2/none?connect_timeout=2",
    "postgresql://bob:pw@127.0.0.1,127.0.0.1/none?connect_timeout=2&port=1,2",
])
async def test_a_well_formed_dsn_is_not_taken_for_a_malformed_one(clock: FakeClock, dsn: str):
    pytest.importorskip("psycopg")
    from scopemem.stores.postgres.options import PostgresOptions

    store = PostgresStore(PostgresOptions(dsn=dsn, min_pool=0), clock=clock)
    with pytest.raises(StoreBusy, match="postgres store: cannot connect to the server"):
        await store.write(ORG, [fact("anything")])
    await store.close()


# --- against the server ----------------------------------------------------------------

@pytest.fixture
async def stores(clock: FakeClock):
    """``make(schema=None, **kwargs)``: PostgresStores, closed and their schemas dropped."""
    pg.require()
    built: list[PostgresStore] = []

    def make(schema: str | None = None, **kwargs: object) -> PostgresStore:
        kwargs.setdefault("clock", clock)
        store = pg.make(schema, **kwargs)
        built.append(store)
        return store

    yield make
    for store in built:
        await store.close()
    pg.drop_schemas(*{store.schema for store in built})


def raw(sql: str, params: tuple = ()) -> list[tuple]:
    import psycopg

    with psycopg.connect(pg.dsn(), autocommit=True) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


HOSTILE = ["org:a", "org:a'b", "org:a''", "org:a%", "org:_", "org:a_", "org:a\\b", "org:a\\",
           'org:"a"', "org:a;DROP", "org:%'||'", "org:ünïcødé", "org:日本", "org:a" + "x" * 190,
           "org:A", "org:a:1", "user:*", "org:$1", "org:%(scope)s"]


async def test_hostile_scope_keys_never_see_each_other(stores):
    store = stores()
    for n, key in enumerate(HOSTILE):
        counts = await store.write(key, [fact(f"deploy uses docker {n}"), fact("shared text"),
                                         summary(f"the sha 3f9a2c1 was pushed {n}")])
        assert counts.inserted == 3
    for n, key in enumerate(HOSTILE):
        got = await store.retrieve(key, "deploy docker shared sha pushed", 10)
        assert {r.scope_key for r in got} == {key}
        assert {r.id for r in got} == {f"mem:{key}:{seq}" for seq in (1, 2, 3)}
        listed = await store.list(key, 50)
        assert [r.text for r in listed] == [f"the sha 3f9a2c1 was pushed {n}", "shared text",
                                            f"deploy uses docker {n}"]
        assert [r.text for r in await store.list(key, 50, query="shared")] == ["shared text"]
        # Another scope's id (alike but for one character) is never this scope's record.
        for other in HOSTILE:
            if other != key:
                assert not await store.forget(key, f"mem:{other}:1")
                assert await store.mark_used({key: [f"mem:{other}:2"]}) == 0
    assert await store.forget(HOSTILE[1], f"mem:{HOSTILE[1]}:2")
    assert (await store.sweep(HOSTILE[2])).swept == 0  # summaries are never swept
    for key in HOSTILE:
        texts = [r.text for r in await store.list(key, 50)]
        assert ("shared text" in texts) == (key != HOSTILE[1]), key
    rows = raw(f'SELECT scope_key, count(*) FROM "{store.schema}".records GROUP BY 1')
    assert dict(rows) == dict.fromkeys(HOSTILE, 3)


async def test_a_worker_s_copy_of_a_scope_never_answers_past_another_worker_s_change(stores):
    """Two workers on one schema: ``here`` holds a copy of the scope's index (every retrieval
    is copy-worthy); every change ``there`` makes (a write, a forget, a sweep, an import)
    is in ``here``'s very next answer, and ``here`` answers from its copy again once it
    has read the scope after the change."""
    schema = pg.new_schema()
    here = stores(schema, cache_min_postings=0)
    here._cache.interval = 0  # copy again after every change, not once every few seconds
    there = stores(schema)
    words = ("alpha", "beta", "gamma")
    await there.write(ORG, [fact(f"deploy note {n} {words[n % 3]}") for n in range(30)])

    async def copied() -> None:
        for _ in range(READS_BEFORE_COPY):  # read that often at one change counter
            await here.retrieve(ORG, "deploy note", 50)
        await here._cache.settled()
        assert here._cache.latest(ORG) is not None
        before = here._cache.answered
        await here.retrieve(ORG, "deploy note", 50)
        assert here._cache.answered == before + 1  # answered from the copy

    async def texts() -> set[str]:
        # The very answer (ids, order, match floats) of a worker that holds no copy, once
        # ``here`` has saved its uses (another worker sees them only then).
        await here.flush()
        hits = await here.search(ORG, "deploy note alpha", 50, bump=False)
        assert hits == await there.search(ORG, "deploy note alpha", 50, bump=False)
        return {hit.record.text for hit in hits}

    await copied()
    await there.write(ORG, [fact("deploy note from the other worker")])
    assert "deploy note from the other worker" in await texts()
    await copied()
    [gone] = [r for r in await there.list(ORG, 50) if r.text == "deploy note 6 alpha"]
    assert await there.forget(ORG, gone.id)
    assert "deploy note 6 alpha" not in await texts()
    await copied()
    await there.write(ORG, [fact("deploy note: PR 1835 was pushed at sha 3f9a2c1 with all tests"
                                 " passing")])
    await copied()
    assert (await there.sweep(ORG)).swept == 1
    assert not any("3f9a2c1" in text for text in await texts())
    await copied()
    record = (await there.export_page(ORG, 0, 1))[0]
    elsewhere = attrs.evolve(record, scope_key=TEAM, id=f"mem:{TEAM}:{record_seq(record.id)}")
    await here.retrieve(TEAM, "deploy note", 5)
    assert await there.import_records([elsewhere]) == 1
    assert [r.id for r in await here.retrieve(TEAM, "deploy note", 5)] == [elsewhere.id]


async def test_a_retrieval_from_a_copy_another_worker_made_stale_counts_each_use_once(stores):
    """A retrieval answered from a copy reads its rows and counts their use in one statement
    that checks the copy's change counter. When another worker changed the scope since the
    copy, that statement counts nothing, and the answer the server gives instead counts
    each record it returns once: in the row and in the record returned."""
    schema = pg.new_schema()
    here = stores(schema, cache_min_postings=0)
    here._cache.interval = 0
    there = stores(schema)
    await there.write(ORG, [fact(f"deploy note {n}") for n in range(5)]
                      + [fact("rollback plan for the zebra cluster")])
    for _ in range(READS_BEFORE_COPY):
        await here.retrieve(ORG, "zebra", 8)
    await here._cache.settled()
    assert here._cache.latest(ORG) is not None
    before = here._cache.answered
    [hit] = await here.retrieve(ORG, "zebra", 8)
    assert here._cache.answered == before + 1  # from the copy, in one statement
    await there.write(ORG, [fact("an unrelated note")])  # the copy is stale now
    [hit] = await here.retrieve(ORG, "zebra", 8)
    assert here._cache.answered == before + 1
    uses = READS_BEFORE_COPY + 2
    assert hit.use_count == uses
    await here.flush()  # another worker sees ``here``'s uses once saved
    [row] = [r for r in await there.list(ORG, 50) if r.id == hit.id]
    assert row.use_count == uses


async def test_a_scope_changed_between_its_reads_is_not_copied_again_and_again():
    """A copy is read only once a scope was read READS_BEFORE_COPY times at one change
    counter, and at most once every COPY_INTERVAL seconds: a scope written between most of
    its reads is answered by the server instead of copied after every write."""
    cache = PostingsCache(budget=1_000, min_postings=10)
    loads: list[str] = []

    async def load(scope_key: str) -> ScopeCopy:
        loads.append(scope_key)
        return ScopeCopy(generation=7, active=1, postings={"a": frozenset({1})},
                         continues=frozenset(), size=1)

    for generation in range(1, 6):  # a change before every read
        cache.offer(ORG, generation, 50, load)
    await cache.settled()
    assert loads == []
    cache.offer(ORG, 7, 5, load)  # too few postings read to pay for a copy
    for _ in range(READS_BEFORE_COPY):
        cache.offer(ORG, 7, 50, load)
    await cache.settled()
    assert loads == [ORG] and cache.latest(ORG).generation == 7
    # Changed and read twice again at once: not copied again within COPY_INTERVAL.
    for _ in range(READS_BEFORE_COPY):
        cache.offer(ORG, 8, 50, load)
    await cache.settled()
    assert loads == [ORG]
    cache.interval = 0
    for _ in range(READS_BEFORE_COPY):
        cache.offer(ORG, 9, 50, load)
    await cache.settled()
    assert loads == [ORG, ORG]


def _copy_of(generation: int, size: int) -> ScopeCopy:
    return ScopeCopy(generation=generation, active=size,
                     postings={"a": frozenset(range(1, size + 1))}, continues=frozenset(),
                     size=size)


def test_the_copies_stay_within_their_budget_the_least_recently_read_dropped():
    cache = PostingsCache(budget=10)
    assert cache.put(ORG, _copy_of(1, 4)) and cache.put("org:b", _copy_of(1, 4))
    assert cache.latest(ORG) is not None  # read: "org:b" is now the least recent
    assert cache.put("org:c", _copy_of(1, 4))
    assert cache.latest("org:b") is None
    assert cache.latest(ORG) is not None and cache.latest("org:c") is not None
    assert not cache.put("org:d", _copy_of(1, 11))  # larger than the whole budget
    assert cache.latest("org:d") is None and cache.latest(ORG) is not None


async def test_a_copy_that_fails_to_load_is_one_warning_and_no_copy(caplog):
    cache = PostingsCache(budget=1_000, min_postings=10)

    async def load(scope_key: str) -> ScopeCopy:
        raise StoreError("the server went away")

    for _ in range(READS_BEFORE_COPY):
        cache.offer(ORG, 7, 50, load)
    await cache.settled()
    assert cache.latest(ORG) is None
    assert "copying the index of org:acme failed: the server went away" in caplog.text


async def test_two_stores_starting_together_migrate_once(stores):
    schema = pg.new_schema()
    together = [stores(schema) for _ in range(4)]
    await asyncio.gather(*(store.list(ORG, 1) for store in together))
    versions = raw(f'SELECT version FROM "{schema}".schema_migrations ORDER BY 1')
    assert versions == [(v.version,) for v in migrations.MIGRATIONS]
    # Migrating again (a restart) changes nothing.
    again = stores(schema)
    await again.list(ORG, 1)
    assert raw(f'SELECT version FROM "{schema}".schema_migrations ORDER BY 1') == versions


async def test_a_newer_schema_is_refused(stores):
    store = stores()
    await store.list(ORG, 1)
    raw(f'INSERT INTO "{store.schema}".schema_migrations (version, name) VALUES (99, %s)',
        ("from the future",))
    later = stores(store.schema)
    with pytest.raises(StoreError, match="version 99, newer"):
        await later.list(ORG, 1)


async def test_the_statement_timeout_keeps_the_dsn_s_own_options(stores):
    store = stores(statement_timeout_ms=1234, dsn_options="-c work_mem=7MB")
    async with store._connection() as conn:
        said = [(await (await conn.execute(f"SHOW {name}")).fetchone())[0]
                for name in ("work_mem", "statement_timeout")]
    assert said == ["7MB", "1234ms"]


async def test_a_pool_that_cannot_open_its_connections_says_so(stores, monkeypatch):
    import psycopg_pool

    async def times_out(self, wait=False, timeout=30.0):
        raise psycopg_pool.PoolTimeout(f"pool initialization incomplete after {timeout} sec")

    monkeypatch.setattr(psycopg_pool.AsyncConnectionPool, "open", times_out)
    store = stores(min_pool=1)
    with pytest.raises(StoreError, match=r"^postgres store: cannot connect: pool init"):
        await store.list(ORG, 1)


async def test_connections_the_server_closed_in_the_pool_fail_no_call(stores):
    """A restart, a failover or ``pg_terminate_backend`` closes the pooled connections: the
    next calls take new ones instead of failing on the dead ones."""
    store = stores(min_pool=3, max_pool=3)
    await store.write(ORG, [fact("the deploy runs on tuesdays", keywords=("deploy",))])

    async def pid() -> int:
        async with store._connection() as conn:
            found = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
            await asyncio.sleep(0.05)  # the three are held at once: three connections
            return int(found)

    pids = set(await asyncio.gather(pid(), pid(), pid()))
    assert len(pids) == 3
    raw("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS t(pid)", (list(pids),))
    await asyncio.sleep(0.2)
    for _call in range(4):
        assert [r.text for r in await store.retrieve(ORG, "deploy", 3)] == [
            "the deploy runs on tuesdays"]


def test_a_connection_past_descriptor_1023_is_not_taken_for_a_closed_one():
    """A busy worker's sockets run past what ``select()`` takes: its pooled connections must
    still be told live (else each call would close them all)."""
    import resource
    import socket

    from scopemem.stores.postgres.pool import _hung_up

    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] <= 1500:
        pytest.skip("the open-file limit is below 1500")
    ours, server = socket.socketpair()
    high = os.dup2(ours.fileno(), 1500)
    try:
        conn = type("Conn", (), {"fileno": lambda self: high})()
        assert not _hung_up(conn)
        server.sendall(b"E")  # the server's goodbye
        assert _hung_up(conn)
    finally:
        os.close(high)
        ours.close()
        server.close()


async def test_writers_in_two_processes_never_collide_on_an_id(stores):
    first = stores()
    second = stores(first.schema)  # another process, in effect: its own pool
    batches = [[fact(f"fact {who} {n} {m}") for m in range(5)] for who in range(2)
               for n in range(10)]
    writers = [(first if index % 2 else second).write(ORG, batch)
               for index, batch in enumerate(batches)]
    counts = await asyncio.gather(*writers)
    assert sum(c.inserted for c in counts) == 100
    ids = [r.id for r in await first.list(ORG, 200)]
    assert sorted(ids, key=lambda i: int(i.rsplit(":", 1)[1])) == [
        f"mem:{ORG}:{seq}" for seq in range(1, 101)]
    assert raw(f'SELECT last_seq FROM "{first.schema}".scopes') == [(100,)]


async def test_a_retrieval_never_waits_on_a_writers_row_lock(stores):
    import psycopg

    store = stores()
    await store.write(ORG, [fact("deploy uses docker"), fact("deploy on fridays")])
    async with await psycopg.AsyncConnection.connect(pg.dsn()) as writer:
        await writer.execute(f'SELECT 1 FROM "{store.schema}".records WHERE scope_key = %s'
                             " AND seq = 1 FOR UPDATE", (ORG,))  # held until rollback
        hits = await asyncio.wait_for(store.retrieve(ORG, "deploy docker", 5), timeout=3)
        assert [(r.id, r.use_count) for r in hits] == [(f"mem:{ORG}:1", 1),
                                                       (f"mem:{ORG}:2", 1)]
        counts = raw(f'SELECT seq, use_count FROM "{store.schema}".records ORDER BY seq')
        assert counts[0] == (1, 0)  # the locked row's use is still to come
        await writer.rollback()
    await store.flush()
    counts = raw(f'SELECT seq, use_count FROM "{store.schema}".records ORDER BY seq')
    assert counts == [(1, 1), (2, 1)]


async def test_forget_scrubs_the_row_and_keeps_its_provenance(stores):
    store = stores()
    await store.write(ORG, [fact("the vault password rotates monthly", keywords=("vault",),
                                 source_run_id="r-9")])
    assert await store.forget(ORG, f"mem:{ORG}:1")
    (row,) = raw(f'SELECT text, norm, keywords, tokens, status, source_run_id, id'
                 f' FROM "{store.schema}".records')
    assert row == ("", "", [], [], Status.FORGOTTEN.value, "r-9", f"mem:{ORG}:1")
    assert not await store.forget(ORG, f"mem:{ORG}:1")


async def test_max_scopes_refuses_a_new_scope_only(stores):
    store = stores(max_scopes=2)
    await store.write("org:a", [fact("one")])
    await store.write("org:b", [fact("two")])
    with pytest.raises(ScopeLimitReached, match="max_scopes = 2"):
        await store.write("org:c", [fact("three")])
    await store.write("org:a", [fact("four")])  # an existing scope still takes writes
    assert await store.list("org:c", 5) == []


async def test_a_value_the_server_refuses_is_a_refusal_not_a_failure(stores):
    """A value PostgreSQL cannot keep (a NUL character reaching it by a path that forgot to
    fit it) is ``StoreRefused``: the input's fault, so reflection writes the batch again one
    candidate at a time and the worker answers 400, never 500."""
    store = stores()
    with pytest.raises(StoreRefused, match="NUL"):
        async with store._connection() as conn:
            await conn.execute("SELECT %s::text", ("deploys\x00",))
    assert await store.write(ORG, [fact("deploys\x00 need the vpn")]) == WriteCounts(inserted=1)


async def test_a_changed_analyzer_re_derives_the_tokens(stores, clock: FakeClock):
    from scopemem.core.ranking import Ranking
    from scopemem.core.words import PLAIN

    english = stores()
    await english.write(ORG, [fact("deploying the caches")])
    assert [r.id for r in await english.retrieve(ORG, "deploy cache", 5)] == [f"mem:{ORG}:1"]
    plain = stores(english.schema, ranking=Ranking(PLAIN))
    assert await plain.retrieve(ORG, "deploy cache", 5) == []  # no stemming now
    assert [r.id for r in await plain.retrieve(ORG, "deploying", 5)] == [f"mem:{ORG}:1"]
    (tokens,) = raw(f'SELECT tokens FROM "{english.schema}".records')
    assert tokens == (["caches", "deploying", "the"],)


async def test_a_schema_written_under_another_analyzer_is_a_warning_naming_both(
        stores, caplog):
    """Another process may still use the schema under the analyzer its rows followed: the
    re-derivation is a warning naming both signatures and the setting (a command line shows
    it), where it was an INFO line."""
    import logging

    from scopemem.core.ranking import Ranking
    from scopemem.core.words import PLAIN

    english = stores()
    await english.write(ORG, [fact("deploying the caches")])
    caplog.set_level(logging.INFO, logger="scopemem.stores.postgres")
    plain = stores(english.schema, ranking=Ranking(PLAIN))
    await plain.list(ORG, 1)
    [line] = [r for r in caplog.records if "re-derived" in r.getMessage()]
    assert line.levelno == logging.WARNING, line.getMessage()
    assert f"written under {english.ranking.analyzer.signature}" in line.getMessage()
    assert "memory.languages" in line.getMessage()


async def test_close_applies_the_uses_still_deferred(stores):
    import psycopg

    store = stores()
    await store.write(ORG, [fact("deploy uses docker")])
    async with await psycopg.AsyncConnection.connect(pg.dsn()) as writer:
        await writer.execute(f'SELECT 1 FROM "{store.schema}".records WHERE scope_key = %s'
                             " FOR UPDATE", (ORG,))
        assert [r.use_count for r in await store.retrieve(ORG, "docker", 5)] == [1]
        assert [r.use_count for r in await store.retrieve(ORG, "docker", 5)] == [2]
        await writer.rollback()
    await store.close()
    assert raw(f'SELECT use_count FROM "{store.schema}".records') == [(2,)]


def test_two_processes_starting_together_migrate_once(stores):
    schema = pg.new_schema()
    stores(schema)  # dropped with the test
    code = ("import asyncio, sys\n"
            "from tests.stores import pg\n"
            "async def main():\n"
            "    store = pg.make(sys.argv[1])\n"
            "    await store.list('org:acme', 1)\n"
            "    await store.close()\n"
            "asyncio.run(main())\n")
    children = [subprocess.Popen([sys.executable, "-c", code, schema], cwd=ROOT,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
                for _ in range(2)]
    assert [child.wait(timeout=60) for child in children] == [0, 0]
    versions = raw(f'SELECT version FROM "{schema}".schema_migrations ORDER BY 1')
    assert versions == [(v.version,) for v in migrations.MIGRATIONS]


async def test_readers_and_writers_on_one_scope_lose_no_use_and_never_deadlock(stores):
    first = stores()
    second = stores(first.schema)  # another process, in effect
    texts = [f"deploy step {n} uses the docker cache" for n in range(12)]
    await first.write(ORG, [fact(text) for text in texts])

    async def writer(store: PostgresStore, k: int) -> int:
        deduped = 0
        for n in range(6):  # the same texts again (dedup bumps) and new ones
            counts = await store.write(ORG, [fact(texts[(k + n) % 12]),
                                             fact(f"new fact {k} {n} about docker")])
            deduped += counts.deduped
        return deduped

    async def reader(store: PostgresStore) -> int:
        hits = 0
        for _ in range(8):
            hits += len(await store.retrieve(ORG, "deploy docker cache", 8))
        return hits

    results = await asyncio.gather(*(writer(s, k) for k, s in enumerate([first, second] * 2)),
                                   *(reader(s) for s in [first, second] * 3))
    await first.flush()
    await second.flush()
    deduped, hits = sum(results[:4]), sum(results[4:])
    (uses,) = raw(f'SELECT sum(use_count) FROM "{first.schema}".records')
    assert uses == (deduped + hits,)
    ids = [r.id for r in await first.list(ORG, 50)]
    assert len(ids) == len(set(ids)) == 12 + 4 * 6


async def test_recency_is_the_last_use_where_there_is_one(stores, clock: FakeClock):
    """Of two records matching a query equally, the newer comes first, until the older is
    used: then it does (the rows a retrieval reads with its postings are ranked by their
    last use, as every store ranks)."""
    store = stores()
    await store.write(ORG, [fact("deploy the widgets with docker", source_thread_key="t:1")])
    clock.advance(3_600_000)
    await store.write(ORG, [fact("deploy the gadgets with docker", source_thread_key="t:2")])
    older, newer = f"mem:{ORG}:1", f"mem:{ORG}:2"
    hits = await store.search(ORG, "docker deploy", 2, bump=False)
    assert [hit.record.id for hit in hits] == [newer, older]
    assert hits[0].match == hits[1].match
    clock.advance(3_600_000)
    assert [r.id for r in await store.retrieve(ORG, "widgets", 1)] == [older]  # a use
    hits = await store.search(ORG, "docker deploy", 2, bump=False)
    assert [hit.record.id for hit in hits] == [older, newer]


@pytest.mark.parametrize(("column", "value"), [
    ("use_count", -7), ("last_used_at", -5), ("created_at", -1), ("confidence", 7.5),
    ("id", "mem:repo:evil/other:1"), ("text", ""),
])
async def test_a_row_written_into_the_schema_by_hand_is_a_store_error_naming_it(
        stores, column: str, value: object):
    """A row another program wrote into the schema (a negative count or time, a confidence
    past 1, an id of another scope, an active record without text) fails the read with a
    store error naming it, never a record of another scope's id listed in this one."""
    store = stores()
    await store.write(ORG, [fact("the deploy runs on tuesdays")])
    raw(f'UPDATE "{store.schema}".records SET {column} = %s', (value,))
    with pytest.raises(StoreError, match=f"{ORG}'s row 1 .*\\({column}"):
        await store.list(ORG, 10)
    with pytest.raises(StoreError, match=f"{ORG}'s row 1"):
        await store.export_page(ORG, 0, 10)


async def test_a_read_only_dsn_reads_a_current_schema_and_refuses_only_writes(stores):
    """A replica, or a DSN with ``default_transaction_read_only``: its retrievals answer
    (the schema is current, so opening it writes nothing); its writes fail, saying why."""
    store = stores()
    await store.write(ORG, [fact("the deploy runs on tuesdays", keywords=("deploy",))])
    replica = stores(store.schema, dsn_options="-c default_transaction_read_only=on")
    assert [r.text for r in await replica.retrieve(ORG, "deploy", 3)] == [
        "the deploy runs on tuesdays"]
    with pytest.raises(StoreError, match="read-only transaction"):
        await replica.write(ORG, [fact("the release is on fridays", keywords=("release",))])


async def test_a_connection_lost_in_a_call_is_busy_so_the_call_is_tried_again(stores):
    """A restart, a failover or ``pg_terminate_backend`` in the middle of a call: the call
    fails as busy (503 with ``Retry-After`` from the worker, which its clients retry on a
    new connection), saying the connection was lost, never as the store failing (500)."""
    store = stores(min_pool=1, max_pool=1)
    await store.list(ORG, 1)
    with pytest.raises(StoreBusy, match="^postgres store: the connection to the server was lost"):
        async with store._connection() as conn:
            pid = (await (await conn.execute("SELECT pg_backend_pid()")).fetchone())[0]
            raw("SELECT pg_terminate_backend(%s)", (pid,))
            await conn.execute("SELECT 1")
    assert await store.list(ORG, 1) == []  # the next call takes a new connection


@pytest.mark.parametrize("table", ["postings", "records", "scopes"])
async def test_a_table_another_program_dropped_makes_the_store_not_ready(
        stores, table, caplog: pytest.LogCaptureFixture):
    """``/readyz`` and ``scopemem health`` must not call a store ready whose every call
    fails: a schema missing one of its tables (renamed or dropped by another program) is
    not, and the log names the tables."""
    from scopemem.stores.health import NOT_READY_FAILED, store_ready

    store = stores()
    await store.write(ORG, [fact("the deploy runs on tuesdays", keywords=("deploy",))])
    assert await store_ready(store) is None
    raw(f'ALTER TABLE "{store.schema}".{table} RENAME TO {table}_elsewhere')
    assert await store_ready(store) == NOT_READY_FAILED
    assert f"lacks its table(s) {table}" in caplog.text


async def test_a_browsing_read_answers_from_one_snapshot(stores):
    """A page's statements (its count, then its rows) see the same data: a change another
    connection commits between them is in neither or both, never in the second alone."""
    store = stores()
    await store.write(ORG, [fact("the deploy needs the VPN up")])
    records = store.sql.dialect.table("records")
    used = f"SELECT sum(use_count) FROM {records} WHERE scope_key = %(scope)s"

    def plan():
        before = yield used, {"scope": ORG}, False
        raw(f"UPDATE {records} SET use_count = use_count + 7 WHERE scope_key = %s", (ORG,))
        after = yield used, {"scope": ORG}, False
        return before[0][0], after[0][0]

    browse = store.record_page.__self__  # the store's browsing part runs a plan
    before, after = await browse.read(0, plan())
    assert before == after
    assert raw(used.replace("%(scope)s", "%s"), (ORG,))[0][0] == before + 7


async def test_use_counts_a_replica_cannot_save_are_warned_about_once_not_every_try(
        stores, caplog):
    """Uses counted on a read-only DSN cannot be saved there: one warning while the saves
    keep failing, not one every retry (every half second, for as long as it serves)."""
    store = stores()
    await store.write(ORG, [fact("the deploy runs on tuesdays", keywords=("deploy",))])
    replica = stores(store.schema, dsn_options="-c default_transaction_read_only=on")
    with caplog.at_level(logging.WARNING, logger="scopemem"):
        for _ in range(3):
            assert await replica.retrieve(ORG, "deploy", 3)
            await replica.flush()
    tries = [r for r in caplog.records if "not saved yet" in r.getMessage()]
    assert len(tries) == 1 and "read-only transaction" in tries[0].getMessage()
