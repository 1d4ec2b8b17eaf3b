"""The on-disk layout of the shared-file SQLite store: a fixed number of shard files, each
holding every scope whose key hashes to it.

Each shard is one SQLite database in WAL mode. Its tables are keyed by scope first, as the
PostgreSQL store's one table is (``stores/postgres/migrations.py``): ``scopes`` (a row per
scope: its last seq, active count and change counter), ``records`` (``(scope_key, seq)``),
``postings`` (``(scope_key, term, seq)``: the engine's own terms of each active record, the
index every retrieval reads; a large scope's recent changes are in ``fresh_postings`` and
``stale_postings`` until they are merged, ``fresh.py``) and ``counters``. Every statement
names the scope as a bound value in its WHERE clause, and every index leads with
``scope_key``, so no statement can read or change another scope's rows, whatever its key
holds.

A shard records which shard it is (``meta``: its index and the shard count) and carries the
store's application id, so a file copied over another shard's name, or a database of
another application, is refused rather than read as the wrong scopes.

This module is plain data plus small functions taking an apsw connection.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

# "ScMs": a shard of the shared-file layout (the file-per-scope layout's files say "ScMm").
APPLICATION_ID = 0x53634D73
SCHEMA_VERSION = 3
#: Shards of a data directory. Fixed: a scope's shard is its key's hash modulo this, so a
#: directory written with one count cannot be read with another.
SHARDS = 16

META_SHARD = "shard"
META_SHARDS = "shards"
META_FOLDING = "folding"

# The seq, then the record's fields in ``Record``'s order (as ``sqlite.schema.RECORD_COLUMNS``,
# so ``sqlite.sql.record`` builds records from these rows too).
RECORD_COLUMNS = ("seq, id, scope_key, kind, text, keywords, source_thread_key, source_run_id,"
                  " created_at, last_used_at, use_count, confidence, supersedes, restates,"
                  " status, source")

TABLES = (
    """CREATE TABLE IF NOT EXISTS meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID""",
    # A scope's row is created by its first write; ``generation`` counts every change to its
    # records (never a use count), for copies of the scope held in memory; ``uses`` every
    # save of its use counts (``usage.py``); ``fresh_from`` the first row whose postings are
    # in ``fresh_postings`` (NULL: none, ``fresh.py``).
    """CREATE TABLE IF NOT EXISTS scopes (
        scope_key  TEXT PRIMARY KEY,
        last_seq   INTEGER NOT NULL DEFAULT 0,
        active     INTEGER NOT NULL DEFAULT 0,
        generation INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        uses       INTEGER NOT NULL DEFAULT 0,
        fresh_from INTEGER
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS records (
        scope_key         TEXT NOT NULL,
        seq               INTEGER NOT NULL,
        id                TEXT NOT NULL,
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
        status            TEXT NOT NULL
            CHECK (status IN ('active', 'superseded', 'forgotten', 'evicted', 'swept')),
        source            TEXT NOT NULL CHECK (source IN ('human', 'reflection')),
        retired_at        INTEGER,
        tokens            TEXT NOT NULL DEFAULT '',
        PRIMARY KEY (scope_key, seq)
    ) WITHOUT ROWID""",
    # Partial indexes of the active rows (each statement they serve says
    # ``status = 'active'`` literally): write-time dedup, and the eviction's order.
    "CREATE INDEX IF NOT EXISTS records_active_norm ON records (scope_key, norm)"
    " WHERE status = 'active'",
    "CREATE INDEX IF NOT EXISTS records_active_by_use"
    " ON records (scope_key, last_used_at, created_at, seq) WHERE status = 'active'",
    # The purge of dead rows past the retention, oldest death first.
    "CREATE INDEX IF NOT EXISTS records_dead ON records (scope_key, retired_at)"
    " WHERE status IN ('superseded', 'evicted', 'swept')",
    # One row per (term, active record); ``continues``: the record was written just after
    # one of the same thread (the neighbour credit, ``ranking.rank_covered``).
    """CREATE TABLE IF NOT EXISTS postings (
        scope_key TEXT NOT NULL,
        term      TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        continues INTEGER NOT NULL,
        PRIMARY KEY (scope_key, term, seq)
    ) WITHOUT ROWID""",
    # A large scope's recent writes (``fresh.py``): the postings of its rows from
    # ``scopes.fresh_from`` on, and the rows retired whose postings are still in ``postings``
    # (with the terms to take out), until the scope's next merge.
    # Ordered by seq, not term: a write appends its rows' postings on a page or two (a
    # retrieval reads all of a scope's few fresh postings and keeps its terms').
    """CREATE TABLE IF NOT EXISTS fresh_postings (
        scope_key TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        term      TEXT NOT NULL,
        continues INTEGER NOT NULL,
        PRIMARY KEY (scope_key, seq, term)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS stale_postings (
        scope_key TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        tokens    TEXT NOT NULL,
        PRIMARY KEY (scope_key, seq)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS counters (
        scope_key TEXT NOT NULL,
        day       INTEGER NOT NULL,
        name      TEXT NOT NULL,
        value     INTEGER NOT NULL,
        PRIMARY KEY (scope_key, day, name)
    ) WITHOUT ROWID""",
)


@functools.lru_cache(maxsize=1 << 16)  # asked several times a request, for the same keys
def shard_of(scope_key: str, shards: int = SHARDS) -> int:
    """The shard holding ``scope_key``: the first four bytes of its SHA-256, modulo."""
    return int.from_bytes(hashlib.sha256(scope_key.encode()).digest()[:4], "big") % shards


def shard_file_name(index: int, shards: int = SHARDS) -> str:
    return f"shard-{index:03d}-of-{shards:03d}.db"


def pragma(conn: Any, name: str) -> Any:
    return conn.execute(f"PRAGMA {name}").fetchall()[0][0]


def stored_meta(conn: Any, key: str) -> str | None:
    rows = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
    return rows[0][0] if rows else None


def set_meta(conn: Any, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                 " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))


def identity_problem(conn: Any, index: int, shards: int) -> str | None:
    """Why the open file is not shard ``index`` of ``shards`` of this store (None when it is,
    or when it is empty). Reads only; the caller holds a transaction."""
    app_id = pragma(conn, "application_id")
    tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchall()[0][0]
    if app_id == 0 and tables == 0:
        return None  # a new file
    if app_id != APPLICATION_ID:
        return "not a scopemem shard (another application's database)"
    version = pragma(conn, "user_version")
    if version > SCHEMA_VERSION:
        return (f"written by a newer scopemem (schema version {version}; this one reads up"
                f" to {SCHEMA_VERSION})")
    held = (stored_meta(conn, META_SHARD), stored_meta(conn, META_SHARDS))
    if held != (str(index), str(shards)):
        return (f"holds shard {held[0]} of {held[1]}, not {index} of {shards} (copied or"
                " renamed from another shard's name?)")
    return None


def apply_schema(conn: Any, index: int, shards: int) -> None:
    """Create or complete the schema and record the shard's identity. The caller holds a
    write transaction and has checked ``identity_problem``."""
    for statement in TABLES:
        conn.execute(statement)
    # Version 2 counts use-count saves; a version 1 shard gains the column.
    columns = {row[1] for row in conn.execute("PRAGMA table_info(scopes)")}
    if "uses" not in columns:
        conn.execute("ALTER TABLE scopes ADD COLUMN uses INTEGER NOT NULL DEFAULT 0")
    # Version 3 keeps large scopes' recent postings apart; a version 2 shard has none yet.
    if "fresh_from" not in columns:
        conn.execute("ALTER TABLE scopes ADD COLUMN fresh_from INTEGER")
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?), (?, ?)",
                 (META_SHARD, str(index), META_SHARDS, str(shards)))
    if pragma(conn, "application_id") != APPLICATION_ID:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    if pragma(conn, "user_version") != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
