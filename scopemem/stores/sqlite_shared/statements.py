"""The statements only the SQLite store runs, for any shard (those both SQL stores run:
``dialect.SQL``; the token index's: ``index.py``). Each binds the scope as ``:scope`` and a
list as one JSON array read with ``json_each``: a statement's text never depends on what a
client sent, and user text reaches SQL only as a value.
"""

from __future__ import annotations

from scopemem.stores.shared.sql import R_COLUMNS
from scopemem.stores.sqlite_shared.schema import RECORD_COLUMNS as RECORD_COLUMNS
from scopemem.stores.sqlite_shared.schema import dedup_key

ACTIVE = "scope_key = :scope AND status = 'active'"

# --- reads ---------------------------------------------------------------------------------

SCOPE_STATE = "SELECT active, generation, sid FROM scopes WHERE scope_key = :scope"
# The query's terms (and ``index.CONTINUES``) as the phrases of scope :scope's terms in the
# token index (``index.py``): each term prefixed by the scope's id.
_PHRASE = ("'\"' || printf('%08x', (SELECT sid FROM scopes WHERE scope_key = :scope))"
           " || q.value || '\"'")
# The scope's active count and change counter with each query term's postings (and
# ``index.CONTINUES``'s: the seqs continuing their thread), a MATCH a term, as one JSON
# array (``[]`` for none), in one statement (one snapshot, one call): a brief over a large
# scope reads tens of thousands of postings, and a row each cost more to hand to Python
# than the MATCH itself.
STATE_POSTINGS = ("SELECT sc.active, sc.generation, q.value, (SELECT"
                  " json_group_array(t.rowid & 4294967295) FROM terms_fts AS t"
                  f" WHERE t.terms_fts MATCH {_PHRASE}) FROM scopes AS sc"
                  " LEFT JOIN json_each(:terms) AS q WHERE sc.scope_key = :scope")
# The candidates' rows, after the scope's uses counter (``usage.py``) and change counter
# (what a copy in memory is checked against); one row of NULLs after them when none is found.
ACTIVE_ROWS_AT = (f"SELECT sc.uses, sc.generation, {R_COLUMNS} FROM scopes AS sc"
                  " LEFT JOIN records AS r ON r.scope_key = sc.scope_key"
                  " AND r.status = 'active' AND r.seq IN (SELECT value FROM json_each(:seqs))"
                  " WHERE sc.scope_key = :scope")
# A small scope's every active row with its terms (``reads.search``: ranked from them in
# one statement); only the scope's row, with NULLs, for a scope of more than :most.
SMALL_SCOPE_ROWS = (f"SELECT sc.uses, sc.generation, sc.active, {R_COLUMNS}, r.tokens"
                    " FROM scopes AS sc LEFT JOIN records AS r ON r.scope_key = sc.scope_key"
                    " AND r.status = 'active' AND sc.active <= :most"
                    " WHERE sc.scope_key = :scope")
# A scope's whole index, for a copy in memory: its range of the token index's vocabulary
# (``index.bounds``), read through the connection's ``fts5vocab`` table (``shards.py``).
SCOPE_POSTINGS = ("SELECT substr(term, 9), doc & 4294967295 FROM temp.terms_vocab"
                  " WHERE term >= :low AND term < :high")
# After the scope's uses counter (read once: it does not depend on the row).
LISTING = (f"SELECT (SELECT uses FROM scopes WHERE scope_key = :scope), {RECORD_COLUMNS}"
           f" FROM records WHERE {ACTIVE}"
           " AND (:kind IS NULL OR kind = :kind)"
           " AND (:terms IS NULL OR seq IN (SELECT t.rowid & 4294967295"
           f" FROM json_each(:terms) AS q CROSS JOIN terms_fts AS t"
           f" WHERE t.terms_fts MATCH {_PHRASE}))"
           " ORDER BY seq DESC LIMIT :limit")

# --- writes --------------------------------------------------------------------------------

