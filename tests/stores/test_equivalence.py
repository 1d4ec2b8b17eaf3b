"""The SQLite store answers exactly like the in-process store, call by call.

A hypothesis state machine drives random sequences of write (with dedup collisions, supersede
and restate pointers to live, dead, foreign and bogus ids), retrieve, list (kind and query
filters), forget and sweep (dry and real) against both stores on one fake clock, and compares
every answer. After every step it also compares the stored rows themselves (statuses, use
counts, last use, confidence of every row, active or not) and checks that the SQLite token
index holds exactly the active rows.

A second SQLite store on the same directory (another process, in effect) writes and forgets
now and then: the first store must never answer from rows it changed (the in-memory views).
The machine runs twice: with the SQLite store's views, and with every retrieval through SQL.

Scopes stay under 50 active records (the stores' cap is 40), so the bm25 candidate cap never
has to choose and the two stores must agree on every ranking.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile

import apsw
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from scopemem.core.records import Candidate, Kind, Source
from scopemem.stores import sqlite as sqlite_module
from scopemem.stores import sqlite_schema as schema
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite import SqliteStore, _record
from tests.conftest import DAY_MS, FakeClock

SCOPES = ("org:acme", "user:slack:U1")
CAP = 40
WORDS = ("deploy", "cache", "vpn", "docker", "staging", "node", "a", "ci")
# Texts the write gate rejects, so a sweep has something to retire.
MARKED = ("PR 12 was pushed at sha 3f9a2c1", "deploy cache: all 340 tests passing",
          "the deploy now supports docker", "docker was added to staging")

words = st.lists(st.sampled_from(WORDS), min_size=1, max_size=2)


@st.composite
def texts(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(MARKED))
    chosen = draw(words)
    # Case and spacing variants of one text collide on the dedup key.
    if draw(st.booleans()):
        chosen = [word.upper() if draw(st.booleans()) else word for word in chosen]
    return draw(st.sampled_from((" ", "  ", "\t"))).join(chosen) + draw(
        st.sampled_from(("", " ", "!")))


@st.composite
def pointers(draw: st.DrawFn) -> str | None:
    choice = draw(st.integers(0, 19))
    if choice <= 13:
        return None
    if choice == 14:
        return draw(st.sampled_from(("", "mem:org:acme:x", "garbage", "mem:org:acme:0001")))
    return f"mem:{draw(st.sampled_from(SCOPES))}:{draw(st.integers(1, 12))}"


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    keywords = draw(st.one_of(st.none(), st.lists(st.sampled_from(WORDS + ("Big-Deal",)),
                                                  max_size=2).map(tuple)))
    return Candidate(
        kind=draw(st.sampled_from((Kind.FACT, Kind.FACT, Kind.SUMMARY))),
        text=draw(texts()),
        source_thread_key="slack:C1/1",
        source_run_id=draw(st.sampled_from((None, "r-1"))),
        keywords=keywords,
        confidence=draw(st.sampled_from((None, 0.6, 0.75, 0.9))),
        supersedes=draw(pointers()),
        restates=draw(pointers()),
        # A person's facts outrank the extractor's supersedes: both stores must agree.
        source=draw(st.sampled_from((Source.REFLECTION, Source.REFLECTION, Source.HUMAN))),
    )


queries = st.one_of(
    st.lists(st.sampled_from(WORDS + ("zzz", "Deploy!", "or", "NEAR(", '"', "big")),
             min_size=1, max_size=4).map(" ".join),
    st.sampled_from(("", "?!", "deploy OR cache*", "sha 3f9a2c1 pushed")),
)


class StoresAgree(RuleBasedStateMachine):
    CACHE_ROWS = 50_000

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.directory = tempfile.mkdtemp(prefix="scopemem-eq-")
        self.clock = FakeClock()
        self.memory = InMemoryStore(cap=CAP, clock=self.clock)
        self.sqlite = SqliteStore(self.directory, cap=CAP, clock=self.clock,
                                  synchronous="off", cache_rows=self.CACHE_ROWS)
        self.elsewhere = SqliteStore(self.directory, cap=CAP, clock=self.clock,
                                     synchronous="off")
        self.raw: dict[str, apsw.Connection] = {}
        # Views from a scope's first retrieval on, so most retrievals here use them.
        self.view_after, sqlite_module._VIEW_AFTER_RETRIEVALS = (
            sqlite_module._VIEW_AFTER_RETRIEVALS, 1)

    def both(self, call):  # type: ignore[no-untyped-def]
        expected = self.loop.run_until_complete(call(self.memory))
        got = self.loop.run_until_complete(call(self.sqlite))
        assert got == expected, (got, expected)
        return got

    @initialize(org=st.lists(candidates(), min_size=3, max_size=12),
                user=st.lists(candidates(), max_size=6))
    def seed(self, org: list[Candidate], user: list[Candidate]) -> None:
        self.both(lambda store: store.write(SCOPES[0], org))
        self.both(lambda store: store.write(SCOPES[1], user))

    @rule(scope=st.sampled_from(SCOPES), batch=st.lists(candidates(), min_size=1, max_size=6),
          cap=st.sampled_from((None,) * 5 + (-2, -1, 0, 1, 3, 8)))
    def write(self, scope: str, batch: list[Candidate], cap: int | None) -> None:
        if cap is not None and cap <= 0:
            # Just under what the scope holds now, so a few rows go and the least recently
            # used among many (used and never used) have to be told apart.
            active = sum(record.is_active for record in self.memory._scopes.get(scope, []))
            cap = max(1, active + cap)
        self.both(lambda store: store.write(scope, batch, cap=cap))

    @rule(scope=st.sampled_from(SCOPES), batch=st.lists(candidates(), min_size=1, max_size=3))
    def write_elsewhere(self, scope: str, batch: list[Candidate]) -> None:
        expected = self.loop.run_until_complete(self.memory.write(scope, batch))
        assert self.loop.run_until_complete(self.elsewhere.write(scope, batch)) == expected
        # Read right away what was just written elsewhere.
        self.both(lambda store: store.retrieve(scope, batch[-1].text, 8))

    @rule(scope=st.sampled_from(SCOPES), n=st.integers(1, 12))
    def forget_elsewhere(self, scope: str, n: int) -> None:
        record_id = f"mem:{scope}:{n}"
        texts = [r.text for r in self.memory._scopes.get(scope, []) if r.id == record_id]
        expected = self.loop.run_until_complete(self.memory.forget(scope, record_id))
        assert self.loop.run_until_complete(self.elsewhere.forget(scope, record_id)) == expected
        for text in texts:  # a read that would find the forgotten record
            self.both(lambda store, text=text: store.retrieve(scope, text, 8))

    @rule(scope=st.sampled_from(SCOPES), query=queries, limit=st.sampled_from((0, 1, 2, 3, 5, 8)))
    def retrieve(self, scope: str, query: str, limit: int) -> None:
        self.both(lambda store: store.retrieve(scope, query, limit))

    @rule(scope=st.sampled_from(SCOPES), queries=st.lists(queries, min_size=2, max_size=4),
          limit=st.sampled_from((1, 3, 8)))
    def retrieve_again(self, scope: str, queries: list[str], limit: int) -> None:
        # Reads in a row: the SQLite store answers from its view from the second on.
        for query in queries:
            self.both(lambda store, query=query: store.retrieve(scope, query, limit))

    @rule(scope=st.sampled_from(SCOPES), limit=st.sampled_from((0, 1, 3, 10, 45)),
          query=st.one_of(st.none(), queries),
          kind=st.sampled_from((None, Kind.FACT, Kind.SUMMARY)))
    def list(self, scope: str, limit: int, query: str | None, kind: Kind | None) -> None:
        self.both(lambda store: store.list(scope, limit, query=query, kind=kind))

    @rule(scope=st.sampled_from(SCOPES), record_id=st.one_of(
        st.integers(1, 20).map(lambda n: f"mem:org:acme:{n}"), pointers()))
    def forget(self, scope: str, record_id: str | None) -> None:
        self.both(lambda store: store.forget(scope, record_id or f"mem:{scope}:1"))

    @rule(scope=st.sampled_from(SCOPES), dry_run=st.booleans())
    def sweep(self, scope: str, dry_run: bool) -> None:
        self.both(lambda store: store.sweep(scope, dry_run=dry_run))

    @rule(ms=st.sampled_from((0, 1, 1000, 3_600_000, DAY_MS, 30 * DAY_MS)))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    def connection(self, scope: str) -> apsw.Connection | None:
        if scope not in self.raw:
            path = self.sqlite.path_for(scope)
            try:
                self.raw[scope] = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
            except apsw.CantOpenError:
                return None
        return self.raw[scope]

    @invariant()
    def same_rows_and_a_clean_index(self) -> None:
        # Use counts are saved a little after their retrieval: save them now.
        self.loop.run_until_complete(self.sqlite.flush())
        for scope in SCOPES:
            expected = self.memory._scopes.get(scope, [])
            conn = self.connection(scope)
            if conn is None:
                assert expected == []
                continue
            rows = conn.execute(
                f"SELECT {schema.RECORD_COLUMNS} FROM records ORDER BY seq").fetchall()
            assert [_record(row) for row in rows] == expected
            active = {seq for (seq,) in conn.execute(
                "SELECT seq FROM records WHERE status = 'active'")}
            indexed = {rowid for (rowid,) in conn.execute("SELECT rowid FROM records_fts")}
            assert indexed == active

    def teardown(self) -> None:
        sqlite_module._VIEW_AFTER_RETRIEVALS = self.view_after
        for conn in self.raw.values():
            conn.close()
        self.loop.run_until_complete(self.sqlite.close())
        self.loop.run_until_complete(self.elsewhere.close())
        self.loop.run_until_complete(self.memory.close())
        self.loop.close()
        shutil.rmtree(self.directory, ignore_errors=True)


StoresAgree.TestCase.settings = settings(
    max_examples=40, stateful_step_count=30, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStoresAgree = StoresAgree.TestCase


class StoresAgreeThroughSql(StoresAgree):
    CACHE_ROWS = 0


StoresAgreeThroughSql.TestCase.settings = StoresAgree.TestCase.settings
TestStoresAgreeThroughSql = StoresAgreeThroughSql.TestCase
