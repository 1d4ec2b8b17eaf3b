"""A write batch, a forget, a sweep, deleting a scope, scrubbing provenance, the purge and the
day counters on one shard: each one ``BEGIN IMMEDIATE`` transaction on the shard's writing
thread, committed whole or not at all, the scope's pending uses saved first
(``transaction``). ``add_counts`` is one transaction per shard the call touches;
``ScopeLimit`` is ``max_scopes``.
"""

from __future__ import annotations

import builtins
import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from scopemem.core import engine
from scopemem.core.records import (
    Candidate,
    CountRow,
    PurgeResult,
    Record,
    Status,
    SweepResult,
    WriteCounts,
)
from scopemem.core.scopes import memory_id, record_seq
from scopemem.core.words import Analyzer
from scopemem.errors import ScopeLimitReached, StoreError
from scopemem.stores.base import Clock, check_scope_key
from scopemem.stores.shared import batches
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.batches import PURGE_ROWS
from scopemem.stores.shared.sql import scrubbed_sources
from scopemem.stores.shared.tokens import documents, record_tokens
from scopemem.stores.sqlite_shared import index
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.shards import Shards
from scopemem.stores.sqlite_shared.usage import PendingUses, relaxed

__all__ = ["Counts", "ScopeLimit", "add_rows", "delete_scope", "forget", "purge",
           "scrub_provenance", "sweep", "write"]


def add_rows(conn: Any, rows: Sequence[CountRow]) -> None:
    """Add counter rows in the caller's transaction."""
    if rows:
        conn.executemany(st.ADD_COUNT, [(r.scope_key, r.day, r.name, r.value) for r in rows])


