"""The read path: ``Memory.context_block`` and ``Memory.with_memory``."""

from __future__ import annotations

import asyncio

import pytest

from scopemem import ConfigError, Memory, MemoryConfig, Request, hookimpl
from scopemem.core.records import Kind
from scopemem.core.scoring import CUT_MARKER, FENCE_CLOSE, FENCE_OPEN
from scopemem.core.text import estimate_tokens
from scopemem.plugins.manager import new_plugin_manager
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.null import NullStore
from tests.conftest import DAY_MS, FakeClock, fact, summary

SYSTEM = "You are the coding agent for acme.\n\nFollow the repository's CONTRIBUTING.md."
ORG, REPO, CHANNEL = "org:acme", "repo:acme/api", "channel:slack:C1"
USER_A, USER_B = "user:slack:UA", "user:slack:UB"


def enabled(**overrides) -> MemoryConfig:
    settings = {"enabled": True, "organization": "acme", "store": "memory", **overrides}
    return MemoryConfig(**settings)


@pytest.fixture
def store(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock=clock)


def make_memory(store, clock, **overrides) -> Memory:
    return Memory(enabled(**overrides), store, clock=clock)


def bullets(block: str) -> list[str]:
    lines = block.splitlines()
    return [line[2:].split(" (source: ")[0] for line in lines if line.startswith("- ")]


def prefix(block: str) -> str:
    return block.splitlines()[0]


# --- off ---------------------------------------------------------------------------------------


async def test_memory_off_builds_no_store_and_leaves_the_prompt_byte_identical():
    built = []

    class Exploding:
        @hookimpl
        def scopemem_register_stores(self, register):
            register("exploding", lambda settings: built.append(settings))

    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Exploding(),))
    memory = Memory.from_config({"memory": {"store": "exploding", "organization": "acme"}},
                                plugin_manager=pm)
    assert isinstance(memory.store, NullStore) and built == []
    block = await memory.context_block(Request(text="deploy", user_id="slack:UA"))
    assert block == ""
    out = memory.with_memory(SYSTEM, block)
    assert out is SYSTEM and out.encode() == SYSTEM.encode()


async def test_memory_off_releases_a_repo_coroutine_it_will_never_await():
    """The documented ``Request(repo=resolve())`` under the default, memory off: the
    coroutine handed over is closed, not left to warn "was never awaited" every turn."""
    import inspect

    from scopemem import Run

    async def resolve() -> str:
        return "acme/api"

    memory = Memory.from_config({"memory": {"enabled": False}})
    for call in ("block", "reflection"):
        coroutine = resolve()
        request = Request(text="deploy", user_id="slack:UA", repo=coroutine)
        if call == "block":
            assert await memory.context_block(request) == ""
        else:
            memory.schedule_reflection(Run(request=request, answer="done", tool_calls=3))
        assert inspect.getcoroutinestate(coroutine) == inspect.CORO_CLOSED


async def test_no_config_at_all_is_memory_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCOPEMEM_CONFIG", raising=False)
    memory = Memory.from_config()
    assert not memory.enabled
    assert await memory.context_block(Request(text="x")) == ""


async def test_an_environ_given_is_the_only_environment_the_config_search_reads(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    enabled_file = tmp_path / "enabled.toml"
    enabled_file.write_text('[memory]\nenabled = true\norganization = "acme"\n'
                            'store = "memory"\n')
    monkeypatch.setenv("SCOPEMEM_CONFIG", str(enabled_file))
    assert not Memory.from_config(None, environ={}).enabled
    assert Memory.from_config(None, environ={"SCOPEMEM_CONFIG": str(enabled_file)}).enabled
    assert Memory.from_config(None).enabled  # no environ: the process's, as before


# --- on ----------------------------------------------------------------------------------------


async def test_enabled_with_a_seeded_store_prepends_the_block(store, clock):
    await store.write(ORG, [fact("deploys go through the vpn", source_thread_key="slack:C9/1")])
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(text="how do deploys work?"))
    system = memory.with_memory(SYSTEM, block)
    assert system.endswith("\n\n" + SYSTEM)
    assert block.splitlines() == [
        "Background memory for org:acme (may be outdated — verify before acting):",
        FENCE_OPEN,
        "- deploys go through the vpn (source: slack:C9/1)",
        FENCE_CLOSE,
    ]


