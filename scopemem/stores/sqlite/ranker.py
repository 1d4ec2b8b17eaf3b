"""Heavy rankings in a process of their own, so they never hold the event loop.

Ranking is Python work: summing term weights over every record a query's prefilter lets
in. A light brief reads a few hundred postings and is ranked on the event loop, but a query
of the commonest words on a 10,000-record scope reads hundreds of thousands. On a thread
that work still holds the GIL the event loop needs, so one client's heavy query slowed
every other client's light one by as much as it cost (a light query's p99 rose about nine
times beside eight heavy clients, against eight light ones). In a process of its own it
holds only that process's GIL: the two cores are shared, the event loop is not.

The ranking process answers one question, the first half of every ranking
(``core.ranking.rank_candidates``): which records reach the final score, with their matches,
for a query on a scope file at its current generation. It keeps a ``ScopeView`` of each
scope it was asked about (rebuilt when the file's generation moves on, a bounded number of
rows in all), read from the committed file as any reader of the directory does. The store
then scores those few candidates by recency on the event loop from its own view, with the
use counts it has not saved yet, exactly as a ranking on a thread would have. When the
process's view is of another generation than the store's (a write came in between), or the
process cannot answer (it crashed, was killed, cannot open the file), the store ranks on
its read pool instead, so an answer never depends on the process; a process pool that
broke is replaced on the next heavy query.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from scopemem.core import engine
from scopemem.core.ranking import QueryTerms, Ranking
from scopemem.core.words import PLAIN
from scopemem.stores.sqlite import files, schema, sql
from scopemem.stores.sqlite.view import ScopeView

log = logging.getLogger("scopemem.stores.sqlite")

#: The default number of ranking processes: one where there is a second core to run it on.
DEFAULT_RANK_PROCESSES = 1 if (os.cpu_count() or 1) >= 2 else 0
RANK_PROCESSES_MAX = 16
# What a ranking process holds: scope files open, and rows in views across them.
_CHILD_FILES = 16
_CHILD_ROWS = 50_000

Best = tuple[int, list[tuple[float, int]]]  # (generation, rank_candidates' answer)


class Ranker:
    """A pool of ranking processes, started on the first heavy query."""

    def __init__(self, processes: int, cache_rows: int) -> None:
        self.processes = processes
        self.cache_rows = cache_rows
        self._executor: ProcessPoolExecutor | None = None
        self._started: Future[None] | None = None  # the pool's first task: it is up
        self.answered = 0  # heavy queries the processes answered (for tests and figures)

    async def best(self, path: str, scope_key: str, terms: QueryTerms, limit: int,
                   ranking: Ranking) -> Best | None:
        """``rank_candidates`` for the query on the scope file at ``path``, computed in a
        ranking process, with the generation it read; None when no process could answer."""
        executor = self._pool()
        if executor is None or not self._up():
            return None  # starting (it takes a moment): the read pool answers meanwhile
        loop = asyncio.get_running_loop()
        try:
            best = await loop.run_in_executor(
                executor, _best_in_child, path, scope_key, terms, limit, ranking.weighted,
                self.cache_rows)
        except BrokenProcessPool:
            log.warning("sqlite store: a ranking process died; starting a new one")
            self._discard(executor)
            return None
        except Exception as exc:  # the read pool answers instead, and reports real trouble
            log.debug("sqlite store: the ranking process could not rank %s: %s", path,
                      sql.describe(exc))
            return None
        if best is not None:
            self.answered += 1
        return best

    def pids(self) -> list[int]:
        """The ranking processes running now (for tests and operators)."""
        executor = self._executor
        processes = getattr(executor, "_processes", None) or {}
        return [pid for pid, process in processes.items() if process.is_alive()]

    def close(self) -> None:
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _pool(self) -> ProcessPoolExecutor | None:
        if self.processes == 0:
            return None
        if self._executor is None:
            # forkserver: a fresh interpreter forks the workers, never this process with
            # its threads and open files.
            self._executor = ProcessPoolExecutor(
                self.processes, mp_context=multiprocessing.get_context("forkserver"))
            self._started = self._executor.submit(_ready)
        return self._executor

    def _up(self) -> bool:
        started = self._started
        return started is not None and started.done() and started.exception() is None

    def _discard(self, executor: ProcessPoolExecutor) -> None:
        if self._executor is executor:
            self._executor = None
        executor.shutdown(wait=False, cancel_futures=True)


# --- in the ranking process ----------------------------------------------------------------

_connections: OrderedDict[str, Any] = OrderedDict()
_views: OrderedDict[str, ScopeView] = OrderedDict()


def _ready() -> None:
    """The pool's first task: once it has run, a process is up to rank."""


def _best_in_child(path: str, scope_key: str, terms: QueryTerms, limit: int, weighted: bool,
                   cache_rows: int) -> Best | None:
    """Runs in a ranking process: see ``Ranker.best``. None when the file holds rows the
    token index lacks (the store's own open repairs that; it ranks this one itself)."""
    conn = _connection(path, scope_key)
    generation = conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
    view = _views.get(path)
    if view is None or view.generation != generation:
        _views.pop(path, None)
        with sql.snapshot(conn):  # the generation and the rows it counts, together
            generation = conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
            rows: Sequence[Sequence[Any]] = conn.execute(schema.ACTIVE_ROWS_SQL).fetchall()
        if any(row[16] is None for row in rows):
            return None
        view = ScopeView(rows, generation)
        _views[path] = view
        budget = min(cache_rows, _CHILD_ROWS)
        while len(_views) > 1 and sum(map(len, _views.values())) > budget:
            _views.popitem(last=False)
    _views.move_to_end(path)
    ranking = Ranking(PLAIN, weighted)  # what the first half reads of it: the weighing
    weights = engine.term_weights(terms, view.stats(terms), ranking)
    # Only the records that can reach the candidate cap are weighed (core.topk); not the
    # score rule, which reads the records' times: the store's view has its own, with the
    # use counts it has not saved yet.
    covered = view.covered(terms, weights, limit, ranking.context_weight)
    return generation, engine.rank_candidates(covered, sum(weights), limit, ranking,
                                           view.continues)


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
