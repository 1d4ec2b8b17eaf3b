"""Shared pieces of the worker tests: a store that records its calls, the app, raw HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from scopemem.core.records import Candidate, Kind, PurgeResult, Record, SweepResult, WriteCounts
from scopemem.stores.memory import InMemoryStore
from scopemem.worker_aiohttp.app import create_app
from tests.conftest import FakeClock

TOKEN = "s3cret-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ORG = "org:acme"


class SpyStore:
    """An in-memory store that records every call, and can be told to fail or to hold a
    write until released (for shutdown tests)."""

    def __init__(self, clock: FakeClock) -> None:
        self.inner = InMemoryStore(clock=clock)
        self.calls: list[tuple[Any, ...]] = []
        self.fail: BaseException | None = None
        self.hold: asyncio.Event | None = None
        self.entered = asyncio.Event()
        self.closed = False

    async def _enter(self, *call: Any) -> None:
        self.calls.append(call)
        self.entered.set()
        if self.fail is not None:
            raise self.fail
        if self.hold is not None:
            await self.hold.wait()

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        await self._enter("retrieve", scope_key, query, limit)
        return await self.inner.retrieve(scope_key, query, limit)

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Any]:
        await self._enter("retrieve", scope_key, query, limit)
        return await self.inner.search(scope_key, query, limit, bump=bump)

    async def mark_used(self, used: Any) -> int:
        await self._enter("used", dict(used))
        return await self.inner.mark_used(used)

    async def write(self, scope_key: str, candidates: Sequence[Candidate],
                    cap: int | None = None) -> WriteCounts:
        await self._enter("write", scope_key, tuple(candidates), cap)
        return await self.inner.write(scope_key, candidates, cap)

    async def list(self, scope_key: str, limit: int, query: str | None = None,
                   kind: Kind | None = None) -> list[Record]:
        await self._enter("list", scope_key, limit, query, kind)
        return await self.inner.list(scope_key, limit, query, kind)

    async def forget(self, scope_key: str, record_id: str) -> bool:
        await self._enter("forget", scope_key, record_id)
        return await self.inner.forget(scope_key, record_id)

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        await self._enter("sweep", scope_key, dry_run)
        return await self.inner.sweep(scope_key, dry_run)

    async def export_scopes(self) -> list[str]:
        await self._enter("scopes")
        return await self.inner.export_scopes()

    async def export_page(self, scope_key: str, after: int, limit: int) -> list[Record]:
        await self._enter("export", scope_key, after, limit)
        return await self.inner.export_page(scope_key, after, limit)

    async def vectors_missing(self, scope_key: str, model: str, limit: int
                              ) -> list[tuple[str, str]]:
        await self._enter("vectors_missing", scope_key, model, limit)
        return await self.inner.vectors_missing(scope_key, model, limit)

    async def put_vectors(self, scope_key: str, model: str,
                          vectors: Sequence[tuple[str, bytes]]) -> int:
        await self._enter("put_vectors", scope_key, model, tuple(vectors))
        return await self.inner.put_vectors(scope_key, model, vectors)

    async def nearest(self, scope_key: str, model: str, vector: bytes, limit: int,
                      floor: float, include: Sequence[str] = ()) -> list[Any]:
        await self._enter("nearest", scope_key, model, limit, floor, tuple(include))
        return await self.inner.nearest(scope_key, model, vector, limit, floor, include)

    async def import_records(self, records: Sequence[Record]) -> int:
        await self._enter("import", tuple(records))
        return await self.inner.import_records(records)

    async def add_counts(self, rows: Sequence[Any]) -> None:
        await self._enter("counts", tuple(rows))
        await self.inner.add_counts(rows)

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[Any]:
        await self._enter("stats", scope_keys, prefix, since_day)
        return await self.inner.read_counts(scope_keys, prefix=prefix, since_day=since_day)

    async def delete_scope(self, scope_key: str) -> int:
        await self._enter("delete-scope", scope_key)
        return await self.inner.delete_scope(scope_key)

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        await self._enter("scrub-provenance", scope_key, person_key)
        return await self.inner.scrub_provenance(scope_key, person_key)

    async def purge(self) -> PurgeResult:
        await self._enter("purge")
        return await self.inner.purge()

    async def scope_page(self, **args: Any) -> Any:
        await self._enter("scope-page", args)
        return await self.inner.scope_page(**args)

    async def record_page(self, scope_key: str, **args: Any) -> Any:
        await self._enter("record-page", scope_key, args)
        return await self.inner.record_page(scope_key, **args)

    async def record_history(self, scope_key: str, record_id: str) -> Any:
        await self._enter("record-history", scope_key, record_id)
        return await self.inner.record_history(scope_key, record_id)

    async def read_count_totals(self, kind: str, **args: Any) -> list[Any]:
        await self._enter("count-totals", kind, args)
        return await self.inner.read_count_totals(kind, **args)

    async def log_reaches(self, reaches: Sequence[Any]) -> None:
        await self._enter("log-reaches", tuple(reaches))
        await self.inner.log_reaches(reaches)

    async def read_reaches(self, **args: Any) -> list[Any]:
        await self._enter("reaches", args)
        return await self.inner.read_reaches(**args)

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def spy(clock: FakeClock) -> SpyStore:
    return SpyStore(clock)


@pytest.fixture
async def client(aiohttp_client, spy: SpyStore):
    return await aiohttp_client(create_app(spy, TOKEN))


def candidate(text: str = "run npm ci before the license check", **fields: Any
              ) -> dict[str, Any]:
    return {"kind": "fact", "text": text, "sourceThreadKey": "slack:C1/100", **fields}


async def read_to_close(port: int, raw: bytes, timeout: float = 5.0) -> bytes:
    """Everything the server sends on one connection until it closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), timeout)  # read() returns at EOF only
    finally:
        writer.close()


async def raw_exchange(port: int, request: bytes, *, timeout: float = 5.0) -> tuple[int, bytes]:
    """Send raw bytes to 127.0.0.1:port; the status and body of the first response.

    The request may be incomplete on purpose (a declared body never sent): the server must
    answer from the headers alone, or this times out."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        status = int(head.split(b" ", 2)[1])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        body = await asyncio.wait_for(reader.readexactly(length), timeout) if length else b""
        return status, body
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
