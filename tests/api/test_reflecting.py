"""Reflection never loses a lesson to one failure and never writes across a line: shared
repository answers, failed shown-set reads, plugin audiences, human-stated records, opt-outs.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from scopemem import Memory, MemoryConfig, Request, ScopeKind, handle_command, hookimpl
from scopemem.api.finished_run import Run
from scopemem.core.records import Kind, Source, Status
from scopemem.core.requests import Request as CoreRequest
from scopemem.errors import StoreRefused
from scopemem.plugins.manager import new_plugin_manager
from tests.api.test_memory_write import (
    ORG,
    REPO,
    USER_A,
    Scripted,
    lesson,
    make_memory,
    reflect,
    run,
    texts,
)
from tests.conftest import fact
from tests.fake_embedder import FakeEmbedder
from tests.fake_embedder import Plugin as EmbedderPlugin
from tests.fake_model import fake_model_server

GUILD = "guild:discord:G1"


@pytest.fixture
def scripted() -> Scripted:
    return Scripted()


@pytest.fixture
def store(embedded_store):
    return embedded_store


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "reflection r-42" in r.getMessage()]


# --- item 8: the repository is resolved once, and shared --------------------------------------


async def _repo() -> str:
    await asyncio.sleep(0)
    return "acme/api"


def _repo_source(shape: str) -> object:
    if shape == "coroutine":
        return _repo()  # a bare coroutine can be awaited once only
    if shape == "task":
        return asyncio.ensure_future(_repo())
    future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    asyncio.get_running_loop().call_soon(future.set_result, "acme/api")
    return future


@pytest.mark.parametrize("shape", ["coroutine", "task", "future"])
async def test_a_repo_awaitable_read_first_still_routes_repo_facts_to_repo(
        store, clock, scripted, shape, memory_warnings):
    memory = make_memory(store, clock, scripted)
    await store.write(REPO, [fact("the api repo needs make bootstrap before pytest")])
    request = Request(text="why does pytest fail", user_id="slack:UA", channel_id="slack:C1",
                      repo=_repo_source(shape), channel_visibility="public")
    block = await memory.context_block(request)
    assert f"+ {REPO} +" in block and "make bootstrap" in block
    scripted.replies = [{"facts": [lesson("the api repo runs pytest with -p no:cacheprovider",
                                          audience="repo")],
                         "summary": "a pytest question"}]
    await reflect(memory, Run(request=request, answer="done", tool_calls=1,
                              thread_key="slack:C1/17", run_id="r-42"))
    assert await texts(store, REPO) == ["a pytest question",
                                        "the api repo needs make bootstrap before pytest",
                                        "the api repo runs pytest with -p no:cacheprovider"]
    assert await store.list(ORG, 10) == []  # nothing of the repository leaked into org
    assert memory_warnings() == []


async def test_a_read_cancelled_while_the_repo_resolves_leaves_the_answer_for_later(
        store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    release = asyncio.Event()

    async def slow_repo() -> str:
        await release.wait()
        return "acme/api"

    request = Request(text="x", user_id="slack:UA", repo=slow_repo(),
                      channel_visibility="public")
    read = asyncio.ensure_future(memory.context_block(request))
    await asyncio.sleep(0.01)
    read.cancel()
    with pytest.raises(asyncio.CancelledError):
        await read
    release.set()
    assert await memory.resolve_repo(request.repo) == "acme/api"


# --- item 4: a failed read of the shown set costs only what it would have shown ----------------


async def test_a_failed_window_read_at_reflection_costs_only_the_shown_records(
        store, clock, scripted, memory_warnings):
    memory = make_memory(store, clock, scripted)

    async def broken_list(*_args, **_kwargs):
        raise OSError("worker unreachable")

    store.list = broken_list  # type: ignore[method-assign]
    scripted.replies = [{"facts": [lesson("the api repo needs make bootstrap first",
                                          audience="repo")]}]
    await reflect(memory, run(repo="acme/api"))
    assert len(scripted.calls) == 1  # the extraction still happened
    [warning] = [w for w in memory_warnings() if "repository window" in w]
    assert "reflection" in warning and REPO in warning and "worker unreachable" in warning
    assert [r.text for r in await store.retrieve(REPO, "bootstrap", 5)] == [
        "the api repo needs make bootstrap first"]


async def test_failed_reads_are_counted_on_the_line(store, clock, scripted, caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)

    async def broken(*_args, **_kwargs):
        raise OSError("disk gone")

    store.retrieve = broken  # type: ignore[method-assign]
    scripted.replies = [{"facts": [lesson("deploys need the vpn")]}]
    await reflect(memory, run())
    [line] = lines(caplog)
    assert "inserted 1" in line and "failed reads 3" in line  # org, channel, user


# --- item 10: a plugin's scope kind is an audience ----------------------------------------------


class Guilds:
    @hookimpl
    def scopemem_scope_kinds(self, config):
        def derive(request: CoreRequest) -> str | None:
            guild = request.extra.get("guild_id")
            return f"guild:discord:{guild}" if guild else None

        return [ScopeKind("guild", 15, derive, description="when it is about this Discord "
                                                           "server (its roles, raids, rules)")]


def guild_memory(store, clock, scripted) -> Memory:
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(scripted, Guilds()))
    config = MemoryConfig(enabled=True, organization="acme", store="memory",
                          model="scripted/m")
    return Memory(config, store, plugin_manager=pm, clock=clock)


def guild_run(**fields) -> Run:
    return Run(request=Request(text="when are raids", user_id="slack:UA",
                               channel_visibility="public", extra={"guild_id": "G1"}),
               answer="nine", tool_calls=1, thread_key="discord:G1/5", run_id="r-42", **fields)


async def test_reflection_routes_a_fact_to_a_plugin_kind(store, clock, scripted):
    memory = guild_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("raids on this server start at nine",
                                          audience="guild")],
                         "summary": "asked about raid times"}]
    await reflect(memory, guild_run())
    system = scripted.calls[0]["system"]
    assert '- "guild" when it is about this Discord server (its roles, raids, rules);' in system
    assert await texts(store, GUILD) == ["asked about raid times",
                                         "raids on this server start at nine"]
    assert await store.list(ORG, 10) == []


async def test_a_plugin_audience_without_its_scope_falls_back_to_org(store, clock, scripted):
    memory = guild_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("raids start at nine", audience="guild")]}]
    await reflect(memory, run())  # no guild_id: this run has no guild scope
    assert await texts(store, ORG) == ["raids start at nine"]


# --- item 11: what a person stated outranks what the extractor inferred ------------------------


async def test_reflection_cannot_retire_a_fact_a_person_stated(store, clock, scripted, caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted, admins=("user:slack:UA",))
    reply = await handle_command(memory, "memory remember --scope org deploys freeze on "
                                 "fridays", "user:slack:UA", channel_id="slack:C1")
    assert reply.startswith("🧠 remembered in org:acme")
    [stated] = await store.list(ORG, 10)
    assert stated.source is Source.HUMAN
    scripted.replies = [{"facts": [lesson("deploys may run any day", supersedes=stated.id,
                                          confidence=0.6)]}]
    await reflect(memory, run(text="can we deploy on fridays"))
    records = await store.list(ORG, 10)
    assert [(r.text, r.status.value, r.source) for r in records] == [
        ("deploys may run any day", "active", Source.REFLECTION),
        ("deploys freeze on fridays", "active", Source.HUMAN)]
    [line] = lines(caplog)
    assert "inserted 1" in line and "outranked 1" in line and "superseded 0" in line


# --- item 12: a conversation kept out of memory -------------------------------------------------


@pytest.mark.parametrize("opt_out", ["run_flag", "request_flag", "request_text", "history",
                                     "slack_escaped", "invisible_split", "fullwidth"])
async def test_a_run_kept_out_of_memory_is_never_reflected(store, clock, scripted, caplog,
                                                           opt_out):
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("deploys need the vpn")], "summary": "s"}]
    the_run = {
        "run_flag": lambda: run(no_memory=True),
        "request_flag": lambda: Run(request=Request(text="x", user_id="slack:UA",
                                                    no_memory=True),
                                    answer="y", tool_calls=1, run_id="r-42"),
        "request_text": lambda: run(text="please fix the build <No-Memory>"),
        "history": lambda: run(history=[{"role": "user", "content": "<no-memory> hi"}]),
        # The marker as a person typed it and a platform delivered it: Slack's event text
        # escapes < and > as entities; a rich-text paste may carry a zero width space;
        # an IME types fullwidth brackets. Each reads as <no-memory> once rendered.
        "slack_escaped": lambda: run(text="please fix the build &lt;no-memory&gt;"),
        "invisible_split": lambda: run(text="please fix the build <no\u200b-memory>"),
        "fullwidth": lambda: run(text="please fix the build ＜no-memory＞"),
    }[opt_out]()
    await reflect(memory, the_run)
    assert scripted.calls == []  # no extractor call at all
    for scope in (ORG, USER_A, "channel:slack:C1"):
        assert await store.list(scope, 10) == []
    assert lines(caplog) == ["[memory] reflection r-42: skipped no_memory"]


async def test_a_run_without_the_marker_still_reflects(store, clock, scripted):
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("deploys need the vpn")]}]
    await reflect(memory, run(text="no memory of why the build broke"))
    assert await texts(store, ORG) == ["deploys need the vpn"]


# --- item 14: the counters, per target scope ----------------------------------------------------


async def test_the_line_counts_per_target_scope(store, clock, scripted, caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("the api repo needs make bootstrap", audience="repo"),
                                   lesson("the api repo lints with ruff", audience="repo"),
                                   lesson("deploys need the vpn")],
                         "summary": "a build question"}]
    await reflect(memory, run(repo="acme/api"))
    [line] = lines(caplog)
    assert "inserted 3, summary 1," in line
    assert line.endswith(f"; by scope: {ORG} (inserted 1), {REPO} (inserted 2, summary 1)")
    assert await store.list(REPO, 10, kind=Kind.SUMMARY)


# --- item 17: the status gate has its switch -----------------------------------------------------


class NoGiveaways:
    @hookimpl
    def scopemem_rejection_markers(self, candidate):
        return ["giveaway"] if "giveaway" in candidate.text else None


@pytest.mark.parametrize("gate", [True, False])
async def test_memory_gate_switches_the_status_gate(store, clock, scripted, gate):
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(scripted, NoGiveaways()))
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory",
                                 model="scripted/m", gate=gate, admins=("user:slack:UA",)),
                    store, plugin_manager=pm, clock=clock)
    status = "PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing"
    scripted.replies = [{"facts": [lesson(status), lesson("the giveaway bot posts at noon"),
                                   lesson("deploys need the vpn")]}]
    await reflect(memory, run())
    remembered = await handle_command(memory, f"memory remember --scope org {status}!",
                                      "user:slack:UA")
    expected = ["deploys need the vpn"] + ([] if gate else [status, status + "!"])
    assert await texts(store, ORG) == sorted(expected)
    assert remembered.startswith("🚫" if gate else "🧠")
    # Another plugin's markers are not the status gate: they apply either way.
    assert "giveaway" not in " ".join(await texts(store, ORG))


def test_memory_gate_is_a_boolean():
    from scopemem import ConfigError
    from scopemem.config import config_from_mapping

    assert config_from_mapping({"memory": {}}).gate is True
    assert config_from_mapping({"memory": {"gate": False}}).gate is False
    with pytest.raises(ConfigError, match="memory.gate"):
        config_from_mapping({"memory": {"gate": "off"}})


# --- item 2: one refused candidate costs only itself --------------------------------------------


async def test_a_batch_refused_as_a_whole_is_written_one_candidate_at_a_time(
        store, clock, scripted, caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    inner = store.write

    async def picky(scope_key, candidates, cap=None):
        # A worker with a rule this client does not know: it refuses any batch holding "x9".
        if any("x9" in c.text for c in candidates):
            raise StoreRefused("memory worker /write failed: answered 400: records[1]: x9")
        return await inner(scope_key, candidates, cap)

    store.write = picky  # type: ignore[method-assign]
    scripted.replies = [{"facts": [lesson("deploys need the vpn"), lesson("x9 is forbidden"),
                                   lesson("lint before pushing")],
                         "summary": "a deploy question"}]
    await reflect(memory, run())
    assert await texts(store, ORG) == ["a deploy question", "deploys need the vpn",
                                       "lint before pushing"]
    [line] = lines(caplog)
    assert "inserted 2, summary 1," in line and line.count("failed writes 1") == 1


async def test_a_fact_that_is_not_text_is_dropped_with_its_reason_not_the_batch(
        store, clock, scripted, caplog):
    caplog.set_level(logging.INFO, logger="scopemem")
    memory = make_memory(store, clock, scripted)
    # The extractor's JSON can carry "\ud800": a lone surrogate, which no store can keep.
    scripted.replies = [{"facts": [lesson("deploys need the vpn"), lesson("bad \ud800 text"),
                                   lesson("lint before pushing")],
                         "summary": "a deploy question"}]
    await reflect(memory, run())
    assert await texts(store, ORG) == ["a deploy question", "deploys need the vpn",
                                       "lint before pushing"]
    [line] = lines(caplog)
    assert "inserted 2, summary 1," in line and "dropped 1 (not text 1)" in line


# --- a local reasoning model's reply, through the openai provider ---------------------------


REASONING_REPLY = (
    "<think>\nThe user fixed the build. Draft: {\"facts\": [{\"text\": \"a draft\", "
    "\"confidence\": 0.9}]}. Keep it durable.\n</think>\n\n"
    "Here is the JSON:\n```json\n"
    '{"facts": [{"text": "run make bootstrap before the tests", "confidence": "0.9"}], '
    '"summary": "fixed the build"}\n```\nHope this helps!')


async def test_a_reasoning_models_wrapped_reply_is_learned_end_to_end(
        store, clock, scripted, caplog):
    # As Ollama or vLLM serve DeepSeek-R1 or Qwen3: reasoning, prose and a fence around the
    # JSON, the confidence a string. Each reflection was refused as "not JSON".
    caplog.set_level(logging.INFO, logger="scopemem")
    with fake_model_server() as model:
        model.replies.append(REASONING_REPLY)
        memory = make_memory(store, clock, scripted, model="openai/fake-model", providers={
            "openai": {"base_url": model.base_url, "api_key_env": "FAKE_MODEL_KEY"}})
        try:
            await reflect(memory, run())
            assert await texts(store, ORG) == ["fixed the build",
                                               "run make bootstrap before the tests"]
        finally:
            await memory.close()
        assert len(model.requests) == 1
    [line] = lines(caplog)
    assert "offered 1, rejected 0," in line and "inserted 1, summary 1," in line


# --- keywords are judged against the fact's own text ------------------------------------------


async def test_reflection_drops_a_keyword_its_fact_names_as_a_password_as_write_does(
        store, clock, scripted):
    said = "the staging database uses password=hunter2"
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson(said, keywords=["database", "hunter2"])]}]
    await reflect(memory, run())
    [reflected] = [record for record in await store.list(ORG, 50) if record.kind is Kind.FACT]
    await store.write(USER_A, [fact(said, keywords=("database", "hunter2"))])
    [written] = await store.list(USER_A, 50)
    assert reflected.text == written.text == \
        "the staging database uses password=[REDACTED:credential]"
    assert reflected.keywords == written.keywords == ("database",)



# --- a slow embedder costs vectors, never a lesson ---------------------------------------------


class StuckEmbedder(FakeEmbedder):
    """An embedder that never answers; ``asked`` is set when it is first asked."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()

    async def embed(self, *, model, texts):  # type: ignore[no-untyped-def]
        self.asked.set()
        await asyncio.Event().wait()
        return []


