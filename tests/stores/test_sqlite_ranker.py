"""Heavy rankings in a ranking process: the same answers as on a thread, and no answer lost
when the process dies, is killed, or reads another generation than the store's view."""

from __future__ import annotations

import asyncio
import os
import random
import signal

import pytest

from scopemem.core.records import Candidate, Kind
from scopemem.errors import ConfigError
from scopemem.stores.base import StoreSettings
from scopemem.stores.sqlite import SqliteStore
from scopemem.stores.sqlite import views as sqlite_views
from scopemem.stores.sqlite.ranker import Ranker
from tests.conftest import fact

ORG = "org:acme"
WORDS = ["deploy", "cache", "rollback", "schema", "token", "queue", "index", "shard",
         "replica", "backup", "canary", "metric"]


def texts(count: int, seed: int) -> list[Candidate]:
    rng = random.Random(seed)
    return [Candidate(kind=Kind.FACT, text=" ".join(rng.sample(WORDS, 4)) + f" note {n}",
                      source_thread_key=f"slack:C1/{n // 3}")
            for n in range(count)]


async def warm(store: SqliteStore, scope: str = ORG) -> None:
    for _ in range(2):  # the second retrieval through SQL builds the view
        await store.search(scope, "warm", 1, bump=False)
    assert store._handles[scope].view is not None


async def ranker_up(store: SqliteStore, scope: str = ORG) -> None:
    """Send heavy queries until the ranking process answers one (it starts in the
    background; the read pool answers meanwhile). Bounded by a count, not a clock."""
    before = store._ranker.answered
    for _ in range(400):
        await store.search(scope, "deploy cache", 5, bump=False)
        if store._ranker.answered > before:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the ranking process never answered")


@pytest.fixture
def heavy(monkeypatch):
    monkeypatch.setattr(sqlite_views, "LOOP_WORK", 10)  # every query is heavy now


async def test_a_heavy_query_ranked_in_a_process_answers_as_the_thread_does(make, tmp_path,
                                                                           heavy):
    store = make(tmp_path / "a", rank_processes=1)
    threads = make(tmp_path / "a", rank_processes=0)  # same files, ranked on the read pool
    await store.write(ORG, texts(120, 1))
    await warm(store)
    await warm(threads)
    await ranker_up(store)
    for query in ("deploy cache", "rollback schema token", "canary metric backup shard",
                  " ".join(WORDS), "note 7 replica"):
        for limit in (1, 5, 20):
            answered = store._ranker.answered
            got = await store.search(ORG, query, limit, bump=False)
            assert store._ranker.answered == answered + 1  # the process chose these
            assert got == await threads.search(ORG, query, limit, bump=False)


async def test_a_killed_ranking_process_loses_no_answer_and_is_replaced(make, tmp_path,
                                                                        heavy):
    store = make(tmp_path / "a", rank_processes=1)
    threads = make(tmp_path / "a", rank_processes=0)
    await store.write(ORG, texts(60, 2))
    await warm(store)
    await warm(threads)
    await ranker_up(store)
    expected = await threads.search(ORG, "deploy cache rollback", 5, bump=False)
    for pid in store._ranker.pids():
        os.kill(pid, signal.SIGKILL)
    # The pool is broken: this query is answered on the read pool, the pool replaced.
    assert await store.search(ORG, "deploy cache rollback", 5, bump=False) == expected
    await ranker_up(store)
    assert await store.search(ORG, "deploy cache rollback", 5, bump=False) == expected


async def test_an_answer_for_another_generation_is_not_used(make, tmp_path, heavy,
                                                             monkeypatch):
    store = make(tmp_path / "a", rank_processes=1)
    await store.write(ORG, texts(60, 3))
    await warm(store)
    expected = await store.search(ORG, "deploy cache", 5, bump=False)
    real = Ranker.best

    async def stale(self, *args):  # type: ignore[no-untyped-def]
        best = await real(self, *args)
        if best is None:
            return None
        generation, candidates = best
        return generation - 1, candidates[::-1][:1]  # what a view one write older might say

    monkeypatch.setattr(Ranker, "best", stale)
    await ranker_up_stale(store)
    assert await store.search(ORG, "deploy cache", 5, bump=False) == expected


async def ranker_up_stale(store: SqliteStore) -> None:
    for _ in range(400):
        if store._ranker.up():
            return
        await store.search(ORG, "deploy cache", 5, bump=False)
        await asyncio.sleep(0.025)
    raise AssertionError("the ranking process never started")


async def test_heavy_queries_beside_writes_and_kills_answer_as_the_thread_does(make, tmp_path,
                                                                                heavy):
    """The ranking process's crash test: 20 rounds of a write, then heavy queries while the
    process is killed at a random moment; every answer is the read pool's for the same
    state."""
    store = make(tmp_path / "a", rank_processes=1)
    threads = make(tmp_path / "a", rank_processes=0)
    await store.write(ORG, texts(80, 4))
    await warm(store)
    await ranker_up(store)
    rng = random.Random(5)
    for round_ in range(20):
        await store.write(ORG, texts(3, 100 + round_))
        await store.search(ORG, "warm", 1, bump=False)  # the view is carried or rebuilt
        query = " ".join(rng.sample(WORDS, rng.randint(2, 6)))
        task = asyncio.ensure_future(store.search(ORG, query, 8, bump=False))
        if rng.random() < 0.5:
            await asyncio.sleep(rng.random() / 100)
            for pid in store._ranker.pids():
                os.kill(pid, signal.SIGKILL)
        got = await task
        assert got == await threads.search(ORG, query, 8, bump=False)
    assert store._ranker.answered > 0


@pytest.mark.parametrize("value", [-1, 17, "1", True])
def test_rank_processes_is_a_checked_option(value):
    with pytest.raises(ConfigError, match=r"^memory\.stores\.sqlite\.rank_processes: "):
        SqliteStore.from_settings(StoreSettings(options={"rank_processes": value},
                                                name="sqlite"))


async def test_no_ranking_process_without_heavy_queries(make, tmp_path):
    store = make(tmp_path / "a")
    await store.write(ORG, [fact("deploy with the blue script")])
    await warm(store)
    await store.search(ORG, "deploy", 5)
    assert store._ranker._slots == {}


async def test_after_a_write_the_process_reads_its_copy_again_without_making_a_query_wait(
        make, tmp_path, heavy):
    store = make(tmp_path / "a", rank_processes=1)
    await store.write(ORG, texts(60, 6))
    await warm(store)
    await ranker_up(store)
    await store.write(ORG, texts(3, 7))  # the store's view is carried to a new generation
    answered = store._ranker.answered
    after = await store.search(ORG, "deploy cache", 5, bump=False)
    # Answered on the read pool while the process reads the file again...
    assert store._ranker.answered == answered
    [slot] = store._ranker._slots.values()
    # The process was sent to read the new generation: still reading it, or done already
    # (the read pool's answer may come back after it; asserting on which would race).
    path, generation = store.path_for(ORG), store._handles[ORG].view.generation
    assert slot.refreshing == path or slot.held.get(path) == generation
    # ... and by the process once it has, with the write's rows in its copy.
    await ranker_up(store)
    assert await store.search(ORG, "deploy cache", 5, bump=False) == after
