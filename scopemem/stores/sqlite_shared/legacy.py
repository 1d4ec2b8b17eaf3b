"""Reading the retired file layout's scope files (a SQLite database per scope, named after
its key, ``scope_file_name``) for the migration into the shared layout (``migrate.py``),
which upgrades an older one in a scratch copy (``apply_schema``). The migrations below are
the file layout's as released: they describe files that exist, and never change.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from scopemem.stores.shared.sql import Migration
from scopemem.stores.sqlite_shared import sql
from scopemem.stores.sqlite_shared.schema import pragma

__all__ = ["APPLICATION_ID", "NEXT_SEQ_SQL", "SCHEMA_VERSION", "apply_schema", "connect",
           "META_SCOPE_KEY", "is_scope_file", "scope_file_name"]

# "ScMm" in the database header marks a file as ours; a file carrying another application id
# (or none, with tables in it) belongs to something else and is never touched.
APPLICATION_ID = 0x53634D6D
META_SCOPE_KEY = "scope_key"
_READABLE_CHARS = 40
_DIGEST_CHARS = 32
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_SCOPE_FILE = re.compile(r".+-[0-9a-f]{32}\.db\Z")


def scope_file_name(scope_key: str) -> str:
    """A scope's file name: a readable prefix and a digest of the key."""
    digest = hashlib.sha256(scope_key.encode("utf-8")).hexdigest()[:_DIGEST_CHARS]
    readable = _UNSAFE.sub("_", scope_key).strip("_-")[:_READABLE_CHARS].rstrip("_-")
    return f"{readable or 'scope'}-{digest}.db"


def is_scope_file(name: str) -> bool:
    """Whether ``name`` is a scope file's."""
    return _SCOPE_FILE.match(name) is not None


def connect(path: str, flags: int | None = None) -> Any:
    """A connection to a scope file (read-write, not creating, unless ``flags`` say
    otherwise) with no checkpoint on close: the file is left as found."""
    apsw = sql.apsw_module()
    conn = apsw.Connection(path, flags=apsw.SQLITE_OPEN_READWRITE if flags is None else flags)
    try:
        conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    except BaseException:
        conn.close()
        raise
    return conn


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
SCRUB_FORGOTTEN_SQL = ("UPDATE records SET text = '', norm = '', keywords = '[]'"
                       " WHERE status = 'forgotten' AND (text != '' OR keywords != '[]')")
# The highest seq the file ever held, recorded before a purge (ids are MAX(seq) + 1 else).
META_LAST_SEQ = "last_seq"
NEXT_SEQ_SQL = (
    "SELECT max(ifnull((SELECT max(seq) FROM records), 0),"
    f" ifnull((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '{META_LAST_SEQ}'), 0)) + 1"
)

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "records, lookup indexes and the token index", (
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
        "CREATE VIRTUAL TABLE IF NOT EXISTS records_fts USING fts5(tokens, tokenize = 'ascii')",
    )),
    Migration(2, "a change counter", (
        """CREATE TABLE IF NOT EXISTS generation (
            id    INTEGER PRIMARY KEY CHECK (id = 0),
            value INTEGER NOT NULL
        )""",
        "INSERT OR IGNORE INTO generation (id, value) VALUES (0, 0)",
    )),
    Migration(3, "who stated each record", (), columns=(
        ("records", "source", "TEXT NOT NULL DEFAULT 'reflection'"
                              " CHECK (source IN ('human', 'reflection'))"),
    )),
    Migration(4, "when each row left active, and forgotten text scrubbed", (
        f"CREATE INDEX IF NOT EXISTS records_dead ON records (retired_at)"
        f" WHERE status IN {PURGEABLE_STATUSES}",
    ), columns=(
        ("records", "retired_at", "INTEGER"),
    ), once=(
        # Rows dead before the column count as dying at the upgrade: nothing purged at once.
        "UPDATE records SET retired_at = ? WHERE status != 'active' AND retired_at IS NULL",
        SCRUB_FORGOTTEN_SQL,
    )),
    Migration(5, "lookup indexes of the active rows only", (
        "CREATE INDEX IF NOT EXISTS records_active_norm ON records (norm)"
        " WHERE status = 'active'",
        "CREATE INDEX IF NOT EXISTS records_active_by_seq ON records (seq DESC)"
        " WHERE status = 'active'",
        "CREATE INDEX IF NOT EXISTS records_active_by_use"
        " ON records (last_used_at DESC, created_at DESC) WHERE status = 'active'",
    ), once=(
        "DROP INDEX IF EXISTS records_status_norm",
        "DROP INDEX IF EXISTS records_active_seq",
        "DROP INDEX IF EXISTS records_active_used",
    )),
    Migration(6, "per-day counters", (
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
    """Bring a scope file's schema up to date (the open's time bound to each ``once``
    statement's ``?``). The caller holds a write transaction."""
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