async def test_nothing_matched_means_no_block(store, clock):
    await store.write(ORG, [fact("deploys go through the vpn")])
    memory = make_memory(store, clock)
    assert await memory.context_block(Request(text="unrelated words")) == ""


async def test_a_user_sees_their_own_records_and_never_another_users(store, clock):
    await store.write(ORG, [fact("the deploy runbook lives in ops")])
    await store.write(USER_A, [fact("this user deploys with make deploy-fast")])
    await store.write(USER_B, [fact("this user can deploy on fridays only")])
    memory = make_memory(store, clock)
    block_a = await memory.context_block(Request(text="deploy", user_id="slack:UA"))
    assert prefix(block_a).startswith(f"Background memory for {ORG} + {USER_A} (")
    assert sorted(bullets(block_a)) == ["the deploy runbook lives in ops",
                                        "this user deploys with make deploy-fast"]
    block_b = await memory.context_block(Request(text="deploy", user_id="slack:UB"))
    assert "make deploy-fast" not in block_b and "fridays" in block_b
    anonymous = await memory.context_block(Request(text="deploy"))
    assert prefix(anonymous).startswith(f"Background memory for {ORG} (")


async def test_limit_and_ranking_apply_to_the_merged_pool(store, clock):
    await store.write(ORG, [fact("deploy"), fact("deploy vpn cluster")])
    await store.write(USER_A, [fact("deploy vpn"), fact("deploy cluster")])
    memory = make_memory(store, clock, limit=3)
    block = await memory.context_block(Request(text="deploy vpn cluster", user_id="slack:UA"))
    # Best first across scopes; the user's two equal hits keep their scope's order (newer
    # first), and the weakest record, although in the wider scope, falls to the limit.
    assert bullets(block) == ["deploy vpn cluster", "deploy cluster", "deploy vpn"]


async def test_ties_across_scopes_go_to_the_widest(store, clock):
    await store.write(USER_A, [fact("node 20 pin")])
    await store.write(ORG, [fact("pin node 20")])
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(text="node", user_id="slack:UA"))
    # Both score the same; the org record comes first.
    assert bullets(block) == ["pin node 20", "node 20 pin"]
    await store.write(ORG, [fact("org only node note")])
    block = await memory.context_block(Request(text="pin", user_id="slack:UA"))
    assert bullets(block) == ["pin node 20", "node 20 pin"]


async def test_four_scopes_are_named_and_another_channel_is_never_read(store, clock):
    await store.write(CHANNEL, [fact("this channel ships the api")])
    await store.write("channel:slack:C2", [fact("the other channel ships the api too")])
    await store.write(REPO, [fact("the api repo builds with make")])
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(
        text="ships api", user_id="slack:UA", channel_id="slack:C1", repo="acme/api"))
    assert prefix(block).startswith(
        f"Background memory for {ORG} + {REPO} + {CHANNEL} + {USER_A} (")
    assert "other channel" not in block
    assert "this channel ships the api" in block


async def test_the_repo_may_arrive_late_as_an_awaitable(store, clock):
    await store.write(REPO, [fact("run make bootstrap before tests")])
    memory = make_memory(store, clock)

    async def resolve() -> str:
        await asyncio.sleep(0.01)
        return "acme/api"

    block = await memory.context_block(Request(text="anything", repo=resolve()))
    assert REPO in prefix(block) and "make bootstrap" in block


@pytest.mark.parametrize("outcome", ["none", "error", "junk"])
async def test_a_repo_that_resolves_to_nothing_or_fails_is_no_repo_scope(
        store, clock, outcome, memory_warnings):
    await store.write(ORG, [fact("deploy via the vpn")])
    await store.write(REPO, [fact("deploy the api with make")])
    memory = make_memory(store, clock)

    async def resolve():
        if outcome == "error":
            raise RuntimeError("github is down")
        return {"owner": "acme", "name": "api"} if outcome == "junk" else None

    block = await memory.context_block(Request(text="deploy", repo=resolve()))
    assert prefix(block).startswith(f"Background memory for {ORG} (")
    assert "make" not in block
    if outcome == "error":
        assert len(memory_warnings()) == 1
    if outcome == "junk":  # named, never a silent loss of the repository scope
        assert memory_warnings() == ["[memory] repo resolution answered a dict, not an "
                                     "owner/name string; reading without the repo scope"]


