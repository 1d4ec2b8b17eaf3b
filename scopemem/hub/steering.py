"""The hub's actions: forget a record (a page asking to confirm first), sweep a scope (a
dry run first), delete a scope, export a scope as JSON Lines.

Each goes through the operation the command line uses (``Memory.forget``, ``Memory.sweep``,
``Memory.export``; a scope's deletion through the store's ``delete_scope`` after the same
change gate ``forget`` passes), as the admin caller ``shared.caller_for`` names, so the gate
refuses here what it refuses there, and the store counts what it changed. Every POST has
passed the CSRF check (``app._guard``) before it gets here.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.parse

import aiohttp_jinja2
from aiohttp import hdrs, web

from scopemem.api.results import MemoryRefused
from scopemem.core.commands import change_refusal
from scopemem.core.gate import rejection_markers
from scopemem.core.records import Record, Status, to_wire
from scopemem.hub.shared import (
    HUB,
    PREFIX,
    caller_for,
    record_scope_or_400,
    refuse_closed,
    scope_key_or_400,
    scope_place,
)

#: The most records a dry run lists with their text and markers (the count is always whole).
MAX_LISTED = 100


def scope_url(scope_key: str, done: str | None = None,
              place: dict[str, str] | None = None) -> str:
    """A scope's page, at ``place`` (its filters and page, ``shared.scope_place``)."""
    query = {"key": scope_key, **(place or {}), **({"done": done} if done else {})}
    return f"{PREFIX}/scope?{urllib.parse.urlencode(query)}"


def _scope_key(value: object) -> str:
    return scope_key_or_400(value)


async def confirm_forget(request: web.Request) -> web.StreamResponse:
    """The record a Forget button names, with a button that forgets it (``forget``) and a
    way back: a forget erases the text at once, so one click never does it. A record that
    is no longer active goes back to its scope saying nothing changed."""
    record_id = request.query.get("id", "")
    scope_key = record_scope_or_400(record_id)
    place = scope_place(request.query)
    memory = request.app[HUB].memory
    refuse_closed(memory, scope_key)
    history = await memory.record_history(scope_key, record_id)
    if history is None:
        raise web.HTTPNotFound(reason="No such record.")
    if not history.record.is_active:
        raise web.HTTPSeeOther(scope_url(scope_key, _unchanged(history.record), place))
    return aiohttp_jinja2.render_template("forget.html", request, {
        "record": history.record, "place": place, "back": scope_url(scope_key, place=place)})


