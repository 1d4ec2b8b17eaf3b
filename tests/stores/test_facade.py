"""The ``Memory`` facade on every store (in-process, SQLite, worker client → live server):
what a run reads and what reflection writes must not depend on which store is configured."""

from __future__ import annotations

from scopemem import Memory, MemoryConfig, Request
from scopemem.api.finished_run import Run
from scopemem.core.records import MAX_QUERY_CHARS
from scopemem.plugins.manager import new_plugin_manager
from tests.api.test_memory_write import Scripted, lesson
from tests.conftest import fact, summary
from tests.stores.conftest import MakeStore

ORG, USER = "org:acme", "user:slack:UA"
# A pasted build log: short, repetitive tokens, 20,000 characters of them.
LOG = "".join(f"[ok] step {n % 97} took {n % 13} ms\n" for n in range(900))
BRIEF = LOG + "why do the integration tests fail after the bootstrap step?"


def make_memory(store, scripted: Scripted | None = None) -> Memory:
    config = MemoryConfig(enabled=True, organization="acme", store="memory",
                          model="scripted/extractor-1")
    extra = (scripted,) if scripted is not None else ()
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=extra)
    return Memory(config, store, plugin_manager=pm)


async def seed(store) -> None:
    await store.write(ORG, [
        fact("the integration tests need make bootstrap first", source_thread_key="slack:C1/1"),
        fact("integration runs read the fixtures from ./testdata"),
        fact("lunch is at noon on fridays"),
        summary("a thread about the integration tests"),
    ])
    await store.write(USER, [fact("this user wants the bootstrap output quoted")])


async def test_a_20000_character_brief_gives_the_same_block_on_every_store(make_store: MakeStore):
    assert len(BRIEF) >= 20_000 > MAX_QUERY_CHARS
    store = await make_store()
    await seed(store)
    memory = make_memory(store)
    result = await memory.context(Request(text=BRIEF, user_id="slack:UA"))
    assert result.failed == {}
    assert result.block.splitlines()[2:-1] == [
        "- the integration tests need make bootstrap first (source: slack:C1/1)",
        "- a thread about the integration tests (source: slack:C1/100)",
        "- this user wants the bootstrap output quoted (source: slack:C1/100)",
        "- integration runs read the fixtures from ./testdata (source: slack:C1/100)",
    ]


async def test_reflection_on_a_long_run_is_shown_the_records_it_may_correct(make_store):
    store = await make_store()
    await seed(store)
    scripted = Scripted()
    target = f"mem:{ORG}:1"
    scripted.replies = [{"facts": [lesson("the integration tests need make bootstrap and "
                                          "make seed first", supersedes=target)]}]
    memory = make_memory(store, scripted)
    memory.schedule_reflection(Run(request=Request(text=BRIEF, user_id="slack:UA",
                                                   channel_visibility="public"),
                                   answer="run make seed too. " + LOG, tool_calls=1,
                                   thread_key="slack:C1/9", run_id="r-1"))
    assert await memory.drain(timeout=10)
    [call] = scripted.calls
    assert f"- {target} ({ORG}, fact): the integration tests need" in call["user"]
    # The correction took effect instead of landing as a near-duplicate.
    texts = [r.text for r in await store.list(ORG, 10, kind="fact")]
    assert texts[0] == "the integration tests need make bootstrap and make seed first"
    assert "the integration tests need make bootstrap first" not in texts


async def test_one_odd_candidate_never_costs_its_batch(make_store: MakeStore):
    store = await make_store()
    scripted = Scripted()
    scripted.replies = [{"facts": [
        lesson("the deploy script needs the vpn up first",
               keywords=["deploy", "a-keyword-far-longer-than-the-wires-sixty-four-character-cap-"
                                   "for-one-keyword"]),
        lesson("staging shares its database with the load tests"),
    ], "summary": "a run about deploys"}]
    memory = make_memory(store, scripted)
    # No thread key: the wire needs one, so the candidates carry a placeholder instead.
    memory.schedule_reflection(Run(request=Request(text="deploy it", user_id="slack:UA",
                                                   channel_visibility="public"),
                                   answer="done", tool_calls=1, thread_key="", run_id="r-2"))
    assert await memory.drain(timeout=10)
    records = await store.list(ORG, 10)
    assert sorted(r.text for r in records) == [
        "a run about deploys", "staging shares its database with the load tests",
        "the deploy script needs the vpn up first"]
    vpn = next(r for r in records if "vpn" in r.text)
    assert "deploy" in vpn.keywords and "sixty" in vpn.keywords
    assert all(r.source_thread_key == "unthreaded" and r.source_run_id == "r-2"
               for r in records)
