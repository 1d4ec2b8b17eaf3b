"""The write path end to end: Memory → reflection → gate → routing → policy → a real store."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from scopemem import Memory, MemoryConfig, Request, hookimpl
from scopemem.api.finished_run import Run
from scopemem.core.records import Kind
from scopemem.core.reflection import REFLECTION_SYSTEM
from scopemem.plugins.manager import new_plugin_manager
from scopemem.stores.sqlite_shared import SharedSqliteStore
from tests.conftest import fact

ORG, REPO, CHANNEL = "org:acme", "repo:acme/api", "channel:slack:C1"
USER_A, USER_B = "user:slack:UA", "user:slack:UB"


class Scripted:
    """A provider plugin whose replies the test writes; it records every call."""

    def __init__(self) -> None:
        self.replies: list[object] = []
        self.calls: list[dict] = []
        self.gate = asyncio.Event()
        self.gate.set()

    @hookimpl
    def scopemem_register_providers(self, register):
        register("scripted", lambda settings: self)

    async def complete(self, *, model, system, user, max_tokens=1024):
        self.calls.append({"model": model, "system": system, "user": user,
                           "max_tokens": max_tokens})
        await self.gate.wait()
        reply = self.replies.pop(0) if self.replies else {"facts": []}
        if isinstance(reply, Exception):
            raise reply
        return reply if isinstance(reply, str) else json.dumps(reply)

    async def close(self):
        pass


@pytest.fixture
def scripted() -> Scripted:
    return Scripted()


@pytest.fixture
def store(embedded_store):
    """The write path runs against the in-process store and the embedded SQLite one."""
    return embedded_store


def make_memory(store, clock, scripted, **overrides) -> Memory:
    settings = {"enabled": True, "organization": "acme", "store": "memory",
                "model": "scripted/extractor-1", **overrides}
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(scripted,))
    return Memory(MemoryConfig(**settings), store, plugin_manager=pm, clock=clock)


def run(user="slack:UA", channel="slack:C1", repo=None, visibility="public", **fields) -> Run:
    fields.setdefault("tool_calls", 2)
    fields.setdefault("answer", "done")
    return Run(request=Request(text=fields.pop("text", "please fix the build"), user_id=user,
                               channel_id=channel, repo=repo, channel_visibility=visibility),
               thread_key="slack:C1/17", run_id="r-42", **fields)


def lesson(text, **extra):
    return {"text": text, "confidence": 0.9, **extra}


async def reflect(memory: Memory, the_run: Run) -> None:
    memory.schedule_reflection(the_run)
    assert await memory.drain(timeout=5)


async def texts(store, scope) -> list[str]:
    return sorted(r.text for r in await store.list(scope, 50))


# --- when, and with which model ------------------------------------------------------------------


async def test_one_call_on_the_configured_model_with_the_extractor_prompt(store, clock,
                                                                          scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("run make bootstrap before the tests")],
                         "summary": "fixed the build"}]
    await reflect(memory, run())
    [call] = scripted.calls
    assert call["model"] == "extractor-1" and call["system"] == REFLECTION_SYSTEM
    assert call["max_tokens"] == 1024 and "please fix the build" in call["user"]
    assert await texts(store, ORG) == ["fixed the build", "run make bootstrap before the tests"]
    written = await store.list(ORG, 10)
    assert {(r.source_thread_key, r.source_run_id) for r in written} == {("slack:C1/17",
                                                                           "r-42")}


async def test_without_memory_model_the_runs_own_model_is_used(store, clock, scripted):
    memory = make_memory(store, clock, scripted, model=None)
    await reflect(memory, run(model="scripted/the-runs-model"))
    assert [c["model"] for c in scripted.calls] == ["the-runs-model"]


@pytest.mark.parametrize("model", ["no-slash", "nosuch/model", None])
async def test_an_unusable_model_is_one_warning_and_no_reflection(store, clock, scripted,
                                                                  model, memory_warnings):
    memory = make_memory(store, clock, scripted, model=None)
    await reflect(memory, run(model=model))
    assert scripted.calls == []
    assert len(memory_warnings()) == 1


@pytest.mark.parametrize(("fields", "reflects"), [
    ({"tool_calls": 0}, False),
    ({"tool_calls": 0, "history": [("user", "q"), ("assistant", "a")] * 2}, True),
    ({"tool_calls": 3, "agent_name": "review"}, False),
    ({"tool_calls": 3, "agent_name": "ship"}, False),
    ({"tool_calls": 3, "agent_name": "coding"}, True),
])
async def test_only_qualifying_runs_reflect(store, clock, scripted, fields, reflects):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("a durable lesson about caching")]}]
    await reflect(memory, run(**fields))
    assert len(scripted.calls) == (1 if reflects else 0)
    assert len(await store.list(ORG, 10)) == (1 if reflects else 0)


async def test_memory_off_never_reflects(store, clock, scripted):
    memory = make_memory(store, clock, scripted, enabled=False)
    memory.schedule_reflection(run())
    assert memory.pending_reflections() == 0
    assert await memory.drain(timeout=1)
    assert scripted.calls == [] and await store.list(ORG, 10) == []


# --- failure isolation and drain ---------------------------------------------------------------


async def test_schedule_returns_at_once_and_drain_waits(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.gate.clear()
    scripted.replies = [{"facts": [lesson("a slow lesson")]}]
    memory.schedule_reflection(run())
    assert memory.pending_reflections() == 1
    assert await memory.drain(timeout=0.05) is False
    scripted.gate.set()
    assert await memory.drain(timeout=5) is True
    assert memory.pending_reflections() == 0
    assert await texts(store, ORG) == ["a slow lesson"]


async def test_a_run_in_its_slot_keeps_drain_waiting(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("learned inside the slot")]}]
    released = asyncio.Event()

    async def dispatch():
        async with memory.run_slot():
            await released.wait()          # the reply is being sent
            memory.schedule_reflection(run())

    task = asyncio.create_task(dispatch())
    await asyncio.sleep(0)
    assert memory.active_runs() == 1 and memory.pending_reflections() == 0
    drain = asyncio.create_task(memory.drain(timeout=5))
    await asyncio.sleep(0.1)
    assert not drain.done()                # 0 reflections, but a run is in flight
    released.set()
    assert await drain is True
    await task
    assert await texts(store, ORG) == ["learned inside the slot"]


async def test_close_cancels_what_drain_left_so_nothing_runs_on_a_closed_store(
        store, clock, scripted, memory_warnings):
    memory = make_memory(store, clock, scripted)
    scripted.gate.clear()                  # the model never answers in time
    memory.schedule_reflection(run())
    assert await memory.drain(timeout=0.05) is False
    await memory.close()
    # The reflection is over, cancelled, before the store closed under it: it can never
    # call a closed provider or write to a closed store.
    assert memory.pending_reflections() == 0
    assert "[memory] reflection r-42 cancelled" in memory_warnings()
    scripted.gate.set()
    memory.schedule_reflection(run())      # after close: nothing is started
    assert memory.pending_reflections() == 0
    assert len(scripted.calls) == 1
    assert memory_warnings()[-1] == "[memory] reflection skipped: memory is closed"


@pytest.mark.parametrize("reply", [RuntimeError("provider down"), "not json at all",
                                   {"facts": "nope"}])
async def test_a_failed_reflection_is_one_warning_and_writes_nothing(store, clock, scripted,
                                                                     reply, memory_warnings):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [reply]
    await reflect(memory, run())
    assert await store.list(ORG, 10) == []
    [warning] = memory_warnings()
    assert warning.startswith("[memory] reflection r-42")


async def test_a_reflection_left_pending_at_close_calls_no_model(clock, scripted,
                                                                 memory_warnings):
    """``close`` closes the providers: a reflection that had not reached its model call
    (no ``drain`` first) is skipped with a warning, never a provider built again after
    close (an HTTP session nothing closes) nor a model call billed for a closed memory."""
    from scopemem.stores.memory import InMemoryStore

    built: list[object] = []

    class Counting(Scripted):
        @hookimpl
        def scopemem_register_providers(self, register):
            register("scripted", lambda settings: built.append(self) or self)

    counting = Counting()
    memory = make_memory(InMemoryStore(), clock, counting)
    memory.schedule_reflection(run())
    await memory.close()
    assert await memory.drain(timeout=5)
    memory.schedule_reflection(run())
    assert await memory.drain(timeout=5)
    assert counting.calls == [] and built == []
    assert [w for w in memory_warnings() if "memory is closed" in w]


async def test_a_provider_failure_quoting_a_key_is_logged_redacted(store, clock, scripted,
                                                                   memory_warnings):
    key = "sk-ant-api03-" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789" * 2
    memory = make_memory(store, clock, scripted)
    scripted.replies = [RuntimeError(f"401 from the api with x-api-key: {key}")]
    await reflect(memory, run())
    [warning] = memory_warnings()
    assert warning.startswith("[memory] reflection r-42 failed: RuntimeError: 401 from the api")
    assert key not in warning and "[REDACTED:" in warning


async def test_a_failing_store_write_is_a_warning(store, clock, scripted, memory_warnings):
    memory = make_memory(store, clock, scripted)

    async def broken(*args, **kwargs):
        raise OSError("disk full")

    store.write = broken  # type: ignore[method-assign]
    scripted.replies = [{"facts": [lesson("anything durable")]}]
    await reflect(memory, run())
    assert any("disk full" in w for w in memory_warnings())


async def test_a_store_answering_a_write_with_no_counts_costs_that_scope_only(
        store, clock, scripted, memory_warnings):
    """A store plugin whose write answers garbage for one scope loses that scope's batch
    (one warning naming the answer), never the other scopes' writes or the reflection's
    line."""
    memory = make_memory(store, clock, scripted)
    write = store.write

    async def odd(scope_key, candidates, cap=None):
        counts = await write(scope_key, candidates, cap)
        return None if scope_key == "org:acme" else counts

    store.write = odd  # type: ignore[method-assign]
    scripted.replies = [{"facts": [lesson("the deploy needs make bootstrap first"),
                                   lesson("this user wants answers in French",
                                          audience="user")]}]
    await reflect(memory, run())
    assert memory_warnings() == ["[memory] reflection write to org:acme failed: the store "
                                 "answered write with None, not a WriteCounts"]
    assert await texts(store, "user:slack:UA") == ["this user wants answers in French"]


# --- the gate and the counters -----------------------------------------------------------------


async def test_an_embedded_sqlite_store_reports_evictions_in_the_counts(tmp_path, clock,
                                                                        scripted, caplog):
    caplog.set_level(logging.INFO)
    store = SharedSqliteStore(tmp_path / "data", clock=clock, cap=1)
    try:
        memory = make_memory(store, clock, scripted)
        scripted.replies = [{"facts": [lesson("run make bootstrap before the tests"),
                                       lesson("the vpn must be up before a deploy")]}]
        await reflect(memory, run())
        [line] = [r.getMessage() for r in caplog.records if "reflection r-42" in r.getMessage()]
        assert "inserted 2" in line and "evicted 1" in line
        # The store has no log line of its own: a served one is logged by the Worker.
        assert not [r for r in caplog.records if r.getMessage().startswith("[write]")]
    finally:
        await store.close()



@pytest.mark.parametrize("reply", [RuntimeError("provider down"),
                                   {"facts": [lesson("pin node 20 for the build")]}])
async def test_a_run_id_cannot_add_a_line_to_the_log(store, clock, scripted, reply, caplog):
    """An adapter's run id is logged on one line: a line break or a terminal escape in it
    (from a platform's thread title, say) cannot forge a [memory] line."""
    import attrs

    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    scripted.replies = [reply]
    forged = "r-42\n[memory] reflection r-43: offered 9\x1b[2J"
    await reflect(memory, attrs.evolve(run(), run_id=forged))
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("[memory] reflection")]
    assert lines and all("\n" not in line and "\x1b" not in line for line in lines)
    assert lines[0].startswith("[memory] reflection r-42 [memory] reflection r-43: offered 9")


