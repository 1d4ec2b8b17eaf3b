"""A store's health: the readiness check the worker's ``/readyz`` answers with
(``store_ready``), and ``scopemem health``'s checks (``check_store``), each cheap and
bounded: what needs a person, one line each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Awaitable, Sequence

import attrs

from scopemem.core.browse import MAX_PAGE
from scopemem.core.counters import REFLECTIONS_FAILED, day_of
from scopemem.core.scopes import READINESS_SCOPE
from scopemem.errors import ScopememError, StoreBusy, StoreUnreachable, StoreUnsupported
from scopemem.stores.base import BrowsingStore, CountingStore, MemoryStore, wall_clock_ms

__all__ = ["OK", "WARN", "FAIL", "Check", "MAX_SCOPES_CHECKED", "NOT_READY_BUSY",
           "NOT_READY_FAILED", "NOT_READY_REASONS", "NOT_READY_SLOW", "READY_SECONDS",
           "check_store", "exit_status", "read_ready", "store_ready"]

_log = logging.getLogger("scopemem.store")

#: The reasons ``store_ready`` gives: short, fixed, never the store's own message (which may
#: name a host, a path or a database).
NOT_READY_BUSY = "the store is busy"
NOT_READY_FAILED = "the store cannot serve reads"
NOT_READY_SLOW = "the store did not answer in time"
NOT_READY_REASONS = (NOT_READY_BUSY, NOT_READY_FAILED, NOT_READY_SLOW)
#: The longest a readiness check waits for the store: a frozen database (accepting
#: connections, answering nothing) would hold each probe for the pool's wait, or for good.
READY_SECONDS = 5.0


def nearest_existing(path: str) -> str:
    """``path``, or its nearest ancestor that exists (a data directory not made yet)."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def _writable_directory(path: str) -> bool:
    """``path`` (or its nearest existing ancestor) is a directory this process may write."""
    path = nearest_existing(path)
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


async def store_ready(store: MemoryStore) -> str | None:
    """None when ``store`` can serve, else a short reason (its own error goes to the log):
    the store's optional ``async def ready() -> str | None``, else ``read_ready``."""
    method = getattr(store, "ready", None)
    if method is None:
        return await read_ready(store)
    return await _reason(method())


async def read_ready(store: MemoryStore) -> str | None:
    """A read of ``READINESS_SCOPE`` (a scope nothing writes), and for a store with a data
    ``directory`` (whose reads of an unwritten scope touch no file), that it can be
    written."""
    return await _reason(_read_check(store))


async def _read_check(store: MemoryStore) -> str | None:
    await store.list(READINESS_SCOPE, 1)
    directory = getattr(store, "directory", None)
    if isinstance(directory, str) and not _writable_directory(directory):
        _log.warning("[ready] the data directory %s cannot be written", directory)
        return NOT_READY_FAILED
    return None


async def _reason(check: Awaitable[str | None]) -> str | None:
    """What ``check`` answers within ``READY_SECONDS``; a reason when it raises or is late."""
    try:
        return await asyncio.wait_for(check, READY_SECONDS)
    except TimeoutError:
        _log.warning("[ready] the store did not answer within %g s", READY_SECONDS)
        return NOT_READY_SLOW
    except StoreUnreachable as exc:  # busy to a caller, but nothing is being served
        _log.warning("[ready] %s", exc)
        return NOT_READY_FAILED
    except StoreBusy as exc:
        _log.warning("[ready] %s", exc)
        return NOT_READY_BUSY
    except Exception as exc:  # whatever the store raised, the store cannot serve
        _log.warning("[ready] %s: %s", type(exc).__name__, exc)
        return NOT_READY_FAILED


OK, WARN, FAIL = "ok", "warn", "fail"

#: The most scopes the cap check reads (a page of scopes at a time, most records first).
MAX_SCOPES_CHECKED = 1000
#: A scope holding this share of the cap or more is near it.
NEAR_CAP = 0.9
#: Free space: warn below either figure, fail below either of the second pair.
WARN_FREE_SHARE, WARN_FREE_BYTES = 0.10, 1 << 30
FAIL_FREE_SHARE, FAIL_FREE_BYTES = 0.02, 100 << 20
#: The days the failed-reflections counter is read over (today included).
RECENT_DAYS = 7
#: Scope keys named in a line, at most.
NAMED = 5


@attrs.frozen
class Check:
    name: str
    status: str
    detail: str


def exit_status(checks: Sequence[Check]) -> int:
    """0 when every check is ok, 1 when one warns, 2 when one fails."""
    statuses = {check.status for check in checks}
    return 2 if FAIL in statuses else 1 if WARN in statuses else 0


