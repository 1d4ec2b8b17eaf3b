"""A PostgreSQL server the store can no longer reach, and a pool whose every connection is
busy: each call says which it is, and a server out of reach costs a call one connection
attempt, not the pool's whole wait. The server goes away through a TCP forwarder on
127.0.0.1 that the test closes (see ``tests/stores/pg.py`` for the server itself)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from scopemem.errors import StoreBusy
from tests.conftest import fact
from tests.stores import pg, test_postgres

stores = test_postgres.stores  # the fixture: stores closed, schemas dropped

ORG = "org:acme"


class Forwarder:
    """127.0.0.1:<port> → the test server, until ``close`` (which also cuts every
    connection through it); ``start`` again listens on the same port."""

    def __init__(self) -> None:
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        from psycopg.conninfo import conninfo_to_dict

        target = conninfo_to_dict(pg.dsn())
        self._target = (str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port,
                                                  reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    def dsn(self) -> str:
        from psycopg.conninfo import make_conninfo

        return make_conninfo(pg.dsn(), host="127.0.0.1", port=self.port)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._open |= {writer, up_writer}

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._open:
            writer.close()
        for writer in self._open:  # the FIN sent before the store looks again
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        self._open.clear()
        await self._server.wait_closed()


@pytest.fixture
async def forwarder():
    pg.require()
    forwarding = Forwarder()
    await forwarding.start()
    yield forwarding
    with contextlib.suppress(Exception):
        await forwarding.close()


async def test_a_server_gone_after_the_pool_opened_is_said_at_once_and_recovered(
        stores, forwarder):
    store = stores(server=forwarder.dsn(), min_pool=1, max_pool=4)
    await store.write(ORG, [fact("the deploy runs on tuesdays", keywords=("deploy",))])
    await store.flush()
    await forwarder.close()
    with pytest.raises(StoreBusy) as raised:
        await store.retrieve(ORG, "deploy", 3)
    said = str(raised.value)
    # What is true, with the attempt's own error, and not the advice for a busy pool.
    assert said.startswith("postgres store: cannot connect to the server:")
    assert "Connection refused" in said and "max_pool" not in said
    # Not ready, and not "busy": nothing is being served.
    from scopemem.stores.health import NOT_READY_FAILED, store_ready

    assert await store_ready(store) == NOT_READY_FAILED
    await forwarder.start()  # the server is back: the next call connects again
    assert [r.text for r in await store.retrieve(ORG, "deploy", 3)] == [
        "the deploy runs on tuesdays"]


async def test_every_connection_busy_says_so_and_names_max_pool(stores):
    store = stores(min_pool=1, max_pool=1, pool_wait_ms=200)
    await store.list(ORG, 1)
    async with store._connection():  # the pool's one connection, held
        with pytest.raises(StoreBusy) as raised:
            await store.list(ORG, 1)
    said = str(raised.value)
    assert said.startswith("postgres store: no connection free:")
    assert "all 1 of max_pool" in said
    assert await store.list(ORG, 1) == []


async def test_a_call_cancelled_while_it_waits_for_a_connection_leaves_none_taken(stores):
    """A request whose client left while it waited (the worker cancels it): the connection
    the pool frees next goes to the next call, not to the cancelled one."""
    store = stores(min_pool=1, max_pool=1, pool_wait_ms=2000)
    await store.list(ORG, 1)
    async with store._connection():
        waiting = asyncio.ensure_future(store.list(ORG, 1))
        for _ in range(20):
            await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    assert await store.list(ORG, 1) == []
    assert await store.list(ORG, 1) == []
