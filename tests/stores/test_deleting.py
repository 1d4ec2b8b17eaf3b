"""Deleting a person's data, on every store of the contract suite (memory, sqlite, the
worker client over a live worker, postgres): a scope deleted whole, a person scrubbed from
a scope's provenance, the retention purge run now."""

from __future__ import annotations

import attrs

from scopemem.core.records import PurgeResult, Record, Status
from scopemem.stores.porting import export_records, portable
from tests.conftest import DAY_MS, FakeClock, fact
from tests.stores.test_contract import LESSON, ORG, OTHER, STATUS_LINE

PERSON = "user:slack:U0123"


async def everything(store, scope_key: str) -> list[Record]:
    """Every row the scope holds, whatever its status."""
    return [record async for record in export_records(portable(store), scope_key)]


async def test_delete_scope_deletes_every_row_and_counter_of_one_scope(store):
    await store.write(PERSON, [fact("I review on mondays"), fact("I live in lisbon")])
    await store.write(PERSON, [fact("I live in porto", supersedes=f"mem:{PERSON}:2")])
    assert await store.forget(PERSON, f"mem:{PERSON}:1")
    await store.write(OTHER, [fact("I deploy on fridays")])
    assert await store.delete_scope(PERSON) == 3  # forgotten and superseded rows too
    assert await store.list(PERSON, 10) == []
    assert await everything(store, PERSON) == []
    assert await store.retrieve(PERSON, "porto lisbon mondays", 5) == []
    assert {row.scope_key for row in await store.read_counts()} == {OTHER}
    assert [r.text for r in await store.list(OTHER, 10)] == ["I deploy on fridays"]
    # Its ids are never given again; a second delete finds nothing.
    await store.write(PERSON, [fact("I review on mondays")])
    assert [r.id for r in await store.list(PERSON, 10)] == [f"mem:{PERSON}:4"]
    assert await store.delete_scope(PERSON) == 1
    assert await store.delete_scope("user:slack:nobody") == 0


async def test_scrub_provenance_replaces_the_persons_id_as_a_whole_token(store):
    await store.write(ORG, [
        fact("the vpn is needed for deploys", source_thread_key="slack:D9:U0123"),
        fact("staging lives in eu-west", source_thread_key="slack:C1/100",
             source_run_id="run-U0123-7"),
        fact("the build uses node 20", source_thread_key="slack:C1:U01234",
             source_run_id="xU0123"),
    ])
    assert len(await store.retrieve(ORG, "vpn deploys", 5)) == 1  # read (and held) before
    assert await store.scrub_provenance(ORG, PERSON) == 2
    rows = {r.text: (r.source_thread_key, r.source_run_id) for r in await store.list(ORG, 10)}
    assert rows == {"the vpn is needed for deploys": ("slack:D9:removed", None),
                    "staging lives in eu-west": ("slack:C1/100", "run-removed-7"),
                    "the build uses node 20": ("slack:C1:U01234", "xU0123")}
    # Reads see the change at once; the records keep everything else.
    hits = await store.retrieve(ORG, "vpn deploys", 5)
    assert [h.source_thread_key for h in hits] == ["slack:D9:removed"]
    assert await store.scrub_provenance(ORG, PERSON) == 0
    assert await store.scrub_provenance("org:nobody", PERSON) == 0


async def test_purge_runs_the_retention_on_every_scope_now(make_store, clock: FakeClock):
    store = await make_store(cap=3, retention_days=1)
    for scope_key in (ORG, OTHER):
        await store.write(scope_key, [fact(STATUS_LINE, source_run_id="r-7"), fact(LESSON)])
        await store.write(scope_key, [fact("the build uses node 18")])
        await store.write(scope_key, [fact("the build uses node 20",
                                           supersedes=f"mem:{scope_key}:3")])
        assert (await store.sweep(scope_key)).swept == 1
    assert await store.purge() == PurgeResult()  # nothing is past the retention yet
    swept = (await everything(store, ORG))[0]
    assert swept.status is Status.SWEPT and swept.text == STATUS_LINE
    clock.advance(DAY_MS)
    # No write since: the purge alone deletes the superseded rows and scrubs the swept ones.
    assert await store.purge() == PurgeResult(purged=2, scrubbed=2)
    for scope_key in (ORG, OTHER):
        dead = [r for r in await everything(store, scope_key) if not r.is_active]
        assert [r.id for r in dead] == [f"mem:{scope_key}:1"]
    assert (await everything(store, ORG))[0] == attrs.evolve(swept, text="", keywords=())
    assert [r.id for r in await store.list(ORG, 10)] == [f"mem:{ORG}:4", f"mem:{ORG}:2"]
    assert await store.purge() == PurgeResult()
