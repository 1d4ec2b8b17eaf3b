"""A record's covered weight has one implementation, ``ranking.covered_weights``: change it,
and every store's every path answers with the change.

The test replaces it with the same sum taken in the reverse query order (a legitimate
ranking: the same weights, other floats in their last bits) and compares every answer,
matches included, with the in-process store's (``stores.dense``): the SQLite store
reading postings (``core.topk``), a small scope read whole (``reads._whole_scope``) and
its copies, and the PostgreSQL store from the server and from its copies. A path with a
sum of its own keeps the query order and answers other floats.
"""

from __future__ import annotations

import random

import pytest

from scopemem.core import ranking
from scopemem.core.ranking import QueryTerms
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import FakeClock
from tests.stores import pg
from tests.stores.test_equivalence import THREADS, crowd_candidate, crowd_queries

LARGE, SMALL = "org:acme", "user:slack:U1"
LIMITS = (1, 8, 20)


def reversed_sum(real=ranking.covered_weights):  # type: ignore[no-untyped-def]
    """``covered_weights`` adding the query's terms last to first."""
    def backwards(sums, terms, weights, holders):  # type: ignore[no-untyped-def]
        return real(sums, QueryTerms(terms.terms[::-1], terms.prefilter),
                    list(weights)[::-1], holders)
    return backwards


@pytest.fixture(params=["sqlite", "sqlite-copies", "postgres", "postgres-copies"])
def kind(request: pytest.FixtureRequest) -> str:
    if request.param.startswith("postgres"):
        pg.require()
    return request.param


async def test_every_store_ranks_with_the_one_covered_weight(
        tmp_path, clock: FakeClock, kind: str, monkeypatch: pytest.MonkeyPatch):
    rng = random.Random(34)
    memory = InMemoryStore(cap=1000, clock=clock)
    schema = None
    if kind.startswith("postgres"):
        schema = pg.new_schema()
        copies = {"cache_min_postings": 0} if kind == "postgres-copies" else {
            "postings_cache": 0}
        other = pg.make(schema, cap=1000, clock=clock, **copies)
        other._cache.interval = 0
    else:
        copies = {"cache_min_postings": 0} if kind == "sqlite-copies" else {
            "postings_cache": 0}  # none: the small scope is ranked from its rows
        other = SharedSqliteStore(tmp_path / "data", cap=1000, clock=clock,
                                  synchronous="off", **copies)
        other._copies.interval = 0

    async def answers(store) -> list:  # type: ignore[no-untyped-def]
        if kind == "postgres-copies" and store is other:
            await other._cache.settled()
        if kind == "sqlite-copies" and store is other:
            await other._copies.settled()
        return [await store.search(scope, query, limit, bump=False)
                for scope in (LARGE, SMALL) for query in crowd_queries()
                for limit in LIMITS]

    try:
        # More records hold the common word than the candidate cap takes (the weighing
        # prunes); the small scope is read whole.
        for scope, size in ((LARGE, 200), (SMALL, 40)):
            batch = [crowd_candidate(rng, n, THREADS[n % 7 % 3]) for n in range(size)]
            for store in (memory, other):
                await store.write(scope, batch)
        before = await answers(memory)
        assert await answers(other) == before

        monkeypatch.setattr(ranking, "covered_weights", reversed_sum())
        after = await answers(memory)
        # The reversed sum changes matches (else this test could not tell a path that
        # ignores it), in both scopes.
        changed = [index for index, (old, new) in enumerate(zip(before, after, strict=True))
                   if [hit.match for hit in old] != [hit.match for hit in new]]
        assert changed and min(changed) < len(after) // 2 <= max(changed)
        assert await answers(other) == after
        if kind == "sqlite-copies":
            assert other._copies.answered  # from the copies, not only through SQL
        if kind == "postgres-copies":
            assert other._cache.answered  # from the copies, not only from the server
    finally:
        await memory.close()
        await other.close()
        if schema is not None:
            pg.drop_schemas(schema)
