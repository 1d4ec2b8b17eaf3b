"""The PostgreSQL store's changes to a scope (a write batch, forget, sweep, deleting a scope,
scrubbing provenance, the retention purge, the day counters), each one transaction that
first takes the scope's row in ``scopes`` FOR UPDATE (``ScopeLock``; an import takes it
too, ``porting.py``). Writers to a scope queue there, across processes, and read its last
seq and active count under it. A scope gets its row the first time it is written, counted
or imported into, counted against ``max_scopes``. A write is pipelined: it waits on the
server only for what it reads. ``add_counts`` is one statement for every scope of the call;
a server crash may lose the last fraction of a second of counts, as it may lose use counts,
never a record. ``refold`` re-derives every row's tokens when the analyzer changed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Literal, overload

from scopemem.core import engine
from scopemem.core.provenance import person_id
from scopemem.core.records import (
    Candidate,
    CountRow,
    PurgeResult,
    Status,
    SweepResult,
    WriteCounts,
)
from scopemem.core.scopes import memory_id, record_seq
from scopemem.core.text import normalize_text
from scopemem.core.words import Analyzer
from scopemem.errors import ScopeLimitReached
from scopemem.stores.base import Clock, check_scope_key, retention_cutoff
from scopemem.stores.postgres import migrations
from scopemem.stores.postgres.browse import Browse
from scopemem.stores.postgres.options import PostgresOptions
from scopemem.stores.postgres.pool import Connect, pipeline
from scopemem.stores.postgres.statements import Statements, bigints, insert_row, record_of
from scopemem.stores.shared import batches
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.batches import PURGE_ROWS
from scopemem.stores.shared.sql import scrubbed_sources
from scopemem.stores.shared.tokens import documents, record_tokens

__all__ = ["Counts", "Locked", "ScopeLock", "Writes", "add_rows", "refold"]

log = logging.getLogger("scopemem.stores.postgres")

META_FOLDING = "folding"  # the meta row holding the analyzer's signature the rows follow

# A scope's row as its lock reads it: last seq, active count, the thread of its last row.
Locked = tuple[int, int, str | None, int | None]


class ScopeLock:
    """Takes a scope's row FOR UPDATE in the caller's transaction, making it when asked
    (counted against ``options.max_scopes``)."""

    def __init__(self, sql: Statements, options: PostgresOptions) -> None:
        self.sql = sql
        self.options = options

    @overload
    async def __call__(self, conn: Any, scope_key: str, now: int, *,
                       create: Literal[True]) -> Locked: ...

    @overload
    async def __call__(self, conn: Any, scope_key: str, now: int, *,
                       create: Literal[False]) -> Locked | None: ...

    async def __call__(self, conn: Any, scope_key: str, now: int, *, create: bool
                       ) -> Locked | None:
        """The scope's last seq, active count, the thread of its last row (None when
        gone) and its newest record's creation time (None: no record), or None when the
        scope has no row and ``create`` is false."""
        cursor = await conn.execute(self.sql.lock_scope, {"scope": scope_key})
        row = await cursor.fetchone()
        if row is not None or not create:
            return None if row is None else (row[0], row[1], row[2], row[3])
        options = self.options
        if options.max_scopes:
            # New scopes are counted one at a time, across processes.
            await conn.execute("SELECT pg_advisory_xact_lock(%s)",
                               (migrations.advisory_key(options.schema) ^ 1,))
            cursor = await conn.execute(self.sql.count_scopes)
            (held,) = await cursor.fetchone()
            if held >= options.max_scopes:
                raise ScopeLimitReached(
                    f"postgres store: schema {options.schema!r} holds {held} scopes, the"
                    f" limit (max_scopes = {options.max_scopes}); a write to a new scope is"
                    " refused")
        await conn.execute(self.sql.new_scope, {"scope": scope_key, "now": now})
        cursor = await conn.execute(self.sql.lock_scope, {"scope": scope_key})
        row = await cursor.fetchone()
        return row[0], row[1], row[2], row[3]


async def add_rows(conn: Any, sql: Statements, rows: Sequence[CountRow]) -> None:
    """Add ``rows`` in the caller's transaction (sorted, as ``merge_rows`` leaves them)."""
    if rows:
        await conn.execute(sql.add_counts, {
            "scopes": [row.scope_key for row in rows], "days": [row.day for row in rows],
            "names": [row.name for row in rows], "values": [row.value for row in rows]})


