"""The PostgreSQL store: every scope in one table, any number of processes on any number
of machines, through psycopg 3's async pool.

What it decides is decided by ``scopemem.core.engine``, exactly as in the other stores;
this module only finds the rows the engine asks for and persists what it answers. A copy
of a scope's postings may be kept in memory (``cache.py``), but it answers only when
the scope's change counter, read from the server with every retrieval, is the one it was
read at, so a process never contradicts another's write. See ``docs/storage.md`` for the
schema and why.

Reads (``reads.py``): one statement reads each query term's postings with the scope's
active count; the engine weighs them and picks the candidates; a second statement reads
just the candidates' rows, and a third counts a use of what is returned (skipping rows a
writer holds; ``usage.py`` counts those a moment later). The last two are one statement
when every candidate is returned anyway.

Writes: one transaction per batch. It takes the scope's row in ``scopes`` FOR UPDATE (so
writers to a scope queue there, across processes, and the next seq is read under the lock),
reads and locks the rows the batch can touch, lets ``batch.plan_batch`` run the engine over
them, inserts and changes rows in two pipelined ``executemany`` calls and keeps the postings
in step, evicts above the cap, purges dead rows past the retention (a swept row is scrubbed
and kept) and records the new last seq and active count. All of it commits, or none.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Literal, overload

from scopemem.core import engine
from scopemem.core.browse import DEFAULT_REACH_RETENTION_DAYS
from scopemem.core.provenance import person_id, scrub_source
from scopemem.core.ranking import Ranking
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    Candidate,
    Kind,
    PurgeResult,
    Record,
    Status,
    SweepResult,
    WriteCounts,
)
from scopemem.core.scopes import memory_id, record_seq
from scopemem.core.text import normalize_text
from scopemem.errors import ScopeLimitReached, StoreBusy, StoreError, StoreRefused
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
from scopemem.stores.postgres import migrations, reads
from scopemem.stores.postgres.browse import Browse
from scopemem.stores.postgres.counts import Counts, add_rows
from scopemem.stores.postgres.options import PostgresOptions, options_from_settings
from scopemem.stores.postgres.porting import Porting
from scopemem.stores.postgres.statements import Statements, bigints, record_of
from scopemem.stores.postgres.usage import DeferredUsage
from scopemem.stores.postgres.vectors import Vectors
from scopemem.stores.shared import batches
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.batches import PURGE_ROWS
from scopemem.stores.shared.cache import PostingsCache, ScopeCopy
from scopemem.stores.shared.tokens import postings_of, record_tokens

__all__ = ["PostgresStore"]

log = logging.getLogger("scopemem.stores.postgres")

# The most dead rows past the retention one write purges (as the SQLite store does).
META_FOLDING = "folding"


def _psycopg() -> Any:
    try:
        import psycopg  # deferred: the plugin list must load without it
        import psycopg_pool
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise StoreError("postgres store: psycopg is not installed"
                         " (pip install -e '.[postgres]' from the scopemem checkout)") from exc
    return psycopg, psycopg_pool


class PostgresStore(Porting, Counts):
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
        self._pool: Any = None
        self._ready_lock: asyncio.Lock | None = None
        self._closed = False
        self._usage = DeferredUsage(self._bump_later)
        # Copies of large scopes' postings, checked against each scope's change counter
        # with every retrieval (``cache.py``).
        self._cache = PostingsCache(options.postings_cache, options.cache_min_postings)
        # Browsing (``browse.py``): pages, histories and the reach log.
        self._browse = Browse(options.schema, self._connection, clock, reach_retention_days)
        self.scope_page = self._browse.scope_page
        self.record_page = self._browse.record_page
        self.record_history = self._browse.record_history
        self.read_count_totals = self._browse.read_count_totals
        self.log_reaches = self._browse.log_reaches
        self.read_reaches = self._browse.read_reaches
        # The semantic lane's vectors (``vectors.py``).
        vectors = Vectors(options.schema, self._connection)
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
        check_scope_key(scope_key)
        now = self._clock()
        terms = engine.query_terms(query, self.analyzer)
        if not terms.terms or limit <= 0:
            return []
        async with self._connection() as conn:
            return await reads.search(conn, self.sql, self._usage, self.ranking, scope_key,
                                      terms, limit, now, bump, self._cache, self._copy)

    async def _copy(self, scope_key: str) -> ScopeCopy | None:
        """The scope's whole index as it is now, for the worker's copy (``cache.py``)."""
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
        for scope_key, ids in used.items():
            check_scope_key(scope_key)
            seqs = sorted({seq for seq in (batches.seq_in_scope(scope_key, record_id)
                                           for record_id in ids) if seq is not None})
            if not seqs:
                continue
            async with self._connection() as conn:
                done = await reads.mark_used(conn, self.sql, self._usage, scope_key, seqs, now)
            marked += done
        return marked

    async def write(self, scope_key: str, candidates: Sequence[Candidate],
                    cap: int | None = None) -> WriteCounts:
        check_scope_key(scope_key)
        cap = self.cap if cap is None else check_cap(cap)
        if not candidates:
            return WriteCounts()
        fitted, dropped = salient_batch(candidates)
        if not fitted:
            return dropped
        now = self._clock()
        # Pipelined: a statement whose answer nothing waits for is sent at once, so the
        # batch waits on the server only for the rows it reads (the scope's row, the rows
        # the batch can touch, the eviction's) and the commit.
        async with self._connection() as conn, self._pipeline(conn), conn.transaction():
            last_seq, active, thread = await self._lock_scope(conn, scope_key, now,
                                                              create=True)
            norms, seqs = batches.lookup_keys(scope_key, fitted)
            cursor = await conn.execute(self.sql.batch_rows,
                                        {"scope": scope_key, "norms": norms, "seqs": bigints(seqs)})
            known = [record_of(row) for row in await cursor.fetchall()]
            plan = batches.plan_batch(scope_key, fitted, known, last_seq + 1, now)
            await self._persist(conn, scope_key, plan, thread, now)
            evicted: list[int] = []
            live = active + plan.live_delta
            if live > cap:
                evicted = await self._evict(conn, scope_key, live - cap, now)
            retention = {"scope": scope_key, "rows": PURGE_ROWS,
                         "cutoff": retention_cutoff(now, self.retention_days)}
            for statement in (self.sql.scrub_swept, self.sql.purge):
                await conn.execute(statement, retention)
            await conn.execute(self.sql.set_counts, {
                "scope": scope_key, "last": plan.next_seq - 1, "active": live - len(evicted)})
            counts = plan.counts + WriteCounts(evicted=len(evicted))
            await add_rows(conn, self.sql, counting.write_rows(scope_key, counts, now))
        return counts + dropped

    async def _persist(self, conn: Any, scope_key: str, plan: batches.BatchPlan,
                       previous: str | None, now: int) -> None:
        """The batch's new rows and their postings, and its changes to existing rows (those
        it retired leave the index); ``previous`` is the thread of the row before the
        first new one (None when it is gone)."""
        async with conn.cursor() as cursor:
            if plan.inserts:
                await cursor.executemany(self.sql.insert, [
                    (scope_key, record_seq(r.id), r.id, r.kind.value, r.text,
                     normalize_text(r.text), list(r.keywords), r.source_thread_key,
                     r.source_run_id, r.created_at, r.last_used_at, r.use_count, r.confidence,
                     r.supersedes, r.restates, r.status.value, r.source.value,
                     None if r.is_active else now, record_tokens(r, self.analyzer))
                    for r in plan.inserts])
                terms, seqs, continues = postings_of(plan.inserts, previous, self.analyzer)
                await conn.execute(self.sql.post, {"scope": scope_key, "terms": terms,
                                                   "seqs": bigints(seqs), "continues": continues})
            if plan.changes:
                await cursor.executemany(self.sql.change, [
                    (r.use_count, r.last_used_at, r.confidence, r.status.value,
                     r.status.value, now, scope_key, record_seq(r.id))
                    for r in plan.changes])
                retired = [record_seq(r.id) for r in plan.changes if not r.is_active]
                if retired:
                    await conn.execute(self.sql.unpost, {"scope": scope_key,
                                                     "seqs": bigints(retired)})

    async def _evict(self, conn: Any, scope_key: str, excess: int, now: int) -> list[int]:
        """The seqs of the rows evicted to bring the scope down by ``excess``."""
        cursors = [await conn.execute(statement, {"scope": scope_key, "excess": excess})
                   for statement in (self.sql.lru_never_used, self.sql.lru_used)]
        groups = [await cursor.fetchall() for cursor in cursors]  # one wait when pipelined
        evicted = batches.pick_eviction(groups[0], groups[1], excess)
        await self._retire_seqs(conn, scope_key, evicted, Status.EVICTED, now)
        return evicted

    async def _retire(self, conn: Any, scope_key: str, records: Sequence[Record],
                      status: Status, now: int) -> int:
        """Retire the active ones of ``records`` with ``status``, out of the index; how many."""
        return await self._retire_seqs(conn, scope_key, [record_seq(r.id) for r in records],
                                       status, now)

    async def _retire_seqs(self, conn: Any, scope_key: str, seqs: Sequence[int],
                           status: Status, now: int) -> int:
        """Retire the active ones of rows ``seqs`` with ``status``, out of the index; how
        many."""
        if not seqs:
            return 0
        cursor = await conn.execute(self.sql.retire, {"scope": scope_key, "seqs": bigints(seqs),
                                                      "status": status.value, "now": now})
        retired = [seq for (seq,) in await cursor.fetchall()]
        if retired:
            await conn.execute(self.sql.unpost, {"scope": scope_key,
                                                     "seqs": bigints(retired)})
        return len(retired)

    async def list(self, scope_key: str, limit: int, query: str | None = None,
                   kind: Kind | None = None) -> list[Record]:
        check_scope_key(scope_key)
        if limit <= 0:
            return []
        tokens: list[str] | None = None
        if query is not None:
            tokens = list(engine.query_terms(query, self.analyzer).prefilter)
            if not tokens:
                return []
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
        now = self._clock()
        async with self._connection() as conn, conn.transaction():
            if await self._lock_scope(conn, scope_key, now, create=False) is None:
                return False
            params = {"scope": scope_key, "seq": seq, "id": memory_id(scope_key, seq),
                      "now": now, "seqs": [seq]}
            cursor = await conn.execute(self.sql.active_seqs, params)
            if not await cursor.fetchall():
                return False
            await conn.execute(self.sql.unpost, params)  # while the row holds its tokens
            cursor = await conn.execute(self.sql.forget, params)
            if cursor.rowcount <= 0:
                return False
            await conn.execute(self.sql.add_active, {"scope": scope_key, "delta": -1})
            await add_rows(conn, self.sql, counting.forget_rows(scope_key, now))
            return True

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        check_scope_key(scope_key)
        now = self._clock()
        async with self._connection() as conn, conn.transaction():
            if not dry_run and await self._lock_scope(conn, scope_key, now,
                                                      create=False) is None:
                return SweepResult(swept=0)
            cursor = await conn.execute(self.sql.active_facts, {"scope": scope_key})
            swept = engine.plan_sweep([record_of(row) for row in await cursor.fetchall()])
            if dry_run:
                return SweepResult(swept=len(swept), ids=tuple(r.id for r in swept))
            retired = await self._retire(conn, scope_key, swept, Status.SWEPT, now)
            await conn.execute(self.sql.add_active, {"scope": scope_key, "delta": -retired})
            await add_rows(conn, self.sql, counting.sweep_rows(scope_key, retired, now))
        return SweepResult(swept=len(swept))

    async def delete_scope(self, scope_key: str) -> int:
        """Delete every record of ``scope_key``, whatever its status, with its postings and
        its day counters, in one transaction; the number of records deleted (0: no such
        scope). The scope's row stays, emptied, so its ids are never given again."""
        check_scope_key(scope_key)
        async with self._connection() as conn, conn.transaction():
            if await self._lock_scope(conn, scope_key, self._clock(), create=False) is None:
                return 0
            params = {"scope": scope_key}
            await conn.execute(self.sql.delete_postings, params)
            cursor = await conn.execute(self.sql.delete_records, params)
            deleted = max(cursor.rowcount, 0)
            await conn.execute(self.sql.delete_counters, params)
            await conn.execute(self.sql.find_peaks, params)
            await conn.execute(self.sql.empty_scope, params)
            await conn.execute(self._browse.drop_scope, params)
        return int(deleted)

    async def scrub_provenance(self, scope_key: str, person_key: str) -> int:
        """Replace the person ``person_key`` names in the scope's thread keys and run ids
        (``core.provenance``), and delete the scope's reaches that name them, in one
        transaction; the number of records changed."""
        check_scope_key(scope_key)
        person = person_id(check_scope_key(person_key))
        if not person:
            return 0
        async with self._connection() as conn, conn.transaction():
            if await self._lock_scope(conn, scope_key, self._clock(), create=False) is None:
                return 0
            cursor = await conn.execute(self.sql.naming, {"scope": scope_key,
                                                          "person": person})
            changed = []
            for seq, thread, run in await cursor.fetchall():
                new_thread, new_run = scrub_source(thread, person), scrub_source(run, person)
                if new_thread is not thread or new_run is not run:
                    changed.append((new_thread, new_run, scope_key, seq))
            if changed:
                async with conn.cursor() as cur:
                    await cur.executemany(self.sql.set_source, changed)
                await conn.execute(self.sql.add_active, {"scope": scope_key, "delta": 0})
            await self._browse.scrub_reaches(conn, scope_key, person)
        return len(changed)

    async def purge(self) -> PurgeResult:
        """The retention purge every write applies to its scope, applied now to every scope,
        one transaction each."""
        now = self._clock()
        retention = {"rows": None, "cutoff": retention_cutoff(now, self.retention_days)}
        result = PurgeResult()
        for scope_key in await self.export_scopes():
            async with self._connection() as conn, conn.transaction():
                if await self._lock_scope(conn, scope_key, now, create=False) is None:
                    continue
                done = []
                for statement in (self.sql.purge, self.sql.scrub_swept):
                    cursor = await conn.execute(statement, {**retention, "scope": scope_key})
                    done.append(max(cursor.rowcount, 0))
                if any(done):
                    await conn.execute(self.sql.add_active, {"scope": scope_key, "delta": 0})
            result += PurgeResult(purged=done[0], scrubbed=done[1])
        return result

    async def flush(self) -> None:
        """Apply the use counts still deferred now (``close`` applies them too)."""
        await self._usage.drain()

    async def ready(self) -> str | None:
        """The readiness check (``stores.base.store_ready``): the pool opens (the schema
        migrated) and one of its connections answers a query within the pool's timeout."""
        async with self._connection() as conn:
            await conn.execute("SELECT 1")
        return None

    def max_descriptors(self) -> int:
        """The most file descriptors the store holds (``stores.base.descriptors_held``):
        one socket per connection of its pool."""
        return self.options.max_pool

    async def close(self) -> None:
        """Apply deferred use counts and close the pool. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._pool is None:
            return
        try:
            await self._cache.close()
            await self._usage.drain()  # on the pool, still open for it
        finally:
            pool, self._pool = self._pool, None
            await pool.close()

    # --- plumbing --------------------------------------------------------------------------

    @overload
    async def _lock_scope(self, conn: Any, scope_key: str, now: int, *,
                          create: Literal[True]) -> tuple[int, int, str | None]: ...

    @overload
    async def _lock_scope(self, conn: Any, scope_key: str, now: int, *,
                          create: Literal[False]) -> tuple[int, int, str | None] | None: ...

    async def _lock_scope(self, conn: Any, scope_key: str, now: int, *, create: bool
                          ) -> tuple[int, int, str | None] | None:
        """Take the scope's row FOR UPDATE (creating it when ``create``): its last seq,
        active count and the thread of its last row (None when gone), or None when the
        scope has no row and ``create`` is false."""
        cursor = await conn.execute(self.sql.lock_scope, {"scope": scope_key})
        row = await cursor.fetchone()
        if row is not None or not create:
            return None if row is None else (row[0], row[1], row[2])
        if self.options.max_scopes:
            # New scopes are counted one at a time, across processes.
            await conn.execute("SELECT pg_advisory_xact_lock(%s)",
                               (migrations.advisory_key(self.schema) ^ 1,))
            held = await self._scalar(conn, self.sql.count_scopes, None)
            if held >= self.options.max_scopes:
                raise ScopeLimitReached(
                    f"postgres store: schema {self.schema!r} holds {held} scopes, the limit"
                    f" (max_scopes = {self.options.max_scopes}); a write to a new scope is"
                    " refused")
        await conn.execute(self.sql.new_scope, {"scope": scope_key, "now": now})
        cursor = await conn.execute(self.sql.lock_scope, {"scope": scope_key})
        row = await cursor.fetchone()
        return row[0], row[1], row[2]

    @staticmethod
    def _pipeline(conn: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        """Pipeline mode on ``conn`` where the libpq has it (14 and later; psycopg's binary
        package ships one), else nothing: the same statements, each waited for."""
        psycopg, _pool = _psycopg()
        if psycopg.Pipeline.is_supported():
            return conn.pipeline()  # type: ignore[no-any-return]
        return contextlib.nullcontext()

    @staticmethod
    async def _scalar(conn: Any, statement: str, params: Any) -> Any:
        cursor = await conn.execute(statement, params)
        row = await cursor.fetchone()
        return row[0]

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

    @contextlib.asynccontextmanager
    async def _connection(self, *, closing_ok: bool = False) -> AsyncIterator[Any]:
        """A pooled autocommit connection; psycopg's errors become ``StoreError``."""
        if self._closed and not closing_ok:
            raise StoreError("the postgres store is closed")
        psycopg, psycopg_pool = _psycopg()
        pool = await self._ready()
        try:
            async with pool.connection() as conn:
                yield conn
        except psycopg_pool.PoolTimeout as exc:
            raise StoreBusy(f"postgres store: no connection free: {exc}") from exc
        except psycopg.errors.QueryCanceled as exc:
            raise StoreBusy(f"postgres store: statement timed out: {exc}") from exc
        except psycopg.DataError as exc:  # the input itself: a smaller call may pass
            raise StoreRefused(f"postgres store: {type(exc).__name__}: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"postgres store: {type(exc).__name__}: {exc}") from exc

    async def _ready(self) -> Any:
        """The open pool, the schema migrated (once per store)."""
        if self._pool is not None:
            return self._pool
        if self._closed:
            raise StoreError("the postgres store is closed")
        if self._ready_lock is None:
            self._ready_lock = asyncio.Lock()
        async with self._ready_lock:
            if self._pool is not None:
                return self._pool
            psycopg, psycopg_pool = _psycopg()
            options = self.options
            kwargs: dict[str, Any] = {"autocommit": True}
            if options.statement_timeout_ms:
                kwargs["options"] = f"-c statement_timeout={options.statement_timeout_ms}"
            try:
                async with await psycopg.AsyncConnection.connect(
                        options.dsn, autocommit=True) as conn:
                    await migrations.migrate(conn, self.schema, self._refold)
                pool = psycopg_pool.AsyncConnectionPool(
                    options.dsn, min_size=options.min_pool, max_size=options.max_pool,
                    kwargs=kwargs, open=False, name=f"scopemem-{self.schema}")
                await pool.open(wait=options.min_pool > 0, timeout=30)
            except psycopg.Error as exc:
                raise StoreError(f"postgres store: cannot open schema {self.schema!r}:"
                                 f" {type(exc).__name__}: {exc}") from exc
            except psycopg_pool.PoolTimeout as exc:
                raise StoreError(f"postgres store: cannot connect: {exc}") from exc
            if self._closed:
                await pool.close()
                raise StoreError("the postgres store is closed")
            self._pool = pool
            return pool

    async def _refold(self, conn: Any) -> None:
        """Re-derive every row's dedup key and tokens when they were written under other
        tokenizing rules or languages (``Analyzer.signature``). Runs under the migration
        lock, in one transaction; rows, ids, statuses and use counts are untouched."""
        signature = self.analyzer.signature
        cursor = await conn.execute(self.sql.get_meta, (META_FOLDING,))
        row = await cursor.fetchone()
        if row is not None and row[0] == signature:
            return
        async with conn.transaction():
            cursor = await conn.execute(self.sql.all_rows)
            rows = await cursor.fetchall()
            if rows:
                async with conn.cursor() as cur:
                    await cur.executemany(self.sql.refold, [
                        (normalize_text(record.text),
                         record_tokens(record, self.analyzer) if record.is_active else [],
                         row[0], row[1])
                        for row in rows for record in (record_of(row[1:]),)])
                log.info("postgres store: schema %s: re-derived the tokens of %d records (%s)",
                         self.schema, len(rows), signature)
            await conn.execute(self.sql.unpost_all)
            await conn.execute(self.sql.post_all)
            await conn.execute(self.sql.bump_generations)  # no copy of the old terms holds
            await conn.execute(self.sql.set_meta, (META_FOLDING, signature))


async def _rows_in_slices(conn: Any, statement: str, scope_key: str, size: int = 512
                          ) -> builtins.list[Any]:
    """Every row ``statement`` answers for the scope, through a server-side cursor a slice
    at a time with the event loop let in between: receiving and converting a large scope's
    whole index in one result would hold the loop for tens of milliseconds. The caller holds
    a transaction."""
    rows: builtins.list[Any] = []
    async with conn.cursor(name="scopemem_copy", binary=True) as cursor:
        await cursor.execute(statement, {"scope": scope_key})
        while batch := await cursor.fetchmany(size):
            rows.extend(batch)
            await asyncio.sleep(0)
    return rows
