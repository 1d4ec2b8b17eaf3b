"""The lock every change to a PostgreSQL scope takes first: the scope's row in ``scopes``,
FOR UPDATE, in the caller's transaction. Writers to a scope queue there, across processes,
and read the scope's last seq and active count under it. A scope gets its row the first
time it is written (or counted, or imported into), counted against ``max_scopes``.
"""

from __future__ import annotations

from typing import Any, Literal, overload

from scopemem.errors import ScopeLimitReached
from scopemem.stores.postgres import migrations
from scopemem.stores.postgres.options import PostgresOptions
from scopemem.stores.postgres.statements import Statements

__all__ = ["Locked", "ScopeLock"]

# A scope's row as its lock reads it: last seq, active count, the thread of its last row.
Locked = tuple[int, int, str | None]


class ScopeLock:
    """Takes a scope's row FOR UPDATE in the caller's transaction, making it when asked
    (counted against ``options.max_scopes``)."""

    def __init__(self, sql: Statements, options: PostgresOptions) -> None:
        self.sql = sql
        self.options = options

    @overload
    async def __call__(self, conn: Any, scope_key: str, now: int, *,
                       create: Literal[True]) -> Locked: ...

    @overload
    async def __call__(self, conn: Any, scope_key: str, now: int, *,
                       create: Literal[False]) -> Locked | None: ...

    async def __call__(self, conn: Any, scope_key: str, now: int, *, create: bool
                       ) -> Locked | None:
        """The scope's last seq, active count and the thread of its last row (None when
        gone), or None when the scope has no row and ``create`` is false."""
        cursor = await conn.execute(self.sql.lock_scope, {"scope": scope_key})
        row = await cursor.fetchone()
        if row is not None or not create:
            return None if row is None else (row[0], row[1], row[2])
        options = self.options
        if options.max_scopes:
            # New scopes are counted one at a time, across processes.
            await conn.execute("SELECT pg_advisory_xact_lock(%s)",
                               (migrations.advisory_key(options.schema) ^ 1,))
            cursor = await conn.execute(self.sql.count_scopes)
            (held,) = await cursor.fetchone()
            if held >= options.max_scopes:
                raise ScopeLimitReached(
                    f"postgres store: schema {options.schema!r} holds {held} scopes, the"
                    f" limit (max_scopes = {options.max_scopes}); a write to a new scope is"
                    " refused")
        await conn.execute(self.sql.new_scope, {"scope": scope_key, "now": now})
        cursor = await conn.execute(self.sql.lock_scope, {"scope": scope_key})
        row = await cursor.fetchone()
        return row[0], row[1], row[2]
