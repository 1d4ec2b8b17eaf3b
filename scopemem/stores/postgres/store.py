"""The PostgreSQL store: every scope in one schema, shared by any number of processes
(``docs/storage.md``, "PostgreSQL"). Each part is built here with what it uses.
"""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from scopemem.core import engine
from scopemem.core.browse import DEFAULT_REACH_RETENTION_DAYS
from scopemem.core.ranking import Ranking
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    Candidate,
    Kind,
    PurgeResult,
    Record,
    SweepResult,
    WriteCounts,
)
from scopemem.errors import StoreError
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Clock,
    Hit,
    StoreSettings,
    check_cap,
    check_retention_days,
    check_scope_key,
    wall_clock_ms,
    write_batch,
)
from scopemem.stores.health import NOT_READY_FAILED
from scopemem.stores.postgres import migrations, reads
from scopemem.stores.postgres.browse import Browse
from scopemem.stores.postgres.options import PostgresOptions, options_from_settings
from scopemem.stores.postgres.pool import Connections, psycopg_modules
from scopemem.stores.postgres.porting import Porting
from scopemem.stores.postgres.statements import Statements, bigints, record_of
from scopemem.stores.postgres.usage import DeferredUsage
from scopemem.stores.postgres.vectors import Vectors
from scopemem.stores.postgres.writes import Counts, Writes, refold
from scopemem.stores.shared import batches
from scopemem.stores.shared.cache import PostingsCache, ScopeCopy
from scopemem.stores.shared.calls import listing_stems, search_terms, used_seqs

__all__ = ["PostgresStore"]

_log = logging.getLogger("scopemem.stores.postgres")


