"""``scopemem stats``: the store's per-scope counters, as a person reads them after a day.

``scopemem stats [READING] [--scope KEY | --kind KIND] [--since 7d] [--by scope|kind|day]
[--json]``. The readings (``docs/stats.md``):

``counters`` (default)  every counter, summed per scope (or kind, or day)
``lessons``             lessons inserted per repository scope per day (003's first reading)
``rejected``            the share of offered facts the gate rejected, and by which markers
``restated``            restated against inserted per repository scope (over-merging shows
                        as restated above inserted)

``--since Nd`` reads the last N UTC days, today included (``7d``, the default, so a person
checking the next morning sees yesterday; ``1d``: today); ``--since 2025-06-01`` from that day
on; ``--since all`` everything kept. The output's first line says the days read. A table on a
terminal, JSON with ``--json``. A store that keeps no counters, or memory switched off, is
said in one line and exits 1.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import click

from scopemem.cli import CliState, echo_json
from scopemem.cli.root import check_kind_prefix
from scopemem.core import counters
from scopemem.core.records import CountRow
from scopemem.core.scopes import scope_key_problem
from scopemem.errors import ScopememError
from scopemem.plugins.markers import hookimpl

if TYPE_CHECKING:
    from scopemem.stores.counting import Stats

READINGS = ("counters", "lessons", "rejected", "restated")
GROUPS = ("scope", "kind", "day")
MAX_SINCE_DAYS = 36_500
DEFAULT_SINCE = "7d"
#: Lessons a repository scope may gain in a day before the window is too small (003).
WINDOW_ALARM = 40
_DAYS = re.compile(r"([0-9]{1,5})d")
_KIND = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def since_day(value: str, today: int) -> int:
    """The first day ``--since`` reads; ``ValueError`` with what it takes."""
    text = value.strip().lower()
    if text == "all":
        return 0
    match = _DAYS.fullmatch(text)
    if match:
        days = int(match.group(1))
        if not 1 <= days <= MAX_SINCE_DAYS:
            raise ValueError(f"takes 1d to {MAX_SINCE_DAYS}d")
        return max(0, today - days + 1)
    try:
        day = counters.parse_day(text)
    except ValueError:
        raise ValueError("takes Nd (the last N UTC days, today included), a date"
                         " (2025-06-01) or all") from None
    if day > today:
        raise ValueError(f"{text} is after today ({counters.day_label(today)}, UTC):"
                         " nothing is counted there yet")
    return max(0, day)


def window_label(first_day: int, today: int) -> str:
    """The UTC days a reading covers, as its output's first line says them."""
    if first_day <= 0:
        return f"every UTC day kept, to {counters.day_label(today)}"
    days = today - first_day + 1
    return (f"UTC days {counters.day_label(first_day)} to {counters.day_label(today)}"
            f" (the last {days} day{'s' if days != 1 else ''})")


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to fit; numbers right-aligned."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(headers[i]), *(len(row[i]) for row in cells)) if cells
              else len(headers[i]) for i in range(len(headers))]
    numeric = [bool(rows) and all(isinstance(row[i], int | float) or row[i] == "-"
                                  or str(row[i]).endswith("%") for row in rows)
               for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        return "  ".join(cell.rjust(w) if num else cell.ljust(w)
                         for cell, w, num in zip(row, widths, numeric, strict=True)).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in cells)])


def _percent(part: int, whole: int) -> str:
    value = counters.share(part, whole)
    return "-" if value is None else f"{value:.0%}"


def _plain(counts: Mapping[str, int]) -> dict[str, int]:
    """The counters without the per-marker ones (``rejected`` holds their total)."""
    return {name: n for name, n in counts.items() if not name.startswith(counters.REJECTED_BY)}


def reading_counters(stats: Stats, by: str) -> tuple[str, dict[str, Any]]:
    groups = stats.by(by)
    names = sorted({name for counts in groups.values() for name in _plain(counts)},
                   key=counters.name_order)
    text = _table([by, *names], [[key, *(counts.get(name, 0) for name in names)]
                                 for key, counts in groups.items()])
    return text, {"by": by, "groups": groups}


def reading_lessons(rows: Sequence[CountRow]) -> tuple[str, dict[str, Any]]:
    lessons = counters.lessons_per_day(rows)
    text = _table(["day", "scope", "lessons"], lessons)
    if any(n > WINDOW_ALARM for _day, _scope, n in lessons):
        text += (f"\nabove {WINDOW_ALARM} lessons a day a repository outgrows its window"
                 " (memory.repo_window)")
    return text, {"rows": [{"day": day, "scopeKey": scope, "inserted": n}
                           for day, scope, n in lessons]}


