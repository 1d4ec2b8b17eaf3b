"""A scope's active rows held in memory, so a retrieval can be answered on the event loop.

A retrieval through SQLite costs a trip to a pool thread, an FTS query and a transaction for
the usage bumps; with many concurrent retrievals the trips and the GIL hand-offs between
threads cost more than the work. A ``ScopeView`` holds every active row of one scope as the
retrieval statements read it, and the tokens the FTS index holds for those rows as an
inverted index from term to rows, so the same candidates are found, their matches weighed
and the scope's statistics read, with a few dictionary lookups.

The view is a cache of the database plus the usage bumps not yet committed; ``sqlite.py``
decides when one may be used (see "Reads" there). It never decides an answer: the candidates
and their weights go to ``engine.rank_covered``, the same last step ``engine.rank_entries``
takes for the SQL prefilter's rows.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scopemem.core.ranking import QueryTerms, ScopeStats
from scopemem.stores import postings as inverted

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

    __slots__ = ("continues", "entries", "generation", "postings")

    def __init__(self, rows: Iterable[Sequence[Any]], generation: int) -> None:
        """``rows`` are RECORD_COLUMNS followed by the row's indexed tokens (space-joined),
        active rows only."""
        self.generation = generation
        self.entries: dict[int, Entry] = {}
        # token → the seqs of the rows holding it, each row once. Lists, not sets: a view
        # is built once and never loses a row (a change to the scope's rows drops the whole
        # view), and a list costs a fraction of a set's memory.
        self.postings: dict[str, list[int]] = {}
        postings = self.postings
        for row in rows:
            seq = row[0]
            self.entries[seq] = _entry(row)
            # Interned: a token string is shared by every posting holding it.
            for token in set(map(sys.intern, row[16].split())):
                holders = postings.get(token)
                if holders is None:
                    postings[token] = [seq]
                else:
                    holders.append(seq)
        # The rows whose predecessor is a row of the same thread (see core.ranking).
        entries = self.entries
        self.continues = {seq for seq, (_last, row) in entries.items()
                          if (before := entries.get(seq - 1)) is not None
                          and before[1][6] == row[6]}

    @classmethod
    def carried(cls, old: ScopeView, rows: Iterable[Sequence[Any]], removed: Iterable[int],
                removed_terms: Mapping[int, Iterable[str]], generation: int) -> ScopeView:
        """The view ``old`` becomes after one write of this store: ``rows`` (RECORD_COLUMNS and
        indexed tokens, active) are added or replace the rows of their seqs, the seqs in
        ``removed`` (holding ``removed_terms``) leave. ``old`` is left as it is (a ranking on
        a pool thread may still read it): posting lists that change are copied, the others
        shared."""
        view = cls.__new__(cls)
        view.generation = generation
        entries = dict(old.entries)
        postings = dict(old.postings)
        continues = set(old.continues)
        gone = set(removed)
        fresh: dict[str, list[int]] = {}  # term → its copied list (copied once)

        def own(term: str) -> list[int]:
            holders = fresh.get(term)
            if holders is None:
                holders = fresh[term] = list(postings.get(term, ()))
                postings[term] = holders
            return holders

        touched: set[str] = set()
        for seq in gone:
            if entries.pop(seq, None) is not None:
                touched.update(removed_terms.get(seq, ()))
            continues.discard(seq)
            continues.discard(seq + 1)
        for term in touched:
            kept = [seq for seq in postings.get(term, ()) if seq not in gone]
            if kept:
                postings[term] = fresh[term] = kept
            else:
                postings.pop(term, None)
                fresh.pop(term, None)
        for row in rows:
            seq = row[0]
            known = seq in entries
            entries[seq] = _entry(row)
            if not known:
                for token in set(map(sys.intern, row[16].split())):
                    own(token).append(seq)
        for seq in entries.keys() - old.entries.keys():
            for candidate in (seq, seq + 1):
                before = entries.get(candidate - 1)
                current = entries.get(candidate)
                if before is not None and current is not None \
                        and before[1][6] == current[1][6]:
                    continues.add(candidate)
        view.entries = entries
        view.postings = postings
        view.continues = continues
        return view

    def __len__(self) -> int:
        return len(self.entries)

    def work(self, terms: QueryTerms) -> int:
        """How many postings ranking ``terms`` reads: the cost of ``covered``."""
        return inverted.work(self.postings, terms)

    def stats(self, terms: QueryTerms) -> ScopeStats:
        """The scope's statistics for the query's terms, as the FTS vocabulary gives them:
        every row held is active and indexed, and a posting list holds each row once."""
        return inverted.stats(self.postings, len(self.entries), terms)

    def covered(self, terms: QueryTerms, weights: Sequence[float]) -> dict[int, float]:
        """What ``engine.rank_covered`` takes, for every row holding a prefilter term (the
        rows the FTS prefilter matches), as ``postings.covered`` computes it."""
        return inverted.covered(self.postings, terms, weights)

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
