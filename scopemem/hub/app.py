"""The Memory Hub mounted on an aiohttp application under ``/hub/``.

``install_hub`` adds it to the worker's application (``scopemem serve`` with
``SCOPEMEM_HUB_TOKEN`` set) or to a bare one (``scopemem hub``). Without a token nothing is
mounted and every ``/hub`` path is the application's ordinary 404.

Every response under ``/hub`` carries the strict headers (``HEADERS``): scripts only from the
hub's own static files, never inline; no framing; no content sniffing; no referrer; pages not
cached. Templates autoescape everything. Every page but the login form and the static files
needs a session; every POST needs the session's CSRF token (``auth.py``).

The hub acts through the same operations as the command line (``scopemem.api``), as an admin
caller (``caller_for``): a person's scope as that person, a channel's from that channel,
shared scopes as ``HUB_CALLER``, which the hub's configuration names an admin. The gate
still closes what it closes to everyone (another organisation's scope, an unregistered kind).
"""

from __future__ import annotations

import asyncio
import logging
import re
import urllib.parse
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import ClientConnectionResetError, hdrs, web
from aiohttp.http_exceptions import ContentLengthError
from markupsafe import Markup

from scopemem.api.memory import Memory
from scopemem.api.results import MemoryRefused
from scopemem.core.browse import PageError
from scopemem.core.counters import day_label
from scopemem.core.text import format_utc, sanitize_field
from scopemem.errors import ScopememError, StoreUnsupported
from scopemem.hub import reading, steering
from scopemem.hub.auth import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    SESSION_MS,
    Clock,
    LoginLimiter,
    Sessions,
    token_matches,
)
from scopemem.hub.shared import DONE, HUB, PREFIX, SESSION, Hub
from scopemem.worker_aiohttp.server import BODY_TIMEOUT, Limits

log = logging.getLogger("scopemem.hub")

HERE = Path(__file__).parent
_STATIC = f"{PREFIX}/static/"
#: How long a form may take to arrive when the application's runner set no deadline.
DEFAULT_BODY_TIMEOUT = Limits().body_timeout

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


def _add_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path == PREFIX or request.path.startswith(PREFIX + "/"):
        response.headers.update(HEADERS)
        if not request.path.startswith(_STATIC):
            response.headers[hdrs.CACHE_CONTROL] = "no-store"


async def _headers_signal(request: web.Request, response: web.StreamResponse) -> None:
    _add_headers(request, response)


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    """The page saying why a request was refused (rendered here, since a refusal may come
    before the template context's own middleware has run). To htmx (the search form) it is
    the reason alone, put where the results go, and the address bar keeps the last search
    that worked."""
    partial = request.headers.get("HX-Request") == "true"
    response = aiohttp_jinja2.render_template(
        "_error.html" if partial else "error.html", request,
        {**_context(request), "status": status, "message": message}, status=status)
    if partial:
        response.headers["HX-Push-Url"] = "false"
    return response


_OPEN = (f"{PREFIX}/login", _STATIC)
#: The files ``/hub/static/`` serves. Any other name is the hub's 404 page: aiohttp's own
#: static route answers a missing file with an empty 404 no middleware sees.
STATIC_FILES = frozenset(path.name for path in (HERE / "static").iterdir() if path.is_file())
#: A login nonce the form may reuse: what ``secrets.token_urlsafe`` makes.
_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,64}$")


