"""The SQLite store answers exactly like the in-process store, call by call.

A hypothesis state machine drives random sequences of write (with dedup collisions, supersede
and restate pointers to live, dead, foreign and bogus ids), retrieve, list (kind and query
filters), forget and sweep (dry and real) against both stores on one fake clock, and compares
every answer. After every step it also compares the stored rows themselves (statuses, use
counts, last use, confidence of every row, active or not) and checks that the SQLite token
index holds exactly the active rows' terms.

A second SQLite store on the same directory (another process, in effect) writes and forgets
now and then: the first store must never answer from copies of rows it changed. The machine
runs with the store's copies as configured by default; with none (small scopes read whole,
``reads.WHOLE_ROWS``); with none and every retrieval through the token index; and with
every scope copied.

In those runs scopes stay under 50 active records (the stores' cap is 40), so the candidate
cap never has to choose. A fifth run adds crowds (batches of distinct texts of the same few
words) under a cap of 150, so most retrievals match more records than the candidate cap
takes; a deterministic test below does the same at 300 records with every way a record
leaves active status, for the PostgreSQL store too. Every run also checks that the
in-process store's index is what its rows give.
"""

from __future__ import annotations

import asyncio
import math
import random
import shutil
import tempfile
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from scopemem.core import engine
from scopemem.core.records import Candidate, Kind, Source
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.sqlite_shared import SharedSqliteStore, reads
from scopemem.stores.sqlite_shared import schema as shared_schema
from scopemem.stores.sqlite_shared.sql import record as _record
from tests.conftest import DAY_MS, FakeClock
from tests.stores import pg
from tests.stores.shared_postings import scope_postings

SCOPES = ("org:acme", "user:slack:U1")
CAP = 40
WORDS = ("deploy", "cache", "vpn", "docker", "staging", "node", "a", "ci")
# Texts the write gate rejects, so a sweep has something to retire.
MARKED = ("PR 12 was pushed at sha 3f9a2c1", "deploy cache: all 340 tests passing",
          "the deploy now supports docker", "docker was added to staging")

# Each strategy below draws one integer per value (or three per candidate) and spells the
# value out from its digits: hypothesis' own draws cost far more than the store calls they
# feed, and the machines draw thousands of these. Every value the spelled-out choices allow
# comes up (the integers are drawn uniformly over ranges this small); a digit of 0 is the
# simplest choice, where hypothesis shrinks to.


def digits(value: int, radices: tuple[int, ...]) -> list[int]:
    """``value`` in the mixed radix ``radices``, lowest digit first."""
    out = []
    for radix in radices:
        value, digit = divmod(value, radix)
        out.append(digit)
    return out


def span(radices: tuple[int, ...]) -> int:
    return math.prod(radices)


SEPARATORS = (" ", "  ", "\t")
ENDINGS = ("", " ", "!")
TEXT = (10, len(MARKED), 2, len(WORDS), len(WORDS), 2, 2, 2, len(SEPARATORS), len(ENDINGS))


def text_of(value: int) -> str:
    """One text in ten is a marked one; otherwise one or two of the words, in case and
    spacing variants that collide on the dedup key."""
    marked, which, two, first, second, upper, up_first, up_second, separator, ending = (
        digits(value, TEXT))
    if marked == 0:
        return MARKED[which]
    chosen = [WORDS[first], WORDS[second]][:1 + two]
    if upper:
        chosen = [word.upper() if up else word
                  for word, up in zip(chosen, (up_first, up_second), strict=False)]
    return SEPARATORS[separator].join(chosen) + ENDINGS[ending]


texts = st.integers(0, span(TEXT) - 1).map(text_of)

BOGUS = ("", "mem:org:acme:x", "garbage", "mem:org:acme:0001")
POINTER = (20, len(BOGUS), len(SCOPES), 12)


