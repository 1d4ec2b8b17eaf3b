"""The rules every store's browsing follows (``base.BrowsingStore``, ``core.browse``): its
arguments checked alike (``StoreError`` naming a bad one) and reaches fitted before they are
kept; and ``SqlBrowse``, both SQL stores' browsing by the shared statements
(``shared/sql.py``), each read a ``Plan`` a backend runs in one snapshot.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, ParamSpec, TypeVar

from scopemem.core import browse
from scopemem.core.browse import (
    HISTORY_REACHES,
    MAX_CHAIN,
    MAX_REACH_BATCH,
    MAX_REACH_RETENTION_DAYS,
    RESTATED_BY,
    CountTotal,
    PageError,
    Reach,
    RecordHistory,
    RecordPage,
    ScopePage,
    ScopeSummary,
    kind_range,
    merge_totals,
    scope_order,
)
from scopemem.core.records import Kind, Record, Source, Status
from scopemem.core.scopes import MemoryIdError, parse_memory_id, record_seq, scope_kind
from scopemem.errors import StoreError
from scopemem.stores.base import (
    Clock,
    check_days,
    check_scope_key,
    redact_source,
    retention_cutoff,
)
from scopemem.stores.shared.batches import seq_in_scope
from scopemem.stores.shared.sql import Statements

__all__ = [
    "Plan",
    "SqlBrowse",
    "check_reach_retention_days",
    "count_total_args",
    "fit_reaches",
    "kept_reaches",
    "reach_query",
    "reach_read",
    "reaches_of",
    "record_args",
    "scope_args",
]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
#: Statements run in one snapshot: each step a statement, its values, and whether its rows
#: are records' (the backend shows its uses not saved yet in them); sent back its rows.
Plan = Generator[tuple[str, dict[str, Any], bool], Sequence[Any], T]


def _store_errors(check: Callable[P, R]) -> Callable[P, R]:
    """``check`` (``core.browse``'s) raising ``StoreError`` where it raises ``PageError``."""
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return check(*args, **kwargs)
        except PageError as exc:
            raise StoreError(str(exc)) from None
    return checked


_page = _store_errors(browse.check_page)
_kind = _store_errors(browse.check_kind_name)
reach_query = _store_errors(browse.check_reach_query)


def scope_args(kind: object, sort: object, descending: object, offset: object,
               limit: object) -> tuple[str | None, str, bool, int, int]:
    if not isinstance(descending, bool):
        raise StoreError(f"descending must be true or false, got {descending!r}")
    page = _page(offset, limit)
    return _kind(kind), _store_errors(browse.check_scope_sort)(sort), descending, *page


def count_total_args(kind: object, since_day: object) -> tuple[str, int]:
    checked = _kind(kind)
    if checked is None:
        raise StoreError("kind must be a scope kind, got None")
    return checked, _store_errors(browse.check_since_day)(since_day)


def record_args(scope_key: object, kind: object, status: object, source: object,
                offset: object, limit: object
                ) -> tuple[str, Kind | None, Status | None, Source | None, int, int]:
    return (check_scope_key(scope_key),
            *_store_errors(browse.check_record_filters)(kind, status, source),
            *_page(offset, limit))


def check_reach_retention_days(days: object) -> int:
    return check_days(days, "reach_retention_days", MAX_REACH_RETENTION_DAYS)


def fit_reaches(reaches: Sequence[Reach]) -> list[Reach]:
    """The reaches as every store keeps them: each a ``Reach`` of a record of its own scope,
    at a time from 0 on, its run id and thread key redacted and cut as a record's provenance
    is; at most ``MAX_REACH_BATCH`` a call. Else ``StoreError``, and nothing is kept."""
    if len(reaches) > MAX_REACH_BATCH:
        raise StoreError(f"at most {MAX_REACH_BATCH} reaches a call, got {len(reaches)}")
    fitted = []
    for reach in reaches:
        key = check_scope_key(reach.scope_key)
        try:
            owner, _seq = parse_memory_id(reach.record_id)
        except MemoryIdError as exc:
            raise StoreError(f"reach record_id: {exc}") from None
        if owner != key:
            raise StoreError("a reach's record_id must be a record of its scope_key")
        at = reach.at_ms
        if isinstance(at, bool) or not isinstance(at, int) or not 0 <= at < 2**53:
            raise StoreError(f"a reach's at_ms must be a time in epoch ms, got {at!r}")
        fitted.append(Reach(record_id=reach.record_id, scope_key=key,
                            run_id=redact_source(reach.run_id),
                            thread_key=redact_source(reach.thread_key), at_ms=at))
    return fitted


# --- the SQL stores' reach log --------------------------------------------------------------


def kept_reaches(reaches: Sequence[Reach], clock: Clock, days: int
                 ) -> tuple[int, list[tuple[str, int, str, str, int]]] | None:
    """A log's cutoff (what it prunes) and its rows (key, seq, run id, thread key, time)
    of ``fit_reaches`` within the retention; None when nothing is logged (``days`` 0)."""
    fitted = fit_reaches(reaches)
    if not days or not fitted:
        return None
    cutoff = retention_cutoff(clock(), days)
    return cutoff, [(r.scope_key, record_seq(r.record_id), r.run_id, r.thread_key, r.at_ms)
                    for r in fitted if r.at_ms > cutoff]


def reach_read(sql: Statements, clock: Clock, days: int, record_id: object, run: object,
               limit: object) -> tuple[str, dict[str, Any]] | None:
    """The statement and values of a read of reaches within the retention: of a record,
    of a run or thread, or the newest; None for an id no record has."""
    record_id, run, limit = reach_query(record_id, run, limit)
    params: dict[str, Any] = {"after": retention_cutoff(clock(), days), "limit": limit}
    if record_id is not None:
        scope_key, _sep, seq = record_id.removeprefix("mem:").rpartition(":")
        if not record_id.startswith("mem:") or not seq.isdigit() or len(seq) > 18:
            return None
        params.update(scope=scope_key, seq=int(seq))
        return sql.reaches_of_record, params
    if run is not None:
        params["run"] = run
        return sql.reaches_of_run, params
    return sql.all_reaches, params


def reaches_of(rows: Sequence[Sequence[Any]]) -> list[Reach]:
    return [Reach(record_id=f"mem:{key}:{seq}", scope_key=key, run_id=run_id,
                  thread_key=thread_key, at_ms=int(at))
            for key, seq, run_id, thread_key, at in rows]


# --- the SQL stores' pages and histories ----------------------------------------------------


class SqlBrowse:
    """Pages and histories by ``sql`` over a store's ``parts`` (a SQLite store's shards,
    PostgreSQL's one schema; ``part_of`` a scope's), each read by the backend's ``read``;
    ``record_of`` makes a record of a row, ``reaches`` reads a record's reaches."""

    def __init__(self, sql: Statements, record_of: Callable[[Sequence[Any]], Record],
                 reaches: Callable[..., Awaitable[list[Reach]]], parts: int = 1,
                 part_of: Callable[[str], int] = lambda _key: 0) -> None:
        self.sql = sql
        self._record_of = record_of
        self._reaches = reaches
        self._parts = parts
        self._part_of = part_of

    async def read(self, part: int, plan: Plan[T], uses: str | None = None) -> T | None:
        """``plan`` run in one snapshot of ``part``, its records with the uses of scope
        ``uses`` not saved yet; None when the part holds nothing yet."""
        raise NotImplementedError

    async def fetch(self, part: int, statement: str, params: dict[str, Any]
                    ) -> list[Any] | None:
        """The rows of one statement in ``part``; None when it holds nothing yet."""
        raise NotImplementedError

    async def _every(self, read: Callable[[int], Awaitable[T | None]]) -> list[T]:
        # One part is awaited as it is: ``gather`` would make it a task, a loop turn more.
        answers = ([await read(0)] if self._parts == 1
                   else await asyncio.gather(*map(read, range(self._parts))))
        return [answer for answer in answers if answer is not None]

    async def scope_page(self, *, kind: str | None = None, sort: str = "key",
                         descending: bool = False, offset: int = 0, limit: int = 50
                         ) -> ScopePage:
        kind, sort, descending, offset, limit = scope_args(kind, sort, descending, offset,
                                                           limit)
        low, high = kind_range(kind) if kind is not None else (None, None)
        # One part pages in SQL; several each answer their first ``offset + limit``, merged.
        skip = offset if self._parts > 1 else 0
        params = {"low": low, "high": high, "limit": skip + limit, "offset": offset - skip}
        page = self.sql.scope_page(sort, descending)
        found = await self._every(lambda part: self.read(part, _scopes(self.sql, page, params)))
        merged = heapq.merge(*(rows for _total, rows in found), key=scope_order(sort),
                             reverse=descending)
        return ScopePage(total=sum(total for total, _rows in found),
                         rows=tuple(itertools.islice(merged, skip, skip + limit)))

    async def read_count_totals(self, kind: str, *, since_day: int = 0) -> list[CountTotal]:
        kind, since_day = count_total_args(kind, since_day)
        params = {"kind": kind, "since": since_day}
        found = await self._every(
            lambda part: self.fetch(part, self.sql.count_totals, params))
        return merge_totals(CountTotal(day=day, name=name, total=total, most=most)
                            for rows in found for day, name, total, most in rows)

    async def record_page(self, scope_key: str, *, kind: Kind | None = None,
                          status: str | None = None, source: str | None = None,
                          offset: int = 0, limit: int = 50) -> RecordPage:
        key, kind_, status_, source_, offset, limit = record_args(
            scope_key, kind, status, source, offset, limit)
        params = {"scope": key, "kind": kind_ and kind_.value, "limit": limit,
                  "status": status_ and status_.value, "source": source_ and source_.value,
                  "offset": offset}
        done = await self.read(self._part_of(key), _record_page(self.sql, params), key)
        total, rows = done or (0, [])
        return RecordPage(total=total, rows=tuple(map(self._record_of, rows)))

    async def record_history(self, scope_key: str, record_id: str) -> RecordHistory | None:
        key, *_rest = record_args(scope_key, None, None, None, 0, 1)
        seq = seq_in_scope(key, record_id)
        if seq is None:
            return None
        found = await self.read(self._part_of(key), _history(self.sql, key, record_id, seq),
                                key)
        if found is None:
            return None
        record, chain, by, restated = (tuple(map(self._record_of, rows)) for rows in found)
        return RecordHistory(record=record[0], supersedes=chain,
                             superseded_by=by[0] if by else None, restated_by=restated,
                             reaches=tuple(await self._reaches(record_id=record_id,
                                                               limit=HISTORY_REACHES)))


def _scopes(sql: Statements, page: str, params: dict[str, Any]
            ) -> Plan[tuple[int, list[ScopeSummary]]]:
    total = (yield sql.count_held, params, False)[0][0]
    rows = yield page, params, False
    return total, [ScopeSummary(scope_key=key, kind=scope_kind(key), active=active,
                                last_write_ms=last_write) for key, active, last_write in rows]


def _record_page(sql: Statements, params: dict[str, Any]
                 ) -> Plan[tuple[int, Sequence[Any]]]:
    total = (yield sql.count_records, params, False)[0][0]
    return total, (yield sql.record_page, params, True)


def _history(sql: Statements, key: str, record_id: str, seq: int
             ) -> Plan[list[list[Sequence[Any]]] | None]:
    """The rows of a record, of its supersede chain (``core.browse.history_of``'s rule), of
    the newest record superseding it and of the newest restating it."""
    found = yield sql.pointers, {"scope": key, "seq": seq, "id": record_id}, False
    if not found:
        return None
    pointer, status = found[0]
    chain: list[int] = []
    current = seq
    while pointer and len(chain) < MAX_CHAIN:
        before = seq_in_scope(key, pointer)
        if before is None or before >= current:
            break
        step = yield sql.pointers, {"scope": key, "seq": before, "id": pointer}, False
        if not step:
            break
        chain.append(before)
        current, pointer = before, step[0][0]
    by: list[int] = []
    if status == "superseded":
        by = [row[0] for row in (yield sql.superseded_by, {"scope": key, "id": record_id},
                                 False)]
    restated = [row[0] for row in (yield sql.restated_by, {"scope": key, "id": record_id,
                                                           "most": RESTATED_BY}, False)]
    rows = {row[0]: row for row in (yield sql.rows, {"scope": key,
                                                     "seqs": [seq, *chain, *by, *restated]},
                                    True)}
    return [[rows[n] for n in seqs] for seqs in ([seq], chain, by, restated)]
