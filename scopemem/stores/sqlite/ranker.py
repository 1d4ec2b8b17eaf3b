"""Heavy rankings in a process of their own, so they never hold the event loop.

Ranking is Python work: summing term weights over every record a query's prefilter lets
in. A light brief reads a few hundred postings and is ranked on the event loop, but a query
of the commonest words on a 10,000-record scope reads hundreds of thousands. On a thread
that work still holds the GIL the event loop needs, so one client's heavy query slowed
every other client's light one by as much as it cost (a light query's p99 rose about nine
times beside eight heavy clients, against eight light ones). In a process of its own it
holds only that process's GIL: the two cores are shared, the event loop is not.

The ranking process answers one question, the first half of every ranking
(``core.ranking.rank_candidates``): which records reach the final score, with their
matches, for a query on a scope at the generation of the store's own view. It keeps a copy
(``ScopeView``) of each scope it was asked about, read from the committed file as any
reader of the directory does, a bounded number of rows in all. The store then scores those
few candidates by recency on the event loop from its own view, with the use counts it has
not saved yet, exactly as a ranking on a thread would have.

A query never waits for the process to read a copy. When the process's copy is of another
generation than the store's view (a write came in since), or it has none, the store asks it
to read the file again in the background and ranks this query on its read pool, as it does
while the process starts, while it reads, or when it cannot answer at all (it crashed, was
killed, cannot open the file); a process that died is replaced on the next heavy query. So
an answer never depends on the process, and a write costs a heavy query nothing but that
one query on the read pool. A scope always goes to the same process (by its file's path),
so with several processes (``rank_processes``) each holds copies of its share of scopes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import zlib
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scopemem.core import engine
from scopemem.core.ranking import QueryTerms, Ranking
from scopemem.core.words import PLAIN
from scopemem.stores.sqlite import files, schema, sql
from scopemem.stores.sqlite.view import ScopeView

if TYPE_CHECKING:
    from concurrent.futures import Future

# multiprocessing and the process pool are imported where a ranking process is started or
# waited on: a store that never starts one (the shared layout, a one-shot command) does not
# pay for them.

log = logging.getLogger("scopemem.stores.sqlite")

#: The default number of ranking processes: one where there is a second core to run it on.
DEFAULT_RANK_PROCESSES = 1 if (os.cpu_count() or 1) >= 2 else 0
#: The descriptors this process holds for each ranking process: its pool's queues and wake-up
#: pipes, its sentinel, a share of the forkserver's (measured: 26 for three).
RANKER_DESCRIPTORS = 9
RANK_PROCESSES_MAX = 16
# What a ranking process holds: scope files open, and rows in views across them.
_CHILD_FILES = 16
_CHILD_ROWS = 50_000

Best = tuple[int, list[tuple[float, int]]]  # (generation, rank_candidates' answer)


class _Slot:
    """One ranking process (a pool of one), the scopes it holds copies of, and at which
    generation."""

    def __init__(self) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # forkserver: a fresh interpreter forks the process, never this one with its
        # threads and open files.
        self.executor = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(
            "forkserver"))
        self.started: Future[None] = self.executor.submit(_ready)
        self.held: dict[str, int] = {}  # path → generation of the process's copy
        self.refreshing: str | None = None  # the path whose copy it is reading now

    def up(self) -> bool:
        started = self.started
        return started.done() and not started.cancelled() and started.exception() is None


class Ranker:
    """The ranking processes, started on the first heavy query. A scope always goes to the
    same one (by its file's path), which keeps a copy of it."""

    def __init__(self, processes: int, cache_rows: int) -> None:
        self.processes = processes
        self.cache_rows = cache_rows
        self._slots: dict[int, _Slot] = {}
        self.answered = 0  # heavy queries the processes answered (for tests and figures)

    async def best(self, path: str, scope_key: str, terms: QueryTerms, limit: int,
                   ranking: Ranking, generation: int) -> Best | None:
        """``rank_candidates`` for the query on the scope file at ``path`` as it is at
        ``generation``, computed in a ranking process; None when no process can answer
        for that generation now. A process whose copy of the scope is of another
        generation (or that has none) is asked to read the file again, in the background,
        and answers the queries after that: it never makes a query wait for the read."""
        if self.processes == 0:
            return None
        from concurrent.futures.process import BrokenProcessPool

        index = zlib.crc32(path.encode()) % self.processes
        slot = self._slots.get(index)
        if slot is None:
            slot = self._slots[index] = _Slot()
        if not slot.up() or slot.refreshing is not None:
            return None  # starting, or reading a copy: the read pool answers meanwhile
        if slot.held.get(path) != generation:
            self._refresh(index, slot, path, scope_key)
            return None
        loop = asyncio.get_running_loop()
        try:
            candidates = await loop.run_in_executor(
                slot.executor, _best_in_child, path, terms, limit, ranking.weighted,
                generation)
        except BrokenProcessPool:
            self._broken(index, slot)
            return None
        except Exception as exc:  # the read pool answers instead, and reports real trouble
            log.debug("sqlite store: the ranking process could not rank %s: %s", path,
                      sql.describe(exc))
            return None
        if candidates is None:
            slot.held.pop(path, None)  # its copy went (room for another): read it again
            return None
        self.answered += 1
        return generation, candidates

    def _refresh(self, index: int, slot: _Slot, path: str, scope_key: str) -> None:
        from concurrent.futures.process import BrokenProcessPool

        try:
            future = slot.executor.submit(_refresh_in_child, path, scope_key,
                                          self.cache_rows)
        except BrokenProcessPool:  # it died while idle: replaced on the next heavy query
            self._broken(index, slot)
            return
        slot.refreshing = path

        def done(finished: Future[tuple[int, list[str]] | None]) -> None:
            slot.refreshing = None
            if finished.cancelled():
                return
            error = finished.exception()
            if isinstance(error, BrokenProcessPool):
                self._broken(index, slot)
            elif error is not None:
                log.debug("sqlite store: the ranking process could not read %s: %s", path,
                          sql.describe(error))
            elif (held := finished.result()) is not None:
                generation, dropped = held
                for gone in dropped:
                    slot.held.pop(gone, None)
                slot.held[path] = generation

        future.add_done_callback(done)

    def _broken(self, index: int, slot: _Slot) -> None:
        log.warning("sqlite store: a ranking process died; starting a new one")
        if self._slots.get(index) is slot:
            del self._slots[index]
        slot.executor.shutdown(wait=False, cancel_futures=True)

    def pids(self) -> list[int]:
        """The ranking processes running now (for tests and operators)."""
        pids = []
        for slot in self._slots.values():
            processes = getattr(slot.executor, "_processes", None) or {}
            pids += [pid for pid, process in processes.items() if process.is_alive()]
        return pids

    def up(self) -> bool:
        """Whether every ranking process started so far is up (for tests)."""
        return bool(self._slots) and all(slot.up() for slot in self._slots.values())

    def close(self) -> None:
        slots, self._slots = self._slots, {}
        for slot in slots.values():
            slot.executor.shutdown(wait=False, cancel_futures=True)


# --- in the ranking process ----------------------------------------------------------------

_connections: OrderedDict[str, Any] = OrderedDict()
_views: OrderedDict[str, ScopeView] = OrderedDict()


def _ready() -> None:
    """The pool's first task: once it has run, a process is up to rank."""


def _refresh_in_child(path: str, scope_key: str, cache_rows: int
                      ) -> tuple[int, list[str]] | None:
    """Runs in a ranking process: read the scope's copy afresh. Its generation, and the
    paths whose copies went to make room; None when the file holds rows the token index
    lacks (the store's own open repairs that; it ranks this one itself)."""
    conn = _connection(path, scope_key)
    _views.pop(path, None)
    with sql.snapshot(conn):  # the generation and the rows it counts, together
        generation = conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
        rows: Sequence[Sequence[Any]] = conn.execute(schema.ACTIVE_ROWS_SQL).fetchall()
    if any(row[16] is None for row in rows):
        return None
    _views[path] = ScopeView(rows, generation)
    dropped = []
    budget = min(cache_rows, _CHILD_ROWS)
    while len(_views) > 1 and sum(map(len, _views.values())) > budget:
        dropped.append(_views.popitem(last=False)[0])
    return generation, dropped


def _best_in_child(path: str, terms: QueryTerms, limit: int, weighted: bool,
                   generation: int) -> list[tuple[float, int]] | None:
    """Runs in a ranking process: ``rank_candidates`` from its copy of the scope, which must
    be at ``generation`` (None otherwise: the store has it read again)."""
    view = _views.get(path)
    if view is None or view.generation != generation:
        return None
    _views.move_to_end(path)
    ranking = Ranking(PLAIN, weighted)  # what the first half reads of it: the weighing
    weights = engine.term_weights(terms, view.stats(terms), ranking)
    # Every gated record weighed, only those the candidate cap can need handed on.
    covered = view.covered(terms, weights, limit, ranking.context_weight)
    return engine.rank_candidates(covered, sum(weights), limit, ranking, view.continues)


def _connection(path: str, scope_key: str) -> Any:
    conn = _connections.get(path)
    if conn is not None:
        _connections.move_to_end(path)
        return conn
    conn = files.connect(path)  # read-write (WAL readers share its index), never creating
    try:
        conn.set_busy_timeout(1000)
        if schema.stored_scope(conn) != scope_key:
            raise ValueError(f"{path} does not hold scope {scope_key!r}")
    except BaseException:
        conn.close()
        raise
    _connections[path] = conn
    while len(_connections) > _CHILD_FILES:
        old_path, old = _connections.popitem(last=False)
        _views.pop(old_path, None)
        old.close()
    return conn
