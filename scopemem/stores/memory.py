"""The in-process store: a dict of scopes, for tests, development and the fallback when a
durable store is not configured. Everything is lost when the process exits.

Each scope keeps, beside its rows, an index of its active records that the store's own
writes keep in step (it is the only writer): term → the seqs of the active records holding
it, each record's thread and ``(last touched, record)``, the seqs that continue their
predecessor's thread, the active ids per normalized text, and each row's place in the list.
A record leaves the index as it leaves active status (superseded, evicted, forgotten,
swept), before any purge past the retention drops its row. A retrieval finds its candidates
and weighs them from the postings (``stores.postings``, the code the SQLite store's views
run) and hands them to ``engine.rank_covered``: its cost follows the postings the query's
terms hold, not the scope's size (and of those it weighs only the records that can reach
the candidate cap, ``core.topk``), and it answers exactly as the SQLite store does. A usage
bump replaces the record in its row and its index entry. A write reads only the rows its
candidates collide with or point at (plus one pass over the scope for the purge, and the
eviction's sort when the scope exceeds its cap).
"""

from __future__ import annotations

import bisect
import builtins
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

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
    Status,
    SweepResult,
    WriteCounts,
    trusted_record,
)
from scopemem.core.scopes import record_seq
from scopemem.core.text import normalize_text
from scopemem.stores import postings as inverted
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Clock,
    Hit,
    StoreSettings,
    check_cap,
    check_retention_days,
    check_scope_key,
    retention_cutoff,
    salient_batch,
    wall_clock_ms,
)
from scopemem.stores.memory_browse import CountTotals, InProcessBrowsing
from scopemem.stores.porting import group_import
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.vectors import Shelf

if TYPE_CHECKING:
    from scopemem.stores.dense import DenseIndex

log = logging.getLogger("scopemem")

# The statuses whose rows the retention acts on: a superseded or evicted row is dropped, a
# swept one scrubbed and kept; a forgotten row is scrubbed at once, and kept.
_PURGEABLE = frozenset({Status.SUPERSEDED, Status.EVICTED, Status.SWEPT})


def _scrubbed(record: Record, status: Status = Status.FORGOTTEN) -> Record:
    """``record`` scrubbed with ``status``: its id, status, provenance, times and counts, no
    text or keywords (built without the validators, which refuse an empty text)."""
    return trusted_record(record.id, record.scope_key, record.kind, "", (),
                          record.source_thread_key, record.source_run_id, record.created_at,
                          record.last_used_at, record.use_count, record.confidence,
                          record.supersedes, record.restates, status, record.source)


