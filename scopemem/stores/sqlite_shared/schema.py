"""The shard files' tables (``docs/storage.md``, "The shared SQLite layout") and their
migrations, the shard a scope lives in (``shard_of``), and the check that a file is the
shard it is named for. Every index leads with ``scope_key``.
"""

from __future__ import annotations

import functools
import hashlib
from typing import Any

from scopemem.stores.shared.sql import COLUMNS
from scopemem.stores.sqlite_shared import index
from scopemem.stores.sqlite_shared.index import set_merging

# "ScMs": a shard of the shared-file layout (the file-per-scope layout's files say "ScMm").
APPLICATION_ID = 0x53634D73
SCHEMA_VERSION = 8
#: Shards of a data directory. Fixed: a scope's shard is its key's hash modulo this, so a
#: directory written with one count cannot be read with another.
SHARDS = 16

META_SHARD = "shard"
META_SHARDS = "shards"
META_FOLDING = "folding"

# A row's columns, which the file layout's scope files have too (``migrate.py``).
RECORD_COLUMNS = COLUMNS


# The active records' terms (``index.py``): contentless (the terms are in ``records.tokens``),
# deletable by rowid, no positions (a record holds a term or not).
TERMS_FTS = ("CREATE VIRTUAL TABLE IF NOT EXISTS terms_fts USING fts5(tokens, tokenize = 'ascii',"
             " content = '', contentless_delete = 1, detail = none)")


def dedup_key(text: str) -> str:
    """What the dedup index keys an active row by: its normalized text's first 16
    characters (a lookup compares the whole text after it). A short key keeps the index a
    tenth of the text's size: a write dirties a few of its pages rather than dozens."""
    return f"substr({text}, 1, 16)"


# The newest record's creation time of the scope a row goes into (``scopes.last_write``).
LAST_WRITE = ("UPDATE scopes SET last_write = max(ifnull(last_write, 0), NEW.created_at)"
              " WHERE scope_key = NEW.scope_key;")



def _kind(row: str) -> str:
    """The scope kind of ``row``'s key (``core.scopes.scope_kind``), '' without a colon."""
    key = f"{row}.scope_key"
    return (f"(CASE WHEN instr({key}, ':') > 0 THEN substr({key}, 1, instr({key}, ':') - 1)"
            " ELSE '' END)")


def _total_of(row: str) -> str:
    return f"kind = {_kind(row)} AND day = {row}.day AND name = {row}.name"


