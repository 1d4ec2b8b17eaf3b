"""``SyncMemory``: the ``Memory`` API, blocking, for scripts and frameworks that are not async.

It owns one event loop, run in a background (daemon) thread, and the ``Memory`` lives on that
loop: a store's connections, locks and sessions belong to the loop they were made on, so
the memory is built there too (``from_config``) and every call is handed to it
(``asyncio.run_coroutine_threadsafe``). Any number of threads may call one ``SyncMemory`` at
once; their calls interleave on the loop as concurrent tasks do on any ``Memory``.

Close it (``close()``, or use it as a context manager): that lets pending reflections finish
(``drain``), closes the memory, then stops the loop and joins its thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from typing import Any, TypeVar

from scopemem.api.finished_run import Run
from scopemem.api.memory import Memory, MemoryContext
from scopemem.api.operations import REMEMBER_THREAD_KEY
from scopemem.api.results import (
    Caller,
    ForgetResult,
    ListResult,
    RememberResult,
    SearchResult,
    SweepReport,
)
from scopemem.config import MemoryConfig
from scopemem.core import scoring
from scopemem.core.commands import ALL, DEFAULT_LIST_LIMIT, ME
from scopemem.core.records import Record
from scopemem.core.requests import Request
from scopemem.errors import ScopememError
from scopemem.plugins.manager import PluginManager
from scopemem.stores.base import Clock, wall_clock_ms
from scopemem.stores.counting import Stats

T = TypeVar("T")

#: How long ``close`` lets pending reflections run before closing the memory under them.
DRAIN_SECONDS = 60.0


async def _cancel_others() -> None:
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)


class SyncMemory:
    """A ``Memory`` behind blocking calls. Build it with ``from_config`` (the memory is then
    made on this object's own loop), or hand it a ``Memory`` not yet used on any loop."""

    def __init__(self, memory: Memory | Callable[[], Memory]) -> None:
        self._loop = asyncio.new_event_loop()
        self._closed = False
        self._calls: set[asyncio.Task[Any]] = set()  # the calls running on the loop
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop.run_forever,
                                        name="scopemem-sync", daemon=True)
        self._thread.start()

        async def build() -> Memory:
            return memory if isinstance(memory, Memory) else memory()

        try:
            self.memory: Memory = self._call(build())
        except BaseException:
            self._stop()
            raise

    @classmethod
    def from_config(
        cls,
        source: str | os.PathLike[str] | Mapping[str, Any] | MemoryConfig | None = None,
        *,
        plugin_manager: PluginManager | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Clock = wall_clock_ms,
        allow_fallback: bool = True,
    ) -> SyncMemory:
        """``Memory.from_config``, built on this object's loop."""
        return cls(lambda: Memory.from_config(
            source, plugin_manager=plugin_manager, environ=environ, clock=clock,
            allow_fallback=allow_fallback))

    # --- running on the loop ----------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise ScopememError("a SyncMemory call from its own loop would wait for itself; "
                                "await the Memory (sync.memory) there instead")
        with self._lock:
            if self._closed:
                coroutine.close()
                raise ScopememError("this SyncMemory is closed")
            future = asyncio.run_coroutine_threadsafe(self._tracked(coroutine), self._loop)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise ScopememError("this SyncMemory was closed while the call ran") from None

    async def _tracked(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``coroutine``, counted among the calls ``close`` lets finish."""
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        try:
            return await coroutine
        finally:
            self._calls.discard(task)

    def run(self, awaitable: Awaitable[T]) -> T:
        """Wait for any awaitable on the memory's loop (a call this class does not wrap:
        ``sync.run(handle_command(sync.memory, text, caller))``)."""

        async def wait() -> T:
            return await awaitable

        return self._call(wait())

    # --- the read path and reflection -------------------------------------------------------

    with_memory = staticmethod(scoring.with_memory)

    @property
    def enabled(self) -> bool:
        return self.memory.enabled

    @property
    def store_is_durable(self) -> bool:
        return self.memory.store_is_durable

    @contextlib.contextmanager
    def run_slot(self) -> Iterator[None]:
        """``Memory.run_slot``, blocking: while a thread holds it (its reply being sent, its
        reflection not yet scheduled), ``close`` from another thread waits for it."""
        slot = self.memory.run_slot()
        self._call(slot.__aenter__())
        try:
            yield
        finally:
            if not self._closed:  # closed (its drain gave up): the loop and its count are gone
                self._call(slot.__aexit__(None, None, None))

    # The gate's questions and the request's scopes: answered from the configuration, no
    # I/O, so asked here rather than on the loop.

    def read_refusal(self, key: str, caller: Caller) -> str | None:
        return self.memory.read_refusal(key, caller)

    def is_admin(self, caller: Caller) -> bool:
        return self.memory.is_admin(caller)

    def scope_keys(self, request: Request) -> list[str]:
        return self.memory.scope_keys(request)

    def context_block(self, request: Request) -> str:
        return self._call(self.memory.context_block(request))

    def context(self, request: Request, *, count: bool = True) -> MemoryContext:
        return self._call(self.memory.context(request, count=count))

    def schedule_reflection(self, run: Run) -> None:
        """Hand a finished run to reflection on the memory's loop; returns at once."""

        async def schedule() -> None:
            self.memory.schedule_reflection(run)

        self._call(schedule())

    def drain(self, timeout: float = 900.0) -> bool:
        return self._call(self.memory.drain(timeout))

    # --- the manual operations --------------------------------------------------------------

    def remember(self, caller: Caller, text: str, scope: str = ME, *,
                 supersedes: str | None = None,
                 thread_key: str = REMEMBER_THREAD_KEY) -> RememberResult:
        return self._call(self.memory.remember(caller, text, scope, supersedes=supersedes,
                                               thread_key=thread_key))

    def forget(self, caller: Caller, record_id: str) -> ForgetResult:
        return self._call(self.memory.forget(caller, record_id))

    def sweep(self, caller: Caller, scope: str, *, dry_run: bool = False) -> SweepReport:
        return self._call(self.memory.sweep(caller, scope, dry_run=dry_run))

    def search(self, caller: Caller, query: str, scope: str = ALL, *,
               limit: int = DEFAULT_LIST_LIMIT) -> SearchResult:
        return self._call(self.memory.search(caller, query, scope, limit=limit))

    def stats(self, caller: Caller, scope: str = ALL, *, since_day: int = 0) -> Stats:
        return self._call(self.memory.stats(caller, scope, since_day=since_day))

    def export(self, caller: Caller, scope: str = ALL) -> Iterator[Record]:
        """``Memory.export`` as a blocking iterator, fetching as it is read."""
        records = self.memory.export(caller, scope)

        async def step() -> tuple[bool, Record | None]:
            try:
                return True, await anext(records)
            except StopAsyncIteration:
                return False, None

        try:
            while True:
                more, record = self._call(step())
                if not more or record is None:
                    return
                yield record
        finally:
            if not self._closed:
                self._call(records.aclose())

    def list(self, caller: Caller, scope: str = ALL, *, query: str | None = None,
             limit: int = DEFAULT_LIST_LIMIT) -> ListResult:
        return self._call(self.memory.list(caller, scope, query=query, limit=limit))

    # --- closing ----------------------------------------------------------------------------

    def close(self, drain_timeout: float = DRAIN_SECONDS) -> None:
        """Let pending reflections and other threads' calls in flight finish (at most
        ``drain_timeout`` seconds each), close the memory, stop the loop. Idempotent; every
        later call raises ``ScopememError``, and so does one still running then."""
        if self._closed:
            return

        async def shut() -> None:
            try:
                await self.memory.drain(drain_timeout)
                # Other threads' calls in flight finish before the store closes under them.
                others = self._calls - {asyncio.current_task()}
                if others:
                    await asyncio.wait(others, timeout=drain_timeout)
            finally:
                await self.memory.close()

        try:
            self._call(shut())
        finally:
            self._stop()

    def _stop(self) -> None:
        with self._lock:
            self._closed = True
        # A call another thread made while this one closed would otherwise wait forever on
        # a stopped loop: cancelled, it raises in that thread instead.
        asyncio.run_coroutine_threadsafe(_cancel_others(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> SyncMemory:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
