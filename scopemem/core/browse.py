"""What a person browsing memory sees: pages of scopes and of records, a record's history,
and which runs a record reached.

The Memory Hub draws its pages from these values; every store answers them the same way
(``stores.base.BrowsingStore``), paging and sorting where its data lives, so a page costs
what it shows and not the size of the store. Everything here is pure: the checks a store
runs on a page's arguments, and the shapes of the answers.

A *count total* is one counter summed over every scope of a kind for one day, with the
largest one scope counted that day: what the overview's chart of a kind draws, summed where
the counters live.

A *reach* is one record put in front of one run: for every block a run receives (the
repository window included), one ``Reach`` per record shown, with the run's id and thread
key. A store keeps them for ``memory.reach_retention_days``; a preview logs none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from scopemem.core.provenance import scrub_source
from scopemem.core.records import MAX_SOURCE_CHARS, Kind, Record, Source, Status
from scopemem.core.scopes import record_seq, scope_kind

__all__ = [
    "DEFAULT_PAGE",
    "DEFAULT_REACH_RETENTION_DAYS",
    "HISTORY_REACHES",
    "MAX_CHAIN",
    "MAX_OFFSET",
    "MAX_PAGE",
    "MAX_REACHES",
    "MAX_REACH_BATCH",
    "MAX_REACH_RETENTION_DAYS",
    "RESTATED_BY",
    "SCOPE_SORTS",
    "CountTotal",
    "PageError",
    "Reach",
    "RecordHistory",
    "RecordPage",
    "ScopePage",
    "ScopeSummary",
    "check_kind_name",
    "check_since_day",
    "check_page",
    "check_record_filters",
    "check_reach_query",
    "check_scope_sort",
    "history_of",
    "kind_range",
    "merge_totals",
    "names_person",
    "reach_from_wire",
    "reach_order",
    "reach_to_wire",
    "scope_order",
    "select_reaches",
    "summaries",
    "summary_from_wire",
    "summary_to_wire",
    "total_from_wire",
    "total_to_wire",
]

#: How a scope page may be sorted: by key, by active records, by the newest record's time.
SCOPE_SORTS = ("key", "active", "last_write")
DEFAULT_PAGE = 50
MAX_PAGE = 200
#: The deepest offset a page may start at: past it a person filters instead of paging.
MAX_OFFSET = 1_000_000
#: The most reaches one read answers, and the most one log call may carry.
MAX_REACHES = 500
MAX_REACH_BATCH = 256
#: The reaches a record's history carries, newest first; how far its supersede chain is
#: followed back, and how many restating records it names.
HISTORY_REACHES = 100
MAX_CHAIN = 20
RESTATED_BY = 20
DEFAULT_REACH_RETENTION_DAYS = 30
MAX_REACH_RETENTION_DAYS = 3650

# A scope kind is the part of a key before its first colon (``core.scopes.scope_kind``).
_KIND_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class PageError(ValueError):
    """A page's argument no store can answer; the message names it."""


@attrs.frozen(kw_only=True)
class ScopeSummary:
    """One scope on the overview: its key and kind, its active records, and when its newest
    record was written (epoch ms; None for a scope whose records were all deleted)."""

    scope_key: str
    kind: str
    active: int
    last_write_ms: int | None


@attrs.frozen(kw_only=True)
class ScopePage:
    """One page of scopes and how many scopes the filter holds in all."""

    total: int
    rows: tuple[ScopeSummary, ...]


@attrs.frozen(kw_only=True)
class RecordPage:
    """One page of a scope's records, newest first, every status, and how many records the
    filter holds in all."""

    total: int
    rows: tuple[Record, ...]


@attrs.frozen(kw_only=True)
class Reach:
    """One record shown to one run: the record, its scope, the run's id and thread key
    (``""`` when the run had none) and when (epoch ms)."""

    record_id: str
    scope_key: str
    run_id: str
    thread_key: str
    at_ms: int


@attrs.frozen(kw_only=True)
class CountTotal:
    """One counter of one day summed over every scope of a kind (``total``), and the largest
    value one of those scopes counted that day (``most``)."""

    day: int
    name: str
    total: int
    most: int


