"""A scope's active rows held in memory, so a retrieval can be answered on the event loop.

A retrieval through SQLite costs a trip to a pool thread, an FTS query and a transaction for
the usage bumps; with many concurrent retrievals the trips and the GIL hand-offs between
threads cost more than the work. A ``ScopeView`` holds what the FTS prefilter would read for
every active row of one scope (the row and the tokens the index holds for it) and an inverted
index from token to rows, so the same candidates are found with a few dictionary lookups.

The view is a cache of the database plus the usage bumps not yet committed; ``sqlite.py``
decides when one may be used (see "Reads" there). It never decides an answer: candidates go
to ``engine.rank_entries`` exactly as the SQL prefilter's rows do.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# (seq, the record's tokens, last touched, the row of RECORD_COLUMNS): the shape
# ``engine.rank_entries`` takes, so candidates are handed over as they are held.
Entry = tuple[int, tuple[str, ...], int, tuple[Any, ...]]


def _entry(row: Sequence[Any]) -> Entry:
    last_used_at = row[9]
    # Interned: a token string is shared by every row (and posting) holding it.
    tokens = tuple(map(sys.intern, row[15].split()))
    return (row[0], tokens, row[8] if last_used_at is None else last_used_at, tuple(row[:15]))


class ScopeView:
    """Every active row of one scope at one ``generation`` of its database (the counter every
    data-changing transaction increments), with the usage bumps applied since."""

    __slots__ = ("entries", "generation", "postings")

    def __init__(self, rows: Iterable[Sequence[Any]], generation: int) -> None:
        """``rows`` are RECORD_COLUMNS followed by the row's indexed tokens (space-joined),
        active rows only."""
        self.generation = generation
        self.entries: dict[int, Entry] = {}
        # token → the seqs of the rows holding it. Lists, not sets: a view is built once and
        # never loses a row (a change to the scope's rows drops the whole view), and a list
        # costs a fraction of a set's memory.
        self.postings: dict[str, list[int]] = {}
        postings = self.postings
        for row in rows:
            entry = _entry(row)
            seq = entry[0]
            self.entries[seq] = entry
            for token in set(entry[1]):
                holders = postings.get(token)
                if holders is None:
                    postings[token] = [seq]
                else:
                    holders.append(seq)

    def __len__(self) -> int:
        return len(self.entries)

    def candidates(self, tokens: Sequence[str], cap: int) -> list[Entry] | None:
        """The rows holding any of ``tokens``, as ``engine.rank_entries`` takes them: the
        same set the FTS prefilter returns when it finds at most ``cap`` rows. None when more
        than ``cap`` rows match: then bm25 has to choose, and only SQLite can."""
        postings = self.postings
        seqs: set[int] = set()
        for token in tokens:
            holders = postings.get(token)
            if holders is not None:
                seqs.update(holders)
        if len(seqs) > cap:
            return None
        entries = self.entries
        return [entries[seq] for seq in seqs]

    def bump(self, pending: Mapping[int, Sequence[int]]) -> None:
        """Apply usage bumps (seq → (uses, last use)) to the rows held."""
        entries = self.entries
        for seq, (uses, last) in pending.items():
            entry = entries.get(seq)
            if entry is not None:
                row = entry[3]
                entries[seq] = (seq, entry[1], last,
                                (*row[:9], last, row[10] + uses, *row[11:]))