# With the thread of the scope's last row (NULL when it is gone), which a write's first
# record may continue.
LOCK_SCOPE = ("SELECT last_seq, active, (SELECT source_thread_key FROM records AS r"
              " WHERE r.scope_key = sc.scope_key AND r.seq = sc.last_seq), last_write, sid"
              " FROM scopes AS sc WHERE scope_key = :scope")
# A new scope's id in the token index: one above the highest ever given in the shard (a
# scope's row is never deleted, so an id is never given twice).
NEW_SCOPE = ("INSERT INTO scopes (scope_key, created_at, sid) VALUES (:scope, :now,"
             " (SELECT ifnull(max(sid), 0) + 1 FROM scopes)) ON CONFLICT DO NOTHING")
# Two lookups (the dedup index by its key, then the primary key) in a UNION: with an OR, or
# without the index named, SQLite scans every row of the scope.
BATCH_ROWS = (f"SELECT {RECORD_COLUMNS} FROM records INDEXED BY records_active_key"
              f" WHERE {ACTIVE} AND {dedup_key('norm')} IN"
              f" (SELECT {dedup_key('value')} FROM json_each(:norms))"
              " AND norm IN (SELECT value FROM json_each(:norms))"
              f" UNION SELECT {RECORD_COLUMNS} FROM records WHERE {ACTIVE}"
              " AND seq IN (SELECT value FROM json_each(:seqs))"
              " ORDER BY seq")
# A write's rows and postings go in as one JSON array a statement, not a statement a row:
# SQLite runs each statement without the GIL, and a thread taking the GIL back while the
# event loop is busy may wait a switch interval (5 ms) each time, so a write of 50 rows
# (about a thousand statements) took seconds beside busy retrievals. Each row is made JSONB
# first, once (materialized): its 18 values read from the text each time cost twice as much.
INSERT_ROWS = ("WITH r (v) AS MATERIALIZED (SELECT jsonb(value) FROM json_each(:rows))"
               " INSERT INTO records (scope_key, seq, id, kind, text, norm, keywords,"
               " source_thread_key, source_run_id, created_at, last_used_at, use_count,"
               " confidence, supersedes, restates, status, source, retired_at, tokens)"
               " SELECT :scope, " + ", ".join(f"v ->> {i}" for i in range(18)) + " FROM r")
# [[seq, use count, last used, confidence, status], ...]: the rows a batch restates,
# supersedes or confirms, one statement (materialized first, so each row is a key lookup).
CHANGE_ROWS = ("WITH c (seq, uses, last, confidence, status) AS MATERIALIZED"
               " (SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4"
               " FROM json_each(:rows))"
               " UPDATE records SET use_count = c.uses, last_used_at = c.last,"
               " confidence = c.confidence, status = c.status,"
               " retired_at = CASE WHEN c.status = 'active' THEN retired_at ELSE :now END"
               " FROM c WHERE records.scope_key = :scope AND records.seq = c.seq")
# Deleting a scope's counters (the count totals' triggers keep the totals).
DELETE_COUNTERS = "DELETE FROM counters WHERE scope_key = :scope"

# --- use counts and counters ---------------------------------------------------------------

# [[scope, seq, uses, last use], ...]: a save's uses, of every scope it saves, in one
# statement. A last use never moves back (another process may have used the row since). The
# array is materialized first so that it drives the join, one primary-key lookup a row
# (left to itself SQLite scans the rows and looks each one up in the array) ...
BUMP = ("WITH bump (scope, seq, uses, last) AS MATERIALIZED"
        " (SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(:bumps))"
        " UPDATE records SET use_count = use_count + bump.uses,"
        " last_used_at = max(ifnull(last_used_at, 0), bump.last)"
        " FROM bump WHERE records.scope_key = bump.scope AND records.seq = bump.seq")
# ... and each of those scopes' uses counter moved on, in another ([scope, ...]).
NEXT_USES = ("UPDATE scopes SET uses = uses + 1"
             " WHERE scope_key IN (SELECT value FROM json_each(:scopes))"
             " RETURNING scope_key, uses")
ADD_COUNT = ("INSERT INTO counters (scope_key, day, name, value) VALUES (?, ?, ?, ?)"
             " ON CONFLICT (scope_key, day, name) DO UPDATE SET value = value + excluded.value")
