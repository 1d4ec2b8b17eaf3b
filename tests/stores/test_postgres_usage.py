"""When a use counted by one PostgreSQL store reaches the database (``usage.py``).

A retrieval writes nothing: its uses are saved in the background within ``usage_flush_ms``,
or before this store's next write, listing, record page, export, forget or sweep of the
scope, or at ``flush``/``close``. Until then only this store shows them, in every answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from scopemem.stores.postgres import PostgresStore
from scopemem.stores.postgres.usage import DeferredUsage
from tests.conftest import fact
from tests.stores import test_postgres
from tests.stores.test_postgres import raw

stores = test_postgres.stores  # the fixture: stores closed, schemas dropped

ORG = "org:acme"
LATER = 60_000  # a flush delay no test waits for


def saved_uses(store: PostgresStore) -> list[tuple[int, int]]:
    return raw(f'SELECT seq, use_count FROM "{store.schema}".records ORDER BY seq')


async def test_a_retrieval_writes_nothing_and_shows_its_uses_at_once(stores):
    here = stores(usage_flush_ms=LATER)
    await here.write(ORG, [fact("deploy uses docker"), fact("lunch is at noon")])
    assert [r.use_count for r in await here.retrieve(ORG, "docker", 5)] == [1]
    assert [r.use_count for r in await here.retrieve(ORG, "docker", 5)] == [2]
    assert saved_uses(here) == [(1, 0), (2, 0)]  # nothing written on the retrieval's path
    assert [(r.text, r.use_count) for r in await here.list(ORG, 5)] == [
        ("lunch is at noon", 0), ("deploy uses docker", 2)]
    assert saved_uses(here) == [(1, 2), (2, 0)]  # the listing saved them first


async def test_another_store_sees_a_use_once_it_is_saved(stores):
    here = stores(usage_flush_ms=LATER)
    there = stores(here.schema)
    await here.write(ORG, [fact("deploy uses docker")])
    await here.retrieve(ORG, "docker", 5)
    assert await here.mark_used({ORG: [f"mem:{ORG}:1", f"mem:{ORG}:9"]}) == 1
    [seen] = await there.search(ORG, "docker", 5, bump=False)
    assert seen.record.use_count == 0  # a ranking hint, not an acknowledged write
    await here.flush()
    [seen] = await there.search(ORG, "docker", 5, bump=False)
    assert seen.record.use_count == 2


async def test_a_write_saves_the_scope_s_uses_first_so_its_dedup_counts_them(stores):
    here = stores(usage_flush_ms=LATER)
    await here.write(ORG, [fact("deploy uses docker")])
    await here.retrieve(ORG, "docker", 5)
    counts = await here.write(ORG, [fact("deploy uses docker")])
    assert counts.deduped == 1
    assert saved_uses(here) == [(1, 2)]  # the retrieval's use, then the dedup's


async def test_uses_reach_the_database_in_the_background(stores):
    here = stores(usage_flush_ms=0)
    await here.write(ORG, [fact("deploy uses docker")])
    await here.retrieve(ORG, "docker", 5)
    for _ in range(1000):  # no flush, no write: the background task alone
        if saved_uses(here) == [(1, 1)]:
            break
        await asyncio.sleep(0.01)
    assert saved_uses(here) == [(1, 1)]


async def test_a_forgotten_record_keeps_the_uses_it_had(stores):
    here = stores(usage_flush_ms=LATER)
    await here.write(ORG, [fact("deploy uses docker")])
    [used] = await here.retrieve(ORG, "docker", 5)
    assert await here.forget(ORG, used.id)
    assert saved_uses(here) == [(1, 1)]


# --- the queue alone (no server): a save never overlaps a read of its scope -----------------


def recording_queue() -> tuple[DeferredUsage, list[tuple[str, dict[int, list[int]]]],
                               asyncio.Event]:
    """A queue whose saves are recorded, each held until ``release`` is set."""
    saved: list[tuple[str, dict[int, list[int]]]] = []
    release = asyncio.Event()

    async def apply(scope_key: str, bumps: Mapping[int, list[int]]) -> list[int]:
        await release.wait()
        saved.append((scope_key, dict(bumps)))
        return []

    return DeferredUsage(apply, flush_ms=LATER), saved, release


async def test_a_save_waits_for_the_reads_of_its_scope_under_way():
    usage, saved, release = recording_queue()
    release.set()
    usage.add(ORG, [1], 5)
    async with usage.reading(ORG):
        save = asyncio.ensure_future(usage.save(ORG))
        for _ in range(5):
            await asyncio.sleep(0)
        assert saved == [] and usage.pending(ORG) == {1: [1, 5]}  # what this read adds
    assert await save
    assert saved == [(ORG, {1: [1, 5]})] and usage.pending(ORG) == {}


async def test_a_read_waits_for_a_save_of_its_scope_under_way():
    usage, saved, release = recording_queue()
    usage.add(ORG, [1], 5)
    usage.add("org:other", [2], 5)
    save = asyncio.ensure_future(usage.save(ORG))
    for _ in range(5):
        await asyncio.sleep(0)
    seen: list[Mapping[int, list[int]]] = []

    async def read(scope_key: str) -> None:
        async with usage.reading(scope_key):
            seen.append(dict(usage.pending(scope_key)))

    await read("org:other")  # another scope's read does not wait
    reader = asyncio.ensure_future(read(ORG))
    for _ in range(5):
        await asyncio.sleep(0)
    assert seen == [{2: [1, 5]}]
    release.set()
    await asyncio.gather(save, reader)
    assert seen == [{2: [1, 5]}, {}]  # the uses are in the rows now, not added twice


async def test_a_drain_waits_for_a_save_under_way():
    """``flush`` and ``close`` drain: a save already under way (its uses taken from the
    pending ones) is part of what they wait for, or the pool closes under it and its uses
    are lost, tried again every half second against a closed store."""
    usage, saved, release = recording_queue()
    usage.add(ORG, [1], 5)
    save = asyncio.ensure_future(usage.save(ORG))
    for _ in range(5):
        await asyncio.sleep(0)
    drain = asyncio.ensure_future(usage.drain())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not drain.done()
    release.set()
    await drain
    assert saved == [(ORG, {1: [1, 5]})]
    assert await save