@pytest.mark.parametrize(("given", "hint"), [
    ("https://github.com/acme/api", "it names acme/api: pass that"),
    ("git@github.com:acme/api.git", "it names acme/api: pass that"),
    ("acme/api.git", "it names acme/api: pass that"),
    ("api", "e.g. acme/api"),
])
@pytest.mark.parametrize("awaited", [False, True])
async def test_a_repo_that_is_not_owner_name_is_no_repo_scope_and_says_what_to_pass(
        store, clock, memory_warnings, given, hint, awaited):
    """A bot handing over its clone's remote URL (or a webhook's ``html_url``) read and
    wrote ``repo:https://github.com/acme/api``, a scope no session in the clone reads (the
    hooks and ``scopemem mcp`` name it ``repo:acme/api``): its lessons never arrived."""
    await store.write(REPO, [fact("deploy the api with make")])
    memory = make_memory(store, clock)

    async def resolve() -> str:
        return given

    block = await memory.context_block(Request(text="deploy", repo=resolve() if awaited
                                               else given))
    assert "make" not in block and "repo:" not in block
    assert memory_warnings() == [f"[memory] request.repo is not owner/name as a clone's "
                                 f"remote names it ({hint}); reading without the repo scope"]


async def test_a_repo_lookup_that_hangs_costs_the_repo_scope_not_the_turn(
        store, clock, memory_warnings):
    """A ``Request.repo`` lookup that never settles (a git remote asking for credentials)
    held every model turn: the read now waits ``repo_wait_seconds``, and reflection still
    gets the repository once the lookup answers."""
    await store.write(ORG, [fact("deploy via the vpn")])
    await store.write(REPO, [fact("deploy the api with make")])
    memory = make_memory(store, clock, repo_wait_seconds=0.05)
    answered = asyncio.Event()

    async def resolve() -> str:
        await answered.wait()
        return "acme/api"

    lookup = asyncio.ensure_future(resolve())
    block = await memory.context_block(Request(text="deploy", repo=lookup))
    assert prefix(block).startswith(f"Background memory for {ORG} (")
    assert "make" not in block
    assert memory_warnings() == ["[memory] repo resolution took longer than 0.05 s "
                                 "(memory.repo_wait_seconds); reading without the repo scope"]
    answered.set()  # the lookup was not cancelled: a later caller (reflection) gets it
    assert await memory.resolve_repo(lookup) == "acme/api"


@pytest.mark.parametrize("wait", [0, -1, 301, float("nan")])
def test_repo_wait_seconds_out_of_range_is_a_config_error_naming_it(wait):
    with pytest.raises(ConfigError, match="^memory.repo_wait_seconds: must be above 0"):
        Memory.from_config({"memory": {"enabled": True, "organization": "acme",
                                       "store": "memory", "repo_wait_seconds": wait}})


# --- the repository window ---------------------------------------------------------------------


async def test_the_window_leads_with_the_newest_repo_facts_whatever_the_brief(store, clock):
    for n in range(5):
        clock.advance(1000)
        await store.write(REPO, [fact(f"repo lesson {n}")])
    await store.write(REPO, [summary("a repo summary")])
    await store.write(ORG, [fact("drift check needs the lockfile")])
    memory = make_memory(store, clock, repo_window=3)
    block = await memory.context_block(Request(text="add a drift check", repo="acme/api"))
    assert bullets(block) == ["repo lesson 4", "repo lesson 3", "repo lesson 2",
                              "drift check needs the lockfile"]
    # The window is a view: nothing it showed was bumped.
    assert all(r.use_count == 0 for r in await store.list(REPO, 10))


async def test_no_repo_means_no_window(store, clock):
    await store.write(REPO, [fact("repo lesson")])
    memory = make_memory(store, clock)
    assert await memory.context_block(Request(text="repo lesson")) == ""


async def test_a_failed_window_read_costs_the_window_only(store, clock, memory_warnings):
    await store.write(ORG, [fact("deploy via the vpn")])
    await store.write(REPO, [fact("repo lesson")])

    async def broken_list(*args, **kwargs):
        raise OSError("disk on fire")

    store.list = broken_list  # type: ignore[method-assign]
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(text="deploy", repo="acme/api"))
    assert bullets(block) == ["deploy via the vpn"]
    [warning] = memory_warnings()
    assert warning.startswith("[memory]") and REPO in warning


