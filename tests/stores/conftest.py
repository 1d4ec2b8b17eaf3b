"""The stores the contract suite runs against. A new store joins by adding a factory here."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import apsw
import pytest

from scopemem.core.ranking import Ranking
from scopemem.stores.base import MemoryStore, StoreSettings
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import FakeClock
from tests.stores import pg

MakeStore = Callable[..., Awaitable[MemoryStore]]

#: A store plugin installed beside scopemem joins the suite by its registered name
#: (docs/plugins.md): ``SCOPEMEM_TEST_STORE_PLUGIN=<name>``, its ``[memory.stores.<name>]``
#: table as JSON in ``SCOPEMEM_TEST_STORE_OPTIONS``, where ``{tmp}`` is a fresh directory of
#: each store a test builds.
PLUGIN_STORE = os.environ.get("SCOPEMEM_TEST_STORE_PLUGIN")
STORE_KINDS = ["memory", "sqlite", "worker", "postgres",
               *([f"plugin:{PLUGIN_STORE}"] if PLUGIN_STORE else [])]


@pytest.fixture(scope="session", autouse=True)
def _postgres_run_schemas() -> Iterator[None]:
    """Drop whatever schema a Postgres test of this run left behind (a crash, say)."""
    yield
    if pg.unavailable() is None:
        pg.drop_run_schemas()


@pytest.fixture(params=STORE_KINDS)
async def make_store(request: pytest.FixtureRequest, clock: FakeClock, tmp_path
                     ) -> AsyncIterator[MakeStore]:
    """``await make_store(cap=…, retention_days=…, ranking=…)`` builds a fresh store of the
    parametrized kind (the worker's retention is its backing store's); ``ranking`` defaults
    to the stores' own."""
    built: list[MemoryStore] = []
    servers = AsyncExitStack()
    schemas: list[str] = []
    if request.param == "postgres":
        pg.require()

    async def make(cap: int = 500, retention_days: int = 30, ranking: Ranking | None = None
                   ) -> MemoryStore:
        ranked: dict[str, Any] = {} if ranking is None else {"ranking": ranking}
        if request.param == "memory":
            store: MemoryStore = InMemoryStore(cap=cap, clock=clock,
                                               retention_days=retention_days, **ranked)
        elif request.param == "sqlite":
            store = SharedSqliteStore(tmp_path / f"shared-{len(built)}", cap=cap, clock=clock,
                                      retention_days=retention_days, **ranked)
        elif request.param == "worker":
            # WorkerStore -> a live aiohttp server on 127.0.0.1 -> the SQLite store in the
            # layout users get.
            backing = SharedSqliteStore(tmp_path / f"worker-{len(built)}", cap=cap,
                                        clock=clock, retention_days=retention_days, **ranked)
            store = await _served(servers, backing, cap, **ranked)
        elif request.param == "postgres":
            schemas.append(pg.lend_schema())
            store = pg.make(schemas[-1], cap=cap, clock=clock, retention_days=retention_days,
                            **ranked)
        elif request.param.startswith("plugin:"):
            store = _plugin_store(request.param.removeprefix("plugin:"),
                                  tmp_path / f"plugin-{len(built)}", cap=cap, clock=clock,
                                  retention_days=retention_days, **ranked)
        else:  # pragma: no cover - every kind above is handled
            raise AssertionError(request.param)
        built.append(store)
        return store

    yield make
    for store in built:
        await store.close()
    await servers.aclose()  # stops each server, which closes the store it served
    if schemas:
        pg.give_back(*schemas)


async def _served(servers: AsyncExitStack, backing: MemoryStore, cap: int, **ranked: Any
                  ) -> MemoryStore:
    from scopemem.stores.worker import WorkerStore
    from scopemem.worker_aiohttp.app import create_app, running

    url = await servers.enter_async_context(running(create_app(backing, "contract-token")))
    return WorkerStore(url, "contract-token", cap=cap, **ranked)


def _plugin_store(name: str, directory: Path, **settings: Any) -> MemoryStore:
    """The store plugin ``name`` builds, as ``memory.store = "<name>"`` would build it."""
    from scopemem.installation import store_registry
    from scopemem.plugins.manager import new_plugin_manager

    directory.mkdir()
    options = os.environ.get("SCOPEMEM_TEST_STORE_OPTIONS", "{}")
    factory = store_registry(new_plugin_manager()).get(name)
    store: MemoryStore = factory(StoreSettings(
        name=name, options=json.loads(options.replace("{tmp}", str(directory))), **settings))
    return store


@pytest.fixture
def traced() -> Iterator[list[tuple[str, tuple, str]]]:
    """Every SQL statement the store's connections run: (sql, bindings, thread name)."""
    seen: list[tuple[str, tuple, str]] = []

    def tracer(_cursor, sql, bindings):  # type: ignore[no-untyped-def]
        seen.append((" ".join(sql.split()), tuple(bindings or ()),
                     threading.current_thread().name))
        return True

    with on_every_connection(lambda conn: setattr(conn, "exec_trace", tracer)):
        yield seen


@contextlib.contextmanager
def on_every_connection(hook: Callable[[apsw.Connection], None]) -> Iterator[None]:
    """Run ``hook`` on every apsw connection opened inside the block."""
    apsw.connection_hooks.append(hook)
    try:
        yield
    finally:
        apsw.connection_hooks.remove(hook)


@pytest.fixture
async def make(tmp_path: Path, clock: FakeClock
               ) -> AsyncIterator[Callable[..., SharedSqliteStore]]:
    """``make(directory=None, **options)`` builds a SharedSqliteStore (under
    ``tmp_path/data`` by default, on the test's clock), closed after the test."""
    built: list[SharedSqliteStore] = []

    def build(directory: Path | None = None, **options: Any) -> SharedSqliteStore:
        options.setdefault("clock", clock)
        store = SharedSqliteStore(directory or tmp_path / "data", **options)
        built.append(store)
        return store

    yield build
    for store in built:
        await store.close()


@pytest.fixture
async def store(make_store: MakeStore) -> MemoryStore:
    return await make_store()
