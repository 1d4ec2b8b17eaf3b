"""The in-process store: a dict of scopes, for tests, development and the fallback when a
durable store is not configured; everything is lost when the process exits. Each scope keeps
an index of its active records (``memory_index``), so a retrieval costs the query's
postings, not the scope's size; the engine decides a write's batch as in the SQL stores
(``shared.batches``). Parts: ``memory_counts``, ``memory_retention``, ``memory_browse``.
"""

from __future__ import annotations

import bisect
import builtins
import logging
from collections.abc import Collection, Mapping, Sequence

from scopemem.core import engine
from scopemem.core.browse import DEFAULT_REACH_RETENTION_DAYS
from scopemem.core.provenance import person_id, scrub_source
from scopemem.core.ranking import Ranking
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    Candidate,
    CountRow,
    Kind,
    PurgeResult,
    Record,
    SweepResult,
    WriteCounts,
    trusted_record,
)
from scopemem.core.scopes import memory_id, record_seq
from scopemem.stores import postings as inverted
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Clock,
    Hit,
    StoreSettings,
    check_cap,
    check_retention_days,
    check_scope_key,
    refuse_after_close,
    wall_clock_ms,
    write_batch,
)
from scopemem.stores.memory_browse import InProcessBrowsing
from scopemem.stores.memory_counts import InProcessCounts
from scopemem.stores.memory_index import ScopeIndex
from scopemem.stores.memory_retention import PURGEABLE, Retention, scrubbed
from scopemem.stores.porting import group_import
from scopemem.stores.shared import batches
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.vectors import Shelf

log = logging.getLogger("scopemem")