def reading_rejected(stats: Stats, by: str) -> tuple[str, dict[str, Any]]:
    groups = stats.by(by)
    table, data = [], {}
    for key, counts in groups.items():
        offered, rejected = counts.get(counters.OFFERED, 0), counts.get(counters.REJECTED, 0)
        markers = counters.rejected_markers(counts)
        table.append([key, offered, rejected, _percent(rejected, offered),
                      ", ".join(f"{name} {n}" for name, n in markers.items()) or "-"])
        data[key] = {"offered": offered, "rejected": rejected,
                     "share": counters.share(rejected, offered), "markers": markers}
    return (_table([by, "offered", "rejected", "share", "markers"], table),
            {"by": by, "groups": data})


def reading_restated(stats: Stats, by: str) -> tuple[str, dict[str, Any]]:
    table, data = [], {}
    for key, counts in stats.by(by).items():
        restated, inserted = counts.get(counters.RESTATED, 0), counts.get(counters.INSERTED, 0)
        if not restated and not inserted:
            continue
        flag = "restated > inserted: review" if restated > inserted else ""
        table.append([key, restated, inserted, flag])
        data[key] = {"restated": restated, "inserted": inserted,
                     "overMerging": restated > inserted}
    return _table([by, "restated", "inserted", ""], table), {"by": by, "groups": data}


async def _read(state: CliState, scope: str | None, kind: str | None, first_day: int
                ) -> tuple[Stats | None, str]:
    """The stats, or None and why there are none to read."""
    from scopemem.installation import build_store
    from scopemem.stores.counting import read_stats

    config = state.config()
    if not config.enabled:
        return None, "memory is off (memory.enabled = false): nothing is counted"
    store = build_store(config, state.pm, allow_fallback=False)
    try:
        stats = await read_stats(store, scope=scope, kind=kind, since_day=first_day)
    finally:
        await store.close()
    if not stats.counting:
        return None, (f"store {config.store!r} keeps no counters (it has no add_counts and"
                      " read_counts); there is nothing to read")
    return stats, ""


def _check_scope(_ctx: click.Context, _param: click.Parameter, value: str | None
                 ) -> str | None:
    problem = None if value is None else scope_key_problem(value)
    if problem:
        raise click.BadParameter(problem)
    return None if value is None else check_kind_prefix(value)


def _check_kind(_ctx: click.Context, _param: click.Parameter, value: str | None
                ) -> str | None:
    if value is not None and not _KIND.fullmatch(value):
        raise click.BadParameter("takes a scope kind such as org, repo, channel or user")
    return value


@hookimpl
def scopemem_register_commands(cli: click.Group) -> None:
    @cli.command(name="stats")
    @click.argument("reading", required=False, default="counters",
                    type=click.Choice(READINGS))
    @click.option("--scope", "scope", metavar="KEY", callback=_check_scope,
                  help="One scope (a full key, e.g. repo:acme/app).")
    @click.option("--kind", "kind", metavar="KIND", callback=_check_kind,
                  help="Every scope of one kind (org, repo, channel, user, ...). lessons and"
                       " restated default to repo.")
    @click.option("--since", "since", default=DEFAULT_SINCE, show_default=True,
                  help="Nd (the last N UTC days, today included), a date, or all.")
    @click.option("--by", "by", type=click.Choice(GROUPS), default=None,
                  help="Group by scope, kind or day (default: scope; rejected: kind).")
    @click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
    @click.pass_obj
    def stats(state: CliState, reading: str, scope: str | None, kind: str | None,
              since: str, by: str | None, as_json: bool) -> None:
        """Counters per scope and day: what memory offered, rejected, inserted, showed."""
        import asyncio

        from scopemem.stores.base import wall_clock_ms

        if scope is not None and kind is not None:
            raise click.UsageError("give --scope or --kind, not both")
        today = counters.day_of(wall_clock_ms())
        try:
            first_day = since_day(since, today)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--since'") from None
        if reading in ("lessons", "restated") and scope is None and kind is None:
            kind = "repo"
        try:
            found, why = asyncio.run(_read(state, scope, kind, first_day))
        except ScopememError as exc:
            raise click.ClickException(str(exc)) from None
        window = window_label(first_day, today)
        head = {"reading": reading, "since": counters.day_label(first_day),
                "until": counters.day_label(today), "window": window,
                "scope": scope, "kind": kind}
        if found is None:
            if as_json:
                echo_json({**head, "counting": False, "reason": why})
            else:
                click.echo(why, err=True)
            sys.exit(1)
        if reading == "lessons":
            text, data = reading_lessons(found.rows)
        elif reading == "rejected":
            text, data = reading_rejected(found, by or "kind")
        elif reading == "restated":
            text, data = reading_restated(found, by or "scope")
        else:
            text, data = reading_counters(found, by or "scope")
        if as_json:
            echo_json({**head, "counting": True, **data})
        elif not found.rows:
            click.echo(f"{window}: nothing counted")
        else:
            click.echo(f"{window}:\n{text}")
