"""What a ``Memory`` has under way beside the caller: the runs holding a slot, the
reflections scheduled after them, and the use counts and reaches of shown records being
saved. ``drain`` waits for all of it, so a process that stops loses none of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Any

__all__ = ["Runs"]

log = logging.getLogger("scopemem")


class Runs:
    """Runs in flight and the background tasks they leave."""

    def __init__(self) -> None:
        self._pending: set[asyncio.Task[object]] = set()  # reflections
        self._marks: set[asyncio.Task[None]] = set()  # use counts and reaches, saving
        self._active_runs = 0

    def reflect(self, reflection: Coroutine[Any, Any, object]) -> None:
        """Run ``reflection`` (which never raises but for cancellation) in the background."""
        task = asyncio.get_running_loop().create_task(reflection)
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    def saving(self, save: Coroutine[Any, Any, None]) -> None:
        """Save the use counts or reaches of a block shown, in the background."""
        task = asyncio.ensure_future(save)
        self._marks.add(task)
        task.add_done_callback(self._marks.discard)

    def pending_reflections(self) -> int:
        return len(self._pending)

    def active_runs(self) -> int:
        return self._active_runs

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """Hold a run in flight until its post-run steps (reply, reflection scheduling) are
        done, so ``drain`` can never see "no runs, no reflections" in between."""
        self._active_runs += 1
        try:
            yield
        finally:
            self._active_runs -= 1

    async def drain(self, timeout: float = 900.0) -> bool:
        """Wait (at most ``timeout`` seconds) until no run holds a slot and no reflection is
        pending. True when drained; on timeout, one warning with what is left."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._active_runs or self._pending or self._marks:
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("[memory] drain timed out with %d run(s) in flight and %d "
                            "reflection(s) pending", self._active_runs, len(self._pending))
                return False
            if self._pending or self._marks:
                await asyncio.wait({*self._pending, *self._marks},
                                   timeout=min(remaining, 0.5))
            else:
                await asyncio.sleep(min(remaining, 0.05))
        return True

    async def cancel_reflections(self) -> None:
        """Cancel the reflections still pending (``drain`` timed out, or was never called)
        and wait until each has ended, so none runs on once its store is closed. Each logs
        its own ``reflection … cancelled`` warning."""
        pending = set(self._pending)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    async def marks_saved(self) -> None:
        """Wait until the use counts of every block shown so far are saved (a failure was
        one warning); a surface that answers one block and stops waits here."""
        while self._marks:
            await asyncio.wait(set(self._marks))