async def test_status_is_rejected_and_the_line_carries_counters_not_text(store, clock,
                                                                          scripted, caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    await store.write(ORG, [fact("the license check fails when nested node_modules are "
                                 "dropped; npm ci fixes it")])
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [
        lesson("PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing"),
        lesson("license check false positives come from lost nested node_modules",
               restates=f"mem:{ORG}:1"),
        lesson("check:deps-drift names any tree or lockfile drift", audience="repo"),
        lesson("this user prefers fixing the tree over editing the allowlist",
               audience="user"),
    ], "summary": "investigated the license check"}]
    await reflect(memory, run(repo="acme/api", text="the license check is failing again"))
    [line] = [r.getMessage() for r in caplog.records if "reflection r-42" in r.getMessage()]
    # The seed's own trace (003 "One trace") leads the line, then the rest, then the same
    # counts per target scope.
    assert line == ("[memory] reflection r-42: offered 4, rejected 1, restated 1, inserted 2, "
                    "summary 1, dropped 0, deduped 0, superseded 0, outranked 0, evicted 0, "
                    "narrowed 0, denied 0; by scope: org:acme (restated 1), "
                    "repo:acme/api (inserted 1), user:slack:UA (inserted 1, summary 1)")
    assert "license" not in line and "allowlist" not in line
    assert await texts(store, REPO) == ["check:deps-drift names any tree or lockfile drift"]
    [restated] = await store.list(ORG, 1, kind=Kind.FACT)
    # One use from the reflection-time retrieval (the transcript matched it), one from the
    # restatement; its text and its scope are unchanged.
    assert restated.use_count == 2 and restated.confidence == 0.9
    assert restated.text.startswith("the license check fails when nested")
    # The summary follows the narrowest audience: the user's.
    assert "investigated the license check" in await texts(store, USER_A)
    for scope in (ORG, REPO, CHANNEL, USER_A):
        assert all("PR 1835" not in text for text in await texts(store, scope))