def pointer_of(value: int) -> str | None:
    """Mostly none; else a bogus id, or the id of a record that may be live, dead or of the
    other scope."""
    choice, bogus, scope, n = digits(value, POINTER)
    if choice <= 13:
        return None
    if choice == 14:
        return BOGUS[bogus]
    return f"mem:{SCOPES[scope]}:{n + 1}"


pointers = st.integers(0, span(POINTER) - 1).map(pointer_of)

KEYWORDS = WORDS + ("Big-Deal",)
KINDS = (Kind.FACT, Kind.FACT, Kind.SUMMARY)
RUN_IDS = (None, "r-1")
CONFIDENCES = (None, 0.6, 0.75, 0.9)
# A person's facts outrank the extractor's supersedes: both stores must agree.
SOURCES = (Source.REFLECTION, Source.REFLECTION, Source.HUMAN)
REST = (2, 3, len(KEYWORDS), len(KEYWORDS), len(KINDS), len(RUN_IDS), len(CONFIDENCES),
        len(SOURCES))


@st.composite
def candidates(draw: st.DrawFn) -> Candidate:
    text = draw(texts)
    supersedes, restates = divmod(draw(st.integers(0, span(POINTER) ** 2 - 1)), span(POINTER))
    given_keywords, count, first, second, kind, run_id, confidence, source = digits(
        draw(st.integers(0, span(REST) - 1)), REST)
    keywords = tuple((KEYWORDS[first], KEYWORDS[second])[:count]) if given_keywords else None
    return Candidate(
        kind=KINDS[kind], text=text, source_thread_key="slack:C1/1",
        source_run_id=RUN_IDS[run_id], keywords=keywords, confidence=CONFIDENCES[confidence],
        supersedes=pointer_of(supersedes), restates=pointer_of(restates),
        source=SOURCES[source])


QUERY_WORDS = WORDS + ("zzz", "Deploy!", "or", "NEAR(", '"', "big")
ODD_QUERIES = ("", "?!", "deploy OR cache*", "sha 3f9a2c1 pushed")
QUERY = (2, 4, *(len(QUERY_WORDS),) * 4, len(ODD_QUERIES))


def query_of(value: int) -> str:
    """One to four of the query words, or one of the odd queries."""
    listed, count, *chosen, odd = digits(value, QUERY)
    if listed:
        return ODD_QUERIES[odd]
    return " ".join(QUERY_WORDS[n] for n in chosen[:count + 1])


queries = st.integers(0, span(QUERY) - 1).map(query_of)


class AgreeingRules(RuleBasedStateMachine):
    """The calls every equivalence machine makes: each to the in-process store
    (``self.memory``) and to the store under test (``self.other``), answers compared; the
    ``elsewhere`` rules write and forget through ``self.elsewhere``, a second store on the
    same storage (another process, in effect). A subclass builds the three stores (on
    ``self.loop`` and ``self.clock``) and checks its own storage in an invariant."""

    loop: asyncio.AbstractEventLoop
    clock: FakeClock
    memory: InMemoryStore
    other: Any
    elsewhere: Any

    def both(self, call):  # type: ignore[no-untyped-def]
        expected = self.loop.run_until_complete(call(self.memory))
        got = self.loop.run_until_complete(call(self.other))
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
        st.integers(1, 20).map(lambda n: f"mem:org:acme:{n}"), pointers))
    def forget(self, scope: str, record_id: str | None) -> None:
        self.both(lambda store: store.forget(scope, record_id or f"mem:{scope}:1"))

    @rule(scope=st.sampled_from(SCOPES), dry_run=st.booleans())
    def sweep(self, scope: str, dry_run: bool) -> None:
        self.both(lambda store: store.sweep(scope, dry_run=dry_run))

    @rule(ms=st.sampled_from((0, 1, 1000, 3_600_000, DAY_MS, 30 * DAY_MS)))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)


