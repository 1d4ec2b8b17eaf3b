"""The PostgreSQL store answers exactly like the in-process store, call by call.

The same random sequences as ``test_equivalence`` (writes with dedup collisions, supersede
and restate pointers to live, dead, foreign and bogus ids, retrievals with and without
bumps, listings, forgets, sweeps, the clock moving past the retention), against the
in-process store and a PostgresStore, comparing every answer; after every step the stored
rows themselves (every row, active or not) and the token column (the engine's terms for
every active row). A second PostgresStore on the same schema (another process, in effect)
writes and forgets now and then: the first must see it at once (it keeps no copy). A smaller
budget than the SQLite machines: each step is a few round trips to a real server.
"""

from __future__ import annotations

import asyncio

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule, run_state_machine_as_test

from scopemem.core import engine
from scopemem.core.scopes import record_seq
from scopemem.stores.memory import InMemoryStore
from scopemem.stores.postgres.statements import COLUMNS, record_of
from tests.conftest import FakeClock
from tests.stores import pg
from tests.stores.test_equivalence import (
    SCOPES,
    AgreeingRules,
    index_rebuilt,
    pointers,
    queries,
)

CAP = 40  # the SQLite machines' cap
_SCHEMA: list[str] = []  # one schema for the whole run, emptied before each example


class PostgresAgrees(AgreeingRules):
    """``AgreeingRules`` against a PostgresStore, plus searches without bumps and
    ``mark_used``; ``elsewhere`` is a second PostgresStore on the same schema."""

    def __init__(self) -> None:
        super().__init__()
        import psycopg

        if not _SCHEMA:
            _SCHEMA.append(pg.new_schema())
        self.schema = _SCHEMA[0]
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.memory = InMemoryStore(cap=CAP, clock=self.clock)
        # ``other`` copies every scope it reads (``cache.py``) and answers from a copy
        # whenever the scope's change counter allows: writes and forgets ``elsewhere``
        # (another worker) must reach its very next answer all the same.
        self.other = pg.make(self.schema, cap=CAP, clock=self.clock, cache_min_postings=0)
        self.other._cache.interval = 0
        self.elsewhere = pg.make(self.schema, cap=CAP, clock=self.clock)
        self.raw = psycopg.connect(pg.dsn(), autocommit=True)
        # Migrate (first example), then start from nothing.
        self.loop.run_until_complete(self.other.list(SCOPES[0], 1))
        self.raw.execute(f'TRUNCATE "{self.schema}".records, "{self.schema}".scopes,'
                         f' "{self.schema}".postings')

    @rule(scope=st.sampled_from(SCOPES), query=queries, limit=st.sampled_from((1, 3, 8)))
    def search_without_bumps(self, scope: str, query: str, limit: int) -> None:
        self.both(lambda store: store.search(scope, query, limit, bump=False))

    @rule(scope=st.sampled_from(SCOPES), ids=st.lists(st.one_of(
        st.integers(1, 14).map(lambda n: f"mem:{SCOPES[0]}:{n}"), pointers), max_size=4))
    def mark_used(self, scope: str, ids: list[str | None]) -> None:
        used = {scope: [record_id for record_id in ids if record_id]}
        self.both(lambda store: store.mark_used(used))

    @invariant()
    def same_rows_and_tokens(self) -> None:
        self.loop.run_until_complete(self.other.flush())  # the uses saved in the background
        analyzer = self.other.analyzer
        for scope in SCOPES:
            rows = self.raw.execute(
                f'SELECT {COLUMNS}, tokens FROM "{self.schema}".records'
                " WHERE scope_key = %s ORDER BY seq", (scope,)).fetchall()
            records = [record_of(row) for row in rows]
            assert records == self.memory._scopes.get(scope, [])
            for record, row in zip(records, rows, strict=True):
                if record.is_active:
                    assert frozenset(row[16]) == engine.record_terms(record, analyzer)
            self.check_postings(scope, records)
            if scope in self.memory._scopes:
                kept, built = index_rebuilt(self.memory, scope)
                assert kept == built

    def check_postings(self, scope: str, records: list) -> None:
        """The index holds exactly the active records' terms, each posting's ``continues``
        says whether the record before is of the same thread (when that row is still there
        to tell), and the scope's row counts the active records."""
        analyzer = self.other.analyzer
        posted = self.raw.execute(f'SELECT term, seq, continues FROM "{self.schema}".postings'
                                  " WHERE scope_key = %s", (scope,)).fetchall()
        by_seq = {record_seq(record.id): record for record in records}
        active = {seq for seq, record in by_seq.items() if record.is_active}
        assert {(term, seq) for term, seq, _c in posted} == {
            (term, seq) for seq in active for term in engine.record_terms(by_seq[seq], analyzer)}
        for _term, seq, continues in posted:
            before = by_seq.get(seq - 1)
            if before is not None:
                assert continues == (before.source_thread_key == by_seq[seq].source_thread_key)
        counted = self.raw.execute(f'SELECT active FROM "{self.schema}".scopes'
                                   " WHERE scope_key = %s", (scope,)).fetchall()
        assert counted == ([(len(active),)] if records else [])

    def teardown(self) -> None:
        for store in (self.other, self.elsewhere, self.memory):
            self.loop.run_until_complete(store.close())
        self.loop.close()
        self.raw.close()


def test_postgres_answers_exactly_like_the_in_process_store():
    pg.require()
    run_state_machine_as_test(PostgresAgrees, settings=settings(
        max_examples=15, stateful_step_count=25, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
