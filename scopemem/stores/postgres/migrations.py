"""The PostgreSQL store's tables, and how a database is brought up to date
(``docs/postgres-store.md``, "Tables" and "Migration"): each version in its own transaction
with its record in ``schema_migrations``, under an advisory lock keyed by the schema.

The statements name the schema through ``{s}`` (a validated identifier, quoted); nothing a
user or a caller chose is ever formatted into SQL.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from scopemem.errors import StoreError
from scopemem.stores.shared.sql import Migration

__all__ = ["MIGRATIONS", "POST_ALL", "SCHEMA_VERSION", "advisory_key", "migrate", "quoted"]

log = logging.getLogger("scopemem.stores.postgres")


_BOOKKEEPING = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    """CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )""",
)

#: Every table the migrations leave (``missing_tables`` checks them).
TABLES = ("schema_migrations", "meta", "scopes", "records", "postings", "counters", "reaches",
          "vectors", "count_totals")

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "scopes, records, lookup indexes and the token index", (
        """CREATE TABLE IF NOT EXISTS {s}.meta (
            key   text PRIMARY KEY,
            value text NOT NULL
        )""",
        # ``last_seq``: ids are never reused, even after a purge; locked by every writer.
        """CREATE TABLE IF NOT EXISTS {s}.scopes (
            scope_key  text PRIMARY KEY,
            last_seq   bigint NOT NULL DEFAULT 0,
            created_at bigint NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS {s}.records (
            scope_key         text NOT NULL,
            seq               bigint NOT NULL,
            id                text NOT NULL,
            kind              text NOT NULL CHECK (kind IN ('fact', 'summary')),
            text              text NOT NULL,
            norm              text NOT NULL,
            keywords          text[] NOT NULL DEFAULT '{{}}',
            source_thread_key text NOT NULL,
            source_run_id     text,
            created_at        bigint NOT NULL,
            last_used_at      bigint,
            use_count         bigint NOT NULL DEFAULT 0,
            confidence        double precision,
            supersedes        text,
            restates          text,
            status            text NOT NULL DEFAULT 'active' CHECK (status IN
                                ('active', 'superseded', 'forgotten', 'evicted', 'swept')),
            source            text NOT NULL DEFAULT 'reflection'
                                CHECK (source IN ('human', 'reflection')),
            retired_at        bigint,
            tokens            text[] NOT NULL DEFAULT '{{}}',
            PRIMARY KEY (scope_key, seq)
        )""",
        # Write-time dedup, eviction and the active count, the purge oldest death first.
        "CREATE INDEX IF NOT EXISTS records_active_norm ON {s}.records (scope_key, norm)"
        " WHERE status = 'active'",
        "CREATE INDEX IF NOT EXISTS records_active_lru ON {s}.records"
        " (scope_key, last_used_at, created_at, seq) WHERE status = 'active'",
        "CREATE INDEX IF NOT EXISTS records_dead ON {s}.records (scope_key, retired_at)"
        " WHERE status IN ('superseded', 'evicted', 'swept')",
    )),
    Migration(2, "the inverted index of active records, and each scope's active count", (
        # Read by an index-only range scan per query term; ``continues``: the record was
        # written just after one of its own thread (the neighbour credit). It replaces a GIN
        # index, which made a retrieval visit every matching row.
        """CREATE TABLE IF NOT EXISTS {s}.postings (
            scope_key text NOT NULL,
            term      text NOT NULL,
            seq       bigint NOT NULL,
            continues boolean NOT NULL DEFAULT false,
            PRIMARY KEY (scope_key, term, seq) INCLUDE (continues)
        )""",
        "DROP INDEX IF EXISTS {s}.records_tokens",
        "ALTER TABLE {s}.scopes ADD COLUMN IF NOT EXISTS active bigint NOT NULL DEFAULT 0",
    ), once=(
        "{post_all}",
        "UPDATE {s}.scopes AS sc SET active = (SELECT count(*) FROM {s}.records r"
        " WHERE r.scope_key = sc.scope_key AND r.status = 'active')",
    )),
    Migration(3, "per-day counters", (
        # Added to in the transaction making the change: counts agree with rows after a
        # crash (and an older scopemem, which would not count, refuses the schema).
        """CREATE TABLE IF NOT EXISTS {s}.counters (
            scope_key text NOT NULL,
            day       integer NOT NULL,
            name      text NOT NULL,
            value     bigint NOT NULL,
            PRIMARY KEY (scope_key, day, name)
        )""",
    )),
    Migration(4, "each scope's change counter", (
        # Moved by every change to a scope's postings (never a use count): a copy in memory
        # (``shared.cache``) answers only at the counter it was read at.
        "ALTER TABLE {s}.scopes ADD COLUMN IF NOT EXISTS generation bigint NOT NULL"
        " DEFAULT 0",
    )),
    Migration(5, "browsing: each scope's last write, browse indexes, the reach log", (
        # A scope's newest record's time (NULL: none), kept by a trigger for every writer.
        "ALTER TABLE {s}.scopes ADD COLUMN IF NOT EXISTS last_write bigint",
        "CREATE OR REPLACE FUNCTION {s}.records_last_write() RETURNS trigger"
        " LANGUAGE plpgsql AS $$ BEGIN"
        " UPDATE {s}.scopes AS sc SET last_write = GREATEST(coalesce(sc.last_write, 0),"
        " n.newest) FROM (SELECT scope_key, max(created_at) AS newest FROM new_rows"
        " GROUP BY scope_key) AS n WHERE sc.scope_key = n.scope_key; RETURN NULL; END $$",
        "CREATE OR REPLACE TRIGGER records_last_write AFTER INSERT ON {s}.records"
        " REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT"
        " EXECUTE FUNCTION {s}.records_last_write()",
        # Browse pages (``browse.py``), keys in byte order as every store sorts.
        'CREATE INDEX IF NOT EXISTS scopes_by_key ON {s}.scopes (scope_key COLLATE "C")'
        " WHERE last_write IS NOT NULL",
        'CREATE INDEX IF NOT EXISTS scopes_by_active ON {s}.scopes (active,'
        ' scope_key COLLATE "C") WHERE last_write IS NOT NULL',
        'CREATE INDEX IF NOT EXISTS scopes_by_last_write ON {s}.scopes (last_write,'
        ' scope_key COLLATE "C") WHERE last_write IS NOT NULL',
        "CREATE INDEX IF NOT EXISTS records_browse ON {s}.records (scope_key, seq)"
        " INCLUDE (status, kind, source)",
        "CREATE INDEX IF NOT EXISTS records_supersedes ON {s}.records (scope_key, supersedes)"
        " WHERE supersedes IS NOT NULL",
        "CREATE INDEX IF NOT EXISTS records_restates ON {s}.records (scope_key, restates)"
        " WHERE restates IS NOT NULL",
        # Which records reached which run (``core.browse.Reach``).
        """CREATE TABLE IF NOT EXISTS {s}.reaches (
            scope_key  text NOT NULL,
            seq        bigint NOT NULL,
            run_id     text NOT NULL,
            thread_key text NOT NULL,
            at         bigint NOT NULL
        )""",
        "CREATE INDEX IF NOT EXISTS reaches_by_record ON {s}.reaches (scope_key, seq, at)",
        "CREATE INDEX IF NOT EXISTS reaches_by_run ON {s}.reaches (run_id, at)",
        "CREATE INDEX IF NOT EXISTS reaches_by_thread ON {s}.reaches (thread_key, at)",
        "CREATE INDEX IF NOT EXISTS reaches_by_time ON {s}.reaches (at)",
    ), once=(
        "UPDATE {s}.scopes AS sc SET last_write = (SELECT max(created_at) FROM {s}.records r"
        " WHERE r.scope_key = sc.scope_key)",
    )),
    Migration(6, "the semantic lane's vectors", (
        # At most one per active record: triggers drop it when the record leaves active.
        """CREATE TABLE IF NOT EXISTS {s}.vectors (
            scope_key text NOT NULL,
            seq       bigint NOT NULL,
            model     text NOT NULL,
            vector    bytea NOT NULL,
            PRIMARY KEY (scope_key, seq)
        )""",
        "CREATE INDEX IF NOT EXISTS vectors_by_model ON {s}.vectors (scope_key, model, seq)",
        "CREATE OR REPLACE FUNCTION {s}.records_vector_retired() RETURNS trigger"
        " LANGUAGE plpgsql AS $$ BEGIN DELETE FROM {s}.vectors"
        " WHERE scope_key = NEW.scope_key AND seq = NEW.seq; RETURN NULL; END $$",
        "CREATE OR REPLACE TRIGGER records_vector_retired AFTER UPDATE OF status"
        " ON {s}.records FOR EACH ROW WHEN (NEW.status <> 'active')"
        " EXECUTE FUNCTION {s}.records_vector_retired()",
        "CREATE OR REPLACE FUNCTION {s}.records_vector_deleted() RETURNS trigger"
        " LANGUAGE plpgsql AS $$ BEGIN DELETE FROM {s}.vectors v USING old_rows o"
        " WHERE v.scope_key = o.scope_key AND v.seq = o.seq; RETURN NULL; END $$",
        "CREATE OR REPLACE TRIGGER records_vector_deleted AFTER DELETE ON {s}.records"
        " REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT"
        " EXECUTE FUNCTION {s}.records_vector_deleted()",
    )),
    Migration(7, "count totals per scope kind, day and name", (
        # A scope key's kind (``core.scopes.scope_kind``), '' for a key without a colon.
        "CREATE OR REPLACE FUNCTION {s}.scope_kind(key text) RETURNS text LANGUAGE sql"
        " IMMUTABLE AS $$ SELECT CASE WHEN strpos(key, ':') > 0"
        " THEN split_part(key, ':', 1) ELSE '' END $$",
        # Kept by the statements that change ``counters`` (``statements.py``).
        """CREATE TABLE IF NOT EXISTS {s}.count_totals (
            kind  text NOT NULL,
            day   integer NOT NULL,
            name  text NOT NULL,
            total bigint NOT NULL,
            peak  bigint NOT NULL,
            PRIMARY KEY (kind, day, name)
        )""",
    ), once=(
        "INSERT INTO {s}.count_totals (kind, day, name, total, peak)"
        " SELECT {s}.scope_kind(scope_key), day, name, sum(value), max(value)"
        " FROM {s}.counters GROUP BY 1, 2, 3",
    )),
)

#: Every active row's postings, from its tokens (the backfill, and the re-derivation when
#: the analyzer changes): the same pairs the store's writes add one batch at a time.
POST_ALL = (
    "INSERT INTO {s}.postings (scope_key, term, seq, continues)"
    " SELECT r.scope_key, t.term, r.seq,"
    " coalesce(p.source_thread_key = r.source_thread_key, false)"
    " FROM {s}.records r CROSS JOIN LATERAL unnest(r.tokens) AS t(term)"
    " LEFT JOIN {s}.records p ON p.scope_key = r.scope_key AND p.seq = r.seq - 1"
    " WHERE r.status = 'active' ON CONFLICT DO NOTHING"
)

SCHEMA_VERSION = max(migration.version for migration in MIGRATIONS)

def quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def advisory_key(schema: str) -> int:
    """The advisory lock key of a schema's migrations: a signed 64-bit integer."""
    digest = hashlib.sha256(f"scopemem-migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def migrate(conn: Any, schema: str,
                  after: Callable[[Any], Awaitable[None]] | None = None) -> list[int]:
    """Bring ``schema`` up to date on ``conn`` (autocommit) under its advisory lock; the
    versions applied now. ``after(conn)`` runs under the lock once the schema is current
    (the store re-derives tokens there)."""
    s = quoted(schema)
    key = advisory_key(schema)
    await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
        # Created only when missing: a read-only replica still reads a current schema.
        cursor = await conn.execute("SELECT to_regclass(%s) IS NULL",
                                    (f"{s}.schema_migrations",))
        if (await cursor.fetchone())[0]:
            async with conn.transaction():
                for statement in _BOOKKEEPING:
                    await conn.execute(statement.format(s=s))
        cursor = await conn.execute(f"SELECT version FROM {s}.schema_migrations")
        seen = {version for (version,) in await cursor.fetchall()}
        newest = max(seen, default=0)
        if newest > SCHEMA_VERSION:
            raise StoreError(f"postgres store: schema {schema!r} has version {newest}, newer"
                             f" than this scopemem understands ({SCHEMA_VERSION})")
        applied = []
        for migration in MIGRATIONS:
            if migration.version in seen:
                continue
            async with conn.transaction():
                for statement in (*migration.statements, *migration.once):
                    await conn.execute(statement.format(s=s, post_all=POST_ALL.format(s=s)))
                await conn.execute(
                    f"INSERT INTO {s}.schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name))
            applied.append(migration.version)
        if applied and newest:  # a schema an older release wrote, which now refuses it
            names = ", ".join(f"{m.version} ({m.name})" for m in MIGRATIONS
                              if m.version in applied)
            log.warning("postgres store: schema %r migrated from version %d to %d: %s; a"
                        " scopemem that reads only version %d refuses it from now on",
                        schema, newest, SCHEMA_VERSION, names, newest)
        if after is not None:
            await after(conn)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


async def missing_tables(conn: Any, schema: str) -> list[str]:
    """The tables of ``TABLES`` the schema lacks, without reading any."""
    s = quoted(schema)
    cursor = await conn.execute(
        "SELECT name FROM unnest(%s::text[], %s::text[]) AS t(name, qualified)"
        " WHERE to_regclass(qualified) IS NULL",
        (list(TABLES), [f"{s}.{name}" for name in TABLES]))
    return [name for (name,) in await cursor.fetchall()]
