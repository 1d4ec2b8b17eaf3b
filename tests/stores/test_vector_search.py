"""The nearest-vector search every store runs (``stores.shared.nearest``): the same ids in the
same order on every store, ties to the newer, the floor, ``include``; and a SQL store's copy
of a scope's matrix never answers once another worker changed the scope's vectors.

The ordering test is parametrized over the stores in ``tests/stores/conftest.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

import pytest

from scopemem.stores.shared.nearest import Matrices
from scopemem.stores.shared.vectors import pack
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import FakeClock, fact
from tests.stores import pg

ORG = "org:acme"
MODEL = "fake/plane"
SEVEN = [(1.0, 0.0), (0.6, 0.8), (1.0, 0.0), (0.6, 0.8), (0.0, 1.0), (0.6, 0.8), (-1.0, 0.0)]


def rid(seq: int) -> str:
    return f"mem:{ORG}:{seq}"


async def found(store: Any, limit: int, floor: float, include: Sequence[int] = ()
                ) -> list[tuple[int, float]]:
    answer = await store.nearest(ORG, MODEL, pack([1.0, 0.0]), limit, floor,
                                 [rid(seq) for seq in include])
    return [(int(record.id.rsplit(":", 1)[1]), round(cosine, 5)) for record, cosine in answer]


async def seeded(store: Any, count: int) -> None:
    """The first ``count`` records of ``SEVEN`` written, each with its vector."""
    await store.write(ORG, [fact(f"lesson number {n}") for n in range(1, count + 1)])
    assert await store.put_vectors(ORG, MODEL, [(rid(n), pack(v))
                                                for n, v in enumerate(SEVEN[:count], 1)]
                                   ) == count


async def test_every_store_orders_best_first_ties_to_the_newer(store):
    """Seven records, three cosines shared by several: the best ``limit`` at the floor or
    above, ties to the later record, then ``include``'s others in seq order."""
    await seeded(store, 7)
    assert await found(store, 1, -1.0) == [(3, 1.0)]
    assert await found(store, 3, -1.0) == [(3, 1.0), (1, 1.0), (6, 0.6)]
    assert await found(store, 4, -1.0) == [(3, 1.0), (1, 1.0), (6, 0.6), (4, 0.6)]
    every = [(3, 1.0), (1, 1.0), (6, 0.6), (4, 0.6), (2, 0.6), (5, 0.0), (7, -1.0)]
    assert await found(store, 7, -1.0) == every
    assert await found(store, 50, -1.0) == every
    assert await found(store, 50, 0.5) == every[:5]
    assert await found(store, 6, 0.6) == every[:5]
    assert await found(store, 0, 0.0) == []
    # ``include`` after the chosen, in seq order, once each, whatever their cosine; an id
    # already chosen or of no vector adds nothing.
    assert await found(store, 2, 0.0, [7, 5, 1, 5, 9]) == [(3, 1.0), (1, 1.0), (5, 0.0),
                                                           (7, -1.0)]
    assert await found(store, 0, 0.0, [4]) == [(4, 0.6)]
    # A record leaving active status leaves the search (the in-process store's matrix too).
    assert await store.forget(ORG, rid(3))
    assert await found(store, 2, 0.0) == [(1, 1.0), (6, 0.6)]


async def test_a_record_found_by_its_vector_carries_its_uses_as_a_keyword_hit_does(store):
    """A use counted by a retrieval (saved later on the SQL stores) is in the record the
    vector search answers, as in the keyword search's: its recency and use count rank the
    fused hit alike on every store."""
    await seeded(store, 2)
    assert [r.id for r in await store.retrieve(ORG, "lesson number", 8)]
    by_vector = {r.id: r for r, _cosine in await store.nearest(ORG, MODEL, pack([1.0, 0.0]),
                                                                2, -1.0)}
    by_keyword = {r.id: r for r in await store.list(ORG, limit=8)}
    assert by_vector == by_keyword
    assert {r.use_count for r in by_vector.values()} == {1}


