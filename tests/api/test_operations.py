"""The typed manual operations on ``Memory``: what they return, what they refuse (with which
reason token), and that they go through the same gate and write path as the commands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scopemem import (
    REFUSAL_REASONS,
    Caller,
    Memory,
    MemoryConfig,
    MemoryRefused,
    OperationFailed,
    Record,
    Request,
    ScopememError,
    Status,
)
from scopemem.core.records import CountRow
from scopemem.errors import StoreUnsupported
from scopemem.stores.base import search_hits
from scopemem.stores.memory import InMemoryStore
from tests.conftest import DAY_MS, FakeClock, fact

ORG, REPO, CHANNEL = "org:acme", "repo:acme/api", "channel:slack:C1"
ALICE = Caller(user_key="user:slack:UA", channel_id="slack:C1", repo="acme/api")
BOB = Caller(user_key="user:slack:UB", channel_id="slack:C1")
ADMIN = Caller(user_key="user:slack:UADMIN", channel_id="slack:C1")
STATUS = "PR 1835 was pushed at sha 3f9a2c1 with all 10512 tests passing"
SECRET = "the deploy key is sk-" + "a" * 40

#: Scope arguments that name something the caller may never read or change, whoever asks.
HOSTILE_SCOPES = [
    BOB.user_key,                       # another person's scope
    "user:slack:UB ",                   # the same with a trailing space
    "user:slack:UA\nuser:slack:UB",     # a forged second line
    "org:evil",                         # another organisation
    "guild:123",                        # a kind nobody registered
    "repo:",                            # no name
    ":",
    "user",                             # the kind word itself is no scope word
    "x" * 5000 + ":y",
    "",
]


@pytest.fixture
def store(clock: FakeClock) -> InMemoryStore:
    return InMemoryStore(clock=clock)


def make(store, clock, **config) -> Memory:
    config.setdefault("admins", (ADMIN.user_key,))
    return Memory(MemoryConfig(enabled=True, organization="acme", store="memory", **config),
                  store, clock=clock)


@pytest.fixture
def memory(store, clock) -> Memory:
    return make(store, clock)


async def refusal(call) -> MemoryRefused:
    with pytest.raises(MemoryRefused) as caught:
        await call
    assert caught.value.reason in REFUSAL_REASONS
    return caught.value


# --- remember ---------------------------------------------------------------------------------


async def test_remember_writes_a_human_fact_to_the_callers_own_scope(memory, store):
    result = await memory.remember(ALICE, "  run make bootstrap before the tests  ")
    assert result.scope_key == ALICE.user_key and result.outcome == "inserted"
    [record] = await store.list(ALICE.user_key, 5)
    assert record.text == "run make bootstrap before the tests"
    assert record.source.value == "human" and record.source_thread_key == "cli:remember"
    again = await memory.remember(ALICE, "run make bootstrap before the tests")
    assert again.outcome == "strengthened"


async def test_remember_redacts_a_secret_before_it_is_stored(memory, store):
    result = await memory.remember(ALICE, SECRET)
    assert result.redacted
    [record] = await store.list(ALICE.user_key, 5)
    assert "sk-aaaa" not in record.text and "[REDACTED:" in record.text


async def test_remember_refuses_what_the_status_gate_refuses(memory, store):
    refused = await refusal(memory.remember(ALICE, STATUS))
    assert refused.reason == "gated" and refused.details["markers"]
    assert await store.list(ALICE.user_key, 5) == []


async def test_remember_refuses_empty_and_overlong_text_and_all(memory):
    assert (await refusal(memory.remember(ALICE, "  \n "))).reason == "empty_text"
    assert (await refusal(memory.remember(ALICE, "word " * 1000))).reason == "too_long"
    assert (await refusal(memory.remember(ALICE, "a fact", "all"))).reason == "one_scope"


async def test_a_shared_scope_takes_an_admin_and_the_admin_list_is_the_installations(
        memory, store):
    refused = await refusal(memory.remember(ALICE, "deploys freeze on fridays", "org"))
    assert refused.reason == "admin_only"
    result = await memory.remember(ADMIN, "deploys freeze on fridays", "org")
    assert result.scope_key == ORG
    # Admin is who the configuration names, not a flag a caller sets.
    assert memory.is_admin(ADMIN) and not memory.is_admin(ALICE)


async def test_supersedes_must_be_an_id_of_the_same_scope(memory, store):
    await store.write(ORG, [fact("deploys go through jenkins")])
    assert (await refusal(memory.remember(ALICE, "x y", supersedes="nope"))).reason == "bad_id"
    wrong = await refusal(memory.remember(ALICE, "deploys go through argo",
                                          supersedes=f"mem:{ORG}:1"))
    assert wrong.reason == "wrong_scope"
    result = await memory.remember(ADMIN, "deploys go through argo", "org",
                                   supersedes=f"mem:{ORG}:1")
    assert result.outcome == "replaced"
    assert [r.text for r in await store.list(ORG, 5)] == ["deploys go through argo"]


@pytest.mark.parametrize("scope", HOSTILE_SCOPES)
async def test_remember_cannot_cross_a_scope_line(memory, store, scope):
    for caller in (ALICE, ADMIN):
        refused = await refusal(memory.remember(caller, "a plain fact", scope))
        assert refused.reason in {"closed_scope", "unknown_scope"}
    assert await store.list(BOB.user_key, 5) == []
    assert await store.list("org:evil", 5) == []


# --- list, search, export: the read gate ------------------------------------------------------


@pytest.mark.parametrize("scope", HOSTILE_SCOPES)
async def test_reads_cannot_cross_a_scope_line(memory, store, scope):
    await store.write(BOB.user_key, [fact("bob's private note about deploys")])
    await store.write("org:evil", [fact("evil org note about deploys")])
    for caller in (ALICE, ADMIN):
        for call in (memory.list(caller, scope), memory.search(caller, "deploys", scope),
                     memory.stats(caller, scope)):
            assert (await refusal(call)).reason in {"closed_scope", "unknown_scope"}
        with pytest.raises(MemoryRefused):
            [record async for record in memory.export(caller, scope)]


async def test_list_all_reads_the_callers_scopes_newest_first(memory, store, clock):
    await store.write(ALICE.user_key, [fact("alice prefers tabs")])
    await store.write(BOB.user_key, [fact("bob prefers spaces")])
    await store.write(REPO, [fact("the api repo uses poetry")])
    clock.advance(DAY_MS)
    await store.write(ORG, [fact("deploys freeze on fridays"), fact("on-call rotates weekly")])
    result = await memory.list(ALICE)
    assert [s.scope_key for s in result.sections] == [ALICE.user_key, REPO, CHANNEL, ORG]
    assert all(isinstance(r, Record) for r in result.records)
    texts = [r.text for r in result.records]
    assert "bob prefers spaces" not in texts
    assert texts[-2:] == ["on-call rotates weekly", "deploys freeze on fridays"]
    assert result.ok
    # BOB's request has no repository: ``all`` is what the request has.
    assert REPO not in [s.scope_key for s in (await memory.list(BOB)).sections]
    assert (await refusal(memory.list(BOB, "repo"))).reason == "scope_unavailable"


async def test_a_scope_key_is_gated_like_its_word(memory, store):
    await store.write(REPO, [fact("the api repo uses poetry")])
    by_key = await memory.list(BOB, "repo:acme/api")
    assert [r.text for r in by_key.records] == ["the api repo uses poetry"]
    assert (await refusal(memory.forget(BOB, f"mem:{REPO}:1"))).reason == "admin_only"


HR = "channel:slack:CHR"
HR_MEMBER = Caller(user_key="user:slack:UH", channel_id="slack:CHR")


async def test_a_read_refused_says_the_scope_is_out_of_reach_not_that_it_is_unchangeable(
        memory, store):
    """A read of another person's or organisation's scope was refused with "nobody else
    can change it": true, and no answer to a person who asked to read."""
    for scope in (BOB.user_key, "org:evil"):
        for call in (memory.list(ALICE, scope), memory.search(ALICE, "deploys", scope)):
            refused = await refusal(call)
            assert refused.reason == "closed_scope" and "reach" in refused.message
            assert "change" not in refused.message