TABLES = (
    """CREATE TABLE IF NOT EXISTS meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    ) WITHOUT ROWID""",
    # Made by a scope's first write; ``generation``: its change counter; ``uses``: its
    # use-count saves; ``sid``: its id in the token index, never changed nor reused.
    """CREATE TABLE IF NOT EXISTS scopes (
        scope_key  TEXT PRIMARY KEY,
        last_seq   INTEGER NOT NULL DEFAULT 0,
        active     INTEGER NOT NULL DEFAULT 0,
        generation INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        uses       INTEGER NOT NULL DEFAULT 0,
        sid        INTEGER NOT NULL,
        last_write INTEGER
    ) WITHOUT ROWID""",
    "CREATE UNIQUE INDEX IF NOT EXISTS scopes_sid ON scopes (sid)",
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
    # Partial indexes (each statement they serve says ``status = 'active'`` literally):
    # dedup, the eviction's order, and the purge of dead rows oldest death first.
    f"CREATE INDEX IF NOT EXISTS records_active_key ON records (scope_key, {dedup_key('norm')})"
    " WHERE status = 'active'",
    "CREATE INDEX IF NOT EXISTS records_active_by_use"
    " ON records (scope_key, last_used_at, created_at, seq) WHERE status = 'active'",
    "CREATE INDEX IF NOT EXISTS records_dead ON records (scope_key, retired_at)"
    " WHERE status IN ('superseded', 'evicted', 'swept')",
    TERMS_FTS,
    # Browsing (``browse.py``): a scope's newest record's time, kept by a trigger for every
    # writer, and the indexes of its pages.
    f"CREATE TRIGGER IF NOT EXISTS records_last_write AFTER INSERT ON records BEGIN"
    f" {LAST_WRITE} END",
    "CREATE INDEX IF NOT EXISTS scopes_by_active ON scopes (active, scope_key)",
    "CREATE INDEX IF NOT EXISTS scopes_by_last_write ON scopes (last_write, scope_key)",
    "CREATE INDEX IF NOT EXISTS records_browse ON records (scope_key, seq, status, kind,"
    " source)",
    "CREATE INDEX IF NOT EXISTS records_supersedes ON records (scope_key, supersedes)"
    " WHERE supersedes IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS records_restates ON records (scope_key, restates)"
    " WHERE restates IS NOT NULL",
    # The semantic lane's vectors (``vectors.py``), of active records only: the triggers
    # drop one whichever writer retires or deletes its record. A rowid table: a vector
    # (1,536 bytes) is too large a row for one without.
    """CREATE TABLE IF NOT EXISTS vectors (
        scope_key TEXT NOT NULL,
        seq       INTEGER NOT NULL,
        model     TEXT NOT NULL,
        vector    BLOB NOT NULL,
        PRIMARY KEY (scope_key, seq)
    )""",
    "CREATE INDEX IF NOT EXISTS vectors_by_model ON vectors (scope_key, model, seq)",
    "CREATE TRIGGER IF NOT EXISTS records_vector_retired AFTER UPDATE OF status ON records"
    " WHEN NEW.status != 'active' BEGIN DELETE FROM vectors"
    " WHERE scope_key = NEW.scope_key AND seq = NEW.seq; END",
    "CREATE TRIGGER IF NOT EXISTS records_vector_deleted AFTER DELETE ON records BEGIN"
    " DELETE FROM vectors WHERE scope_key = OLD.scope_key AND seq = OLD.seq; END",
    """CREATE TABLE IF NOT EXISTS counters (
        scope_key TEXT NOT NULL,
        day       INTEGER NOT NULL,
        name      TEXT NOT NULL,
        value     INTEGER NOT NULL,
        PRIMARY KEY (scope_key, day, name)
    ) WITHOUT ROWID""",
    # The counters summed per scope kind, day and name with the largest (``peak``), kept by
    # triggers in every writer's transaction. A counter only grows until its scope is
    # deleted; deleting the peak finds it again among the kind's keys (rare, slower).
    """CREATE TABLE IF NOT EXISTS count_totals (
        kind  TEXT NOT NULL,
        day   INTEGER NOT NULL,
        name  TEXT NOT NULL,
        total INTEGER NOT NULL,
        peak  INTEGER NOT NULL,
        PRIMARY KEY (kind, day, name)
    ) WITHOUT ROWID""",
    f"CREATE TRIGGER IF NOT EXISTS counters_total_added AFTER INSERT ON counters BEGIN"
    f" INSERT INTO count_totals (kind, day, name, total, peak)"
    f" VALUES ({_kind('NEW')}, NEW.day, NEW.name, NEW.value, NEW.value)"
    f" ON CONFLICT (kind, day, name) DO UPDATE SET total = total + excluded.total,"
    f" peak = max(peak, excluded.peak); END",
    f"CREATE TRIGGER IF NOT EXISTS counters_total_grown AFTER UPDATE OF value ON counters"
    f" BEGIN UPDATE count_totals SET total = total + NEW.value - OLD.value,"
    f" peak = max(peak, NEW.value) WHERE {_total_of('NEW')}; END",
    f"CREATE TRIGGER IF NOT EXISTS counters_total_deleted AFTER DELETE ON counters BEGIN"
    f" UPDATE count_totals SET total = total - OLD.value, peak = CASE"
    f" WHEN OLD.value < peak THEN peak ELSE ifnull((SELECT max(value) FROM counters"
    f" WHERE scope_key >= kind || ':' AND scope_key < kind || ';' AND day = OLD.day"
    f" AND name = OLD.name), 0) END WHERE {_total_of('OLD')}; END",
)

# A shard of version 6 or older's count totals, once (``apply_schema``).
_FILL_TOTALS = (f"INSERT INTO count_totals (kind, day, name, total, peak)"
                f" SELECT {_kind('counters')} AS kind, day, name, sum(value), max(value)"
                f" FROM counters GROUP BY 1, day, name")


@functools.lru_cache(maxsize=1 << 16)  # asked several times a request, for the same keys
def shard_of(scope_key: str, shards: int = SHARDS) -> int:
    """The shard holding ``scope_key``: the first four bytes of its SHA-256, modulo."""
    return int.from_bytes(hashlib.sha256(scope_key.encode()).digest()[:4], "big") % shards


