"""Answering retrievals from memory: each scope's ``ScopeView``, kept current.

A scope's second retrieval through SQL reads all its active rows into a ``ScopeView``
(``view.py``) when the store-wide budget ``cache_rows`` has room (dropping the views of the
least recently used scopes if need be); a small scope's first does, with the rows it read
anyway, while the budget has room unused (``reads.SMALL_SCOPE_ROWS``). From then on a
retrieval is answered on the event loop, without a trip to a thread: the view's term index
finds exactly the rows the FTS prefilter would hand the engine, with the scope's
statistics, and the engine ranks them. A query whose ranking would read more than
``LOOP_WORK`` postings has its candidates chosen in a ranking process (``ranker.py``), or
on the read pool when none can answer, so a heavy query never holds the loop.

Staleness is decided by the ``generation`` counter that every transaction changing rows
increments (this store's, another store's, another process's; usage bumps do not count):
the view remembers the generation it was read at, and the WAL-index header read just before
it was confirmed (``walheader.py``): while the header is unchanged nobody has committed, and
the view answers with no call into SQLite. Else the event loop reads the current generation
on the scope's own connection when no pool thread holds it (once per scope per loop
iteration, see ``_current_epoch``). While a write of this store holds the file's write
lock and has found the view's generation, it vouches for the view (``Handle.live``): no
one else can commit, so retrievals answer from it without a check. A change made through
this store drops the view as it commits; a write that committed with nobody else writing
in between then carries it on (``_plan_carry`` on the write pool, ``_apply_carry`` on the
loop) rather than leave it to be rebuilt. The view holds the usage bumps too: every
retrieval applies its bumps to the view as it adds them to the pending set. Use counts
added by *other* processes' retrievals reach the view only with the next change.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from scopemem.core import engine
from scopemem.core.records import trusted_record
from scopemem.stores.base import Hit
from scopemem.stores.sqlite import schema, sql
from scopemem.stores.sqlite.base import StoreBase
from scopemem.stores.sqlite.handles import Carry, Handle, Heavy, Unverified
from scopemem.stores.sqlite.ranker import Ranker
from scopemem.stores.sqlite.view import ScopeView

# Active rows held in memory across all scopes for answering retrievals on the event loop
# (about 1.5 KB each). A scope gets its view on its second retrieval through SQL
# (``reads.VIEW_AFTER_RETRIEVALS``).
DEFAULT_CACHE_ROWS = 50_000
#: How much ranking work (postings read: the query terms' document frequencies summed) a
#: retrieval may do on the event loop; past it the ranking runs in a ranking process (or on
#: the read pool). A view weighs about 5 ns a posting (``stores.dense``), so this is about
#: 0.3 ms of array work and a millisecond with the rest of the ranking: a realistic brief on
#: a 10,000-row scope reads 20,000-50,000 postings and stays; 24 common words or a 300-word
#: pasted log read 60,000-90,000 and go to the other core, so a client sending them cannot
#: take the loop from everyone else (``load_bench.py`` figure 2).
LOOP_WORK = 60_000


class Views(StoreBase):
    """The in-memory views of the scopes: answering from them, building and carrying them."""

    _ranker: Ranker  # the ranking processes of heavy queries
    _epoch: object | None  # see _current_epoch
    _epoch_loop: asyncio.AbstractEventLoop | None

    def _from_view(self, scope_key: str, terms: engine.QueryTerms, limit: int, now: int,
                   bump: bool) -> tuple[list[Hit], Handle | None] | Heavy | Unverified | None:
        """Answer a retrieval from the scope's view, on the event loop, with its bumps added
        when ``bump`` (and the handle holding them, when there are any); None when the view
        cannot answer (there is none, or the rows changed since it was read); ``Heavy`` when
        the ranking would hold the loop longer than ``LOOP_WORK`` allows; ``Unverified``
        when a pool thread holds the scope's connection (not for a write) so the view could
        not be checked: ``_check_view`` checks it in line behind that thread."""
        with self._cache_lock:
            handle = self._handles.get(scope_key)
            if handle is None:
                return None
            self._handles.move_to_end(scope_key)
            if handle in self._viewed:
                self._viewed.move_to_end(handle)
        view = handle.view
        if view is None:
            return None
        epoch = self._current_epoch()
        probed = handle.probed
        header = handle.wal_header()  # read before any probe: see walheader.py
        probed_now = False
        if header is not None and header == view.header:
            generation: int | None = view.generation  # nobody has committed since
        elif probed is not None and probed[0] is epoch:
            generation = probed[1]
        else:
            generation = self._probe(handle)
            probed_now = generation is not None
            if generation is None and handle.live is view:
                # Our own write holds the file and has not committed: the view is current.
                generation = view.generation
            elif generation is None:
                writer = self._writers.get(scope_key)
                if handle.lock.locked() and not (writer is not None and writer[0].locked()):
                    return Unverified(handle)  # held for a moment, not by a write
                return None
            else:
                handle.probed = (epoch, generation)
        if generation != view.generation:
            self._release_view(handle, view)
            return None
        if probed_now and header is not None:
            view.header = header  # the probe after it found the view's generation
        if view.work(terms) > LOOP_WORK:
            return Heavy(handle, view)
        ranked = self._rank_view(view, terms, limit, now)
        return self._view_answer(handle, ranked, bump, now)

    async def _rank_heavy(self, scope_key: str, heavy: Heavy, terms: engine.QueryTerms,
                          limit: int, now: int, bump: bool
                          ) -> tuple[list[Hit], Handle | None] | None:
        """A retrieval too heavy for the event loop, answered from the view all the same:
        its candidates chosen in a ranking process (``ranker.py``) and scored here from the
        view, or, when no process can answer for the view's generation, the whole ranking
        on the read pool. Either way light queries on other scopes are answered meanwhile."""
        view = heavy.view
        best = await self._ranker.best(heavy.handle.path, scope_key, terms, limit,
                                       self.ranking, view.generation)
        if best is not None and best[0] == view.generation:
            entries = view.entries  # no await from here on: the view cannot change
            candidates = best[1]
            if all(seq in entries for _match, seq in candidates):
                ranked = engine.score_candidates(candidates, limit, now, entries)
                return self._view_answer(heavy.handle, ranked, bump, now)
        view.readers += 1  # on the loop only: a carry never changes it meanwhile
        try:
            ranked = await self._run("read", self._rank_view, view, terms, limit, now)
        finally:
            view.readers -= 1
        return self._view_answer(heavy.handle, ranked, bump, now)

    def _rank_view(self, view: ScopeView, terms: engine.QueryTerms, limit: int, now: int
                   ) -> list[tuple[tuple[Any, ...], float]]:
        """The view's ranked rows. Safe on a pool thread: the postings never change, and
        the loop only replaces whole entries (a usage bump), one atomic assignment each."""
        ranking = self.ranking
        weights = engine.term_weights(terms, view.stats(terms), ranking)
        covered = view.covered(terms, weights, limit, ranking.context_weight)
        return engine.rank_covered(covered, sum(weights), limit, now, ranking,
                                   view.continues, view.entries)

    @staticmethod
    def _view_answer(handle: Handle, ranked: list[tuple[tuple[Any, ...], float]], bump: bool,
                     now: int) -> tuple[list[Hit], Handle | None] | None:
        """A view's ranked rows as hits, their bumps added when ``bump``; None when the
        handle closed meanwhile (the caller answers through SQL)."""
        if not ranked:
            return [], None
        if not bump:
            return [Hit(trusted_record(*row[1:16]), match) for row, match in ranked], None
        if not handle.add_bumps([row[0] for row, _match in ranked], now):
            return None  # closed meanwhile: answer through SQL on a new handle
        # View rows hold their keywords decoded already.
        return [Hit(trusted_record(row[1], row[2], row[3], row[4], row[5], row[6],
                                   row[7], row[8], now, row[10] + 1, row[11], row[12],
                                   row[13], row[14], row[15]), match)
                for row, match in ranked], handle

    def _current_epoch(self) -> object:
        """A token that stays the same until the event loop's next iteration.

        One check of a scope's generation serves every retrieval of that scope in the same
        loop iteration. That loses nothing: a change committed elsewhere can only become
        known here through an event handled in a later iteration (a request arriving, a
        future completing), and the first retrieval after that event checks again. A
        retrieval in the same iteration as the check is concurrent with such a change, and
        may be answered before it."""
        loop = asyncio.get_running_loop()
        if self._epoch is None or self._epoch_loop is not loop:
            self._epoch, self._epoch_loop = object(), loop
            loop.call_soon(self._end_epoch)
        return self._epoch

    def _end_epoch(self) -> None:
        self._epoch = None

    async def _check_view(self, unverified: Unverified) -> bool:
        """Check a view the loop could not (``Unverified``) on the read pool, waiting for
        the connection there (a save of use counts holds it a millisecond or two): True when
        the next ``_from_view`` in this loop iteration can answer from it."""
        handle = unverified.handle
        generation = await self._run("read", self._generation_of, handle)
        if generation is None:
            return False
        handle.probed = (self._current_epoch(), generation)
        return True

    @staticmethod
    def _generation_of(handle: Handle) -> int | None:
        """The scope's generation, read on its connection once it is free (on the pool)."""
        with handle.lock:
            if handle.closed or handle.conn is None:
                return None
            generation: int = handle.conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
            return generation

    def _probe(self, handle: Handle) -> int | None:
        """The scope's generation as committed now, read on the scope's own connection right
        here on the event loop, when that needs no waiting: nobody holds the connection (a
        pool thread writing or reading through SQL), and the read does not wait for SQLite
        either (no busy timeout for it). None otherwise: the caller answers through SQL,
        which waits its turn and reports any real failure. One cached row: a few
        microseconds."""
        if not handle.lock.acquire(blocking=False):
            return None
        try:
            conn = handle.conn
            if handle.closed or conn is None:
                return None
            conn.set_busy_timeout(0)
            try:
                generation: int = conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
                return generation
            finally:
                conn.set_busy_timeout(self.busy_timeout_ms)
        except Exception:
            return None
        finally:
            handle.lock.release()

    def _build_view(self, handle: Handle) -> None:
        """Read the scope's active rows into a view, when the cache has room. The caller
        holds the handle, outside any transaction."""
        if self.cache_rows == 0 or handle.view_refused or handle.closed:
            return
        conn = handle.conn
        header = handle.wal_header(held=True)  # before the generation: see walheader.py
        with sql.snapshot(conn):  # the generation and the rows it counts, together
            generation = conn.execute(schema.GENERATION_SQL).fetchall()[0][0]
            count = conn.execute(
                "SELECT count(*) FROM records WHERE status = 'active'").fetchall()[0][0]
            if count > self.cache_rows:
                handle.view_refused = True
                return
            rows = conn.execute(schema.ACTIVE_ROWS_SQL).fetchall()
        self._install_view(handle, self._indexed(rows), generation, header)

    def _indexed(self, rows: Sequence[Sequence[Any]]) -> Sequence[Sequence[Any]]:
        """``rows`` (of ``ACTIVE_ROWS_SQL``) with the tokens of any active row the index
        misses (which the reconciliation on open repairs) derived from its text."""
        if all(row[16] is not None for row in rows):
            return rows
        return [row if row[16] is not None
                else (*row[:16], sql.fts_tokens(row[4], json.loads(row[5]), self.analyzer))
                for row in rows]

    def _install_view(self, handle: Handle, rows: Sequence[Sequence[Any]], generation: int,
                      header: bytes | None) -> None:
        """Make ``rows`` (every active row, with their tokens, read at ``generation``; the
        WAL-index ``header`` read before that generation) the scope's view, when the cache
        has room. The caller holds the handle."""
        if self.cache_rows == 0 or handle.view_refused or handle.closed:
            return
        view = ScopeView(rows, generation)
        if not self._reserve_rows(handle, len(view)):
            handle.view_refused = True
            return
        view.header = header
        with handle.bump_lock:
            view.bump(handle.pending)
            handle.view = view
            handle.probed = None  # a check older than the view must not judge it

    def _plan_carry(self, handle: Handle, old: ScopeView, changed: set[int],
                    retired: Sequence[int], generation: int,
                    removed: Mapping[int, list[str]] | None = None,
                    inserted: Mapping[int, tuple[Any, ...]] | None = None) -> Carry | None:
        """What the view ``old`` needs to become the view after this store's own committed
        write (at ``generation``: nobody else wrote in between), read here on the write
        pool: the rows the write inserted or updated (and those whose pending use counts it
        committed), and the terms of the rows it retired. ``_apply_carry`` applies it on the
        event loop, instead of leaving the scope to be read through SQL and its view rebuilt
        from every row. ``removed`` holds the indexed terms of retired rows, read before they
        left the index; the others' are derived from their text again. ``inserted`` holds
        the active rows the write inserted, as it wrote them: only the other changed rows are
        read back. The caller holds the handle, outside any transaction."""
        if self.cache_rows == 0 or handle.closed:
            return None
        conn = handle.conn
        gone = set(retired)
        removed_terms: dict[int, list[str]] = {}
        for seq in gone:
            entry = old.entries.get(seq)
            if entry is None:
                continue
            known = removed.get(seq) if removed is not None else None
            if known is not None:
                removed_terms[seq] = known
            else:
                row = entry[1]
                removed_terms[seq] = sql.fts_tokens(row[4], row[5], self.analyzer).split()
        rows: list[Sequence[Any]] = [row for seq, row in (inserted or {}).items()
                                     if seq not in gone]
        seqs = sorted(changed - gone - (inserted or {}).keys())
        header = handle.wal_header(held=True)  # before the generation: see walheader.py
        with sql.snapshot(conn):
            if conn.execute(schema.GENERATION_SQL).fetchall()[0][0] != generation:
                return None  # another writer came in after the commit: rebuild as usual
            for start in range(0, len(seqs), sql.CHUNK):
                chunk = seqs[start:start + sql.CHUNK]
                rows.extend(conn.execute(
                    f"{schema.ACTIVE_ROWS_SQL} AND records.seq IN"
                    f" ({', '.join('?' * len(chunk))})", chunk))
        rows = [row if row[16] is not None
                else (*row[:16], sql.fts_tokens(row[4], json.loads(row[5]), self.analyzer))
                for row in rows]
        return Carry(old, rows, gone, removed_terms, generation, dict(handle.seen), header)

    def _apply_carry(self, scope_key: str) -> None:
        """Install the carried view a write planned, on the event loop: in place when no
        ranking on a pool thread reads the old view (a few set operations), else as a copy.
        Nothing happens when a view was built meanwhile, or the handle closed."""
        with self._cache_lock:
            handle = self._handles.get(scope_key)
        if handle is None:
            return
        carry, handle.carry = handle.carry, None
        if carry is None or handle.view is not None or handle.closed:
            return
        old = carry.view
        if old.readers == 0:
            old.carry_in_place(carry.rows, carry.gone, carry.removed_terms, carry.generation)
            view = old
        else:
            view = ScopeView.carried(old, carry.rows, carry.gone, carry.removed_terms,
                                     carry.generation)
        if not self._reserve_rows(handle, len(view)):
            return
        with handle.bump_lock:
            refused = handle.view is not None or handle.closed  # built meanwhile, closing
            if not refused:
                view.bump(_unseen(handle.pending, carry))
                view.header = carry.header
                handle.view = view
                handle.probed = None
        if refused:
            self._unreserve_rows(handle, len(view))


def _unseen(pending: Mapping[int, Sequence[int]], carry: Carry) -> dict[int, tuple[int, int]]:
    """The pending bumps a carried view does not hold yet: all of them for the rows the
    carry read again, and for the others those added since the write dropped the old view
    (which held the ones in ``carry.seen``)."""
    replaced = {row[0] for row in carry.rows}
    seen = carry.seen
    unseen: dict[int, tuple[int, int]] = {}
    for seq, (uses, last) in pending.items():
        if seq not in replaced:
            uses -= seen.get(seq, 0)
        if uses > 0:
            unseen[seq] = (uses, last)
    return unseen
