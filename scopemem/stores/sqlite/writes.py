"""Changing a scope: write batches, forgetting and sweeping, each one transaction.

Every decision is the engine's (``plan_write``, ``plan_eviction``, ``plan_sweep``); this
module finds the few rows each decision reads and persists what it answers. A write batch
(its deduplication, supersedes and the evictions it triggers), a forget and a sweep are each
one ``BEGIN IMMEDIATE`` transaction. Superseded, evicted and swept rows keep their text for
``retention_days``, then a write transaction purges them (at most ``PURGE_ROWS`` per write,
oldest death first): superseded and evicted rows are deleted, swept rows scrubbed and kept
(their id, status and provenance stay auditable). A forgotten row is scrubbed in its own
transaction and kept; the WAL is then truncated so no old page image keeps its text.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from scopemem.core import engine
from scopemem.core.records import (
    Candidate,
    Kind,
    Record,
    Status,
    SweepResult,
    WriteCounts,
)
from scopemem.core.text import normalize_text
from scopemem.stores.base import retention_cutoff
from scopemem.stores.shared import batches
from scopemem.stores.shared import counts as counting
from scopemem.stores.shared.batches import PURGE_ROWS
from scopemem.stores.sqlite import files, schema, sql
from scopemem.stores.sqlite.counts import add_rows
from scopemem.stores.sqlite.views import Views

log = logging.getLogger("scopemem.stores.sqlite")



class Writes(Views):
    """What a write, a forget and a sweep do on the write pool."""

    def _write(self, scope_key: str, candidates: list[Candidate], cap: int, now: int
               ) -> WriteCounts:
        with self._connection(scope_key, create=True) as handle:
            old_view = handle.view  # the transaction drops it; the write may carry it on
            changed: set[int] = set()
            retired: list[int] = []
            # The indexed terms of the rows leaving, read before they leave the index: what
            # carrying the view on takes out of its postings (no tokenizing again).
            removed: dict[int, list[str]] | None = None if old_view is None else {}
            # The active rows the batch inserted, as the view reads rows: carried on as
            # written, not read back.
            inserted: dict[int, tuple[Any, ...]] | None = None if old_view is None else {}
            # The transaction vouches for the view while it holds the file's write lock (the
            # view is the committed state until the commit): retrievals answer from it.
            with self._transaction(handle.conn, bumps=handle, applied=changed,
                                   vouch=old_view):
                vouched = old_view is not None and handle.live is old_view
                counts, evicted = self._write_rows(handle.conn, scope_key, candidates, cap,
                                                   now, changed, retired, removed, inserted)
                counts += WriteCounts(evicted=len(evicted))
                # Counted in the change's own transaction: a crash keeps both or neither.
                add_rows(handle.conn, counting.write_rows(scope_key, counts, now))
                files.size_checkpoints(handle.conn)  # the commit checkpoints by the new size
            if old_view is not None and vouched:
                handle.carry = self._plan_carry(handle, old_view, changed, retired,
                                                old_view.generation + 1, removed, inserted)
        # No log line of its own: the counts say what was evicted, the Worker logs the
        # eviction for a served store and Memory's [memory] line counts it for an embedded one.
        return counts

    def _write_rows(self, conn: Any, scope_key: str, candidates: list[Candidate], cap: int,
                    now: int, changed: set[int], retired: list[int],
                    removed: dict[int, list[str]] | None = None,
                    inserted: dict[int, tuple[Any, ...]] | None = None
                    ) -> tuple[WriteCounts, list[int]]:
        """The batch's statements, inside the write's transaction: the rows it can touch,
        read in two statements; the engine's plan for the whole batch
        (``shared.batches.plan_batch``, as the PostgreSQL store writes); its inserts and
        changes; then eviction down to the cap and the purge. ``changed`` gathers the seqs
        of rows inserted or updated, ``retired`` the seqs of the rows that left; ``removed`` (when
        given) the indexed terms of those that left the token index, by seq; ``inserted``
        (when given) the active rows inserted, by seq, as ``schema.ACTIVE_ROWS_SQL`` reads
        them."""
        first_seq = conn.execute(schema.NEXT_SEQ_SQL).fetchall()[0][0]
        norms, seqs = batches.lookup_keys(scope_key, candidates)
        known: dict[int, Sequence[Any]] = {}
        for column, values in (("norm", norms), ("seq", seqs)):
            for start in range(0, len(values), sql.CHUNK):
                chunk = values[start:start + sql.CHUNK]
                for row in conn.execute(
                        f"SELECT {schema.RECORD_COLUMNS} FROM records WHERE status = 'active'"
                        f" AND {column} IN ({', '.join('?' * len(chunk))})", chunk):
                    known[row[0]] = row
        plan = batches.plan_batch(scope_key, candidates, [sql.record(known[seq])
                                                          for seq in sorted(known)],
                                  first_seq, now)
        inserts = [(seq, record, None if record.is_active else now)
                   for seq, record in enumerate(plan.inserts, start=first_seq)]
        if inserts:
            self._insert_many(conn, inserts, inserted)
            changed.update(seq for seq, _record, _retired_at in inserts)
        for record in plan.changes:
            seq = batches.seq_in_scope(scope_key, record.id)
            if seq is None:
                continue
            conn.execute(
                "UPDATE records SET use_count = ?, last_used_at = ?, confidence = ?,"
                " status = ?, retired_at = CASE WHEN ? = 'active' THEN retired_at ELSE ? END"
                " WHERE seq = ?",
                (record.use_count, record.last_used_at, record.confidence,
                 record.status.value, record.status.value, now, seq))
            changed.add(seq)
            if not record.is_active:
                if removed is not None:
                    removed.update(sql.indexed_terms(conn, [seq]))
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (seq,))
                retired.append(seq)
        evicted: list[int] = []
        active = conn.execute(
            "SELECT count(*) FROM records WHERE status = 'active'").fetchall()[0][0]
        if active > cap:
            evicted = self._plan_eviction(conn, active - cap)
            if removed is not None:
                removed.update(sql.indexed_terms(conn, evicted))
            self._retire_seqs(conn, Status.EVICTED, evicted, now)
            retired.extend(evicted)
        self._purge(conn, retention_cutoff(now, self.retention_days))
        sql.compact_index(conn, min(active, cap))
        return plan.counts, evicted

    @staticmethod
    def _plan_eviction(conn: Any, excess: int) -> list[int]:
        """The seqs of the ``excess`` rows the engine evicts, read without loading the whole
        scope, nor whole rows: the two short least-recently-used lists
        ``shared.batches.pick_eviction`` chooses from, each read from the partial index of
        the active rows by ``(last_used_at, created_at)``."""
        groups = [conn.execute(
            "SELECT seq, last_used_at, created_at FROM records"
            f" WHERE status = 'active' AND {condition} ORDER BY {order} LIMIT ?",
            (excess,)).fetchall()
            for condition, order in (("last_used_at IS NULL", "created_at, seq"),
                                     ("last_used_at IS NOT NULL",
                                      "last_used_at, created_at, seq"))]
        return batches.pick_eviction(groups[0], groups[1], excess)

    def _insert(self, conn: Any, record: Record, seq: int, *,
                retired_at: int | None = None) -> None:
        """One new row (``retired_at``: when a record that is not active died), in the token
        index when it is active."""
        self._insert_many(conn, [(seq, record, retired_at)])

    def _insert_many(self, conn: Any, rows: Sequence[tuple[int, Record, int | None]],
                     active_rows: dict[int, tuple[Any, ...]] | None = None) -> None:
        """New rows, each ``(seq, record, retired_at)``, the active ones in the token index:
        two statements for the lot (``executemany``), not two a row. ``active_rows`` (when
        given) gathers the active ones as ``schema.ACTIVE_ROWS_SQL`` reads them back: the
        values bound here, then the indexed tokens."""
        values = [(seq, r.id, r.scope_key, r.kind.value, r.text,
                   json.dumps(list(r.keywords), ensure_ascii=False), r.source_thread_key,
                   r.source_run_id, r.created_at, r.last_used_at, r.use_count, r.confidence,
                   r.supersedes, r.restates, r.status.value, r.source.value)
                  for seq, r, _retired_at in rows]
        conn.executemany(
            "INSERT INTO records (seq, id, scope_key, kind, text, keywords,"
            " source_thread_key, source_run_id, created_at, last_used_at, use_count,"
            " confidence, supersedes, restates, status, source, norm, retired_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(*row, normalize_text(r.text), retired_at)
             for row, (_seq, r, retired_at) in zip(values, rows, strict=True)])
        tokens = [(seq, sql.fts_tokens(r.text, r.keywords, self.analyzer))
                  for seq, r, _retired_at in rows if r.is_active]
        conn.executemany("INSERT INTO records_fts (rowid, tokens) VALUES (?, ?)", tokens)
        if active_rows is not None:
            indexed = dict(tokens)
            active_rows.update((row[0], (*row, indexed[row[0]])) for row in values
                               if row[0] in indexed)

    @classmethod
    def _retire(cls, conn: Any, scope_key: str, records: Sequence[Record], now: int) -> None:
        """Persist soft deletes: the new status and when it died, and the row leaves the
        full-text index in the same transaction."""
        by_status: dict[Status, list[int]] = {}
        for record in records:
            seq = batches.seq_in_scope(scope_key, record.id)
            if seq is not None:
                by_status.setdefault(record.status, []).append(seq)
        for status, seqs in by_status.items():
            cls._retire_seqs(conn, status, seqs, now)

    @staticmethod
    def _retire_seqs(conn: Any, status: Status, seqs: Sequence[int], now: int) -> None:
        """The rows ``seqs`` leave active status for ``status``, and the token index."""
        for start in range(0, len(seqs), sql.CHUNK):
            chunk = seqs[start:start + sql.CHUNK]
            marks = ", ".join("?" * len(chunk))
            conn.execute(f"UPDATE records SET status = ?, retired_at = ?"
                         f" WHERE seq IN ({marks})", (status.value, now, *chunk))
            conn.execute(f"DELETE FROM records_fts WHERE rowid IN ({marks})", chunk)

    @staticmethod
    def _purge(conn: Any, cutoff: int) -> int:
        """Act on up to ``PURGE_ROWS`` superseded, evicted and swept rows that died at
        ``cutoff`` or before, oldest death first: delete the superseded and evicted ones,
        scrub the swept ones (``schema.SCRUB_SWEPT_SQL``); how many. None of them is in the
        token index. The highest seq is recorded first, so ids are never reused."""
        rows = conn.execute(
            # Pinned to the partial index: read in death order, the scan stops at the first
            # row too young or at the limit, however many dead rows the retention keeps.
            f"SELECT seq, status FROM records INDEXED BY records_dead"
            f" WHERE status IN {schema.PURGEABLE_STATUSES}"
            " AND retired_at <= ? ORDER BY retired_at LIMIT ?", (cutoff, PURGE_ROWS)
        ).fetchall()
        if not rows:
            return 0
        swept = [seq for seq, status in rows if status == Status.SWEPT.value]
        gone = [seq for seq, status in rows if status != Status.SWEPT.value]
        if gone:
            last = conn.execute(schema.NEXT_SEQ_SQL).fetchall()[0][0] - 1
            schema.set_meta(conn, schema.META_LAST_SEQ, str(last))
        for seqs, statement in ((swept, schema.SCRUB_SWEPT_SQL),
                                (gone, "DELETE FROM records WHERE seq IN ({seqs})")):
            for start in range(0, len(seqs), sql.CHUNK):
                chunk = seqs[start:start + sql.CHUNK]
                conn.execute(statement.format(seqs=", ".join("?" * len(chunk))), chunk)
        return len(rows)

    def _forget(self, scope_key: str, record_id: str, seq: int, now: int) -> bool:
        """Retire the row as forgotten and scrub its text, dedup key and keywords, all in
        one transaction; then merge the token index (so no segment keeps its terms) and
        truncate the WAL (so no old page image keeps its text). ``secure_delete`` zeroes
        what the database file freed."""
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return False
            conn = handle.conn
            if not conn.execute("SELECT 1 FROM records WHERE seq = ? AND id = ?"
                                " AND status = 'active'", (seq, record_id)).fetchall():
                return False  # nothing to forget: no transaction, and the view stays
            with self._transaction(conn, bumps=handle):
                conn.execute("UPDATE records SET status = ?, retired_at = ?, text = '',"
                             " norm = '', keywords = '[]' WHERE seq = ? AND id = ?"
                             " AND status = 'active'",
                             (Status.FORGOTTEN.value, now, seq, record_id))
                if not conn.changes():
                    return False
                conn.execute("DELETE FROM records_fts WHERE rowid = ?", (seq,))
                conn.execute("INSERT INTO records_fts (records_fts) VALUES ('optimize')")
                add_rows(conn, counting.forget_rows(scope_key, now))
            self._truncate_wal(conn, handle.path)
        return True

    @staticmethod
    def _truncate_wal(conn: Any, path: str) -> None:
        """Checkpoint the whole WAL into the database and truncate it to nothing. A reader
        of another process holding an old snapshot past ``busy_timeout_ms`` keeps it from
        finishing: then the log is overwritten by later commits instead, and a warning says
        so. The forget has committed either way, so this never fails it."""
        apsw = sql.apsw_module()
        try:
            conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
        except apsw.Error as exc:
            log.warning("sqlite store: %s: the WAL could not be truncated after a forget"
                        " (%s); later commits overwrite it", path, sql.describe(exc))

    def _sweep(self, scope_key: str, dry_run: bool, now: int) -> SweepResult:
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return SweepResult(swept=0, ids=() if dry_run else None)
            conn = handle.conn
            # A dry run reads and commits only pending use counts: the scope's view stays.
            with self._transaction(conn, bumps=handle, changes_rows=not dry_run):
                rows = conn.execute(
                    f"SELECT {schema.RECORD_COLUMNS} FROM records"
                    " WHERE status = 'active' AND kind = ? ORDER BY seq",
                    (Kind.FACT.value,)).fetchall()
                swept = engine.plan_sweep([sql.record(row) for row in rows])
                if dry_run:
                    return SweepResult(swept=len(swept), ids=tuple(r.id for r in swept))
                self._retire(conn, scope_key, swept, now)
                sql.compact_index(conn)
                add_rows(conn, counting.sweep_rows(scope_key, len(swept), now))
        return SweepResult(swept=len(swept))