@web.middleware
async def _guard(request: web.Request,
                 handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    """The session check, the CSRF check on every POST, a form read within the body
    deadline, and HTML for every refusal."""
    hub = request.app[HUB]
    reading = request.method in (hdrs.METH_GET, hdrs.METH_HEAD)
    try:
        if request.path.startswith(_STATIC) \
                and request.match_info.get("filename") not in STATIC_FILES:
            raise web.HTTPNotFound(reason="No such file.")
        session_id = None
        if not request.path.startswith(_OPEN):
            session_id = hub.sessions.session_id(request.cookies.get(SESSION_COOKIE))
            if session_id is None:
                if reading and request.headers.get("HX-Request") == "true":
                    # htmx would put the login page where the results go: the whole tab.
                    return web.Response(status=401, headers={"HX-Redirect": f"{PREFIX}/login"})
                if reading:
                    raise web.HTTPSeeOther(_login_url(str(request.rel_url)))
                return error_page(request, 403, "Your session has ended: log in again.")
            request[SESSION] = session_id
        if not reading:
            unread = await _read_form(request)
            if unread is not None:
                return unread
            form = await request.post()  # read: every handler's post() answers it again
            if session_id is not None \
                    and not hub.sessions.csrf_matches(session_id, form.get("csrf")):
                return error_page(request, 403, "Nothing was changed: this form is "
                                  "stale or was not sent by the hub (its CSRF token is "
                                  "missing or wrong, as on a page opened before logging "
                                  "in again). Go back, reload its page and send it again.")
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_page(request, exc.status, exc.reason)
    except MemoryRefused as exc:
        return error_page(request, 403, f"Refused: {exc.message}")
    except PageError as exc:
        return error_page(request, 400, str(exc))
    except StoreUnsupported:
        return error_page(request, 501, "This store cannot answer that page.")
    except ScopememError as exc:
        log.error("[hub] %s failed: %s", request.path, exc)
        return error_page(request, 500, "The store failed; the log says why.")


def _next_page(value: object) -> str | None:
    """``value`` as the hub page a login goes on to, or None: a path of the hub's own, as
    a request's URL carries it (ASCII, escaped), never another site's."""
    text = str(value or "")
    if text.startswith(f"{PREFIX}/") and text.isascii() and text.isprintable() \
            and "\\" not in text and len(text) <= 2000:
        return text
    return None


def _login_url(next_page: str | None, **query: str) -> str:
    """The login page, going on to ``next_page`` (when one of the hub's, and not the
    overview, where a login goes anyway) once logged in."""
    page = _next_page(next_page)
    if page is not None and page != f"{PREFIX}/":
        query["next"] = page
    return f"{PREFIX}/login" + (f"?{urllib.parse.urlencode(query)}" if query else "")


async def _read_form(request: web.Request) -> web.StreamResponse | None:
    """Read a POST's form within the body deadline the worker's data routes have
    (``--body-timeout``): a form dribbled slower is a 408, and one its client cut short a
    400, each closing the connection; None once the form is read."""
    deadline = request.config_dict.get(BODY_TIMEOUT, DEFAULT_BODY_TIMEOUT)
    try:
        async with asyncio.timeout(deadline):
            await request.post()
    except TimeoutError:
        log.info("[hub] %s: the form did not arrive within the deadline", request.path)
        response = error_page(request, 408, "The form did not arrive in time.")
    except (ConnectionError, ClientConnectionResetError, ContentLengthError):
        log.info("[hub] %s: the client closed the connection mid-form", request.path)
        response = error_page(request, 400, "The form was cut short.")
    else:
        return None
    response.force_close()
    return response


async def login_form(request: web.Request) -> web.StreamResponse:
    nonce = request.cookies.get(LOGIN_COOKIE) or ""
    if not _NONCE.match(nonce):
        import secrets

        nonce = secrets.token_urlsafe(18)
    response = aiohttp_jinja2.render_template(
        "login.html", request, {"nonce": nonce, "failed": "failed" in request.query,
                                "next": _next_page(request.query.get("next")) or ""})
    response.set_cookie(LOGIN_COOKIE, nonce, httponly=True, samesite="Strict",
                        secure=request.secure, path=PREFIX, max_age=3600)
    return response


async def login(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    form = await request.post()
    client = request.remote or "-"
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not nonce or not token_matches(str(form.get("nonce", "")), nonce):
        return error_page(request, 403, "The login form is stale: open it again.")
    if hub.limiter.blocked(client):
        response = error_page(request, 429, "Too many failed logins: wait a minute.")
        response.headers[hdrs.RETRY_AFTER] = "60"
        return response
    # A hub token holds no whitespace: a paste may bring some around it.
    if not token_matches(str(form.get("token", "")).strip(), hub.sessions.token):
        hub.limiter.failed(client)
        log.warning("[hub] failed login from %s", client)
        raise web.HTTPSeeOther(_login_url(str(form.get("next", "")), failed="1"))
    # The page the person was sent here from (a link to a record), else the overview.
    response = web.HTTPSeeOther(_next_page(form.get("next")) or f"{PREFIX}/")
    response.set_cookie(SESSION_COOKIE, hub.sessions.issue(), httponly=True,
                        samesite="Strict", secure=request.secure, path=PREFIX,
                        max_age=SESSION_MS // 1000)
    response.del_cookie(LOGIN_COOKIE, path=PREFIX)
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    hub = request.app[HUB]
    hub.sessions.revoke(request.cookies.get(SESSION_COOKIE))
    response = web.HTTPSeeOther(f"{PREFIX}/login")
    response.del_cookie(SESSION_COOKIE, path=PREFIX)
    raise response


async def _redirect_home(_request: web.Request) -> web.StreamResponse:
    raise web.HTTPPermanentRedirect(f"{PREFIX}/")


def _record_text(value: str) -> Markup:
    """A record's field as the prompt block renders it (``sanitize_field``): no control or
    invisible character, ``&``, ``<`` and ``>`` escaped, lookalikes as references. That is
    HTML-safe in element content, so it is marked safe there rather than escaped twice."""
    return Markup(sanitize_field(value))  # noqa: S704 - escaped by sanitize_field


def _when(ms: int | None) -> str:
    if ms is None:
        return "never"
    return format_utc(ms, "%Y-%m-%d %H:%M UTC")


def _context(request: web.Request) -> dict[str, Any]:
    hub = request.app[HUB]
    session_id = request.get(SESSION)
    return {"csrf": hub.sessions.csrf(session_id) if session_id else "",
            "logged_in": session_id is not None, "prefix": PREFIX,
            "done": DONE.get(request.query.get("done", ""))}


def install_hub(app: web.Application, token: str, open_memory: Callable[[], Memory], *,
                clock: Clock, close: Callable[[], Awaitable[None]] | None = None) -> None:
    """Mount the hub on ``app`` under ``/hub/``. ``open_memory`` builds the memory it acts
    through, on the first request that needs it (the store is open by then); ``close``
    runs at the application's cleanup."""
    hub_app = web.Application(middlewares=[_guard])
    hub_app[HUB] = hub = Hub(open_memory, Sessions(token, clock), LoginLimiter(clock), clock)
    env = aiohttp_jinja2.setup(
        hub_app, loader=jinja2.PackageLoader("scopemem.hub", "templates"), autoescape=True,
        context_processors=[_async_context], undefined=jinja2.StrictUndefined)
    env.filters.update(record_text=_record_text, when=_when, day=day_label)
    hub_app.router.add_get("/login", login_form)
    hub_app.router.add_post("/login", login)
    hub_app.router.add_post("/logout", logout)
    reading.add_routes(hub_app.router)
    steering.add_routes(hub_app.router)
    hub_app.router.add_static("/static/", HERE / "static", append_version=True,
                             name="static")
    # Before the sub-application, whose prefix would take ``/hub`` too (and answer 404).
    app.router.add_get(PREFIX, _redirect_home)
    app.add_subapp(f"{PREFIX}/", hub_app)
    app.on_response_prepare.append(_headers_signal)

    async def _cleanup(_app: web.Application) -> None:
        if close is not None:
            await close()
        elif hub._memory is not None:
            await hub._memory.counters.close()

    app.on_cleanup.append(_cleanup)


async def _async_context(request: web.Request) -> dict[str, Any]:
    return _context(request)
