"""The stores the contract suite runs against. A new store joins by adding a factory here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack

import pytest

from scopemem.stores.base import MemoryStore
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite import SqliteStore
from tests.conftest import FakeClock

MakeStore = Callable[..., Awaitable[MemoryStore]]

STORE_KINDS = ["memory", "sqlite", "worker"]


@pytest.fixture(params=STORE_KINDS)
async def make_store(request: pytest.FixtureRequest, clock: FakeClock, tmp_path
                     ) -> AsyncIterator[MakeStore]:
    """``await make_store(cap=…)`` builds a fresh store of the parametrized kind."""
    built: list[MemoryStore] = []
    servers = AsyncExitStack()

    async def make(cap: int = 500) -> MemoryStore:
        if request.param == "memory":
            store: MemoryStore = InMemoryStore(cap=cap, clock=clock)
        elif request.param == "sqlite":
            store = SqliteStore(tmp_path / f"sqlite-{len(built)}", cap=cap, clock=clock)
        elif request.param == "worker":
            # WorkerStore -> a live aiohttp server on 127.0.0.1 -> a SqliteStore.
            backing = SqliteStore(tmp_path / f"worker-{len(built)}", cap=cap, clock=clock)
            store = await _served(servers, backing, cap)
        else:  # pragma: no cover - every kind above is handled
            raise AssertionError(request.param)
        built.append(store)
        return store

    yield make
    for store in built:
        await store.close()
    await servers.aclose()  # stops each server, which closes the store it served


async def _served(servers: AsyncExitStack, backing: MemoryStore, cap: int) -> MemoryStore:
    from scopemem.stores.worker import WorkerStore
    from scopemem.worker_aiohttp.app import create_app, running

    url = await servers.enter_async_context(running(create_app(backing, "contract-token")))
    return WorkerStore(url, "contract-token", cap=cap)


@pytest.fixture
async def store(make_store: MakeStore) -> MemoryStore:
    return await make_store()