async def test_repo_window_zero_reads_the_repo_by_keyword(store, clock):
    await store.write(REPO, [fact("repo lesson about caching"), fact("repo lesson on deploy")])
    memory = make_memory(store, clock, repo_window=0)
    block = await memory.context_block(Request(text="caching", repo="acme/api"))
    assert bullets(block) == ["repo lesson about caching"]


async def test_the_block_stays_within_max_tokens(store, clock):
    await store.write(REPO, [fact(f"repo lesson {n} " + "detail " * 30) for n in range(24)])
    await store.write(ORG, [fact(f"org deploy note {n} " + "more " * 30) for n in range(20)])
    memory = make_memory(store, clock, max_tokens=600)
    block = await memory.context_block(Request(text="deploy note", repo="acme/api"))
    assert estimate_tokens(block) <= 600
    assert len(bullets(block)) >= 2


async def test_a_first_record_larger_than_the_budget_is_cut_never_overflowing(store, clock):
    text = "deploy " + "&&&&&&&& " * 443 + "&&&&&&"
    assert len(text) == 4000
    await store.write(ORG, [fact(text)])
    memory = make_memory(store, clock, max_tokens=300)
    block = await memory.context_block(Request(text="deploy", user_id="slack:UA",
                                               channel_id="slack:C1", repo="acme/api"))
    assert estimate_tokens(block) <= 300
    [bullet] = bullets(block)
    assert bullet.startswith("deploy &amp;&amp;") and bullet.endswith(CUT_MARKER)
    [stored] = await store.list(ORG, 5)
    assert stored.text == text


async def test_a_budget_with_no_room_for_a_record_injects_nothing_and_says_so(
        store, clock, memory_warnings):
    await store.write(ORG, [fact("deploy via the vpn")])
    memory = make_memory(store, clock, max_tokens=20)
    assert await memory.context_block(Request(text="deploy")) == ""
    [warning] = memory_warnings()
    assert "max_tokens 20" in warning


# --- failures and policy -----------------------------------------------------------------------


async def test_a_failing_scope_costs_only_its_records(store, clock, memory_warnings):
    await store.write(ORG, [fact("deploy via the vpn")])
    await store.write(USER_A, [fact("this user runs deploy late")])
    real_search = store.search

    async def flaky(scope_key, query, limit, *, bump=True):
        if scope_key == ORG:
            raise OSError("timeout")
        return await real_search(scope_key, query, limit, bump=bump)

    store.search = flaky  # type: ignore[method-assign]
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(text="deploy", user_id="slack:UA"))
    assert bullets(block) == ["this user runs deploy late"]
    assert len(memory_warnings()) == 1


async def test_reads_never_consult_the_write_policy(store, clock):
    class Tripwire:
        @hookimpl(tryfirst=True)
        def scopemem_authorize_write(self, actor, target, candidate, origin):
            raise AssertionError("reads must not authorize")

    await store.write(ORG, [fact("deploy via the vpn")])
    pm = new_plugin_manager(load_entry_points=False, extra_plugins=(Tripwire(),))
    memory = Memory(enabled(), store, plugin_manager=pm, clock=clock)
    assert "vpn" in await memory.context_block(Request(text="deploy", channel_visibility="dm"))


async def test_a_shown_hit_counts_as_used(store, clock):
    await store.write(ORG, [fact("deploy via the vpn")])
    clock.advance(DAY_MS)
    memory = make_memory(store, clock)
    await memory.context_block(Request(text="deploy"))
    await memory.drain(timeout=5)  # use counts are saved in the background
    [record] = await store.list(ORG, 1)
    assert record.use_count == 1 and record.last_used_at == clock.now


# --- construction ------------------------------------------------------------------------------


def test_enabled_without_an_organization_is_refused():
    with pytest.raises(ConfigError, match="memory.organization"):
        Memory.from_config({"memory": {"enabled": True, "store": "memory"}})


def test_an_unknown_store_lists_the_installed_ones():
    with pytest.raises(ConfigError, match=r"memory\.store: .*installed: .*memory.*"
                                          r"\(plugin may not be installed\)"):
        Memory.from_config({"memory": {"enabled": True, "organization": "a",
                                        "store": "cassandra"}})


