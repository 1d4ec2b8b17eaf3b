"""Every statement the PostgreSQL store runs, for one schema, and how a row becomes a record.

Each statement names the scope: ``scope_key = %(scope)s`` (bound, never formatted) is in the
WHERE clause of every read and every change of ``records``, and every index leads with
``scope_key``, so no statement can read or change another scope's rows whatever its key
holds (quotes, ``%``, ``_``, backslashes: they are values, never SQL or patterns). User text
reaches the server only as bound values and ``text[]`` arrays compared with ``= ANY``: no
tsquery or LIKE parser ever sees it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scopemem.core.records import Record, trusted_record
from scopemem.core.text import normalize_text
from scopemem.stores.postgres.migrations import POST_ALL, quoted

__all__ = ["COLUMNS", "ROW_COLUMNS", "Statements", "bigints", "last_touched", "record_of",
           "with_pending"]

# The seq, then the record's fields in ``Record``'s order (positions 1-15).
COLUMNS = ("seq, id, scope_key, kind, text, keywords, source_thread_key, source_run_id,"
           " created_at, last_used_at, use_count, confidence, supersedes, restates, status,"
           " source")
_R_COLUMNS = ", ".join(f"r.{column.strip()}" for column in COLUMNS.split(","))
_NULLS = ", ".join(["NULL"] * len(COLUMNS.split(",")))
#: Where ``Statements.postings``'s rows of records begin.
ROW_COLUMNS = 5
# COLUMNS' positions of what a retrieval reads of a row before it is a record.
_CREATED, _LAST_USED, _USES = 8, 9, 10
PURGEABLE = "('superseded', 'evicted', 'swept')"


def bigints(values: Iterable[int]) -> str:
    """A list of integers bound as a ``bigint[]`` literal: psycopg dumps a Python list one
    element at a time in Python after scanning it for the element type (about 0.15 ms for
    50 integers, most of a statement's cost in the worker); the literal costs a tenth. Only
    integers are formatted, so nothing but digits, signs and commas reaches the server."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def record_of(row: Sequence[Any]) -> Record:
    """The record of a row of ``COLUMNS`` (columns after those are ignored)."""
    return trusted_record(*row[1:16])


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


def with_pending(row: Sequence[Any], pending: Mapping[int, list[int]]) -> Sequence[Any]:
    """A row of ``COLUMNS`` with the uses of it not saved yet (``usage.DeferredUsage``)."""
    bump = pending.get(row[0])
    if bump is None:
        return row
    uses, last = bump
    saved: int | None = row[_LAST_USED]
    return (*row[:_LAST_USED], last if saved is None or last > saved else saved,
            row[_USES] + uses, *row[_USES + 1:])


class Statements:
    """The statements of one schema (its name validated and quoted once, here)."""

    def __init__(self, schema: str) -> None:
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
            f" UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, {_R_COLUMNS} FROM few, {records} r"
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
        # Each active record's last touch when the copy is read: a lower bound ever after
        # (a use only moves it on), which is all ``core.topk``'s score rule needs.
        self.scope_touches = (f"SELECT seq, coalesce(last_used_at, created_at) FROM {records}"
                              " WHERE scope_key = %(scope)s AND status = 'active'")
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
        self.active_rows_by_seq = (f"SELECT {COLUMNS} FROM {records} WHERE {active}"
                                   " AND seq = ANY(%(seqs)s::bigint[])")
        # The same with the scope's change counter first in every row (one row of NULLs
        # after it when none is found): what a worker's copy is checked against.
        self.active_rows_at = (
            f"SELECT sc.generation, {_R_COLUMNS}"
            f" FROM {s}.scopes sc LEFT JOIN {records} r ON r.scope_key = sc.scope_key"
            " AND r.status = 'active' AND r.seq = ANY(%(seqs)s::bigint[])"
            " WHERE sc.scope_key = %(scope)s")
        # Moving records in and out (``porting.py``).
        self.export_scopes = f"SELECT scope_key FROM {s}.scopes ORDER BY scope_key"
        self.export_page = (f"SELECT {COLUMNS} FROM {records} WHERE scope_key = %(scope)s"
                            " AND seq > %(after)s ORDER BY seq LIMIT %(limit)s")
        self.held_seqs = (f"SELECT seq FROM {records} WHERE scope_key = %(scope)s"
                          " AND seq = ANY(%(seqs)s::bigint[])")
        self.neighbours = (f"SELECT seq, source_thread_key, status FROM {records}"
                           " WHERE scope_key = %(scope)s AND seq = ANY(%(seqs)s::bigint[])")
        self.mark_continues = (f"UPDATE {postings} SET continues = true"
                               " WHERE scope_key = %(scope)s AND seq = ANY(%(seqs)s::bigint[])")
        self.import_counts = (f"UPDATE {s}.scopes SET last_seq = GREATEST(last_seq, %(last)s),"
                              " active = active + %(added)s, generation = generation + 1"
                              " WHERE scope_key = %(scope)s")
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
        self.active_seqs = (f"SELECT seq FROM {records} WHERE {active}"
                            " AND seq = ANY(%(seqs)s::bigint[])")
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
                           " r WHERE r.scope_key = sc.scope_key AND r.seq = sc.last_seq)"
                           f" FROM {s}.scopes sc WHERE scope_key = %(scope)s FOR UPDATE")
        self.new_scope = (f"INSERT INTO {s}.scopes (scope_key, created_at)"
                          " VALUES (%(scope)s, %(now)s) ON CONFLICT DO NOTHING")
        self.count_scopes = f"SELECT count(*) FROM {s}.scopes"
        self.set_counts = (f"UPDATE {s}.scopes SET last_seq = %(last)s, active = %(active)s,"
                           " generation = generation + 1"
                           " WHERE scope_key = %(scope)s")
        self.add_active = (f"UPDATE {s}.scopes SET active = active + %(delta)s,"
                           " generation = generation + 1"
                           " WHERE scope_key = %(scope)s")
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
        self.retire = (f"UPDATE {records} SET status = %(status)s, retired_at = %(now)s"
                       f" WHERE {active} AND seq = ANY(%(seqs)s::bigint[]) RETURNING seq")
        # The eviction's two short reads (``batches.pick_eviction``): what its order reads.
        lru = f"SELECT seq, last_used_at, created_at FROM {records} WHERE {active}"
        self.lru_never_used = (f"{lru} AND last_used_at IS NULL ORDER BY created_at, seq"
                               " LIMIT %(excess)s")
        self.lru_used = (f"{lru} AND last_used_at IS NOT NULL"
                         " ORDER BY last_used_at, created_at, seq LIMIT %(excess)s")
        # The retention, oldest death first: a swept row past it keeps its id, status,
        # provenance, times and counts, never its text (nor its ``retired_at``, so the
        # retention never reads it again); a superseded or evicted row is deleted.
        due = (f" (SELECT seq FROM {records} WHERE scope_key = %(scope)s"
               f" AND status IN {PURGEABLE} AND retired_at <= %(cutoff)s"
               " AND status {} 'swept' ORDER BY retired_at LIMIT %(rows)s)")
        self.scrub_swept = (f"UPDATE {records} SET text = '', norm = '', keywords = '{{}}',"
                            " tokens = '{}', retired_at = NULL WHERE scope_key = %(scope)s"
                            " AND seq IN" + due.format("="))
        self.purge = (f"DELETE FROM {records} WHERE scope_key = %(scope)s AND seq IN"
                      + due.format("!="))
        self.forget = (f"UPDATE {records} SET status = 'forgotten', retired_at = %(now)s,"
                       " text = '', norm = '', keywords = '{}', tokens = '{}'"
                       f" WHERE {active} AND seq = %(seq)s AND id = %(id)s")
        # Deleting a scope's data (``store.delete_scope``): its row in ``scopes`` stays,
        # emptied, with its last seq, so no id it gave is given again.
        self.delete_records = f"DELETE FROM {records} WHERE scope_key = %(scope)s"
        self.delete_postings = f"DELETE FROM {s}.postings WHERE scope_key = %(scope)s"
        # Its counters go, and their count totals with them (``counts.py``): the sums lose
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
        self.empty_scope = (f"UPDATE {s}.scopes SET active = 0, generation = generation + 1,"
                            " last_write = NULL WHERE scope_key = %(scope)s")
        # Scrubbing a person out of a scope's provenance (``store.scrub_provenance``).
        self.naming = (f"SELECT seq, source_thread_key, source_run_id FROM {records}"
                       " WHERE scope_key = %(scope)s"
                       " AND (strpos(source_thread_key, %(person)s) > 0"
                       " OR strpos(coalesce(source_run_id, ''), %(person)s) > 0)")
        self.set_source = (f"UPDATE {records} SET source_thread_key = %s, source_run_id = %s"
                           " WHERE scope_key = %s AND seq = %s")
        self.active_facts = (f"SELECT {COLUMNS} FROM {records} WHERE {active}"
                             " AND kind = 'fact' ORDER BY seq")
        # Counters (``counts.py``): rows of any scopes added in one statement (in the
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
        # Two statements, not one with "keys IS NULL OR": a prepared statement's generic plan
        # cannot use the primary key for the keys, and would scan every scope's counters.
        read_counts = (f"SELECT scope_key, day, name, value FROM {counters}"
                       " WHERE day >= %(since)s AND (%(prefix)s::text IS NULL"
                       " OR starts_with(scope_key, %(prefix)s::text))")
        order = " ORDER BY scope_key, day, name"
        self.read_counts = read_counts + order
        self.read_counts_of = read_counts + " AND scope_key = ANY(%(keys)s::text[])" + order
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