class InMemoryStore:
    """Records per scope in sequence order. No method awaits while it changes state, so on
    one event loop every call is atomic: a batch is never seen half applied."""

    # Records live as long as the process: a one-shot command refuses to change them.
    durable = False

    def __init__(self, *, cap: int = DEFAULT_SCOPE_CAP, clock: Clock = wall_clock_ms,
                 ranking: Ranking = DEFAULT_RANKING,
                 retention_days: int = DEFAULT_RETENTION_DAYS,
                 reach_retention_days: int = DEFAULT_REACH_RETENTION_DAYS) -> None:
        self.cap = check_cap(cap)
        self.retention_days = check_retention_days(retention_days)
        # When each superseded, evicted or swept record died (record id → epoch ms), for the
        # purge past the retention that every write applies, as the SQLite store does.
        self._died: dict[str, int] = {}
        self._retention = Retention(self.retention_days, self._died)
        self._clock = clock
        self.ranking = ranking
        self._scopes: dict[str, list[Record]] = {}
        self._next_seq: dict[str, int] = {}
        # Each active record's terms by id, derived once (text and keywords never change).
        self._terms: dict[str, frozenset[str]] = {}
        # Each scope's index (built from its rows when missing, e.g. rows loaded directly).
        self._indexes: dict[str, ScopeIndex] = {}
        # The counters (``memory_counts.py``), changed in the same step as the rows they
        # count (no await in between), as the SQL stores do in one transaction.
        self._counters = InProcessCounts()
        self._count = self._counters.count
        # Browsing (``stores.base.BrowsingStore``): pages over the scopes, and the reaches.
        self.browsing = browsing = InProcessBrowsing(self._scopes, self._counters.totals,
                                                     clock, reach_retention_days)
        self.scope_page, self.record_page = browsing.scope_page, browsing.record_page
        self.record_history = browsing.record_history
        self.read_count_totals = browsing.read_count_totals
        self.log_reaches, self.read_reaches = browsing.log_reaches, browsing.read_reaches
        self._vectors = Shelf()  # the semantic lane's (stores.shared.vectors)

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> InMemoryStore:
        settings.unknown_options(())
        if not settings.validate_only:
            log.warning("[memory] store 'memory' keeps records in this process only: they are"
                        " lost on restart (memory.store = \"sqlite\" or \"worker\" keeps them)")
        return cls(cap=settings.cap, clock=settings.clock, ranking=settings.ranking,
                   retention_days=settings.retention_days,
                   reach_retention_days=settings.reach_retention_days)

    def _rows(self, scope_key: str) -> list[Record]:
        return self._scopes.get(check_scope_key(scope_key), [])

    def _index(self, scope_key: str) -> ScopeIndex:
        """The scope's index; a scope without rows gets a fresh one, not kept."""
        index = self._indexes.get(scope_key)
        if index is not None:
            return index
        index = ScopeIndex()
        rows = self._scopes.get(scope_key)
        if rows:
            for position, record in enumerate(rows):
                index.positions[record.id] = position
                if record.is_active:
                    index.add(record_seq(record.id), record, self._terms_of(record))
            self._indexes[scope_key] = index
        return index

    def _terms_of(self, record: Record) -> frozenset[str]:
        terms = self._terms.get(record.id)
        if terms is None:
            terms = self._terms[record.id] = engine.record_terms(record, self.ranking.analyzer)
        return terms

    def _retire(self, index: ScopeIndex, record: Record) -> None:
        """Unindex an active record that has just left active status."""
        index.remove(record_seq(record.id), record, self._terms.pop(record.id))

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        now = self._clock()
        rows = self._rows(scope_key)
        terms = engine.query_terms(query, self.ranking.analyzer)
        if not terms.terms or limit <= 0 or not rows:
            return []
        # The candidates from the postings, weighed as arrays (``stores.dense``).
        index = self._index(scope_key)
        postings = engine.grouped(index.postings, terms)
        weights = engine.term_weights(terms, inverted.stats(postings, len(index.details), terms),
                                      self.ranking)
        ranking = self.ranking
        covered, shared = index.dense().covered(terms, weights, limit, ranking.context_weight)
        ranked = engine.rank_covered(covered, sum(weights), limit, now, ranking,
                                     index.continues, index.details, shared=shared)
        if not bump:
            return [Hit(record, match) for record, match in ranked]
        return [Hit(self._bump(rows, index, index.positions[record.id], now), match)
                for record, match in ranked]

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        now = self._clock()
        marked = 0
        for scope_key, ids in used.items():
            rows = self._rows(scope_key)
            if not rows:
                continue
            index = self._index(scope_key)
            for record_id in set(ids):
                position = index.positions.get(record_id)
                if position is None or not rows[position].is_active:
                    continue
                self._bump(rows, index, position, now)
                marked += 1
        return marked

    @staticmethod
    def _bump(rows: builtins.list[Record], index: ScopeIndex, position: int, now: int
              ) -> Record:
        """Count the row at ``position`` as used ``now``."""
        bumped = rows[position] = engine.bump_usage(rows[position], now)
        index.touch(record_seq(bumped.id), bumped)
        return bumped

    async def write(
        self, scope_key: str, candidates: Sequence[Candidate], cap: int | None = None
    ) -> WriteCounts:
        batch, dropped, scope_cap = write_batch(scope_key, candidates, cap, self.cap)
        if not batch:
            return dropped
        # Never older than the scope's newest record (a clock that moved back): the
        # eviction's order, creation time then seq, stays the order of the writes.
        now = max(self._clock(), self.browsing.last_write(scope_key) or 0)
        index = self._index(scope_key)
        rows = list(self._scopes.get(scope_key, []))
        positions = dict(index.positions)
        # The engine decides the batch (``shared.batches``, as in the SQL stores) against the
        # rows it can touch: the active ones sharing a candidate's text, and those it names.
        texts, seqs = batches.lookup_keys(scope_key, batch)
        known = [rows[positions[i]] for text in texts for i in index.norms.get(text, ())]
        known += [rows[positions[i]] for i in (memory_id(scope_key, seq) for seq in seqs)
                  if i in positions]
        plan = batches.plan_batch(scope_key, batch, known, self._next_seq.get(scope_key, 1),
                                  now)
        # The latest version of every row this batch inserts or changes, by id.
        changed: dict[str, Record] = {}
        for record in plan.changes:
            rows[positions[record.id]] = changed[record.id] = record
        for record in plan.inserts:
            positions[record.id] = len(rows)
            rows.append(record)
            changed[record.id] = record
        live = len(index.details) + plan.live_delta
        evicted = engine.plan_eviction(rows, scope_cap) if live > scope_cap else []
        for record in evicted:
            rows[positions[record.id]] = changed[record.id] = record
        # The new records' terms, before anything is committed.
        fresh = {record.id: engine.record_terms(record, self.ranking.analyzer)
                 for record in changed.values()
                 if record.is_active and record.id not in index.positions}
        # Committed only now, all at once: a failure above leaves the scope untouched.
        kept = self._retention.purged(rows, now)
        if len(kept) != len(rows):
            positions = {record.id: position for position, record in enumerate(kept)}
        # New active records join the index, changed ones replace their entry, and those
        # that left active status in this batch (were indexed, are not active) leave it.
        indexed = index.details
        for record_id, record in changed.items():
            number = record_seq(record_id)
            if record_id in fresh:
                self._terms[record_id] = fresh[record_id]
                index.add(number, record, fresh[record_id])
            elif record.is_active:
                index.touch(number, record)
            elif number in indexed:
                self._retire(index, indexed[number][1])
        index.positions = positions
        self._scopes[scope_key] = kept
        if plan.inserts:
            self.browsing.wrote(scope_key, now)
        self._indexes[scope_key] = index
        self._next_seq[scope_key] = plan.next_seq
        counts = plan.counts + dropped + WriteCounts(evicted=len(evicted))
        self._count(counting.write_rows(scope_key, counts, now))
        return counts

    async def list(
        self, scope_key: str, limit: int, query: str | None = None, kind: Kind | None = None
    ) -> list[Record]:
        return engine.listing(self._rows(scope_key), limit, query=query, kind=kind,
                              analyzer=self.ranking.analyzer)

    async def forget(self, scope_key: str, record_id: str) -> bool:
        rows = self._rows(scope_key)
        if not rows:
            return False
        index = self._index(scope_key)
        position = index.positions.get(record_id)
        if position is None or not rows[position].is_active:
            return False
        record = rows[position]
        rows[position] = scrubbed(record)
        self._retire(index, record)
        self._count(counting.forget_rows(scope_key, self._clock()))
        return True

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        rows = self._rows(scope_key)
        swept = engine.plan_sweep(rows)
        if dry_run:
            return SweepResult(swept=len(swept), ids=tuple(record.id for record in swept))
        if not swept:
            return SweepResult(swept=0)
        index = self._index(scope_key)
        now = self._clock()
        for record in swept:
            position = index.positions[record.id]
            self._retire(index, rows[position])
            rows[position] = record
            self._died[record.id] = now
        self._count(counting.sweep_rows(scope_key, len(swept), now))
        return SweepResult(swept=len(swept))

    # --- deleting a scope, a person's provenance, the retention purge now ----------------

    async def delete_scope(self, scope_key: str) -> int:
        check_scope_key(scope_key)
        rows = self._scopes.pop(scope_key, [])
        self._indexes.pop(scope_key, None)
        self.browsing.dropped(scope_key)
        self._vectors.drop(scope_key)
        for record in rows:
            self._terms.pop(record.id, None)
            self._died.pop(record.id, None)
        self._counters.drop(scope_key)
        return len(rows)

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        rows = self._rows(scope_key)
        person = person_id(check_scope_key(person_key))
        changed = 0
        for position, record in enumerate(rows):
            thread = scrub_source(record.source_thread_key, person)
            run = scrub_source(record.source_run_id, person)
            if thread is record.source_thread_key and run is record.source_run_id:
                continue
            rows[position] = trusted_record(
                record.id, record.scope_key, record.kind, record.text, record.keywords,
                thread or record.source_thread_key, run, record.created_at,
                record.last_used_at, record.use_count, record.confidence, record.supersedes,
                record.restates, record.status, record.source)
            changed += 1
        if changed:
            self._indexes.pop(scope_key, None)  # rebuilt from the rows on next use
        self.browsing.scrub(scope_key, person)
        return changed

    async def purge(self) -> PurgeResult:
        result, changed = self._retention.purge(self._scopes, self._clock())
        for scope_key in changed:
            self._indexes.pop(scope_key, None)
        return result

    # --- the semantic lane (``stores.shared.vectors.VectorStore``) -----------------------

    def _active(self, scope_key: str) -> dict[str, Record]:
        return {record.id: record for _touched, record in self._index(scope_key).details.values()}

    async def vectors_missing(self, scope_key: str, model: str, limit: int
                              ) -> builtins.list[tuple[str, str]]:
        active = [record for record in self._rows(scope_key) if record.is_active]
        return self._vectors.missing(scope_key, model, active, limit)

    async def put_vectors(self, scope_key: str, model: str,
                          vectors: Sequence[tuple[str, bytes]]) -> int:
        return self._vectors.put(check_scope_key(scope_key), model, vectors,
                                 self._active(scope_key))

    async def nearest(self, scope_key: str, model: str, vector: bytes, limit: int,
                      floor: float, include: Collection[str] = ()
                      ) -> builtins.list[tuple[Record, float]]:
        index = self._index(check_scope_key(scope_key))
        return self._vectors.search(scope_key, model, vector, limit, floor, include,
                                    index.details, index.stamp)

    # --- counters (``stores.base.CountingStore``; methods, so a subclass may wrap them) ---

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        await self._counters.add_counts(rows)

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0
                          ) -> builtins.list[CountRow]:
        return await self._counters.read_counts(scope_keys, prefix=prefix,
                                                since_day=since_day)

    async def close(self) -> None:
        refuse_after_close(self, "in-process")

    # --- moving records (``stores.porting.PortableStore``) -------------------------------

    async def export_scopes(self) -> builtins.list[str]:
        return sorted(key for key, rows in self._scopes.items() if rows)

    async def export_page(self, scope_key: str, after: int, limit: int) -> builtins.list[Record]:
        rows = self._rows(scope_key)
        start = bisect.bisect_right(rows, after, key=lambda record: record_seq(record.id))
        return rows[start:start + max(limit, 0)]

    async def import_records(self, records: Sequence[Record]) -> int:
        now = self._clock()
        groups = group_import(records, now)
        added = 0
        for scope_key, batch in groups.items():
            rows = self._scopes.get(scope_key, [])
            held = {record_seq(record.id) for record in rows}
            fresh = [record for seq, record in batch if seq not in held]
            if not fresh:
                continue
            for record in fresh:
                if record.status in PURGEABLE and record.text:
                    self._died[record.id] = now  # its retention counts from the import
            # Rows stay in seq order (two sorted runs: one linear merge); the index is
            # rebuilt from them on next use.
            self._scopes[scope_key] = sorted([*rows, *fresh],
                                             key=lambda record: record_seq(record.id))
            self._indexes.pop(scope_key, None)
            self.browsing.wrote(scope_key, max(record.created_at for record in fresh))
            top = max(seq for seq, _record in batch)
            self._next_seq[scope_key] = max(self._next_seq.get(scope_key, 1), top + 1)
            added += len(fresh)
        return added
