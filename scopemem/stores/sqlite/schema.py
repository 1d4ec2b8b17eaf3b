"""The on-disk layout of one scope's SQLite database, and how it is brought up to date.

Every open re-runs the whole schema inside one write transaction. Each migration is made of
statements that are safe to repeat (``CREATE … IF NOT EXISTS``), so re-running them over a
live database changes nothing; the ``schema_migrations`` table records which versions a file
has seen and ``PRAGMA user_version`` the newest one, so a file written by a newer scopemem is
refused instead of being half understood.

This module is plain data plus two small functions taking an apsw connection; it never
imports apsw itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

# "ScMm" in the database header marks a file as ours; a file carrying another application id
# (or none, with tables in it) belongs to something else and is never touched.
APPLICATION_ID = 0x53634D6D

META_SCOPE_KEY = "scope_key"
# The tokenizing rules (``words.FOLDING``) the file's dedup keys and indexed tokens follow.
META_FOLDING = "folding"


@attrs.frozen
class Migration:
    """Columns to add where a file lacks them (SQLite has no ``ADD COLUMN IF NOT EXISTS``):
    ``(table, column, definition)``, added before the statements, so those may use them;
    statements safe to repeat; and ``once``: statements run only when the file first reaches
    this version, in the same transaction, with the open's time bound to every ``?``."""

    version: int
    name: str
    statements: tuple[str, ...]
    columns: tuple[tuple[str, str, str], ...] = ()
    once: tuple[str, ...] = ()


# Column order shared by every SELECT that builds a Record (see ``sql.record``): the
# seq, then the record's fields in ``Record``'s order (columns 1-15). Retrieval statements
# append the row's indexed tokens as column 16.
RECORD_COLUMNS = (
    "seq, id, scope_key, kind, text, keywords, source_thread_key, source_run_id,"
    " created_at, last_used_at, use_count, confidence, supersedes, restates, status, source"
)


def _indexed_tokens(seq: str) -> str:
    """The indexed tokens of the row whose seq is the column ``seq``, read from the FTS5
    content table by its integer key (a b-tree lookup, no FTS machinery). They are
    ``fts_tokens`` of the row's text and keywords, so splitting them on spaces gives the
    record's tokens without running the tokenizer again."""
    return f"(SELECT c0 FROM records_fts_content WHERE records_fts_content.id = {seq})"


# Appended to RECORD_COLUMNS by the retrieval statements, whose FTS hit is named ``hit``.
HIT_TOKENS = _indexed_tokens("hit")

GENERATION_SQL = "SELECT value FROM generation WHERE id = 0"
NEXT_GENERATION_SQL = "UPDATE generation SET value = value + 1 WHERE id = 0"

# Every active row as the retrieval statements read them (RECORD_COLUMNS, then the indexed
# tokens), for an in-memory view of the scope. An active row missing from the index (which
# the reconciliation on open repairs) reads NULL tokens.
ACTIVE_ROWS_SQL = (
    f"SELECT {RECORD_COLUMNS}, {_indexed_tokens('records.seq')} FROM records"
    " WHERE status = 'active'"
)

# A small scope's every active row (as ACTIVE_ROWS_SQL reads it) followed by the generation it
# was read at, in one statement, so in one committed state: what a retrieval through SQL reads
# of a scope of at most ``reads.SMALL_SCOPE_ROWS`` rows (bind that number plus one). It ranks
# them in memory rather than asking the index and counting the statistics statement by
# statement; the same rows build the scope's view.
SMALL_SCOPE_SQL = (
    f"SELECT {RECORD_COLUMNS}, {_indexed_tokens('records.seq')}, ({GENERATION_SQL})"
    " FROM records WHERE status = 'active' LIMIT ?"
)

_BOOKKEEPING = (
    """CREATE TABLE IF NOT EXISTS meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS schema_migrations (
        version    INTEGER PRIMARY KEY,
        name       TEXT NOT NULL,
        applied_at INTEGER NOT NULL
    )""",
)

# The dead rows the retention acts on: superseded and evicted rows are deleted, swept rows
# scrubbed (``SCRUB_SWEPT_SQL``) and kept; a forgotten row is scrubbed at once, and kept.
PURGEABLE_STATUSES = "('superseded', 'evicted', 'swept')"
# A swept row past the retention keeps its id, status, provenance, times and counts, never
# its text; its ``retired_at`` goes, so the retention never reads it again.
SCRUB_SWEPT_SQL = ("UPDATE records SET text = '', norm = '', keywords = '[]', retired_at = NULL"
                   " WHERE status = 'swept' AND seq IN ({seqs})")
