"""``SqliteStore``: the MemoryStore methods, configuration, and how the parts fit.

The store is one class assembled from parts with one job each (``files``, ``base``,
``views``, ``reads``, ``writes``, ``usage``); this module holds its public face: the
constructor, ``from_settings`` and the ``MemoryStore`` methods, which decide on the event
loop which part answers and on which pool it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scopemem.core import engine
from scopemem.core.ranking import Ranking
from scopemem.core.records import (
    DEFAULT_RETENTION_DAYS,
    DEFAULT_SCOPE_CAP,
    Candidate,
    Kind,
    Record,
    SweepResult,
    WriteCounts,
)
from scopemem.errors import ConfigError
from scopemem.stores.base import (
    DEFAULT_RANKING,
    Clock,
    Hit,
    StoreSettings,
    check_cap,
    check_retention_days,
    check_scope_key,
    salient_batch,
    wall_clock_ms,
)
from scopemem.stores.shared import batches
from scopemem.stores.sqlite import files
from scopemem.stores.sqlite.counts import Counts
from scopemem.stores.sqlite.handles import Handle, Heavy, Unverified
from scopemem.stores.sqlite.layouts import LAYOUTS, check_layout
from scopemem.stores.sqlite.porting import Porting
from scopemem.stores.sqlite.ranker import (
    DEFAULT_RANK_PROCESSES,
    RANK_PROCESSES_MAX,
    RANKER_DESCRIPTORS,
    Ranker,
)
from scopemem.stores.sqlite.reads import Reads
from scopemem.stores.sqlite.usage import DEFAULT_USAGE_FLUSH_MS, USAGE_FLUSH_MS_MAX, Usage
from scopemem.stores.sqlite.views import DEFAULT_CACHE_ROWS
from scopemem.stores.sqlite.writes import Writes

__all__ = ["DEFAULT_PATH", "SYNCHRONOUS_LEVELS", "SqliteStore"]

DEFAULT_PATH = "./scopemem-data"
SYNCHRONOUS_LEVELS = ("off", "normal", "full", "extra")
#: Every option of ``[memory.stores.sqlite]``, in either layout.
OPTIONS = ("path", "synchronous", "busy_timeout_ms", "max_open_connections", "cache_rows",
           "usage_flush_ms", "max_scopes", "rank_processes", "layout")


def _check_synchronous(value: object, name: str) -> str:
    if not isinstance(value, str) or value.lower() not in SYNCHRONOUS_LEVELS:
        raise ConfigError(f"{name}: must be one of {', '.join(SYNCHRONOUS_LEVELS)};"
                          f" got {value!r}")
    return value.lower()


def _check_int(value: object, name: str, minimum: int, maximum: int | None = None) -> int:
    if (isinstance(value, bool) or not isinstance(value, int) or value < minimum
            or (maximum is not None and value > maximum)):
        bound = (f"from {minimum} to {maximum}" if maximum is not None
                 else f"of at least {minimum}")
        raise ConfigError(f"{name}: must be an integer {bound}; got {value!r}")
    return value


def _check_path(value: object, name: str) -> str:
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ConfigError(f"{name}: must be a non-empty directory path; got {value!r}")
    return value



class SqliteStore(Reads, Writes, Usage, Porting, Counts):
    """Durable memory: one SQLite database per scope key under ``path``."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        cap: int = DEFAULT_SCOPE_CAP,
        clock: Clock = wall_clock_ms,
        synchronous: str = "full",
        busy_timeout_ms: int = 5000,
        max_open: int | None = None,
        cache_rows: int = DEFAULT_CACHE_ROWS,
        usage_flush_ms: int = DEFAULT_USAGE_FLUSH_MS,
        ranking: Ranking = DEFAULT_RANKING,
        retention_days: int = DEFAULT_RETENTION_DAYS,
        max_scopes: int = 0,
        rank_processes: int = DEFAULT_RANK_PROCESSES,
    ) -> None:
        self.cap = check_cap(cap)
        self.retention_days = check_retention_days(retention_days)
        self.max_scopes = _check_int(max_scopes, "max_scopes", 0)
        # Database files in the directory, counted once when a limit applies and kept up to
        # date by this store's own creations (see _reserve_scope); None until counted.
        self._scope_files: int | None = None
        self.ranking = ranking
        self.analyzer = ranking.analyzer
        self.directory = os.path.abspath(os.path.expanduser(_check_path(path, "path")))
        check_layout(self.directory, "file")
        self.synchronous = _check_synchronous(synchronous, "synchronous")
        self.busy_timeout_ms = _check_int(busy_timeout_ms, "busy_timeout_ms", 0)
        self.max_open = (files.default_max_open() if max_open is None
                         else _check_int(max_open, "max_open", 1))
        self.cache_rows = _check_int(cache_rows, "cache_rows", 0)
        self.usage_flush_ms = _check_int(usage_flush_ms, "usage_flush_ms", 0,
                                         USAGE_FLUSH_MS_MAX)
        self._cached_rows = 0  # rows held by views, across scopes (guarded by _cache_lock)
        self._viewed: OrderedDict[Handle, None] = OrderedDict()
        # Files whose token index this store has checked against their rows: once per file
        # per store, not on every reopen from the cache of open files.
        self._reconciled: set[str] = set()
        self._clock = clock
        self._handles: OrderedDict[str, Handle] = OrderedDict()
        self._closing: dict[str, Handle] = {}  # evicted from the cache, not closed yet
        self._cache_lock = threading.Lock()
        self._writers: dict[str, list[Any]] = {}  # scope → [asyncio.Lock, holders+waiters]
        self._executors: dict[str, ThreadPoolExecutor] = {}  # "read" / "write" pools
        self._epoch: object | None = None  # see _current_epoch
        self._epoch_loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._dirty: dict[str, Handle] = {}  # scopes whose use counts the next save commits
        self._saver: asyncio.Task[None] | None = None
        self._ranker = Ranker(_check_int(rank_processes, "rank_processes", 0,
                                         RANK_PROCESSES_MAX), self.cache_rows)

    @classmethod
    def from_settings(cls, settings: StoreSettings) -> SqliteStore:
        """Build from ``[memory.stores.sqlite]``: ``path``, ``synchronous``,
        ``busy_timeout_ms``, ``max_open_connections``, ``cache_rows``, ``usage_flush_ms``,
        ``max_scopes``, ``rank_processes``."""
        settings = settings.named("sqlite")
        settings.unknown_options(OPTIONS)
        if settings.choice_option("layout", "file", LAYOUTS) != "file":
            raise ConfigError(f"{settings.option_key('layout')}: SqliteStore is the file"
                              " layout; build the shared one with SharedSqliteStore")
        path = settings.record("path", _check_path(
            settings.options.get("path", DEFAULT_PATH), settings.option_key("path")))
        check_layout(os.path.abspath(os.path.expanduser(path)), "file",
                     settings.option_key("layout"))
        return cls(
            path,
            cap=settings.cap,
            clock=settings.clock,
            synchronous=settings.choice_option("synchronous", "full", SYNCHRONOUS_LEVELS),
            busy_timeout_ms=settings.int_option("busy_timeout_ms", 5000, 0),
            max_open=settings.int_option("max_open_connections", files.default_max_open(), 1),
            cache_rows=settings.int_option("cache_rows", DEFAULT_CACHE_ROWS, 0),
            usage_flush_ms=settings.int_option("usage_flush_ms", DEFAULT_USAGE_FLUSH_MS, 0,
                                               USAGE_FLUSH_MS_MAX),
            ranking=settings.ranking,
            retention_days=settings.retention_days,
            max_scopes=settings.int_option("max_scopes", 0, 0),
            rank_processes=settings.int_option("rank_processes", DEFAULT_RANK_PROCESSES, 0,
                                               RANK_PROCESSES_MAX),
        )

    async def retrieve(self, scope_key: str, query: str, limit: int) -> list[Record]:
        return [hit.record for hit in await self.search(scope_key, query, limit)]

    async def search(self, scope_key: str, query: str, limit: int, *, bump: bool = True
                     ) -> list[Hit]:
        check_scope_key(scope_key)
        now = self._clock()
        terms = engine.query_terms(query, self.analyzer)
        if not terms.terms or limit <= 0:
            return []
        answered = self._from_view(scope_key, terms, limit, now, bump)
        if isinstance(answered, Unverified):
            # Checked behind the thread holding the connection rather than read through SQL
            # (which, on a large scope, costs far more than the wait).
            answered = (self._from_view(scope_key, terms, limit, now, bump)
                        if await self._check_view(answered) else None)
            if isinstance(answered, Unverified):
                answered = None
        if isinstance(answered, Heavy):
            answered = await self._rank_heavy(scope_key, answered, terms, limit, now, bump)
        if answered is None:
            entry = self._writers.get(scope_key)
            if entry is not None and entry[0].locked():
                # A write to this scope is running or queued: wait on the loop with it
                # rather than park read threads on its connection for the length of its
                # transaction.
                async with self._writer(scope_key):
                    # The write has carried the view on, as a rule: answer from it.
                    retried = self._from_view(scope_key, terms, limit, now, bump)
                    answered = retried if isinstance(retried, tuple) else await self._run(
                        "read", self._retrieve, scope_key, terms, limit, now, bump)
            else:
                answered = await self._run(
                    "read", self._retrieve, scope_key, terms, limit, now, bump)
        hits, bumped = answered
        if bumped is not None:
            self._flush_soon(scope_key, bumped)
        return hits

    async def mark_used(self, used: Mapping[str, Sequence[str]]) -> int:
        now = self._clock()
        marked = 0
        for scope_key, ids in used.items():
            check_scope_key(scope_key)
            seqs = sorted({seq for seq in (batches.seq_in_scope(scope_key, record_id)
                                           for record_id in ids) if seq is not None})
            if not seqs:
                continue
            count, handle = await self._run("read", self._mark, scope_key, seqs, now)
            marked += count
            if handle is not None:
                self._flush_soon(scope_key, handle)
        return marked

    async def write(
        self, scope_key: str, candidates: Sequence[Candidate], cap: int | None = None
    ) -> WriteCounts:
        check_scope_key(scope_key)
        cap = self.cap if cap is None else check_cap(cap)
        if not candidates:
            return WriteCounts()
        batch, dropped = salient_batch(candidates)
        if not batch:
            return dropped
        now = self._clock()
        loop = asyncio.get_running_loop()

        def write_then_carry() -> WriteCounts:
            try:
                return self._write(scope_key, batch, cap, now)
            finally:
                # Also when this call was cancelled meanwhile: a carry left pending would
                # hold the scope's use counts back from the background saves.
                with contextlib.suppress(RuntimeError):  # the loop closed
                    loop.call_soon_threadsafe(self._apply_carry, scope_key)

        async with self._writer(scope_key):
            counts = await self._run("write", write_then_carry)
            self._apply_carry(scope_key)  # before the write is answered
            return counts + dropped

    async def list(
        self, scope_key: str, limit: int, query: str | None = None, kind: Kind | None = None
    ) -> list[Record]:
        check_scope_key(scope_key)
        if limit <= 0:
            return []
        tokens: list[str] | None = None
        if query is not None:
            tokens = list(engine.query_terms(query, self.analyzer).prefilter)
            if not tokens:
                return []
        return await self._run("read", self._list, scope_key, limit, query, tokens, kind)

    async def forget(self, scope_key: str, record_id: str) -> bool:
        check_scope_key(scope_key)
        seq = batches.seq_in_scope(scope_key, record_id)
        if seq is None:
            return False
        async with self._writer(scope_key):
            return await self._run("write", self._forget, scope_key, record_id, seq,
                                   self._clock())

    async def sweep(self, scope_key: str, dry_run: bool = False) -> SweepResult:
        check_scope_key(scope_key)
        async with self._writer(scope_key):
            return await self._run("write", self._sweep, scope_key, dry_run, self._clock())

    async def flush(self) -> None:
        """Save every use count still pending now, instead of within ``usage_flush_ms``
        (``close`` saves them too). For a backup or a copy of the files taken while the
        store runs. Raises ``StoreError`` when a scope's counts cannot be saved."""
        await self._save_all_now()

    def max_descriptors(self) -> int:
        """The most file descriptors the store holds (``stores.base.descriptors_held``):
        a database, its WAL and its shared memory per open scope file, and the pipes to
        each ranking process."""
        return 3 * self.max_open + RANKER_DESCRIPTORS * self._ranker.processes

    async def close(self) -> None:
        """Close every connection (saving the use counts still pending) and stop the thread
        pools. Safe to call twice."""
        with self._cache_lock:
            if self._closed:
                return
            self._closed = True
            handles = list(self._handles.values())
            self._handles.clear()
        # Closing a handle saves its pending bumps itself; a save scheduled in another loop
        # (one that has stopped) never runs again.
        saver, self._saver = self._saver, None
        if saver is not None and saver.get_loop() is asyncio.get_running_loop():
            saver.cancel()
        self._ranker.close()
        executors, self._executors = self._executors, {}
        if not executors:
            for handle in handles:
                self._close_handle(handle, final=True)
            return
        # Closing waits for operations already running on a connection to finish.
        executor = executors.get("write") or next(iter(executors.values()))
        def close_all() -> None:
            for handle in handles:
                self._close_handle(handle, final=True)

        await asyncio.get_running_loop().run_in_executor(executor, close_all)
        for pool in executors.values():
            pool.shutdown(wait=False)