#: How many random programs each machine runs, and how long they are.
SETTINGS = settings(max_examples=40, stateful_step_count=30, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


class Crowds(AgreeingRules):
    """Crowds: batches of distinct texts, each of a few of the same eight words, so a scope
    soon holds more matching records than the candidate cap takes (the stores' cap is 150)
    and the ranking has to choose among them."""

    STORE_CAP = 150

    def __init__(self) -> None:
        super().__init__()
        self.serial = 0

    def crowd(self, seed: int, size: int) -> list[Candidate]:
        rng = random.Random(seed)
        crowd = []
        for _ in range(size):
            self.serial += 1
            words = [*rng.sample(WORDS, rng.randint(1, 4)), serial(self.serial)]
            rng.shuffle(words)
            crowd.append(Candidate(
                kind=rng.choice((Kind.FACT, Kind.FACT, Kind.SUMMARY)), text=" ".join(words),
                source_thread_key=f"slack:C1/{rng.randint(0, 2)}",
                keywords=tuple(rng.sample(WORDS, rng.randint(0, 2))) or None,
                confidence=rng.choice((None, 0.6, 0.9))))
        return crowd

    @initialize(seed=st.integers(0, 2**16))
    def seed_crowd(self, seed: int) -> None:
        for batch in (self.crowd(seed, 50), self.crowd(seed + 1, 50)):
            self.both(lambda store, batch=batch: store.write(SCOPES[0], batch))

    @rule(scope=st.sampled_from(SCOPES), seed=st.integers(0, 2**16), size=st.integers(10, 50))
    def write_crowd(self, scope: str, seed: int, size: int) -> None:
        batch = self.crowd(seed, size)
        self.both(lambda store: store.write(scope, batch))


class SharedStoresAgree(AgreeingRules):
    """The same calls against the SQLite store over shared files (``sqlite_shared``), with
    a second such store on the same directory; after every step the shard's rows must be the
    in-process store's and its postings exactly the active rows' terms."""

    MIN_POSTINGS = 256  # the store's default: these small scopes are rarely copied
    COPIES: dict[str, int] = {}  # the store's default budget for copies
    STORE_CAP = CAP
    WHOLE_ROWS = reads.WHOLE_ROWS  # small scopes are read whole, in one statement
    ROWS_PER_STEM = reads.ROWS_PER_STEM  # and those of at most this many records a stem

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.directory = tempfile.mkdtemp(prefix="scopemem-eq-shared-")
        self.clock = FakeClock()
        self.memory = InMemoryStore(cap=self.STORE_CAP, clock=self.clock)
        self.other = SharedSqliteStore(self.directory, cap=self.STORE_CAP, clock=self.clock,
                                       synchronous="off", cache_min_postings=self.MIN_POSTINGS,
                                       **self.COPIES)
        self.other._copies.interval = 0  # copied again as soon as it is read twice
        self.elsewhere = SharedSqliteStore(self.directory, cap=self.STORE_CAP,
                                           clock=self.clock, synchronous="off")
        self.whole_rows, reads.WHOLE_ROWS = reads.WHOLE_ROWS, self.WHOLE_ROWS
        self.rows_per_stem, reads.ROWS_PER_STEM = reads.ROWS_PER_STEM, self.ROWS_PER_STEM
        self.readers: dict[str, apsw.Connection] = {}

    @invariant()
    def same_rows_and_exact_postings(self) -> None:
        self.loop.run_until_complete(self.other.flush())
        for scope in SCOPES:
            expected = self.memory._scopes.get(scope, [])
            conn = self.reader(self.other._shards.path(self.other._shards.of(scope)))
            if conn is None:
                assert expected == []
                continue
            if True:
                rows = conn.execute(
                    f"SELECT {shared_schema.RECORD_COLUMNS}, tokens FROM records"
                    " WHERE scope_key = ? ORDER BY seq", (scope,)).fetchall()
                assert [_record(row) for row in rows] == expected
                held = {(term, row[0]) for row in rows if row[14] == "active"
                        for term in row[16].split()}
                assert scope_postings(conn, scope) == held
                counts = conn.execute("SELECT active FROM scopes WHERE scope_key = ?",
                                      (scope,)).fetchall()
                assert counts[0][0] == sum(r.is_active for r in expected)
            if scope in self.memory._scopes:  # its index is what its rows give
                kept, built = index_rebuilt(self.memory, scope)
                assert kept == built

    def reader(self, path: str) -> apsw.Connection | None:
        if path not in self.readers:
            try:
                self.readers[path] = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READONLY)
            except apsw.CantOpenError:
                return None
        return self.readers[path]

    def teardown(self) -> None:
        for conn in self.readers.values():
            conn.close()
        reads.WHOLE_ROWS, reads.ROWS_PER_STEM = self.whole_rows, self.rows_per_stem
        self.loop.run_until_complete(self.other.close())
        self.loop.run_until_complete(self.elsewhere.close())
        self.loop.run_until_complete(self.memory.close())
        self.loop.close()
        shutil.rmtree(self.directory, ignore_errors=True)