async def forget(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    record_id = str(form.get("id", ""))
    scope_key = record_scope_or_400(record_id)
    memory = request.app[HUB].memory
    done = "forgotten"
    if not (await memory.forget(caller_for(scope_key), record_id)).forgotten:
        # The form sent again (Enter pressed twice) finds its record forgotten already.
        history = await memory.record_history(scope_key, record_id)
        done = _unchanged(history.record if history else None)
    # Back to the page and filters the person forgot it from, not the scope's first page.
    raise web.HTTPSeeOther(scope_url(scope_key, done, scope_place(form)))


def _unchanged(record: Record | None) -> str:
    """What a forget that changed nothing says of ``record``: forgotten already, or not
    active (superseded, swept, evicted)."""
    forgotten = record is not None and record.status is Status.FORGOTTEN
    return "already-forgotten" if forgotten else "not-forgotten"


async def _records(request: web.Request, scope_key: str, ids: tuple[str, ...]
                   ) -> dict[str, Record]:
    """The records among ``ids`` (at most ``MAX_LISTED``), each read by its id."""
    memory = request.app[HUB].memory
    histories = await asyncio.gather(*(memory.record_history(scope_key, record_id)
                                       for record_id in ids[:MAX_LISTED]))
    return {history.record.id: history.record for history in histories
            if history is not None}


async def sweep(request: web.Request) -> web.StreamResponse:
    """``apply`` absent: the dry run, as ``dry_run`` answers it. ``apply`` present: the
    sweep, then back to the scope."""
    form = await request.post()
    scope_key = _scope_key(form.get("key"))
    if form.get("apply") != "1":
        return await _dry_run(request, scope_key)
    memory = request.app[HUB].memory
    caller = caller_for(scope_key)
    # Only what the dry run listed: a fact the gate refuses that was written since (the
    # dry run's ids, the form's ``ids``) sends the person to the dry run of today.
    if not set(await _sweep_ids(request, scope_key)) <= set(str(form.get("ids", "")).split()):
        query = urllib.parse.urlencode({"key": scope_key, "done": "sweep-changed"})
        raise web.HTTPSeeOther(f"{PREFIX}/sweep?{query}")
    await memory.sweep(caller, scope_key, dry_run=False)
    raise web.HTTPSeeOther(scope_url(scope_key, "swept"))


async def _sweep_ids(request: web.Request, scope_key: str) -> tuple[str, ...]:
    """The ids of the active facts a sweep of ``scope_key`` would retire now."""
    report = await request.app[HUB].memory.sweep(caller_for(scope_key), scope_key,
                                                 dry_run=True)
    return report.scopes[0].result.ids or () if report.scopes else ()


async def dry_run(request: web.Request) -> web.StreamResponse:
    """The dry run as a page of its own (``GET /hub/sweep?key=…``): it changes nothing, so
    Back after the sweep is applied shows it again, not a form to send again."""
    return await _dry_run(request, _scope_key(request.query.get("key")))


async def _dry_run(request: web.Request, scope_key: str) -> web.StreamResponse:
    """What a sweep would retire, listed with the markers that fired."""
    ids = await _sweep_ids(request, scope_key)
    records = await _records(request, scope_key, ids)
    rows = [(record_id, records.get(record_id),
             rejection_markers(records[record_id].text) if record_id in records else [])
            for record_id in ids[:MAX_LISTED]]
    return aiohttp_jinja2.render_template(
        "sweep.html", request, {"scope_key": scope_key, "count": len(ids), "rows": rows,
                                "ids": " ".join(ids), "more": max(0, len(ids) - MAX_LISTED)})


async def delete_scope(request: web.Request) -> web.StreamResponse:
    """Delete every record of a scope, once its key is typed back exactly."""
    form = await request.post()
    scope_key = _scope_key(form.get("key"))
    if form.get("confirm") != scope_key:
        raise web.HTTPBadRequest(reason="The scope was not deleted: type its key exactly "
                                 "to confirm.")
    memory = request.app[HUB].memory
    caller = caller_for(scope_key)
    origin = f"channel:{caller.channel_id}" if caller.channel_id else None
    reason = change_refusal(scope_key, caller.user_key, memory.is_admin(caller),
                            memory.org_key, memory.scope_kinds, origin)
    if reason:
        raise MemoryRefused("closed_scope", reason)
    delete = getattr(memory.store, "delete_scope", None)
    if delete is None:
        raise web.HTTPNotImplemented(reason="This store cannot delete a scope.")
    await delete(scope_key)
    raise web.HTTPSeeOther(f"{PREFIX}/?done=deleted")


_UNSAFE_FILENAME = re.compile(r"[^A-Za-z0-9._-]+")


async def export(request: web.Request) -> web.StreamResponse:
    """Every record of the scope, every status, one JSON object a line (the wire format)."""
    scope_key = _scope_key(request.query.get("key"))
    memory = request.app[HUB].memory
    records = memory.export(caller_for(scope_key), scope_key)
    first = await anext(records, None)  # a refusal raises here, before any byte is sent
    filename = _UNSAFE_FILENAME.sub("_", scope_key) + ".jsonl"
    response = web.StreamResponse(headers={
        hdrs.CONTENT_TYPE: "application/x-ndjson; charset=utf-8",
        hdrs.CONTENT_DISPOSITION: f'attachment; filename="{filename}"'})
    await response.prepare(request)
    if first is not None:
        await response.write(json.dumps(to_wire(first)).encode() + b"\n")
        async for record in records:
            await response.write(json.dumps(to_wire(record)).encode() + b"\n")
    await response.write_eof()
    return response


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/forget", confirm_forget)
    router.add_post("/forget", forget)
    router.add_post("/sweep", sweep)
    router.add_get("/sweep", dry_run)
    router.add_post("/delete-scope", delete_scope)
    router.add_get("/export", export)