async def test_a_channel_scope_is_read_only_from_that_channel(memory, store):
    # What the write policy narrowed to #hr (a private origin) stays #hr's audience.
    await store.write(HR, [fact("the salary review for the api team is due in march")])
    await store.write(ORG, [fact("deploys freeze on fridays")])
    for caller in (ALICE, ADMIN, Caller(user_key="user:slack:UX")):  # admins included
        for call in (memory.list(caller, HR), memory.search(caller, "salary review", HR),
                     memory.stats(caller, HR)):
            refused = await refusal(call)
            assert refused.reason == "closed_scope" and "another channel" in refused.message
        with pytest.raises(MemoryRefused, match="another channel"):
            [record async for record in memory.export(caller, HR)]
        forgot = await refusal(memory.forget(caller, f"mem:{HR}:1"))
        assert forgot.reason == "closed_scope"
        assert (await refusal(memory.remember(caller, "a plain fact", HR))).reason \
            == "closed_scope"
        # ``all`` is what the caller's own request has: never another channel.
        assert HR not in [s.scope_key for s in (await memory.list(caller)).sections]
    member = await memory.list(HR_MEMBER, HR)
    assert [r.text for r in member.records] == [
        "the salary review for the api team is due in march"]
    assert [h.record.scope_key for h in (await memory.search(HR_MEMBER, "salary")).hits] \
        == [HR]
    assert [r.scope_key async for r in memory.export(HR_MEMBER, "channel")] == [HR]
    assert len(await store.list(HR, 5)) == 1