SharedStoresAgree.TestCase.settings = SETTINGS
TestSharedStoresAgree = SharedStoresAgree.TestCase


class SharedStoresAgreeWithoutCopies(SharedStoresAgree):
    """The same, with no copies at all: every retrieval is read through SQL, a small
    scope's ranked from all its rows read in one statement (``reads._small_scope``)."""

    COPIES = {"postings_cache": 0}


SharedStoresAgreeWithoutCopies.TestCase.settings = SETTINGS
TestSharedStoresAgreeWithoutCopies = SharedStoresAgreeWithoutCopies.TestCase


class SharedStoresAgreeThroughTheIndex(SharedStoresAgreeWithoutCopies):
    """Every retrieval through SQL and through the token index, however small the scope
    (the run above reads these small scopes whole, in one statement)."""

    WHOLE_ROWS = ROWS_PER_STEM = 0


SharedStoresAgreeThroughTheIndex.TestCase.settings = SETTINGS
TestSharedStoresAgreeThroughTheIndex = SharedStoresAgreeThroughTheIndex.TestCase


class SharedStoresAgreeFromCopies(SharedStoresAgree):
    """The same, with every scope copied into memory once it is read twice at one change
    counter, however small: most retrievals are answered from a copy, checked against the
    counter that the other store's writes and forgets move on."""

    MIN_POSTINGS = 0


SharedStoresAgreeFromCopies.TestCase.settings = SETTINGS
TestSharedStoresAgreeFromCopies = SharedStoresAgreeFromCopies.TestCase


class SharedStoresAgreeOverTheCandidateCap(Crowds, SharedStoresAgree):
    """The same calls with crowds (``Crowds``), under a cap of 150."""


SharedStoresAgreeOverTheCandidateCap.TestCase.settings = settings(
    SETTINGS, max_examples=20)
TestSharedStoresAgreeOverTheCandidateCap = SharedStoresAgreeOverTheCandidateCap.TestCase


# --- scopes where more records match than the candidate cap ---------------------------------

COMMON = "deploy"
VARIED = ("cache", "vpn", "docker", "staging", "node", "runner", "gateway", "ledger", "quota",
          "mirror", "the", "of")
THREADS = ("slack:C1/1", "slack:C1/2", "slack:C2/7")
CROWD = 300
LIMITS = (1, 3, 8, 12, 20)  # candidate caps 50, 50, 50, 60 and 100


