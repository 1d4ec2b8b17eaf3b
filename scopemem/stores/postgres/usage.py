"""Usage bumps that could not be applied at once, applied a moment later: no SQL here.

A retrieval counts the uses of what it returns in one statement that skips rows another
transaction holds locked (``FOR UPDATE SKIP LOCKED``: a write batch changing them), so a
reader never waits on a writer's row lock. The uses of the rows it skipped are handed to
``DeferredUsage``, which applies them from a background task, merging every bump pending by
then: one statement per scope per round, however many retrievals fed it. That statement
skips rows still locked too (waiting could deadlock with a writer), and tries them again
half a second later. A use is never dropped silently: a failed
round keeps its bumps for the next, and ``drain`` (called by ``close``) applies what is left.
Nothing here is state another process could contradict: a deferred bump is an increment,
applied whenever it lands.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping

from scopemem.stores.shared.bumps import Bumps, add_bumps

__all__ = ["DeferredUsage"]

log = logging.getLogger("scopemem.stores.postgres")

# Applies a scope's bumps; answers the seqs it could not apply yet (rows still locked).
Apply = Callable[[str, Mapping[int, list[int]]], Awaitable[Iterable[int]]]

RETRY_SECONDS = 0.5


class DeferredUsage:
    """Bumps per scope waiting to be applied by ``apply(scope_key, bumps)``."""

    def __init__(self, apply: Apply) -> None:
        self._apply = apply
        self._pending: dict[str, Bumps] = {}
        self._applying: dict[str, Bumps] = {}  # the round under way
        self._task: asyncio.Task[None] | None = None
        self._draining = False

    def __len__(self) -> int:
        return sum(map(len, self._pending.values()))

    def pending(self, scope_key: str, seq: int) -> int:
        """The uses of one row still waiting here (what a read of it does not show yet)."""
        return sum(bumps[seq][0] for bumps in (self._pending.get(scope_key, {}),
                                                self._applying.get(scope_key, {}))
                   if seq in bumps)

    def add(self, scope_key: str, seqs: Iterable[int], now: int) -> None:
        add_bumps(self._pending.setdefault(scope_key, {}), seqs, now)
        if not self._pending[scope_key]:
            del self._pending[scope_key]
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self._pending:
            if not await self._round():
                if self._draining:
                    return
                await asyncio.sleep(RETRY_SECONDS)

    async def _round(self) -> bool:
        """Apply every scope's pending bumps once; False when some are kept for later (a
        failure, or rows still locked)."""
        batch, self._pending = self._pending, {}
        self._applying = batch
        ok = True
        for scope_key, bumps in list(batch.items()):
            kept: Iterable[int] = ()
            try:
                kept = await self._apply(scope_key, bumps)
            except Exception as exc:
                kept = bumps
                log.warning("postgres store: use counts of %d record(s) of a scope not saved"
                            " yet, kept for the next try: %s", len(bumps), exc)
            finally:
                del batch[scope_key]
            pending = self._pending.setdefault(scope_key, {})
            for seq in kept:
                ok = False
                uses, last = bumps[seq]
                add_bumps(pending, (seq,), last, uses)
            if not pending:
                del self._pending[scope_key]
        return ok

    async def drain(self) -> None:
        """Apply everything pending now (one more try for what fails, then it is logged)."""
        self._draining = True
        try:
            task, self._task = self._task, None
            if task is not None and task.get_loop() is asyncio.get_running_loop():
                await task
            ok = not self._pending or await self._round()
        finally:
            self._draining = False
        if not ok:
            lost, self._pending = len(self), {}
            log.warning("postgres store: %d use count(s) could not be saved", lost)