async def test_list_keeps_a_failed_scope_apart(memory, store):
    await store.write(ORG, [fact("deploys freeze on fridays")])
    real_list = store.list

    async def flaky(scope_key, *args, **kwargs):
        if scope_key == CHANNEL:
            raise OSError("disk gone")
        return await real_list(scope_key, *args, **kwargs)

    store.list = flaky
    result = await memory.list(ALICE)
    failed = {s.scope_key: s.error for s in result.sections if s.error}
    assert list(failed) == [CHANNEL] and "disk gone" in failed[CHANNEL]
    assert result.ok and [r.text for r in result.records] == ["deploys freeze on fridays"]


async def test_limits_outside_the_range_are_refused(memory):
    for limit in (0, 51, -1, True, "5"):
        assert (await refusal(memory.list(ALICE, limit=limit))).reason == "bad_limit"
        assert (await refusal(memory.search(ALICE, "x", limit=limit))).reason == "bad_limit"


async def test_search_ranks_across_scopes_and_counts_nothing_as_used(embedded_store, clock):
    store = embedded_store
    memory = make(store, clock)
    await store.write(ORG, [fact("deploys go through the bastion host"),
                            fact("lunch is at noon")])
    await store.write(ALICE.user_key, [fact("alice deploys with the bastion host and vpn")])
    clock.advance(DAY_MS)
    before = {r.id: (r.use_count, r.last_used_at)
              for key in (ORG, ALICE.user_key) for r in await store.list(key, 10)}

    result = await memory.search(ALICE, "bastion host deploys")
    assert {r.text for r in result.records} == {"deploys go through the bastion host",
                                               "alice deploys with the bastion host and vpn"}
    assert [hit.score for hit in result.hits] == sorted((h.score for h in result.hits),
                                                        reverse=True)
    if hasattr(store, "flush"):
        await store.flush()
    after = {r.id: (r.use_count, r.last_used_at)
             for key in (ORG, ALICE.user_key) for r in await store.list(key, 10)}
    assert after == before
    # What the same query through ``retrieve`` does, so the check above can fail.
    await store.retrieve(ORG, "bastion host deploys", 5)
    if hasattr(store, "flush"):
        await store.flush()
    assert [r.use_count for r in await store.list(ORG, 10) if "bastion" in r.text] == [1]