async def test_a_noise_summary_is_no_rejected_fact_on_the_line(store, clock, scripted,
                                                               caplog):
    # As the counters have it (docs/stats.md): a summary is no offer, so its noise counts
    # under rejected:noise only. The line said "offered 1, rejected 1, inserted 1".
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("run make bootstrap before the api tests")],
                         "summary": "ok"}]
    await reflect(memory, run())
    [line] = [r.getMessage() for r in caplog.records if "reflection r-42" in r.getMessage()]
    assert line.startswith("[memory] reflection r-42: offered 1, rejected 0, restated 0, "
                           "inserted 1, summary 0,")


async def test_a_plugin_marker_rejects_too(store, clock, scripted):
    class NoGiveaways:
        @hookimpl
        def scopemem_rejection_markers(self, candidate):
            return ["giveaway"] if "giveaway" in candidate.text else None

    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(scripted, NoGiveaways()))
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory",
                                 model="scripted/m"), store, plugin_manager=pm, clock=clock)
    scripted.replies = [{"facts": [lesson("the giveaway bot posts at noon"),
                                   lesson("the deploy bot posts at noon")]}]
    await reflect(memory, run())
    assert await texts(store, ORG) == ["the deploy bot posts at noon"]


# --- routing -------------------------------------------------------------------------------------


