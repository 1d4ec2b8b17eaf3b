"""One scope's index in the in-process store (``stores.memory``): its active records as a
retrieval reads them. A record joins it as it is written active and leaves it as it leaves
active status, before any purge drops its row; a usage bump replaces its entry (``touch``).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from scopemem.core.records import Record
from scopemem.core.text import normalize_text

if TYPE_CHECKING:
    from scopemem.stores.dense import DenseIndex

__all__ = ["ScopeIndex"]

_STAMPS = itertools.count()


class ScopeIndex:
    """The postings (term → seqs), each record's thread, ``(last touched, record)`` per seq,
    the seqs that continue their predecessor's thread, the active ids per normalized text
    (what a write's dedup reads), and where each row, active or not, sits in the scope's
    list. ``stamp`` names this set of active records (no other set of any scope has had it),
    so a copy built from it (the scope's vectors, ``shared.vectors.Shelf``) knows it is
    still current."""

    __slots__ = ("_dense", "continues", "details", "norms", "positions", "postings",
                 "stamp", "threads")

    def __init__(self) -> None:
        # The postings as arrays for this set of active records, built by a retrieval.
        self._dense: DenseIndex | None = None
        self.stamp = next(_STAMPS)
        self.postings: dict[str, set[int]] = {}
        self.threads: dict[int, str] = {}
        self.details: dict[int, tuple[int, Record]] = {}
        self.continues: set[int] = set()
        self.norms: dict[str, list[str]] = {}
        self.positions: dict[str, int] = {}

    def add(self, seq: int, record: Record, terms: frozenset[str]) -> None:
        """Index an active record."""
        self._dense = None
        self.stamp = next(_STAMPS)
        postings = self.postings
        for term in terms:
            holders = postings.get(term)
            if holders is None:
                postings[term] = {seq}
            else:
                holders.add(seq)
        thread = record.source_thread_key
        threads = self.threads
        threads[seq] = thread
        self.details[seq] = (record.last_touched, record)
        if threads.get(seq - 1) == thread:  # seqs are added in order
            self.continues.add(seq)
        self.norms.setdefault(normalize_text(record.text), []).append(record.id)

    def remove(self, seq: int, record: Record, terms: frozenset[str]) -> None:
        """Unindex a record that has left active status (``record`` as it was indexed)."""
        self._dense = None
        self.stamp = next(_STAMPS)
        for term in terms:  # a term left with no record goes
            holders = self.postings[term]
            holders.discard(seq)
            if not holders:
                del self.postings[term]
        del self.threads[seq]
        del self.details[seq]
        self.continues.discard(seq)
        self.continues.discard(seq + 1)
        norm = normalize_text(record.text)
        ids = self.norms[norm]
        ids.remove(record.id)
        if not ids:
            del self.norms[norm]

    def dense(self) -> DenseIndex:
        """The postings as arrays, for retrievals until the active records change."""
        from scopemem.stores.dense import DenseIndex  # numpy: only once a scope is read

        dense = self._dense
        if dense is None:
            dense = self._dense = DenseIndex(self.postings, self.details.keys(),
                                             self.continues)
        return dense

    def touch(self, seq: int, record: Record) -> None:
        """An active record's new version (a use, a dedup, a restatement)."""
        self.details[seq] = (record.last_touched, record)
