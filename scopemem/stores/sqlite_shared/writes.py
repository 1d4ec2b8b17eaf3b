"""A write batch, a forget, a sweep, deleting a scope, scrubbing provenance and the purge on
one shard: each one ``BEGIN IMMEDIATE`` transaction on the shard's writing thread, committed
whole or not at all, the scope's pending uses saved first (``transaction``).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs

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
from scopemem.errors import StoreError
from scopemem.stores.shared import batches
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.batches import PURGE_ROWS
from scopemem.stores.shared.sql import scrubbed_sources
from scopemem.stores.shared.tokens import index_tokens
from scopemem.stores.sqlite_shared import index
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared import statements as st
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["add_rows", "delete_scope", "forget", "purge", "scrub_provenance", "sweep",
           "write"]


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


def _scope_row(conn: Any, scope_key: str) -> tuple[int, int, int, int] | None:
    """The scope's last seq, active count, change counter and id in the token index
    (None: no such scope)."""
    rows = conn.execute(st.LOCK_SCOPE, {"scope": scope_key}).fetchall()
    return (rows[0][0], rows[0][1], rows[0][2], rows[0][3]) if rows else None


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
        last_seq, active, _generation, sid = row
        route = Route(scope_key, sid)
        norms, seqs = batches.lookup_keys(scope_key, fitted)
        known = [sqlite_sql.record(r) for r in conn.execute(st.BATCH_ROWS, {
            "scope": scope_key, "norms": json.dumps(norms), "seqs": json.dumps(seqs)})]
        plan = batches.plan_batch(scope_key, fitted, known, last_seq + 1, now)
        _persist(conn, analyzer, route, plan, last_seq, now)
        evicted: list[int] = []
        live = active + plan.live_delta
        if live > cap:
            evicted = _evict(conn, route, live - cap, now)
        for statement in (SQL.scrub_swept, SQL.purge):
            conn.execute(statement, {"scope": scope_key, "rows": PURGE_ROWS, "cutoff": cutoff})
        conn.execute(SQL.set_counts, {"scope": scope_key, "last": plan.next_seq - 1,
                                     "active": live - len(evicted)})
        counts = plan.counts + WriteCounts(evicted=len(evicted))
        add_rows(conn, counting.write_rows(scope_key, counts, now))
    return counts


@attrs.frozen
class Route:
    """The scope a write changes, and its id in the token index (``index.py``)."""

    scope_key: str
    sid: int


def _persist(conn: Any, analyzer: Analyzer, route: Route, plan: batches.BatchPlan,
             last_seq: int, now: int) -> None:
    """The batch's new rows and their postings, and its changes to existing rows (those it
    retired leave the postings)."""
    scope_key = route.scope_key
    if plan.inserts:
        held = {record_seq(r.id): index_tokens(r.text, r.keywords, analyzer)
                for r in plan.inserts}
        conn.execute(st.INSERT_ROWS, {"scope": scope_key, "rows": json.dumps([
            sqlite_sql.insert_row(seq, r, now, held[seq])
            for r in plan.inserts for seq in (record_seq(r.id),)], ensure_ascii=False)})
        thread = None
        if last_seq:
            rows = conn.execute(st.THREAD_OF, {"scope": scope_key, "seq": last_seq}).fetchall()
            thread = rows[0][0] if rows else None
        documents: list[tuple[int, list[str], bool]] = []
        for record in plan.inserts:
            if record.is_active:
                seq = record_seq(record.id)
                if seq > index.MAX_SEQ:
                    raise StoreError(f"sqlite store: scope {scope_key!r} has used every id")
                documents.append((seq, held[seq], record.source_thread_key == thread))
            thread = record.source_thread_key
        index.post(conn, route.sid, documents)
    if plan.changes:
        conn.execute(st.CHANGE_ROWS, {"scope": scope_key, "now": now, "rows": json.dumps([
            (record_seq(r.id), r.use_count, r.last_used_at, r.confidence, r.status.value)
            for r in plan.changes])})
        index.unpost(conn, route.sid,
                     [record_seq(r.id) for r in plan.changes if not r.is_active])


def _evict(conn: Any, route: Route, excess: int, now: int) -> list[int]:
    """The seqs of the rows evicted to bring the scope down by ``excess``."""
    groups = [conn.execute(statement, {"scope": route.scope_key, "excess": excess}).fetchall()
              for statement in (SQL.lru_never_used, SQL.lru_used)]
    evicted = batches.pick_eviction(groups[0], groups[1], excess)
    return _retire(conn, route, evicted, Status.EVICTED, now)


def _retire(conn: Any, route: Route, seqs: Sequence[int], status: Status, now: int
            ) -> list[int]:
    """Retire the active ones of rows ``seqs`` with ``status``, out of the postings; their
    seqs."""
    if not seqs:
        return []
    index.unpost(conn, route.sid, seqs)
    rows = conn.execute(SQL.retire, {"scope": route.scope_key, "seqs": json.dumps(list(seqs)),
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
        route = Route(scope_key, row[3])
        retired = _retire(conn, route, [record_seq(r.id) for r in swept_records],
                          Status.SWEPT, now)
        conn.execute(SQL.add_active, {"scope": scope_key, "delta": -len(retired)})
        add_rows(conn, counting.sweep_rows(scope_key, len(retired), now))
    return SweepResult(swept=len(swept_records))
