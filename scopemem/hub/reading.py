"""The hub's pages that only read: the overview, a scope's records, search with the block
preview, a record, a run.

Every page reads one page of rows through ``Memory``'s operations, as the admin caller
``shared.caller_for`` names; none reads every record of a scope or every scope's records. A
search is a person looking: it counts nothing as used, and its preview is the block a run
would receive (``Memory.context(count=False)``), built by the read path itself.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Sequence
from typing import Any

import aiohttp_jinja2
from aiohttp import web

from scopemem.api.results import SearchHit
from scopemem.core import counters
from scopemem.core.browse import HISTORY_REACHES, MAX_REACHES, SCOPE_SORTS, check_kind_name
from scopemem.core.gate import rejection_markers
from scopemem.core.records import MAX_SOURCE_CHARS, CountRow, Kind
from scopemem.core.requests import Request
from scopemem.core.scopes import scope_key_problem
from scopemem.gitremote import typed_repo
from scopemem.hub import overview as overview_counts
from scopemem.hub.shared import (
    HUB,
    MAX_PAGE_NUMBER,
    SCOPE_FILTERS,
    caller_for,
    page_number,
    record_scope_or_400,
    refuse_closed,
    scope_key_or_400,
    scope_place,
)
from scopemem.stores.base import CountingStore

#: Hits a search shows (across every scope searched).
SEARCH_LIMIT = 20
#: Rows a page shows.
PAGE = 50
#: The longest brief a search takes (a run's brief is rarely longer).
MAX_BRIEF_CHARS = 4000
#: The overview's ``order`` (none: ascending).
ORDERS = ("asc", "desc")


def _field(request: web.Request, name: str, limit: int = 300) -> str:
    value = request.query.get(name, "").strip()
    if len(value) > limit:
        raise web.HTTPBadRequest(reason=f"{name} is longer than {limit} characters.")
    if "\x00" in value:  # PostgreSQL cannot take one: no store is asked with it
        raise web.HTTPBadRequest(reason=f"{name} holds a NUL character.")
    return value


#: A search's person and channel: the scope kind each makes, and an id to show.
_RUN_IDS = {"user": "slack:U0123", "channel": "slack:C0456"}


def _run_inputs(request: web.Request) -> dict[str, str]:
    """The repository, channel and person a search names, as a run carries them and the
    command line takes them: ``owner/name`` as a clone's remote names it, platform ids. A
    URL, or a scope key given for an id, would preview a scope no run reads."""
    inputs = {name: _field(request, name) for name in ("repo", "channel", "user")}
    if inputs["repo"]:
        ok, named = typed_repo(inputs["repo"])
        if not ok:
            hint = f": {named}" if named else " (e.g. acme/api)"
            raise web.HTTPBadRequest(
                reason=f"repo takes owner/name as a clone's remote names it{hint}.")
    for kind, example in _RUN_IDS.items():
        value = inputs[kind]
        if not value:
            continue
        if value.startswith(f"{kind}:"):
            raise web.HTTPBadRequest(
                reason=f"{kind} takes the platform id (e.g. {example}), not the {kind} "
                       f"scope's key: {value[len(kind) + 1:]}.")
        problem = scope_key_problem(f"{kind}:{value}")
        if problem:
            raise web.HTTPBadRequest(reason=f"{kind}: {problem}.")
    return inputs


async def search(request: web.Request) -> web.StreamResponse:
    """The brief's hits in each scope the given inputs derive, best first, and the block
    a run with that brief and those inputs would receive."""
    brief = _field(request, "brief", MAX_BRIEF_CHARS)
    if not brief and "brief" in request.query:  # spaces pass the field's ``required``
        raise web.HTTPBadRequest(reason="brief is empty: type what a run would be asked.")
    inputs = _run_inputs(request)
    context: dict[str, Any] = {"brief": brief, **inputs, "searched": bool(brief)}
    if brief:
        memory = request.app[HUB].memory
        run = Request(text=brief, user_id=inputs["user"] or None,
                      channel_id=inputs["channel"] or None, repo=inputs["repo"] or None)
        keys = memory.scope_keys(run)
        results = await asyncio.gather(*(
            memory.search(caller_for(key), brief, key, limit=SEARCH_LIMIT) for key in keys))
        hits: list[SearchHit] = [hit for result in results for hit in result.hits]
        hits.sort(key=lambda hit: -hit.score)
        failed = {key: reason for result in results for key, reason in result.failed.items()}
        preview = await memory.context(run, count=False)
        failed.update(preview.failed)
        context.update(keys=keys, hits=hits[:SEARCH_LIMIT], preview=preview.block,
                       failed=failed)
    template = "search_results.html" if request.headers.get("HX-Request") else "search.html"
    return aiohttp_jinja2.render_template(template, request, context)


def _choice(request: web.Request, name: str, choices: Sequence[str]) -> str | None:
    value = request.query.get(name) or None
    if value is not None and value not in choices:
        raise web.HTTPBadRequest(reason=f"{name} takes one of {', '.join(choices)}.")
    return value


def _page_number(request: web.Request) -> int:
    number = page_number(request.query.get("page", "1"))
    if number is None:
        raise web.HTTPBadRequest(reason=f"page takes a number from 1 to {MAX_PAGE_NUMBER}.")
    return number


def _pager(request: web.Request, page: int, total: int) -> dict[str, Any]:
    """The links to the previous and next page, keeping every other query parameter but
    ``done``: the notice of what was just done is said on the page it was done from."""
    pages = max(1, -(-total // PAGE))

    def link(number: int) -> str:
        query = {**{name: value for name, value in request.query.items() if name != "done"},
                 "page": str(number)}
        return f"{request.path}?{urllib.parse.urlencode(query)}"

    past = page > pages  # past the end: its rows went (forgotten, filtered out) since
    return {"page": page, "pages": pages, "total": total,
            "previous": link(page - 1) if page > 1 and not past else None,
            "next": link(page + 1) if page < pages else None,
            "last": link(pages) if past else None}


async def overview(request: web.Request) -> web.StreamResponse:
    """Every scope, a page at a time, with its counters over 7 and 30 days and 003's
    thresholds, and a chart per kind of lessons inserted per day."""
    hub = request.app[HUB]
    memory = hub.memory
    kind = check_kind_name(request.query.get("kind") or None)
    sort = _choice(request, "sort", SCOPE_SORTS) or "key"
    descending = _choice(request, "order", ORDERS) == "desc"
    page = _page_number(request)
    scopes = await memory.scope_page(kind=kind, sort=sort, descending=descending,
                                     offset=(page - 1) * PAGE, limit=PAGE)
    today = counters.day_of(hub.clock())
    since = today - max(overview_counts.WINDOWS) + 1
    store = memory.store if isinstance(memory.store, CountingStore) else None
    counting = store is not None
    keys = [row.scope_key for row in scopes.rows]
    rows = await store.read_counts(keys, since_day=since) if store and keys else []
    by_scope: dict[str, list[CountRow]] = {}
    for row in rows:
        by_scope.setdefault(row.scope_key, []).append(row)
    windows = overview_counts.windows(rows, today)
    kinds = sorted(memory.scope_kinds)
    charts = []
    if store is not None:
        for chart_kind in ([kind] if kind else kinds):
            totals = await memory.count_totals(chart_kind, since_day=since)
            charts.append(overview_counts.chart(chart_kind, totals, today))
    empty = tuple(overview_counts.Totals(days, {}) for days in overview_counts.WINDOWS)
    table = [(summary, [totals[name] for totals in windows.get(summary.scope_key, empty)
                        for name in overview_counts.SHOWN],
              overview_counts.flags(summary.scope_key, by_scope.get(summary.scope_key, ())))
             for summary in scopes.rows]
    return aiohttp_jinja2.render_template("overview.html", request, {
        "table": table, "kinds": kinds, "kind": kind or "", "sort": sort,
        "descending": descending, "cap": memory.config.max_records_per_scope,
        "charts": charts, "counting": counting, "shown": overview_counts.SHOWN,
        "windows": overview_counts.WINDOWS, "pager": _pager(request, page, scopes.total)})


def _scope_key(request: web.Request) -> str:
    return scope_key_or_400(request.query.get("key"))


async def scope(request: web.Request) -> web.StreamResponse:
    """One scope's records, newest first, every status, filtered, a page at a time."""
    memory = request.app[HUB].memory
    scope_key = _scope_key(request)
    refuse_closed(memory, scope_key)
    kind, status, source = (_choice(request, name, SCOPE_FILTERS[name])
                            for name in ("kind", "status", "source"))
    page = _page_number(request)
    records = await memory.record_page(scope_key, kind=None if kind is None else Kind(kind),
                                       status=status, source=source,
                                       offset=(page - 1) * PAGE, limit=PAGE)
    return aiohttp_jinja2.render_template("scope.html", request, {
        "scope_key": scope_key, "records": records.rows, "kind": kind or "",
        "status": status or "", "source": source or "",
        "kinds": SCOPE_FILTERS["kind"], "statuses": SCOPE_FILTERS["status"],
        "sources": SCOPE_FILTERS["source"], "place": scope_place(request.query),
        "pager": _pager(request, page, records.total)})


