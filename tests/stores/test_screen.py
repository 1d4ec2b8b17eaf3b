"""The write path's screen, through ``Memory`` on every store of the contract suite
(PostgreSQL included): a NUL character never costs a batch, a thread key is capped and
redacted, and noise is dropped and counted, the same on every store."""

from __future__ import annotations

import logging

import attrs
import pytest

from scopemem.api.results import MemoryRefused
from scopemem.core.records import MAX_SOURCE_CHARS
from tests.api.test_counters import counted
from tests.api.test_memory_write import ORG, USER_A, Scripted, lesson, make_memory, reflect, run
from tests.api.test_operations import ALICE

TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0" * 2  # a GitHub token's shape


@pytest.fixture
def scripted() -> Scripted:
    return Scripted()


async def test_a_model_fact_holding_a_nul_costs_nothing_beside_it(make_store, clock, scripted,
                                                                  caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    store = await make_store()
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("deploys need the vpn"),
                                   lesson("the staging\x00 database is read-only"),
                                   lesson("lint before pushing"),
                                   lesson(f"the bot pushes with {TOKEN[:9]}\x00{TOKEN[9:]}")],
                         "summary": "a deploy question\x00"}]
    await reflect(memory, attrs.evolve(run(), thread_key=f"slack:C1/{TOKEN}/" + "t" * 500_000,
                                       run_id=f"r-42 {TOKEN}"))
    stored = await store.list(ORG, 10)
    texts = sorted(r.text for r in stored)
    assert texts.pop(3).startswith("the bot pushes with [REDACTED:")  # never joined again
    assert texts == ["a deploy question", "deploys need the vpn", "lint before pushing",
                     "the staging database is read-only"]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "failed writes" not in logged and TOKEN[4:] not in logged
    for record in stored:
        assert len(record.source_thread_key) == MAX_SOURCE_CHARS
        assert record.source_run_id is not None
        for provenance in (record.source_thread_key, record.source_run_id):
            assert TOKEN[4:] not in provenance and "[REDACTED:" in provenance


async def test_reflection_drops_noise_and_counts_it(make_store, clock, scripted):
    store = await make_store()
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("ok"), lesson("Tool called: bash ls -la"),
                                   lesson("deploys need the vpn")],
                         "summary": "!!"}]
    await reflect(memory, run())
    assert [r.text for r in await store.list(ORG, 10)] == ["deploys need the vpn"]
    await memory.counters.flush()
    org = counted(await store.read_counts(), ORG)
    assert org["offered"] == 3 and org["rejected"] == 2
    assert org["rejected:noise"] == 3  # the summary too
    assert org["inserted"] == 1 and "summaries" not in org


@pytest.mark.parametrize("text", ["!!", "ok", "Tool called: bash ls -la", "...", "{\"plan\": 1}"])
async def test_remember_refuses_noise_and_counts_it(make_store, clock, scripted, text):
    store = await make_store()
    memory = make_memory(store, clock, scripted)
    with pytest.raises(MemoryRefused) as refused:
        await memory.remember(ALICE, text)
    assert refused.value.reason == "noise" and refused.value.details["markers"] == ["noise"]
    assert await store.list(USER_A, 10) == []
    await memory.counters.flush()
    assert counted(await store.read_counts(), USER_A) == {"rejected:noise": 1}
