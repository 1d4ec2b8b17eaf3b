"""What the host counts, beside the store: the records each block showed (window and keyword
hits), reflection's offers and rejections by marker where each fact was headed, and how
each reflection ended, at the run's home scope. Saved in batches, not per read."""

from __future__ import annotations

import pytest

from scopemem import Request
from scopemem.core.counters import DAY_MS
from scopemem.core.records import CountRow
from scopemem.errors import StoreError, StoreUnsupported
from scopemem.stores.counting import CountBuffer
from scopemem.stores.memory import InMemoryStore
from tests.api.test_memory_write import (
    ORG,
    REPO,
    USER_A,
    Scripted,
    lesson,
    make_memory,
    reflect,
    run,
)
from tests.conftest import FakeClock, fact


@pytest.fixture
def scripted() -> Scripted:
    return Scripted()


@pytest.fixture
def store(embedded_store):
    return embedded_store


def counted(rows: list[CountRow], scope: str) -> dict[str, int]:
    totals: dict[str, int] = {}
    for row in rows:
        if row.scope_key == scope:
            totals[row.name] = totals.get(row.name, 0) + row.value
    return totals


class Recording(InMemoryStore):
    """Counts how often the host hands counts to the store."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.calls = 0

    async def add_counts(self, rows):  # type: ignore[no-untyped-def]
        self.calls += 1
        await super().add_counts(rows)


async def test_blocks_count_window_and_keyword_records_in_one_batch(clock, scripted):
    store = Recording(clock)
    await store.write(REPO, [fact("make bootstrap before pytest"),
                             fact("node 20 is pinned in .nvmrc")])
    await store.write(ORG, [fact("the deploy pipeline needs docker login first"),
                            fact("nothing about this brief")])
    memory = make_memory(store, clock, scripted)
    request = Request(text="why does the docker deploy fail", user_id="slack:UA",
                      repo="acme/api")
    for _ in range(3):
        assert "docker login" in await memory.context_block(request)
    assert store.calls == 0  # nothing is saved on the read path itself
    await memory.counters.flush()
    assert store.calls == 1
    rows = await store.read_counts()
    assert counted(rows, REPO) == {"inserted": 2, "injected_window": 6}
    assert counted(rows, ORG) == {"inserted": 2, "injected_keyword": 3}


async def test_counts_pending_at_close_are_saved(tmp_path, clock, scripted):
    from scopemem.stores.sqlite_shared import SharedSqliteStore

    store = SharedSqliteStore(tmp_path / "data", clock=clock)
    await store.write(ORG, [fact("the deploy pipeline needs docker login first")])
    memory = make_memory(store, clock, scripted)
    await memory.context_block(Request(text="docker deploy", user_id="slack:UA"))
    await memory.close()
    reopened = SharedSqliteStore(tmp_path / "data", clock=clock)
    try:
        assert counted(await reopened.read_counts(), ORG)["injected_keyword"] == 1
    finally:
        await reopened.close()


async def test_reflection_counts_offers_rejections_by_marker_and_the_run(store, clock,
                                                                       scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [
        lesson("PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing",
               audience="repo"),
        lesson("check:deps-drift names any tree or lockfile drift", audience="repo"),
        lesson("this user prefers fixing the tree over editing the allowlist",
               audience="user"),
    ], "summary": "investigated the license check"}]
    await reflect(memory, run(repo="acme/api"))
    await memory.counters.flush()
    rows = await store.read_counts()
    repo = counted(rows, REPO)
    assert repo["offered"] == 2 and repo["rejected"] == 1
    assert {name for name in repo if name.startswith("rejected:")} >= {
        "rejected:pr_subject", "rejected:commit_sha"}
    assert repo["inserted"] == 1 and repo["reflections_run"] == 1
    assert counted(rows, USER_A) == {"offered": 1, "inserted": 1, "summaries": 1}
    assert "reflections_run" not in counted(rows, ORG)


async def test_skipped_and_failed_reflections_are_counted_at_the_home_scope(store, clock,
                                                                          scripted):
    memory = make_memory(store, clock, scripted)
    await reflect(memory, run(tool_calls=0))  # does not qualify
    await reflect(memory, run(repo="acme/api", no_memory=True))
    scripted.replies = [RuntimeError("the model is down"), "not json at all"]
    await reflect(memory, run(repo="acme/api"))
    await reflect(memory, run())
    await memory.counters.flush()
    rows = await store.read_counts()
    assert counted(rows, ORG) == {"reflections_skipped": 1, "reflections_failed": 1}
    assert counted(rows, REPO) == {"reflections_skipped": 1, "reflections_failed": 1}


async def test_counts_land_on_the_day_they_happened(clock, scripted):
    store = InMemoryStore(clock=clock)
    await store.write(ORG, [fact("the deploy pipeline needs docker login first")])
    memory = make_memory(store, clock, scripted)
    request = Request(text="docker deploy", user_id="slack:UA")
    await memory.context_block(request)
    await memory.counters.flush()
    clock.advance(DAY_MS)
    await memory.context_block(request)
    await memory.counters.flush()
    days = sorted(row.day for row in await store.read_counts()
                  if row.name == "injected_keyword")
    assert len(days) == 2 and days[1] == days[0] + 1


async def test_a_store_without_counters_costs_nothing(clock, scripted):
    class Plain:
        def __init__(self) -> None:
            self.inner = InMemoryStore(clock=clock)

        def __getattr__(self, name):  # type: ignore[no-untyped-def]
            if name in ("add_counts", "read_counts"):
                raise AttributeError(name)
            return getattr(self.inner, name)

    store = Plain()
    await store.write(ORG, [fact("the deploy pipeline needs docker login first")])
    memory = make_memory(store, clock, scripted)
    assert "docker login" in await memory.context_block(
        Request(text="docker deploy", user_id="slack:UA"))
    assert memory.counters.store is None
    await memory.close()


async def test_counts_are_saved_flush_ms_after_they_were_added(clock):
    store = Recording(clock)
    buffer = CountBuffer(store, clock, flush_ms=0)
    buffer.add(ORG, {"inserted": 2, "offered": 0})
    assert buffer._saver is not None
    await buffer._saver  # the save in the background, due at once
    assert store.calls == 1
    assert counted(await store.read_counts(), ORG) == {"inserted": 2}


class Failing(Recording):
    def __init__(self, clock: FakeClock, error: Exception) -> None:
        super().__init__(clock)
        self.error = error

    async def add_counts(self, rows):  # type: ignore[no-untyped-def]
        self.calls += 1
        raise self.error


async def test_a_failed_counter_save_is_a_warning_and_the_next_save_tries_again(clock, caplog):
    store = Failing(clock, StoreError("disk full"))
    buffer = CountBuffer(store, clock)
    for _ in range(2):
        buffer.add(ORG, {"inserted": 1})
        await buffer.close()  # never raises
    assert "1 counter(s) not saved: disk full" in caplog.text
    assert store.calls == 2


async def test_a_store_that_keeps_no_counters_is_asked_once(clock, caplog):
    store = Failing(clock, StoreUnsupported("the worker does not serve /add-counts"))
    buffer = CountBuffer(store, clock)
    buffer.add(ORG, {"inserted": 1})
    await buffer.flush()
    assert "counters are not kept by this store" in caplog.text
    buffer.add(ORG, {"inserted": 1})
    await buffer.close()
    assert store.calls == 1