@contextlib.asynccontextmanager
async def two_workers(kind: str, tmp_path: Any, clock: FakeClock) -> AsyncIterator[list[Any]]:
    """Two stores on one database, as two processes would open it."""
    if kind == "sqlite":
        stores = [SharedSqliteStore(tmp_path / "data", clock=clock) for _ in range(2)]
        schema = None
    else:
        pg.require()
        schema = pg.lend_schema()
        stores = [pg.make(schema, clock=clock) for _ in range(2)]
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()
        if schema is not None:
            pg.give_back(schema)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_copy_of_a_scopes_vectors_is_never_answered_once_changed(kind, tmp_path,
                                                                         clock: FakeClock):
    async with two_workers(kind, tmp_path, clock) as (reader, writer):
        await seeded(writer, 4)

        def search() -> Awaitable[list[tuple[int, float]]]:
            return found(reader, 2, -1.0)

        assert await search() == [(3, 1.0), (1, 1.0)]
        assert await search() == [(3, 1.0), (1, 1.0)]  # from the reader's copy
        # Another worker replaces a vector: the reader answers the new one.
        assert await writer.put_vectors(ORG, MODEL, [(rid(3), pack([0.0, 1.0]))]) == 1
        assert await search() == [(1, 1.0), (4, 0.6)]
        # ... forgets a record: its vector leaves with it.
        assert await writer.forget(ORG, rid(1))
        assert await search() == [(4, 0.6), (2, 0.6)]
        # ... writes a record and puts its vector.
        await writer.write(ORG, [fact("lesson number 5")])
        assert await writer.put_vectors(ORG, MODEL, [(rid(5), pack([1.0, 0.0]))]) == 1
        assert await search() == [(5, 1.0), (4, 0.6)]
        # ... deletes the scope, then writes it again: none of the old vectors come back.
        assert await writer.delete_scope(ORG) == 5
        assert await search() == []
        await writer.write(ORG, [fact("lesson number 6")])
        assert await search() == []
        assert await writer.put_vectors(ORG, MODEL, [(rid(6), pack([0.6, 0.8]))]) == 1
        assert await search() == [(6, 0.6)]


def tamper(kind: str, store: Any, tmp_path: Any, vectors: dict[int, bytes]) -> None:
    """Write ``vectors`` (seq → bytes) into the store's database past the store, as a
    damaged file or a hostile database user could leave them."""
    if kind == "sqlite":
        import apsw

        from scopemem.stores.sqlite_shared import schema as file_schema

        conn = apsw.Connection(str(tmp_path / "data" / file_schema.shard_file_name(
            file_schema.shard_of(ORG))))
        try:
            for seq, blob in vectors.items():
                conn.execute("UPDATE vectors SET vector = ? WHERE scope_key = ? AND seq = ?",
                             (blob, ORG, seq))
        finally:
            conn.close()
    else:
        import psycopg

        with psycopg.connect(pg.dsn(), autocommit=True) as conn:
            for seq, blob in vectors.items():
                conn.execute(f'UPDATE "{store.schema}".vectors SET vector = %s'
                             " WHERE scope_key = %s AND seq = %s", (blob, ORG, seq))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_a_stored_vector_that_is_not_a_unit_vector_cannot_outrank(kind, tmp_path,
                                                                        clock: FakeClock):
    async with two_workers(kind, tmp_path, clock) as (store, _other):
        await seeded(store, 4)
        tamper(kind, store, tmp_path, {2: pack([float("nan"), 1.0]), 4: pack([50.0, 0.0])})
        # Not a number ranks as the worst cosine, a vector too long as at most 1.
        assert await found(store, 4, -1.0) == [(4, 1.0), (3, 1.0), (1, 1.0), (2, -1.0)]


def test_the_copies_stay_within_their_budget_least_recently_searched_first():
    rows = [(seq, pack([1.0, 0.0])) for seq in range(1, 11)]  # 10 × (8 + 8) bytes: 160
    copies = Matrices(budget=320)
    for scope in ("a:1", "a:2"):
        copies.keep(scope, MODEL, 1, rows)
    assert copies.get("a:1", MODEL, 1) is not None  # a:1 searched last: a:2 goes first
    copies.keep("a:3", MODEL, 1, rows)
    assert [copies.get(scope, MODEL, 1) is not None for scope in ("a:1", "a:2", "a:3")] == [
        True, False, True]
    # Another counter is another copy; an older one never replaces a newer.
    assert copies.get("a:1", MODEL, 2) is None
    copies.keep("a:1", MODEL, 3, rows)
    copies.keep("a:1", MODEL, 2, rows[:1])
    assert copies.get("a:1", MODEL, 2) is None and copies.get("a:1", MODEL, 3) is not None
    # A matrix larger than the budget is answered, not kept.
    seqs, matrix = copies.keep("a:4", MODEL, 1, rows * 3)
    assert len(seqs) == 30 and copies.get("a:4", MODEL, 1) is None
    assert copies.get("a:3", MODEL, 1) is not None


async def test_a_vector_of_very_large_values_keeps_its_direction(store):
    """float32 values near their largest are a direction like any other: the norm (past
    what float32 holds) must not turn the stored vector into zeros."""
    big = 3.4e38
    await store.write(ORG, [fact("lesson number 1")])
    assert await store.put_vectors(ORG, MODEL, [(rid(1), pack([big, 0.0]))]) == 1
    assert await found(store, 1, 0.5) == [(1, 1.0)]
    answer = await store.nearest(ORG, MODEL, pack([big, big]), 1, -1.0, [])
    assert [round(cosine, 4) for _record, cosine in answer] == [0.7071]
