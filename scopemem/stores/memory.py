"""The in-process store: a dict of scopes, for tests, development and the fallback when a
durable store is not configured. Everything is lost when the process exits."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from scopemem.core import engine
from scopemem.core.ranking import Ranking
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    Candidate,
    Kind,
    Record,
    Status,
    SweepResult,
    WriteCounts,
    trusted_record,
)
from scopemem.core.scopes import record_seq
from scopemem.core.text import normalize_text
from scopemem.plugins.markers import hookimpl
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Clock,
    Hit,
    StoreSettings,
    check_cap,
    check_retention_days,
    check_scope_key,
    fit_batch,
    retention_cutoff,
    wall_clock_ms,
)

log = logging.getLogger("scopemem")

# The statuses whose rows are dropped once past the retention; a forgotten row is scrubbed
# instead, and kept.
_PURGEABLE = frozenset({Status.SUPERSEDED, Status.EVICTED, Status.SWEPT})


def _scrubbed(record: Record) -> Record:
    """``record`` forgotten: its id, status and provenance, no text or keywords (built
    without the validators, which refuse an empty text)."""
    return trusted_record(record.id, record.scope_key, record.kind, "", (),
                          record.source_thread_key, record.source_run_id, record.created_at,
                          record.last_used_at, record.use_count, record.confidence,
                          record.supersedes, record.restates, Status.FORGOTTEN, record.source)


class InMemoryStore:
    """Records per scope in sequence order. No method awaits while it changes state, so on
    one event loop every call is atomic: a batch is never seen half applied."""

    # Records live as long as the process: a one-shot command refuses to change them.
    durable = False

    def __init__(self, *, cap: int = DEFAULT_SCOPE_CAP, clock: Clock = wall_clock_ms,
                 ranking: Ranking = DEFAULT_RANKING,
                 retention_days: int = DEFAULT_RETENTION_DAYS) -> None:
        self.cap = check_cap(cap)
        self.retention_days = check_retention_days(retention_days)
        # When each superseded, evicted or swept record died (record id → epoch ms), for the
        # purge past the retention that every write applies, as the SQLite store does.
        self._died: dict[str, int] = {}
        self._clock = clock
        self.ranking = ranking
        self._scopes: dict[str, list[Record]] = {}
        self._next_seq: dict[str, int] = {}
        # Each record's terms, derived once per record (text and keywords never change).
        self._terms: dict[str, frozenset[str]] = {}

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> InMemoryStore:
        settings.unknown_options(())
        if not settings.validate_only:
            log.warning(
                "[memory] store 'memory' keeps records in this process only: they are lost on "
                "restart (memory.store = \"sqlite\" or \"worker\" keeps them)"
            )
        return cls(cap=settings.cap, clock=settings.clock, ranking=settings.ranking,
                   retention_days=settings.retention_days)

    def _rows(self, scope_key: str) -> list[Record]:
        return self._scopes.get(check_scope_key(scope_key), [])

    def _replace(self, scope_key: str, changed: Sequence[Record]) -> None:
        if not changed:
            return
        by_id = {record.id: record for record in changed}
        rows = self._scopes[scope_key]
        self._scopes[scope_key] = [by_id.get(record.id, record) for record in rows]

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        now = self._clock()
        rows = self._rows(scope_key)
        terms = engine.query_terms(query, self.ranking.analyzer)
        if not terms.terms or limit <= 0:
            return []
        entries = [(record_seq(record.id), self._terms_of(record), record.source_thread_key,
                    record.last_touched, record) for record in rows if record.is_active]
        stats = engine.scope_stats(terms, (entry[1] for entry in entries))
        ranked = engine.rank_entries(entries, terms, stats, limit, now, self.ranking)
        if not bump:
            return [Hit(record, match) for record, match in ranked]
        bumped = [Hit(engine.bump_usage(record, now), match) for record, match in ranked]
        self._replace(scope_key, [hit.record for hit in bumped])
        return bumped

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        now = self._clock()
        marked = 0
        for scope_key, ids in used.items():
            wanted = set(ids)
            bumped = [engine.bump_usage(record, now) for record in self._rows(scope_key)
                      if record.id in wanted and record.is_active]
            self._replace(scope_key, bumped)
            marked += len(bumped)
        return marked

    def _terms_of(self, record: Record) -> frozenset[str]:
        terms = self._terms.get(record.id)
        if terms is None:
            terms = self._terms[record.id] = engine.record_terms(record, self.ranking.analyzer)
        return terms

    async def write(
        self, scope_key: str, candidates: Sequence[Candidate], cap: int | None = None
    ) -> WriteCounts:
        check_scope_key(scope_key)
        cap = self.cap if cap is None else check_cap(cap)
        if not candidates:
            return WriteCounts()
        now = self._clock()
        rows = list(self._scopes.get(scope_key, []))
        index = {record.id: i for i, record in enumerate(rows)}
        # The engine needs only the rows sharing the candidate's normalized text and the
        # rows it points at; indexing the norms once keeps a batch linear in the scope.
        by_norm: dict[str, list[int]] = {}
        for i, record in enumerate(rows):
            if record.is_active:
                by_norm.setdefault(normalize_text(record.text), []).append(i)
        seq = self._next_seq.get(scope_key, 1)
        counts = WriteCounts()
        for candidate in fit_batch(candidates):
            norm = normalize_text(candidate.text)
            pool = [rows[i] for i in by_norm.get(norm, ())]
            pool += [rows[index[p]] for p in (candidate.supersedes, candidate.restates)
                     if p and p in index]
            action = engine.plan_write(scope_key, candidate, pool, now)
            counts += engine.count_action(action, candidate)
            if isinstance(action, engine.Insert):
                if action.superseded is not None:
                    rows[index[action.superseded.id]] = action.superseded
                record = engine.mint_record(scope_key, seq, candidate, now)
                seq += 1
                index[record.id] = len(rows)
                by_norm.setdefault(norm, []).append(len(rows))
                rows.append(record)
            else:
                rows[index[action.updated.id]] = action.updated
        evicted = engine.plan_eviction(rows, cap)
        for record in evicted:
            rows[index[record.id]] = record
        # Committed only now, all at once: a failure above leaves the scope untouched.
        self._scopes[scope_key] = self._purged(rows, now)
        self._next_seq[scope_key] = seq
        return counts + WriteCounts(evicted=len(evicted))

    def _purged(self, rows: list[Record], now: int) -> list[Record]:
        """Note when the rows that just died did, and drop the dead rows past the
        retention (a forgotten row stays, scrubbed)."""
        died = self._died
        cutoff = retention_cutoff(now, self.retention_days)
        kept = []
        for record in rows:
            if record.status in _PURGEABLE:
                when = died.setdefault(record.id, now)
                if when <= cutoff:
                    del died[record.id]
                    self._terms.pop(record.id, None)
                    continue
            kept.append(record)
        return kept

    async def list(
        self, scope_key: str, limit: int, query: str | None = None, kind: Kind | None = None
    ) -> list[Record]:
        return engine.listing(self._rows(scope_key), limit, query=query, kind=kind,
                              analyzer=self.ranking.analyzer)

    async def forget(self, scope_key: str, record_id: str) -> bool:
        for record in self._rows(scope_key):
            if record.id == record_id and record.is_active:
                self._replace(scope_key, [_scrubbed(record)])
                self._terms.pop(record.id, None)
                return True
        return False

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        swept = engine.plan_sweep(self._rows(scope_key))
        if dry_run:
            return SweepResult(swept=len(swept), ids=tuple(record.id for record in swept))
        self._replace(scope_key, swept)
        now = self._clock()
        for record in swept:
            self._died[record.id] = now
        return SweepResult(swept=len(swept))

    async def close(self) -> None:
        return None


@hookimpl
def scopemem_register_stores(register) -> None:  # type: ignore[no-untyped-def]
    register("memory", InMemoryStore.from_settings)