def shard_file_name(index: int, shards: int = SHARDS) -> str:
    return f"shard-{index:03d}-of-{shards:03d}.db"


def pragma(conn: Any, name: str) -> Any:
    return conn.execute(f"PRAGMA {name}").fetchall()[0][0]


def table_count(conn: Any) -> int:
    count: int = conn.execute("SELECT count(*) FROM sqlite_master").fetchall()[0][0]
    return count


def stored_meta(conn: Any, key: str) -> str | None:
    rows = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
    return rows[0][0] if rows else None


def set_meta(conn: Any, key: str, value: str) -> None:
    conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)"
                 " ON CONFLICT (key) DO UPDATE SET value = excluded.value", (key, value))


def identity_problem(conn: Any, index: int, shards: int) -> str | None:
    """Why the open file is not shard ``index`` of ``shards`` (None: it is, or is empty)."""
    app_id = pragma(conn, "application_id")
    if app_id == 0 and table_count(conn) == 0:
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


def apply_schema(conn: Any, index: int, shards: int) -> int:
    """Create or complete the schema and record the shard's identity; the version the file
    had (0: new). The caller holds a write transaction and checked ``identity_problem``."""
    before: int = pragma(conn, "user_version")
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    if "postings" in tables:
        _from_postings(conn)  # a shard of schema version 1-3
    if "scopes" in tables:
        _with_last_write(conn)  # a shard of schema version 1-4
    conn.execute("DROP INDEX IF EXISTS records_active_norm")  # a shard of version 1-7
    for statement in TABLES:
        conn.execute(statement)
    set_merging(conn)
    if "counters" in tables and "count_totals" not in tables:
        conn.execute(_FILL_TOTALS)  # a shard of schema version 1-6
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?), (?, ?)",
                 (META_SHARD, str(index), META_SHARDS, str(shards)))
    if pragma(conn, "application_id") != APPLICATION_ID:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    if before != SCHEMA_VERSION:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    return before


def _with_last_write(conn: Any) -> None:
    """Give a version 1-4 shard's scopes their newest record's time."""
    if "last_write" in {row[1] for row in conn.execute("PRAGMA table_info(scopes)")}:
        return
    conn.execute("ALTER TABLE scopes ADD COLUMN last_write INTEGER")
    conn.execute("UPDATE scopes SET last_write = (SELECT max(created_at) FROM records"
                 " WHERE records.scope_key = scopes.scope_key)")


# A scope's postings in a shard of version 1-3 (version 3's side tables included).
_OLD_POSTINGS = ("SELECT seq, max(continues), group_concat(term, ' ') FROM ("
                 "SELECT term, seq, continues FROM postings WHERE scope_key = :scope{stale}"
                 "{fresh}) GROUP BY seq")


def _from_postings(conn: Any) -> None:
    """Move a version 1-3 shard's postings into ``terms_fts``, each scope under a new id."""
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    side = "fresh_postings" in tables
    columns = {row[1] for row in conn.execute("PRAGMA table_info(scopes)")}
    if "uses" not in columns:  # version 1
        conn.execute("ALTER TABLE scopes ADD COLUMN uses INTEGER NOT NULL DEFAULT 0")
    conn.execute("ALTER TABLE scopes ADD COLUMN sid INTEGER NOT NULL DEFAULT 0")
    conn.execute(TERMS_FTS)
    statement = _OLD_POSTINGS.format(
        stale=" AND seq NOT IN (SELECT seq FROM stale_postings WHERE scope_key = :scope)"
        if side else "",
        fresh=" UNION ALL SELECT term, seq, continues FROM fresh_postings"
        " WHERE scope_key = :scope" if side else "")
    keys = [key for (key,) in conn.execute("SELECT scope_key FROM scopes ORDER BY scope_key")]
    for sid, key in enumerate(keys, start=1):
        conn.execute("UPDATE scopes SET sid = ? WHERE scope_key = ?", (sid, key))
        rows = conn.execute(statement, {"scope": key}).fetchall()
        index.post(conn, sid, [(seq, terms.split(), bool(continues))
                               for seq, continues, terms in rows])
    for table in ("postings", "fresh_postings", "stale_postings"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    if "fresh_from" in columns:
        conn.execute("ALTER TABLE scopes DROP COLUMN fresh_from")
