"""Browsing the PostgreSQL store: ``stores.browsing.SqlBrowse`` over the tables of
migrations 5 and 7 (``migrations.py``), and the reach log, a table pruned past the
retention by every log.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from scopemem.core.browse import Reach, names_person
from scopemem.stores.base import Clock
from scopemem.stores.browsing import (
    Plan,
    SqlBrowse,
    check_reach_retention_days,
    kept_reaches,
    reach_read,
    reaches_of,
)
from scopemem.stores.postgres.pool import Connect
from scopemem.stores.postgres.statements import Statements, record_of

__all__ = ["Browse"]

T = TypeVar("T")


class Browse(SqlBrowse):
    """The store's browsing over its pool (``connect``: a pooled autocommit connection);
    ``save_uses`` saves a scope's uses not saved yet, before a read shows its records."""

    def __init__(self, sql: Statements, connect: Connect, clock: Clock,
                 reach_retention_days: int, save_uses: Callable[[str], Awaitable[object]]
                 ) -> None:
        super().__init__(sql, record_of, self.read_reaches)
        self._connect = connect
        self._save_uses = save_uses
        self._clock = clock
        self.reach_retention_days = check_reach_retention_days(reach_retention_days)
        reaches = sql.dialect.table("reaches")
        self.drop_scope = sql.drop_reaches
        self._log = (f"INSERT INTO {reaches} (scope_key, seq, run_id, thread_key, at)"
                     " SELECT * FROM unnest(%s::text[], %s::bigint[], %s::text[],"
                     " %s::text[], %s::bigint[])")
        self._naming = (f"SELECT ctid, run_id, thread_key FROM {reaches}"
                        " WHERE scope_key = %(scope)s AND (strpos(run_id, %(person)s) > 0"
                        " OR strpos(thread_key, %(person)s) > 0) FOR UPDATE")
        self._delete = f"DELETE FROM {reaches} WHERE ctid = ANY(%(ctids)s::tid[])"

    async def read(self, part: int, plan: Plan[T], uses: str | None = None) -> T | None:
        if uses is not None:
            await self._save_uses(uses)
        async with self._connect() as conn, conn.transaction():
            # One snapshot for the plan's statements, as SQLite's read transaction is: at
            # READ COMMITTED each statement would see what committed before it.
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            try:
                step = next(plan)
                while True:
                    cursor = await conn.execute(*step[:2])
                    step = plan.send(await cursor.fetchall())
            except StopIteration as done:
                answer: T = done.value
                return answer

    async def fetch(self, part: int, statement: str, params: dict[str, Any]
                    ) -> list[Any] | None:
        async with self._connect() as conn:
            return list(await (await conn.execute(statement, params)).fetchall())

    async def scrub_reaches(self, conn: Any, scope_key: str, person: str) -> None:
        """Delete the scope's reaches that name ``person``, in the caller's transaction."""
        cursor = await conn.execute(self._naming, {"scope": scope_key, "person": person})
        ctids = [ctid for ctid, run_id, thread_key in await cursor.fetchall()
                 if names_person(run_id, thread_key, person)]
        if ctids:
            await conn.execute(self._delete, {"ctids": ctids})

    async def log_reaches(self, reaches: Sequence[Reach]) -> None:
        kept = kept_reaches(reaches, self._clock, self.reach_retention_days)
        if kept is None:
            return
        cutoff, rows = kept
        async with self._connect() as conn, conn.transaction():
            await conn.execute(self.sql.prune_reaches, {"cutoff": cutoff})
            if rows:
                await conn.execute(self._log, [list(column) for column in zip(*rows, strict=True)])

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> list[Reach]:
        read = reach_read(self.sql, self._clock, self.reach_retention_days, record_id, run,
                          limit)
        return [] if read is None else reaches_of(await self.fetch(0, *read) or ())