async def test_every_scope_is_written_before_an_embedder_is_asked(store, clock, scripted):
    """A reflection writes every scope's lessons before it embeds any: an embedder that
    never answers (then the drain's deadline cancelling the reflection) costs vectors, a
    backfill's work, and never the lessons of the scopes after the first."""
    embedder = StuckEmbedder()
    pm = new_plugin_manager(load_entry_points=False,
                            extra_plugins=(scripted, EmbedderPlugin(embedder)))
    memory = Memory(MemoryConfig(enabled=True, organization="acme", store="memory",
                                 model="scripted/extractor-1", embeddings="fake/m"),
                    store, plugin_manager=pm, clock=clock)
    scripted.replies = [{"facts": [lesson("the api repo needs make bootstrap", audience="repo"),
                                   lesson("this user prefers pnpm over npm", audience="user"),
                                   lesson("deploys need the vpn")],
                         "summary": "a build question"}]
    memory.schedule_reflection(run(repo="acme/api"))
    await asyncio.wait_for(embedder.asked.wait(), 30)
    assert "deploys need the vpn" in await texts(store, ORG)
    assert "the api repo needs make bootstrap" in await texts(store, REPO)
    assert "this user prefers pnpm over npm" in await texts(store, USER_A)
    assert not await memory.drain(timeout=0.1)  # the embedding never ends: cancelled


