"""A scope's active rows held in memory, so a retrieval can be answered on the event loop.

A retrieval through SQLite costs a trip to a pool thread, an FTS query and a transaction for
the usage bumps; with many concurrent retrievals the trips and the GIL hand-offs between
threads cost more than the work. A ``ScopeView`` holds every active row of one scope as the
retrieval statements read it, and the tokens the FTS index holds for those rows as an
inverted index from term to rows, so the same candidates are found, their matches weighed
and the scope's statistics read, with a few dictionary lookups.

The view is a cache of the database plus the usage bumps not yet committed; ``views.py``
decides when one may be used (see its docstring). It never decides an answer: the candidates
and their weights go to ``engine.rank_covered``, the same last step ``engine.rank_entries``
takes for the SQL prefilter's rows.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scopemem.core.ranking import QueryTerms, ScopeStats
from scopemem.stores import postings as inverted

if TYPE_CHECKING:
    from scopemem.stores.dense import DenseIndex

# (last touched, the row of RECORD_COLUMNS with its keywords decoded to a tuple).
Entry = tuple[int, tuple[Any, ...]]


def _entry(row: Sequence[Any]) -> Entry:
    last_used_at = row[9]
    keywords = row[5]
    return (row[8] if last_used_at is None else last_used_at,
            (*row[:5], tuple(json.loads(keywords)) if keywords != "[]" else (), *row[6:16]))


class ScopeView:
    """Every active row of one scope at one ``generation`` of its database (the counter every
    data-changing transaction increments), with the usage bumps applied since."""

    __slots__ = ("_dense", "continues", "entries", "generation", "header", "postings",
                 "readers")

    def __init__(self, rows: Iterable[Sequence[Any]], generation: int) -> None:
        """``rows`` are RECORD_COLUMNS followed by the row's indexed tokens (space-joined),
        active rows only."""
        self.generation = generation
        # The file's WAL-index header read just before ``generation`` was confirmed
        # (walheader.py): while the header is this, nobody has committed since.
        self.header: bytes | None = None
        # Rankings reading the view on a pool thread now (counted on the event loop).
        self.readers = 0
        # The postings as arrays (stores.dense), built by the first ranking that needs them.
        self._dense: DenseIndex | None = None
        self.entries: dict[int, Entry] = {}
        # token → the seqs of the rows holding it. Sets: a write carries the view on by
        # copying the sets it changes and removing its retired rows from them, in C.
        self.postings: dict[str, set[int]] = {}
        postings = self.postings
        for row in rows:
            seq = row[0]
            self.entries[seq] = _entry(row)
            # Interned: a token string is shared by every posting holding it.
            inverted.post(postings, seq, set(map(sys.intern, row[16].split())))
        # The rows whose predecessor is a row of the same thread (see core.ranking).
        entries = self.entries
        self.continues = {seq for seq, (_last, row) in entries.items()
                          if (before := entries.get(seq - 1)) is not None
                          and before[1][6] == row[6]}

    @classmethod
    def carried(cls, old: ScopeView, rows: Iterable[Sequence[Any]], removed: Iterable[int],
                removed_terms: Mapping[int, Iterable[str]], generation: int) -> ScopeView:
        """A copy of ``old`` carried on (``carry_in_place``), ``old`` left as it is: for a
        view a ranking on a pool thread still reads. It copies every posting set, which
        the in-place carry does not need to."""
        view = cls.__new__(cls)
        view.generation = old.generation
        view.header = None
        view.readers = 0
        view._dense = None
        view.entries = dict(old.entries)
        view.postings = {term: set(holders) for term, holders in old.postings.items()}
        view.continues = set(old.continues)
        view.carry_in_place(rows, removed, removed_terms, generation)
        return view

    def carry_in_place(self, rows: Iterable[Sequence[Any]], removed: Iterable[int],
                       removed_terms: Mapping[int, Iterable[str]], generation: int) -> None:
        """Become the view after one write of this store: ``rows`` (RECORD_COLUMNS and
        indexed tokens, active) are added or replace the rows of their seqs, the seqs in
        ``removed`` (holding ``removed_terms``) leave, and the view is at ``generation``.
        For the event loop, when nothing else reads the view."""
        entries, postings, continues = self.entries, self.postings, self.continues
        self._dense = None  # built again from the new rows by the next ranking
        gone = set(removed)
        for seq in gone:
            if entries.pop(seq, None) is not None:
                inverted.unpost(postings, seq, removed_terms.get(seq, ()))
            continues.discard(seq)
            continues.discard(seq + 1)
        added = []
        for row in rows:
            seq = row[0]
            known = seq in entries
            entries[seq] = _entry(row)
            if not known:
                added.append(seq)
                inverted.post(postings, seq, set(map(sys.intern, row[16].split())))
        for seq in added:
            for candidate in (seq, seq + 1):
                before = entries.get(candidate - 1)
                current = entries.get(candidate)
                if before is not None and current is not None \
                        and before[1][6] == current[1][6]:
                    continues.add(candidate)
        self.generation = generation

    def __len__(self) -> int:
        return len(self.entries)

    def work(self, terms: QueryTerms) -> int:
        """How many postings ranking ``terms`` reads: the cost of ``covered``."""
        return inverted.work(self.postings, terms)

    def stats(self, terms: QueryTerms) -> ScopeStats:
        """The scope's statistics for the query's terms, as the FTS vocabulary gives them:
        every row held is active and indexed, and a posting list holds each row once."""
        return inverted.stats(self.postings, len(self.entries), terms)

    def dense(self) -> DenseIndex:
        """The view's postings as arrays (``stores.dense``), for rankings of this state of
        the view (a carry drops them)."""
        from scopemem.stores.dense import DenseIndex  # numpy: only once a ranking needs it

        dense = self._dense
        if dense is None:
            dense = self._dense = DenseIndex(self.postings, self.entries.keys(), self.continues)
        return dense

    def covered(self, terms: QueryTerms, weights: Sequence[float], limit: int | None = None,
                context: float = 0.0) -> dict[int, float]:
        """What ``engine.rank_covered`` takes: for every row holding a prefilter term (the
        rows the FTS prefilter matches), or with ``limit`` (and the ranking's neighbour
        credit ``context``) for only those ranking ``limit`` hits can need, which rank
        exactly as all of them (``DenseIndex.covered``)."""
        return self.dense().covered(terms, weights, limit, context)

    def bump(self, pending: Mapping[int, Sequence[int]]) -> None:
        """Apply usage bumps (seq → (uses, last use)) to the rows held, as saving them
        will (a last use never moves back)."""
        entries = self.entries
        for seq, (uses, last) in pending.items():
            entry = entries.get(seq)
            if entry is not None:
                row = entry[1]
                if row[9] is not None and row[9] > last:
                    last = row[9]
                entries[seq] = (last, (*row[:9], last, row[10] + uses, *row[11:]))