async def test_search_on_a_store_without_search_bumps_nothing_either(clock):
    class Plain(InMemoryStore):
        search = None  # a third-party store with only MemoryStore's methods

    store = Plain(clock=clock)
    memory = make(store, clock)
    await store.write(ORG, [fact("deploys go through the bastion host")])
    [hit] = (await memory.search(ALICE, "bastion", "org")).hits
    assert hit.match == 1.0
    [record] = await store.list(ORG, 5)
    assert record.use_count == 0 and record.last_used_at is None


async def test_search_names_a_scope_that_failed(memory, store):
    await store.write(ORG, [fact("deploys go through the bastion host")])

    async def broken(*args, **kwargs):
        raise OSError("disk gone")

    store.search = broken
    result = await memory.search(ALICE, "bastion")
    assert result.hits == () and ORG in result.failed and "disk gone" in result.failed[ORG]


async def test_export_yields_every_record_of_a_scope_every_status(memory, store):
    await store.write(ALICE.user_key, [fact("first note"), fact("second note")])
    await memory.forget(ALICE, f"mem:{ALICE.user_key}:1")
    records = [r async for r in memory.export(ALICE, "me")]
    assert [r.id for r in records] == [f"mem:{ALICE.user_key}:1", f"mem:{ALICE.user_key}:2"]
    assert [r.status for r in records] == [Status.FORGOTTEN, Status.ACTIVE]
    everything = [r async for r in memory.export(ALICE)]
    assert {r.scope_key for r in everything} == {ALICE.user_key}


async def test_export_needs_a_store_that_can(clock):
    from scopemem.stores.null import NullStore

    memory = make(NullStore(), clock)
    with pytest.raises(StoreUnsupported):
        [r async for r in memory.export(ALICE, "me")]


# --- forget and sweep ---------------------------------------------------------------------------


async def test_forget_own_and_the_gate_on_everyone_elses(memory, store):
    await store.write(ALICE.user_key, [fact("alice prefers tabs")])
    await store.write(BOB.user_key, [fact("bob prefers spaces")])
    await store.write(ORG, [fact("deploys freeze on fridays")])
    result = await memory.forget(ALICE, f"mem:{ALICE.user_key}:1")
    assert result.forgotten and await store.list(ALICE.user_key, 5) == []
    assert not (await memory.forget(ALICE, f"mem:{ALICE.user_key}:1")).forgotten
    other = await refusal(memory.forget(ADMIN, f"mem:{BOB.user_key}:1"))
    assert other.reason == "closed_scope" and other.details == {"id": f"mem:{BOB.user_key}:1"}
    assert (await refusal(memory.forget(ALICE, f"mem:{ORG}:1"))).reason == "admin_only"
    assert (await refusal(memory.forget(ALICE, "mem:org:evil:1"))).reason == "closed_scope"
    assert (await refusal(memory.forget(ALICE, "not-an-id"))).reason == "bad_id"
    assert len(await store.list(BOB.user_key, 5)) == 1 and len(await store.list(ORG, 5)) == 1


async def test_whitespace_around_an_id_is_no_part_of_it(memory, store):
    # A pasted id often ends in a newline; the refusal showed the id without it, so it read
    # "'mem:org:acme:1' is not a memory id".
    await store.write(ORG, [fact("deploys go through jenkins"), fact("tests run on push")])
    result = await memory.forget(ADMIN, f" mem:{ORG}:2\n")
    assert result.forgotten and result.record_id == f"mem:{ORG}:2"
    replaced = await memory.remember(ADMIN, "deploys go through argo", "org",
                                     supersedes=f"mem:{ORG}:1\t")
    assert replaced.outcome == "replaced" and replaced.supersedes == f"mem:{ORG}:1"
    assert [r.text for r in await store.list(ORG, 5)] == ["deploys go through argo"]


async def test_a_store_failure_is_operation_failed(memory, store):
    async def broken(*args, **kwargs):
        raise OSError("disk gone")

    store.forget = broken
    with pytest.raises(OperationFailed, match="forget of .* failed: disk gone") as caught:
        await memory.forget(ALICE, f"mem:{ALICE.user_key}:1")
    assert isinstance(caught.value, ScopememError)
    assert isinstance(caught.value.__cause__, OSError)