# What a forgotten row keeps of its content: nothing (its FTS entry is deleted with it).
SCRUB_FORGOTTEN_SQL = ("UPDATE records SET text = '', norm = '', keywords = '[]'"
                       " WHERE status = 'forgotten' AND (text != '' OR keywords != '[]')")
# The highest seq the file has ever held, recorded before a purge deletes rows, so the next
# id never goes back (ids are MAX(seq) + 1 otherwise).
META_LAST_SEQ = "last_seq"
NEXT_SEQ_SQL = (
    "SELECT max(ifnull((SELECT max(seq) FROM records), 0),"
    f" ifnull((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '{META_LAST_SEQ}'), 0)) + 1"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "records, lookup indexes and the token index", (
        # ``seq`` is the rowid: ids are mem:<scope>:<seq> and a file holds one scope, so the
        # sequence number alone identifies a row, and MAX(seq) is a b-tree edge read.
        """CREATE TABLE IF NOT EXISTS records (
            seq               INTEGER PRIMARY KEY,
            id                TEXT NOT NULL,
            scope_key         TEXT NOT NULL,
            kind              TEXT NOT NULL CHECK (kind IN ('fact', 'summary')),
            text              TEXT NOT NULL,
            norm              TEXT NOT NULL,
            keywords          TEXT NOT NULL DEFAULT '[]',
            source_thread_key TEXT NOT NULL,
            source_run_id     TEXT,
            created_at        INTEGER NOT NULL,
            last_used_at      INTEGER,
            use_count         INTEGER NOT NULL DEFAULT 0,
            confidence,       -- no declared type: 1 reads back as 1, 0.75 as 0.75
            supersedes        TEXT,
            restates          TEXT,
            status            TEXT NOT NULL DEFAULT 'active'
                CHECK (status IN ('active', 'superseded', 'forgotten', 'evicted', 'swept'))
        )""",
        # The lookup indexes of the active rows are migration 5's (they were status-prefixed
        # indexes of every row before it).
        # The prefilter. It indexes the engine's own tokens (space-joined), not the raw text,
        # and holds exactly the active rows, keyed by seq as its rowid.
        "CREATE VIRTUAL TABLE IF NOT EXISTS records_fts USING fts5(tokens, tokenize = 'ascii')",
    )),
    Migration(2, "a change counter", (
        # One row, incremented by every transaction that changes records (a write batch, a
        # forget, a sweep; never a usage bump). A process holding the scope's rows in memory
        # compares it with the value it read them at, so a change made by another process
        # (or connection) is never answered from a stale copy. A file at this version is
        # refused by an older scopemem, which would change rows without counting.
        """CREATE TABLE IF NOT EXISTS generation (
            id    INTEGER PRIMARY KEY CHECK (id = 0),
            value INTEGER NOT NULL
        )""",
        "INSERT OR IGNORE INTO generation (id, value) VALUES (0, 0)",
    )),
    Migration(3, "who stated each record", (), columns=(
        # A person's remember or the extractor's reflection: a reflection candidate may not
        # supersede a record a person stated. Rows from before read as reflection. A file at
        # this version is refused by an older scopemem, which would write rows without it.
        ("records", "source", "TEXT NOT NULL DEFAULT 'reflection'"
                              " CHECK (source IN ('human', 'reflection'))"),
    )),
    Migration(4, "when each row left active, and forgotten text scrubbed", (
        # The purge of dead rows past the retention (``writes.Writes._purge``) reads them oldest
        # death first; the index holds only the rows it may purge.
        f"CREATE INDEX IF NOT EXISTS records_dead ON records (retired_at)"
        f" WHERE status IN {PURGEABLE_STATUSES}",
    ), columns=(
        # Epoch milliseconds; NULL while the row is active. A file at this version is refused
        # by an older scopemem, which would retire rows without it.
        ("records", "retired_at", "INTEGER"),
    ), once=(
        # Rows that died before the column existed count as dying at the upgrade, so they
        # keep their retention from then: an upgrade purges nothing at once.
        "UPDATE records SET retired_at = ? WHERE status != 'active' AND retired_at IS NULL",
        # A forgotten row keeps its id, status and provenance, never its text.
        SCRUB_FORGOTTEN_SQL,
    )),
    Migration(5, "lookup indexes of the active rows only", (
        # Partial indexes: a row leaving active status (an eviction, a supersede) only leaves
        # them, and the dead rows the retention keeps weigh on none of them. Every statement
        # they serve says ``status = 'active'`` literally, which is how SQLite matches a
        # partial index. Write-time dedup: the active rows sharing a candidate's normalized
        # text.
        "CREATE INDEX IF NOT EXISTS records_active_norm ON records (norm)"
        " WHERE status = 'active'",
        # list, and the active count: the newest active rows first.
        "CREATE INDEX IF NOT EXISTS records_active_by_seq ON records (seq DESC)"
        " WHERE status = 'active'",
        # The eviction fetch: the least recently used active rows.
        "CREATE INDEX IF NOT EXISTS records_active_by_use"
        " ON records (last_used_at DESC, created_at DESC) WHERE status = 'active'",
    ), once=(
        # The status-prefixed indexes of every row that these replace.
        "DROP INDEX IF EXISTS records_status_norm",
        "DROP INDEX IF EXISTS records_active_seq",
        "DROP INDEX IF EXISTS records_active_used",
    )),
    Migration(6, "per-day counters", (
        # What happened in this scope, per UTC day and counter name (``core.counters``).
        # The store adds write outcomes, sweeps and forgets in the transaction making the
        # change, so the counts agree with the rows after any crash. A file at this version
        # is refused by an older scopemem, which would change rows without counting them.
        """CREATE TABLE IF NOT EXISTS counters (
            day   INTEGER NOT NULL,
            name  TEXT NOT NULL,
            value INTEGER NOT NULL,
            PRIMARY KEY (day, name)
        ) WITHOUT ROWID""",
    )),
)

