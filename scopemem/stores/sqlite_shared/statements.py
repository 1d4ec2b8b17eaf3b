"""Every statement the shared-file SQLite store runs, for any shard (but the three that
write its token index, which are ``index.py``'s own).

Each one names the scope as a bound value (``:scope``) in its WHERE clause, and every index
leads with ``scope_key`` (``schema.py``). A list of values (seqs, terms, normalized texts)
is bound as one JSON array and read with ``json_each``, so a statement's text never depends
on what a client sent and user text never reaches SQL as anything but a value.
"""

from __future__ import annotations

from scopemem.stores.sqlite_shared.schema import RECORD_COLUMNS as RECORD_COLUMNS

ACTIVE = "scope_key = :scope AND status = 'active'"
IN_SEQS = "seq IN (SELECT value FROM json_each(:seqs))"
PURGEABLE = "('superseded', 'evicted', 'swept')"

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
_R_COLUMNS = ", ".join(f"r.{column.strip()}" for column in RECORD_COLUMNS.split(","))
ACTIVE_ROWS_AT = (f"SELECT sc.uses, sc.generation, {_R_COLUMNS} FROM scopes AS sc"
                  " LEFT JOIN records AS r ON r.scope_key = sc.scope_key"
                  " AND r.status = 'active' AND r.seq IN (SELECT value FROM json_each(:seqs))"
                  " WHERE sc.scope_key = :scope")
# A small scope's every active row with its terms (``reads.search``: ranked from them in
# one statement); only the scope's row, with NULLs, for a scope of more than :most.
SMALL_SCOPE_ROWS = (f"SELECT sc.uses, sc.generation, sc.active, {_R_COLUMNS}, r.tokens"
                    " FROM scopes AS sc LEFT JOIN records AS r ON r.scope_key = sc.scope_key"
                    " AND r.status = 'active' AND sc.active <= :most"
                    " WHERE sc.scope_key = :scope")
# The scope's uses counter, for a statement answering rows (read once: it does not depend
# on the row).
USES_COUNTER = "(SELECT uses FROM scopes WHERE scope_key = :scope)"
# A scope's whole index, for a copy in memory: its range of the token index's vocabulary
# (``index.bounds``), read through the connection's ``fts5vocab`` table (``shards.py``).
SCOPE_POSTINGS = ("SELECT substr(term, 9), doc & 4294967295 FROM temp.terms_vocab"
                  " WHERE term >= :low AND term < :high")
# Its active rows' last touches as saved (lower bounds for the copy's weighing).
SCOPE_TOUCHES = ("SELECT seq, ifnull(last_used_at, created_at) FROM records"
                 f" WHERE {ACTIVE}")
ACTIVE_SEQS = f"SELECT seq FROM records WHERE {ACTIVE} AND {IN_SEQS}"
LISTING = (f"SELECT {USES_COUNTER}, {RECORD_COLUMNS} FROM records WHERE {ACTIVE}"
           " AND (:kind IS NULL OR kind = :kind)"
           " AND (:terms IS NULL OR seq IN (SELECT t.rowid & 4294967295"
           f" FROM json_each(:terms) AS q CROSS JOIN terms_fts AS t"
           f" WHERE t.terms_fts MATCH {_PHRASE}))"
           " ORDER BY seq DESC LIMIT :limit")
ACTIVE_FACTS = f"SELECT {RECORD_COLUMNS} FROM records WHERE {ACTIVE} AND kind = 'fact' ORDER BY seq"

# --- writes --------------------------------------------------------------------------------

LOCK_SCOPE = ("SELECT last_seq, active, generation, sid FROM scopes"
              " WHERE scope_key = :scope")
# A new scope's id in the token index: one above the highest ever given in the shard (a
# scope's row is never deleted, so an id is never given twice).
NEW_SCOPE = ("INSERT INTO scopes (scope_key, created_at, sid) VALUES (:scope, :now,"
             " (SELECT ifnull(max(sid), 0) + 1 FROM scopes)) ON CONFLICT DO NOTHING")
COUNT_SCOPES = "SELECT count(*) FROM scopes"
SET_COUNTS = ("UPDATE scopes SET last_seq = :last, active = :active,"
              " generation = generation + 1 WHERE scope_key = :scope")
ADD_ACTIVE = ("UPDATE scopes SET active = active + :delta, generation = generation + 1"
              " WHERE scope_key = :scope")
# Two lookups (the dedup index, then the primary key) in a UNION: with an OR, or without the
# index named, SQLite scans every row of the scope.
BATCH_ROWS = (f"SELECT {RECORD_COLUMNS} FROM records INDEXED BY records_active_norm"
              f" WHERE {ACTIVE} AND norm IN (SELECT value FROM json_each(:norms))"
              f" UNION SELECT {RECORD_COLUMNS} FROM records WHERE {ACTIVE} AND {IN_SEQS}"
              " ORDER BY seq")
