"""The statements only the PostgreSQL store runs, for one schema, and how a row becomes a
record (those both SQL stores run: ``shared/sql.py``). Every statement binds the scope as a
value in its WHERE clause, and user text reaches the server only as bound values and
``text[]`` arrays compared with ``= ANY``: no tsquery or LIKE parser ever sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from scopemem.core.records import Record, stored_record_problem, trusted_record
from scopemem.core.text import normalize_text
from scopemem.stores.postgres import dialect
from scopemem.stores.postgres.migrations import POST_ALL, quoted
from scopemem.stores.shared import sql as shared
from scopemem.stores.shared.sql import COLUMNS, R_COLUMNS

__all__ = ["COLUMNS", "ROW_COLUMNS", "Statements", "bigints", "last_touched", "record_of"]

_NULLS = ", ".join(["NULL"] * len(COLUMNS.split(",")))
#: Where ``Statements.postings``'s rows of records begin.
ROW_COLUMNS = 5
# COLUMNS' positions of what a retrieval reads of a row before it is a record.
_CREATED, _LAST_USED = 8, 9


def bigints(values: Iterable[int]) -> str:
    """A list of integers bound as a ``bigint[]`` literal: psycopg dumps a Python list one
    element at a time in Python after scanning it for the element type (about 0.15 ms for
    50 integers, most of a statement's cost in the worker); the literal costs a tenth. Only
    integers are formatted, so nothing but digits, signs and commas reaches the server."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def record_of(row: Sequence[Any]) -> Record:
    """The record of a row of ``COLUMNS`` (columns after those are ignored). A row that is
    not a record the store writes (written into the schema by another program) is a
    ``StoreError`` naming it (``records.stored_record_problem``)."""
    made = trusted_record(*row[1:16])
    problem = stored_record_problem(made)
    if problem is not None:
        raise shared.foreign_row(row, problem, "schema")
    return made


def insert_row(scope_key: str, seq: int, r: Record, now: int, tokens: list[str]
               ) -> tuple[Any, ...]:
    """The parameters of ``Statements.insert`` for record ``r`` (retired ``now`` when it is
    not active) and the tokens its row keeps."""
    return (scope_key, seq, r.id, r.kind.value, r.text, normalize_text(r.text),
            list(r.keywords), r.source_thread_key, r.source_run_id, r.created_at,
            r.last_used_at, r.use_count, r.confidence, r.supersedes, r.restates,
            r.status.value, r.source.value, None if r.is_active else now, tokens)


def last_touched(row: Sequence[Any]) -> int:
    """``Record.last_touched`` of a row of ``COLUMNS``, without making the record."""
    last_used: int | None = row[_LAST_USED]
    return row[_CREATED] if last_used is None else last_used


class Statements(shared.Statements):
    """The statements of one schema (its name validated and quoted once, here)."""

    def __init__(self, schema: str) -> None:
        super().__init__(dialect.of(schema))
        s = quoted(schema)
        records = f"{s}.records"
        active = "scope_key = %(scope)s AND status = 'active'"
        postings = f"{s}.postings"
        # The postings of the query's terms: per term the seqs holding it, in two arrays:
        # the records that continue their predecessor's thread and the others (one
        # index-only range scan per term, in seq order: no sort, no row visited), with the
        # scope's active count from the same snapshot. When the prefilter's terms have at
        # most ``%(few)s`` postings in all (a selective query, a small scope), the rows of
        # the records holding them follow (``ROW_COLUMNS`` on, the first five NULL): every
        # row the ranking can ask for, so the retrieval reads nothing more.
        self.postings = (
            f"WITH few AS (SELECT ARRAY(SELECT seq FROM {postings} WHERE scope_key = %(scope)s"
            " AND term = ANY(%(prefilter)s::text[]) LIMIT %(few)s + 1) AS seqs)"
            f" SELECT sc.active, sc.generation, q.term, p.plain, p.continuing, {_NULLS}"
            " FROM unnest(%(terms)s::text[]) AS q(term) CROSS JOIN"
            " LATERAL (SELECT array_agg(p.seq) FILTER (WHERE NOT p.continues) AS plain,"
            "                 array_agg(p.seq) FILTER (WHERE p.continues) AS continuing"
            f"         FROM {postings} p WHERE p.scope_key = %(scope)s AND p.term = q.term) p"
            f" LEFT JOIN {s}.scopes sc ON sc.scope_key = %(scope)s"
            f" UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, {R_COLUMNS} FROM few, {records} r"
            " WHERE cardinality(few.seqs) <= %(few)s AND r.scope_key = %(scope)s"
            " AND r.seq = ANY(few.seqs) AND r.status = 'active'")
        # A scope's whole index for that copy, with the state it is at: one statement, so
        # one snapshot.
        self.scope_postings = (
            f"SELECT sc.active, sc.generation, p.term, p.plain, p.continuing"
            f" FROM {s}.scopes sc LEFT JOIN LATERAL ("
            "  SELECT term, array_agg(seq) FILTER (WHERE NOT continues) AS plain,"
            "         array_agg(seq) FILTER (WHERE continues) AS continuing"
            f"  FROM {postings} WHERE scope_key = sc.scope_key GROUP BY term) p ON true"
            " WHERE sc.scope_key = %(scope)s")
        self.bump_generations = f"UPDATE {s}.scopes SET generation = generation + 1"
        self.post = (f"INSERT INTO {postings} (scope_key, term, seq, continues)"
                     " SELECT %(scope)s, x.term, x.seq, x.continues"
                     " FROM unnest(%(terms)s::text[], %(seqs)s::bigint[],"
                     " %(continues)s::boolean[]) AS x(term, seq, continues)")
        # Rows leaving active status leave the index (before a forget scrubs their tokens).
        self.unpost = (
            f"DELETE FROM {postings} p USING (SELECT r.seq, x.term FROM {records} r,"
            " unnest(r.tokens) AS x(term)"
            " WHERE r.scope_key = %(scope)s AND r.seq = ANY(%(seqs)s::bigint[])) AS gone"
            " WHERE p.scope_key = %(scope)s AND p.term = gone.term AND p.seq = gone.seq")
        # The candidates' rows with the scope's change counter first in every row (one row
        # of NULLs after it when none is found): what a worker's copy is checked against.
        self.active_rows_at = (
            f"SELECT sc.generation, {R_COLUMNS}"
            f" FROM {s}.scopes sc LEFT JOIN {records} r ON r.scope_key = sc.scope_key"
            " AND r.status = 'active' AND r.seq = ANY(%(seqs)s::bigint[])"
            " WHERE sc.scope_key = %(scope)s")
        # An import's existing rows that now continue an imported one (``porting.py``).
        self.mark_continues = (f"UPDATE {postings} SET continues = true"
                               " WHERE scope_key = %(scope)s AND seq = ANY(%(seqs)s::bigint[])")
        # A save of a scope's pending uses (``usage.py``): any number of rows and uses in
        # one statement. It skips rows a writer holds locked (waiting there could deadlock
        # with a writer that holds one row and wants another this statement holds); those
        # stay pending. Its commit does not wait for the WAL to reach the disk
        # (``synchronous_commit`` off for this statement's transaction only): a server crash
        # may lose the last fraction of a second of use counts, never a record.
        self.bump_later = (
            f"WITH free AS (SELECT seq FROM {records} WHERE {active}"
            " AND seq = ANY(%(seqs)s::bigint[])"
            " AND set_config('synchronous_commit', 'off', true) = 'off'"
            " FOR UPDATE SKIP LOCKED)"
            f" UPDATE {records} r SET use_count = r.use_count + b.uses,"
            " last_used_at = greatest(coalesce(r.last_used_at, 0), b.last)"
            " FROM free, unnest(%(seqs)s::bigint[], %(uses)s::bigint[], %(lasts)s::bigint[])"
            " AS b(seq, uses, last)"
            " WHERE r.scope_key = %(scope)s AND r.seq = free.seq AND b.seq = free.seq"
            " RETURNING r.seq")
        self.listing = (f"SELECT {COLUMNS} FROM {records} WHERE {active}"
                        " AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)"
                        " AND (%(tokens)s::text[] IS NULL OR seq IN (SELECT seq FROM"
                        f" {postings} WHERE scope_key = %(scope)s"
                        " AND term = ANY(%(tokens)s::text[])))"
                        " ORDER BY seq DESC LIMIT %(limit)s")
        # Writes. The scope's row is the writers' lock: a write, a forget and a sweep take
        # it first, so changes to one scope are serialized and seqs never collide.
        # With the thread of the scope's last row (NULL when it is gone: purged, deleted),
        # which the write's first record may continue.
        self.lock_scope = (f"SELECT last_seq, active, (SELECT source_thread_key FROM {records}"
                           " r WHERE r.scope_key = sc.scope_key AND r.seq = sc.last_seq),"
                           f" last_write FROM {s}.scopes sc WHERE scope_key = %(scope)s"
                           " FOR UPDATE")
        self.new_scope = (f"INSERT INTO {s}.scopes (scope_key, created_at)"
                          " VALUES (%(scope)s, %(now)s) ON CONFLICT DO NOTHING")
        self.batch_rows = (f"SELECT {COLUMNS} FROM {records} WHERE {active}"
                           " AND (norm = ANY(%(norms)s::text[]) OR seq = ANY(%(seqs)s::bigint[]))"
                           " ORDER BY seq FOR UPDATE")
        self.insert = (
            f"INSERT INTO {records} (scope_key, seq, id, kind, text, norm, keywords,"
            " source_thread_key, source_run_id, created_at, last_used_at, use_count,"
            " confidence, supersedes, restates, status, source, retired_at, tokens)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s::text[], %s, %s, %s, %s, %s, %s, %s, %s, %s,"
            " %s, %s, %s::text[])")
        self.change = (
            f"UPDATE {records} SET use_count = %s, last_used_at = %s, confidence = %s,"
            " status = %s, retired_at = CASE WHEN %s = 'active' THEN retired_at ELSE %s END"
            " WHERE scope_key = %s AND seq = %s")
        # Deleting a scope's data (``store.delete_scope``): its postings, ...
        self.delete_postings = f"DELETE FROM {s}.postings WHERE scope_key = %(scope)s"
        # ... its counters, and their count totals with them (``writes.py``): the sums lose
        # them, and a peak one of them held is found again among the kind's counters.
        totals = f"{s}.count_totals"
        self.delete_counters = (
            f"WITH gone AS (DELETE FROM {s}.counters WHERE scope_key = %(scope)s"
            " RETURNING day, name, value)"
            f" INSERT INTO {totals} AS t (kind, day, name, total, peak)"
            f" SELECT {s}.scope_kind(%(scope)s), day, name, -value, 0 FROM gone"
            " ORDER BY day, name ON CONFLICT (kind, day, name) DO UPDATE SET"
            " total = t.total + excluded.total,"
            " peak = CASE WHEN -excluded.total < t.peak THEN t.peak ELSE 0 END")
        self.find_peaks = (
            f"UPDATE {totals} AS t SET peak = m.most FROM (SELECT day, name,"
            f" max(value) AS most FROM {s}.counters WHERE starts_with(scope_key,"
            f" {s}.scope_kind(%(scope)s) || ':') AND (day, name) IN (SELECT day, name"
            f" FROM {totals} WHERE kind = {s}.scope_kind(%(scope)s) AND peak = 0"
            " AND total > 0) GROUP BY day, name) AS m"
            f" WHERE t.kind = {s}.scope_kind(%(scope)s) AND t.day = m.day"
            " AND t.name = m.name")
        # Counters (``writes.Counts``): rows of any scopes added in one statement (in the
        # order ``core.counters.merge_rows`` sorts them, so two transactions adding to the
        # same counters lock them in the same order and never deadlock), and the reading.
        # The count totals of the rows' kinds grow in the same statement, by the values
        # added, their peaks to the counters' new values (in the totals' order: the same
        # lock order for every transaction).
        counters = f"{s}.counters"
        self.add_counts = (
            "WITH given AS (SELECT * FROM unnest(%(scopes)s::text[], %(days)s::integer[],"
            " %(names)s::text[], %(values)s::bigint[]) AS g (scope_key, day, name, value)),"
            f" added AS (INSERT INTO {counters} (scope_key, day, name, value)"
            " SELECT * FROM given"
            f" ON CONFLICT (scope_key, day, name) DO UPDATE SET value = {counters}.value"
            " + excluded.value RETURNING scope_key, day, name, value)"
            f" INSERT INTO {totals} AS t (kind, day, name, total, peak)"
            f" SELECT {s}.scope_kind(a.scope_key), a.day, a.name, sum(g.value), max(a.value)"
            " FROM added a JOIN given g USING (scope_key, day, name) GROUP BY 1, 2, 3"
            " ORDER BY 1, 2, 3 ON CONFLICT (kind, day, name) DO UPDATE SET"
            " total = t.total + excluded.total, peak = GREATEST(t.peak, excluded.peak)")
        # Re-deriving what rows keep from their text when the analyzer changes.
        self.get_meta = f"SELECT value FROM {s}.meta WHERE key = %s"
        self.set_meta = (f"INSERT INTO {s}.meta (key, value) VALUES (%s, %s)"
                         " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
        self.all_rows = f"SELECT scope_key, {COLUMNS} FROM {records}"
        self.refold = (f"UPDATE {records} SET norm = %s, tokens = %s::text[]"
                       " WHERE scope_key = %s AND seq = %s")
        # Every posting again, from the re-derived tokens.
        self.unpost_all = f"DELETE FROM {postings}"
        self.post_all = POST_ALL.format(s=s)
