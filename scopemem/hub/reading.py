"""The hub's pages that only read: the overview, a scope's records, search with the block
preview, a record, a run.

Every page reads one page of rows through ``Memory``'s operations, as the admin caller
``app.caller_for`` names; none reads every record of a scope or every scope's records. A
search is a person looking: it counts nothing as used, and its preview is the block a run
would receive (``Memory.context(count=False)``), built by the read path itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp_jinja2
from aiohttp import web

from scopemem.api.results import SearchHit
from scopemem.core.requests import Request
from scopemem.hub.app import HUB, caller_for

#: Hits a search shows (across every scope searched).
SEARCH_LIMIT = 20
#: The longest brief a search takes (a run's brief is rarely longer).
MAX_BRIEF_CHARS = 4000


def _field(request: web.Request, name: str, limit: int = 300) -> str:
    value = request.query.get(name, "").strip()
    if len(value) > limit:
        raise web.HTTPBadRequest(reason=f"{name} is longer than {limit} characters.")
    return value


async def search(request: web.Request) -> web.StreamResponse:
    """The brief's hits in each scope the given inputs derive, best first, and the block
    a run with that brief and those inputs would receive."""
    brief = _field(request, "brief", MAX_BRIEF_CHARS)
    inputs = {name: _field(request, name) for name in ("repo", "channel", "user")}
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


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/search", search, name="search")
