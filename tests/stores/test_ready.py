"""``store_ready``: the readiness check ``/readyz`` and ``scopemem health`` share, on the
real stores: a read of the reserved scope (SQLite, the memory store) or the pool
(PostgreSQL), and a short fixed reason when the store cannot serve."""

from __future__ import annotations

import pytest

from scopemem.core.scopes import READINESS_SCOPE
from scopemem.stores.health import NOT_READY_FAILED, store_ready
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared.store import SharedSqliteStore
from tests.stores import pg


async def test_a_store_that_serves_is_ready_and_gains_nothing(tmp_path, clock):
    for store in (InMemoryStore(clock=clock), SharedSqliteStore(tmp_path / "shared", clock=clock)):
        try:
            assert await store_ready(store) is None
            assert await store.list(READINESS_SCOPE, 5) == []
        finally:
            await store.close()


async def test_a_shared_sqlite_directory_that_cannot_open_is_not_ready(tmp_path, clock):
    """The shared layout (the default) opens its shard to read any scope."""
    blocker = tmp_path / "data"
    blocker.write_text("a file where the data directory should be")
    store = SharedSqliteStore(blocker, clock=clock)
    try:
        assert await store_ready(store) == NOT_READY_FAILED
    finally:
        await store.close()


async def test_postgres_is_ready_through_its_pool(clock):
    pg.require()
    store = pg.make(clock=clock)
    try:
        assert await store_ready(store) is None
    finally:
        await store.close()
        pg.drop_schemas(store.schema)


async def test_an_unreachable_postgres_is_not_ready_and_says_no_more(clock, caplog):
    pytest.importorskip("psycopg")
    from scopemem.stores.postgres import PostgresStore
    from scopemem.stores.postgres.options import PostgresOptions

    store = PostgresStore(PostgresOptions(
        dsn="postgresql://scopemem:hunter2@127.0.0.1:1/none?connect_timeout=2", min_pool=0),
        clock=clock)
    try:
        assert await store_ready(store) == NOT_READY_FAILED
    finally:
        await store.close()
    assert "postgres store" in caplog.text  # the cause is in the log, not the reason


async def test_a_store_that_never_answers_is_not_ready_within_the_bound(clock, monkeypatch,
                                                                       caplog):
    # A database that accepts connections and never answers (a frozen server) held a probe
    # for the pool's 30 s wait, or for good: the orchestrator's probe gives up first, and
    # the handlers pile up meanwhile.
    import asyncio

    from scopemem.stores import health

    class Frozen(InMemoryStore):
        async def ready(self) -> str | None:
            await asyncio.Event().wait()
            return None

    monkeypatch.setattr(health, "READY_SECONDS", 0.05)
    assert await store_ready(Frozen(clock=clock)) == health.NOT_READY_SLOW
    assert "did not answer within 0.05 s" in caplog.text