def _durable(store: MemoryStore, configured: str) -> Check:
    if getattr(store, "durable", True):
        return Check("durable", OK, f"records are kept by the {configured} store")
    if configured == "null":
        return Check("durable", WARN, "the null store keeps no records: memory holds nothing")
    from scopemem.stores.memory import InMemoryStore

    # Only the in-process store itself stands in for another (installation.in_process_store);
    # a plugin's store that says it is not durable keeps its records in the process.
    if configured != "memory" and type(store) is InMemoryStore:
        return Check("durable", WARN, f"the {configured} store fell back to the in-process"
                                      " store (its token is missing): records are lost when"
                                      " the process exits")
    return Check("durable", WARN, f"the {configured} store keeps records in the process: they"
                                  " are lost when it exits")


def check_disk(directory: str) -> Check:
    usage = shutil.disk_usage(nearest_existing(directory))
    share = usage.free / usage.total if usage.total else 0.0
    detail = (f"{usage.free / (1 << 30):.1f} GiB free ({share:.0%}) under {directory}")
    if share < FAIL_FREE_SHARE or usage.free < FAIL_FREE_BYTES:
        return Check("disk", FAIL, detail)
    if share < WARN_FREE_SHARE or usage.free < WARN_FREE_BYTES:
        return Check("disk", WARN, detail)
    return Check("disk", OK, detail)


async def _scopes(store: BrowsingStore, cap: int) -> Check:
    """The scopes holding ``NEAR_CAP`` of the cap or more, from pages of scopes by active
    records, most first, until one holds fewer: at most ``MAX_SCOPES_CHECKED`` read."""
    near: list[str] = []
    total = 0
    for offset in range(0, MAX_SCOPES_CHECKED, MAX_PAGE):
        page = await store.scope_page(sort="active", descending=True, offset=offset,
                                      limit=MAX_PAGE)
        total = page.total
        near += [row.scope_key for row in page.rows if row.active >= NEAR_CAP * cap]
        if len(near) < offset + len(page.rows) or len(page.rows) < MAX_PAGE:
            break
    more = (f"; the first {MAX_SCOPES_CHECKED} of {total} scopes read"
            if len(near) >= MAX_SCOPES_CHECKED else "")
    if not near:
        return Check("scopes", OK, f"{total} scopes below {NEAR_CAP:.0%} of the cap ({cap})")
    named = ", ".join(near[:NAMED]) + (f" and {len(near) - NAMED} more"
                                       if len(near) > NAMED else "")
    return Check("scopes", WARN, f"{len(near)} scopes hold {NEAR_CAP:.0%} or more of the cap"
                                 f" ({cap}): their least used records are evicted next: "
                                 f"{named}{more}")


async def _reflections(store: CountingStore) -> Check:
    since = day_of(wall_clock_ms()) - (RECENT_DAYS - 1)
    failed = sum(row.value for row in await store.read_counts(since_day=since)
                 if row.name == REFLECTIONS_FAILED)
    if failed:
        return Check("reflections", WARN, f"{failed} reflections failed in the last"
                                          f" {RECENT_DAYS} days (scopemem stats)")
    return Check("reflections", OK, f"none failed in the last {RECENT_DAYS} days")


async def check_store(store: MemoryStore, *, configured: str, cap: int) -> list[Check]:
    """Every check that applies to ``store`` (the ``configured`` store's name, its cap)."""
    reason = await store_ready(store)
    checks = [Check("store", FAIL, reason) if reason is not None
              else Check("store", OK, "answers reads"),
              _durable(store, configured)]
    directory = getattr(store, "directory", None)
    if isinstance(directory, str):
        checks.append(check_disk(directory))
    if reason is not None:
        return checks  # the rest would fail the same way
    if isinstance(store, BrowsingStore):
        checks.append(await _failing_as_a_check(
            "scopes", "cannot read the scopes' counts", _scopes(store, cap)))
    if isinstance(store, CountingStore):
        checks.append(await _failing_as_a_check(
            "reflections", "cannot read the counters", _reflections(store)))
    return checks


async def _failing_as_a_check(name: str, what: str, check: Awaitable[Check]) -> Check:
    """``check``, or a failed check saying why it could not run (a store that answers the
    readiness read may fail another), so the other lines are still printed."""
    try:
        return await check
    except StoreBusy as exc:
        return Check(name, FAIL, f"{what}: the store is busy ({exc})")
    except StoreUnsupported as exc:  # a worker of an older release: the store itself serves
        return Check(name, WARN, f"{what}: {exc}")
    except ScopememError as exc:
        return Check(name, FAIL, f"{what}: {exc}")