def test_the_in_process_store_warns_that_it_forgets_on_restart(memory_warnings):
    memory = Memory.from_config({"memory": {"enabled": True, "organization": "acme",
                                            "store": "memory",
                                            "max_records_per_scope": 7}})
    assert isinstance(memory.store, InMemoryStore) and memory.store.cap == 7
    [warning] = memory_warnings()
    assert "lost on restart" in warning


async def test_a_bad_user_id_is_skipped_with_a_warning(store, clock, memory_warnings):
    await store.write(ORG, [fact("deploy via the vpn")])
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(text="deploy", user_id="slack:has space"))
    assert prefix(block).startswith(f"Background memory for {ORG} (")
    assert len(memory_warnings()) == 1


def test_summaries_are_kind_summary():
    assert summary("x").kind == Kind.SUMMARY


async def test_context_names_the_scopes_that_failed(store, clock, memory_warnings):
    await store.write(ORG, [fact("deploys go through the vpn")])
    inner = store.search

    async def flaky(scope_key, query, limit, *, bump=True):
        if scope_key == USER_A:
            raise OSError("disk gone")
        return await inner(scope_key, query, limit, bump=bump)

    store.search = flaky  # type: ignore[method-assign]
    memory = make_memory(store, clock)
    result = await memory.context(Request(text="deploys", user_id="slack:UA"))
    assert result.scopes == (ORG, USER_A)
    assert result.failed == {USER_A: "disk gone"}
    assert "deploys go through the vpn" in result.block  # the rest of the block stands
    assert await memory.context_block(Request(text="deploys", user_id="slack:UA")) == \
        result.block
    assert any("retrieve from user:slack:UA failed: disk gone" in w for w in memory_warnings())


# --- used means shown, and the repository beyond its window (issue 13) -------------------------


async def test_only_the_hits_a_prompt_showed_count_as_used(store, clock):
    # Twelve records hit the brief; the budget shows only a few of them.
    await store.write(ORG, [fact(f"cache rule {n} " + "padding " * 40) for n in range(12)])
    clock.advance(DAY_MS)
    memory = make_memory(store, clock, max_tokens=256)
    block = await memory.context_block(Request(text="cache rule"))
    await memory.drain(timeout=5)
    shown = {" ".join(text.split()[:3]) for text in bullets(block)}
    assert 1 <= len(shown) < 12
    records = await store.list(ORG, 50)
    used = {" ".join(r.text.split()[:3]) for r in records if r.use_count}
    assert used == shown
    assert all(r.last_used_at == clock.now for r in records if r.use_count)


async def test_an_old_repository_lesson_beyond_the_window_still_reaches_the_run(store, clock):
    await store.write(REPO, [fact("flaky migrations need the lockfile refreshed")])
    for n in range(30):  # thirty newer lessons push it out of the 24-fact window
        clock.advance(1000)
        await store.write(REPO, [fact(f"newer repo lesson number {n}")])
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(text="the migrations are flaky again",
                                               repo="acme/api"))
    shown = bullets(block)
    assert "flaky migrations need the lockfile refreshed" in shown
    # The newest lessons still lead the block.
    assert shown[0] == "newer repo lesson number 29"
    await memory.drain(timeout=5)
    # The window's display never reinforces it (003); the hit that was shown does.
    by_text = {r.text: r for r in await store.list(REPO, 50)}
    assert by_text["flaky migrations need the lockfile refreshed"].use_count == 1
    assert by_text["newer repo lesson number 29"].use_count == 0


async def test_a_floor_on_the_match_keeps_unrelated_hits_out(store, clock):
    await store.write(ORG, [fact("the deploy needs the vpn"), fact("lunch is at noon")])
    brief = "why does the deploy of the billing service time out under load tonight"
    loose = make_memory(store, clock)
    assert bullets(await loose.context_block(Request(text=brief))) == [
        "the deploy needs the vpn"]
    strict = make_memory(store, clock, min_match=0.5)
    assert await strict.context_block(Request(text=brief)) == ""


# --- the full window beside many keyword hits (003 criterion 1) ------------------------------

TRAIN = "the release train leaves from the main branch"
BRIEF = "plan the release train"


def lesson(n: int) -> str:
    return f"repository lesson number {n} about nothing shared"