class PostgresStore:
    """Durable memory in one PostgreSQL schema, shared by every process using it."""

    durable = True

    def __init__(self, options: PostgresOptions, *, cap: int = DEFAULT_SCOPE_CAP,
                 clock: Clock = wall_clock_ms, ranking: Ranking = DEFAULT_RANKING,
                 retention_days: int = DEFAULT_RETENTION_DAYS,
                 reach_retention_days: int = DEFAULT_REACH_RETENTION_DAYS) -> None:
        self.options = options
        self.cap = check_cap(cap)
        self.retention_days = check_retention_days(retention_days)
        self.ranking = ranking
        self.analyzer = ranking.analyzer
        self.schema = options.schema
        self.sql = Statements(options.schema)
        self._clock = clock
        # Under the migration lock: the rows' tokens re-derived when the analyzer changed.
        self._pool = Connections(options, lambda conn: refold(conn, self.sql, self.analyzer,
                                                              self.schema))
        connect = self._connection = self._pool.connection
        self._usage = DeferredUsage(self._bump_later, options.usage_flush_ms)
        # Copies of large scopes' postings, checked against the change counter (``shared.cache``).
        self._cache = PostingsCache(options.postings_cache, options.cache_min_postings)
        browse = Browse(self.sql, connect, clock, reach_retention_days, self._usage.save)
        self.scope_page = browse.scope_page
        self.record_page = browse.record_page
        self.record_history = browse.record_history
        self.read_count_totals = browse.read_count_totals
        self.log_reaches = browse.log_reaches
        self.read_reaches = browse.read_reaches
        # The write transactions (``writes.py``), under each scope's row lock.
        self._writes = Writes(self.sql, self.analyzer, connect, options, browse, clock,
                              self.retention_days)
        self.delete_scope = self._writes.delete_scope
        self.scrub_provenance = self._writes.scrub_provenance
        porting = Porting(self.sql, self.analyzer, self._usage, connect, clock, options)
        self.export_scopes = porting.export_scopes
        self.export_page = porting.export_page
        self.import_records = porting.import_records
        counts = Counts(self.sql, connect, clock, options)
        self.add_counts = counts.add_counts
        self.read_counts = counts.read_counts
        vectors = Vectors(self.sql, connect, self._usage)
        self.vectors_missing = vectors.vectors_missing
        self.put_vectors = vectors.put_vectors
        self.nearest = vectors.nearest

    def __repr__(self) -> str:  # never the DSN: it may hold a password
        return f"PostgresStore(schema={self.schema!r}, cap={self.cap!r})"

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> PostgresStore:
        settings = settings.named("postgres")
        return cls(options_from_settings(settings), cap=settings.cap, clock=settings.clock,
                   ranking=settings.ranking, retention_days=settings.retention_days,
                   reach_retention_days=settings.reach_retention_days)

    # --- the MemoryStore methods -----------------------------------------------------------

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        terms = search_terms(scope_key, query, limit, self.analyzer)
        if terms is None:
            return []
        now = self._clock()
        async with self._usage.reading(scope_key), self._connection() as conn:
            return await reads.search(conn, self.sql, self._usage, self.ranking, scope_key,
                                      terms, limit, now, bump, self._cache, self._copy)

    async def _copy(self, scope_key: str) -> ScopeCopy | None:
        """The scope's whole index as it is now, for the worker's copy (``shared.cache``)."""
        async with self._connection() as conn, conn.transaction():
            # One snapshot for the index and the touches (a row in one is in the other).
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            rows = await _rows_in_slices(conn, self.sql.scope_postings, scope_key)
            touches = await _rows_in_slices(conn, self.sql.scope_touches, scope_key)
        # Building the sets is a tenth of a second of a large scope's copy: on a thread, so
        # the event loop keeps answering meanwhile.
        return await asyncio.to_thread(ScopeCopy.from_rows, rows, touches)

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        now = self._clock()
        marked = 0
        for scope_key, seqs in used_seqs(used):
            async with self._connection() as conn:
                cursor = await conn.execute(self.sql.active_seqs,
                                            {"scope": scope_key, "seqs": bigints(seqs)})
                found = [seq for (seq,) in await cursor.fetchall()]
            self._usage.add(scope_key, found, now)  # saved in the background
            marked += len(found)
        return marked

    async def write(self, scope_key: str, candidates: Sequence[Candidate],
                    cap: int | None = None) -> WriteCounts:
        fitted, dropped, scope_cap = write_batch(scope_key, candidates, cap, self.cap)
        if not fitted:
            return dropped
        await self._usage.save(scope_key)  # its dedup and eviction see every use
        return await self._writes.write(scope_key, fitted, scope_cap) + dropped

    async def list(self, scope_key: str, limit: int, query: str | None = None,
                   kind: Kind | None = None) -> list[Record]:
        tokens = listing_stems(scope_key, limit, query, self.analyzer)
        if tokens == []:
            return []
        await self._usage.save(scope_key)
        async with self._connection() as conn:
            cursor = await conn.execute(self.sql.listing, {
                "scope": scope_key, "limit": limit, "tokens": tokens,
                "kind": None if kind is None else str(kind)})
            rows = await cursor.fetchall()
        # The index and the engine agree by construction; the engine still has the last word.
        return engine.listing([record_of(row) for row in rows], limit, query=query, kind=kind,
                              analyzer=self.analyzer)

    async def forget(self, scope_key: str, record_id: str) -> bool:
        check_scope_key(scope_key)
        seq = batches.seq_in_scope(scope_key, record_id)
        if seq is None:
            return False
        await self._usage.save(scope_key)  # a forgotten row keeps its counts
        return await self._writes.forget(scope_key, seq)

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        await self._usage.save(scope_key)  # its choice reads the last uses; swept rows keep them
        return await self._writes.sweep(scope_key, dry_run)

    async def purge(self) -> PurgeResult:
        """``Writes.purge`` on every scope."""
        return await self._writes.purge(await self.export_scopes())

    async def flush(self) -> None:
        """Apply the use counts still deferred now (``close`` applies them too)."""
        await self._usage.drain()

    async def ready(self) -> str | None:
        """Ready when the pool opens (the schema migrated) and finds every table."""
        async with self._connection() as conn:
            missing = await migrations.missing_tables(conn, self.schema)
        if missing:
            _log.warning("postgres store: schema %r lacks its table(s) %s: another program"
                         " dropped or renamed them, and every call using them fails; restore"
                         " them (from a backup: pg_dump --schema), scopemem does not create"
                         " them again in a schema it has migrated", self.schema,
                         ", ".join(missing))
            return NOT_READY_FAILED
        return None

    def missing_library(self) -> str | None:
        """psycopg not installed: the package and the pip command (``serve`` stops on it,
        rather than start a worker every request to which fails); None when it is."""
        try:
            psycopg_modules()
        except StoreError as exc:
            return str(exc)
        return None

    def max_descriptors(self) -> int:
        """A socket per connection of its pool (``stores.base.descriptors_held``)."""
        return self.options.max_pool

    async def close(self) -> None:
        """Apply deferred use counts and close the pool. Idempotent."""
        if self._pool.closed:
            return
        self._pool.closed = True  # no new work; the drain below may still connect
        if not self._pool.opened:
            return
        try:
            await self._cache.close()
            await self._usage.drain()  # on the pool, still open for it
        finally:
            await self._pool.close()

    # --- plumbing --------------------------------------------------------------------------

    async def _bump_later(self, scope_key: str, bumps: Mapping[int, builtins.list[int]]
                          ) -> builtins.list[int]:
        """Apply deferred bumps; the seqs of those still locked (active, to try again)."""
        seqs = sorted(bumps)
        async with self._connection(closing_ok=True) as conn:
            cursor = await conn.execute(self.sql.bump_later, {
                "scope": scope_key, "seqs": seqs, "uses": [bumps[s][0] for s in seqs],
                "lasts": [bumps[s][1] for s in seqs]})
            done = {seq for (seq,) in await cursor.fetchall()}
            rest = [seq for seq in seqs if seq not in done]
            if not rest:
                return []
            cursor = await conn.execute(self.sql.active_seqs,
                                        {"scope": scope_key, "seqs": rest})
            return [seq for (seq,) in await cursor.fetchall()]


async def _rows_in_slices(conn: Any, statement: str, scope_key: str) -> builtins.list[Any]:
    """Every row ``statement`` answers for the scope, a slice at a time through a
    server-side cursor with the event loop let in between (a large scope's whole index in
    one result holds it for tens of milliseconds). The caller holds a transaction."""
    rows: builtins.list[Any] = []
    async with conn.cursor(name="scopemem_copy", binary=True) as cursor:
        await cursor.execute(statement, {"scope": scope_key})
        while batch := await cursor.fetchmany(512):
            rows.extend(batch)
            await asyncio.sleep(0)
    return rows
