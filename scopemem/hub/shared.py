"""What the hub's modules share: its state on the application, the caller it acts as, and
the words a redirect may say."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

import attrs
from aiohttp import web

from scopemem.api.memory import Memory
from scopemem.api.results import Caller, MemoryRefused
from scopemem.config import MemoryConfig
from scopemem.core.commands import ORG_KIND, read_refusal
from scopemem.core.policy import Audience, audience_of
from scopemem.core.records import Kind, Source, Status
from scopemem.core.scopes import MemoryIdError, parse_memory_id, scope_kind
from scopemem.errors import StoreError
from scopemem.hub.auth import Clock, LoginLimiter, Sessions
from scopemem.plugins.manager import PluginManager
from scopemem.stores.base import MemoryStore, check_scope_key

_log = logging.getLogger("scopemem.hub")

PREFIX = "/hub"
#: The caller the hub acts as on shared scopes; ``hub_config`` makes it an admin.
HUB_CALLER = "user:hub:admin"

#: What a redirect's ``done`` says, by code: fixed words, never text from the request.
DONE = {
    "forgotten": "The record is forgotten: no read will show it again.",
    "already-forgotten": "That record is already forgotten: nothing changed.",
    "not-forgotten": "That record was not active: nothing changed.",
    "swept": "The sweep is applied: the listed facts are retired.",
    "sweep-changed": "That sweep was not applied: the scope changed since its dry run. "
                     "Below is what a sweep would retire now.",
    "deleted": "The scope is deleted, with its counters.",
}



@attrs.define
class Hub:
    """What the hub's handlers share: the memory it acts through (built on first use, once
    the store is open), the sessions and the login limiter."""

    open_memory: Callable[[], Memory]
    sessions: Sessions
    limiter: LoginLimiter
    clock: Clock
    _memory: Memory | None = None

    @property
    def memory(self) -> Memory:
        if self._memory is None:
            self._memory = self.open_memory()
        return self._memory


HUB = web.AppKey("scopemem_hub", Hub)
#: The session id of a request that passed the session check.
SESSION = web.RequestKey("scopemem_hub_session", str)


#: The deepest page a list goes to (past it, a person filters instead).
MAX_PAGE_NUMBER = 20_000
#: A scope page's filters: each query field and the values it takes.
SCOPE_FILTERS = {"kind": tuple(kind.value for kind in Kind),
                 "status": tuple(status.value for status in Status),
                 "source": tuple(source.value for source in Source)}


def page_number(value: str) -> int | None:
    """``value`` as a page number (plain ASCII digits, 1 to ``MAX_PAGE_NUMBER``), or None."""
    # ASCII digits only, and few: "²" is a digit int() refuses, 5,000 digits one it cannot read.
    if value.isascii() and value.isdigit() and len(value) <= 9 \
            and 1 <= int(value) <= MAX_PAGE_NUMBER:
        return int(value)
    return None


def scope_place(fields: Mapping[str, object]) -> dict[str, str]:
    """Where on a scope's pages ``fields`` (a form's, a query's) say a person was: its
    filters and page, each only when it is a value a scope page takes; the rest is dropped,
    never echoed into a link."""
    place = {name: value for name in SCOPE_FILTERS
             if (value := str(fields.get(name) or "")) in SCOPE_FILTERS[name]}
    page = str(fields.get("page") or "")
    if page_number(page) not in (None, 1):
        place["page"] = page
    return place


def scope_key_or_400(value: object) -> str:
    """``value`` as a scope key, or a 400 page. A key has its ``<kind>:``: a scope word
    (``org``, ``me``) names no scope, and its page would show one as if it held nothing."""
    try:
        key = check_scope_key(value)
    except StoreError as exc:
        raise web.HTTPBadRequest(reason=f"Not a scope key: {exc}") from None
    if ":" not in key:
        raise web.HTTPBadRequest(
            reason=f"Not a scope key: {key!r}; a key is <kind>:<id>, e.g. org:acme, "
                   "repo:acme/api, user:slack:U0123")
    return key


def record_scope_or_400(record_id: str) -> str:
    """The scope key of the record ``record_id`` names, or a 400 page."""
    try:
        scope_key, _seq = parse_memory_id(record_id)
    except MemoryIdError:
        raise web.HTTPBadRequest(reason="Not a memory id.") from None
    return scope_key


def warn_without_organisation(config: MemoryConfig | None) -> None:
    """One warning at start when the hub has no ``memory.organization``: it lists the org
    scopes the store holds, but can search or change none of them."""
    if config is None or config.organization is None:
        _log.warning("the hub runs without memory.organization: it lists org scopes but "
                     "cannot search or change them; set memory.organization in the "
                     "configuration file (--config, $SCOPEMEM_CONFIG or ./scopemem.toml)")


def hub_config(config: MemoryConfig) -> MemoryConfig:
    """The configuration the hub's memory runs with: on (a worker serves storage whether
    or not its own ``memory.enabled`` is set), with ``HUB_CALLER`` among the admins."""
    admins = config.admins if HUB_CALLER in config.admins else (*config.admins, HUB_CALLER)
    return attrs.evolve(config, enabled=True, admins=admins)


def memory_over(store: MemoryStore, config: MemoryConfig | None = None,
                pm: PluginManager | None = None) -> Memory:
    """The hub's memory over a store someone else opened and closes (the worker's)."""
    return Memory(hub_config(config or MemoryConfig()), store, plugin_manager=pm)


def caller_for(scope_key: str) -> Caller:
    """The admin caller acting on ``scope_key``: its person, its channel, or the hub."""
    audience = audience_of(scope_key)
    if audience is Audience.PERSON:
        return Caller(user_key=scope_key)
    if audience is Audience.ORIGIN:
        return Caller(user_key=HUB_CALLER, channel_id=scope_key.partition(":")[2])
    return Caller(user_key=HUB_CALLER)


def refuse_closed(memory: Memory, scope_key: str) -> None:
    """Refuse (``MemoryRefused``, a 403 page) a scope the gate closes to everyone: another
    organisation's, a kind no plugin registers. Without ``memory.organization`` the org
    scopes the store holds stay readable here: the hub lists them, and only changing them
    needs the setting."""
    if memory.org_key is None and scope_kind(scope_key) == ORG_KIND:
        return
    caller = caller_for(scope_key)
    origin = f"channel:{caller.channel_id}" if caller.channel_id else None
    reason = read_refusal(scope_key, caller.user_key, memory.org_key, memory.scope_kinds,
                          origin)
    if reason:
        raise MemoryRefused("closed_scope", reason)
