"""Browsing the PostgreSQL store (``stores.base.BrowsingStore``), by the statements both SQL
stores share (``shared/sql.py``), over the tables of migrations 5 and 7 (``migrations.py``).
Reaches are a table of their own, pruned past the retention by every log; reads skip what
is past it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from scopemem.core.browse import (
    HISTORY_REACHES,
    CountTotal,
    Reach,
    RecordHistory,
    RecordPage,
    ScopePage,
    ScopeSummary,
    kind_range,
)
from scopemem.core.records import Kind
from scopemem.core.scopes import record_seq, scope_kind
from scopemem.stores.base import Clock
from scopemem.stores.browsing import (
    Found,
    check_reach_retention_days,
    count_total_args,
    fit_reaches,
    history_from,
    history_reads,
    names_person,
    reach_cutoff,
    reach_query,
    record_args,
    record_params,
    scope_args,
)
from scopemem.stores.postgres.pool import Connect
from scopemem.stores.postgres.statements import Statements, record_of
from scopemem.stores.shared.batches import seq_in_scope
from scopemem.stores.shared.sql import reach_read, reaches_of

SaveUses = Callable[[str], Awaitable[object]]

__all__ = ["Browse"]

class Browse:
    """The store's browsing over its pool (``connect``: a pooled autocommit connection)."""

    def __init__(self, sql: Statements, connect: Connect, clock: Clock,
                 reach_retention_days: int, save_uses: SaveUses) -> None:
        self.sql = sql
        self._connect = connect
        self._save_uses = save_uses  # a scope's uses not saved yet, saved before a page
        self._clock = clock
        self.reach_retention_days = check_reach_retention_days(reach_retention_days)
        reaches = sql.dialect.table("reaches")
        self.drop_scope = sql.drop_reaches
        self._log = (f"INSERT INTO {reaches} (scope_key, seq, run_id, thread_key, at)"
                     " SELECT * FROM unnest(%(scopes)s::text[], %(seqs)s::bigint[],"
                     " %(runs)s::text[], %(threads)s::text[], %(ats)s::bigint[])")
        self._naming = (f"SELECT ctid, run_id, thread_key FROM {reaches}"
                        " WHERE scope_key = %(scope)s AND (strpos(run_id, %(person)s) > 0"
                        " OR strpos(thread_key, %(person)s) > 0) FOR UPDATE")
        self._delete = f"DELETE FROM {reaches} WHERE ctid = ANY(%(ctids)s::tid[])"

    async def _fetch(self, statement: str, params: dict[str, Any]) -> list[Any]:
        async with self._connect() as conn:
            cursor = await conn.execute(statement, params)
            return list(await cursor.fetchall())

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        kind, sort, descending, offset, limit = scope_args(kind, sort, descending, offset,
                                                           limit)
        low, high = kind_range(kind) if kind is not None else (None, None)
        params = {"low": low, "high": high, "limit": limit, "offset": offset}
        async with self._connect() as conn, conn.transaction():
            cursor = await conn.execute(self.sql.count_held, params)
            total = (await cursor.fetchone())[0]
            cursor = await conn.execute(self.sql.scope_page(sort, descending), params)
            rows = await cursor.fetchall()
        return ScopePage(total=int(total), rows=tuple(
            ScopeSummary(scope_key=key, kind=scope_kind(key), active=int(active),
                         last_write_ms=None if last is None else int(last))
            for key, active, last in rows))

    async def read_count_totals(self, kind: str, *, since_day: int = 0) -> list[CountTotal]:
        kind, since_day = count_total_args(kind, since_day)
        rows = await self._fetch(self.sql.count_totals, {"kind": kind, "since": since_day})
        return [CountTotal(day=int(day), name=name, total=int(total), most=int(most))
                for day, name, total, most in rows]

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        params = record_params(scope_key, kind, status, source, offset, limit)
        await self._save_uses(params["scope"])
        async with self._connect() as conn, conn.transaction():
            cursor = await conn.execute(self.sql.count_records, params)
            total = (await cursor.fetchone())[0]
            cursor = await conn.execute(self.sql.record_page, params)
            rows = await cursor.fetchall()
        return RecordPage(total=int(total), rows=tuple(record_of(row) for row in rows))

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        key, *_rest = record_args(scope_key, None, None, None, 0, 1)
        seq = seq_in_scope(key, record_id)
        if seq is None:
            return None
        await self._save_uses(key)
        async with self._connect() as conn, conn.transaction():
            found = await self._history(conn, key, record_id, seq)
        if found is None:
            return None
        return history_from(found, await self.read_reaches(record_id=record_id,
                                                           limit=HISTORY_REACHES))

    async def _history(self, conn: Any, key: str, record_id: str, seq: int
                       ) -> Found | None:
        steps = history_reads(key, record_id, seq, record_of)
        try:
            name, params = next(steps)
            while True:
                cursor = await conn.execute(getattr(self.sql, name), params)
                name, params = steps.send(await cursor.fetchall())
        except StopIteration as done:
            found: Found | None = done.value
            return found

    async def scrub_reaches(self, conn: Any, scope_key: str, person: str) -> None:
        """Delete the scope's reaches that name ``person``, in the caller's transaction."""
        cursor = await conn.execute(self._naming, {"scope": scope_key, "person": person})
        ctids = [ctid for ctid, run_id, thread_key in await cursor.fetchall()
                 if names_person(run_id, thread_key, person)]
        if ctids:
            await conn.execute(self._delete, {"ctids": ctids})

    async def log_reaches(self, reaches: Sequence[Reach]) -> None:
        fitted = fit_reaches(reaches)
        if not self.reach_retention_days or not fitted:
            return
        cutoff = reach_cutoff(self._clock(), self.reach_retention_days)
        kept = [reach for reach in fitted if reach.at_ms > cutoff]
        async with self._connect() as conn, conn.transaction():
            await conn.execute(self.sql.prune_reaches, {"cutoff": cutoff})
            if kept:
                await conn.execute(self._log, {
                    "scopes": [r.scope_key for r in kept],
                    "seqs": [record_seq(r.record_id) for r in kept],
                    "runs": [r.run_id for r in kept], "threads": [r.thread_key for r in kept],
                    "ats": [r.at_ms for r in kept]})

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> list[Reach]:
        record_id, run, limit = reach_query(record_id, run, limit)
        read = reach_read(self.sql, record_id, run, limit,
                          reach_cutoff(self._clock(), self.reach_retention_days))
        return [] if read is None else reaches_of(await self._fetch(*read))
