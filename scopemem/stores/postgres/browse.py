"""Browsing the PostgreSQL store (``stores.base.BrowsingStore``): pages of scopes and of a
scope's records, a record's history, and the reaches, from the tables and indexes of
migration 5 (``migrations.py``).

A page of scopes is one index range of ``scopes`` in the page's order (byte order of keys,
``COLLATE "C"``, as every store sorts; ``last_write`` is kept by a statement trigger), and
its total a count of the same partial index: it reads scope rows, never a record. A page of
records takes its seqs from ``records_browse`` (scope, seq, and what a page filters on, in
the index) newest first, then reads only the page's rows. A record's history is a few
primary-key and partial-index lookups. A kind's count totals are its rows of
``count_totals`` (migration 7, kept with the counters), a row per day and name. Reaches are
a table of their own, pruned past the retention by every log; reads skip what is past it.
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
    MAX_CHAIN,
    RESTATED_BY,
    Found,
    check_reach_retention_days,
    count_total_args,
    fit_reaches,
    history_from,
    names_person,
    reach_cutoff,
    reach_query,
    record_args,
    record_params,
    scope_args,
)
from scopemem.stores.postgres.migrations import quoted
from scopemem.stores.postgres.pool import Connect
from scopemem.stores.postgres.statements import COLUMNS, record_of
from scopemem.stores.shared.batches import seq_in_scope

SaveUses = Callable[[str], Awaitable[object]]

__all__ = ["Browse"]

_C = ' COLLATE "C"'
_SORTS = {"key": (f"scope_key{_C}",), "active": ("active", f"scope_key{_C}"),
          "last_write": ("last_write", f"scope_key{_C}")}
_FILTERS = ("scope_key = %(scope)s AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)"
            " AND (%(status)s::text IS NULL OR status = %(status)s::text)"
            " AND (%(source)s::text IS NULL OR source = %(source)s::text)")
_REACH_ORDER = (f" ORDER BY at DESC, scope_key{_C} DESC, seq DESC, run_id{_C} DESC,"
                f" thread_key{_C} DESC")


class Browse:
    """The store's browsing over its pool (``connect``: a pooled autocommit connection)."""

    def __init__(self, schema: str, connect: Connect, clock: Clock,
                 reach_retention_days: int, save_uses: SaveUses) -> None:
        s = quoted(schema)
        self._connect = connect
        self._save_uses = save_uses  # a scope's uses not saved yet, saved before a page
        self._clock = clock
        self.reach_retention_days = check_reach_retention_days(reach_retention_days)
        held = (" WHERE last_write IS NOT NULL AND (%(low)s::text IS NULL"
                f" OR scope_key{_C} >= %(low)s::text AND scope_key{_C} < %(high)s::text)")
        self._scopes = f"SELECT scope_key, active, last_write FROM {s}.scopes{held}"
        self._count_scopes = f"SELECT count(*) FROM {s}.scopes{held}"
        records = f"{s}.records"
        self._page = (f"SELECT {COLUMNS} FROM {records} WHERE scope_key = %(scope)s"
                      f" AND seq IN (SELECT seq FROM {records} WHERE {_FILTERS}"
                      " ORDER BY seq DESC LIMIT %(limit)s OFFSET %(offset)s)"
                      " ORDER BY seq DESC")
        self._count = f"SELECT count(*) FROM {records} WHERE {_FILTERS}"
        self._pointers = (f"SELECT supersedes, status FROM {records}"
                          " WHERE scope_key = %(scope)s AND seq = %(seq)s AND id = %(id)s")
        self._superseded_by = (f"SELECT seq FROM {records} WHERE scope_key = %(scope)s"
                               " AND supersedes = %(id)s ORDER BY seq DESC LIMIT 1")
        self._restated_by = (f"SELECT seq FROM {records} WHERE scope_key = %(scope)s"
                             " AND restates = %(id)s ORDER BY seq DESC LIMIT %(most)s")
        self._rows = (f"SELECT {COLUMNS} FROM {records} WHERE scope_key = %(scope)s"
                      " AND seq = ANY(%(seqs)s::bigint[])")
        self._count_totals = (
            f"SELECT day, name, total, peak FROM {s}.count_totals WHERE kind = %(kind)s"
            " AND day >= %(since)s AND total > 0 ORDER BY day, name")
        reaches = f"{s}.reaches"
        self._prune = f"DELETE FROM {reaches} WHERE at <= %(cutoff)s"
        self._log = (f"INSERT INTO {reaches} (scope_key, seq, run_id, thread_key, at)"
                     " SELECT * FROM unnest(%(scopes)s::text[], %(seqs)s::bigint[],"
                     " %(runs)s::text[], %(threads)s::text[], %(ats)s::bigint[])")
        columns = (f"SELECT scope_key, seq, run_id, thread_key, at FROM {reaches}"
                   " WHERE at > %(after)s")
        self._by_record = (f"{columns} AND scope_key = %(scope)s AND seq = %(seq)s"
                           f"{_REACH_ORDER} LIMIT %(limit)s")
        self._by_run = (f"{columns} AND (run_id = %(run)s OR thread_key = %(run)s)"
                        f"{_REACH_ORDER} LIMIT %(limit)s")
        self._all = f"{columns}{_REACH_ORDER} LIMIT %(limit)s"
        self.drop_scope = f"DELETE FROM {reaches} WHERE scope_key = %(scope)s"
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
        direction = " DESC" if descending else ""
        order = ", ".join(f"{column}{direction}" for column in _SORTS[sort])
        params = {"low": low, "high": high, "limit": limit, "offset": offset}
        async with self._connect() as conn, conn.transaction():
            cursor = await conn.execute(self._count_scopes, params)
            total = (await cursor.fetchone())[0]
            cursor = await conn.execute(
                f"{self._scopes} ORDER BY {order} LIMIT %(limit)s OFFSET %(offset)s", params)
            rows = await cursor.fetchall()
        return ScopePage(total=int(total), rows=tuple(
            ScopeSummary(scope_key=key, kind=scope_kind(key), active=int(active),
                         last_write_ms=None if last is None else int(last))
            for key, active, last in rows))

    async def read_count_totals(self, kind: str, *, since_day: int = 0) -> list[CountTotal]:
        kind, since_day = count_total_args(kind, since_day)
        rows = await self._fetch(self._count_totals, {"kind": kind, "since": since_day})
        return [CountTotal(day=int(day), name=name, total=int(total), most=int(most))
                for day, name, total, most in rows]

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        params = record_params(scope_key, kind, status, source, offset, limit)
        await self._save_uses(params["scope"])
        async with self._connect() as conn, conn.transaction():
            cursor = await conn.execute(self._count, params)
            total = (await cursor.fetchone())[0]
            cursor = await conn.execute(self._page, params)
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
        """The record, its supersede chain (through ever lower seqs), the newest record
        superseding it (when it is superseded) and the newest restating it."""
        cursor = await conn.execute(self._pointers, {"scope": key, "seq": seq, "id": record_id})
        found = await cursor.fetchone()
        if found is None:
            return None
        pointer, status = found
        chain: list[int] = []
        current = seq
        while pointer and len(chain) < MAX_CHAIN:
            before = seq_in_scope(key, pointer)
            if before is None or before >= current:
                break
            cursor = await conn.execute(self._pointers,
                                        {"scope": key, "seq": before, "id": pointer})
            step = await cursor.fetchone()
            if step is None:
                break
            chain.append(before)
            current, pointer = before, step[0]
        by: list[int] = []
        if status == "superseded":
            cursor = await conn.execute(self._superseded_by, {"scope": key, "id": record_id})
            by = [row[0] for row in await cursor.fetchall()]
        cursor = await conn.execute(self._restated_by,
                                    {"scope": key, "id": record_id, "most": RESTATED_BY})
        restated = [row[0] for row in await cursor.fetchall()]
        cursor = await conn.execute(self._rows, {"scope": key,
                                                 "seqs": [seq, *chain, *by, *restated]})
        records = {row[0]: record_of(row) for row in await cursor.fetchall()}
        return (records[seq], tuple(records[n] for n in chain),
                records[by[0]] if by else None, tuple(records[n] for n in restated))

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
            await conn.execute(self._prune, {"cutoff": cutoff})
            if kept:
                await conn.execute(self._log, {
                    "scopes": [r.scope_key for r in kept],
                    "seqs": [record_seq(r.record_id) for r in kept],
                    "runs": [r.run_id for r in kept], "threads": [r.thread_key for r in kept],
                    "ats": [r.at_ms for r in kept]})

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> list[Reach]:
        record_id, run, limit = reach_query(record_id, run, limit)
        params: dict[str, Any] = {
            "after": reach_cutoff(self._clock(), self.reach_retention_days), "limit": limit}
        if record_id is not None:
            scope_key, _sep, seq = record_id.removeprefix("mem:").rpartition(":")
            if not record_id.startswith("mem:") or not seq.isdigit() or len(seq) > 18:
                return []
            statement = self._by_record
            params.update(scope=scope_key, seq=int(seq))
        elif run is not None:
            statement, params["run"] = self._by_run, run
        else:
            statement = self._all
        rows = await self._fetch(statement, params)
        return [Reach(record_id=f"mem:{key}:{seq}", scope_key=key, run_id=run_id,
                      thread_key=thread_key, at_ms=int(at))
                for key, seq, run_id, thread_key, at in rows]