@pytest.mark.parametrize(("method", "answer", "call", "message"), [
    ("write", None, lambda memory: memory.remember(ALICE, "deploys freeze on fridays"),
     "write to user:slack:UA failed: the store answered write with None, not a WriteCounts"),
    ("forget", "yes", lambda memory: memory.forget(ALICE, "mem:user:slack:UA:1"),
     "forget of mem:user:slack:UA:1 failed: the store answered forget with 'yes', not a bool"),
    ("sweep", {"swept": 1}, lambda memory: memory.sweep(ADMIN, "org"),
     "sweep of org:acme failed: the store answered sweep with {'swept': 1}, not a "
     "SweepResult"),
])
async def test_a_store_answering_the_wrong_type_is_operation_failed(memory, store, method,
                                                                    answer, call, message):
    """A store plugin's wrong answer is the operation's failure naming it, never a
    traceback in the command that renders it nor a truthy answer read as "forgotten"."""
    async def odd(*args, **kwargs):
        return answer

    setattr(store, method, odd)
    with pytest.raises(OperationFailed, match=re.escape(message)):
        await call(memory)


async def test_sweep_is_for_admins_and_reports_per_scope(memory, store):
    # The store keeps what it is given: the gate is the host's, so this one got past it.
    await store.write(ORG, [fact(STATUS), fact("deploys freeze on fridays")])
    assert (await refusal(memory.sweep(ALICE, "org"))).reason == "admin_only"
    dry = await memory.sweep(ADMIN, "org", dry_run=True)
    assert dry.dry_run and dry.swept == 1 and dry.scopes[0].result.ids == (f"mem:{ORG}:1",)
    assert len(await store.list(ORG, 5)) == 2
    done = await memory.sweep(ADMIN, "all")
    assert [s.scope_key for s in done.scopes] == [ORG, CHANNEL] and done.swept == 1
    assert [r.text for r in await store.list(ORG, 5)] == ["deploys freeze on fridays"]


async def test_with_the_gate_off_a_sweep_is_refused_and_retires_nothing(store, clock):
    """A team that turned the gate off keeps the facts it would refuse: a sweep, which
    retires by the built-in gate, would retire them (and scrub their text past the
    retention)."""
    memory = make(store, clock, gate=False)
    assert (await memory.remember(ADMIN, STATUS, scope="org")).counts.inserted == 1
    for dry_run in (True, False):
        assert (await refusal(memory.sweep(ADMIN, "all", dry_run=dry_run))).reason == "gate_off"
    assert [r.text for r in await store.list(ORG, 5)] == [STATUS]
    assert (await refusal(memory.sweep(ALICE, "org"))).reason == "admin_only"  # first


# --- memory off, the caller, stats --------------------------------------------------------------


async def test_memory_off_refuses_every_operation_and_touches_no_store(clock):
    class Untouchable(InMemoryStore):
        def __getattribute__(self, name):
            if name in {"list", "write", "forget", "sweep", "search", "retrieve"}:
                raise AssertionError(f"store.{name} touched with memory off")
            return super().__getattribute__(name)

    memory = Memory(MemoryConfig(), Untouchable(clock=clock), clock=clock)
    calls = [memory.remember(ALICE, "a fact"), memory.list(ALICE), memory.forget(ALICE, "x"),
             memory.sweep(ADMIN, "org"), memory.search(ALICE, "x"), memory.stats(ALICE)]
    for call in calls:
        assert (await refusal(call)).reason == "memory_off"


@pytest.mark.parametrize("user_key",
                         ["slack:UA", "org:acme", "usr:slack:UA", "user:a\nb", "", "  ",
                          "user:", "user:slack:", "user:slack:U\ud800"])
async def test_the_caller_must_be_a_user_scope_key(memory, user_key):
    caller = Caller(user_key=user_key)
    for call in (memory.list(caller), memory.remember(caller, "a fact")):
        assert (await refusal(call)).reason == "bad_caller"


