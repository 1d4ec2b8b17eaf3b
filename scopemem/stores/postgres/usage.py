"""Use counts not saved yet, saved in the background: no SQL here (``docs/storage.md``,
"PostgreSQL", says when they are saved and who sees them).

A save of a scope never runs while a read of that scope is between its statement and its
look at the pending uses (``reading``), since a read then could not tell whether its
snapshot holds the uses being saved. The save statement skips rows a writer holds locked
(waiting could deadlock with a writer); those stay pending and are tried again half a
second later. A failed save keeps its uses for the next; one that still fails at ``drain``
(``close``, ``store.flush``) is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping

from scopemem.stores.shared.bumps import Bumps, add_bumps, merge_bumps

__all__ = ["DEFAULT_USAGE_FLUSH_MS", "DeferredUsage"]

log = logging.getLogger("scopemem.stores.postgres")

# Applies a scope's bumps; answers the seqs it could not apply yet (rows still locked).
Apply = Callable[[str, Mapping[int, list[int]]], Awaitable[Iterable[int]]]

DEFAULT_USAGE_FLUSH_MS = 250
RETRY_SECONDS = 0.5
_NONE: Bumps = {}


class DeferredUsage:
    """Uses per scope waiting to be saved by ``apply(scope_key, bumps)``."""

    def __init__(self, apply: Apply, flush_ms: int = DEFAULT_USAGE_FLUSH_MS) -> None:
        self._apply = apply
        self._delay = flush_ms / 1000
        self._pending: dict[str, Bumps] = {}
        self._readers: dict[str, int] = {}  # reads of a scope under way
        self._saving: dict[str, asyncio.Event] = {}  # set when the scope's save is done
        self._idle: dict[str, asyncio.Event] = {}  # set when a scope's last read is done
        self._task: asyncio.Task[None] | None = None
        self._sleeping = False  # the task waits for its next round (safe to cancel)
        # Saves are failing: said once, not at every retry (a replica fails them all).
        self._failing = False

    def __len__(self) -> int:
        return sum(map(len, self._pending.values()))

    def pending(self, scope_key: str) -> Mapping[int, list[int]]:
        """The scope's uses not saved yet, ``seq → [uses, last use]`` (read them inside
        ``reading``)."""
        return self._pending.get(scope_key, _NONE)

    @contextlib.asynccontextmanager
    async def reading(self, scope_key: str) -> AsyncIterator[None]:
        """A read of the scope's rows that adds ``pending`` to them: no save of the scope
        runs meanwhile (one under way is waited for)."""
        while (saving := self._saving.get(scope_key)) is not None:
            await saving.wait()
        self._readers[scope_key] = self._readers.get(scope_key, 0) + 1
        try:
            yield
        finally:
            left = self._readers[scope_key] - 1
            if left:
                self._readers[scope_key] = left
            else:
                del self._readers[scope_key]
                idle = self._idle.pop(scope_key, None)
                if idle is not None:
                    idle.set()

    def add(self, scope_key: str, seqs: Iterable[int], now: int) -> None:
        """One use of each of ``seqs`` at ``now``, saved within the flush delay."""
        bumps = self._pending.setdefault(scope_key, {})
        add_bumps(bumps, seqs, now)
        if not bumps:
            del self._pending[scope_key]
        elif self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def save(self, scope_key: str) -> bool:
        """Save the scope's pending uses now; False when some are kept (rows still locked,
        or a failure, logged)."""
        while (saving := self._saving.get(scope_key)) is not None:
            await saving.wait()
        if scope_key not in self._pending:
            return True
        done = self._saving[scope_key] = asyncio.Event()
        try:
            while self._readers.get(scope_key):
                await self._idle.setdefault(scope_key, asyncio.Event()).wait()
            bumps = self._pending.pop(scope_key, _NONE)
            kept: Iterable[int] = ()
            try:
                kept = await self._apply(scope_key, bumps) if bumps else ()
            except Exception as exc:
                kept = bumps
                log.log(logging.DEBUG if self._failing else logging.WARNING,
                        "postgres store: use counts of %d record(s) of a scope not saved yet,"
                        " kept for the next try (said once until a save succeeds): %s",
                        len(bumps), exc)
                self._failing = True
            else:
                if self._failing:
                    log.info("postgres store: use counts are saved again")
                self._failing = False
            back = {seq: bumps[seq] for seq in kept}
            if back:
                merge_bumps(self._pending.setdefault(scope_key, {}), back)
            return not back
        finally:
            del self._saving[scope_key]
            done.set()

    async def _save_all(self) -> bool:
        """Save every scope's pending uses, waiting for the saves under way too (their uses
        are no longer pending, and come back to it when they fail)."""
        ok = True
        for scope_key in list(self._saving) + list(self._pending):
            ok = await self.save(scope_key) and ok
        return ok

    async def _run(self) -> None:
        delay = self._delay
        while self._pending:
            self._sleeping = True
            try:
                await asyncio.sleep(delay)
            finally:
                self._sleeping = False
            delay = self._delay if await self._save_all() else RETRY_SECONDS

    async def drain(self) -> None:
        """Save everything pending now (one more try for what fails, then it is logged)."""
        task = self._task
        if (task is not None and self._sleeping
                and task.get_loop() is asyncio.get_running_loop()):
            task.cancel()  # a round under way is not: ``save`` waits for its scope's
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if not await self._save_all() and not await self._save_all():
            lost, self._pending = len(self), {}
            log.warning("postgres store: %d use count(s) could not be saved", lost)