async def record(request: web.Request) -> web.StreamResponse:
    """A record: its provenance, its history and the runs it reached."""
    memory = request.app[HUB].memory
    record_id = request.query.get("id", "")
    scope_key = record_scope_or_400(record_id)
    refuse_closed(memory, scope_key)
    history = await memory.record_history(scope_key, record_id)
    if history is None:
        raise web.HTTPNotFound(reason="No such record.")
    return aiohttp_jinja2.render_template("record.html", request, {
        "history": history, "record": history.record, "markers":
        rejection_markers(history.record.text) if history.record.is_active else [],
        # The store reads at most that many: a full list may have older ones past it.
        "reaches_cut": HISTORY_REACHES if len(history.reaches) >= HISTORY_REACHES else 0})


async def run(request: web.Request) -> web.StreamResponse:
    """What one run (its id or thread key) was shown: its newest ``MAX_REACHES`` reaches,
    saying so when there may be more (a thread's runs add up)."""
    name = _field(request, "run", MAX_SOURCE_CHARS)
    reaches = (await request.app[HUB].memory.reaches(run=name, limit=MAX_REACHES)
               if name else [])
    return aiohttp_jinja2.render_template("run.html", request, {
        "run": name, "reaches": reaches,
        "reaches_cut": MAX_REACHES if len(reaches) >= MAX_REACHES else 0})


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/", overview, name="overview")
    router.add_get("/scope", scope, name="scope")
    router.add_get("/record", record, name="record")
    router.add_get("/run", run, name="run")
    router.add_get("/search", search, name="search")
