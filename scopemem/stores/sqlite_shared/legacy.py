"""Reading a data directory of the retired file layout (a SQLite database per scope), for
the migration into the shared layout (``migrate.py``): nothing here writes to those files.

A scope file is named ``<readable>-<digest>.db`` after its scope key (``scope_file_name``),
records its scope key in ``meta`` and carries the application id ``APPLICATION_ID``; a file
of an older schema version is brought up to date (``apply_schema``) in a scratch copy before
it is read. The migrations below are the file layout's, as released: they describe files
that exist, and never change.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import attrs

from scopemem.stores.sqlite_shared import sql
from scopemem.stores.sqlite_shared.schema import pragma, stored_meta

__all__ = ["APPLICATION_ID", "NEXT_SEQ_SQL", "SCHEMA_VERSION", "apply_schema", "connect",
           "is_scope_file", "scope_file_name", "stored_scope"]

# "ScMm" in the database header marks a file as ours; a file carrying another application id
# (or none, with tables in it) belongs to something else and is never touched.
APPLICATION_ID = 0x53634D6D
META_SCOPE_KEY = "scope_key"
_READABLE_CHARS = 40
_DIGEST_CHARS = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_SCOPE_FILE = re.compile(r".+-[0-9a-f]{32}\.db\Z")


def scope_file_name(scope_key: str) -> str:
    """The file layout's database file name for a scope key: a readable prefix and a digest
    of the key."""
    digest = hashlib.sha256(scope_key.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    readable = _UNSAFE.sub("_", scope_key).strip("_-")[:_READABLE_CHARS].rstrip("_-")
    return f"{readable or 'scope'}-{digest}.db"


def is_scope_file(name: str) -> bool:
    """Whether ``name`` is the name of a scope file of the file layout."""
    return _SCOPE_FILE.match(name) is not None


def connect(path: str, flags: int | None = None) -> Any:
    """An apsw connection to a scope file (read-write, not creating, unless ``flags`` say
    otherwise), with no checkpoint on close: the file is left as it was found."""
    apsw = sql.apsw_module()
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE if flags is None else flags)
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    except BaseException:
        conn.close()
        raise
    return conn


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

PURGEABLE_STATUSES = "('superseded', 'evicted', 'swept')"
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
        # The purge of dead rows past the retention (``SQL.purge``) reads them oldest
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


def stored_scope(conn: Any) -> str | None:
    return stored_meta(conn, META_SCOPE_KEY)
