"""Counters as every store keeps them: the checks on rows to add, what a change adds, and
which scopes a reading selects; no I/O.

Every row a store adds passes ``check_rows`` first, whoever sent it, and a row it refuses is
a ``StoreError`` with nothing of the call added. A write, a forget and a sweep add their
counts in their own transaction, so counts and rows commit together. ``add_counts`` commits
without waiting for the disk (the counts are advisory); a scope counted before it holds a
record gets its row, against ``max_scopes``, as a write would make it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from scopemem.core.counters import (
    FORGOTTEN,
    MAX_DAY,
    MAX_DELTA,
    SWEPT,
    counter_name_problem,
    day_of,
    merge_rows,
    rows_for,
    write_deltas,
)
from scopemem.core.records import CountRow, WriteCounts
from scopemem.core.scopes import ScopeKeyError, scope_key_problem, validate_scope_key
from scopemem.errors import StoreError

__all__ = ["check_rows", "forget_rows", "no_scope_starts", "select_scope", "sweep_rows",
           "write_rows"]


def _int_problem(value: object, low: int, high: int) -> bool:
    return isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high


def check_rows(rows: Sequence[CountRow]) -> list[CountRow]:
    """``rows`` merged (one per scope, day and name), or ``StoreError`` naming the first
    row a store must not add."""
    for row in rows:
        try:
            validate_scope_key(row.scope_key)
        except ScopeKeyError as exc:
            raise StoreError(f"counter row: {exc}") from None
        problem = counter_name_problem(row.name)
        if problem is not None:
            raise StoreError(f"counter row: {problem}")
        if _int_problem(row.day, 0, MAX_DAY):
            raise StoreError(f"counter row: day must be an integer from 0 to {MAX_DAY},"
                             f" got {row.day!r}")
        if _int_problem(row.value, 1, MAX_DELTA):
            raise StoreError(f"counter row: value must be an integer from 1 to {MAX_DELTA},"
                             f" got {row.value!r}")
    return merge_rows(rows)


def write_rows(scope_key: str, counts: WriteCounts, now: int) -> list[CountRow]:
    """What one write batch adds to its scope's counters today."""
    return rows_for(scope_key, day_of(now), write_deltas(counts))


def sweep_rows(scope_key: str, swept: int, now: int) -> list[CountRow]:
    return rows_for(scope_key, day_of(now), {SWEPT: swept})


def forget_rows(scope_key: str, now: int) -> list[CountRow]:
    return rows_for(scope_key, day_of(now), {FORGOTTEN: 1})


def no_scope_starts(prefix: str | None) -> bool:
    """Whether no scope key can start with ``prefix``: it holds what no key may (a NUL,
    whitespace, a control or invisible character) or is longer than a key. A store answers
    such a reading with nothing, without asking its backend (PostgreSQL refuses a NUL, a
    worker the whole request), so every store answers it alike."""
    return bool(prefix) and scope_key_problem(prefix) is not None


def select_scope(scope_key: str, scope_keys: Collection[str] | None, prefix: str | None
                 ) -> bool:
    """Whether a reading of ``scope_keys`` (None: all) and ``prefix`` includes the scope."""
    if scope_keys is not None and scope_key not in scope_keys:
        return False
    return prefix is None or scope_key.startswith(prefix)