class _Index:
    """One scope's active records as a retrieval reads them, kept in step with every change
    the store makes (it is the only writer): the postings (term → seqs), each record's
    thread, ``(last touched, record)`` per seq, the seqs that continue their predecessor's
    thread, the active ids per normalized text (what a write's dedup reads), and where each
    row, active or not, sits in the scope's list."""

    __slots__ = ("_dense", "continues", "details", "norms", "positions", "postings",
                 "threads")

    def __init__(self) -> None:
        # The postings as arrays (stores.dense) for this set of active records: dropped by
        # any change to the set, built again by the next retrieval.
        self._dense: DenseIndex | None = None
        self.postings: dict[str, set[int]] = {}
        self.threads: dict[int, str] = {}
        self.details: dict[int, tuple[int, Record]] = {}
        self.continues: set[int] = set()
        self.norms: dict[str, list[str]] = {}
        self.positions: dict[str, int] = {}

    def add(self, seq: int, record: Record, terms: frozenset[str]) -> None:
        """Index an active record."""
        self._dense = None
        inverted.post(self.postings, seq, terms)
        thread = record.source_thread_key
        threads = self.threads
        threads[seq] = thread
        self.details[seq] = (record.last_touched, record)
        if threads.get(seq - 1) == thread:
            self.continues.add(seq)
        if threads.get(seq + 1) == thread:  # only when built from rows out of order
            self.continues.add(seq + 1)
        self.norms.setdefault(normalize_text(record.text), []).append(record.id)

    def remove(self, seq: int, record: Record, terms: frozenset[str]) -> None:
        """Unindex a record that has left active status (``record`` as it was indexed)."""
        self._dense = None
        inverted.unpost(self.postings, seq, terms)
        del self.threads[seq]
        del self.details[seq]
        self.continues.discard(seq)
        self.continues.discard(seq + 1)
        norm = normalize_text(record.text)
        ids = self.norms[norm]
        ids.remove(record.id)
        if not ids:
            del self.norms[norm]

    def dense(self) -> DenseIndex:
        """The postings as arrays, for retrievals until the active records change."""
        from scopemem.stores.dense import DenseIndex  # numpy: only once a scope is read

        dense = self._dense
        if dense is None:
            dense = self._dense = DenseIndex(self.postings, self.details.keys(),
                                             self.continues)
        return dense

    def touch(self, seq: int, record: Record) -> None:
        """An active record's new version (a use, a dedup, a restatement)."""
        self.details[seq] = (record.last_touched, record)


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
        self._clock = clock
        self.ranking = ranking
        self._scopes: dict[str, list[Record]] = {}
        self._next_seq: dict[str, int] = {}
        # Each active record's terms, derived once per record (text and keywords never
        # change), by record id.
        self._terms: dict[str, frozenset[str]] = {}
        # Each scope's index (built from its rows when missing, e.g. rows loaded directly).
        self._indexes: dict[str, _Index] = {}
        # The counters: (scope key, day, name) → value. Changed in the same step as the rows
        # they count (no await in between), as the SQL stores do in one transaction.
        self._counts: dict[tuple[str, int, str], int] = {}
        self._totals = CountTotals()  # the counters per kind, day and name, kept with them
        # Browsing (``stores.base.BrowsingStore``): pages over the scopes, and the reaches.
        self.browsing = InProcessBrowsing(self._scopes, self._totals, clock,
                                          reach_retention_days)
        self.scope_page = self.browsing.scope_page
        self.record_page = self.browsing.record_page
        self.record_history = self.browsing.record_history
        self.read_count_totals = self.browsing.read_count_totals
        self.log_reaches = self.browsing.log_reaches
        self.read_reaches = self.browsing.read_reaches
        self._vectors = Shelf()  # the semantic lane's (stores.shared.vectors)

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> InMemoryStore:
        settings.unknown_options(())
        if not settings.validate_only:
            log.warning(
                "[memory] store 'memory' keeps records in this process only: they are lost on "
                "restart (memory.store = \"sqlite\" or \"worker\" keeps them)"
            )
        return cls(cap=settings.cap, clock=settings.clock, ranking=settings.ranking,
                   retention_days=settings.retention_days,
                   reach_retention_days=settings.reach_retention_days)

    def _rows(self, scope_key: str) -> list[Record]:
        return self._scopes.get(check_scope_key(scope_key), [])

    def _index(self, scope_key: str) -> _Index:
        """The scope's index; a scope without rows gets a fresh one, not kept."""
        index = self._indexes.get(scope_key)
        if index is not None:
            return index
        index = _Index()
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

    def _retire(self, index: _Index, record: Record) -> None:
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
        # The candidates from the postings, weighed as the SQLite store's view weighs them.
        index = self._index(scope_key)
        postings = index.postings
        weights = engine.term_weights(terms, inverted.stats(postings, len(index.details), terms),
                                      self.ranking)
        ranking = self.ranking
        covered = index.dense().covered(terms, weights, limit, ranking.context_weight)
        ranked = engine.rank_covered(covered, sum(weights), limit, now, ranking,
                                     index.continues, index.details)
        if not bump:
            return [Hit(record, match) for record, match in ranked]
        hits = []
        positions = index.positions
        for record, match in ranked:
            bumped = engine.bump_usage(record, now)
            rows[positions[record.id]] = bumped
            index.touch(record_seq(record.id), bumped)
            hits.append(Hit(bumped, match))
        return hits

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
                bumped = engine.bump_usage(rows[position], now)
                rows[position] = bumped
                index.touch(record_seq(record_id), bumped)
                marked += 1
        return marked

    async def write(
        self, scope_key: str, candidates: Sequence[Candidate], cap: int | None = None
    ) -> WriteCounts:
        check_scope_key(scope_key)
        cap = self.cap if cap is None else check_cap(cap)
        if not candidates:
            return WriteCounts()
        batch, dropped = salient_batch(candidates)
        if not batch:
            return dropped
        now = self._clock()
        index = self._index(scope_key)
        rows = list(self._scopes.get(scope_key, []))
        positions = dict(index.positions)
        # The engine needs only the rows sharing the candidate's normalized text and the
        # rows it points at: the index's active ids per text, and this batch's inserts.
        norms = index.norms
        inserted: dict[str, list[str]] = {}
        # The latest version of every row this batch inserts or changes, by id.
        changed: dict[str, Record] = {}
        live = len(index.details)
        seq = self._next_seq.get(scope_key, 1)
        counts = dropped
        for candidate in batch:
            norm = normalize_text(candidate.text)
            pool = [rows[positions[i]] for i in norms.get(norm, ())]
            pool += [rows[positions[i]] for i in inserted.get(norm, ())]
            pool += [rows[positions[p]] for p in (candidate.supersedes, candidate.restates)
                     if p and p in positions]
            action = engine.plan_write(scope_key, candidate, pool, now)
            counts += engine.count_action(action, candidate)
            if isinstance(action, engine.Insert):
                if action.superseded is not None:
                    retired = action.superseded
                    rows[positions[retired.id]] = changed[retired.id] = retired
                    live -= 1
                record = engine.mint_record(scope_key, seq, candidate, now)
                seq += 1
                positions[record.id] = len(rows)
                inserted.setdefault(norm, []).append(record.id)
                rows.append(record)
                changed[record.id] = record
                live += 1
            else:
                updated = action.updated
                rows[positions[updated.id]] = changed[updated.id] = updated
        evicted = engine.plan_eviction(rows, cap) if live > cap else []
        for record in evicted:
            rows[positions[record.id]] = changed[record.id] = record
        # The new records' terms, before anything is committed.
        fresh = {record.id: engine.record_terms(record, self.ranking.analyzer)
                 for record in changed.values()
                 if record.is_active and record.id not in index.positions}
        # Committed only now, all at once: a failure above leaves the scope untouched.
        kept = self._purged(rows, now)
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
        if counts.inserted:
            self.browsing.wrote(scope_key, now)
        self._indexes[scope_key] = index
        self._next_seq[scope_key] = seq
        counts += WriteCounts(evicted=len(evicted))
        self._count(counting.write_rows(scope_key, counts, now))
        return counts

    def _purged(self, rows: list[Record], now: int) -> list[Record]:
        """Note when the rows that just died did, and drop the superseded and evicted rows
        past the retention; a swept row past it stays, scrubbed (as a forgotten row stays).
        A scrubbed swept row has no text left to wait for."""
        died = self._died
        cutoff = retention_cutoff(now, self.retention_days)
        kept = []
        for record in rows:
            if record.status in _PURGEABLE and record.text:
                when = died.setdefault(record.id, now)
                if when <= cutoff:
                    del died[record.id]
                    if record.status is not Status.SWEPT:
                        continue
                    record = _scrubbed(record, Status.SWEPT)
            kept.append(record)
        return kept

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
        rows[position] = _scrubbed(record)
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
        """Delete every record of the scope, whatever its status, and its counters; the
        number of records deleted. Its ids are never given again."""
        check_scope_key(scope_key)
        rows = self._scopes.pop(scope_key, [])
        self._indexes.pop(scope_key, None)
        self.browsing.dropped(scope_key)
        self._vectors.drop(scope_key)
        for record in rows:
            self._terms.pop(record.id, None)
            self._died.pop(record.id, None)
        gone = {key: self._counts.pop(key) for key in
                [key for key in self._counts if key[0] == scope_key]}
        self._totals.deleted(gone, self._counts)
        return len(rows)

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        """Replace the person ``person_key`` names in the scope's thread keys and run ids
        (``core.provenance``), and delete the scope's reaches that name them; the number of
        records changed."""
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
        """The retention purge every write applies to its scope, applied to every scope now."""
        now = self._clock()
        result = PurgeResult()
        for scope_key, rows in list(self._scopes.items()):
            swept = sum(1 for r in rows if r.status is Status.SWEPT and r.text)
            kept = self._purged(rows, now)
            left = sum(1 for r in kept if r.status is Status.SWEPT and r.text)
            if len(kept) == len(rows) and left == swept:
                continue
            self._scopes[scope_key] = kept
            self._indexes.pop(scope_key, None)
            result += PurgeResult(purged=len(rows) - len(kept), scrubbed=swept - left)
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
        return self._vectors.search(check_scope_key(scope_key), model, vector, limit, floor,
                                    include, self._active(scope_key))

    # --- counters (``stores.base.CountingStore``) ----------------------------------------

    def _count(self, rows: Sequence[CountRow]) -> None:
        counts = self._counts
        for row in rows:
            key = (row.scope_key, row.day, row.name)
            counts[key] = value = counts.get(key, 0) + row.value
            self._totals.added(row.scope_key, row.day, row.name, row.value, value)

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        self._count(counting.check_rows(rows))

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0
                          ) -> builtins.list[CountRow]:
        wanted = None if scope_keys is None else {check_scope_key(k) for k in scope_keys}
        return [CountRow(scope, day, name, value)
                for (scope, day, name), value in sorted(self._counts.items())
                if day >= since_day and counting.select_scope(scope, wanted, prefix)]

    async def close(self) -> None:
        return None

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
                if record.status in _PURGEABLE and record.text:
                    self._died[record.id] = now  # its retention counts from the import
            # Rows stay in seq order (``fresh`` is in seq order: appended when it all comes
            # after the scope's rows); the index is rebuilt from them on next use.
            if rows and record_seq(fresh[0].id) < record_seq(rows[-1].id):
                self._scopes[scope_key] = sorted([*rows, *fresh],
                                                 key=lambda record: record_seq(record.id))
            else:
                self._scopes[scope_key] = [*rows, *fresh]
            self._indexes.pop(scope_key, None)
            self.browsing.wrote(scope_key, max(record.created_at for record in fresh))
            top = max(seq for seq, _record in batch)
            self._next_seq[scope_key] = max(self._next_seq.get(scope_key, 1), top + 1)
            added += len(fresh)
        return added
