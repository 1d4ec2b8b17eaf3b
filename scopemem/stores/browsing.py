"""The rules every store's browsing (``base.BrowsingStore``, ``core.browse``) follows: its
arguments checked the same way (``StoreError`` naming the argument), reaches fitted before
they are kept, the retention's cutoff, and the in-process answers the other stores' SQL
must agree with (``tests/stores/test_contract.py`` holds them to it).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from typing import Any

from scopemem.core import browse
from scopemem.core.browse import (
    MAX_REACH_BATCH,
    MAX_REACH_RETENTION_DAYS,
    PageError,
    Reach,
    RecordHistory,
    ScopeSummary,
)
from scopemem.core.provenance import scrub_source
from scopemem.core.records import Kind, Record, Source, Status
from scopemem.core.scopes import MemoryIdError, parse_memory_id, record_seq, scope_kind
from scopemem.errors import StoreError
from scopemem.stores.base import check_days, check_scope_key, redact_source
from scopemem.stores.base import retention_cutoff as reach_cutoff  # one rule: kept N days
from scopemem.stores.shared.batches import seq_in_scope

__all__ = [
    "MAX_CHAIN",
    "RESTATED_BY",
    "ScopeArgs",
    "Found",
    "check_reach_retention_days",
    "names_person",
    "count_total_args",
    "drive",
    "fit_reaches",
    "history_from",
    "history_of",
    "history_reads",
    "reach_cutoff",
    "reach_query",
    "record_args",
    "record_params",
    "scope_args",
    "scope_order",
    "summaries",
]

#: How far a supersede chain is followed back, and how many restating records are named.
MAX_CHAIN = 20
RESTATED_BY = 20

ScopeArgs = tuple[str | None, str, bool, int, int]


def _checked(fn: Callable[..., Any], *args: object) -> Any:
    try:
        return fn(*args)
    except PageError as exc:
        raise StoreError(str(exc)) from None


def scope_args(kind: object, sort: object, descending: object, offset: object,
               limit: object) -> ScopeArgs:
    """A scope page's arguments as a store uses them; ``StoreError`` naming a bad one."""
    if not isinstance(descending, bool):
        raise StoreError(f"descending must be true or false, got {descending!r}")
    page: tuple[int, int] = _checked(browse.check_page, offset, limit)
    return (_checked(browse.check_kind_name, kind), _checked(browse.check_scope_sort, sort),
            descending, *page)


def count_total_args(kind: object, since_day: object) -> tuple[str, int]:
    """A count totals reading's arguments (a scope kind, the first day); ``StoreError``
    naming a bad one."""
    if kind is None:
        raise StoreError("kind must be a scope kind, got None")
    return _checked(browse.check_kind_name, kind), _checked(browse.check_since_day, since_day)


def record_args(scope_key: object, kind: object, status: object, source: object,
                offset: object, limit: object
                ) -> tuple[str, Kind | None, Status | None, Source | None, int, int]:
    """A record page's arguments as a store uses them; ``StoreError`` naming a bad one."""
    key = check_scope_key(scope_key)
    filters: tuple[Kind | None, Status | None, Source | None] = _checked(
        browse.check_record_filters, kind, status, source)
    page: tuple[int, int] = _checked(browse.check_page, offset, limit)
    return (key, *filters, *page)


def record_params(scope_key: object, kind: object, status: object, source: object,
                  offset: object, limit: object) -> dict[str, Any]:
    """A record page's arguments as a SQL store binds them (``record_args``; each filter
    its value, or None for any)."""
    key, kind_, status_, source_, offset_, limit_ = record_args(scope_key, kind, status,
                                                                source, offset, limit)
    return {"scope": key, "kind": kind_ and kind_.value, "status": status_ and status_.value,
            "source": source_ and source_.value, "limit": limit_, "offset": offset_}


#: What a SQL store's history read finds: the record, its supersede chain, the record
#: superseding it, the records restating it.
Found = tuple[Record, tuple[Record, ...], Record | None, tuple[Record, ...]]


def history_reads(key: str, record_id: str, seq: int,
                  record_of: Callable[[Sequence[Any]], Record]
                  ) -> Generator[tuple[str, dict[str, Any]], Sequence[Any], Found | None]:
    """A SQL store's history read (``history_of``'s answer) as the statements it runs, each
    a ``shared.sql.Statements`` name and values, its rows sent back by the caller."""
    found = yield "pointers", {"scope": key, "seq": seq, "id": record_id}
    if not found:
        return None
    pointer, status = found[0]
    chain: list[int] = []
    current = seq
    while pointer and len(chain) < MAX_CHAIN:
        before = seq_in_scope(key, pointer)
        if before is None or before >= current:
            break
        step = yield "pointers", {"scope": key, "seq": before, "id": pointer}
        if not step:
            break
        chain.append(before)
        current, pointer = before, step[0][0]
    by: list[int] = []
    if status == "superseded":
        by = [row[0] for row in (yield "superseded_by", {"scope": key, "id": record_id})]
    restated = [row[0] for row in (yield "restated_by", {"scope": key, "id": record_id,
                                                         "most": RESTATED_BY})]
    rows = yield "rows", {"scope": key, "seqs": [seq, *chain, *by, *restated]}
    records = {row[0]: record_of(row) for row in rows}
    return (records[seq], tuple(records[n] for n in chain),
            records[by[0]] if by else None, tuple(records[n] for n in restated))


