"""The semantic lane's contract (``stores.shared.vectors.VectorStore``): every store keeps a
vector per active record, drops it with its record, refuses what is not a vector, and the
hybrid read answers the same ids in the same order on every store.

Parametrized over the stores in ``tests/stores/conftest.py``, as ``test_contract.py``.
"""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from scopemem import Memory, MemoryConfig, Request
from scopemem.errors import StoreError
from scopemem.plugins.manager import new_plugin_manager
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.postgres import PostgresStore
from scopemem.stores.shared.vectors import VectorStore, pack
from scopemem.stores.sqlite_shared import SharedSqliteStore, schema
from tests.conftest import FakeClock, fact
from tests.fake_embedder import Plugin, vector
from tests.stores import pg

ORG, REPO = "org:acme", "repo:acme/api"
MODEL = "fake/concepts"


def rid(scope: str, seq: int) -> str:
    return f"mem:{scope}:{seq}"


def cosine(one: str, other: str) -> float:
    a, b = vector(one), vector(other)
    return sum(x * y for x, y in zip(a, b, strict=True)) / (
        sum(x * x for x in a) * sum(y * y for y in b)) ** 0.5


async def embed_all(store, scope: str = ORG) -> int:
    missing = await store.vectors_missing(scope, MODEL, 100)
    return await store.put_vectors(scope, MODEL, [(record_id, pack(vector(text)))
                                                  for record_id, text in missing])


async def readable(store, scope: str = ORG) -> list[str]:
    """Every id the store answers a vector for: a search that keeps everything."""
    everyone = [rid(scope, n) for n in range(1, 20)]
    return sorted(record.id for record, _cosine in await store.nearest(
        scope, MODEL, pack(vector("anything")), 100, -1.0, everyone))


def rows_kept(store, scope: str = ORG) -> list[int] | None:
    """The seqs of the scope's rows in an SQL store's ``vectors`` table, read past the
    store (None for a store without one): what a reader of the files or the database
    could find."""
    if isinstance(store, SharedSqliteStore):
        path = Path(store.directory) / schema.shard_file_name(schema.shard_of(scope))
        conn = apsw.Connection(str(path))
        try:
            return [seq for (seq,) in conn.execute(
                "SELECT seq FROM vectors WHERE scope_key = ? ORDER BY seq", (scope,))]
        finally:
            conn.close()
    if isinstance(store, PostgresStore):
        import psycopg

        with psycopg.connect(pg.dsn()) as conn:
            return [seq for (seq,) in conn.execute(
                f'SELECT seq FROM "{store.schema}".vectors WHERE scope_key = %s ORDER BY seq',
                (scope,))]
    return None


async def test_vectors_are_kept_per_active_record_and_searched(store):
    await store.write(ORG, [fact("run the schema migration before a deploy"),
                            fact("redis keys expire after a day"),
                            fact("the office kitchen closes at six")])
    assert isinstance(store, VectorStore)
    assert [i for i, _t in await store.vectors_missing(ORG, MODEL, 2)] == [rid(ORG, 1),
                                                                         rid(ORG, 2)]
    assert await embed_all(store) == 3
    assert await store.vectors_missing(ORG, MODEL, 10) == []
    # Another model's vectors are another lane's: this scope has none of them yet.
    assert len(await store.vectors_missing(ORG, "fake/other", 10)) == 3
    found = await store.nearest(ORG, MODEL, pack(vector("ship the postgres release")), 5, 0.3)
    assert [record.id for record, _c in found] == [rid(ORG, 1)]
    assert found[0][1] == pytest.approx(cosine("ship the postgres release",
                                               "run the schema migration before a deploy"))
    # ``include`` adds the asked records whatever their cosine, after the rest.
    found = await store.nearest(ORG, MODEL, pack(vector("ship the postgres release")), 5, 0.3,
                                [rid(ORG, 3)])
    assert [record.id for record, _c in found] == [rid(ORG, 1), rid(ORG, 3)]
    assert await store.nearest(REPO, MODEL, pack(vector("deploy")), 5, 0.0) == []