class Counts:
    """``add_counts`` and ``read_counts`` over ``connect``."""

    def __init__(self, sql: Statements, connect: Connect, clock: Clock,
                 lock_scope: ScopeLock) -> None:
        self.sql = sql
        self._connection = connect
        self._clock = clock
        self._lock_scope = lock_scope

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        checked = counting.check_rows(rows)
        if not checked:
            return
        now = self._clock()
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SET LOCAL synchronous_commit = off")
            for scope_key in sorted({row.scope_key for row in checked}):  # one lock order
                await self._lock_scope(conn, scope_key, now, create=True)
            await add_rows(conn, self.sql, checked)

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0) -> list[CountRow]:
        keys = None if scope_keys is None else sorted({check_scope_key(k) for k in scope_keys})
        if counting.no_scope_starts(prefix):
            return []
        async with self._connection() as conn:
            statement = self.sql.read_counts if keys is None else self.sql.read_counts_of
            cursor = await conn.execute(statement, {
                "since": since_day, "keys": keys, "prefix": prefix})
            return [CountRow(scope, day, name, value)
                    for scope, day, name, value in await cursor.fetchall()]


class Writes:
    """The transactions that change a scope's rows, over ``connect``."""

    def __init__(self, sql: Statements, analyzer: Analyzer, connect: Connect,
                 lock_scope: ScopeLock, browse: Browse, clock: Clock,
                 retention_days: int) -> None:
        self.sql = sql
        self.analyzer = analyzer
        self._connect = connect
        self._lock_scope = lock_scope
        self._browse = browse
        self._clock = clock
        self.retention_days = retention_days

    async def write(self, scope_key: str, fitted: Sequence[Candidate], cap: int
                    ) -> WriteCounts:
        """Write the checked, fitted batch under the scope's lock."""
        now = self._clock()
        # Pipelined: a statement whose answer nothing waits for is sent at once, so the
        # batch waits on the server only for the rows it reads (the scope's row, the rows
        # the batch can touch, the eviction's) and the commit.
        async with self._connect() as conn, pipeline(conn), conn.transaction():
            last_seq, active, thread, last_write = await self._lock_scope(
                conn, scope_key, now, create=True)
            # A write that read its clock before another process's write to the scope
            # committed is still the newer record: never older than the scope's newest (the
            # eviction's order, creation time then seq, stays the commit order).
            now = max(now, last_write or 0)
            norms, seqs = batches.lookup_keys(scope_key, fitted)
            cursor = await conn.execute(self.sql.batch_rows, {
                "scope": scope_key, "norms": norms, "seqs": bigints(seqs)})
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
        return counts

    async def _persist(self, conn: Any, scope_key: str, plan: batches.BatchPlan,
                       previous: str | None, now: int) -> None:
        """The batch's new rows and their postings, and its changes to existing rows (those
        it retired leave the index); ``previous`` is the thread of the row before the
        first new one (None when it is gone)."""
        async with conn.cursor() as cursor:
            if plan.inserts:
                held = {record_seq(r.id): record_tokens(r, self.analyzer) for r in plan.inserts}
                await cursor.executemany(self.sql.insert, [
                    insert_row(scope_key, seq, r, now, held[seq])
                    for r in plan.inserts for seq in (record_seq(r.id),)])
                posted = documents(plan.inserts, previous, held)
                await conn.execute(self.sql.post, {
                    "scope": scope_key, "terms": [t for _s, terms, _c in posted for t in terms],
                    "seqs": bigints(seq for seq, terms, _c in posted for _t in terms),
                    "continues": [c for _s, terms, c in posted for _t in terms]})
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
        await self._retire(conn, scope_key, evicted, Status.EVICTED, now)
        return evicted

    async def _retire(self, conn: Any, scope_key: str, seqs: Sequence[int],
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

    async def forget(self, scope_key: str, seq: int) -> bool:
        now = self._clock()
        async with self._connect() as conn, conn.transaction():
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
        async with self._connect() as conn, conn.transaction():
            if not dry_run and await self._lock_scope(conn, scope_key, now,
                                                      create=False) is None:
                return SweepResult(swept=0)
            cursor = await conn.execute(self.sql.active_facts, {"scope": scope_key})
            swept = engine.plan_sweep([record_of(row) for row in await cursor.fetchall()])
            if dry_run:
                return SweepResult(swept=len(swept), ids=tuple(r.id for r in swept))
            retired = await self._retire(conn, scope_key, [record_seq(r.id) for r in swept],
                                         Status.SWEPT, now)
            await conn.execute(self.sql.add_active, {"scope": scope_key, "delta": -retired})
            await add_rows(conn, self.sql, counting.sweep_rows(scope_key, retired, now))
        return SweepResult(swept=len(swept))

    async def delete_scope(self, scope_key: str) -> int:
        """Delete every record of ``scope_key``, whatever its status, with its postings, its
        day counters and its reaches, in one transaction; the number of records deleted (0:
        no such scope). The scope's row stays, emptied, so its ids are never given again."""
        check_scope_key(scope_key)
        async with self._connect() as conn, conn.transaction():
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
        async with self._connect() as conn, conn.transaction():
            if await self._lock_scope(conn, scope_key, self._clock(), create=False) is None:
                return 0
            cursor = await conn.execute(self.sql.naming, {"scope": scope_key,
                                                          "person": person})
            changed = scrubbed_sources(await cursor.fetchall(), scope_key, person)
            if changed:
                async with conn.cursor() as cur:
                    await cur.executemany(self.sql.set_source, changed)
                await conn.execute(self.sql.add_active, {"scope": scope_key, "delta": 0})
            await self._browse.scrub_reaches(conn, scope_key, person)
        return len(changed)

    async def purge(self, scope_keys: Sequence[str]) -> PurgeResult:
        """The retention purge every write applies to its scope, applied now to each of
        ``scope_keys``, one transaction each."""
        now = self._clock()
        retention = {"rows": None, "cutoff": retention_cutoff(now, self.retention_days)}
        result = PurgeResult()
        for scope_key in scope_keys:
            async with self._connect() as conn, conn.transaction():
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


async def refold(conn: Any, sql: Statements, analyzer: Analyzer, schema: str) -> None:
    """Re-derive every row's dedup key and tokens when they were written under other
    tokenizing rules or languages (``Analyzer.signature``). Runs under the migration
    lock, in one transaction; rows, ids, statuses and use counts are untouched."""
    signature = analyzer.signature
    cursor = await conn.execute(sql.get_meta, (META_FOLDING,))
    row = await cursor.fetchone()
    if row is not None and row[0] == signature:
        return
    async with conn.transaction():
        cursor = await conn.execute(sql.all_rows)
        rows = await cursor.fetchall()
        if rows:
            async with conn.cursor() as cur:
                await cur.executemany(sql.refold, [
                    (normalize_text(record.text),
                     record_tokens(record, analyzer) if record.is_active else [],
                     row[0], row[1])
                    for row in rows for record in (record_of(row[1:]),)])
            if row is None:  # a schema of a release that recorded no signature
                log.info("postgres store: schema %s: re-derived the tokens of %d records"
                         " (%s)", schema, len(rows), signature)
            else:
                # Another process may be using the schema under the recorded languages: it
                # would go on answering from terms this one has just replaced.
                log.warning("postgres store: schema %s: re-derived the tokens of %d records"
                            " (%s), written under %s: give every process using this schema"
                            " the same release and memory.languages, or each re-derives it"
                            " in turn", schema, len(rows), signature, row[0])
        await conn.execute(sql.unpost_all)
        await conn.execute(sql.post_all)
        await conn.execute(sql.bump_generations)  # no copy of the old terms holds
        await conn.execute(sql.set_meta, (META_FOLDING, signature))