# A write's rows and postings go in as one JSON array a statement, not a statement a row:
# SQLite runs each statement without the GIL, and a thread taking the GIL back while the
# event loop is busy may wait a switch interval (5 ms) each time, so a write of 50 rows
# (about a thousand statements) took seconds beside busy retrievals.
INSERT_ROWS = ("INSERT INTO records (scope_key, seq, id, kind, text, norm, keywords,"
               " source_thread_key, source_run_id, created_at, last_used_at, use_count,"
               " confidence, supersedes, restates, status, source, retired_at, tokens)"
               " SELECT :scope, " + ", ".join(f"value ->> {i}" for i in range(18))
               + " FROM json_each(:rows)")
THREAD_OF = "SELECT source_thread_key FROM records WHERE scope_key = :scope AND seq = :seq"
# [[seq, use count, last used, confidence, status], ...]: the rows a batch restates,
# supersedes or confirms, one statement (materialized first, so each row is a key lookup).
CHANGE_ROWS = ("WITH c (seq, uses, last, confidence, status) AS MATERIALIZED"
               " (SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4"
               " FROM json_each(:rows))"
               " UPDATE records SET use_count = c.uses, last_used_at = c.last,"
               " confidence = c.confidence, status = c.status,"
               " retired_at = CASE WHEN c.status = 'active' THEN retired_at ELSE :now END"
               " FROM c WHERE records.scope_key = :scope AND records.seq = c.seq")
RETIRE = (f"UPDATE records SET status = :status, retired_at = :now WHERE {ACTIVE}"
          f" AND {IN_SEQS} RETURNING seq")
# The eviction's two short reads (``batches.pick_eviction``): what its order reads.
_LRU = f"SELECT seq, last_used_at, created_at FROM records WHERE {ACTIVE}"
LRU_NEVER_USED = f"{_LRU} AND last_used_at IS NULL ORDER BY created_at, seq LIMIT :excess"
LRU_USED = (f"{_LRU} AND last_used_at IS NOT NULL ORDER BY last_used_at, created_at, seq"
            " LIMIT :excess")
# The retention, oldest death first: a swept row past it keeps its id, status, provenance,
# times and counts, never its text (nor its ``retired_at``, so the retention never reads it
# again); a superseded or evicted row is deleted.
_DUE = ("(SELECT seq FROM records WHERE scope_key = :scope"
        f" AND status IN {PURGEABLE} AND retired_at <= :cutoff AND status {{}} 'swept'"
        " ORDER BY retired_at LIMIT :rows)")
SCRUB_SWEPT = ("UPDATE records SET text = '', norm = '', keywords = '[]', tokens = '',"
               " retired_at = NULL WHERE scope_key = :scope AND seq IN " + _DUE.format("="))
PURGE = "DELETE FROM records WHERE scope_key = :scope AND seq IN " + _DUE.format("!=")
# Deleting a scope's data (``writes.delete_scope``): its row in ``scopes`` stays, emptied.
DELETE_RECORDS = "DELETE FROM records WHERE scope_key = :scope"
DELETE_COUNTERS = "DELETE FROM counters WHERE scope_key = :scope"
EMPTY_SCOPE = ("UPDATE scopes SET active = 0, generation = generation + 1,"
               " last_write = NULL WHERE scope_key = :scope")
# Scrubbing a person out of a scope's provenance (``writes.scrub_provenance``): the rows
# whose thread key or run id holds their id, then each row's new values.
NAMING = ("SELECT seq, source_thread_key, source_run_id FROM records WHERE scope_key = :scope"
          " AND (instr(source_thread_key, :person) > 0"
          " OR instr(ifnull(source_run_id, ''), :person) > 0)")
SET_SOURCE = ("UPDATE records SET source_thread_key = ?, source_run_id = ?"
              " WHERE scope_key = ? AND seq = ?")
NEXT_GENERATION = "UPDATE scopes SET generation = generation + 1 WHERE scope_key = :scope"
FORGET = ("UPDATE records SET status = 'forgotten', retired_at = :now, text = '', norm = '',"
          f" keywords = '[]', tokens = '' WHERE {ACTIVE} AND seq = :seq AND id = :id")

# --- use counts and counters ---------------------------------------------------------------

# Every pending use of a scope in one statement: [seq, uses, last use] per row, as one JSON
# array. A last use never moves back (another process may have used the row since). The
# array is materialized first so that it drives the join, one primary-key lookup a row:
# left to itself SQLite scans every row of the scope and looks each one up in the array.
# [[scope, seq, uses, last use], ...]: a save's uses, of every scope it saves, in one
# statement (materialized first, so each row is a key lookup) ...
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
READ_COUNTS = ("SELECT scope_key, day, name, value FROM counters WHERE day >= :since"
               " ORDER BY scope_key, day, name")