async def test_a_caller_whose_id_is_a_user_scope_key_is_refused_naming_the_key_to_give(
        memory, store):
    """As ``Request(user_id="user:slack:U1")`` is: ``user:user:slack:U1`` is a scope the
    person's own reads under ``user:slack:U1`` never see."""
    caller = Caller(user_key="user:user:slack:U1")
    for call in (memory.list(caller), memory.remember(caller, "a fact")):
        refused = await refusal(call)
        assert refused.reason == "bad_caller"
        assert "'user:slack:U1' is the user scope's key" in refused.message
        assert "user_key='user:slack:U1'" in refused.message
    assert await store.list("user:user:slack:U1", 5) == []


class PlainStore:
    """A third-party store that keeps no counters: the MemoryStore methods only."""

    def __init__(self, inner: InMemoryStore) -> None:
        self.retrieve, self.write, self.list = inner.retrieve, inner.write, inner.list
        self.forget, self.sweep, self.close = inner.forget, inner.sweep, inner.close


async def test_a_store_with_only_the_memory_store_methods_is_searched_through_retrieve(clock):
    inner = InMemoryStore(clock=clock)
    await inner.write("org:acme", [fact("deploys need the vpn"), fact("lint with ruff")])
    hits = await search_hits(PlainStore(inner), "org:acme", "vpn deploys", 5, bump=False)
    assert [(hit.record.text, hit.match) for hit in hits] == [("deploys need the vpn", 1.0)]
    # Its retrieve counts what it returns, whatever ``bump`` asked.
    [record] = await inner.list("org:acme", 5, query="vpn")
    assert record.use_count == 1


async def test_stats_reads_a_counting_store_for_the_gated_keys(clock):
    plain = make(PlainStore(InMemoryStore(clock=clock)), clock)
    with pytest.raises(StoreUnsupported, match="keeps no counters"):
        await plain.stats(ALICE)

    asked = []

    class Counting(InMemoryStore):
        async def add_counts(self, rows):
            pass

        async def read_counts(self, scope_keys=None, *, prefix=None, since_day=0):
            asked.append((list(scope_keys), since_day))
            return [CountRow(scope_key=key, day=since_day, name="inserted", value=1)
                    for key in scope_keys]

    memory = make(Counting(clock=clock), clock)
    stats = await memory.stats(ALICE, "org", since_day=5)
    assert stats.counting and stats.by("scope") == {ORG: {"inserted": 1}}
    assert asked == [([ORG], 5)]


def test_every_refusal_reason_is_raised_and_documented():
    source = (Path(__file__).parents[2] / "scopemem" / "api" / "operations.py").read_text()
    raised = set(re.findall(r'MemoryRefused\(\s*"(\w+)"', source))
    assert raised == set(REFUSAL_REASONS)
    docs = (Path(__file__).parents[2] / "docs" / "memory.md").read_text()
    assert [token for token in REFUSAL_REASONS if f"`{token}`" not in docs] == []


def test_an_unknown_reason_token_is_a_bug_not_a_refusal():
    with pytest.raises(ValueError):
        MemoryRefused("no_such_reason", "x")


def _failing_resolver():
    raise RuntimeError("git remote failed")


async def _junk_resolver():
    return {"owner": "acme", "name": "api"}


@pytest.mark.parametrize(("resolver", "message"), [
    (_failing_resolver, "the repository could not be resolved (RuntimeError); name one with "
                        "--repo owner/name"),
    (_junk_resolver, "the repository resolver answered a dict, not owner/name"),
])
async def test_a_repo_resolver_that_fails_or_answers_junk_is_a_refusal_naming_it(
        memory, store, resolver, message):
    await store.write(ORG, [fact("deploys go through the bastion")])
    caller = Caller(user_key="user:slack:UADMIN", channel_id="slack:C1", repo=resolver)
    for call in (memory.list(caller, "repo"), memory.remember(caller, "a repo rule", "repo")):
        refused = await refusal(call)
        assert (refused.reason, refused.message) == ("scope_unavailable", message)
    # ``all`` reads the scopes the caller has, without the repository's
    listing = await memory.list(caller, "all")
    assert [section.scope_key for section in listing.sections] == [
        "user:slack:UADMIN", "channel:slack:C1", ORG]