@pytest.mark.parametrize(("fields", "named"), [
    ({"answer": None}, "answer"),
    ({"answer": 123}, "answer"),
    ({"tool_calls": None}, "tool_calls"),
    ({"tool_calls": -1}, "tool_calls"),
    ({"tool_calls": True}, "tool_calls"),
    ({"history": None}, "history"),
    ({"history": "the whole thread as one string"}, "history"),
    ({"agent_name": 7}, "agent_name"),
    ({"run_id": 42}, "run_id"),
    ({"model": ["openai/gpt-4o-mini"]}, "model"),
    ({"thread_key": 17}, "thread_key"),
    ({"request": {"text": "x"}}, "request"),
])
def test_a_run_an_adapter_got_wrong_is_refused_naming_the_field(fields, named):
    # It was accepted, and its reflection failed later in the background with an
    # AttributeError or TypeError that named nothing the adapter wrote.
    values = {"request": Request(text="fix the build"), "answer": "done", **fields}
    with pytest.raises(TypeError, match=named):
        Run(**values)


def test_a_run_without_a_thread_key_may_say_none():
    assert Run(request=Request(text="x"), answer="ok", thread_key=None).thread_key == ""


async def test_a_run_takes_its_thread_key_and_run_id_from_its_request_when_it_names_none(
        store, clock, scripted):
    """The request names the run for the reach log (``Request.run_id``, ``thread_key``); a
    ``Run(request=request)`` that did not repeat them wrote its lessons ``unthreaded``, with
    no run id: nothing tied them to the run that saw the block."""
    memory = make_memory(store, clock, scripted)
    request = Request(text="why does pytest fail", user_id="slack:UA",
                      channel_visibility="dm", run_id="r-7", thread_key="slack:D1/9")
    assert (Run(request=request, answer="a").thread_key,
            Run(request=request, answer="a").run_id) == ("slack:D1/9", "r-7")
    assert (Run(request=request, answer="a", thread_key="t", run_id="r").thread_key,
            Run(request=request, answer="a", thread_key="t", run_id="r").run_id) == ("t", "r")
    scripted.replies = [{"facts": [lesson("this user runs pytest with -x", audience="user")]}]
    await reflect(memory, Run(request=request, answer="done", tool_calls=1))
    [record] = await store.list("user:slack:UA", 10)
    assert (record.source_thread_key, record.source_run_id) == ("slack:D1/9", "r-7")


async def test_a_fact_that_corrects_one_record_and_restates_another_keeps_both_links(
        store, clock, scripted):
    """A fact the extractor said replaces one shown record and restates another was taken
    as the restatement alone: the record it corrects stayed active, read by every run, and
    no record kept the correction's pointer."""
    await store.write(ORG, [fact("the license check runs on every push to main"),
                            fact("the license check runs nightly, not on pushes")])
    stale, restated = f"mem:{ORG}:1", f"mem:{ORG}:2"
    memory = make_memory(store, clock, scripted)
    scripted.replies = [{"facts": [lesson("the license check runs nightly, never on a push",
                                          supersedes=stale, restates=restated)],
                         "summary": "the license check"}]
    await reflect(memory, run(text="does the license check run on push or nightly"))
    history = await store.record_history(ORG, stale)
    assert history is not None and history.record.status is Status.SUPERSEDED
    successor = history.superseded_by
    assert successor is not None and successor.is_active
    assert (successor.supersedes, successor.restates) == (stale, restated)
    kept = await store.record_history(ORG, restated)
    assert kept is not None and kept.record.is_active
    assert [record.id for record in kept.restated_by] == [successor.id]