# Adds to one counter of the file's scope (one ``executemany`` per transaction).
ADD_COUNT_SQL = ("INSERT INTO counters (day, name, value) VALUES (?, ?, ?)"
                 " ON CONFLICT (day, name) DO UPDATE SET value = value + excluded.value")
READ_COUNTS_SQL = "SELECT day, name, value FROM counters WHERE day >= ? ORDER BY day, name"

SCHEMA_VERSION = max(migration.version for migration in MIGRATIONS)


def apply_schema(conn: Any, now: int) -> None:
    """Create or complete the schema. The caller holds a write transaction."""
    for statement in _BOOKKEEPING:
        conn.execute(statement)
    seen = {version for (version,) in conn.execute("SELECT version FROM schema_migrations")}
    for migration in MIGRATIONS:
        for table, column, definition in migration.columns:
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
        for statement in migration.statements:
            conn.execute(statement)
        if migration.version not in seen:
            for statement in migration.once:
                conn.execute(statement, (now,) * statement.count("?"))
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, now),
            )
    if pragma(conn, "application_id") != APPLICATION_ID:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    if pragma(conn, "user_version") != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def claim_scope(conn: Any, scope_key: str) -> str:
    """Record ``scope_key`` as the file's owner unless one is recorded; return the owner."""
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)",
                 (META_SCOPE_KEY, scope_key))
    return stored_scope(conn) or ""


def stored_scope(conn: Any) -> str | None:
    return stored_meta(conn, META_SCOPE_KEY)


def stored_meta(conn: Any, key: str) -> str | None:
    rows = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
    return rows[0][0] if rows else None


def set_meta(conn: Any, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                 " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))


def has_table(conn: Any, name: str) -> bool:
    rows = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (name,)).fetchall()
    return bool(rows)


def table_count(conn: Any) -> int:
    count: int = conn.execute("SELECT count(*) FROM sqlite_master").fetchall()[0][0]
    return count


def pragma(conn: Any, name: str) -> Any:
    return conn.execute(f"PRAGMA {name}").fetchall()[0][0]


def statements() -> Iterable[str]:
    """Every repeatable schema statement, bookkeeping first (for documentation and tests);
    the columns migrations add are applied by ``apply_schema`` only where missing."""
    yield from _BOOKKEEPING
    for migration in MIGRATIONS:
        yield from migration.statements