async def test_a_record_leaving_active_status_takes_its_vector_with_it(make_store,
                                                                       clock: FakeClock):
    store = await make_store(cap=4)
    await store.write(ORG, [fact("PR 1835 was pushed at sha 3f9a2c1 with all tests passing"),
                            fact("the build uses node 18"), fact("forget me please soon"),
                            fact("redis keys expire after a day")])
    assert await embed_all(store) == 4
    assert await store.forget(ORG, rid(ORG, 3))
    assert (await store.sweep(ORG)).swept == 1
    await store.write(ORG, [fact("the build uses node 20", supersedes=rid(ORG, 2))])
    assert await readable(store) == [rid(ORG, 4)]
    assert rows_kept(store) in ([4], None)  # the retired records' vectors are gone
    # Eviction past the cap (four active) retires the least recently used.
    clock.advance(1000)
    await store.write(ORG, [fact(f"lesson {word} stays") for word in ("one", "two", "three")])
    assert await embed_all(store) == 4
    assert await readable(store) == [rid(ORG, n) for n in (5, 6, 7, 8)]
    assert rows_kept(store) in ([5, 6, 7, 8], None)
    assert {record.id for record in await store.list(ORG, 50)} == set(await readable(store))
    # A retired record's vector cannot be put back.
    assert await store.put_vectors(ORG, MODEL, [(rid(ORG, 3), pack(vector("x")))]) == 0
    assert await store.delete_scope(ORG) == 8
    assert await readable(store) == []
    assert rows_kept(store) in ([], None)


async def test_every_store_refuses_what_is_not_a_vector(store):
    await store.write(ORG, [fact("one lesson"), fact("another lesson")])
    first, second = rid(ORG, 1), rid(ORG, 2)
    for bad, reason in [(b"\x00\x00\x80", "multiple of 4"), (pack([float("inf"), 1.0]),
                                                             "not finite"),
                        (pack([0.0, 0.0]), "length zero"), (pack([1.0] * 4097), "4096")]:
        with pytest.raises(StoreError, match=reason):
            await store.put_vectors(ORG, MODEL, [(first, bad)])
    with pytest.raises(StoreError, match="printable"):
        await store.put_vectors(ORG, "", [(first, pack([1.0]))])
    assert await store.put_vectors(ORG, MODEL, [(first, pack([1.0, 0.0]))]) == 1
    with pytest.raises(StoreError, match="3 dimensions"):
        await store.put_vectors(ORG, MODEL, [(second, pack([1.0, 0.0, 0.0]))])
    with pytest.raises(StoreError, match="dimensions"):
        await store.nearest(ORG, MODEL, pack([1.0, 0.0, 0.0]), 5, 0.0)
    # Another scope's id, or one that is no id, keeps nothing.
    assert await store.put_vectors(ORG, MODEL, [(rid(REPO, 1), pack([1.0, 0.0])),
                                                ("mem:org:acme:01", pack([1.0, 0.0]))]) == 0


async def test_a_scope_whose_vectors_all_left_takes_another_dimension_count(store):
    # The dimension count is that of the scope's vectors of the model that are kept: once
    # their records are all retired, none is, on every store. The in-process store kept a
    # retired record's vector (and counted its dimensions) for as long as the scope lived.
    await store.write(ORG, [fact("one lesson"), fact("another lesson")])
    assert await store.put_vectors(ORG, MODEL, [(rid(ORG, 1), pack([1.0, 0.0])),
                                                (rid(ORG, 2), pack([0.0, 1.0]))]) == 2
    assert await store.forget(ORG, rid(ORG, 1))
    assert await store.forget(ORG, rid(ORG, 2))
    await store.write(ORG, [fact("a third lesson")])
    assert await store.put_vectors(ORG, MODEL, [(rid(ORG, 3), pack([1.0, 0.0, 0.0]))]) == 1
    found = await store.nearest(ORG, MODEL, pack([1.0, 0.0, 0.0]), 5, -1.0)
    assert [record.id for record, _cosine in found] == [rid(ORG, 3)]


LESSONS = [
    "Run the schema migration before you deploy the api",
    "The tables in the office kitchen need cleaning on fridays",
    "Redis keys expire after a day in staging",
    "Rollouts pause while the postgres backup runs",
    "The caching layer is warmed by a job after each release",
    "Tables of release notes live in the wiki",
    "Ship the mobile build through the beta channel first",
    "The database password rotates every month",
]
BRIEFS = [
    "how do we ship the release after changing postgres tables",
    "is the redis cache cleared by a deploy",
    "who cleans the kitchen tables",
    "where are the release notes",
]