async def fill_window(store, clock, oldest: str | None, others: int = 20) -> None:
    """24 repository facts, ``oldest`` first when given, and ``others`` org facts that
    match ``BRIEF``."""
    texts = ([oldest] if oldest else []) + [lesson(n) for n in range(24 - bool(oldest))]
    for text in texts:
        clock.advance(1000)
        await store.write(REPO, [fact(text)])
    await store.write(ORG, [fact(f"release train note {n}") for n in range(others)])


async def test_the_whole_window_is_shown_beside_many_keyword_hits(store, clock):
    # Twenty records of other scopes match the brief: more hits than half of ``limit``.
    await fill_window(store, clock, None)
    shown = bullets(await make_memory(store, clock).context_block(
        Request(text=BRIEF, repo="acme/api")))
    assert shown[:24] == [lesson(n) for n in range(23, -1, -1)]
    # The keyword hits get what is left of ``limit`` (32): eight.
    assert len(shown) == 32
    assert all(text.startswith("release train note") for text in shown[24:])


async def test_a_window_record_that_is_also_a_best_hit_is_shown_once(store, clock):
    await fill_window(store, clock, TRAIN)
    shown = bullets(await make_memory(store, clock).context_block(
        Request(text=BRIEF, repo="acme/api")))
    # The oldest fact of the window matches the brief best of all: it is in the window, once.
    assert shown.count(TRAIN) == 1 and shown.index(TRAIN) == 23
    assert len(shown) == 32


async def test_a_window_cut_by_max_tokens_keeps_the_facts_the_brief_matches(store, clock):
    clock.advance(1000)
    await store.write(REPO, [fact(TRAIN)])
    for n in range(23):
        clock.advance(1000)
        await store.write(REPO, [fact(f"{lesson(n)} " + "padding " * 20)])
    memory = make_memory(store, clock, max_tokens=600)
    block = await memory.context_block(Request(text=BRIEF, repo="acme/api"))
    shown = bullets(block)
    assert estimate_tokens(block) <= 600
    # The budget holds only part of the window: its oldest facts give way, but never the
    # one the brief matches; the window's order stays.
    assert 2 <= len(shown) < 24
    assert shown[-1] == TRAIN and shown[0].startswith(lesson(22))


async def test_a_limit_below_the_window_holds_the_newest_facts_and_the_matched_ones(
        store, clock):
    await fill_window(store, clock, TRAIN, others=5)
    memory = make_memory(store, clock, limit=4)
    block = await memory.context_block(Request(text=BRIEF, repo="acme/api"))
    # ``limit`` counts every record of the block: the window takes it all, the facts the
    # brief matches first, then the newest; no keyword hit of another scope fits.
    assert bullets(block) == [lesson(22), lesson(21), lesson(20), TRAIN]


# --- one lesson, one bullet, whatever scopes hold it -------------------------------------------


async def test_a_lesson_held_by_two_scopes_is_one_bullet_the_first_the_block_shows(store, clock):
    # The repository's copy (its window leads the block) and the caller's own copy, the
    # latter restated in other case and spacing: one bullet, the repository's, counted alone.
    await store.write(REPO, [fact("Flaky migrations need the lockfile refreshed")])
    await store.write(USER_A, [fact("  flaky MIGRATIONS need   the lockfile refreshed ")])
    await store.write(ORG, [fact("migrations run before the deploy")])
    await store.write(CHANNEL, [fact("migrations run before the deploy")])
    clock.advance(DAY_MS)
    memory = make_memory(store, clock)
    block = await memory.context_block(Request(text="flaky migrations lockfile deploy",
                                               user_id="slack:UA", repo="acme/api",
                                               channel_id="slack:C1"))
    await memory.drain(timeout=5)
    shown = bullets(block)
    assert shown.count("Flaky migrations need the lockfile refreshed") == 1
    assert not any(text.strip().startswith("flaky MIGRATIONS") for text in shown)
    assert shown.count("migrations run before the deploy") == 1
    [user_copy] = await store.list(USER_A, 5)
    assert user_copy.use_count == 0  # not shown, so not used
    org_used = (await store.list(ORG, 5))[0].use_count
    channel_used = (await store.list(CHANNEL, 5))[0].use_count
    assert sorted([org_used, channel_used]) == [0, 1]