@contextlib.contextmanager
def transaction(conn: Any, uses: PendingUses, shard: int, scope_key: str) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` with the scope's pending uses saved first (so the batch's dedup
    and eviction see them, ``usage.py``); rolled back, uses pending again, if the block
    raises."""
    with uses.saving(shard, scope_key) as entries, sqlite_sql.immediate(conn):
        if entries:
            uses.apply(conn, shard, entries)
        yield


def _scope_row(conn: Any, scope_key: str) -> tuple[int, int, int, int, int | None] | None:
    """The scope's last seq, active count, change counter, id in the token index and its
    newest record's creation time (None: no such scope)."""
    rows = conn.execute(st.LOCK_SCOPE, {"scope": scope_key}).fetchall()
    return (rows[0][0], rows[0][1], rows[0][2], rows[0][3], rows[0][4]) if rows else None


def write(conn: Any, uses: PendingUses, shard: int, analyzer: Analyzer, scope_key: str,
          fitted: Sequence[Candidate], cap: int, now: int, cutoff: int,
          reserve_scope: Callable[[], None]) -> WriteCounts:
    """Write a fitted batch; ``reserve_scope`` is called before a new scope's row is made
    (it raises ``ScopeLimitReached`` past ``max_scopes``). The counts."""
    with transaction(conn, uses, shard, scope_key):
        row = _scope_row(conn, scope_key)
        if row is None:
            reserve_scope()
            conn.execute(st.NEW_SCOPE, {"scope": scope_key, "now": now})
            row = _scope_row(conn, scope_key)
            assert row is not None
            if row[3] > index.MAX_SID:
                raise StoreError(f"sqlite store: shard of {scope_key!r} has given every id")
        last_seq, active, _generation, sid, last_write = row
        # A write that read its clock before another process's write to the scope committed
        # is still the newer record: never older than the scope's newest (the eviction's
        # order, creation time then seq, stays the commit order).
        now = max(now, last_write or 0)
        norms, seqs = batches.lookup_keys(scope_key, fitted)
        known = [sqlite_sql.record(r) for r in conn.execute(st.BATCH_ROWS, {
            "scope": scope_key, "norms": json.dumps(norms), "seqs": json.dumps(seqs)})]
        plan = batches.plan_batch(scope_key, fitted, known, last_seq + 1, now)
        _persist(conn, analyzer, scope_key, sid, plan, last_seq, now)
        evicted: list[int] = []
        live = active + plan.live_delta
        if live > cap:
            evicted = _evict(conn, scope_key, sid, live - cap, now)
        for statement in (SQL.scrub_swept, SQL.purge):
            conn.execute(statement, {"scope": scope_key, "rows": PURGE_ROWS, "cutoff": cutoff})
        conn.execute(SQL.set_counts, {"scope": scope_key, "last": plan.next_seq - 1,
                                     "active": live - len(evicted)})
        counts = plan.counts + WriteCounts(evicted=len(evicted))
        add_rows(conn, counting.write_rows(scope_key, counts, now))
    return counts


def _persist(conn: Any, analyzer: Analyzer, scope_key: str, sid: int,
             plan: batches.BatchPlan, last_seq: int, now: int) -> None:
    """The batch's new rows and their postings, and its changes to existing rows (those it
    retired leave the postings)."""
    if plan.inserts:
        held = {record_seq(r.id): record_tokens(r, analyzer) for r in plan.inserts}
        conn.execute(st.INSERT_ROWS, {"scope": scope_key, "rows": json.dumps([
            sqlite_sql.insert_row(seq, r, now, held[seq])
            for r in plan.inserts for seq in (record_seq(r.id),)], ensure_ascii=False)})
        thread = None
        if last_seq:
            rows = conn.execute(st.THREAD_OF, {"scope": scope_key, "seq": last_seq}).fetchall()
            thread = rows[0][0] if rows else None
        posted = documents(plan.inserts, thread, held)
        if posted and posted[-1][0] > index.MAX_SEQ:
            raise StoreError(f"sqlite store: scope {scope_key!r} has used every id")
        index.post(conn, sid, posted)
    if plan.changes:
        conn.execute(st.CHANGE_ROWS, {"scope": scope_key, "now": now, "rows": json.dumps([
            (record_seq(r.id), r.use_count, r.last_used_at, r.confidence, r.status.value)
            for r in plan.changes])})
        index.unpost(conn, sid, [record_seq(r.id) for r in plan.changes if not r.is_active])


def _evict(conn: Any, scope_key: str, sid: int, excess: int, now: int) -> list[int]:
    """The seqs of the rows evicted to bring the scope down by ``excess``."""
    groups = [conn.execute(statement, {"scope": scope_key, "excess": excess}).fetchall()
              for statement in (SQL.lru_never_used, SQL.lru_used)]
    evicted = batches.pick_eviction(groups[0], groups[1], excess)
    return _retire(conn, scope_key, sid, evicted, Status.EVICTED, now)


def _retire(conn: Any, scope_key: str, sid: int, seqs: Sequence[int], status: Status,
            now: int) -> list[int]:
    """Retire the active ones of rows ``seqs`` with ``status``, out of the postings; their
    seqs."""
    if not seqs:
        return []
    index.unpost(conn, sid, seqs)
    rows = conn.execute(SQL.retire, {"scope": scope_key, "seqs": json.dumps(list(seqs)),
                                    "status": status.value, "now": now}).fetchall()
    return [seq for (seq,) in rows]


def forget(conn: Any, uses: PendingUses, shard: int, path: str, scope_key: str, seq: int,
           now: int) -> bool:
    """Scrub one active record: its text, dedup key, keywords and tokens emptied, out of
    the postings. SQLite's ``secure_delete`` zeroes the freed cells, and the WAL of the
    shard file ``path`` is truncated after the commit."""
    with transaction(conn, uses, shard, scope_key):
        row = _scope_row(conn, scope_key)
        if row is None:
            return False
        params = {"scope": scope_key, "seq": seq, "id": memory_id(scope_key, seq), "now": now,
                  "seqs": json.dumps([seq])}
        if not conn.execute(SQL.active_seqs, params).fetchall():
            return False
        conn.execute(SQL.forget, params)
        if conn.changes() <= 0:
            return False
        # Out of the index, and the index merged: a forgotten record leaves no trace.
        index.unpost(conn, row[3], [seq])
        index.scrub(conn)
        conn.execute(SQL.add_active, {"scope": scope_key, "delta": -1})
        add_rows(conn, counting.forget_rows(scope_key, now))
    sqlite_sql.truncate_wal(conn, path, "a forget")
    return True


def delete_scope(conn: Any, uses: PendingUses, shard: int, path: str, scope_key: str) -> int:
    """Delete every record of the scope (whatever its status), its documents in the token
    index and its counters, in one transaction, then merge the index and truncate the WAL
    of ``path`` so no trace of its terms stays. Its row in ``scopes`` stays, emptied, with
    its last seq and its id in the index, so no id the scope gave is ever given again. The
    number of records deleted."""
    with transaction(conn, uses, shard, scope_key):
        row = _scope_row(conn, scope_key)
        if row is None:
            deleted = 0
        else:
            index.unpost_scope(conn, row[3])
            conn.execute(SQL.delete_records, {"scope": scope_key})
            deleted = int(conn.changes())
            conn.execute(st.DELETE_COUNTERS, {"scope": scope_key})
            conn.execute(SQL.empty_scope, {"scope": scope_key})
            index.scrub(conn)
    sqlite_sql.truncate_wal(conn, path, "deleting a scope")
    return deleted


def scrub_provenance(conn: Any, uses: PendingUses, shard: int, path: str, scope_key: str,
                     person: str) -> int:
    """Replace ``person`` in the scope's thread keys and run ids (``core.provenance``), in
    one transaction, then (if a row changed) truncate the WAL of ``path``; the number of
    rows changed."""
    with transaction(conn, uses, shard, scope_key):
        if not person or _scope_row(conn, scope_key) is None:
            return 0
        changed = scrubbed_sources(conn.execute(SQL.naming, {
            "scope": scope_key, "person": person}).fetchall(), scope_key, person)
        if changed:
            conn.executemany(SQL.set_source, changed)
            conn.execute(SQL.next_generation, {"scope": scope_key})
    if changed:
        sqlite_sql.truncate_wal(conn, path, "scrubbing provenance")
    return len(changed)


def purge(conn: Any, uses: PendingUses, shard: int, scope_key: str, cutoff: int
          ) -> PurgeResult:
    """The retention purge a write applies (``SQL.purge``, ``SQL.scrub_swept``), on every due row of
    the scope, in one transaction."""
    with transaction(conn, uses, shard, scope_key):
        done = []
        for statement in (SQL.purge, SQL.scrub_swept):
            conn.execute(statement, {"scope": scope_key, "rows": -1, "cutoff": cutoff})
            done.append(int(conn.changes()))
        if any(done):
            conn.execute(SQL.next_generation, {"scope": scope_key})
    return PurgeResult(purged=done[0], scrubbed=done[1])


def sweep(conn: Any, uses: PendingUses, shard: int, scope_key: str, now: int, dry_run: bool
          ) -> SweepResult:
    """Retire the active facts the gate would refuse today (``engine.plan_sweep``)."""
    if dry_run:
        rows = conn.execute(SQL.active_facts, {"scope": scope_key}).fetchall()
        swept = engine.plan_sweep([sqlite_sql.record(row) for row in rows])
        return SweepResult(swept=len(swept), ids=tuple(r.id for r in swept))
    with transaction(conn, uses, shard, scope_key):
        row = _scope_row(conn, scope_key)
        if row is None:
            return SweepResult(swept=0)
        rows = conn.execute(SQL.active_facts, {"scope": scope_key}).fetchall()
        swept_records: list[Record] = engine.plan_sweep([sqlite_sql.record(r) for r in rows])
        retired = _retire(conn, scope_key, row[3], [record_seq(r.id) for r in swept_records],
                          Status.SWEPT, now)
        conn.execute(SQL.add_active, {"scope": scope_key, "delta": -len(retired)})
        add_rows(conn, counting.sweep_rows(scope_key, len(retired), now))
    return SweepResult(swept=len(swept_records))


class ScopeLimit:
    """``max_scopes``: new scopes counted against it (0: no limit)."""

    def __init__(self, shards: Shards, max_scopes: int, directory: str) -> None:
        self._shards = shards
        self._max = max_scopes
        self._directory = directory

    def reserve(self) -> None:
        """Count a new scope against ``max_scopes`` (on the write pool, inside the new
        scope's write transaction); raise ``ScopeLimitReached`` past it. Counted anew each
        time: the other processes serving the directory (``serve --workers N``) make
        scopes too, so no count of this process's stays true."""
        if not self._max:
            return
        held = sum(self._shards.count_scopes(shard) for shard in range(self._shards.count))
        if held >= self._max:
            raise ScopeLimitReached(
                f"sqlite store: {self._directory} holds {held} scopes, the limit"
                f" (max_scopes = {self._max}); a write to a new scope is refused")


class Counts:
    """``add_counts`` and ``read_counts`` of ``SharedSqliteStore``."""

    def __init__(self, shards: Shards, pools: ShardPools, scopes: ScopeLimit, clock: Clock, *,
                 synchronous: str) -> None:
        self._shards = shards
        self._pools = pools
        self._scopes = scopes
        self._clock = clock
        self._synchronous = synchronous

    async def add_counts(self, rows: Sequence[CountRow]) -> None:
        by_shard: dict[int, builtins.list[CountRow]] = {}
        for row in counting.check_rows(rows):
            by_shard.setdefault(self._shards.of(row.scope_key), []).append(row)
        for shard, group in sorted(by_shard.items()):
            await self._pools.write(shard, self._add_counts, group, create=True)

    def _add_counts(self, conn: Any, rows: Sequence[CountRow]) -> None:
        with relaxed(conn, self._synchronous), sqlite_sql.immediate(conn):
            now = self._clock()
            for scope_key in dict.fromkeys(row.scope_key for row in rows):
                if not conn.execute(st.LOCK_SCOPE, {"scope": scope_key}).fetchall():
                    self._scopes.reserve()
                    conn.execute(st.NEW_SCOPE, {"scope": scope_key, "now": now})
            add_rows(conn, rows)

    async def read_counts(self, scope_keys: Sequence[str] | None = None, *,
                          prefix: str | None = None, since_day: int = 0
                          ) -> builtins.list[CountRow]:
        keys = None if scope_keys is None else {check_scope_key(k) for k in scope_keys}
        shards = (range(self._shards.count) if keys is None
                  else sorted({self._shards.of(key) for key in keys}))
        rows: builtins.list[CountRow] = []
        for shard in shards:
            wanted = None if keys is None else [key for key in keys
                                                if self._shards.of(key) == shard]
            found: builtins.list[tuple[Any, ...]] = await self._pools.read(
                shard, _read_counts, since_day, prefix, wanted) or []
            rows.extend(CountRow(*row) for row in found
                        if counting.select_scope(row[0], keys, prefix))
        return sorted(rows, key=lambda r: (r.scope_key, r.day, r.name))


def _read_counts(conn: Any, since_day: int, prefix: str | None,
                 keys: builtins.list[str] | None) -> builtins.list[tuple[Any, ...]]:
    params = {"since": since_day, "prefix": prefix}
    if keys is None:
        return list(conn.execute(SQL.read_counts, params))
    return list(conn.execute(SQL.read_counts_of, {**params, "keys": json.dumps(keys)}))
