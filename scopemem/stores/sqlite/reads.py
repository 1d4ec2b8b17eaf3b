"""Reading a scope through SQL: ranked retrieval, usage marks and listings.

A retrieval through SQL does not take the writer lock (unless a write to its scope is
running or queued: then it waits on the loop with it). Under the connection's lock it reads
every row holding a prefilter term (``sql.HITS_SQL``: what ranking needs of them, not the
whole row) and the scope's statistics from FTS5's ``fts5vocab``, applies the usage bumps
still pending from concurrent retrievals of the scope, ranks, reads the few rows it keeps in
full, and adds its own bumps to the pending set. The rows come with the terms the FTS index
holds for them (the engine's own, space-joined), so ranking splits a string instead of
running the analyzer over every candidate.

A scope of at most ``SMALL_SCOPE_ROWS`` active rows is read whole instead, in one statement
(``schema.SMALL_SCOPE_SQL``), and ranked in memory with its statistics counted from the
rows' tokens: the same candidates and weights (the engine gates on the prefilter terms
itself), at a third less per retrieval than the five statements above. The same rows build
the scope's view with no second read: on its first retrieval while the views' budget has
room for it unused, else on its second as for any scope.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scopemem.core import engine
from scopemem.core.records import Kind, Record
from scopemem.stores.base import Hit
from scopemem.stores.sqlite import schema, sql
from scopemem.stores.sqlite.handles import Handle
from scopemem.stores.sqlite.views import Views

# A scope's view is built on this many retrievals through SQL (see views.py).
VIEW_AFTER_RETRIEVALS = 2
#: A retrieval through SQL of a scope of at most this many active rows reads them all in one
#: statement and ranks them in memory (``schema.SMALL_SCOPE_SQL``): a realistic brief matches
#: nearly every row of a scope anyway, and on a busy worker every statement a pool thread
#: runs is a hand-off of the interpreter lock. Past it the index's prefilter picks the rows.
SMALL_SCOPE_ROWS = 128


class Reads(Views):
    """What a retrieval, a usage mark and a listing do on the read pool."""

    def _retrieve(self, scope_key: str, terms: engine.QueryTerms, limit: int, now: int,
                  bump: bool) -> tuple[list[Hit], Handle | None]:
        """The ranked records with their matches, bumped when ``bump``, and the handle now
        holding their pending bumps (None when nothing was bumped). Builds the scope's view
        on its second retrieval, so the next ones are answered by ``_from_view``."""
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return [], None
            small = None if handle.large else self._read_small(handle)
            if small is not None:
                ranked, full = self._rank_small(handle, small[0], terms, limit, now)
            else:
                ranked, full = self._rank_indexed(handle, terms, limit, now)
            handle.retrievals += 1
            # The handle is held, so it cannot close meanwhile and the bumps are counted.
            bumped = handle if bump and ranked and handle.add_bumps(
                [seq for seq, _m in ranked], now) else None
            if handle.view is None:
                if small is not None and small[0] and (
                        handle.retrievals >= VIEW_AFTER_RETRIEVALS
                        or self._has_room(len(small[0]))):
                    # Read just now: the view is built from these rows, on the first
                    # retrieval already while the budget has room for it unused.
                    self._install_view(handle, *small)
                elif handle.retrievals >= VIEW_AFTER_RETRIEVALS:
                    self._build_view(handle)
        if bump:
            return [Hit(sql.bumped(full[seq], now), match) for seq, match in ranked], bumped
        return [Hit(sql.record(full[seq]), match) for seq, match in ranked], None

    def _read_small(self, handle: Handle
                    ) -> tuple[Sequence[Sequence[Any]], int, bytes | None] | None:
        """Every active row of a scope of at most ``SMALL_SCOPE_ROWS`` rows, with their
        tokens (``_indexed``), the generation they were read at and the WAL-index header
        read before it (what a view of them needs); None, and the handle marked ``large``,
        when the scope has more rows."""
        most = SMALL_SCOPE_ROWS
        if most <= 0:
            return None
        header = handle.wal_header(held=True)  # before the generation: see walheader.py
        rows = handle.conn.execute(schema.SMALL_SCOPE_SQL, (most + 1,)).fetchall()
        if len(rows) > most:
            handle.large = True
            return None
        return self._indexed(rows), rows[0][17] if rows else 0, header

    def _rank_small(self, handle: Handle, rows: Sequence[Sequence[Any]],
                    terms: engine.QueryTerms, limit: int, now: int
                    ) -> tuple[list[tuple[int, float]], dict[int, Sequence[Any]]]:
        """Rank a small scope's rows in memory, with the statistics counted from their
        tokens: the candidates and the order the index's prefilter would give (the engine
        gates on the prefilter terms itself), read by one statement instead of five."""
        pending = handle.pending_copy()
        # Shaped as HITS_SQL reads a row: seq, thread, created, last used, status, tokens.
        entries = sql.hit_entries([(row[0], row[6], row[8], row[9], "active", row[16])
                                   for row in rows], pending)
        ranked = engine.rank_entries(entries, terms,
                                     engine.scope_stats(terms, (entry[1] for entry in entries)),
                                     limit, now, self.ranking)
        keep = {seq for seq, _m in ranked}
        full = [row for row in rows if row[0] in keep]
        if pending:
            full = sql.with_bumps(full, pending)
        return ranked, {row[0]: row for row in full}

    def _rank_indexed(self, handle: Handle, terms: engine.QueryTerms, limit: int, now: int
                      ) -> tuple[list[tuple[int, float]], dict[int, Sequence[Any]]]:
        """Rank the rows the index's prefilter finds, with the statistics FTS5 keeps."""
        conn = handle.conn
        if not handle.vocab:
            conn.execute(sql.VOCAB_TABLE_SQL)
            handle.vocab = True
        with sql.snapshot(conn):  # the statistics and the hits they count, together
            rows = conn.execute(sql.HITS_SQL,
                                (sql.match_expression(terms.prefilter),)).fetchall()
            stats = self._stats(conn, terms) if rows else None
        pending = handle.pending_copy()
        ranked = engine.rank_entries(sql.hit_entries(rows, pending), terms, stats, limit,
                                     now, self.ranking)
        full = {row[0]: row for row in sql.rows_by_seq(conn, [seq for seq, _m in ranked])}
        if pending:
            full = {row[0]: row for row in sql.with_bumps(list(full.values()), pending)}
        return ranked, full

    @staticmethod
    def _stats(conn: Any, terms: engine.QueryTerms) -> engine.ScopeStats:
        count = conn.execute(sql.ACTIVE_COUNT_SQL).fetchall()[0][0]
        frequency: dict[str, int] = {}
        words = list(terms.terms)
        for start in range(0, len(words), sql.CHUNK):
            chunk = words[start:start + sql.CHUNK]
            frequency.update(conn.execute(
                f"SELECT term, doc FROM temp.records_vocab"
                f" WHERE term IN ({', '.join('?' * len(chunk))})", chunk).fetchall())
        return engine.ScopeStats(count, frequency)

    def _mark(self, scope_key: str, seqs: Sequence[int], now: int
              ) -> tuple[int, Handle | None]:
        """Count a use of each of ``seqs`` that is an active row; how many, and the handle
        holding the bumps."""
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return 0, None
            active = [seq for (seq,) in (row for start in range(0, len(seqs), sql.CHUNK)
                                          for row in handle.conn.execute(
                f"SELECT seq FROM records WHERE status = 'active' AND seq IN"
                f" ({', '.join('?' * len(seqs[start:start + sql.CHUNK]))})",
                seqs[start:start + sql.CHUNK]))]
            if not active or not handle.add_bumps(active, now):
                return 0, None
            return len(active), handle

    def _list(self, scope_key: str, limit: int, query: str | None, tokens: list[str] | None,
              kind: Kind | None) -> list[Record]:
        with self._connection(scope_key, create=False) as handle:
            if handle is None:
                return []
            conn = handle.conn
            where = ["status = 'active'"]
            params: list[Any] = []
            if kind is not None:
                where.append("kind = ?")
                params.append(str(kind))
            if tokens is not None:
                where.append("seq IN (SELECT rowid FROM records_fts WHERE records_fts MATCH ?)")
                params.append(sql.match_expression(tokens))
            rows = conn.execute(
                f"SELECT {schema.RECORD_COLUMNS} FROM records WHERE {' AND '.join(where)}"
                " ORDER BY seq DESC LIMIT ?", (*params, limit)).fetchall()
            pending = handle.pending_copy()
            if pending:
                rows = sql.with_bumps(rows, pending)
        # The index and the engine agree by construction; the engine still has the last word.
        return engine.listing([sql.record(row) for row in rows], limit, query=query, kind=kind,
                              analyzer=self.analyzer)