@pytest.mark.parametrize(("given", "hint"), [
    ("https://github.com/acme/api", ": acme/api"), ("acme", " (e.g. acme/api)")])
async def test_a_caller_repo_that_is_not_owner_name_is_refused_naming_it(
        memory, store, given, hint):
    """``Caller(repo=<remote URL>)`` remembered into ``repo:https://github.com/acme/api``,
    a scope no run reads."""
    caller = Caller(user_key="user:slack:UADMIN", channel_id="slack:C1", repo=given)
    for call in (memory.list(caller, "repo"), memory.remember(caller, "a repo rule", "repo")):
        refused = await refusal(call)
        assert (refused.reason, refused.message) == (
            "scope_unavailable", f"the repository is not owner/name as a clone's remote "
                                 f"names it; name one with --repo owner/name{hint}")
    assert await store.list(f"repo:{given}", 10) == []


class _Leaky(InMemoryStore):
    """A store plugin with a bug: every read of a scope also answers Bob's records."""

    async def search(self, scope_key, query, limit, *, bump=True):
        own = await super().search(scope_key, query, limit, bump=bump)
        return own + await super().search(BOB.user_key, query, limit, bump=False)

    async def list(self, scope_key, limit, query=None, kind=None):
        return (await super().list(scope_key, limit, query, kind)
                + await super().list(BOB.user_key, limit, query, kind))


async def test_a_store_answering_another_scopes_records_costs_that_scope_not_the_line(clock):
    store = _Leaky(clock=clock)
    memory = make(store, clock)
    await store.write(BOB.user_key, [fact("bob's salary review is on the deploy calendar")])
    await store.write(ORG, [fact("deploys freeze on fridays")])
    await store.write(f"repo:{ALICE.repo}", [fact("the deploy script lives in ops/")])
    everywhere = ("bob", "salary")
    block = await memory.context_block(Request(text="deploy calendar", user_id="slack:UA",
                                               channel_id="slack:C1", repo=ALICE.repo))
    listing = await memory.list(ALICE)
    found = await memory.search(ALICE, "deploy calendar")
    for shown in (block, *(r.text for r in listing.records), *(r.text for r in found.records)):
        assert not any(word in shown for word in everywhere)
    assert set(found.failed) >= {ORG}
    assert {s.scope_key for s in listing.sections if s.error} >= {ORG}
    assert "another scope" in dict((s.scope_key, s.error) for s in listing.sections)[ORG]


# --- a DM's channel scope is its person's ------------------------------------------------------


async def test_a_person_forgets_and_sweeps_their_own_dms_channel_scope(store, clock):
    """Reflection writes a DM's channel facts to its channel scope (``channel:slack:D1``),
    but only admins could change a channel scope: the one person in the conversation could
    read those records and not forget them. A channel the caller's request stamps ``dm``
    is theirs; the same channel unstamped, or seen from elsewhere, is as before."""
    dm = "channel:slack:D1"
    await store.write(dm, [fact("this user likes short answers"), fact(STATUS),
                           fact("this user deploys from the release branch")])
    memory = make(store, clock)
    alice = Caller(user_key="user:slack:UA", channel_id="slack:D1", channel_visibility="dm")
    assert (await memory.forget(alice, f"mem:{dm}:1")).forgotten
    swept = await memory.sweep(alice, "channel")
    assert [(s.scope_key, s.result.swept) for s in swept.scopes] == [(dm, 1)]
    assert (await memory.remember(alice, "this user reviews on mondays", "channel")).scope_key \
        == dm
    unstamped = Caller(user_key="user:slack:UA", channel_id="slack:D1")
    assert (await refusal(memory.forget(unstamped, f"mem:{dm}:3"))).reason == "admin_only"
    elsewhere = Caller(user_key="user:slack:UB", channel_id="slack:D2", channel_visibility="dm")
    assert (await refusal(memory.forget(elsewhere, f"mem:{dm}:3"))).reason == "closed_scope"
    assert (await refusal(memory.sweep(alice, "org"))).reason == "admin_only"
    assert [r.text for r in await store.list(dm, 10)] == [
        "this user reviews on mondays", "this user deploys from the release branch"]