def serial(n: int) -> str:
    """A word of its own for record ``n`` (letters only, so every analyzer keeps it)."""
    return "tk" + chr(97 + n % 26) + chr(97 + n // 26 % 26)


def crowd_candidate(rng: random.Random, n: int, thread: str) -> Candidate:
    words = [COMMON, *rng.sample(VARIED, rng.randint(0, 4)), serial(n)]
    rng.shuffle(words)
    if n % 37 == 0:  # something for a sweep to retire
        words += ["and", "all", str(300 + n), "tests", "passing"]
    keywords = tuple(rng.sample(VARIED, rng.randint(0, 2))) or None
    return Candidate(kind=Kind.FACT if n % 9 else Kind.SUMMARY, text=" ".join(words),
                     source_thread_key=thread, keywords=keywords,
                     confidence=rng.choice((None, 0.6, 0.9)))


def crowd_queries() -> list[str]:
    return [COMMON, f"{COMMON} cache", "Deploying the cache of the VPN docker node",
            "staging runner gateway", "ledger", f"{serial(5)} {COMMON}",
            # More terms than the prefilter takes: the gate reads only the longest 24.
            " ".join([COMMON, *VARIED, *(serial(n) for n in range(0, 60, 3))]),
            # A pasted log: routine words on every line, each line's numbers (which the
            # gate takes after the words), the line that matters once.
            "\n".join([f"{COMMON} cache {300 + n} docker {n}" for n in range(0, 120, 4)]
                      + [f"{serial(11)} ledger"])]


def index_rebuilt(store: InMemoryStore, scope: str) -> tuple:
    """The scope's index as kept by the store's writes, and as built afresh from its rows."""
    fresh = InMemoryStore(ranking=store.ranking)
    fresh._scopes[scope] = list(store._scopes[scope])
    kept, built = store._index(scope), fresh._index(scope)
    return ((kept.postings, kept.threads, kept.details, kept.continues, kept.norms,
             kept.positions),
            (built.postings, built.threads, built.details, built.continues, built.norms,
             built.positions))


@pytest.fixture(params=["shared", "shared-copies", "postgres", "postgres-copies"])
def sqlite_kind(request: pytest.FixtureRequest) -> str:
    """The SQLite store through SQL, or (``shared-copies``) answering from its copies of
    the scope whenever the scope's change counter allows; or the PostgreSQL store,
    reading every query's postings from the server or (``postgres-copies``) answering from
    its copy of the scope's index whenever the scope's change counter allows."""
    if request.param.startswith("postgres"):
        pg.require()
    return request.param


async def test_stores_agree_when_more_records_match_than_the_candidate_cap(
        tmp_path, clock: FakeClock, sqlite_kind: str):
    scope = SCOPES[0]
    rng = random.Random(15)
    memory = InMemoryStore(cap=1000, clock=clock, retention_days=2)
    if sqlite_kind.startswith("postgres"):
        schema = pg.new_schema()
        copies = {"cache_min_postings": 0} if sqlite_kind == "postgres-copies" else {
            "postings_cache": 0}
        sqlite = pg.make(schema, cap=1000, clock=clock, retention_days=2, **copies)
        sqlite._cache.interval = 0  # copied again after every change
    else:
        sqlite = SharedSqliteStore(
            tmp_path / "data", cap=1000, clock=clock, synchronous="off", retention_days=2,
            cache_min_postings=0 if sqlite_kind == "shared-copies" else 10**9)
        sqlite._copies.interval = 0  # copied again after every change
    stores = (memory, sqlite)

    async def both(call):  # type: ignore[no-untyped-def]
        expected = await call(memory)
        assert await call(sqlite) == expected
        return expected

    async def compare(bump: bool = False) -> None:
        if sqlite_kind == "postgres-copies":
            await sqlite._cache.settled()  # the copy read after the last change, if any
        if sqlite_kind == "shared-copies":
            await sqlite._copies.settled()
        matched = 0
        for query in crowd_queries():
            for limit in LIMITS:
                hits = await both(lambda store, query=query, limit=limit: store.search(
                    scope, query, limit, bump=bump))
                assert len(hits) == min(limit, len(hits) or limit)
                matched = max(matched, len(hits))
        assert matched == max(LIMITS)
        assert index_rebuilt(memory, scope)[0] == index_rebuilt(memory, scope)[1]

    try:
        thread = THREADS[0]
        for start in range(0, CROWD, 50):
            batch = []
            for n in range(start, start + 50):
                if rng.random() < 0.3:
                    thread = rng.choice(THREADS)
                batch.append(crowd_candidate(rng, n, thread))
            await both(lambda store, batch=batch: store.write(scope, batch))
            clock.advance(rng.choice((1000, 3_600_000, DAY_MS // 3)))
            used = [f"mem:{scope}:{rng.randint(1, start + 50)}" for _ in range(15)]
            await both(lambda store, used=used: store.mark_used({scope: used}))
        active = [r for r in memory._scopes[scope] if r.is_active]
        assert sum(COMMON in r.text for r in active) > 2 * engine.candidate_cap(max(LIMITS))

        await compare()
        await compare(bump=True)  # the bumps change recency: the next answers follow
        clock.advance(DAY_MS // 2)
        await compare()

        # Records leave active status every way there is: the index must follow.
        for n in rng.sample(range(1, CROWD + 1), 40):
            await both(lambda store, n=n: store.forget(scope, f"mem:{scope}:{n}"))
        corrections = [Candidate(kind=Kind.FACT, text=f"{COMMON} corrected {serial(n)} vpn",
                                 source_thread_key=THREADS[n % 3],
                                 supersedes=f"mem:{scope}:{n}")
                       for n in rng.sample(range(1, CROWD + 1), 30)]
        await both(lambda store: store.write(scope, corrections))
        await both(lambda store: store.sweep(scope))
        await compare()
        live = sum(r.is_active for r in memory._scopes[scope])
        evicting = [crowd_candidate(rng, n, THREADS[1]) for n in range(CROWD, CROWD + 20)]
        await both(lambda store: store.write(scope, evicting, cap=live - 30))
        await compare(bump=True)
        # Past the retention a write purges the dead rows: the live ones keep their places.
        clock.advance(3 * DAY_MS)
        late = [crowd_candidate(rng, 999, THREADS[2])]
        await both(lambda store: store.write(scope, late))
        assert len(memory._scopes[scope]) < CROWD
        await compare()
        if sqlite_kind == "postgres-copies":
            assert sqlite._cache.answered > 100  # the copies answered, not only the server
        if sqlite_kind == "shared-copies":
            # From the copies, each checked against the scope's change counter.
            assert sqlite._copies.answered > 100
    finally:
        for store in stores:
            await store.close()
        if sqlite_kind.startswith("postgres"):
            pg.drop_schemas(schema)


async def test_a_query_of_many_stems_reads_the_scope_whole_and_answers_alike(
        tmp_path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch):
    """A scope of more than ``WHOLE_ROWS`` active records is read whole, not through the
    token index, for a query of at least one stem in ``ROWS_PER_STEM`` of them (a pasted
    log), and answers exactly as the in-process store, neighbour credit included."""
    scope = SCOPES[0]
    rng = random.Random(7)
    memory = InMemoryStore(cap=1000, clock=clock)
    sqlite = SharedSqliteStore(tmp_path / "data", cap=1000, clock=clock, synchronous="off",
                               postings_cache=0)
    try:
        batch = [crowd_candidate(rng, n, THREADS[n // 7 % 3]) for n in range(120)]
        for store in (memory, sqlite):
            await store.write(scope, batch)
            for n in (5, 6, 40, 119):  # gaps in the seqs, in and between threads
                assert await store.forget(scope, f"mem:{scope}:{n}")
        long = " ".join([COMMON, *VARIED, *(serial(n) for n in range(0, 120, 4))])
        stems = len(engine.query_terms(long, sqlite.analyzer).stems)
        assert reads.WHOLE_ROWS < 116 <= reads.ROWS_PER_STEM * stems
        short = f"{COMMON} cache vpn"
        for query in (short, long):
            for limit in LIMITS:
                assert await sqlite.search(scope, query, limit) == await memory.search(
                    scope, query, limit)
        # The long query never reads the token index's postings.
        monkeypatch.setattr(reads.st, "STATE_POSTINGS", "SELECT no_such_function()")
        for limit in LIMITS:
            assert await sqlite.search(scope, long, limit) == await memory.search(
                scope, long, limit)
    finally:
        await memory.close()
        await sqlite.close()
