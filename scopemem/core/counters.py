"""Per-scope counters bucketed by UTC day: their names, their rows, and how they add up.

A counter answers "what did memory do in this scope on this day" without anyone opening the
store (003 success criterion 4). Stores keep one integer per (scope, day, name); every
function here is pure arithmetic over those rows, so each store and each surface (the CLI,
the worker's ``/stats`` and ``/metrics``) reads them the same way.

Days are whole UTC days counted from the epoch (``day_of``): a bucket is cheap to key, never
depends on a local time zone, and a reading "per day" means the same on every machine.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Iterable, Mapping
from typing import Final

from scopemem.core.records import CountRow, WriteCounts
from scopemem.core.scopes import scope_kind

DAY_MS: Final = 24 * 60 * 60 * 1000

# What a write did (counted by the store, in the write's own transaction).
INSERTED: Final = "inserted"  # facts: the lessons a scope gained
SUMMARIES: Final = "summaries"  # summaries inserted, kept apart from the lessons
DEDUPED: Final = "deduped"
SUPERSEDED: Final = "superseded"
RESTATED: Final = "restated"
OUTRANKED: Final = "outranked"
EVICTED: Final = "evicted"
# What a person or a sweep removed (counted by the store, in the same transaction).
SWEPT: Final = "swept"
FORGOTTEN: Final = "forgotten"
# What reflection saw (counted by the host, at the scope each fact was routed to).
OFFERED: Final = "offered"
REJECTED: Final = "rejected"
# One more counter per gate marker that rejected a fact: ``rejected:<marker>``. A fact
# tripping two markers counts once in ``rejected`` and once under each marker.
REJECTED_BY: Final = "rejected:"
# How reflections ended (counted at the run's home scope: its repository, else its org).
REFLECTIONS_RUN: Final = "reflections_run"
REFLECTIONS_SKIPPED: Final = "reflections_skipped"
REFLECTIONS_FAILED: Final = "reflections_failed"
# What the read path put in front of a model (counted by the host, batched).
INJECTED_WINDOW: Final = "injected_window"
INJECTED_KEYWORD: Final = "injected_keyword"

#: Every counter name but the per-marker ones, in the order tables show them.
COUNTER_NAMES: Final[tuple[str, ...]] = (
    OFFERED, REJECTED, RESTATED, INSERTED, SUMMARIES, DEDUPED, SUPERSEDED, OUTRANKED,
    EVICTED, SWEPT, FORGOTTEN, INJECTED_WINDOW, INJECTED_KEYWORD, REFLECTIONS_RUN,
    REFLECTIONS_SKIPPED, REFLECTIONS_FAILED,
)
_KNOWN: Final = frozenset(COUNTER_NAMES)
# A marker name as it may appear in a counter: short, no spaces, nothing a log or a
# Prometheus label value would need escaped beyond the usual.
_MARKER = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_COUNTER_NAME: Final = len(REJECTED_BY) + 64
#: The most one row may add at once: far above any real batch, far below an overflow.
MAX_DELTA: Final = 1_000_000
#: The latest day a row may carry (the year 9999): a poisoned day cannot break a date.
MAX_DAY: Final = 2_932_896


def day_of(ms: int) -> int:
    """The UTC day (days since the epoch) holding the epoch millisecond ``ms``."""
    return ms // DAY_MS


def day_label(day: int) -> str:
    """``2025-06-01`` for a day number."""
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat()


def parse_day(text: str) -> int:
    """The day number of an ISO date (``2025-06-01``); ``ValueError`` otherwise."""
    return (datetime.date.fromisoformat(text) - datetime.date(1970, 1, 1)).days


def rejected_by(marker: str) -> str:
    """The counter of facts one marker rejected."""
    return f"{REJECTED_BY}{marker}"


def is_marker_name(name: object) -> bool:
    """Whether ``name`` may be a gate marker (and a write policy's reason): 1-64 letters,
    digits, ``_``, ``.`` or ``-``, so ``rejected:<marker>`` is a counter every store keeps
    and a log line stays one line."""
    return isinstance(name, str) and _MARKER.fullmatch(name) is not None


#: What ``is_marker_name`` asks, for messages.
MARKER_NAME_RULE: Final = "a name of 1-64 letters, digits, '_', '.' or '-'"


def counter_name_problem(name: object) -> str | None:
    """Why ``name`` is not a counter a store may keep, or None. Only the known names and
    ``rejected:<marker>`` pass: a client cannot invent counters."""
    if not isinstance(name, str):
        return "a counter name must be a string"
    if name in _KNOWN:
        return None
    marker = name.removeprefix(REJECTED_BY)
    if marker != name and _MARKER.fullmatch(marker):
        return None
    return (f"unknown counter {name[:80]!r} (expected one of {', '.join(COUNTER_NAMES)},"
            f" or {REJECTED_BY}<marker>)")


def write_deltas(counts: WriteCounts) -> dict[str, int]:
    """What one write adds to its scope's counters (zeros left out)."""
    deltas = {
        INSERTED: counts.inserted - counts.inserted_summaries,
        SUMMARIES: counts.inserted_summaries,
        DEDUPED: counts.deduped,
        SUPERSEDED: counts.superseded,
        RESTATED: counts.restated,
        OUTRANKED: counts.outranked,
        EVICTED: counts.evicted,
    }
    return {name: n for name, n in deltas.items() if n > 0}


def rows_for(scope_key: str, day: int, deltas: Mapping[str, int]) -> list[CountRow]:
    """The rows adding ``deltas`` to a scope's counters on ``day`` (zeros left out)."""
    return [CountRow(scope_key, day, name, n) for name, n in deltas.items() if n > 0]


def merge_rows(rows: Iterable[CountRow]) -> list[CountRow]:
    """Rows with the same (scope, day, name) added into one, in a stable order (scope, day,
    then name): what a store adds in one statement, and what a reading groups."""
    totals: dict[tuple[str, int, str], int] = {}
    for row in rows:
        key = (row.scope_key, row.day, row.name)
        totals[key] = totals.get(key, 0) + row.value
    return [CountRow(scope, day, name, value)
            for (scope, day, name), value in sorted(totals.items())]


def name_order(name: str) -> tuple[int, str]:
    """Tables list the known counters in ``COUNTER_NAMES`` order, then the per-marker ones."""
    try:
        return COUNTER_NAMES.index(name), ""
    except ValueError:
        return len(COUNTER_NAMES), name


# --- readings: what a person asks of the counters ---------------------------------------


def add_up(rows: Iterable[CountRow]) -> dict[str, int]:
    """Every counter of ``rows`` summed, in table order."""
    totals: dict[str, int] = {}
    for row in rows:
        totals[row.name] = totals.get(row.name, 0) + row.value
    return dict(sorted(totals.items(), key=lambda item: name_order(item[0])))


def group_rows(rows: Iterable[CountRow], by: str) -> dict[str, dict[str, int]]:
    """Counters summed per ``scope`` (key), ``kind`` (scope kind) or ``day`` (ISO date),
    groups sorted."""
    groups: dict[str, list[CountRow]] = {}
    for row in rows:
        if by == "scope":
            key = row.scope_key
        elif by == "kind":
            key = scope_kind(row.scope_key)
        elif by == "day":
            key = day_label(row.day)
        else:
            raise ValueError(f"group by scope, kind or day, not {by!r}")
        groups.setdefault(key, []).append(row)
    return {key: add_up(groups[key]) for key in sorted(groups)}


def lessons_per_day(rows: Iterable[CountRow]) -> list[tuple[str, str, int]]:
    """``(day, scope, lessons inserted)`` for every scope and day that inserted any, by day
    then scope: 003's first reading (above about 40 a day, the window is too small)."""
    return [(day_label(row.day), row.scope_key, row.value)
            for row in sorted(rows, key=lambda row: (row.day, row.scope_key))
            if row.name == INSERTED and row.value > 0]


def share(part: int, whole: int) -> float | None:
    """``part / whole``, None when nothing was offered."""
    return part / whole if whole > 0 else None


def rejected_markers(counters: Mapping[str, int]) -> dict[str, int]:
    """The per-marker rejections of summed counters, most first."""
    markers = {name.removeprefix(REJECTED_BY): n for name, n in counters.items()
               if name.startswith(REJECTED_BY)}
    return dict(sorted(markers.items(), key=lambda item: (-item[1], item[0])))