async def test_user_facts_are_only_seen_by_their_user(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [
        lesson("this user always wants a dry run before deploys", audience="user"),
        lesson("deploys go through the bastion host"),
    ]}]
    await reflect(memory, run(user="slack:UA"))
    assert await texts(store, USER_A) == ["this user always wants a dry run before deploys"]
    assert await store.list(USER_B, 10) == []
    a = await memory.context_block(Request(text="deploys", user_id="slack:UA"))
    b = await memory.context_block(Request(text="deploys", user_id="slack:UB"))
    assert "dry run" in a and "bastion" in a
    assert "dry run" not in b and "bastion" in b


async def test_repo_and_channel_facts_land_in_their_scopes(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [
        lesson("the api repo needs make bootstrap before pytest", audience="repo"),
        lesson("this channel is where releases are announced", audience="channel"),
    ]}]
    await reflect(memory, run(repo="acme/api", channel="slack:C1"))
    assert await texts(store, REPO) == ["the api repo needs make bootstrap before pytest"]
    assert await texts(store, CHANNEL) == ["this channel is where releases are announced"]
    same = await memory.context_block(Request(text="releases announced", channel_id="slack:C1"))
    other = await memory.context_block(Request(text="releases announced",
                                               channel_id="slack:C2"))
    assert "announced" in same and other == ""
    in_repo = await memory.context_block(Request(text="anything", repo="acme/api"))
    assert "make bootstrap" in in_repo


async def test_missing_audience_scopes_fall_back_to_org(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("this user likes tabs", audience="user"),
                                   lesson("the repo uses tabs", audience="repo")]}]
    await reflect(memory, run(user=None, channel=None, repo=None))
    assert await texts(store, ORG) == ["the repo uses tabs", "this user likes tabs"]


