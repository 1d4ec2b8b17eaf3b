"""Browsing the shared-file SQLite store (``stores.base.BrowsingStore``), by the statements
both SQL stores share (``shared/sql.py``); the reaches are ``reach_log.py``'s.

A page of scopes asks each shard for the first ``offset + limit`` of its scopes in the
page's order and merges them; a kind's count totals are each shard's, merged. Neither
reads a record.
"""

from __future__ import annotations

import asyncio
import heapq
import json
from collections.abc import Sequence
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
    merge_totals,
)
from scopemem.core.records import Kind, Record
from scopemem.core.scopes import scope_kind
from scopemem.stores.browsing import (
    Found,
    count_total_args,
    drive,
    history_from,
    history_reads,
    record_args,
    record_params,
    scope_args,
    scope_order,
)
from scopemem.stores.shared.batches import seq_in_scope
from scopemem.stores.sqlite_shared import sql as sqlite_sql
from scopemem.stores.sqlite_shared.dialect import SQL
from scopemem.stores.sqlite_shared.pools import ShardPools
from scopemem.stores.sqlite_shared.reach_log import ReachLog
from scopemem.stores.sqlite_shared.usage import PendingUses

__all__ = ["Browse"]

class Browse:
    """The store's browsing, over its shards' pools and pending uses and its reach log."""

    def __init__(self, shards: int, of: Any, pools: ShardPools, uses: PendingUses,
                 reaches: ReachLog) -> None:
        self._shards = shards
        self._of = of  # scope key → its shard
        self._pools = pools
        self._uses = uses
        self.reaches = reaches

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        kind, sort, descending, offset, limit = scope_args(kind, sort, descending, offset,
                                                           limit)
        low, high = kind_range(kind) if kind is not None else (None, None)
        # Each shard's first ``offset + limit``, merged.
        params = {"low": low, "high": high, "limit": offset + limit, "offset": 0}
        statement = SQL.scope_page(sort, descending)
        answers = await asyncio.gather(*(self._pools.read(shard, _scopes, statement, params)
                                         for shard in range(self._shards)))
        found = [answer for answer in answers if answer is not None]
        merged = heapq.merge(*(rows for _total, rows in found), key=scope_order(sort),
                             reverse=descending)
        rows = [row for _n, row in zip(range(offset + limit), merged, strict=False)]
        return ScopePage(total=sum(total for total, _rows in found),
                         rows=tuple(rows[offset:]))

    async def read_count_totals(self, kind: str, *, since_day: int = 0) -> list[CountTotal]:
        kind, since_day = count_total_args(kind, since_day)
        params = {"kind": kind, "since": since_day}
        answers = await asyncio.gather(*(self._pools.read(shard, _count_totals, params)
                                         for shard in range(self._shards)))
        return merge_totals(total for answer in answers for total in answer or ())

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        params = record_params(scope_key, kind, status, source, offset, limit)
        shard = self._of(params["scope"])
        done = await self._pools.read(shard, _record_page, self._uses, shard, params)
        total, rows = done if done is not None else (0, [])
        return RecordPage(total=total, rows=tuple(rows))

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        key, *_rest = record_args(scope_key, None, None, None, 0, 1)
        seq = seq_in_scope(key, record_id)
        if seq is None:
            return None
        shard = self._of(key)
        found = await self._pools.read(shard, _history, self._uses, shard, key, record_id,
                                       seq)
        if found is None:
            return None
        return history_from(found, await self.reaches.read(record_id, None, HISTORY_REACHES))

    async def log_reaches(self, reaches: Sequence[Reach]) -> None:
        await self.reaches.log(reaches)

    async def read_reaches(self, *, record_id: str | None = None, run: str | None = None,
                           limit: int = 100) -> list[Reach]:
        return await self.reaches.read(record_id, run, limit)


def _scopes(conn: Any, statement: str, params: dict[str, Any]
            ) -> tuple[int, list[ScopeSummary]]:
    with sqlite_sql.snapshot(conn):
        total = conn.execute(SQL.count_held, params).fetchall()[0][0]
        rows = conn.execute(statement, params).fetchall()
    return total, [ScopeSummary(scope_key=key, kind=scope_kind(key), active=active,
                                last_write_ms=last_write) for key, active, last_write in rows]


def _count_totals(conn: Any, params: dict[str, Any]) -> list[CountTotal]:
    return [CountTotal(day=day, name=name, total=total, most=most)
            for day, name, total, most in conn.execute(SQL.count_totals, params).fetchall()]


def _record_page(conn: Any, uses: PendingUses, shard: int, params: dict[str, Any]
                 ) -> tuple[int, list[Record]]:
    with sqlite_sql.snapshot(conn):
        total = conn.execute(SQL.count_records, params).fetchall()[0][0]
        _lead, rows = uses.rows(conn, shard, params["scope"], SQL.record_page, params)
    return total, [sqlite_sql.record(row) for row in rows]


def _history(conn: Any, uses: PendingUses, shard: int, scope_key: str, record_id: str,
             seq: int) -> Found | None:
    def run(name: str, params: dict[str, Any]) -> Any:
        if name == "rows":  # with the uses not saved yet
            return uses.rows(conn, shard, scope_key, SQL.rows,
                             {**params, "seqs": json.dumps(params["seqs"])})[1]
        return conn.execute(getattr(SQL, name), params).fetchall()

    with sqlite_sql.snapshot(conn):
        return drive(history_reads(scope_key, record_id, seq, sqlite_sql.record), run)
