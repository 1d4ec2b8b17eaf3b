"""``Memory``'s browsing: the pages it passes through, and the reaches the read path logs
(every record a block shows to a named run, the repository window included; a preview logs
nothing)."""

from __future__ import annotations

import pytest

from scopemem import Memory, MemoryConfig, Request
from scopemem.core.browse import Reach
from scopemem.errors import StoreUnsupported
from scopemem.stores.memory import InMemoryStore
from tests.conftest import FakeClock, fact

ORG, REPO = "org:acme", "repo:acme/api"


def make_memory(store, clock, **overrides) -> Memory:
    config = MemoryConfig(enabled=True, organization="acme", store="memory", **overrides)
    return Memory(config, store, clock=clock)


@pytest.fixture
def store(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock=clock)


async def seeded(store) -> None:
    await store.write(ORG, [fact("deploys go through the vpn")])
    await store.write(REPO, [fact("the api is released by tagging"),
                             fact("lint with ruff before pushing")])


async def test_a_block_logs_a_reach_per_record_shown_window_included(store, clock):
    await seeded(store)
    memory = make_memory(store, clock)
    request = Request(text="how do deploys work", repo="acme/api", run_id="r-42",
                      thread_key="slack:C1/7")
    await memory.context(request)
    await memory.marks_saved()
    shown = await memory.reaches(run="r-42")
    # The org hit and both window facts (the window is shown outright, not as hits).
    assert sorted(r.record_id for r in shown) == [f"mem:{ORG}:1", f"mem:{REPO}:1",
                                                  f"mem:{REPO}:2"]
    assert all(r.at_ms == clock.now and r.thread_key == "slack:C1/7" for r in shown)
    assert await memory.reaches(run="slack:C1/7") == shown
    assert await memory.reaches(record_id=f"mem:{REPO}:2") == [
        Reach(record_id=f"mem:{REPO}:2", scope_key=REPO, run_id="r-42",
              thread_key="slack:C1/7", at_ms=clock.now)]


async def test_a_preview_logs_no_reach(store, clock):
    await seeded(store)
    memory = make_memory(store, clock)
    request = Request(text="deploys", repo="acme/api", run_id="r-1")
    preview = await memory.context(request, count=False)
    await memory.marks_saved()
    assert preview.block and await memory.reaches() == []
    await memory.context(request)
    await memory.marks_saved()
    assert len(await memory.reaches(run="r-1")) == 3


async def test_no_run_named_or_the_log_off_logs_nothing(store, clock):
    await seeded(store)
    memory = make_memory(store, clock)
    await memory.context(Request(text="deploys", repo="acme/api"))
    off = make_memory(store, clock, reach_retention_days=0)
    await off.context(Request(text="deploys", repo="acme/api", run_id="r-1"))
    await memory.marks_saved()
    await off.marks_saved()
    assert await memory.reaches() == []


async def test_pages_pass_through_to_the_store(store, clock):
    await seeded(store)
    memory = make_memory(store, clock)
    page = await memory.scope_page(sort="active", descending=True)
    assert [row.scope_key for row in page.rows] == [REPO, ORG]
    records = await memory.record_page(REPO, limit=1)
    assert records.total == 2 and records.rows[0].id == f"mem:{REPO}:2"
    history = await memory.record_history(REPO, f"mem:{REPO}:1")
    assert history is not None and history.record.text == "the api is released by tagging"


async def test_a_store_that_cannot_browse_says_so(clock):
    class Plain:
        async def list(self, *_args, **_kw):
            return []

    memory = make_memory(Plain(), clock)
    with pytest.raises(StoreUnsupported):
        await memory.scope_page()


async def test_a_store_that_keeps_no_reaches_is_warned_about_once(store, clock,
                                                                  memory_warnings):
    # A worker of an older release: it serves no /log-reaches, whatever a block shows.
    asked = []

    async def log_reaches(reaches):
        asked.append(reaches)
        raise StoreUnsupported("memory worker /log-reaches failed: answered 404")

    store.log_reaches = log_reaches
    await seeded(store)
    memory = make_memory(store, clock)
    for run in ("r-1", "r-2", "r-3"):
        await memory.context(Request(text="deploys", repo="acme/api", run_id=run))
        await memory.marks_saved()
    assert len(asked) == 1
    assert memory_warnings() == ["[memory] reaches are not logged by this store (memory worker"
                                 " /log-reaches failed: answered 404)"]