@pytest.mark.parametrize("user", ["slack:", "user:slack:UA"])
async def test_a_personal_fact_of_a_person_whose_scope_was_refused_is_never_org_wide(
        store, clock, scripted, user, caplog):
    """The org fallback is for a request that names nobody. A request whose person's id
    made no scope (empty after its namespace, or given as the scope's key) wrote "this
    user …" facts, and the summary that follows them, to org: every person's prompt."""
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("this user lives at 12 elm street", audience="user"),
                                   lesson("the vpn drops after an hour")],
                         "summary": "asked where they live"}]
    await reflect(memory, run(user=user, channel="slack:C1", visibility="public"))
    assert await texts(store, ORG) == ["the vpn drops after an hour"]
    assert await store.list(CHANNEL, 10) == []
    [line] = [r.getMessage() for r in caplog.records if "reflection r-42" in r.getMessage()]
    assert "denied 2 (user_scope_refused 2)" in line


async def test_a_correction_follows_its_targets_scope(store, clock, scripted):
    await store.write(USER_A, [fact("this user deploys from the laptop")])
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("this user deploys from the ci runner",
                                          supersedes=f"mem:{USER_A}:1")]}]  # tagged org
    await reflect(memory, run(text="this user deploys"))
    assert await texts(store, USER_A) == ["this user deploys from the ci runner"]
    assert await store.list(ORG, 10) == []


# --- the write policy --------------------------------------------------------------------------


async def test_an_org_fact_from_a_dm_lands_in_the_users_scope(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("the vpn drops after an hour")],
                         "summary": "talked about the vpn"}]
    await reflect(memory, run(visibility="dm", channel="slack:D1"))
    assert await store.list(ORG, 10) == []
    assert await texts(store, USER_A) == ["talked about the vpn", "the vpn drops after an hour"]


async def test_the_same_fact_from_a_public_channel_reaches_org(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("the vpn drops after an hour")]}]
    await reflect(memory, run(visibility="public"))
    assert await texts(store, ORG) == ["the vpn drops after an hour"]


async def test_private_or_unstamped_org_facts_narrow_to_the_channel(store, clock, scripted,
                                                                     caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("releases are cut on tuesdays")]},
                        {"facts": [lesson("releases are tagged by the bot")]}]
    await reflect(memory, run(visibility="private"))
    await reflect(memory, run(visibility=None, repo="acme/api"))
    assert await store.list(ORG, 10) == [] and await store.list(REPO, 10) == []
    assert await texts(store, CHANNEL) == ["releases are cut on tuesdays",
                                           "releases are tagged by the bot"]
    lines = [r.getMessage() for r in caplog.records if "reflection r-42" in r.getMessage()]
    assert "narrowed 1 (private_origin 1)" in lines[0]
    assert "narrowed 1 (unknown_origin 1)" in lines[1]


async def test_a_narrowed_correction_loses_its_pointer(store, clock, scripted):
    await store.write(ORG, [fact("the vpn is optional")])
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("the vpn is required for staging",
                                          supersedes=f"mem:{ORG}:1")]}]
    await reflect(memory, run(visibility="dm", text="vpn"))
    [kept] = await store.list(ORG, 10)
    assert kept.text == "the vpn is optional"          # the org record stands
    [narrowed] = await store.list(USER_A, 10)
    assert narrowed.supersedes is None


async def test_user_channel_and_repo_facts_are_never_widened(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("u fact", audience="user"),
                                   lesson("c fact", audience="channel"),
                                   lesson("r fact", audience="repo")]}]
    await reflect(memory, run(visibility="public", repo="acme/api"))
    assert await store.list(ORG, 10) == []
    assert await texts(store, USER_A) == ["u fact"]
    assert await texts(store, CHANNEL) == ["c fact"]
    assert await texts(store, REPO) == ["r fact"]


# --- what the extractor is shown ---------------------------------------------------------------


async def test_the_extractor_sees_every_scopes_records_and_the_window(store, clock, scripted):
    await store.write(ORG, [fact("org note about caching")])
    await store.write(USER_A, [fact("user note about caching")])
    await store.write(USER_B, [fact("someone else's caching note")])
    await store.write(REPO, [fact("repo lesson with no shared words")])
    memory = make_memory(store, clock, scripted)
    await reflect(memory, run(repo="acme/api", text="caching"))
    shown = scripted.calls[0]["user"]
    assert f"mem:{ORG}:1" in shown and f"mem:{USER_A}:1" in shown
    assert f"mem:{REPO}:1" in shown                      # the window, not a keyword hit
    assert "someone else's" not in shown