async def blocks(store, clock: FakeClock, embeddings: str | None = MODEL) -> list[str]:
    """The blocks the read gives for ``BRIEFS`` over ``LESSONS`` on ``store``, each lesson
    written a minute apart and given its vector, the briefs read in turn (each read marks
    what it showed as used, so later reads rank by those uses too); with the semantic lane
    of ``embeddings`` (None: off, the fake embedder registered all the same)."""
    config = MemoryConfig(enabled=True, organization="acme", store="memory",
                          embeddings=embeddings)
    plugin = Plugin()
    memory = Memory(config, store, clock=clock, plugin_manager=new_plugin_manager(
        load_entry_points=False, extra_plugins=(plugin,)))
    for lesson in LESSONS:
        clock.advance(60_000)
        await memory.store.write(ORG, [fact(lesson)])
    assert await embed_all(store) == len(LESSONS)
    plugin.embedder.calls.clear()
    answers = []
    for brief in BRIEFS:
        clock.advance(60_000)
        answers.append(await memory.context_block(Request(text=brief)))
        await memory.drain(timeout=5)
    # Off, no text reaches the embedder; on, each brief is embedded once.
    assert plugin.embedder.calls == ([] if embeddings is None else [[b] for b in BRIEFS])
    return answers


async def test_the_hybrid_read_answers_alike_on_every_store(store, clock: FakeClock):
    reference = await blocks(InMemoryStore(clock=(own := FakeClock())), own)
    assert all(reference) and "Run the schema migration" in reference[0]
    assert await blocks(store, clock) == reference


def golden(*bullets: str) -> str:
    """A block as the keyword read words it (``scopemem.api``), from its bullets."""
    return ("Background memory for org:acme (may be outdated \u2014 verify before acting):\n"
            "<background_memory>\n"
            + "".join(f"- {bullet} (source: slack:C1/100)\n" for bullet in bullets)
            + "</background_memory>")


#: What the keyword read gives for ``BRIEFS`` over ``LESSONS`` (the lexical engine's
#: answer): the lane off must give exactly this.
LEXICAL = [
    golden(LESSONS[6], LESSONS[4], LESSONS[5], LESSONS[3], LESSONS[1]),
    golden(LESSONS[4], LESSONS[2], LESSONS[0]),
    golden(LESSONS[1], LESSONS[5]),
    golden(LESSONS[5], LESSONS[4]),
]


async def test_off_the_block_is_the_keyword_reads_byte_for_byte(store, clock: FakeClock):
    """Vectors stored, the embedder installed, ``memory.embeddings`` unset: every store
    gives the keyword read's blocks, byte for byte; on, they differ (so a lane leaking
    into the off path shows here)."""
    assert await blocks(store, clock, embeddings=None) == LEXICAL
    assert await blocks(InMemoryStore(clock=(own := FakeClock())), own) != LEXICAL


async def test_a_shard_of_schema_5_gets_its_vectors_table_on_open(tmp_path, clock):
    store = SharedSqliteStore(tmp_path, clock=clock)
    await store.write(ORG, [fact("deploys need the vpn"), fact("redis keys expire")])
    await store.close()
    # As schema 5 left it: no vectors table, index or triggers.
    path = tmp_path / schema.shard_file_name(schema.shard_of(ORG))
    conn = apsw.Connection(str(path))
    for statement in ("DROP TRIGGER records_vector_retired", "DROP TRIGGER records_vector_deleted",
                      "DROP INDEX vectors_by_model", "DROP TABLE vectors",
                      "PRAGMA user_version = 5"):
        conn.execute(statement)
    conn.close()
    reopened = SharedSqliteStore(tmp_path, clock=clock)
    try:
        assert len(await reopened.vectors_missing(ORG, MODEL, 10)) == 2
        assert await embed_all(reopened) == 2
        assert await reopened.forget(ORG, rid(ORG, 1))
        assert rows_kept(reopened) == [2]
    finally:
        await reopened.close()
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA user_version").fetchall()[0][0] == schema.SCHEMA_VERSION
    conn.close()