def drive(steps: Generator[tuple[str, dict[str, Any]], Sequence[Any], Found | None],
          run: Callable[[str, dict[str, Any]], Sequence[Any]]) -> Found | None:
    """``steps`` run to their end, each statement by ``run`` (a sync caller's driver)."""
    try:
        step = next(steps)
        while True:
            step = steps.send(run(*step))
    except StopIteration as done:
        found: Found | None = done.value
        return found


def history_from(found: Found, reaches: Sequence[Reach]) -> RecordHistory:
    record, chain, superseded_by, restated_by = found
    return RecordHistory(record=record, supersedes=chain, superseded_by=superseded_by,
                         restated_by=restated_by, reaches=tuple(reaches))


def reach_query(record_id: object, run: object, limit: object
                ) -> tuple[str | None, str | None, int]:
    query: tuple[str | None, str | None, int] = _checked(browse.check_reach_query,
                                                         record_id, run, limit)
    return query


def check_reach_retention_days(days: object) -> int:
    return check_days(days, "reach_retention_days", MAX_REACH_RETENTION_DAYS)


def fit_reaches(reaches: Sequence[object]) -> list[Reach]:
    """The reaches as every store keeps them: each a ``Reach`` of a record of its own scope
    (its id ``mem:<scope>:<n>``), at a time from 0 on, with its run id and thread key
    redacted and cut as a record's provenance is (``base.redact_source``); at most
    ``MAX_REACH_BATCH`` a call. Anything else is ``StoreError`` and nothing is kept."""
    if len(reaches) > MAX_REACH_BATCH:
        raise StoreError(f"at most {MAX_REACH_BATCH} reaches a call, got {len(reaches)}")
    fitted = []
    for reach in reaches:
        if not isinstance(reach, Reach):
            raise StoreError(f"a reach must be a Reach, got {type(reach).__name__}")
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
        for name in ("run_id", "thread_key"):
            if not isinstance(getattr(reach, name), str):
                raise StoreError(f"a reach's {name} must be a string")
        fitted.append(Reach(record_id=reach.record_id, scope_key=key,
                            run_id=redact_source(reach.run_id),
                            thread_key=redact_source(reach.thread_key), at_ms=at))
    return fitted


def names_person(reach_run_id: str, reach_thread_key: str, person: str) -> bool:
    """Whether a reach's run id or thread key names ``person`` (``core.provenance``: their
    id as a whole token); ``scrub_provenance`` deletes such a reach of the scope it scrubs,
    since a reach is the scope's provenance too."""
    return bool(person) and any(scrub_source(value, person) is not value
                                for value in (reach_run_id, reach_thread_key))


def scope_order(sort: str) -> Callable[[ScopeSummary], Any]:
    """The in-process sort key of a ``ScopeSummary`` for ``sort`` (ties by key), as the SQL
    stores order: a scope with no last write sorts as 0."""
    if sort == "active":
        return lambda row: (row.active, row.scope_key)
    if sort == "last_write":
        return lambda row: (row.last_write_ms or 0, row.scope_key)
    return lambda row: row.scope_key


def summaries(rows: Mapping[str, Sequence[Record]], last_write: Mapping[str, int],
              kind: str | None) -> list[ScopeSummary]:
    """Every scope holding records (of ``kind``), as the in-process store answers."""
    return [ScopeSummary(scope_key=key, kind=scope_kind(key),
                         active=sum(1 for record in records if record.is_active),
                         last_write_ms=last_write.get(key))
            for key, records in rows.items()
            if records and (kind is None or scope_kind(key) == kind)]


def history_of(record: Record, rows: Iterable[Record], reaches: Sequence[Reach]
               ) -> RecordHistory:
    """A record's history from its scope's rows (the in-process answer): its supersede
    chain followed back through ever lower seqs, the newest record superseding it when it is
    superseded, the newest records restating it."""
    by_id = {row.id: row for row in rows}
    chain: list[Record] = []
    current = record
    while current.supersedes and len(chain) < MAX_CHAIN:
        before = by_id.get(current.supersedes)
        if before is None or record_seq(before.id) >= record_seq(current.id):
            break
        chain.append(before)
        current = before
    newest = sorted(by_id.values(), key=lambda row: record_seq(row.id), reverse=True)
    superseded_by = None
    if record.status is Status.SUPERSEDED:
        superseded_by = next((row for row in newest if row.supersedes == record.id), None)
    restated_by = tuple(row for row in newest if row.restates == record.id)[:RESTATED_BY]
    return RecordHistory(record=record, supersedes=tuple(chain), superseded_by=superseded_by,
                         restated_by=restated_by, reaches=tuple(reaches))
