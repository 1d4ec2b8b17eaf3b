"""The PostgreSQL store's tables, and how a database is brought up to date.

Migrations are versioned: ``schema_migrations`` records each version a schema has seen, and
every migration runs in its own transaction with its record, so it is applied once or not at
all. Every statement is also safe to repeat (``IF NOT EXISTS``). ``migrate`` runs them under
a session advisory lock keyed by the schema's name, so processes starting together migrate
once: the first takes the lock and migrates, the others wait, then find nothing to do. A
schema written by a newer scopemem (a version above ``SCHEMA_VERSION``) is refused.

The statements name the schema through ``{s}`` (a validated identifier, quoted); nothing a
user or a caller chose is ever formatted into SQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from scopemem.errors import StoreError

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "advisory_key", "migrate", "quoted"]


@attrs.frozen
class Migration:
    version: int
    name: str
    statements: tuple[str, ...]


_BOOKKEEPING = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    """CREATE TABLE IF NOT EXISTS {s}.schema_migrations (
        version    integer PRIMARY KEY,
        name       text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )""",
)

# btree_gin lets one GIN index hold (scope_key, token) pairs, so the prefilter's index scan
# is keyed by scope like every other statement. It ships with PostgreSQL (contrib) and is a
# trusted extension; where it cannot be created, the token index is a plain GIN index (the
# statements stay scope-keyed, only the index scan reads further).
_BTREE_GIN = "CREATE EXTENSION IF NOT EXISTS btree_gin"

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "scopes, records, lookup indexes and the token index", (
        """CREATE TABLE IF NOT EXISTS {s}.meta (
            key   text PRIMARY KEY,
            value text NOT NULL
        )""",
        # One row per scope: the highest seq it ever handed out (ids are never reused, even
        # after a purge), taken FOR UPDATE by every transaction that changes the scope's rows.
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
        # Write-time dedup: the active rows sharing a candidate's normalized text.
        "CREATE INDEX IF NOT EXISTS records_active_norm ON {s}.records (scope_key, norm)"
        " WHERE status = 'active'",
        # Eviction (least recently used first) and the active count.
        "CREATE INDEX IF NOT EXISTS records_active_lru ON {s}.records"
        " (scope_key, last_used_at, created_at, seq) WHERE status = 'active'",
        # The purge past the retention, oldest death first.
        "CREATE INDEX IF NOT EXISTS records_dead ON {s}.records (scope_key, retired_at)"
        " WHERE status IN ('superseded', 'evicted', 'swept')",
    )),
)

SCHEMA_VERSION = max(migration.version for migration in MIGRATIONS)

_TOKEN_INDEX = ("CREATE INDEX IF NOT EXISTS records_tokens ON {s}.records USING gin"
                " ({columns}) WHERE status = 'active'")


def quoted(schema: str) -> str:
    return '"' + schema.replace('"', '""') + '"'


def advisory_key(schema: str) -> int:
    """The advisory lock key of a schema's migrations: a signed 64-bit integer."""
    digest = hashlib.sha256(f"scopemem-migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def migrate(conn: Any, schema: str,
                  after: Callable[[Any], Awaitable[None]] | None = None) -> list[int]:
    """Bring ``schema`` up to date on ``conn`` (an autocommit connection), under the
    schema's advisory lock; the versions applied now (empty when another process did).
    ``after(conn)`` runs under the same lock once the schema is current (the store
    re-derives tokens there when its analyzer changed)."""
    s = quoted(schema)
    key = advisory_key(schema)
    await conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    try:
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
                for statement in migration.statements:
                    await conn.execute(statement.format(s=s))
                if migration.version == 1:
                    await _token_index(conn, s)
                await conn.execute(
                    f"INSERT INTO {s}.schema_migrations (version, name) VALUES (%s, %s)",
                    (migration.version, migration.name))
            applied.append(migration.version)
        if after is not None:
            await after(conn)
        return applied
    finally:
        await conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


async def _token_index(conn: Any, s: str) -> None:
    """The token index: (scope_key, tokens) with btree_gin, else tokens alone."""
    try:
        async with conn.transaction():  # a savepoint: a refused extension undoes only this
            await conn.execute(_BTREE_GIN)
            await conn.execute(_TOKEN_INDEX.format(s=s, columns="scope_key, tokens"))
        return
    except Exception:  # no privilege, not installed, or another schema created it just now
        pass
    cursor = await conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'")
    columns = "scope_key, tokens" if await cursor.fetchall() else "tokens"
    await conn.execute(_TOKEN_INDEX.format(s=s, columns=columns))