@attrs.frozen(kw_only=True)
class RecordHistory:
    """A record with what the store keeps of its past.

    - ``supersedes``: the records it replaced, nearest first (each one's ``supersedes`` in
      turn), as far as the store still holds them (a superseded row is purged past
      ``memory.retention_days``);
    - ``superseded_by``: the record that replaced it, when it is superseded and that one is
      held;
    - ``restated_by``: records that name it as what they restate but were kept as records
      of their own (it had left active status, or was of another kind). A restatement that
      strengthened it is not a record: it raised ``record.use_count`` and its confidence;
    - ``uses`` are ``record.use_count`` (blocks that showed it as a hit, dedups and
      restatements) and ``record.last_used_at``;
    - ``reaches``: the runs it reached, newest first, at most ``HISTORY_REACHES``, within
      the reach retention.
    """

    record: Record
    supersedes: tuple[Record, ...] = ()
    superseded_by: Record | None = None
    restated_by: tuple[Record, ...] = ()
    reaches: tuple[Reach, ...] = ()


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_page(offset: object, limit: object) -> tuple[int, int]:
    """``(offset, limit)`` when a store may page with them; else ``PageError``."""
    if not _whole(offset) or not 0 <= offset <= MAX_OFFSET:  # type: ignore[operator]
        raise PageError(f"offset must be an integer from 0 to {MAX_OFFSET}, got {offset!r}")
    if not _whole(limit) or not 1 <= limit <= MAX_PAGE:  # type: ignore[operator]
        raise PageError(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
    return offset, limit  # type: ignore[return-value]


def check_kind_name(kind: object) -> str | None:
    """A scope kind filter (``repo``), or None for every kind."""
    if kind is None:
        return None
    if not isinstance(kind, str) or not _KIND_NAME.fullmatch(kind):
        raise PageError("kind must be a scope kind: 1 to 64 letters, digits, '.', '_' or '-'")
    return kind


def check_since_day(day: object) -> int:
    """The first UTC day (days since the epoch) a reading of counters covers."""
    if not _whole(day) or not 0 <= day < 2**31:  # type: ignore[operator]
        raise PageError(f"since_day must be an integer from 0 to {2**31 - 1}, got {day!r}")
    return day  # type: ignore[return-value]


def merge_totals(totals: Iterable[CountTotal]) -> list[CountTotal]:
    """``totals`` of the same kind from several parts (a store's shards, or single rows)
    merged into one per day and name, sorted so: totals added, the largest ``most`` kept."""
    sums: dict[tuple[int, str], tuple[int, int]] = {}
    for part in totals:
        total, most = sums.get((part.day, part.name), (0, 0))
        sums[(part.day, part.name)] = (total + part.total, max(most, part.most))
    return [CountTotal(day=day, name=name, total=total, most=most)
            for (day, name), (total, most) in sorted(sums.items())]


def check_scope_sort(sort: object) -> str:
    if sort not in SCOPE_SORTS:
        raise PageError(f"sort must be one of {', '.join(SCOPE_SORTS)}, got {sort!r}")
    return sort


def kind_range(kind: str) -> tuple[str, str]:
    """The keys of a kind as a half-open range ``[low, high)``: ``repo:`` up to ``repo;``
    (``;`` follows ``:``), so a sorted key index answers the filter."""
    return f"{kind}:", f"{kind};"


def check_record_filters(kind: object, status: object, source: object
                         ) -> tuple[Kind | None, Status | None, Source | None]:
    """A record page's filters, each None for any; else ``PageError`` naming the filter."""
    return (_member(Kind, "kind", kind), _member(Status, "status", status),
            _member(Source, "source", source))


def _member(enum: Any, name: str, value: object) -> Any:
    if value is None:
        return None
    try:
        return enum(value)
    except ValueError:
        names = ", ".join(member.value for member in enum)
        raise PageError(f"{name} must be one of {names}, got {value!r}") from None


def check_reach_query(record_id: object, run: object, limit: object
                      ) -> tuple[str | None, str | None, int]:
    """A reach read's arguments: at most one of ``record_id`` and ``run`` (a run id or a
    thread key), and a limit from 1 to ``MAX_REACHES``."""
    for name, value in (("record_id", record_id), ("run", run)):
        if value is not None and (not isinstance(value, str) or not value
                                  or len(value) > MAX_SOURCE_CHARS):
            raise PageError(f"{name} must be a string of 1 to {MAX_SOURCE_CHARS} characters")
    if record_id is not None and run is not None:
        raise PageError("give record_id or run, not both")
    if not _whole(limit) or not 1 <= limit <= MAX_REACHES:  # type: ignore[operator]
        raise PageError(f"limit must be an integer from 1 to {MAX_REACHES}, got {limit!r}")
    return record_id, run, limit  # type: ignore[return-value]


def reach_order(reach: Reach) -> tuple[int, str, int, str, str]:
    """Where a reach stands in a read, which answers the greatest first: newest, then by
    scope key, seq, run id and thread key (every store's statements order so)."""
    seq = reach.record_id.rpartition(":")[2]
    return (reach.at_ms, reach.scope_key, int(seq) if seq.isdigit() else 0, reach.run_id,
            reach.thread_key)


def select_reaches(reaches: Iterable[Reach], record_id: str | None, run: str | None,
                   limit: int, after: int) -> list[Reach]:
    """What a reach read answers from unindexed ``reaches`` (the in-process store's): those
    later than ``after`` (the retention's cutoff) of ``record_id`` or of ``run`` (its run id
    or thread key), in ``reach_order``, greatest first."""
    chosen = [reach for reach in reaches
              if reach.at_ms > after
              and (record_id is None or reach.record_id == record_id)
              and (run is None or run in (reach.run_id, reach.thread_key))]
    chosen.sort(key=reach_order, reverse=True)
    return chosen[:limit]


# --- the in-process answers (the SQL stores' statements must agree with them) ------------


def scope_order(sort: str) -> Callable[[ScopeSummary], Any]:
    """The sort key of a ``ScopeSummary`` for ``sort`` (ties by key), as the SQL stores
    order: a scope with no last write sorts as 0."""
    if sort == "active":
        return lambda row: (row.active, row.scope_key)
    if sort == "last_write":
        return lambda row: (row.last_write_ms or 0, row.scope_key)
    return lambda row: row.scope_key


def summaries(rows: Mapping[str, Sequence[Record]], last_write: Mapping[str, int],
              kind: str | None) -> list[ScopeSummary]:
    """Every scope holding records (of ``kind``)."""
    return [ScopeSummary(scope_key=key, kind=scope_kind(key),
                         active=sum(1 for record in records if record.is_active),
                         last_write_ms=last_write.get(key))
            for key, records in rows.items()
            if records and (kind is None or scope_kind(key) == kind)]


def history_of(record: Record, rows: Iterable[Record], reaches: Sequence[Reach]
               ) -> RecordHistory:
    """A record's history from its scope's rows: its supersede chain followed back through
    ever lower seqs, the newest record superseding it when it is superseded, the newest
    records restating it."""
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


def names_person(run_id: str, thread_key: str, person: str) -> bool:
    """Whether a reach's run id or thread key names ``person`` (``core.provenance``: their
    id as a whole token): a reach is its scope's provenance too, scrubbed with it."""
    return bool(person) and any(scrub_source(value, person) is not value
                                for value in (run_id, thread_key))


# --- the wire (the Memory Worker's browsing routes) -------------------------------------------


def reach_to_wire(reach: Reach) -> dict[str, Any]:
    return {"recordId": reach.record_id, "scopeKey": reach.scope_key, "runId": reach.run_id,
            "threadKey": reach.thread_key, "atMs": reach.at_ms}


def reach_from_wire(data: object) -> Reach:
    """A reach as the wire carries it; ``PageError`` when it is not one."""
    if not isinstance(data, dict):
        raise PageError("a reach must be an object")
    values = {name: data.get(key) for name, key in (
        ("record_id", "recordId"), ("scope_key", "scopeKey"), ("run_id", "runId"),
        ("thread_key", "threadKey"))}
    at = data.get("atMs")
    if not all(isinstance(value, str) for value in values.values()) or not _whole(at):
        raise PageError("a reach has string recordId, scopeKey, runId, threadKey and an"
                        " integer atMs")
    return Reach(at_ms=at, **values)  # type: ignore[arg-type]


def total_to_wire(total: CountTotal) -> dict[str, Any]:
    return {"day": total.day, "name": total.name, "total": total.total, "most": total.most}


def total_from_wire(data: object) -> CountTotal:
    """A count total as the wire carries it; ``PageError`` when it is not one."""
    if not isinstance(data, dict):
        raise PageError("a count total must be an object")
    day, name, total, most = (data.get(key) for key in ("day", "name", "total", "most"))
    if (not isinstance(name, str) or not all(_whole(value) and value >= 0  # type: ignore
                                             for value in (day, total, most))):
        raise PageError("a count total has an integer day, a string name and integer"
                        " total and most, none below 0")
    return CountTotal(day=day, name=name, total=total, most=most)  # type: ignore[arg-type]


def summary_to_wire(row: ScopeSummary) -> dict[str, Any]:
    data: dict[str, Any] = {"scopeKey": row.scope_key, "kind": row.kind, "active": row.active}
    if row.last_write_ms is not None:
        data["lastWriteMs"] = row.last_write_ms
    return data


def summary_from_wire(data: object) -> ScopeSummary:
    """A scope summary as the wire carries it; ``PageError`` when it is not one."""
    if not isinstance(data, dict):
        raise PageError("a scope summary must be an object")
    key, kind, active, last = (data.get("scopeKey"), data.get("kind"), data.get("active"),
                               data.get("lastWriteMs"))
    if (not isinstance(key, str) or not isinstance(kind, str) or not _whole(active)
            or last is not None and not _whole(last)):
        raise PageError("a scope summary has a string scopeKey and kind, an integer active"
                        " and an optional integer lastWriteMs")
    return ScopeSummary(scope_key=key, kind=kind, active=active,  # type: ignore[arg-type]
                        last_write_ms=last)
