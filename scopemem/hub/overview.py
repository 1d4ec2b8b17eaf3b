"""The overview's numbers: each scope's counters over the last 7 and 30 days, 003's review
thresholds, and each kind's chart of lessons inserted per day, drawn as SVG geometry.

Pure arithmetic over what a store answers: the counter rows of one page of scopes
(``core.counters``) for the table, and for each kind's chart its counters summed by day and
name where they are kept (``core.browse.CountTotal``), never every scope's rows.

003's thresholds, each a question the maintainer reviews when it is crossed:

- a repository scope inserting more than 40 lessons on a day (the window is too small);
- the gate rejecting more than one fact in ten offered (the prompt or the markers are wrong);
- restated outrunning inserted (reflection merges too eagerly).

A row is flagged for what its scope counted over the window; a chart's day for its kind on
that day: a repository scope above 40 lessons, or the kind's own sums (the rejected share and
the restated count the chart draws) crossing the other two.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from scopemem.core import counters
from scopemem.core.browse import CountTotal
from scopemem.core.records import CountRow
from scopemem.core.scopes import scope_kind

LESSONS_PER_DAY = 40
REJECTED_SHARE = 0.1
WINDOWS = (7, 30)
#: The counters the overview shows, per window.
SHOWN = (counters.INSERTED, counters.REJECTED, counters.RESTATED, counters.EVICTED)


@attrs.frozen
class Totals:
    """One scope's counters summed over the last ``days`` days (today included)."""

    days: int
    values: Mapping[str, int]

    def __getitem__(self, name: str) -> int:
        return self.values.get(name, 0)


def crossed(kind: str, most_inserted: int, totals: Mapping[str, int]) -> list[str]:
    """Which of 003's thresholds are crossed by ``totals`` (counter name → value) where one
    scope of ``kind`` inserted at most ``most_inserted`` lessons on a day."""
    raised = []
    if kind == "repo" and most_inserted > LESSONS_PER_DAY:
        raised.append(f"more than {LESSONS_PER_DAY} lessons on a day")
    share = counters.share(totals.get(counters.REJECTED, 0), totals.get(counters.OFFERED, 0))
    if share is not None and share > REJECTED_SHARE:
        raised.append(f"gate rejected {share:.0%} of facts offered")
    if totals.get(counters.RESTATED, 0) > totals.get(counters.INSERTED, 0):
        raised.append("restated outran inserted")
    return raised


def flags(scope_key: str, rows: Iterable[CountRow]) -> list[str]:
    """Which of 003's thresholds ``rows`` (one scope's, over the window read) cross."""
    rows = list(rows)
    most = max((row.value for row in rows if row.name == counters.INSERTED), default=0)
    return crossed(scope_kind(scope_key), most, counters.add_up(rows))


def windows(rows: Iterable[CountRow], today: int) -> dict[str, tuple[Totals, ...]]:
    """scope key → its ``Totals`` for each of ``WINDOWS``."""
    by_scope: dict[str, list[CountRow]] = {}
    for row in rows:
        by_scope.setdefault(row.scope_key, []).append(row)
    return {key: tuple(Totals(days, counters.add_up(row for row in scoped
                                                    if row.day > today - days))
                       for days in WINDOWS)
            for key, scoped in by_scope.items()}


@attrs.frozen
class Bar:
    """One day of a chart: its bar (inserted lessons), its rejected share's point, and
    whether a threshold was crossed that day."""

    day: int
    inserted: int
    share: float | None
    x: float
    y: float
    height: float
    share_y: float | None
    flagged: bool


@attrs.frozen
class Chart:
    kind: str
    bars: tuple[Bar, ...]
    top: int  # the inserted count the plot's top stands for
    width: int
    height: int
    bar_width: float
    share_line_y: float  # where the rejected share threshold is drawn
    limit_y: float | None  # where 40 lessons a day is drawn (repository scopes only)

    @property
    def share_path(self) -> str:
        points = [f"{bar.x + self.bar_width / 2:.1f},{bar.share_y:.1f}" for bar in self.bars
                  if bar.share_y is not None]
        return ("M" + " L".join(points)) if points else ""


WIDTH, HEIGHT, PAD = 360, 140, 20


def chart(kind: str, totals: Iterable[CountTotal], today: int, days: int = 30) -> Chart:
    """The chart of one kind's count totals over the ``days`` up to ``today``: bars of
    lessons inserted per day (every scope of the kind summed), a line of the share rejected,
    the 10% line, and for repositories the 40-a-day line; a day is flagged where ``crossed``
    says so."""
    first = today - days + 1
    per_day: dict[int, dict[str, int]] = {}
    most_inserted: dict[int, int] = {}
    for total in totals:
        if first <= total.day <= today:
            per_day.setdefault(total.day, {})[total.name] = total.total
            if total.name == counters.INSERTED:
                most_inserted[total.day] = total.most
    inserted = [per_day.get(day, {}).get(counters.INSERTED, 0) for day in range(first,
                                                                                today + 1)]
    limit = LESSONS_PER_DAY if kind == "repo" else None
    top = max([*inserted, limit or 0, 1])
    plot = HEIGHT - 2 * PAD
    step = (WIDTH - 2 * PAD) / days
    bars = []
    for index, day in enumerate(range(first, today + 1)):
        day_totals = per_day.get(day, {})
        share = counters.share(day_totals.get(counters.REJECTED, 0),
                               day_totals.get(counters.OFFERED, 0))
        height = plot * inserted[index] / top
        bars.append(Bar(day, inserted[index], share, PAD + index * step, PAD + plot - height,
                        height, None if share is None else PAD + plot * (1 - share),
                        bool(crossed(kind, most_inserted.get(day, 0), day_totals))))
    return Chart(kind, tuple(bars), top, WIDTH, HEIGHT, step * 0.8,
                 PAD + plot * (1 - REJECTED_SHARE),
                 None if limit is None else PAD + plot * (1 - limit / top))


def kinds_in(keys: Sequence[str]) -> list[str]:
    return sorted({scope_kind(key) for key in keys})
